/**
 * Every wait of a model request is bounded: the idle timeout ends the attempt even when a custom
 * `fetch` ignores the `AbortSignal`, and an optional overall deadline ends a request that
 * keep-alive comments would otherwise keep alive forever.
 */
import { assert, describe, it } from "@effect/vitest"
import { type ChildProcess, spawn } from "node:child_process"
import * as http from "node:http"
import { Clock, Effect, Fiber, Option, Redacted, Result } from "effect"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { LanguageModel, ProviderConfig } from "@maka/model"
import { advanceUntilDone, collect, failureOf, request } from "./support.ts"

const config = (fetch: ProviderConfig.FetchFunction): ProviderConfig.ProviderConfig => ({
  kind: "openai-compatible",
  baseUrl: "http://127.0.0.1:9/v1",
  model: "m",
  apiKey: Redacted.make(""),
  fetch,
})

/** A body that never yields a byte and ignores being cancelled. */
const silentBody = () =>
  new ReadableStream<Uint8Array>({
    pull: () => new Promise<void>(() => undefined),
  })

describe("idle timeout with a fetch that ignores its signal", () => {
  it.effect("ends the attempt while waiting for the response", () =>
    Effect.gen(function* () {
      const model = yield* LanguageModel.make(config(() => new Promise<Response>(() => undefined)), { idleTimeoutMs: 1_000 })
      const fiber = yield* Effect.forkChild(failureOf(model.stream(request())))
      yield* advanceUntilDone(fiber, 500)
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error.reason._tag, "TimedOut")
    }),
  )

  it.effect("ends the attempt while waiting for the body", () =>
    Effect.gen(function* () {
      const fetch = () =>
        Promise.resolve(new Response(silentBody(), { status: 200, headers: { "content-type": "text/event-stream" } }))
      const model = yield* LanguageModel.make(config(fetch), { idleTimeoutMs: 1_000 })
      const fiber = yield* Effect.forkChild(failureOf(model.stream(request())))
      yield* advanceUntilDone(fiber, 500)
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error.reason._tag, "TimedOut")
    }),
  )
})

describe("the grace after the finish", () => {
  it.effect("wins over an idle timeout falling due at the same time: a body left open after the finish completes", () =>
    Effect.gen(function* () {
      const text = OpenAiSse.response({ text: ["all of it"] })
        .map((step) => (step.kind === "event" ? `data: ${step.data}\n\n` : ""))
        .join("")
      // The whole answer, then a body that never ends and ignores being cancelled.
      const body = new ReadableStream<Uint8Array>({
        start: (controller) => controller.enqueue(new TextEncoder().encode(text)),
        pull: () => new Promise<void>(() => undefined),
      })
      const fetch = () => Promise.resolve(new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } }))
      const model = yield* LanguageModel.make(config(fetch), { idleTimeoutMs: 1_000 })
      const fiber = yield* Effect.forkChild(collect(model.stream(request())))
      yield* advanceUntilDone(fiber, 500)
      const { events, error } = yield* Fiber.join(fiber)
      assert.isUndefined(error, error?.message)
      assert.strictEqual(events.at(-1)?.kind, "finished")
    }),
  )
})

describe("requestDeadlineMs", () => {
  it.live("ends a request that keep-alive comments keep alive", () =>
    Effect.gen(function* () {
      const comments = Array.from({ length: 100 }, () => Respond.comment("keep-alive", { delayMs: 100 }))
      const server = yield* ScriptedServer.make({ script: [Respond.sse([OpenAiSse.role(), ...comments, ...OpenAiSse.response({ text: ["late"] })])] })
      const model = yield* LanguageModel.make(
        { kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make(""), requestDeadlineMs: 1_000 },
        { idleTimeoutMs: 1_000 },
      )
      const started = Date.now()
      const { events, error } = yield* collect(model.stream(request()))
      assert.isBelow(Date.now() - started, 5_000)
      assert.strictEqual(error?.reason._tag, "TimedOut")
      assert.include(error?.message ?? "", "deadline")
      assert.isFalse(events.some((event) => event.kind === "finished"))
    }),
  )

  it.effect("ends the attempt at the deadline even when the fetch ignores its signal", () =>
    Effect.gen(function* () {
      const model = yield* LanguageModel.make(
        { ...config(() => new Promise<Response>(() => undefined)), requestDeadlineMs: 2_000 },
        { idleTimeoutMs: 300_000 },
      )
      const fiber = yield* Effect.forkChild(failureOf(model.stream(request())))
      yield* advanceUntilDone(fiber, 500)
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error.reason._tag, "TimedOut")
      assert.include(error.message, "deadline")
    }),
  )

  it("is refused unless a positive integer of milliseconds, and never enters the route identity", () => {
    for (const requestDeadlineMs of [0, -1, 1.5, 2 ** 31]) {
      assert.isTrue(Result.isFailure(ProviderConfig.validate({ ...config(fetch), requestDeadlineMs })), String(requestDeadlineMs))
    }
    assert.isTrue(Result.isSuccess(ProviderConfig.validate({ ...config(fetch), requestDeadlineMs: 60_000 })))
    const withDeadline: ProviderConfig.ProviderConfig = { ...config(fetch), requestDeadlineMs: 60_000 }
    assert.strictEqual(ProviderConfig.routeIdentity(withDeadline), ProviderConfig.routeIdentity(config(fetch)))
  })
})

describe("the idle timer's clock", () => {
  /** One OpenAI-compatible chunk as SSE text. */
  const frame = (delta: Readonly<Record<string, unknown>>, finishReason: string | null = null): string =>
    `data: ${JSON.stringify({ id: "c", model: "m", choices: [{ index: 0, delta, finish_reason: finishReason }] })}\n\n`

  /**
   * A server that writes `pieces` `gapMs` apart, and then ends the body (or, `ends` false, says
   * nothing more).
   */
  const pacedServer = (pieces: ReadonlyArray<string>, gapMs: number, ends = true) =>
    Effect.acquireRelease(
      Effect.promise(
        () =>
          new Promise<http.Server>((resolve) => {
            const server = http.createServer((incoming, response) => {
              incoming.resume()
              response.writeHead(200, { "content-type": "text/event-stream" })
              const write = (index: number) => {
                if (index === pieces.length) return ends ? void response.end() : undefined
                response.write(pieces[index])
                setTimeout(() => write(index + 1), gapMs)
              }
              write(0)
            })
            server.listen(0, "127.0.0.1", () => resolve(server))
          }),
      ),
      (server) => Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve()))),
    )

  const modelAt = (server: http.Server, idleTimeoutMs: number) => {
    const { port } = server.address() as { readonly port: number }
    return LanguageModel.make(
      {
        kind: "openai-compatible",
        baseUrl: `http://127.0.0.1:${port}/v1`,
        model: "m",
        apiKey: Redacted.make(""),
      },
      { idleTimeoutMs },
    )
  }

  const pieces = [frame({ content: "" }), frame({ content: "a" }), frame({ content: "b" }), `${frame({}, "stop")}data: [DONE]\n\n`]

  /** A server in a child process: an SSE body of 12 chunks 100 ms apart (it runs while this process is held). */
  /** The same, gzip-encoded and flushed after each chunk when `gzip`. */
  const childServer = (gzip: boolean) => Effect.acquireRelease(
    Effect.promise(
      () =>
        new Promise<{ readonly child: ChildProcess; readonly port: number }>((resolve, reject) => {
          const script = `
            const http = require("node:http")
            const zlib = require("node:zlib")
            const gzip = ${String(gzip)}
            const frame = (delta, reason) => "data: " + JSON.stringify({ id: "c", model: "m", choices: [{ index: 0, delta, finish_reason: reason }] }) + "\\n\\n"
            http.createServer((request, response) => {
              request.resume()
              response.writeHead(200, { "content-type": "text/event-stream", ...(gzip ? { "content-encoding": "gzip" } : {}) })
              const out = gzip ? zlib.createGzip() : response
              if (gzip) out.pipe(response)
              let sent = 0
              const next = () => {
                if (sent === 12) return out.end(frame({}, "stop") + "data: [DONE]\\n\\n")
                out.write(frame({ content: "c" + sent++ }, null))
                if (gzip) out.flush()
                setTimeout(next, 100)
              }
              next()
            }).listen(0, "127.0.0.1", function () { process.stdout.write(String(this.address().port) + "\\n") })
          `
          const child = spawn(process.execPath, ["-e", script], { stdio: ["ignore", "pipe", "inherit"] })
          child.once("error", reject)
          child.stdout!.once("data", (data: Buffer) => resolve({ child, port: Number(String(data).trim()) }))
        }),
    ),
    ({ child }) => Effect.sync(() => child.kill()),
  )

  it.live("a host that could not run for longer than the timeout reads what came meanwhile before it times out", () =>
    Effect.gen(function* () {
      for (const [useFetch, gzip] of [
        [true, false],
        [false, false],
        [true, true],
        [false, true],
      ] as const) {
        const { port } = yield* childServer(gzip)
        const model = yield* LanguageModel.make(
          {
            kind: "openai-compatible",
            baseUrl: `http://127.0.0.1:${port}/v1`,
            model: "m",
            apiKey: Redacted.make(""),
            ...(useFetch ? { fetch: (input: string, init: RequestInit) => fetch(input, init) } : {}),
          },
          { idleTimeoutMs: 1_000 },
        )
        // This process is held (as by SIGSTOP, or a machine asleep) for 1.5 s mid-stream while the
        // server goes on writing: when it runs again the timer is due, and the chunks wait on the socket.
        // Held in the loop's check phase, as a stopped process resumes: its timers then run before
        // the next poll reads the socket.
        const held = setTimeout(
          () =>
            setImmediate(() => {
              const until = performance.now() + 1_500
              while (performance.now() < until) {
                // held
              }
            }),
          350,
        )
        const { events, error } = yield* collect(model.stream(request()))
        clearTimeout(held)
        assert.strictEqual(error, undefined, `${useFetch ? "fetch" : "own client"}${gzip ? ", gzip" : ""}: ${error?.message}`)
        assert.strictEqual(events.flatMap((event) => (event.kind === "part_delta" ? [event.text] : [])).length, 12)
      }
    }).pipe(Effect.scoped),
  )

  it.live("a wall clock stepped forward or back moves neither the idle timer nor its expiry", () =>
    Effect.gen(function* () {
      const live = yield* Clock.Clock
      let offset = 0
      // The wall clock this test steps; the monotonic clock goes on.
      const stepped: Clock.Clock = {
        currentTimeMillisUnsafe: () => live.currentTimeMillisUnsafe() + offset,
        currentTimeMillis: Effect.sync(() => live.currentTimeMillisUnsafe() + offset),
        currentTimeNanosUnsafe: () => live.currentTimeNanosUnsafe() + BigInt(offset) * 1_000_000n,
        currentTimeNanos: Effect.sync(() => live.currentTimeNanosUnsafe() + BigInt(offset) * 1_000_000n),
        monotonicTimeNanosUnsafe: () => live.monotonicTimeNanosUnsafe(),
        monotonicTimeNanos: Effect.sync(() => live.monotonicTimeNanosUnsafe()),
        sleep: (duration) => live.sleep(duration),
      }
      const stepAfter = (ms: number, by: number) => setTimeout(() => (offset = by), ms)
      // Two hours ahead during a gap of 1.5 s in a healthy stream (idle timeout 3 s): no timeout.
      const healthy = yield* pacedServer(pieces, 1_500)
      const ahead = stepAfter(500, 2 * 3_600_000)
      const { events, error } = yield* collect((yield* modelAt(healthy, 3_000)).stream(request())).pipe(Effect.provideService(Clock.Clock, stepped))
      clearTimeout(ahead)
      assert.strictEqual(error, undefined, error?.message)
      assert.strictEqual(events.at(-1)?.kind, "finished")
      // An hour back during a silence: it still times out after the idle timeout (1 s).
      offset = 0
      const silent = yield* pacedServer([frame({ content: "" })], 100, false)
      const back = stepAfter(300, -3_600_000)
      const stalled = yield* failureOf((yield* modelAt(silent, 1_000)).stream(request())).pipe(
        Effect.provideService(Clock.Clock, stepped),
        Effect.timeoutOption("8 seconds"),
      )
      clearTimeout(back)
      assert.isTrue(Option.isSome(stalled), "the silent stream never timed out")
      assert.strictEqual(Option.isSome(stalled) ? stalled.value.reason._tag : "", "TimedOut")
    }).pipe(Effect.scoped),
  )
})
