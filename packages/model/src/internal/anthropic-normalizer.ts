/**
 * Anthropic Messages stream events into `ModelEvent`s (docs/model.md §4.3): `message_start` as metadata
 * and input usage, content blocks as text / thinking parts or buffered tool calls, `signature_delta`
 * and redacted thinking kept in the part's `providerOptions` (stamped with the route identity),
 * `message_delta` for the stop reason and output usage, `message_stop` as `finished`.
 */
import type { Identity, Model } from "@maka/facts"
import {
  INVALID,
  isRecord,
  optionalCount,
  optionalRecord,
  optionalString,
  parseJson,
  type JsonRecord,
} from "./json-read.ts"
import {
  adapterFailure,
  invalidToolInput,
  isJsonObject,
  mapFinishReason,
  notA,
  parseToolInput,
  unsupportedShape,
  unsupportedType,
  type Normalizer,
  type NormalizerFailure,
  type SseMessage,
} from "./normalizer.ts"

type Block =
  | {
      readonly type: "text" | "thinking"
      readonly id: string
      signature: string | undefined
      readonly redactedData: string | undefined
    }
  | { readonly type: "tool_use"; readonly id: string; readonly name: string; readonly json: Array<string>; readonly initial: Identity.JsonObject }

interface Usage {
  input?: number
  cacheRead?: number
  cacheWrite?: number
  output?: number
}

const INVALID_USAGE = adapterFailure("invalid usage")

/** The content block deltas this adapter reads (docs/model.md §4.3). */
const KNOWN_DELTAS: ReadonlySet<string> = new Set(["text_delta", "thinking_delta", "signature_delta", "input_json_delta"])

/**
 * Usage of `message_start`, then of each `message_delta`: counts are cumulative, so a later one never
 * lowers an earlier (a server sending `input_tokens: 0` in its delta keeps the start's count).
 */
const readUsage = (usage: JsonRecord, into: Usage): NormalizerFailure | undefined => {
  const input = optionalCount(usage, "input_tokens")
  const cacheRead = optionalCount(usage, "cache_read_input_tokens")
  const cacheWrite = optionalCount(usage, "cache_creation_input_tokens")
  const output = optionalCount(usage, "output_tokens")
  if (input === INVALID || cacheRead === INVALID || cacheWrite === INVALID || output === INVALID) return INVALID_USAGE
  if (input !== undefined) into.input = Math.max(into.input ?? 0, input)
  if (cacheRead !== undefined) into.cacheRead = Math.max(into.cacheRead ?? 0, cacheRead)
  if (cacheWrite !== undefined) into.cacheWrite = Math.max(into.cacheWrite ?? 0, cacheWrite)
  if (output !== undefined) into.output = Math.max(into.output ?? 0, output)
  return undefined
}

const toModelUsage = (usage: Usage): Model.ModelUsage => {
  const input =
    usage.input === undefined ? undefined : usage.input + (usage.cacheRead ?? 0) + (usage.cacheWrite ?? 0)
  return {
    ...(input === undefined ? {} : { inputTokens: input }),
    ...(usage.output === undefined ? {} : { outputTokens: usage.output }),
    ...(usage.cacheRead === undefined ? {} : { cacheReadTokens: usage.cacheRead }),
    ...(usage.cacheWrite === undefined ? {} : { cacheWriteTokens: usage.cacheWrite }),
  }
}

/** `routeIdentity` is stamped into every non-empty `providerOptions` this normaliser emits. */
export const anthropicNormalizer = (routeIdentity: string): Normalizer => {
  const blocks = new Map<number, Block>()
  const open = new Set<number>()
  let stopReason: string | undefined
  const usage: Usage = {}
  let started = false
  let finished = false
  /** A tool block whose input did not parse: the stream fails at its stop reason, or where it ends (`invalidToolInput`). */
  let invalidInput = false

  const signed = (block: Extract<Block, { type: "text" | "thinking" }>): Identity.JsonObject | undefined => {
    const anthropic: Record<string, string> = {}
    if (block.signature !== undefined) anthropic["signature"] = block.signature
    if (block.redactedData !== undefined) anthropic["redactedData"] = block.redactedData
    return Object.keys(anthropic).length === 0 ? undefined : { anthropic, maka: { routeIdentity } }
  }

  const blockStart = (event: JsonRecord, out: Array<Model.ModelEvent>): NormalizerFailure | undefined => {
    const index = event["index"]
    const content = optionalRecord(event, "content_block")
    if (typeof index !== "number" || !Number.isSafeInteger(index) || index < 0) return notA("content_block_start.index", "a count")
    if (content === INVALID || content === undefined) return notA("content_block_start.content_block", "an object")
    if (blocks.has(index)) return unsupportedShape(`content block ${index} started twice`)
    const type = content["type"]
    const id = `block-${index}`
    if (type === "text" || type === "thinking") {
      const initial = optionalString(content, type === "text" ? "text" : "thinking")
      const signature = optionalString(content, "signature")
      if (initial === INVALID) return notA(`content_block.${type}`, "a string")
      if (signature === INVALID) return notA("content_block.signature", "a string")
      blocks.set(index, { type, id, signature: signature === "" ? undefined : signature, redactedData: undefined })
      open.add(index)
      out.push({ kind: "part_started", id, textKind: type === "text" ? "text" : "thinking" })
      if (initial !== undefined && initial !== "") out.push({ kind: "part_delta", id, text: initial })
      return undefined
    }
    if (type === "redacted_thinking") {
      const data = optionalString(content, "data")
      if (data === INVALID || data === undefined) return notA("content_block.data", "a string")
      blocks.set(index, { type: "thinking", id, signature: undefined, redactedData: data })
      open.add(index)
      out.push({ kind: "part_started", id, textKind: "thinking" })
      return undefined
    }
    if (type === "tool_use") {
      const callId = optionalString(content, "id")
      const name = optionalString(content, "name")
      const input = content["input"]
      if (callId === INVALID || callId === undefined) return notA("content_block.id", "a string")
      if (name === INVALID || name === undefined) return notA("content_block.name", "a string")
      const initial = input === undefined ? {} : isJsonObject(input) ? input : undefined
      if (initial === undefined) return adapterFailure("invalid tool call input")
      blocks.set(index, { type: "tool_use", id: callId, name, json: [], initial })
      open.add(index)
      return undefined
    }
    return unsupportedType("content block type", type)
  }

  const blockDelta = (event: JsonRecord, out: Array<Model.ModelEvent>): NormalizerFailure | undefined => {
    const index = event["index"]
    const delta = optionalRecord(event, "delta")
    if (typeof index !== "number") return notA("content_block_delta.index", "a count")
    if (delta === INVALID || delta === undefined) return notA("content_block_delta.delta", "an object")
    const block = blocks.get(index)
    if (block === undefined || !open.has(index)) return unsupportedShape(`a delta for content block ${index}, which is not open`)
    const type = delta["type"]
    if (type === "text_delta" && block.type === "text") {
      const value = optionalString(delta, "text")
      if (value === INVALID || value === undefined) return notA("delta.text", "a string")
      if (value !== "") out.push({ kind: "part_delta", id: block.id, text: value })
      return undefined
    }
    if (type === "thinking_delta" && block.type === "thinking" && block.redactedData === undefined) {
      const value = optionalString(delta, "thinking")
      if (value === INVALID || value === undefined) return notA("delta.thinking", "a string")
      if (value !== "") out.push({ kind: "part_delta", id: block.id, text: value })
      return undefined
    }
    if (type === "signature_delta" && block.type === "thinking") {
      const value = optionalString(delta, "signature")
      if (value === INVALID || value === undefined) return notA("delta.signature", "a string")
      block.signature = (block.signature ?? "") + value
      return undefined
    }
    if (type === "input_json_delta" && block.type === "tool_use") {
      const value = optionalString(delta, "partial_json")
      if (value === INVALID || value === undefined) return notA("delta.partial_json", "a string")
      block.json.push(value)
      return undefined
    }
    // A known delta for a block of another kind says so; an unknown one is named.
    return KNOWN_DELTAS.has(String(type))
      ? unsupportedShape(`a ${String(type)} for a ${block.type !== "tool_use" && block.redactedData !== undefined ? "redacted_thinking" : block.type} block`)
      : unsupportedType("delta type", type)
  }

  const blockStop = (event: JsonRecord, out: Array<Model.ModelEvent>): NormalizerFailure | undefined => {
    const index = event["index"]
    if (typeof index !== "number") return notA("content_block_stop.index", "a count")
    const block = blocks.get(index)
    if (block === undefined || !open.has(index)) return unsupportedShape(`a stop of content block ${index}, which is not open`)
    open.delete(index)
    if (block.type === "tool_use") {
      const text = block.json.join("")
      const input = text.trim() === "" ? block.initial : parseToolInput(text)
      if (input === undefined) {
        // Reported at the stop reason, which comes after the block: cut by the output limit, it says so.
        invalidInput = true
        return undefined
      }
      out.push({ kind: "tool_call", id: block.id, name: block.name, input, providerExecuted: false })
      return undefined
    }
    const providerOptions = signed(block)
    out.push({ kind: "part_finished", id: block.id, ...(providerOptions === undefined ? {} : { providerOptions }) })
    return undefined
  }

  const event = (value: JsonRecord, out: Array<Model.ModelEvent>): NormalizerFailure | undefined => {
    switch (value["type"]) {
      case "message_start": {
        const message = optionalRecord(value, "message")
        if (message === INVALID || message === undefined) return notA("message_start.message", "an object")
        if (started) return unsupportedShape("a second message_start")
        started = true
        const id = optionalString(message, "id")
        const model = optionalString(message, "model")
        const messageUsage = optionalRecord(message, "usage")
        if (id === INVALID) return notA("message.id", "a string")
        if (model === INVALID) return notA("message.model", "a string")
        if (messageUsage === INVALID) return INVALID_USAGE
        if (messageUsage !== undefined) {
          const failure = readUsage(messageUsage, usage)
          if (failure !== undefined) return failure
        }
        out.push({ kind: "response_metadata", ...(id === undefined ? {} : { id }), ...(model === undefined ? {} : { model }) })
        return undefined
      }
      case "content_block_start":
        return blockStart(value, out)
      case "content_block_delta":
        return blockDelta(value, out)
      case "content_block_stop":
        return blockStop(value, out)
      case "message_delta": {
        const delta = optionalRecord(value, "delta")
        const deltaUsage = optionalRecord(value, "usage")
        if (delta === INVALID) return notA("message_delta.delta", "an object")
        if (deltaUsage === INVALID) return INVALID_USAGE
        const reason = delta === undefined ? undefined : optionalString(delta, "stop_reason")
        if (reason === INVALID) return notA("delta.stop_reason", "a string")
        if (reason !== undefined) stopReason = reason
        if (deltaUsage !== undefined) return readUsage(deltaUsage, usage)
        return undefined
      }
      case "message_stop":
        if (stopReason === undefined) {
          return invalidInput ? invalidToolInput(undefined) : { kind: "truncated", message: "message stopped without a stop reason" }
        }
        return finish(stopReason, out)
      case "ping":
        return undefined
      case "error":
        return providerError(value)
      default:
        return unsupportedType("event type", value["type"])
    }
  }

  /** An `error` event: a tool block whose input did not parse came first and is the failure, as at its stop. */
  const providerError = (value: JsonRecord): NormalizerFailure =>
    invalidInput ? invalidToolInput(stopReason) : { kind: "provider_payload", payload: value }

  /** `finished` at `message_stop`, or at the end of a body after the stop reason. */
  const finish = (reason: string, out: Array<Model.ModelEvent>): NormalizerFailure | undefined => {
    const mapped = mapFinishReason(reason)
    if (mapped === undefined) return adapterFailure(`model did not complete: ${reason}`)
    if (invalidInput) return invalidToolInput(reason)
    if (open.size > 0) return adapterFailure("model stream finished with an open part")
    out.push({ kind: "finished", reason: mapped, usage: toModelUsage(usage) })
    finished = true
    return undefined
  }

  return {
    message: (message: SseMessage, out) => {
      if (finished) return undefined
      // Not Anthropic's, but some servers end a stream with it: it says nothing, wherever it comes.
      if (message.data === "[DONE]") return undefined
      const parsed = parseJson(message.data)
      if (parsed === INVALID) return unsupportedShape("the data is not JSON")
      if (!isRecord(parsed)) return unsupportedShape("the data is not a JSON object")
      // A proxy's error event may carry its `event: error` line and no `type` in the data.
      if (message.event === "error" && parsed["type"] === undefined) return providerError(parsed)
      return event(parsed, out)
    },
    // The end of the body after the stop reason (`message_delta`) is the finish, as on the
    // OpenAI-compatible route: gateways that leave `message_stop` out sent the whole answer.
    end: (out) =>
      finished
        ? undefined
        : started && stopReason !== undefined && open.size === 0
          ? finish(stopReason, out)
          : invalidInput
            ? invalidToolInput(stopReason)
            : { kind: "truncated", message: "stream ended before message_stop" },
    isFinished: () => finished,
    saysNothing: (message) => {
      if (message.data === "[DONE]") return true
      const parsed = parseJson(message.data)
      return isRecord(parsed) && parsed["type"] === "ping"
    },
    hasBufferedOutput: () => [...blocks.values()].some((block) => block.type === "tool_use"),
  }
}
