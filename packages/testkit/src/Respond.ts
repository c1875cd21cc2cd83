/**
 * The responders of the scripted model server: SSE streams (events, comments, raw bytes, delays, holds
 * until released) that end by closing, dropping the socket or stalling; JSON errors with status and
 * headers; a hang until the client aborts; a socket dropped before any response; a response held
 * until a `Gate` opens. Pure data: the server interprets them. A builder given a status outside
 * 200..599 (a 1xx is no final response), a delay that is no timer's, a header Node cannot send, or
 * data with no JSON form, throws a `TypeError`.
 */
import { validateHeaderName, validateHeaderValue } from "node:http"

/** A latch a test opens to let a held response (or the rest of a stream) go on. */
export interface Gate {
  readonly release: () => void
  readonly isReleased: () => boolean
  /** Resolves once released. */
  readonly released: Promise<void>
}

export const gate = (): Gate => {
  let open = false
  let resolve: () => void = () => undefined
  const released = new Promise<void>((done) => {
    resolve = done
  })
  return {
    release: () => {
      open = true
      resolve()
    },
    isReleased: () => open,
    released,
  }
}

/** One step of an SSE body. `delayMs` waits (a real timer) before the step is written. */
export type SseStep =
  | { readonly kind: "event"; readonly data: string; readonly event?: string | undefined; readonly delayMs?: number | undefined }
  | { readonly kind: "comment"; readonly text: string; readonly delayMs?: number | undefined }
  | { readonly kind: "raw"; readonly text: string; readonly delayMs?: number | undefined }
  | { readonly kind: "wait"; readonly gate: Gate }

/** How an SSE body ends: `close` ends the response, `drop` destroys the socket, `stall` writes nothing more until the client leaves. */
export type SseEnd = "close" | "drop" | "stall"

export type Responder =
  | {
      readonly kind: "sse"
      readonly status: number
      readonly headers: Readonly<Record<string, string>>
      readonly steps: ReadonlyArray<SseStep>
      readonly end: SseEnd
    }
  | {
      readonly kind: "json"
      readonly status: number
      readonly headers: Readonly<Record<string, string>>
      /** Written as is when a string, else as JSON. */
      readonly body: unknown
      readonly delayMs?: number | undefined
    }
  | { readonly kind: "hang" }
  | { readonly kind: "drop" }
  | { readonly kind: "hold"; readonly gate: Gate; readonly then: Responder }

/** The longest delay a Node timer waits (a longer one, `Infinity` or `NaN` fires at once). */
const MAX_DELAY_MS = 2 ** 31 - 1

/** `delayMs` when given (an undefined value is absent); a delay no timer waits is a `TypeError`. */
const delayOf = (delayMs: number | undefined): { readonly delayMs?: number } => {
  if (delayMs === undefined) return {}
  if (typeof delayMs !== "number" || !Number.isFinite(delayMs) || delayMs < 0 || delayMs > MAX_DELAY_MS) {
    throw new TypeError(`testkit: a delay must be a finite number of milliseconds from 0 to ${MAX_DELAY_MS}, got ${String(delayMs)}`)
  }
  return { delayMs }
}

/** `data` as an event's text: itself when a string, else its JSON; a value without one is a `TypeError`. */
const eventData = (data: unknown): string => {
  if (typeof data === "string") return data
  const text: unknown = JSON.stringify(data)
  if (typeof text !== "string") throw new TypeError(`testkit: Respond.event's data has no JSON form (${typeof data})`)
  return text
}

/** An SSE `data:` event; a non-string `data` is written as JSON. */
export const event = (
  data: unknown,
  options: { readonly event?: string | undefined; readonly delayMs?: number | undefined } = {},
): SseStep => ({
  kind: "event",
  data: eventData(data),
  ...(options.event === undefined ? {} : { event: options.event }),
  ...delayOf(options.delayMs),
})

/** An SSE comment line (`: text`), as keep-alive pings are sent. */
export const comment = (text = "keep-alive", options: { readonly delayMs?: number | undefined } = {}): SseStep => ({
  kind: "comment",
  text,
  ...delayOf(options.delayMs),
})

/** Bytes written exactly as given (malformed SSE, a cut event). */
export const raw = (text: string, options: { readonly delayMs?: number | undefined } = {}): SseStep => ({
  kind: "raw",
  text,
  ...delayOf(options.delayMs),
})

/** Holds the stream at this point until `gate` is released. */
export const waitFor = (gate: Gate): SseStep => ({ kind: "wait", gate })

/** Adds `delayMs` before every step that has no delay of its own. */
export const withDelay = (steps: ReadonlyArray<SseStep>, delayMs: number): ReadonlyArray<SseStep> => {
  const delay = delayOf(delayMs)
  return steps.map((step) => (step.kind === "wait" || step.delayMs !== undefined ? step : { ...step, ...delay }))
}

/**
 * `status` when it is an integer in 200..599 (a 1xx is informational: the client would wait on for
 * a final response); otherwise a `TypeError` naming `builder` and the value.
 */
const checkStatus = (builder: string, status: number): number => {
  if (Number.isInteger(status) && status >= 200 && status <= 599) return status
  throw new TypeError(`testkit: ${builder} needs an HTTP status from 200 to 599, got ${String(status)}`)
}

/** `headers` when Node can send each (name and value); otherwise a `TypeError` naming `builder` and the header. */
const checkHeaders = (builder: string, headers: Readonly<Record<string, string>>): Readonly<Record<string, string>> => {
  for (const [name, value] of Object.entries(headers)) {
    try {
      validateHeaderName(name)
      validateHeaderValue(name, value)
    } catch (error) {
      throw new TypeError(`testkit: ${builder}: header ${JSON.stringify(name)}: ${error instanceof Error ? error.message : String(error)}`)
    }
  }
  return headers
}

export interface SseOptions {
  readonly status?: number | undefined
  /** Replace the defaults (`content-type`, `cache-control`) whatever their casing. */
  readonly headers?: Readonly<Record<string, string>> | undefined
  readonly end?: SseEnd | undefined
}

/** An event-stream response (status 200 and `text/event-stream` unless told otherwise). */
export const sse = (steps: ReadonlyArray<SseStep>, options: SseOptions = {}): Responder => ({
  kind: "sse",
  status: checkStatus("Respond.sse", options.status ?? 200),
  headers: checkHeaders("Respond.sse", options.headers ?? {}),
  steps,
  end: options.end ?? "close",
})

/** The steps, then the socket destroyed mid-stream. */
export const dropAfter = (steps: ReadonlyArray<SseStep>, options: Omit<SseOptions, "end"> = {}): Responder =>
  sse(steps, { ...options, end: "drop" })

/** The steps, then silence on an open connection until the client gives up. */
export const stallAfter = (steps: ReadonlyArray<SseStep>, options: Omit<SseOptions, "end"> = {}): Responder =>
  sse(steps, { ...options, end: "stall" })

/**
 * A JSON (or raw text) response with `status` and `headers` (a name replaces the default
 * `content-type` or `cache-control` whatever its casing), sent after `delayMs` when given.
 */
export const json = (
  status: number,
  body: unknown,
  headers: Readonly<Record<string, string>> = {},
  options: { readonly delayMs?: number | undefined } = {},
): Responder => ({
  kind: "json",
  status: checkStatus("Respond.json", status),
  headers: checkHeaders("Respond.json", headers),
  body,
  ...delayOf(options.delayMs),
})

/** No response at all until the client aborts the request. */
export const hang = (): Responder => ({ kind: "hang" })

/** The socket destroyed before any response byte. */
export const drop = (): Responder => ({ kind: "drop" })

/** `then` once `gate` is released; a `then` that is no responder is a `TypeError`. */
export const hold = (gate: Gate, then: Responder): Responder => {
  const kind: unknown = typeof then === "object" && then !== null ? (then as { readonly kind?: unknown }).kind : undefined
  if (kind !== "sse" && kind !== "json" && kind !== "hang" && kind !== "drop" && kind !== "hold") {
    throw new TypeError("testkit: Respond.hold's responder is no responder (Respond.*)")
  }
  return { kind: "hold", gate, then }
}

/** An OpenAI-style error body. */
export const openAiError = (
  message: string,
  options: { readonly type?: string | undefined; readonly code?: string | null | undefined } = {},
) => ({
  error: { message, type: options.type ?? "invalid_request_error", param: null, code: options.code ?? null },
})

/** An Anthropic-style error body. */
export const anthropicError = (type: string, message: string) => ({ type: "error", error: { type, message } })
