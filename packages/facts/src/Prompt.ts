/**
 * The prompt vocabulary shared by the engine and the model adapters (docs/model.md §4.1): system, user,
 * assistant and tool messages, tool definitions and the `ModelRequest` the engine hands to a
 * `LanguageModel`. Messages are tagged by `role`, assistant parts by `kind`, tool outputs by `type`.
 * The engine digests a prompt (`Digest.modelInput`) after the route projection of `@maka/model`.
 */
import { Schema } from "effect"
import { Id, Json, JsonObject, PositiveInt, ProviderOptions } from "./Identity.ts"

export const SystemMessage = Schema.Struct({
  role: Schema.tag("system"),
  content: Schema.String,
})
export type SystemMessage = typeof SystemMessage.Type

export const UserMessage = Schema.Struct({
  role: Schema.tag("user"),
  content: Schema.String,
})
export type UserMessage = typeof UserMessage.Type

export const AssistantText = Schema.Struct({
  kind: Schema.tag("text"),
  text: Schema.String,
})
export type AssistantText = typeof AssistantText.Type

/**
 * Model reasoning replayed to a provider. `providerOptions` carries what the provider needs to accept
 * it again (an Anthropic signature, for example) and, when present, the `routeIdentity` that produced
 * it under `providerOptions.maka.routeIdentity`, so the route projection can drop it elsewhere.
 */
export const AssistantThinking = Schema.Struct({
  kind: Schema.tag("thinking"),
  text: Schema.String,
  providerOptions: Schema.optionalKey(ProviderOptions),
})
export type AssistantThinking = typeof AssistantThinking.Type

export const AssistantToolCall = Schema.Struct({
  kind: Schema.tag("tool_call"),
  toolCallId: Id,
  toolName: Schema.String,
  input: JsonObject,
  providerExecuted: Schema.Boolean,
})
export type AssistantToolCall = typeof AssistantToolCall.Type

export const AssistantPart = Schema.Union([AssistantText, AssistantThinking, AssistantToolCall]).annotate({
  identifier: "AssistantPart",
})
export type AssistantPart = typeof AssistantPart.Type

export const AssistantMessage = Schema.Struct({
  role: Schema.tag("assistant"),
  parts: Schema.Array(AssistantPart),
})
export type AssistantMessage = typeof AssistantMessage.Type

/** What the model reads for one tool result: text, JSON, or the text of a failure. */
export const ToolResultOutput = Schema.Union([
  Schema.Struct({ type: Schema.tag("text"), value: Schema.String }),
  Schema.Struct({ type: Schema.tag("json"), value: Json }),
  Schema.Struct({ type: Schema.tag("error-text"), value: Schema.String }),
]).annotate({ identifier: "ToolResultOutput" })
export type ToolResultOutput = typeof ToolResultOutput.Type

export const ToolResult = Schema.Struct({
  toolCallId: Id,
  toolName: Schema.String,
  output: ToolResultOutput,
})
export type ToolResult = typeof ToolResult.Type

export const ToolMessage = Schema.Struct({
  role: Schema.tag("tool"),
  results: Schema.Array(ToolResult),
})
export type ToolMessage = typeof ToolMessage.Type

export const PromptMessage = Schema.Union([SystemMessage, UserMessage, AssistantMessage, ToolMessage]).annotate({
  identifier: "PromptMessage",
})
export type PromptMessage = typeof PromptMessage.Type

/** A whole prompt, in order. */
export const Prompt = Schema.Array(PromptMessage).annotate({ identifier: "Prompt" })
export type Prompt = typeof Prompt.Type

/** A tool as the model sees it; `inputSchema` is a JSON Schema object. */
export const ToolDefinition = Schema.Struct({
  name: Schema.String,
  description: Schema.String,
  inputSchema: JsonObject,
}).annotate({ identifier: "ToolDefinition" })
export type ToolDefinition = typeof ToolDefinition.Type

/**
 * One model request. The provider is not part of it: a `LanguageModel` is bound to one provider
 * configuration, whose `routeIdentity` the engine records beside the request's `inputDigest`.
 * `providerOptions` are merged into the provider's request body and cannot replace the fields the
 * adapter owns.
 */
export const ModelRequest = Schema.Struct({
  prompt: Prompt,
  tools: Schema.Array(ToolDefinition),
  providerOptions: ProviderOptions,
  maxOutputTokens: PositiveInt,
}).annotate({ identifier: "ModelRequest" })
export type ModelRequest = typeof ModelRequest.Type
