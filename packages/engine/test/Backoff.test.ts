import { assert, describe, it } from "@effect/vitest"
import * as LogTesting from "@maka/event-log/testing"
import { FactBuilders } from "@maka/testkit"
import { ModelError } from "@maka/model"
import * as FakeModel from "@maka/model/testing"
import { Ids, ToolCatalog } from "@maka/tools"
import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import * as Engine from "../src/Engine.ts"

/** The retry schedule of docs/engine.md §5.6 on `TestClock`: exact delays, no real sleeping. */

const rateLimited = (retryAfterMs?: number) =>
  FakeModel.failure(
    ModelError.provider({
      reason: "rate_limit",
      message: "slow down",
      status: 429,
      replaySafe: true,
      ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
    }),
  )

const startRun = (model: FakeModel.FakeLanguageModel) =>
  Effect.gen(function* () {
    const { log } = yield* LogTesting.makeTemporary()
    const engine = yield* Engine.make().pipe(
      Effect.provideService(LogTesting.EventLog.EventLog, log),
      Effect.provide(Ids.layer),
    )
    const running = yield* engine.start({
      invocation: FactBuilders.invocation(),
      model,
      configuration: FactBuilders.configuration({ model: FactBuilders.modelBinding({ model: model.model }) }),
      message: { text: "Answer." },
      tools: ToolCatalog.make([]),
    })
    return { running, log }
  })

/** Lets every ready fiber run, then reports how many requests the model has received. */
const requestsAfter = (model: FakeModel.FakeLanguageModel, millis: number) =>
  Effect.gen(function* () {
    yield* TestClock.adjust(millis)
    for (let round = 0; round < 50; round++) yield* Effect.yieldNow
    return model.requests().length
  })

describe("physical retries on TestClock", () => {
  it.effect("re-sends after exactly the Retry-After delay (scenario 22)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const model = FakeModel.make([rateLimited(1_500), FakeModel.textResponse("done")])
        const { running } = yield* startRun(model)
        assert.strictEqual(yield* requestsAfter(model, 0), 1)
        assert.strictEqual(yield* requestsAfter(model, 1_499), 1)
        assert.strictEqual(yield* requestsAfter(model, 1), 2)
        const result = yield* Fiber.join(yield* Effect.forkChild(running.wait))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
      }),
    ))

  it.effect("without Retry-After waits 1 s plus at most 25 % jitter, then doubles", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const model = FakeModel.make([rateLimited(), rateLimited(), FakeModel.textResponse("done")])
        const { running } = yield* startRun(model)
        assert.strictEqual(yield* requestsAfter(model, 0), 1)
        assert.strictEqual(yield* requestsAfter(model, 999), 1)
        assert.strictEqual(yield* requestsAfter(model, 251), 2)
        assert.strictEqual(yield* requestsAfter(model, 1_999 - 250), 2)
        assert.strictEqual(yield* requestsAfter(model, 2_500 - 1_999 + 250), 3)
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
      }),
    ))
})
