/**
 * The adapter's own HTTP client (docs/model.md §4.2), used when the provider configuration brings no
 * `fetch`: `node:http` / `node:https` with keep-alive agents, the response body flowing into a buffer
 * a pull takes whole, no WHATWG stream between the socket and the SSE parser. It answers
 * the part of a `fetch` `Response` the transport reads (status, headers, a body reader), and keeps
 * Node's `fetch` behaviour where the transport depends on it: header values trimmed, an abort
 * rejects with an `AbortError`, a body cut short rejects its read, a compressed body is decompressed.
 * There is no connect timer: the request's idle timer covers the wait for the first byte.
 */
import * as http from "node:http"
import * as https from "node:https"
import { PassThrough, type Readable, Transform } from "node:stream"
import { urlToHttpOptions } from "node:url"
import * as zlib from "node:zlib"

/** A read of the body: a chunk, or the end. */
export type BodyRead = { readonly done: false; readonly value: Uint8Array } | { readonly done: true; readonly value?: Uint8Array | undefined }

export interface BodyReader {
  readonly read: () => Promise<BodyRead>
  readonly cancel: () => Promise<void>
}

/** What the transport reads of a response: a `fetch` `Response` has it, and so does this client's. */
export interface HttpResponse {
  readonly status: number
  readonly ok: boolean
  readonly headers: { readonly get: (name: string) => string | null }
  readonly body: { readonly getReader: () => BodyReader } | null
}

export interface HttpRequest {
  readonly method: "POST"
  readonly headers: Readonly<Record<string, string>>
  readonly body: RequestBody
  readonly signal: AbortSignal
}

/** A request body as bytes: its parts in order, sent one after another. */
export interface BodyParts {
  readonly parts: ReadonlyArray<Uint8Array>
  readonly byteLength: number
}

/** A request body: text, or bytes in parts (a host's `fetch` is given text). */
export type RequestBody = string | BodyParts

/** The body as text (a host's `fetch` is given text). */
export const textOf = (body: RequestBody): string => (typeof body === "string" ? body : Buffer.concat(body.parts, body.byteLength).toString("utf8"))

/** The body's length in bytes. */
export const byteLengthOf = (body: RequestBody): number => (typeof body === "string" ? Buffer.byteLength(body) : body.byteLength)

/** A `fetch` `Response` as the transport reads it. */
/**
 * A host's `fetch` that breaks its contract (returns no Promise, or resolves with no `Response`): a
 * mistake in the host's code, not the network's, so it is not retried (an adapter error).
 */
export class HostFetchError extends Error {}

const typeName = (value: unknown): string => (value === null ? "null" : Array.isArray(value) ? "an array" : typeof value)

/** The host `fetch`'s answer as a `Promise`; one that is none is refused. */
export const fetchAnswer = (answered: unknown): Promise<unknown> => {
  const then: unknown = typeof answered === "object" && answered !== null ? (answered as { readonly then?: unknown }).then : undefined
  if (typeof then !== "function") {
    return Promise.reject(new HostFetchError(`the provider's fetch returned ${typeName(answered)}, not a Promise of a Response`))
  }
  return Promise.resolve(answered)
}

export const fromFetchResponse = (answer: unknown): HttpResponse => {
  if (typeof answer !== "object" || answer === null || typeof (answer as { readonly status?: unknown }).status !== "number" || !("headers" in answer)) {
    throw new HostFetchError(`the provider's fetch resolved with ${typeName(answer)}, not a Response`)
  }
  const response = answer as Response
  const body: ReadableStream<Uint8Array> | null = (response.body as ReadableStream<Uint8Array> | null | undefined) ?? null
  // A Node stream as the body (node-fetch's) has no reader: the adapter reads a web ReadableStream.
  if (body !== null && typeof (body as { readonly getReader?: unknown }).getReader !== "function") {
    throw new HostFetchError("the provider's fetch resolved with a Response whose body is not a web ReadableStream (no getReader)")
  }
  return {
    status: response.status,
    ok: response.ok,
    headers: response.headers,
    body: body === null ? null : { getReader: () => body.getReader() },
  }
}

/**
 * How long an idle kept-alive connection waits for the next request before it is closed (as undici,
 * behind Node's `fetch`, keeps them); a server's `Keep-Alive: timeout=` hint shortens it.
 */
export const IDLE_CONNECTION_MS = 4_000

const agents = {
  "http:": new http.Agent({ keepAlive: true, timeout: IDLE_CONNECTION_MS }),
  "https:": new https.Agent({ keepAlive: true, timeout: IDLE_CONNECTION_MS }),
} as const

/** The abort error `fetch` rejects with: an `Error` named `AbortError`. */
const abortError = (signal: AbortSignal): Error => {
  const reason: unknown = signal.reason
  if (reason instanceof Error && reason.name === "AbortError") return reason
  const error = new Error("This operation was aborted")
  error.name = "AbortError"
  return error
}

const ZLIB_FLUSH = { flush: zlib.constants.Z_SYNC_FLUSH, finishFlush: zlib.constants.Z_SYNC_FLUSH }

/**
 * A `deflate` body as Node's `fetch` reads one: the zlib format the coding names, or the raw deflate
 * data some servers send under that name, told apart by the first byte (a zlib header's low four
 * bits name the deflate method, 8). The inner inflater is paused while the outer stream's reader is
 * full, so a body that inflates a thousandfold is not inflated ahead of its reader.
 */
export const inflateEither = (): Transform => {
  let inner: zlib.Inflate | zlib.InflateRaw | undefined
  const outer = new Transform({
    transform: (chunk: Buffer, _encoding, done) => {
      if (inner === undefined) {
        if (chunk.length === 0) return done()
        const chosen = (chunk[0]! & 0x0f) === 0x08 ? zlib.createInflate(ZLIB_FLUSH) : zlib.createInflateRaw(ZLIB_FLUSH)
        chosen.on("data", (data: Buffer) => {
          if (!outer.push(data)) chosen.pause()
        })
        chosen.on("error", (error) => outer.destroy(error))
        inner = chosen
      }
      // Called once the inflater took the chunk: while it is paused, the next chunk waits.
      inner.write(chunk, () => done())
    },
    flush: (done) => {
      if (inner === undefined) return done()
      inner.once("end", () => done())
      inner.end()
    },
    destroy: (error, done) => {
      inner?.destroy()
      done(error)
    },
  })
  const read = outer._read.bind(outer)
  outer._read = (size: number) => {
    inner?.resume()
    read(size)
  }
  return outer
}

/** A decoder of one content coding Node's `fetch` decodes, or `undefined` for any other. */
const decoderOf = (coding: string): Transform | undefined => {
  switch (coding) {
    case "gzip":
    case "x-gzip":
      return zlib.createGunzip(ZLIB_FLUSH)
    case "deflate":
      return inflateEither()
    case "br":
      return zlib.createBrotliDecompress({ flush: zlib.constants.BROTLI_OPERATION_FLUSH, finishFlush: zlib.constants.BROTLI_OPERATION_FLUSH })
    default:
      return undefined
  }
}

/** How many codings one body may stack, as Node's `fetch` allows. */
const MAX_CODINGS = 5

/**
 * The decompressed body for the `content-encoding` Node's `fetch` would decode: each listed coding
 * undone, the last applied first (`gzip, br` is brotli over gzip); the body itself when a coding is
 * one it does not decode (`identity` and an empty name included, as `fetch` leaves those). A body of
 * more than `MAX_CODINGS` codings fails its first read, as `fetch` refuses it.
 */
const decoded = (response: http.IncomingMessage): Readable => {
  const header = response.headers["content-encoding"]
  if (header === undefined || header.trim() === "") return response
  const codings = header.split(",").map((coding) => coding.trim().toLowerCase())
  if (codings.length > MAX_CODINGS) {
    response.destroy()
    const refused = new PassThrough()
    refused.destroy(new Error(`too many content codings in the response: ${codings.length}, at most ${MAX_CODINGS}`))
    return refused
  }
  const decoders: Array<Transform> = []
  for (const coding of codings.reverse()) {
    const decoder = decoderOf(coding)
    if (decoder === undefined) {
      for (const made of decoders) made.destroy()
      return response
    }
    decoders.push(decoder)
  }
  let body: Readable = response
  for (const decoder of decoders) {
    const from = body
    from.on("error", (error) => decoder.destroy(error))
    body = from.pipe(decoder)
  }
  // A body cancelled or failed takes the decoders before it along.
  body.once("close", () => {
    for (const decoder of decoders) decoder.destroy()
  })
  return body
}

/** Bytes a body may hold unread before it stops reading the socket (the server then waits for the reader). */
export const MAX_BUFFERED_BODY_BYTES = 1024 * 1024

/**
 * A pull reader over a `Readable` that flows into a buffer of its own: a read takes everything
 * buffered at once, or waits for the next chunk, the end or the failure. A waiting read is woken
 * after the event loop's pending socket reads have run (`setImmediate`), so the bytes that reached
 * the socket while the reader's caller held the thread (a commit) come in one read, not one read per
 * network chunk. Past `MAX_BUFFERED_BODY_BYTES` unread the body pauses until the next read. A
 * connection cut mid-body fails the body (Node reports it as an `aborted` error), so the read fails
 * as under `fetch`; after an abort every failure is the `AbortError`.
 */
const readerOf = (response: http.IncomingMessage, signal: AbortSignal): BodyReader => {
  const body = decoded(response)
  const chunks: Array<Buffer> = []
  let buffered = 0
  let ended = false
  let failure: unknown
  let waiting: { readonly resolve: (read: BodyRead) => void; readonly reject: (error: unknown) => void } | undefined
  let wakeScheduled = false
  const take = (): BodyRead => {
    const value = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, buffered)
    chunks.length = 0
    buffered = 0
    if (body.isPaused() && !ended) body.resume()
    return { done: false, value }
  }
  const settle = () => {
    wakeScheduled = false
    const waiter = waiting
    if (waiter === undefined) return
    if (buffered > 0) {
      waiting = undefined
      waiter.resolve(take())
    } else if (failure !== undefined) {
      waiting = undefined
      waiter.reject(failure)
    } else if (ended) {
      waiting = undefined
      waiter.resolve({ done: true })
    }
  }
  const wake = () => {
    if (waiting === undefined || wakeScheduled) return
    wakeScheduled = true
    setImmediate(settle)
  }
  body.on("data", (chunk: Buffer) => {
    chunks.push(chunk)
    buffered += chunk.length
    if (buffered >= MAX_BUFFERED_BODY_BYTES) body.pause()
    wake()
  })
  body.on("end", () => {
    ended = true
    wake()
  })
  body.on("error", (error) => {
    failure ??= signal.aborted ? abortError(signal) : error
    wake()
  })
  return {
    read: () => {
      if (buffered > 0) return Promise.resolve(take())
      if (failure !== undefined) return Promise.reject(failure)
      if (ended) return Promise.resolve({ done: true })
      return new Promise<BodyRead>((resolve, reject) => {
        waiting = { resolve, reject }
      })
    },
    cancel: () => {
      ended = true
      chunks.length = 0
      buffered = 0
      response.destroy()
      if (body !== response) body.destroy()
      settle()
      return Promise.resolve()
    },
  }
}

const headerReader = (response: http.IncomingMessage): HttpResponse["headers"] => ({
  get: (name) => {
    const value = response.headers[name.toLowerCase()]
    return value === undefined ? null : Array.isArray(value) ? value.join(", ") : value
  },
})

/** A header value as `fetch` sends it: leading and trailing HTTP whitespace removed. */
const headerValue = (value: string): string => value.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, "")

const outgoingHeaders = (request: HttpRequest): Record<string, string | number> => {
  const headers: Record<string, string | number> = {}
  for (const [name, value] of Object.entries(request.headers)) headers[name] = headerValue(value)
  headers["content-length"] = byteLengthOf(request.body)
  return headers
}

/** A body up to this size is copied into one write; a larger one is written part by part, uncopied. */
const ONE_WRITE_BYTES = 64 * 1024

/** What a URL's requests share: the module, the agent and the request options of the URL itself. */
interface Target {
  readonly module: typeof http | typeof https
  readonly agent: http.Agent
  readonly options: http.RequestOptions
}

/** How many URLs' targets are kept (a host talks to a handful of endpoints); past it the cache starts over. */
const MAX_TARGETS = 64
const targets = new Map<string, Target>()

/** The target of `url`, parsed once per URL; a protocol other than HTTP(S) is a `TypeError`, as under `fetch`. */
const targetOf = (url: string): Target => {
  const known = targets.get(url)
  if (known !== undefined) return known
  const parsed = new URL(url)
  const target: Target | undefined =
    parsed.protocol === "https:"
      ? { module: https, agent: agents["https:"], options: urlToHttpOptions(parsed) }
      : parsed.protocol === "http:"
        ? { module: http, agent: agents["http:"], options: urlToHttpOptions(parsed) }
        : undefined
  if (target === undefined) throw new TypeError(`unsupported protocol ${parsed.protocol}`)
  if (targets.size >= MAX_TARGETS) targets.clear()
  targets.set(url, target)
  return target
}

/**
 * Sends `request` to `url` and resolves with the response once its headers arrived. The abort is
 * heard by a listener of its own, removed when the request closes (Node's `signal` option costs a
 * stream-finished watcher per request).
 */
export const send = (url: string, request: HttpRequest): Promise<HttpResponse> =>
  new Promise<HttpResponse>((resolve, reject) => {
    const { signal } = request
    if (signal.aborted) return reject(abortError(signal))
    const { module, agent, options } = targetOf(url)
    const outgoing = module.request({ ...options, method: request.method, agent, headers: outgoingHeaders(request) })
    const onAbort = () => outgoing.destroy(abortError(signal))
    signal.addEventListener("abort", onAbort, { once: true })
    outgoing.once("close", () => signal.removeEventListener("abort", onAbort))
    // Every failure of the request is heard (a later one, after the response, reaches the body's reader).
    outgoing.on("error", (error) => {
      reject(signal.aborted ? abortError(signal) : error)
    })
    outgoing.once("response", (response) => {
      const status = response.statusCode ?? 0
      // The reader listens from the start, so a failure before the first read is kept for it.
      const reader = readerOf(response, signal)
      resolve({ status, ok: status >= 200 && status < 300, headers: headerReader(response), body: { getReader: () => reader } })
    })
    const body = request.body
    if (typeof body === "string") outgoing.end(body)
    else if (body.byteLength <= ONE_WRITE_BYTES) outgoing.end(Buffer.concat(body.parts, body.byteLength))
    else {
      for (const part of body.parts) outgoing.write(part)
      outgoing.end()
    }
  })
