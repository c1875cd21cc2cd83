/**
 * What the provider normalisers share (docs/model.md §4.3): the failure shapes they report, finish
 * reason mapping, tool input parsing and the usage type. The transport turns a failure into a
 * `ModelError` with what the stream already showed.
 */
import type { Identity, Model } from "@maka/facts"
import { INVALID, isRecord, parseJson } from "./json-read.ts"

export type NormalizerFailure =
  | { readonly kind: "adapter"; readonly message: string }
  | { readonly kind: "provider_payload"; readonly payload: unknown }
  | { readonly kind: "truncated"; readonly message: string }

export interface SseMessage {
  readonly event?: string | undefined
  readonly data: string
}

/** A provider stream normaliser: provider SSE messages in, `ModelEvent`s out (into `out`). */
export interface Normalizer {
  /** Folds one SSE message; a failure ends the stream. */
  readonly message: (message: SseMessage, out: Array<Model.ModelEvent>) => NormalizerFailure | undefined
  /** The body ended (cleanly); emits the closing events or reports truncation. */
  readonly end: (out: Array<Model.ModelEvent>) => NormalizerFailure | undefined
  /** Whether `finished` was emitted: the transport stops reading. */
  readonly isFinished: () => boolean
  /** Whether a message carries nothing (a keep-alive, a `[DONE]`): one after the finish is ignored. */
  readonly saysNothing: (message: SseMessage) => boolean
  /** Whether content arrived that is still buffered (tool-call fragments): it counts as observed output. */
  readonly hasBufferedOutput: () => boolean
}

export const adapterFailure = (message: string): NormalizerFailure => ({ kind: "adapter", message })

export const UNSUPPORTED: NormalizerFailure = adapterFailure("unsupported provider event")

/**
 * `UNSUPPORTED` saying what of the event this adapter cannot read, so a provider's variant shape is
 * found from the message alone (`unsupported provider event: delta.content is not a string`): the
 * adapter's own words and field paths, never the provider's value.
 */
export const unsupportedShape = (what: string): NormalizerFailure => adapterFailure(`unsupported provider event: ${what}`)

/** `unsupportedShape` of a field of the wrong type: `{path} is not {expected}`. */
export const notA = (path: string, expected: string): NormalizerFailure => unsupportedShape(`${path} is not ${expected}`)

/**
 * A tool call's arguments that are not a JSON object; when the output limit ended the output (the
 * provider's `length` or `max_tokens`, not a full context window), they were cut by it, and the
 * message says so: a higher limit lets the call finish.
 */
export const invalidToolInput = (providerReason: string | undefined): NormalizerFailure =>
  adapterFailure(
    providerReason === "length" || providerReason === "max_tokens"
      ? "invalid tool call input: the output limit was reached inside the call (a higher maxOutputTokens lets it finish)"
      : "invalid tool call input",
  )

/**
 * `UNSUPPORTED` naming the provider's type that is not known (`event type "x"`), so the failure says
 * what a newer API sent; a type that is no plain name (1–64 of `[A-Za-z0-9_.-]`) is not repeated.
 */
export const unsupportedType = (what: string, type: unknown): NormalizerFailure =>
  typeof type === "string" && /^[A-Za-z0-9_.-]{1,64}$/.test(type) ? adapterFailure(`unsupported provider event: ${what} "${type}"`) : UNSUPPORTED

/** Provider finish and stop reasons onto the three durable ones; anything else is undefined. */
export const mapFinishReason = (reason: string): Model.FinishReason | undefined => {
  switch (reason) {
    case "stop":
    case "end_turn":
    case "stop_sequence":
    // Together's end of sequence.
    case "eos":
      return "stop"
    case "tool_calls":
    case "function_call":
    case "tool_use":
      return "tool-calls"
    case "length":
    case "max_tokens":
    case "model_context_window_exceeded":
    // Mistral's context window reached.
    case "model_length":
      return "length"
    default:
      return undefined
  }
}

/** Tool input: `JSON.parse` of the arguments (blank is `{}`), which must be an object. */
export const parseToolInput = (text: string): Identity.JsonObject | undefined => {
  if (text.trim() === "") return {}
  const parsed = parseJson(text)
  if (parsed === INVALID || !isJsonObject(parsed)) return undefined
  return parsed
}

const isJson = (value: unknown): value is Identity.Json => {
  if (value === null || typeof value === "string" || typeof value === "boolean") return true
  if (typeof value === "number") return Number.isFinite(value)
  if (Array.isArray(value)) return value.every(isJson)
  return isRecord(value) && Object.values(value).every(isJson)
}

/** A JSON object; a value nested deeper than the walk can go (it throws) is not one. */
export const isJsonObject = (value: unknown): value is Identity.JsonObject => {
  try {
    return isRecord(value) && Object.values(value).every(isJson)
  } catch {
    return false
  }
}
