/**
 * The seal's batch (docs/engine.md §5.4, durability points): a run that completes carries its last
 * settlement into the terminal's commit, so a `finish_turn` call's `tool_settled` and the
 * `invocation_ended` land in one transaction; only a run that did not complete makes what it carries
 * durable on its own before it reads its state. A paused run seals at the settled boundary its
 * preflight checked: it reads no recovery state either, and runs no epilogue check. Real SQLite file, the scripted server on loopback;
 * the log is wrapped to record each batch it is asked to commit.
 */
import { assert, describe, it } from "@effect/vitest"
import type { EventLog } from "@maka/event-log"
import { OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Deferred, Effect, Fiber, Schema } from "effect"
import { kinds } from "./support/harness.ts"
import { input, setup } from "./support/setup.ts"

/**
 * A log that records the fact kinds of each batch it is asked to commit into `batches`, and counts
 * its reads of an invocation's recovery state in `recoveryReads`.
 */
const recordingBatches = (batches: Array<ReadonlyArray<string>>, recoveryReads = { count: 0 }, epilogueChecks = { count: 0 }) => ({
  wrapLog: (log: EventLog.EventLogShape): EventLog.EventLogShape => ({
    ...log,
    checkHistorySafety: (sessionId, options) => {
      if (options?.current !== undefined) epilogueChecks.count++
      return log.checkHistorySafety(sessionId, options)
    },
    appendBatch: (writes, complete) => {
      batches.push(writes.map((write) => write.event.fact.kind))
      return log.appendBatch(writes, complete)
    },
    invocationRecovery: (invocation, maxEvents, maxBytes) => {
      recoveryReads.count++
      return log.invocationRecovery(invocation, maxEvents, maxBytes)
    },
  }),
})

/** A call of `slow`, and the tool: it signals `started`, waits for `release`, then answers. */
const slowCall = Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "slow", arguments: ['{"note":"n"}'] }] }))
const slowTool = (started: Deferred.Deferred<void>, release: Deferred.Deferred<void>) =>
  Tool.make({
    name: "slow",
    description: "Waits until released.",
    input: Schema.Struct({ note: Schema.String }),
    semantics: "parallel",
    execute: () => Effect.andThen(Deferred.succeed(started, undefined), Effect.as(Deferred.await(release), Tool.text("done"))),
  })

describe("the seal of a completed run", () => {
  it.live("commits a finish_turn call's settlement with the terminal, in one batch, reading no recovery state", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const batches: Array<ReadonlyArray<string>> = []
        const recoveryReads = { count: 0 }
        const context = yield* setup(
          { script: [Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "finish", arguments: ['{"note":"n"}'] }] }))] },
          undefined,
          {},
          recordingBatches(batches, recoveryReads),
        )
        const finish = Tool.make({
          name: "finish",
          description: "Ends the turn.",
          input: Schema.Struct({ note: Schema.String }),
          semantics: "finish_turn",
          execute: () => Effect.succeed(Tool.text("finished")),
        })
        const result = yield* context.engine.run(input(context, "Finish.", ToolCatalog.make([finish])))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(batches.at(-1), ["tool_settled", "invocation_ended"])
        assert.strictEqual(batches.filter((batch) => batch.includes("tool_settled")).length, 1)
        // A completed run resolved everything it started: the seal has nothing to read.
        assert.strictEqual(recoveryReads.count, 0)
      }),
    ))
})

describe("the seal of a cancelled run", () => {
  it.live("commits the settlement it carries before it reads its state, and seals cancelled over a settled call", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const batches: Array<ReadonlyArray<string>> = []
        const context = yield* setup(
          { script: [slowCall] },
          undefined,
          {},
          recordingBatches(batches),
        )
        const started = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const slow = slowTool(started, release)
        const running = yield* context.engine.start(input(context, "Run it.", ToolCatalog.make([slow])))
        yield* Deferred.await(started)
        yield* running.cancel
        yield* Deferred.succeed(release, undefined)
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        assert.deepStrictEqual(kinds(yield* context.log.events("session-1")).slice(3), [
          "tool_dispatched",
          "tool_settled:succeeded",
          "invocation_ended:cancelled",
        ])
        assert.deepStrictEqual(batches.slice(-2), [["tool_settled"], ["invocation_ended"]])
      }),
    ))
})

describe("the seal of a paused run", () => {
  it.live("seals the pause at the boundary its preflight checked, reading no recovery state", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const batches: Array<ReadonlyArray<string>> = []
        const recoveryReads = { count: 0 }
        const epilogueChecks = { count: 0 }
        const context = yield* setup(
          { script: [slowCall] },
          undefined,
          {},
          recordingBatches(batches, recoveryReads, epilogueChecks),
        )
        const started = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const slow = slowTool(started, release)
        const running = yield* context.engine.start(input(context, "Slow.", ToolCatalog.make([slow]), { maxSteps: 4 }))
        yield* Deferred.await(started)
        const requested = yield* Effect.forkChild(running.handoff)
        yield* Effect.sleep("20 millis")
        yield* Deferred.succeed(release, undefined)
        const pause = yield* Fiber.join(requested)
        assert.isDefined(pause)
        assert.strictEqual((yield* running.wait).outcome.kind, "handoff_paused")
        assert.strictEqual(kinds(yield* context.log.events("session-1")).at(-1), "invocation_ended:handoff_paused")
        assert.strictEqual(recoveryReads.count, 0)
        // A pause is no end of the run's work: the epilogue's history check is for a run that answered.
        assert.strictEqual(epilogueChecks.count, 0)
      }),
    ))
})
