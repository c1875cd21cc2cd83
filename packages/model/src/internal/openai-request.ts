/**
 * The OpenAI-compatible chat-completions request body (docs/model.md §4.1). The body is built as plain
 * JSON and written as canonical JSON (keys sorted, no whitespace), so the same request always gives
 * the same bytes. `providerOptions` are merged first; the adapter's own fields win.
 */
import { Canonical, type Identity, type Prompt } from "@maka/facts"
import type { OutputLimitField } from "../ProviderConfig.ts"
import type { BodyParts } from "./http-client.ts"
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

/**
 * The messages array's bytes as one run of sends extends it: a buffer holding `[` and the fragments of
 * `messages` (commas between the non-empty ones), without the closing `]`. A prompt that extends the
 * chain's messages (the same objects, in order, then new ones) appends only its new fragments past
 * the bytes already written: bytes once written never change, so a view handed to an earlier request
 * stays valid while the buffer grows. A prompt that diverges starts a chain of its own.
 */
interface MessagesChain {
  readonly messages: Array<Prompt.PromptMessage>
  buffer: Buffer
  /** Bytes written: `[` and the fragments so far. */
  length: number
  /** Whether a non-empty fragment was written (the next one needs a comma). */
  written: boolean
}

/** Each chain by its last message: a step's prompt ends with the previous prompt's last message plus a few new ones. */
const chains = new WeakMap<Prompt.PromptMessage, MessagesChain>()

/** How far back from a prompt's end its chain's last message is looked for: a step adds a few messages. */
const CHAIN_LOOKBACK = 16

const OPEN_BRACKET = 0x5b
const COMMA = 0x2c

const newChain = (): MessagesChain => {
  const buffer = Buffer.allocUnsafe(4096)
  buffer[0] = OPEN_BRACKET
  return { messages: [], buffer, length: 1, written: false }
}

/** The chain `prompt` extends, or undefined: the same message objects in order up to the chain's end. */
const chainOf = (prompt: Prompt.Prompt): MessagesChain | undefined => {
  const last = Math.max(0, prompt.length - CHAIN_LOOKBACK)
  for (let end = prompt.length; end > last; end--) {
    const chain = chains.get(prompt[end - 1]!)
    if (chain === undefined || chain.messages.length !== end) continue
    let same = true
    for (let index = 0; index < end && same; index++) same = chain.messages[index] === prompt[index]
    if (same) return chain
  }
  return undefined
}

const append = (chain: MessagesChain, text: string): void => {
  const needed = chain.length + Buffer.byteLength(text) + 1
  if (needed > chain.buffer.length) {
    // A bigger buffer with the bytes so far: the old one stays as it is for any view of it in flight.
    const grown = Buffer.allocUnsafe(Math.max(needed, chain.buffer.length * 2))
    chain.buffer.copy(grown, 0, 0, chain.length)
    chain.buffer = grown
  }
  if (chain.written) chain.buffer[chain.length++] = COMMA
  chain.length += chain.buffer.write(text, chain.length, "utf8")
  chain.written = true
}

/** The bytes of `[` and the prompt's fragments (no closing `]`): a view of its chain, extended as needed. */
const messagesBytes = (prompt: Prompt.Prompt): Uint8Array => {
  const chain = chainOf(prompt) ?? newChain()
  if (chain.messages.length > 0) chains.delete(chain.messages[chain.messages.length - 1]!)
  for (let index = chain.messages.length; index < prompt.length; index++) {
    const message = prompt[index]!
    const fragment = fragmentOf(message)
    if (fragment !== "") append(chain, fragment)
    chain.messages.push(message)
  }
  if (prompt.length > 0) chains.set(prompt[prompt.length - 1]!, chain)
  return chain.buffer.subarray(0, chain.length)
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

/**
 * The request body for `model` as the bytes of `openAiBody`, in parts: the fields before `messages`,
 * the messages' bytes kept between the steps of a run (`messagesBytes`: a step encodes only its new
 * messages, and no body-sized string is built), and the rest. A long session's request is hundreds of
 * KB; writing it whole every step is what a step of a long session would otherwise spend most on.
 */
export const openAiBodyParts = (
  model: string,
  request: Prompt.ModelRequest,
  prompt: Prompt.Prompt,
  limitField: OutputLimitField,
): BodyParts => {
  const layout = bodyLayout(model, request, limitField)
  if (layout === undefined) {
    const whole = Buffer.from(openAiBody(model, request, prompt, limitField))
    return { parts: [whole], byteLength: whole.length }
  }
  const head = Buffer.from(layout.body.slice(0, layout.messagesAt))
  const messages = messagesBytes(prompt)
  const tail = Buffer.from(`]${afterMessages(layout, request)}`)
  return { parts: [head, messages, tail], byteLength: head.length + messages.length + tail.length }
}

/**
 * The body's fields with the slots standing for the messages and the tools, and where the slots are
 * (in that order: keys are sorted); undefined when an option holds the same text as a slot.
 */
const bodyLayout = (model: string, request: Prompt.ModelRequest, limitField: OutputLimitField) => {
  const hasTools = request.tools.length > 0
  const body = canonicalJson(bodyFields(model, request, limitField, MESSAGES_SLOT, TOOLS_SLOT))
  const messagesAt = slotAt(body, MESSAGES_TEXT)
  const toolsAt = hasTools ? slotAt(body, TOOLS_TEXT) : body.length
  return messagesAt === -1 || toolsAt === -1 ? undefined : { body, messagesAt, toolsAt, hasTools }
}

type BodyLayout = NonNullable<ReturnType<typeof bodyLayout>>

/** The body's text after the messages array: the fields up to the tools, the tools, the rest. */
const afterMessages = ({ body, messagesAt, toolsAt, hasTools }: BodyLayout, request: Prompt.ModelRequest): string =>
  hasTools
    ? `${body.slice(messagesAt + MESSAGES_TEXT.length, toolsAt)}${toolsJson(request.tools)}${body.slice(toolsAt + TOOLS_TEXT.length)}`
    : body.slice(messagesAt + MESSAGES_TEXT.length)

/**
 * The body's fields. `providerOptions` go first and cannot replace `model`, `messages`, `stream`, the
 * output limit or `tools`; a `stream_options` of theirs replaces the adapter's `{include_usage: true}`,
 * and `stream_options: null` leaves the field out (a server that refuses it). A request that offers
 * no tools (a summary's) leaves out their `tool_choice` and `parallel_tool_calls`, which OpenAI
 * refuses without `tools`.
 */
const bodyFields = (model: string, request: Prompt.ModelRequest, limitField: OutputLimitField, messages: Json, tools: Json) => {
  // `tools` are the adapter's even when the request offers none (a summary's): never the options'.
  const { stream_options: streamOptions, tools: _tools, ...options } = request.providerOptions ?? {}
  const { tool_choice: _choice, parallel_tool_calls: _parallel, ...withoutToolFields } = options
  return {
    ...(request.tools.length > 0 ? options : withoutToolFields),
    model,
    messages,
    [limitField]: request.maxOutputTokens,
    stream: true,
    ...(streamOptions === null ? {} : { stream_options: streamOptions ?? { include_usage: true } }),
    ...(request.tools.length > 0 ? { tools } : {}),
  }
}

/** The request body for `model`, as canonical JSON text; the output limit goes in `limitField`. */
export const openAiBody = (
  model: string,
  request: Prompt.ModelRequest,
  prompt: Prompt.Prompt,
  limitField: OutputLimitField,
): string => {
  const layout = bodyLayout(model, request, limitField)
  // Should an option hold a slot's text, write the body whole.
  if (layout === undefined) {
    return canonicalJson(bodyFields(model, request, limitField, prompt.flatMap(providerMessages), providerTools(request.tools)))
  }
  // One join writes the body flat: concatenating the pieces would leave a rope that the HTTP client
  // flattens into a second copy of the whole body (a long session's request is hundreds of KB).
  const out = [layout.body.slice(0, layout.messagesAt)]
  pushMessages(prompt, out)
  out.push(afterMessages(layout, request))
  return out.join("")
}
