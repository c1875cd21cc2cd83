/**
 * The Anthropic Messages request body (docs/model.md §4.1): system prompt in `system`, thinking blocks
 * returned with their signatures unchanged (redacted thinking as `redacted_thinking`), tool results as
 * `tool_result` blocks in user turns, adjacent user-role turns merged. Written as canonical JSON, so
 * the same request always gives the same bytes; the adapter's own fields win over `providerOptions`.
 */
import type { Identity, Prompt } from "@maka/facts"
import { isObject } from "./provider-options.ts"
import { canonicalJson } from "./json-write.ts"

type Json = Identity.Json

const anthropicOptions = (options: Identity.JsonObject | undefined): Identity.JsonObject => {
  const value = options?.["anthropic"]
  return isObject(value) ? value : {}
}

/** A tool result's content as the block carries it: text, or a JSON value's canonical text. */
const resultText = (result: Prompt.ToolResult): string =>
  result.output.type === "json" ? canonicalJson(result.output.value) : result.output.value

/**
 * Blocks of an assistant message. Text of only whitespace is left out with the empty (the API
 * refuses a text block without a visible character). `withTools` false (a request offering no tools,
 * as a summary's): a tool call is a text block saying what was called, since the API refuses
 * `tool_use` and `tool_result` blocks in a request that defines no tools.
 */
const assistantBlocks = (message: Prompt.AssistantMessage, withTools: boolean): Array<Json> =>
  message.parts.flatMap((part): Array<Json> => {
    switch (part.kind) {
      case "text":
        return part.text.trim() === "" ? [] : [{ type: "text", text: part.text }]
      case "thinking": {
        const options = anthropicOptions(part.providerOptions)
        const redacted = options["redactedData"]
        if (typeof redacted === "string") return [{ type: "redacted_thinking", data: redacted }]
        const signature = options["signature"]
        return [{ type: "thinking", thinking: part.text, ...(typeof signature === "string" ? { signature } : {}) }]
      }
      case "tool_call":
        return withTools
          ? [{ type: "tool_use", id: part.toolCallId, name: part.toolName, input: part.input }]
          : [{ type: "text", text: `[tool call ${part.toolCallId}: ${part.toolName} ${canonicalJson(part.input)}]` }]
    }
  })

/**
 * What a user message of only whitespace is sent as. The API refuses such a text block, and leaving
 * the message out could leave a request that begins with the assistant's turn, or holds no message:
 * the engine refuses one on this route at admission, and one recorded before (or on another route)
 * keeps its place in the conversation this way.
 */
export const BLANK_USER_MESSAGE = "(an empty message)"

/** Blocks of a user-role turn. */
const userBlocks = (message: Prompt.UserMessage | Prompt.ToolMessage, withTools: boolean): Array<Json> =>
  message.role === "user"
    ? [{ type: "text", text: message.content.trim() === "" ? BLANK_USER_MESSAGE : message.content }]
    : message.results.map((result) =>
        withTools
          ? {
              type: "tool_result",
              tool_use_id: result.toolCallId,
              content: resultText(result),
              ...(result.output.type === "error-text" ? { is_error: true } : {}),
            }
          : {
              type: "text",
              text: `[tool result ${result.toolCallId}: ${result.toolName}${result.output.type === "error-text" ? " failed" : ""}]\n${resultText(result)}`,
            },
      )

const turns = (prompt: Prompt.Prompt, withTools: boolean): { readonly system: ReadonlyArray<string>; readonly messages: Array<Json> } => {
  const system: Array<string> = []
  const messages: Array<{ role: "user" | "assistant"; content: Array<Json> }> = []
  for (const message of prompt) {
    if (message.role === "system") {
      system.push(message.content)
      continue
    }
    const role = message.role === "assistant" ? "assistant" : "user"
    const content = message.role === "assistant" ? assistantBlocks(message, withTools) : userBlocks(message, withTools)
    if (content.length === 0) continue
    const previous = messages[messages.length - 1]
    if (previous !== undefined && previous.role === role) previous.content.push(...content)
    else messages.push({ role, content })
  }
  return { system, messages }
}

/** The request body for `model`, as canonical JSON text. */
export const anthropicBody = (model: string, request: Prompt.ModelRequest, prompt: Prompt.Prompt): string => {
  const { system, messages } = turns(prompt, request.tools.length > 0)
  return canonicalJson({
    ...request.providerOptions,
    model,
    messages,
    max_tokens: request.maxOutputTokens,
    stream: true,
    ...(system.length === 0 ? {} : { system: system.join("\n\n") }),
    ...(request.tools.length === 0
      ? {}
      : { tools: request.tools.map((tool) => ({ name: tool.name, description: tool.description, input_schema: tool.inputSchema })) }),
  })
}
