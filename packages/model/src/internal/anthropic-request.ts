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

/** The ids the API takes for a tool call: `^[a-zA-Z0-9_-]+$`, and unique in a request. */
const TOOL_ID = /^[A-Za-z0-9_-]+$/

const validToolId = (id: string): string => (TOOL_ID.test(id) ? id : id.replace(/[^A-Za-z0-9_-]/g, "_") || "call")

/**
 * The ids one request sends for its tool calls and results. A session's calls may come from another
 * route, whose ids the API refuses: a character outside its pattern (`functions.read_file:0`), or an
 * id repeated by a later step (an OpenAI-compatible server's made-up `call_0`). Such a call is sent
 * with that character as `_`, and a repeated id with `_2`, `_3`… (the least free); a result takes the
 * id its call was last sent with. Given in the order of the prompt, so a request that extends another
 * sends its calls with the same ids; a session whose ids are all valid and distinct sends them as
 * recorded.
 */
interface ToolIds {
  readonly call: (id: string) => string
  readonly result: (id: string) => string
}

const toolIds = (): ToolIds => {
  const used = new Set<string>()
  const sentAs = new Map<string, string>()
  return {
    call: (id) => {
      const base = validToolId(id)
      let sent = base
      for (let n = 2; used.has(sent); n++) sent = `${base}_${n}`
      used.add(sent)
      sentAs.set(id, sent)
      return sent
    },
    result: (id) => sentAs.get(id) ?? validToolId(id),
  }
}

/**
 * Blocks of an assistant message. Text of only whitespace is left out with the empty (the API
 * refuses a text block without a visible character). `withTools` false (a request offering no tools,
 * as a summary's): a tool call is a text block saying what was called, since the API refuses
 * `tool_use` and `tool_result` blocks in a request that defines no tools.
 */
const assistantBlocks = (message: Prompt.AssistantMessage, withTools: boolean, ids: ToolIds): Array<Json> =>
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
          ? [{ type: "tool_use", id: ids.call(part.toolCallId), name: part.toolName, input: part.input }]
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
const userBlocks = (message: Prompt.UserMessage | Prompt.ToolMessage, withTools: boolean, ids: ToolIds): Array<Json> =>
  message.role === "user"
    ? [{ type: "text", text: message.content.trim() === "" ? BLANK_USER_MESSAGE : message.content }]
    : message.results.map((result) =>
        withTools
          ? {
              type: "tool_result",
              tool_use_id: ids.result(result.toolCallId),
              content: resultText(result),
              ...(result.output.type === "error-text" ? { is_error: true } : {}),
            }
          : {
              type: "text",
              text: `[tool result ${result.toolCallId}: ${result.toolName}${result.output.type === "error-text" ? " failed" : ""}]\n${resultText(result)}`,
            },
      )

/** One message of the body. */
type Turn = { readonly role: "user" | "assistant"; readonly content: Array<Json> }

const turns = (prompt: Prompt.Prompt, withTools: boolean): { readonly system: ReadonlyArray<string>; readonly messages: Array<Turn> } => {
  const system: Array<string> = []
  const messages: Array<Turn> = []
  const ids = toolIds()
  for (const message of prompt) {
    if (message.role === "system") {
      system.push(message.content)
      continue
    }
    const role = message.role === "assistant" ? "assistant" : "user"
    const content = message.role === "assistant" ? assistantBlocks(message, withTools, ids) : userBlocks(message, withTools, ids)
    if (content.length === 0) continue
    const previous = messages[messages.length - 1]
    if (previous !== undefined && previous.role === role) previous.content.push(...content)
    else messages.push({ role, content })
  }
  return { system, messages }
}

/**
 * Whether `messages` continue a tool loop whose last assistant message does not begin with thinking:
 * with thinking on, the API refuses such a request ("a final `assistant` message must start with a
 * thinking block"). It is one whose thinking was not recorded on this route (a continuation or a
 * session from another route, a step run with thinking off, thinking given without a signature).
 */
const loopWithoutThinking = (messages: ReadonlyArray<Turn>): boolean => {
  const last = messages[messages.length - 1]
  const assistant = messages[messages.length - 2]
  if (last?.role !== "user" || assistant?.role !== "assistant") return false
  const typeOf = (block: Json | undefined) => (isObject(block) ? block["type"] : undefined)
  if (!last.content.some((block) => typeOf(block) === "tool_result")) return false
  const first = typeOf(assistant.content[0])
  return first !== "thinking" && first !== "redacted_thinking"
}

/** The request body for `model`, as canonical JSON text. */
export const anthropicBody = (model: string, request: Prompt.ModelRequest, prompt: Prompt.Prompt): string => {
  const { system, messages } = turns(prompt, request.tools.length > 0)
  // Such a request is sent without `thinking`: its step answers without thinking, and the loop's
  // next request again, until the turn's answer (docs/model.md §4.1).
  const thinking = request.providerOptions?.["thinking"]
  const withoutThinking = isObject(thinking) && thinking["type"] !== "disabled" && loopWithoutThinking(messages)
  // A request that offers no tools (a summary's) leaves out their `tool_choice`, which the API refuses
  // without `tools`.
  const { thinking: _thinking, tool_choice: _choice, ...others } = request.providerOptions ?? {}
  const options = {
    ...others,
    ...(withoutThinking || thinking === undefined ? {} : { thinking }),
    ...(request.tools.length === 0 || request.providerOptions?.["tool_choice"] === undefined ? {} : { tool_choice: request.providerOptions["tool_choice"] }),
  }
  return canonicalJson({
    ...options,
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
