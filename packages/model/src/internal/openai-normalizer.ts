/**
 * OpenAI-compatible chat-completion chunks into `ModelEvent`s (docs/model.md §4.3): metadata once,
 * `content` as text, `reasoning_content`/`reasoning` as thinking, tool-call fragments buffered by index,
 * the finish reason and usage recorded, and on `[DONE]` (or end of body after a finish reason) the
 * closing events. Extra provider fields are ignored; a field of the wrong shape is refused.
 */
import type { Model } from "@maka/facts"
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
  notA,
  unsupportedShape,
  unsupportedType,
  invalidToolInput,
  mapFinishReason,
  parseToolInput,
  type Normalizer,
  type NormalizerFailure,
  type SseMessage,
} from "./normalizer.ts"

interface PendingCall {
  id: string | undefined
  name: string | undefined
  readonly arguments: Array<string>
  /** A fragment with another id was read into it: its server sends a new id with every fragment. */
  renamed: boolean
}

const readUsage = (usage: JsonRecord): Model.ModelUsage | NormalizerFailure => {
  const input = optionalCount(usage, "prompt_tokens")
  const output = optionalCount(usage, "completion_tokens")
  const promptDetails = optionalRecord(usage, "prompt_tokens_details")
  const completionDetails = optionalRecord(usage, "completion_tokens_details")
  if (promptDetails === INVALID || completionDetails === INVALID) return adapterFailure("invalid usage")
  const cacheRead = promptDetails === undefined ? undefined : optionalCount(promptDetails, "cached_tokens")
  const reasoning = completionDetails === undefined ? undefined : optionalCount(completionDetails, "reasoning_tokens")
  if (input === INVALID || output === INVALID || cacheRead === INVALID || reasoning === INVALID) {
    return adapterFailure("invalid usage")
  }
  return {
    ...(input === undefined ? {} : { inputTokens: input }),
    ...(output === undefined ? {} : { outputTokens: output }),
    ...(cacheRead === undefined ? {} : { cacheReadTokens: cacheRead }),
    ...(reasoning === undefined ? {} : { reasoningTokens: reasoning }),
  }
}

const isFailure = (value: object): value is NormalizerFailure => "kind" in value && typeof value.kind === "string"

export const openAiNormalizer = (): Normalizer => {
  let sawMetadata = false
  let partCount = 0
  let open: { readonly id: string; readonly textKind: Model.TextKind } | undefined
  /** The buffered calls in the order each started, and the one each index adds its fragments to. */
  const calls: Array<{ readonly index: number; readonly call: PendingCall }> = []
  const callAt = new Map<number, PendingCall>()
  let finishReason: string | undefined
  let usage: Model.ModelUsage = {}
  let finished = false
  let choiceIndex: unknown

  const closeOpen = (out: Array<Model.ModelEvent>): void => {
    if (open !== undefined) out.push({ kind: "part_finished", id: open.id })
    open = undefined
  }

  const text = (textKind: Model.TextKind, value: string, out: Array<Model.ModelEvent>): void => {
    if (value === "") return
    if (open === undefined || open.textKind !== textKind) {
      closeOpen(out)
      open = { id: `${textKind}-${partCount++}`, textKind }
      out.push({ kind: "part_started", id: open.id, textKind })
    }
    out.push({ kind: "part_delta", id: open.id, text: value })
  }

  /**
   * Whether a fragment at an index that holds `call` starts a call of its own: some servers send
   * every parallel call at one index, or without one (each first in its chunk), whole or as a first
   * fragment (id, name, no arguments) and then its arguments. It carries a name and an id other than
   * the call's, opens an object or carries no arguments yet, while the call's arguments are a whole
   * JSON object already. A server that sends a new id with every fragment of one call is seen at
   * its second fragment (the arguments not whole yet): its call is never split.
   */
  const startsAnother = (call: PendingCall, id: string | undefined, name: string | undefined, args: string | undefined): boolean => {
    if (id === undefined || id === "" || call.id === undefined || call.id === id || name === undefined || name === "") return false
    if (call.renamed || (args !== undefined && args.trim() !== "" && !args.trimStart().startsWith("{"))) return false
    const text = call.arguments.join("")
    // Parsed only when it may be whole: a call's text ends with `}` once it is.
    return text.trimEnd().endsWith("}") && parseToolInput(text) !== undefined
  }

  const toolFragment = (fragment: unknown, position: number): NormalizerFailure | undefined => {
    if (!isRecord(fragment)) return notA("delta.tool_calls[]", "an object")
    const indexValue = fragment["index"]
    const index = indexValue === undefined ? position : indexValue
    if (typeof index !== "number" || !Number.isSafeInteger(index) || index < 0) return notA("delta.tool_calls[].index", "a count")
    const id = optionalString(fragment, "id")
    const fn = optionalRecord(fragment, "function")
    if (id === INVALID) return notA("delta.tool_calls[].id", "a string")
    if (fn === INVALID) return notA("delta.tool_calls[].function", "an object")
    const name = fn === undefined ? undefined : optionalString(fn, "name")
    const args = fn === undefined ? undefined : optionalString(fn, "arguments")
    if (name === INVALID) return notA("delta.tool_calls[].function.name", "a string")
    if (args === INVALID) return notA("delta.tool_calls[].function.arguments", "a string")
    let call = callAt.get(index)
    if (call === undefined || startsAnother(call, id, name, args)) {
      call = { id: undefined, name: undefined, arguments: [], renamed: false }
      callAt.set(index, call)
      calls.push({ index, call })
    } else if (id !== undefined && id !== "" && call.id !== undefined && call.id !== id) {
      call.renamed = true
    }
    if (id !== undefined && id !== "" && call.id === undefined) call.id = id
    if (name !== undefined && name !== "" && call.name === undefined) call.name = name
    if (args !== undefined) call.arguments.push(args)
    return undefined
  }

  const finish = (out: Array<Model.ModelEvent>): NormalizerFailure | undefined => {
    if (finishReason === undefined) return { kind: "truncated", message: "stream ended without a finish reason" }
    const reason = mapFinishReason(finishReason)
    if (reason === undefined) return adapterFailure(`model did not complete: ${finishReason}`)
    closeOpen(out)
    // A call the provider sent without an id is given `call_{index}`, or, when another call holds
    // that (the provider's own, or another call at that index), `call_{index}_{n}` for the least n
    // free: two calls never share an id the step would refuse.
    const taken = new Set(calls.flatMap(({ call }) => (call.id === undefined ? [] : [call.id])))
    const madeId = (index: number): string => {
      let id = `call_${index}`
      for (let n = 1; taken.has(id); n++) id = `call_${index}_${n}`
      taken.add(id)
      return id
    }
    // In index order; the calls of one index in the order they started (the sort is stable).
    for (const { index, call } of [...calls].sort((left, right) => left.index - right.index)) {
      if (call.name === undefined) return adapterFailure("invalid tool call: missing name")
      const input = parseToolInput(call.arguments.join(""))
      if (input === undefined) return invalidToolInput(finishReason)
      out.push({ kind: "tool_call", id: call.id ?? madeId(index), name: call.name, input, providerExecuted: false })
    }
    out.push({ kind: "finished", reason, usage })
    finished = true
    return undefined
  }

  /**
   * The element of a chunk's `choices` this stream reads: the first one seen fixes the `index` read
   * after it, so a server answering several choices (`n` above 1) is read as its first one alone; an
   * element without an `index` (or a null one) is read as that one (docs/model.md §4.3).
   */
  const readChoice = (choices: ReadonlyArray<unknown>): unknown => {
    if (choiceIndex === undefined) {
      const first: unknown = choices[0]
      if (isRecord(first) && typeof first["index"] === "number") choiceIndex = first["index"]
      return first
    }
    return choices.find(
      (element) => !isRecord(element) || element["index"] === undefined || element["index"] === null || element["index"] === choiceIndex,
    )
  }

  const chunk = (value: JsonRecord, out: Array<Model.ModelEvent>): NormalizerFailure | undefined => {
    if (value["error"] !== undefined && value["error"] !== null) return { kind: "provider_payload", payload: value }
    if (!sawMetadata) {
      const id = optionalString(value, "id")
      const model = optionalString(value, "model")
      const created = optionalCount(value, "created")
      if (id === INVALID) return notA("id", "a string")
      if (model === INVALID) return notA("model", "a string")
      if (created === INVALID) return notA("created", "a count")
      // Metadata comes from the first chunk that names the response (Azure opens with an empty one).
      if ((id !== undefined && id !== "") || (model !== undefined && model !== "")) {
        sawMetadata = true
        const timestamp = created === undefined || created === 0 ? undefined : created * 1000
        out.push({
          kind: "response_metadata",
          ...(id === undefined || id === "" ? {} : { id }),
          ...(model === undefined || model === "" ? {} : { model }),
          ...(timestamp === undefined || !Number.isSafeInteger(timestamp) ? {} : { timestamp }),
        })
      }
    }
    const usageValue = optionalRecord(value, "usage")
    if (usageValue === INVALID) return adapterFailure("invalid usage")
    if (usageValue !== undefined) {
      const read = readUsage(usageValue)
      if (isFailure(read)) return read
      usage = read
    }
    const choices = value["choices"]
    if (choices === undefined || choices === null) return undefined
    if (!Array.isArray(choices)) return notA("choices", "an array")
    const choice = readChoice(choices)
    if (choice === undefined) return undefined
    if (!isRecord(choice)) return notA("choices[]", "an object")
    const delta = optionalRecord(choice, "delta")
    const reason = optionalString(choice, "finish_reason")
    if (delta === INVALID) return notA("delta", "an object")
    if (reason === INVALID) return notA("finish_reason", "a string")
    if (delta !== undefined) {
      const reasoningContent = optionalString(delta, "reasoning_content")
      const reasoning = optionalString(delta, "reasoning")
      const content = optionalString(delta, "content")
      if (reasoningContent === INVALID) return notA("delta.reasoning_content", "a string")
      if (reasoning === INVALID) return notA("delta.reasoning", "a string")
      if (content === INVALID) return notA("delta.content", "a string")
      // What this adapter does not read is refused, never dropped: a legacy `function_call` (the
      // request offers `tools`), and a refusal (the answer the model declined to give).
      const legacyCall = delta["function_call"]
      if (legacyCall !== undefined && legacyCall !== null) return unsupportedType("delta", "function_call")
      const refusal = optionalString(delta, "refusal")
      if (refusal === INVALID) return notA("delta.refusal", "a string")
      if (refusal !== undefined && refusal !== "") return adapterFailure("model did not complete: refusal")
      // The first field that says something: a server moving from one name to the other may send both.
      const thinking = reasoningContent !== undefined && reasoningContent !== "" ? reasoningContent : (reasoning ?? reasoningContent)
      if (thinking !== undefined) text("thinking", thinking, out)
      if (content !== undefined) text("text", content, out)
      const toolCalls = delta["tool_calls"]
      if (toolCalls !== undefined && toolCalls !== null) {
        if (!Array.isArray(toolCalls)) return notA("delta.tool_calls", "an array")
        for (let position = 0; position < toolCalls.length; position++) {
          const failure = toolFragment(toolCalls[position], position)
          if (failure !== undefined) return failure
        }
      }
    }
    if (reason !== undefined && reason !== "") finishReason = reason
    return undefined
  }

  return {
    message: (message: SseMessage, out) => {
      if (finished) return undefined
      const data = message.data
      if (data === "[DONE]") return finish(out)
      if (message.event === "error") {
        const payload = parseJson(data)
        return { kind: "provider_payload", payload: payload === INVALID ? { message: data } : payload }
      }
      const parsed = parseJson(data)
      if (parsed === INVALID) return unsupportedShape("the data is not JSON")
      if (!isRecord(parsed)) return unsupportedShape("the data is not a JSON object")
      return chunk(parsed, out)
    },
    end: (out) => (finished ? undefined : finish(out)),
    isFinished: () => finished,
    saysNothing: (message) => message.data === "[DONE]",
    hasBufferedOutput: () => calls.length > 0,
  }
}
