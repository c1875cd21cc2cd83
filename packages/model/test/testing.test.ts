import { assert, describe, it } from "@effect/vitest"
import { Effect, Option, Result, Stream } from "effect"
import { LanguageModel, ModelError, StepBuilder } from "@maka/model"
import * as FakeModel from "@maka/model/testing"
import { collect, request } from "./support.ts"

describe("@maka/model/testing", () => {
  it.effect("answers each call with the next scripted response and records the requests", () =>
    Effect.gen(function* () {
      const fake = FakeModel.make([
        FakeModel.textResponse("Hello"),
        FakeModel.toolCallResponse([{ id: "c1", name: "read_file", input: { path: "a" } }]),
        FakeModel.failure(ModelError.provider({ reason: "rate_limit", message: "slow down", replaySafe: true, retryAfterMs: 10 })),
      ])
      const first = yield* collect(fake.stream(request()))
      assert.deepStrictEqual(Result.getOrUndefined(StepBuilder.fold("s", first.events))?.parts, [
        { kind: "text", textKind: "text", text: "Hello" },
      ])
      const second = yield* collect(fake.stream(request({ maxOutputTokens: 9 })))
      assert.strictEqual(Result.getOrUndefined(StepBuilder.fold("s", second.events))?.finishReason, "tool-calls")
      const third = yield* collect(fake.stream(request()))
      assert.strictEqual(third.error?.isRetryable, true)
      const fourth = yield* collect(fake.stream(request()))
      assert.strictEqual(fourth.error?.reason._tag, "Adapter")
      assert.deepStrictEqual(fake.requests().map((sent) => sent.maxOutputTokens), [256, 9, 256, 256])
    }),
  )

  it.effect("provides LanguageModel through a layer", () =>
    Effect.gen(function* () {
      const model = yield* LanguageModel.LanguageModel
      const events = yield* Stream.runCollect(model.stream(request()))
      assert.strictEqual(events[events.length - 1]?.kind, "finished")
      assert.isTrue(Option.isSome(yield* model.tryReserveBackground))
    }).pipe(Effect.provide(FakeModel.layer([FakeModel.textResponse("hi")]))),
  )
})
