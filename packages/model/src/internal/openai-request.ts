/**
 * The OpenAI-compatible chat-completions request body (docs/model.md §4.1). The body is built as plain
 * JSON and written as canonical JSON (keys sorted, no whitespace), so the same request always gives
 * the same bytes. `providerOptions` are merged first; the adapter's own fields win.
 */
import { Canonical, type Identity, type Prompt } from "@maka/facts"
import type { OutputLimitField } from "../ProviderConfig.ts"
import { canonicalJson } from "./json-write.ts"

type Json = Identity.Json

const toolContent = (output: Prompt.ToolResultOutput): string =>
  output.type === "json" ? canonicalJson(output.value) : output.value

const providerMessages = (message: Prompt.PromptMessage): Array<Json> => {
    switch (message.role) {
      case "system":
      case "user":
        return [{ role: message.role, content: message.content }]
      case "assistant": {
        const text = message.parts.flatMap((part) => (part.kind === "text" ? [part.text] : [])).join("")
        const thinking = message.parts.flatMap((part) => (part.kind === "thinking" ? [part.text] : [])).join("")
        const calls = message.parts.flatMap((part): Array<Json> =>
          part.kind === "tool_call"
            ? [{ id: part.toolCallId, type: "function", function: { name: part.toolName, arguments: canonicalJson(part.input) } }]
            : [],
        )
        return [
          {
            role: "assistant",
            content: text,
            ...(thinking === "" ? {} : { reasoning_content: thinking }),
            ...(calls.length === 0 ? {} : { tool_calls: calls }),
          },
        ]
      }
      case "tool":
        return message.results.map((result) => ({ role: "tool", tool_call_id: result.toolCallId, content: toolContent(result.output) }))
    }
  }

/**
 * Each prompt message's provider messages as canonical JSON, by message identity: a live run sends
 * the same message objects step after step (docs/architecture.md §12), so a step writes only its new
 * messages. Canonical JSON is compositional: an array's text is its items' texts joined by commas.
 */
const fragments = new WeakMap<Prompt.PromptMessage, string>()

const fragmentOf = (message: Prompt.PromptMessage): string => {
  let fragment = fragments.get(message)
  if (fragment === undefined) {
    fragment = providerMessages(message).map(canonicalJson).join(",")
    fragments.set(message, fragment)
  }
  return fragment
}

/** Pushes the messages array's canonical JSON text onto `out`, piece by piece. */
const pushMessages = (prompt: Prompt.Prompt, out: Array<string>): void => {
  out.push("[")
  let first = true
  for (const message of prompt) {
    const fragment = fragmentOf(message)
    if (fragment === "") continue
    if (!first) out.push(",")
    out.push(fragment)
    first = false
  }
  out.push("]")
}

/** The messages array as canonical JSON text. */
export const messagesJson = (prompt: Prompt.Prompt): string => {
  const out: Array<string> = []
  pushMessages(prompt, out)
  return out.join("")
}

/** Stand for the messages and the tools in the body's other fields; strings no field holds twice by chance. */
const MESSAGES_SLOT = "\u0000maka.messages\u0000"
const TOOLS_SLOT = "\u0000maka.tools\u0000"
const MESSAGES_TEXT = JSON.stringify(MESSAGES_SLOT)
const TOOLS_TEXT = JSON.stringify(TOOLS_SLOT)

/** The `tools` field as the provider reads it. */
const providerTools = (tools: ReadonlyArray<Prompt.ToolDefinition>): Array<Json> =>
  tools.map((tool) => ({
    type: "function",
    function: { name: tool.name, description: tool.description, parameters: tool.inputSchema },
  }))

/**
 * The `tools` field's canonical JSON, kept per sealed tool list (`Canonical.seal`): a run offers the
 * same sealed definitions every step (docs/architecture.md §12), so they are written once.
 */
const toolTexts = new WeakMap<ReadonlyArray<Prompt.ToolDefinition>, string>()

const toolsJson = (tools: ReadonlyArray<Prompt.ToolDefinition>): string => {
  let text = toolTexts.get(tools)
  if (text === undefined) {
    text = canonicalJson(providerTools(tools))
    if (Canonical.isSealed(tools)) toolTexts.set(tools, text)
  }
  return text
}

/** Where `slot` is in `body`, or -1 when it is not there exactly once. */
const slotAt = (body: string, slot: string): number => {
  const at = body.indexOf(slot)
  return at === -1 || body.indexOf(slot, at + 1) !== -1 ? -1 : at
}

/** The request body for `model`, as canonical JSON text; the output limit goes in `limitField`. */
export const openAiBody = (
  model: string,
  request: Prompt.ModelRequest,
  prompt: Prompt.Prompt,
  limitField: OutputLimitField,
): string => {
  const hasTools = request.tools.length > 0
  const fields = (messages: Json, tools: Json) => ({
    ...request.providerOptions,
    model,
    messages,
    [limitField]: request.maxOutputTokens,
    stream: true,
    stream_options: { include_usage: true },
    ...(hasTools ? { tools } : {}),
  })
  const body = canonicalJson(fields(MESSAGES_SLOT, TOOLS_SLOT))
  const messagesAt = slotAt(body, MESSAGES_TEXT)
  const toolsAt = hasTools ? slotAt(body, TOOLS_TEXT) : body.length
  // The slots are where `messages` and `tools` are (in that order: keys are sorted); should an
  // option hold the same text, write the body whole.
  if (messagesAt === -1 || toolsAt === -1) {
    return canonicalJson(fields(prompt.flatMap(providerMessages), providerTools(request.tools)))
  }
  // One join writes the body flat: concatenating the pieces would leave a rope that the HTTP client
  // flattens into a second copy of the whole body (a long session's request is hundreds of KB).
  const out = [body.slice(0, messagesAt)]
  pushMessages(prompt, out)
  if (hasTools) {
    out.push(body.slice(messagesAt + MESSAGES_TEXT.length, toolsAt), toolsJson(request.tools), body.slice(toolsAt + TOOLS_TEXT.length))
  } else {
    out.push(body.slice(messagesAt + MESSAGES_TEXT.length))
  }
  return out.join("")
}
