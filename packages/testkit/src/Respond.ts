/**
 * The responders of the scripted model server: SSE streams (events, comments, raw bytes, delays, holds
 * until released) that end by closing, dropping the socket or stalling; JSON errors with status and
 * headers; a hang until the client aborts; a socket dropped before any response; a response held
 * until a `Gate` opens. Pure data: the server interprets them.
 */

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

/** An SSE `data:` event; a non-string `data` is written as JSON. */
export const event = (data: unknown, options: { readonly event?: string; readonly delayMs?: number } = {}): SseStep => ({
  kind: "event",
  data: typeof data === "string" ? data : JSON.stringify(data),
  ...options,
})

/** An SSE comment line (`: text`), as keep-alive pings are sent. */
export const comment = (text = "keep-alive", options: { readonly delayMs?: number } = {}): SseStep => ({
  kind: "comment",
  text,
  ...options,
})

/** Bytes written exactly as given (malformed SSE, a cut event). */
export const raw = (text: string, options: { readonly delayMs?: number } = {}): SseStep => ({ kind: "raw", text, ...options })

/** Holds the stream at this point until `gate` is released. */
export const waitFor = (gate: Gate): SseStep => ({ kind: "wait", gate })

/** Adds `delayMs` before every step that has no delay of its own. */
export const withDelay = (steps: ReadonlyArray<SseStep>, delayMs: number): ReadonlyArray<SseStep> =>
  steps.map((step) => (step.kind === "wait" || step.delayMs !== undefined ? step : { ...step, delayMs }))

export interface SseOptions {
  readonly status?: number
  readonly headers?: Readonly<Record<string, string>>
  readonly end?: SseEnd
}

/** An event-stream response (status 200 and `text/event-stream` unless told otherwise). */
export const sse = (steps: ReadonlyArray<SseStep>, options: SseOptions = {}): Responder => ({
  kind: "sse",
  status: options.status ?? 200,
  headers: options.headers ?? {},
  steps,
  end: options.end ?? "close",
})

/** The steps, then the socket destroyed mid-stream. */
export const dropAfter = (steps: ReadonlyArray<SseStep>, options: Omit<SseOptions, "end"> = {}): Responder =>
  sse(steps, { ...options, end: "drop" })

/** The steps, then silence on an open connection until the client gives up. */
export const stallAfter = (steps: ReadonlyArray<SseStep>, options: Omit<SseOptions, "end"> = {}): Responder =>
  sse(steps, { ...options, end: "stall" })

/** A JSON (or raw text) response with `status` and `headers`. */
export const json = (status: number, body: unknown, headers: Readonly<Record<string, string>> = {}): Responder => ({
  kind: "json",
  status,
  headers,
  body,
})

/** No response at all until the client aborts the request. */
export const hang = (): Responder => ({ kind: "hang" })

/** The socket destroyed before any response byte. */
export const drop = (): Responder => ({ kind: "drop" })

/** `then` once `gate` is released. */
export const hold = (gate: Gate, then: Responder): Responder => ({ kind: "hold", gate, then })

/** An OpenAI-style error body. */
export const openAiError = (message: string, options: { readonly type?: string; readonly code?: string | null } = {}) => ({
  error: { message, type: options.type ?? "invalid_request_error", param: null, code: options.code ?? null },
})

/** An Anthropic-style error body. */
export const anthropicError = (type: string, message: string) => ({ type: "error", error: { type, message } })
