/**
 * The model vocabulary stored in facts (docs/log-format.md §2.7): text kinds, parts, stream events, usage,
 * finish reasons, steps, purposes and interruptions. Provider chunk names never reach these shapes.
 */
import { Schema } from "effect"
import { Id, JsonObject, NonNegativeInt, ProviderOptions } from "./Identity.ts"

export const TextKind = Schema.Literals(["text", "thinking"])
export type TextKind = typeof TextKind.Type

export const FinishReason = Schema.Literals(["stop", "tool-calls", "length"])
export type FinishReason = typeof FinishReason.Type

export const ModelPurpose = Schema.Literals(["main", "summary"])
export type ModelPurpose = typeof ModelPurpose.Type

export const ModelInterruption = Schema.Literals(["cancelled", "timed_out", "failed", "retryable_failure"])
export type ModelInterruption = typeof ModelInterruption.Type

/** Token counts; an absent field is unknown, never zero. */
export const ModelUsage = Schema.Struct({
  inputTokens: Schema.optionalKey(NonNegativeInt),
  outputTokens: Schema.optionalKey(NonNegativeInt),
  cacheReadTokens: Schema.optionalKey(NonNegativeInt),
  cacheWriteTokens: Schema.optionalKey(NonNegativeInt),
  reasoningTokens: Schema.optionalKey(NonNegativeInt),
}).annotate({ identifier: "ModelUsage" })
export type ModelUsage = typeof ModelUsage.Type

export const TextPart = Schema.Struct({
  kind: Schema.tag("text"),
  textKind: TextKind,
  text: Schema.String,
  providerOptions: Schema.optionalKey(ProviderOptions),
})
export type TextPart = typeof TextPart.Type

export const ToolCallPart = Schema.Struct({
  kind: Schema.tag("tool_call"),
  id: Id,
  name: Schema.String,
  input: JsonObject,
  providerExecuted: Schema.Boolean,
  providerOptions: Schema.optionalKey(ProviderOptions),
})
export type ToolCallPart = typeof ToolCallPart.Type

export const ModelPart = Schema.Union([TextPart, ToolCallPart]).annotate({ identifier: "ModelPart" })
export type ModelPart = typeof ModelPart.Type

export const PartStarted = Schema.Struct({
  kind: Schema.tag("part_started"),
  id: Schema.String,
  textKind: TextKind,
  providerOptions: Schema.optionalKey(ProviderOptions),
})
export const PartDelta = Schema.Struct({
  kind: Schema.tag("part_delta"),
  id: Schema.String,
  text: Schema.String,
  providerOptions: Schema.optionalKey(ProviderOptions),
})
export const PartFinished = Schema.Struct({
  kind: Schema.tag("part_finished"),
  id: Schema.String,
  providerOptions: Schema.optionalKey(ProviderOptions),
})
export const ToolCallEvent = Schema.Struct({
  kind: Schema.tag("tool_call"),
  id: Id,
  name: Schema.String,
  input: JsonObject,
  providerExecuted: Schema.Boolean,
  providerOptions: Schema.optionalKey(ProviderOptions),
})
/** Response metadata; `timestamp` is epoch milliseconds as the provider reported it. */
export const ResponseMetadata = Schema.Struct({
  kind: Schema.tag("response_metadata"),
  id: Schema.optionalKey(Schema.String),
  model: Schema.optionalKey(Schema.String),
  timestamp: Schema.optionalKey(NonNegativeInt),
})
export const Finished = Schema.Struct({
  kind: Schema.tag("finished"),
  reason: FinishReason,
  usage: ModelUsage,
  providerOptions: Schema.optionalKey(ProviderOptions),
})

/** The runtime-owned stream vocabulary every adapter emits. */
export const ModelEvent = Schema.Union([
  PartStarted,
  PartDelta,
  PartFinished,
  ToolCallEvent,
  ResponseMetadata,
  Finished,
]).annotate({ identifier: "ModelEvent" })
export type ModelEvent = typeof ModelEvent.Type

/** One accepted model output. */
export const ModelStep = Schema.Struct({
  parts: Schema.Array(ModelPart),
  finishReason: FinishReason,
  usage: ModelUsage,
  providerOptions: Schema.optionalKey(ProviderOptions),
  responseId: Schema.optionalKey(Schema.String),
  model: Schema.optionalKey(Schema.String),
  timestamp: Schema.optionalKey(NonNegativeInt),
}).annotate({ identifier: "ModelStep" })
export type ModelStep = typeof ModelStep.Type

/** The local (not provider-executed) tool calls of a step, in call order. */
export const localToolCalls = (step: ModelStep): ReadonlyArray<ToolCallPart> =>
  step.parts.filter((part): part is ToolCallPart => part.kind === "tool_call" && !part.providerExecuted)
