/**
 * The OpenAI-compatible chat-completions request body (docs/model.md §4.1). The body is built as plain
 * JSON and written as canonical JSON (keys sorted, no whitespace), so the same request always gives
 * the same bytes. `providerOptions` are merged first; the adapter's own fields win.
 */
import type { Identity, Prompt } from "@maka/facts"
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

/** Stands for the messages in the body's other fields; a string no request field can hold twice by chance. */
const MESSAGES_SLOT = "\u0000maka.messages\u0000"

/** The request body for `model`, as canonical JSON text; the output limit goes in `limitField`. */
export const openAiBody = (
  model: string,
  request: Prompt.ModelRequest,
  prompt: Prompt.Prompt,
  limitField: OutputLimitField,
): string => {
  const body = canonicalJson({
    ...request.providerOptions,
    model,
    messages: MESSAGES_SLOT,
    [limitField]: request.maxOutputTokens,
    stream: true,
    stream_options: { include_usage: true },
    ...(request.tools.length === 0
      ? {}
      : {
          tools: request.tools.map((tool) => ({
            type: "function",
            function: { name: tool.name, description: tool.description, parameters: tool.inputSchema },
          })),
        }),
  })
  const slot = JSON.stringify(MESSAGES_SLOT)
  const at = body.indexOf(slot)
  // The slot is where `messages` is; should an option hold the same text, write the body whole.
  if (at === -1 || body.indexOf(slot, at + 1) !== -1) {
    return canonicalJson({ ...JSON.parse(body), messages: prompt.flatMap(providerMessages) })
  }
  // One join writes the body flat: concatenating the pieces would leave a rope that the HTTP client
  // flattens into a second copy of the whole body (a long session's request is hundreds of KB).
  const out = [body.slice(0, at)]
  pushMessages(prompt, out)
  out.push(body.slice(at + slot.length))
  return out.join("")
}
