import { assert, describe, it } from "@effect/vitest"
import { EventWrite } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import { RecordingSink } from "@maka/tools/testing"
import { Effect, Result } from "effect"

const writes = () => {
  const history = new History.History()
  const run = history.open()
  run.request()
  return history.writes
}

describe("RecordingSink", () => {
  it.effect("records writes in commit order and replays an identical write with its first sequence", () =>
    Effect.gen(function* () {
      const [opening, request] = writes()
      const recording = yield* RecordingSink.make({ firstSequence: 10 })
      assert.strictEqual(yield* recording.sink.commit(opening!), 10)
      assert.strictEqual(yield* recording.sink.commit(request!), 11)
      assert.strictEqual(yield* recording.sink.commit(opening!), 10)
      assert.deepStrictEqual(yield* recording.sink.commitBatch([request!, opening!]), [11, 10])
      assert.deepStrictEqual(
        (yield* recording.records).map((record) => [record.sequence, record.write.event.fact.kind]),
        [
          [10, "invocation_opened"],
          [11, "model_requested"],
        ],
      )
      assert.strictEqual(yield* recording.commitCalls, 4)
    }),
  )

  it.effect("refuses a different body under a used event id", () =>
    Effect.gen(function* () {
      const [opening] = writes()
      const recording = yield* RecordingSink.make()
      yield* recording.sink.commit(opening!)
      const other = Result.getOrThrow(
        EventWrite.plain({ ...opening!.event, invocation: FactBuilders.invocation({ invocationId: "other" }) }),
      )
      const error = yield* Effect.flip(recording.sink.commit(other))
      assert.strictEqual(error.kind, "rejected")
      assert.include(error.reason, "EventConflict")
    }),
  )

  it.effect("fails the chosen commits, all or nothing, and can lose the acknowledgement of a persisted one", () =>
    Effect.gen(function* () {
      const [opening, request] = writes()
      const recording = yield* RecordingSink.make({
        faults: [
          { commit: 1, kind: "rejected", reason: "refused" },
          { commit: 2, kind: "outcome_unknown" },
          { commit: 3, kind: "outcome_unknown", persisted: true },
        ],
      })
      const first = yield* Effect.flip(recording.sink.commitBatch([opening!, request!]))
      assert.deepInclude(first, { kind: "rejected", reason: "refused" })
      assert.strictEqual((yield* Effect.flip(recording.sink.commit(opening!))).kind, "outcome_unknown")
      assert.deepStrictEqual(yield* recording.events, [])
      assert.strictEqual((yield* Effect.flip(recording.sink.commit(opening!))).kind, "outcome_unknown")
      assert.deepStrictEqual((yield* recording.events).map((event) => event.id), [opening!.event.id])
      assert.strictEqual(yield* recording.sink.commit(opening!), 1)
      assert.strictEqual(yield* recording.commitCalls, 4)
    }),
  )
})
