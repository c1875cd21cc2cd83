/**
 * The scripted model server (docs/architecture.md §11): real `node:http` on 127.0.0.1 with an ephemeral port,
 * answering each request with the first matching entry of its script, recording every request with its
 * raw body and how each exchange ended (completed, dropped, or closed by the client), and reporting
 * progress per request, per chunk and per response. `make` ties it to an Effect `Scope`; `start` and
 * `close` serve Promise users.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import { Effect, type Scope } from "effect"
import type { Responder, SseStep } from "./Respond.ts"

export interface RecordedRequest {
  /** Arrival order, from 0. */
  readonly index: number
  readonly method: string
  /** Path and query, as sent. */
  readonly path: string
  /** Lowercased names; repeated headers joined with `, `. */
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
  /** Whether a script entry answered it (otherwise a 500 was sent). */
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
  /** Routing by request content; an entry without `match` takes any request. */
  readonly match?: ((request: RecordedRequest) => boolean) | undefined
  readonly respond: Responder
  /** Keep the entry after use (default: used once). */
  readonly repeat?: boolean | undefined
}

export interface ServerOptions {
  readonly script?: ReadonlyArray<ScriptEntry | Responder> | undefined
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
  /** Resolves with the `index`-th request once it has arrived. */
  readonly request: (index: number) => Promise<RecordedRequest>
  /** Resolves with the exchange of the `index`-th request once it has ended. */
  readonly exchange: (index: number) => Promise<Exchange>
  /** Stops listening, destroys open connections; idempotent. */
  readonly close: () => Promise<void>
}

/** Routes on the request body: the entry answers requests whose raw body contains `text`. */
export const whenBodyIncludes = (text: string, respond: Responder, repeat = false): ScriptEntry => ({
  match: (request) => request.body.includes(text),
  respond,
  repeat,
})

const isEntry = (value: ScriptEntry | Responder): value is ScriptEntry => "respond" in value

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
}

/** Starts a server on 127.0.0.1 with an ephemeral port. */
export const start = (options: ServerOptions = {}): Promise<ScriptedServer> => {
  const script: Array<ScriptEntry> = (options.script ?? []).map((entry) => (isEntry(entry) ? entry : { respond: entry }))
  const requests: Array<RecordedRequest> = []
  const ended: Array<Exchange> = []
  const endedByIndex = new Map<number, Exchange>()
  const requestWaiters: Array<Waiter<RecordedRequest>> = []
  const exchangeWaiters: Array<Waiter<Exchange>> = []
  const timers = new Set<ReturnType<typeof setTimeout>>()
  let isClosed = false
  const report = (progress: Progress): void => options.onProgress?.(progress)

  const take = (request: RecordedRequest): ScriptEntry | undefined => {
    const position = script.findIndex((entry) => entry.match === undefined || entry.match(request))
    if (position === -1) return undefined
    const entry = script[position]
    if (entry !== undefined && entry.repeat !== true) script.splice(position, 1)
    return entry
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
    const text = Buffer.from(rawBody).toString("utf8")
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch {
      parsed = undefined
    }
    const headers: Record<string, string> = {}
    for (const [name, value] of Object.entries(incoming.headers)) {
      if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(", ") : value
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
    for (const waiter of requestWaiters.filter((waiter) => waiter.index === request.index)) waiter.resolve(request)

    const entry = take(request)
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
      for (const waiter of exchangeWaiters.filter((waiter) => waiter.index === request.index)) waiter.resolve(exchange)
    }
    response.on("close", () => finish(response.writableFinished ? "completed" : isClosed ? "server_closed" : "client_closed"))
    const isGone = (): boolean => outcome !== undefined || isClosed || response.destroyed
    const writeHead = (code: number, extra: Readonly<Record<string, string>>, contentType: string): void => {
      status = code
      response.writeHead(code, { "content-type": contentType, "cache-control": "no-cache", ...extra })
    }
    let lastWrite: Promise<void> = Promise.resolve()
    const write = (text: string): void => {
      lastWrite = new Promise((resolve) => response.write(text, () => resolve()))
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
          writeHead(responder.status, responder.headers, "application/json")
          response.end(typeof responder.body === "string" ? responder.body : JSON.stringify(responder.body))
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

    if (entry === undefined) {
      writeHead(500, {}, "application/json")
      response.end(JSON.stringify({ error: { message: `testkit: no scripted response for request ${request.index}`, type: "testkit_unscripted" } }))
      return
    }
    run(entry.respond).catch(() => dropSocket())
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
          for (const entry of entries) script.push(isEntry(entry) ? entry : { respond: entry })
        },
        requests: () => [...requests],
        exchanges: () => [...ended],
        request: (index) => {
          const found = requests[index]
          if (found !== undefined) return Promise.resolve(found)
          return new Promise((done) => requestWaiters.push({ index, resolve: done }))
        },
        exchange: (index) => {
          const found = endedByIndex.get(index)
          if (found !== undefined) return Promise.resolve(found)
          return new Promise((done) => exchangeWaiters.push({ index, resolve: done }))
        },
        close: () => {
          if (closing !== undefined) return closing
          isClosed = true
          for (const timer of timers) clearTimeout(timer)
          timers.clear()
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

/** Waits (interruptibly) for the `index`-th request. */
export const awaitRequest = (server: ScriptedServer, index: number): Effect.Effect<RecordedRequest> =>
  Effect.promise(() => server.request(index))

/** Waits (interruptibly) for the exchange of the `index`-th request to end. */
export const awaitExchange = (server: ScriptedServer, index: number): Effect.Effect<Exchange> =>
  Effect.promise(() => server.exchange(index))
