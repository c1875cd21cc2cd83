/**
 * Every wait of a model request is bounded: the idle timeout ends the attempt even when a custom
 * `fetch` ignores the `AbortSignal`, and an optional overall deadline ends a request that
 * keep-alive comments would otherwise keep alive forever.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Redacted, Result } from "effect"
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
