/** Credentials never reach an error message; an idle timeout while reading an error body stays `timed_out`. */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Redacted, Result } from "effect"
import { Respond, ScriptedServer } from "@maka/testkit"
import { LanguageModel, ProviderConfig, StepBuilder } from "@maka/model"
import { advanceUntilDone, failureOf, request } from "./support.ts"

describe("secrets in errors", () => {
  it.effect("scrubs a Redacted header value echoed by the provider", () =>
    Effect.gen(function* () {
      const token = "tok-SECRET-123456"
      const server = yield* ScriptedServer.make({
        script: [Respond.json(401, { error: { message: `bad token ${token}` } })],
      })
      const model = yield* LanguageModel.make({
        kind: "openai-compatible",
        baseUrl: `${server.url}/v1`,
        model: "m",
        apiKey: Redacted.make(""),
        headers: { "x-auth": Redacted.make(token) },
      })
      const error = yield* failureOf(model.stream(request()))
      assert.isFalse(error.message.includes(token))
      assert.isTrue(error.message.includes("[redacted]"))
    }),
  )

  it.effect("scrubs a key that a long provider message would cut in half", () =>
    Effect.gen(function* () {
      const key = "sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
      const server = yield* ScriptedServer.make({
        script: [Respond.json(401, { error: { message: `${"x".repeat(990)} ${key}` } })],
      })
      const model = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make(key) })
      const error = yield* failureOf(model.stream(request()))
      assert.isFalse(error.message.includes("sk-ABCDEF"))
    }),
  )

  it("refuses a base URL that carries credentials", () => {
    const checked = ProviderConfig.validate({
      kind: "openai-compatible",
      baseUrl: "http://user:hunter2@127.0.0.1:9/v1",
      model: "m",
      apiKey: Redacted.make(""),
    })
    assert.isTrue(Result.isFailure(checked))
    assert.isFalse(Result.isFailure(checked) && checked.failure.includes("hunter2"))
  })
})

describe("idle timeout while reading an error body", () => {
  it.effect("is timed_out, not a provider error classified from half a body", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [
          Respond.sse([Respond.raw('{"error":{"message":"over')], {
            status: 503,
            headers: { "content-type": "application/json" },
            end: "stall",
          }),
        ],
      })
      const model = yield* LanguageModel.make(
        { kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make("") },
        { idleTimeoutMs: 1000 },
      )
      const fiber = yield* Effect.forkChild(failureOf(model.stream(request())))
      yield* ScriptedServer.awaitRequest(server, 0)
      yield* advanceUntilDone(fiber, 1000)
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error.reason._tag, "TimedOut")
    }),
  )
})

describe("StepBuilder", () => {
  it("refuses an unknown finish reason", () => {
    const folded = StepBuilder.fold("s", [
      // An adapter never emits this; a hand-written LanguageModel might.
      JSON.parse('{"kind":"finished","reason":"content_filter","usage":{}}'),
    ])
    assert.isTrue(Result.isFailure(folded))
  })
})

describe("observed output", () => {
  it.effect("counts buffered tool-call fragments before an overflow error", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [
          Respond.sse([
            Respond.event({ id: "c", choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "c1", function: { name: "f", arguments: '{"a"' } }] } }] }),
            Respond.event({ error: { message: "too long", code: "context_length_exceeded" } }),
          ]),
        ],
      })
      const model = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make("") })
      const error = yield* failureOf(model.stream(request()))
      assert.strictEqual(error.reason._tag, "ContextOverflow")
      assert.isTrue(error.reason._tag === "ContextOverflow" && error.reason.observedOutput)
    }),
  )
})
