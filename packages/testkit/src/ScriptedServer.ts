/**
 * The scripted model server (docs/architecture.md §11): real `node:http` on 127.0.0.1 with an ephemeral port,
 * answering each request with the first matching entry of its script, recording every request with its
 * raw body and how each exchange ended (completed, dropped, or closed by the client), and reporting
 * progress per request, per chunk and per response. `make` ties it to an Effect `Scope`; `start` and
 * `close` serve Promise users. Nothing a script or a progress callback throws escapes the server: a
 * throwing `match` answers like an unscripted request, a throwing `onProgress` is recorded.
 */
import * as http from "node:http"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import { Effect, type Scope } from "effect"
import type { Responder, SseStep } from "./Respond.ts"

export interface RecordedRequest {
  /** Arrival order, from 0. */
  readonly index: number
  readonly method: string
  /** Path and query, as sent. */
  readonly path: string
  /**
   * Lowercased names; repeated headers joined with `, `. Kept as sent, credentials included
   * (`authorization`, `x-api-key`).
   */
  readonly headers: Readonly<Record<string, string>>
  readonly rawBody: Uint8Array
  /** The body as UTF-8 text. */
  readonly body: string
  /** The parsed JSON body, or undefined when it is not JSON. */
  readonly json: unknown
}

/** How an exchange ended: `client_closed` means the client aborted before the response ended. */
export type ExchangeOutcome = "completed" | "dropped" | "client_closed" | "server_closed"

export interface Exchange {
  readonly request: RecordedRequest
  /** Whether a script entry answered it (otherwise a 404 `testkit_unscripted` was sent). */
  readonly matched: boolean
  /** The status sent, if headers went out. */
  readonly status: number | undefined
  /** SSE steps (events, comments, raw writes) written. */
  readonly chunksSent: number
  readonly outcome: ExchangeOutcome
}

export type Progress =
  | { readonly type: "request"; readonly request: RecordedRequest }
  | { readonly type: "chunk"; readonly request: RecordedRequest; readonly chunk: number }
  | { readonly type: "response"; readonly exchange: Exchange }

export interface ScriptEntry {
  /**
   * Routing by request content; an entry without `match` takes any request. A `match` that throws
   * ends the search: the request is answered as unscripted, naming the error.
   */
  readonly match?: ((request: RecordedRequest) => boolean) | undefined
  readonly respond: Responder
  /** Keep the entry after use (default: used once). */
  readonly repeat?: boolean | undefined
}

export interface ServerOptions {
  readonly script?: ReadonlyArray<ScriptEntry | Responder> | undefined
  /** Called synchronously; what it throws is kept in `progressErrors()` and changes nothing else. */
  readonly onProgress?: ((progress: Progress) => void) | undefined
}

export interface ScriptedServer {
  /** `http://127.0.0.1:{port}` */
  readonly url: string
  readonly port: number
  /** Appends entries (or bare responders) to the script. */
  readonly push: (...entries: ReadonlyArray<ScriptEntry | Responder>) => void
  /** Every request received so far, in arrival order. */
  readonly requests: () => ReadonlyArray<RecordedRequest>
  /** Every ended exchange so far, in end order. */
  readonly exchanges: () => ReadonlyArray<Exchange>
  /** What `onProgress` threw so far, in order. */
  readonly progressErrors: () => ReadonlyArray<unknown>
  /**
   * Resolves with the `index`-th request once it has arrived. Rejects at once for an index that is
   * not a non-negative integer, and once the server closes if that request never arrived.
   */
  readonly request: (index: number) => Promise<RecordedRequest>
  /** Resolves with the exchange of the `index`-th request once it has ended; rejects as `request`. */
  readonly exchange: (index: number) => Promise<Exchange>
  /**
   * Stops listening, destroys open connections (their exchanges end `server_closed`) and rejects the
   * waits for requests that never arrived; idempotent. A request that comes later is not recorded.
   */
  readonly close: () => Promise<void>
}

/** Routes on the request body: the entry answers requests whose raw body contains `text`. */
export const whenBodyIncludes = (text: string, respond: Responder, repeat = false): ScriptEntry => ({
  match: (request) => request.body.includes(text),
  respond,
  repeat,
})

const RESPONDER_KINDS: ReadonlySet<unknown> = new Set(["sse", "json", "hang", "drop", "hold"])
const ENTRY_KEYS: ReadonlySet<string> = new Set(["match", "respond", "repeat"])

/**
 * `value` as a script entry, or a `TypeError` naming its position: a value that is neither a
 * responder (`Respond.*`) nor `{match?, respond, repeat?}` (a misspelt key included) would answer
 * nothing, and the request would wait without a word.
 */
const entryOf = (value: ScriptEntry | Responder, position: number): ScriptEntry => {
  const isRecord = typeof value === "object" && value !== null
  if (isRecord && !("respond" in value) && RESPONDER_KINDS.has((value as { readonly kind?: unknown }).kind)) {
    refuseMalformed(value as Responder, `script entry ${position}`)
    return { respond: value as Responder }
  }
  const keys = isRecord ? Object.keys(value) : []
  const entry = value as Partial<ScriptEntry>
  if (
    !isRecord ||
    keys.some((key) => !ENTRY_KEYS.has(key)) ||
    typeof entry.respond !== "object" ||
    entry.respond === null ||
    !RESPONDER_KINDS.has((entry.respond as { readonly kind?: unknown }).kind) ||
    (entry.match !== undefined && typeof entry.match !== "function") ||
    (entry.repeat !== undefined && typeof entry.repeat !== "boolean")
  ) {
    throw new TypeError(`testkit: script entry ${position} is neither a responder (Respond.*) nor {match?, respond, repeat?}`)
  }
  refuseMalformed(entry.respond, `script entry ${position}`)
  return value as ScriptEntry
}

const STEP_TEXT: Readonly<Record<string, string>> = { event: "data", comment: "text", raw: "text" }

/**
 * A `TypeError` naming what of `responder` would answer nothing or break its socket: a step that is
 * no step (a block builder's array not spread into the steps, `Respond.event(undefined)`), a header
 * Node refuses, a held responder that is none. Responders made by `Respond.*` pass; a hand-made or
 * edited one is checked as deep.
 */
const refuseMalformed = (responder: Responder, where: string): void => {
  const fail = (what: string): never => {
    throw new TypeError(`testkit: ${where}: ${what}`)
  }
  if (responder.kind === "hold") {
    const then = responder.then as unknown
    if (typeof then !== "object" || then === null || !RESPONDER_KINDS.has((then as { readonly kind?: unknown }).kind)) {
      fail("Respond.hold's responder is no responder (Respond.*)")
    }
    return refuseMalformed(responder.then, where)
  }
  if (responder.kind !== "sse" && responder.kind !== "json") return
  const headers = responder.headers as unknown
  if (typeof headers !== "object" || headers === null) fail(`a ${responder.kind} responder needs headers, {} at least (Respond.${responder.kind} gives them)`)
  for (const [name, value] of Object.entries(responder.headers)) {
    try {
      http.validateHeaderName(name)
      http.validateHeaderValue(name, value)
    } catch (error) {
      fail(`header ${JSON.stringify(name)}: ${error instanceof Error ? error.message : String(error)}`)
    }
  }
  if (responder.kind !== "sse") return
  const steps = responder.steps as unknown
  if (!Array.isArray(steps)) return fail("Respond.sse takes an array of steps")
  steps.forEach((step: unknown, index) => {
    const kind = typeof step === "object" && step !== null ? (step as { readonly kind?: unknown }).kind : undefined
    const field = typeof kind === "string" ? STEP_TEXT[kind] : undefined
    const fine =
      field !== undefined
        ? typeof (step as Record<string, unknown>)[field] === "string"
        : kind === "wait" && typeof (step as { readonly gate?: unknown }).gate === "object"
    if (!fine) {
      fail(
        Array.isArray(step)
          ? `step ${index} is an array: spread a block's steps into the list (...AnthropicSse.textBlock(0, ["hi"]))`
          : `step ${index} is no SSE step (Respond.event, comment, raw or waitFor)${kind === "event" ? ": its data is no string (Respond.event(undefined)?)" : ""}`,
      )
    }
  })
}

const sseText = (step: Exclude<SseStep, { kind: "wait" }>): string => {
  switch (step.kind) {
    case "event": {
      const lines = step.data.split("\n").map((line) => `data: ${line}\n`)
      return `${step.event === undefined ? "" : `event: ${step.event}\n`}${lines.join("")}\n`
    }
    case "comment":
      return `: ${step.text}\n\n`
    case "raw":
      return step.text
  }
}

interface Waiter<A> {
  readonly index: number
  readonly resolve: (value: A) => void
  readonly reject: (error: Error) => void
}

/** Resolves, and forgets, the waiters for `index`. */
const settle = <A>(waiters: Array<Waiter<A>>, index: number, value: A): void => {
  for (const waiter of waiters.filter((item) => item.index === index)) {
    waiters.splice(waiters.indexOf(waiter), 1)
    waiter.resolve(value)
  }
}

/** Text for a thrown value, whatever it is. */
const describe = (error: unknown): string => {
  if (error instanceof Error) return error.message
  try {
    return String(error)
  } catch {
    return typeof error
  }
}

const badIndex = (index: number): RangeError | undefined =>
  Number.isSafeInteger(index) && index >= 0
    ? undefined
    : new RangeError(`testkit: a request index is a non-negative integer, got ${describe(index)}`)

/** Default headers, then `extra`: a name of `extra` replaces a default whatever its casing. */
const responseHeaders = (contentType: string, extra: Readonly<Record<string, string>>): Record<string, string> => {
  const headers: Record<string, string> = { "content-type": contentType, "cache-control": "no-cache" }
  for (const [name, value] of Object.entries(extra)) {
    for (const key of Object.keys(headers)) if (key.toLowerCase() === name.toLowerCase()) delete headers[key]
    headers[name] = value
  }
  return headers
}

/** Starts a server on 127.0.0.1 with an ephemeral port. */
/** The keys of `ServerOptions`: a misspelt one would leave the server answering every request 404. */
const OPTION_KEYS: ReadonlySet<string> = new Set(["script", "onProgress"])

export const start = (options: ServerOptions = {}): Promise<ScriptedServer> => {
  let script: Array<ScriptEntry>
  try {
    if (typeof options !== "object" || options === null) throw new TypeError("testkit: the server's options must be {script?, onProgress?}")
    const unknownKey = Object.keys(options).find((key) => !OPTION_KEYS.has(key))
    if (unknownKey !== undefined) throw new TypeError(`testkit: the server's options have no key '${unknownKey}' (the keys are script, onProgress)`)
    const given: unknown = options.script ?? []
    if (!Array.isArray(given)) throw new TypeError("testkit: script must be an array of entries or responders")
    script = (given as ReadonlyArray<ScriptEntry | Responder>).map(entryOf)
  } catch (error) {
    return Promise.reject(error)
  }
  const requests: Array<RecordedRequest> = []
  const ended: Array<Exchange> = []
  const endedByIndex = new Map<number, Exchange>()
  const requestWaiters: Array<Waiter<RecordedRequest>> = []
  const exchangeWaiters: Array<Waiter<Exchange>> = []
  const timers = new Set<ReturnType<typeof setTimeout>>()
  const progressErrors: Array<unknown> = []
  let isClosed = false
  const report = (progress: Progress): void => {
    try {
      options.onProgress?.(progress)
    } catch (error) {
      progressErrors.push(error)
    }
  }

  const neverArrived = (index: number): Error =>
    new Error(
      `testkit: the server closed after ${requests.length} request${requests.length === 1 ? "" : "s"}; ` +
        `request ${index} never arrived`,
    )

  const wait = <A>(waiters: Array<Waiter<A>>, index: number, found: A | undefined): Promise<A> => {
    const refused = badIndex(index)
    const promise: Promise<A> =
      refused !== undefined
        ? Promise.reject(refused)
        : found !== undefined
          ? Promise.resolve(found)
          : isClosed && index >= requests.length
            ? Promise.reject(neverArrived(index))
            : new Promise((resolve, reject) => waiters.push({ index, resolve, reject }))
    // Whoever awaits it still sees the rejection; a wait started and then left (its test failed
    // first, or awaits it only after `close()`) must not become an unhandled rejection.
    promise.catch(() => undefined)
    return promise
  }

  /** Rejects (and forgets) the waiters for requests that never arrived. */
  const refuseMissing = <A>(waiters: Array<Waiter<A>>): void => {
    for (const waiter of waiters.filter((item) => item.index >= requests.length)) {
      waiters.splice(waiters.indexOf(waiter), 1)
      waiter.reject(neverArrived(waiter.index))
    }
  }

  /** The first entry that takes `request` (removed unless `repeat`), or why none answers it. */
  const take = (request: RecordedRequest): { readonly entry: ScriptEntry } | { readonly unscripted: string } => {
    for (const [position, entry] of script.entries()) {
      let matches: boolean
      try {
        matches = entry.match === undefined || entry.match(request)
      } catch (error) {
        return { unscripted: `; the match of a script entry threw: ${describe(error)}` }
      }
      if (!matches) continue
      if (entry.repeat !== true) script.splice(position, 1)
      return { entry }
    }
    return { unscripted: script.length === 0 ? "" : `; ${script.length} script ${script.length === 1 ? "entry is" : "entries are"} left, none matched` }
  }

  const sleep = (ms: number): Promise<void> =>
    new Promise((resolve) => {
      const timer = setTimeout(() => {
        timers.delete(timer)
        resolve()
      }, ms)
      timers.add(timer)
    })

  const handle = (incoming: IncomingMessage, response: ServerResponse, rawBody: Uint8Array): void => {
    if (isClosed) {
      incoming.socket.destroy()
      return
    }
    const text = Buffer.from(rawBody).toString("utf8")
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch {
      parsed = undefined
    }
    const headers: Record<string, string> = {}
    // `headersDistinct`: `headers` keeps only the first of some repeated headers (`authorization`).
    for (const [name, values] of Object.entries(incoming.headersDistinct)) {
      if (values !== undefined) headers[name] = values.join(", ")
    }
    const request: RecordedRequest = {
      index: requests.length,
      method: incoming.method ?? "GET",
      path: incoming.url ?? "/",
      headers,
      rawBody,
      body: text,
      json: parsed,
    }
    requests.push(request)
    report({ type: "request", request })
    settle(requestWaiters, request.index, request)

    const taken = take(request)
    const entry = "entry" in taken ? taken.entry : undefined
    let chunksSent = 0
    let status: number | undefined
    let outcome: ExchangeOutcome | undefined
    const finish = (result: ExchangeOutcome): void => {
      if (outcome !== undefined) return
      outcome = result
      const exchange: Exchange = { request, matched: entry !== undefined, status, chunksSent, outcome: result }
      ended.push(exchange)
      endedByIndex.set(request.index, exchange)
      report({ type: "response", exchange })
      settle(exchangeWaiters, request.index, exchange)
    }
    response.on("close", () => finish(response.writableFinished ? "completed" : isClosed ? "server_closed" : "client_closed"))
    const isGone = (): boolean => outcome !== undefined || isClosed || response.destroyed
    /** Records the status only once `writeHead` took it (it throws on a bad status or header). */
    const writeHead = (code: number, extra: Readonly<Record<string, string>>, contentType: string): void => {
      response.writeHead(code, responseHeaders(contentType, extra))
      status = code
    }
    let lastWrite: Promise<void> = Promise.resolve()
    // A write that throws fails the responder (its socket dropped), not a promise no one awaits.
    const write = (text: string): void => {
      let written!: () => void
      lastWrite = new Promise((resolve) => (written = resolve))
      response.write(text, () => written())
    }
    const dropSocket = (): void => {
      if (outcome === undefined) finish("dropped")
      incoming.socket.destroy()
    }

    const run = async (responder: Responder): Promise<void> => {
      switch (responder.kind) {
        case "hang":
          return
        case "drop":
          dropSocket()
          return
        case "hold":
          await responder.gate.released
          if (!isGone()) await run(responder.then)
          return
        case "json": {
          if (responder.delayMs !== undefined) await sleep(responder.delayMs)
          if (isGone()) return
          // Serialized before the head: a body JSON cannot write (a bigint) sends no status.
          const body: string | undefined = typeof responder.body === "string" ? responder.body : JSON.stringify(responder.body)
          writeHead(responder.status, responder.headers, "application/json")
          response.end(body)
          return
        }
        case "sse": {
          writeHead(responder.status, responder.headers, "text/event-stream")
          response.flushHeaders()
          for (const step of responder.steps) {
            if (step.kind === "wait") await step.gate.released
            else if (step.delayMs !== undefined && step.delayMs > 0) await sleep(step.delayMs)
            if (isGone()) return
            if (step.kind === "wait") continue
            write(sseText(step))
            chunksSent++
            report({ type: "chunk", request, chunk: chunksSent })
          }
          if (responder.end === "close") response.end()
          else if (responder.end === "drop") {
            // Let the written bytes reach the client before the socket goes.
            await lastWrite
            if (!isGone()) dropSocket()
          }
          return
        }
      }
    }

    if ("unscripted" in taken) {
      // 404: a client classifies it as a refusal, not a failure worth retrying.
      const message = `testkit: no scripted response for request ${request.index}${taken.unscripted}`
      writeHead(404, {}, "application/json")
      response.end(JSON.stringify({ error: { message, type: "testkit_unscripted" } }))
      return
    }
    run(taken.entry.respond).catch(() => dropSocket())
  }

  const server = createServer((incoming, response) => {
    const chunks: Array<Buffer> = []
    incoming.on("data", (chunk: Buffer) => chunks.push(chunk))
    incoming.on("end", () => handle(incoming, response, new Uint8Array(Buffer.concat(chunks))))
  })
  server.keepAliveTimeout = 1000

  return new Promise((resolve, reject) => {
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      const url = `http://127.0.0.1:${port}`
      let closing: Promise<void> | undefined
      resolve({
        url,
        port,
        push: (...entries) => {
          // Checked all first: a refused push adds nothing.
          const checked = entries.map((entry, index) => entryOf(entry, script.length + index))
          script.push(...checked)
        },
        requests: () => [...requests],
        exchanges: () => [...ended],
        progressErrors: () => [...progressErrors],
        request: (index) => wait(requestWaiters, index, requests[index]),
        exchange: (index) => wait(exchangeWaiters, index, endedByIndex.get(index)),
        close: () => {
          if (closing !== undefined) return closing
          isClosed = true
          for (const timer of timers) clearTimeout(timer)
          timers.clear()
          refuseMissing(requestWaiters)
          refuseMissing(exchangeWaiters)
          closing = new Promise<void>((done) => {
            server.close(() => done())
            server.closeAllConnections()
          })
          return closing
        },
      })
    })
  })
}

/** A server owned by the current `Scope`: closed, connections destroyed, when the scope closes. */
export const make = (options: ServerOptions = {}): Effect.Effect<ScriptedServer, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(() => start(options)),
    (server) => Effect.promise(() => server.close()),
  )

/** Waits (interruptibly) for the `index`-th request; dies with the error `server.request` rejects with. */
export const awaitRequest = (server: ScriptedServer, index: number): Effect.Effect<RecordedRequest> =>
  Effect.promise(() => server.request(index))

/** Waits (interruptibly) for the exchange of the `index`-th request to end; dies as `awaitRequest`. */
export const awaitExchange = (server: ScriptedServer, index: number): Effect.Effect<Exchange> =>
  Effect.promise(() => server.exchange(index))
