/**
 * A standalone compaction whose checkpoint-and-terminal commit may have landed (docs/engine.md §5.12
 * "Standalone", docs/engine.md §5.4): the invocation is not sealed over a batch in doubt; it fails `Commit`, and the
 * engine seals it `failed {event_commit}` by a commit of its own at once (docs/engine.md §5.3 step 8); the next run goes on.
 * Real SQLite file, the scripted server on loopback; the log answers that one batch as uncertain.
 * Likewise a message run whose background summary, drained at its end, commits with an unknown
 * outcome (docs/engine.md §5.3 step 8): it is sealed from what the log holds, never `completed`.
 * And a run cancelled while its background summary runs, whose first interruption commit is in
 * doubt: the commit error outranks the cancellation, and the seal closes the other open request.
 */
import { assert, describe, it } from "@effect/vitest"
import { EventLogError, type EventLog } from "@maka/event-log"
import { FactBuilders, Respond } from "@maka/testkit"
import { ToolCatalog } from "@maka/tools"
import { Effect } from "effect"
import * as EngineError from "../src/EngineError.ts"
import { answer, echoCall, mainEntry, stalledSummary, summaryAnswer, summaryEntry, summaryText } from "./support/compaction.ts"
import { drainedSummaryFaulted, faulty, type Faulty } from "./support/faults.ts"
import { factsOf, kinds } from "./support/harness.ts"
import { catalog, input, setup, type Effects } from "./support/setup.ts"

describe("a standalone compaction whose final commit is uncertain", () => {
  it.live("is sealed failed event_commit by a commit of its own at once, and resolves with that terminal; the next run goes on", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          { script: [mainEntry(answer("Hello.")), summaryEntry(summaryAnswer(summaryText("greeting"))), mainEntry(answer("Again."))] },
          undefined,
          {},
          {
            wrapLog: (log): EventLog.EventLogShape => ({
              ...log,
              appendBatch: (writes, complete) =>
                writes.some((write) => write.event.fact.kind === "context_checkpoint_recorded")
                  ? Effect.fail(EventLogError.make({ _tag: "OutcomeUnknown", message: "the connection closed during COMMIT (injected)" }))
                  : log.appendBatch(writes, complete),
            }),
          },
        )
        const tools = ToolCatalog.make([])
        yield* context.engine.run(input(context, "Hi.", tools))
        const invocation = FactBuilders.invocation({ turnId: "compact-turn", runId: "compact-run", invocationId: "compact-invocation" })
        const compacted = yield* context.engine.compact({
          invocation,
          model: context.model,
          configuration: FactBuilders.configuration({ cwd: context.workspace, model: FactBuilders.modelBinding({ model: "test-model" }) }),
        })
        // The checkpoint's commit failed with its outcome unknown: the log's terminal is told, not the failed commit.
        assert.deepStrictEqual(compacted.outcome, { kind: "failed", class: "event_commit", message: EngineError.SEALED_LATER_MESSAGE })
        const own = (yield* context.log.events("session-1")).filter((stored) => stored.event.invocation.invocationId === invocation.invocationId)
        assert.deepStrictEqual(kinds(own), ["invocation_opened", "model_requested", "model_completed", "invocation_ended:failed:event_commit"])

        const next = yield* context.engine.run(input(context, "Again.", tools))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        const sealed = events.filter((stored) => stored.event.invocation.invocationId === invocation.invocationId)
        assert.deepStrictEqual(kinds(sealed).at(-1), "invocation_ended:failed:event_commit")
        const terminal = factsOf(sealed, "invocation_ended")[0]!
        assert.strictEqual(terminal.outcome.kind === "failed" ? terminal.outcome.message : undefined, EngineError.SEALED_LATER_MESSAGE)
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded"), [])
      }),
    ))

})

describe("a message run whose background summary's last commit is uncertain", () => {
  it.live("is sealed from what landed, not completed", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const effects: Effects = { ran: [] }
        // The drain's commit, which carries the answer's completion, is lost; its caller is told the outcome is unknown.
        const { context, faults } = yield* drainedSummaryFaulted("unknown-lost", [answer("Done."), answer("Again.")])
        const result = yield* context.engine.run(
          input(context, "Echo, then answer.", catalog(effects), {
            context: { providerId: "provider-1", modelContextWindow: 20_000, declaredWindow: 6_000 },
          }),
        )
        assert.isTrue(faults.fired(), faults.labels.join(" "))
        // Not `completed`: the answer's completion never landed. The seal read the log and closed what was open.
        assert.strictEqual(result.outcome.kind === "failed" ? result.outcome.class : result.outcome.kind, "event_commit")
        assert.deepStrictEqual((yield* context.log.unfinishedInvocations(10)), [])
        const next = yield* context.engine.run(input(context, "Again.", ToolCatalog.make([])))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
      }),
    ))
})

describe("a run cancelled while its background summary runs, whose drain commit is uncertain", () => {
  it.live("ends failed event_commit, resolved from what the log holds, and the session goes on", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const effects: Effects = { ran: [] }
        const held = Respond.gate()
        let faults: Faulty | undefined
        const context = yield* setup(
          {
            script: [
              stalledSummary("never"),
              mainEntry(echoCall("call-1", "a", 6_000)),
              mainEntry(Respond.hold(held, answer("never shown"))),
              mainEntry(answer("Again.")),
            ],
          },
          undefined,
          { concurrency: 2 },
          {
            wrapLog: (log) => {
              faults = faulty(log, "model_interrupted#1", "unknown-landed")
              return faults.log
            },
          },
        )
        const running = yield* context.engine.start(
          input(context, "Echo, then answer.", catalog(effects), {
            context: { providerId: "provider-1", modelContextWindow: 20_000, declaredWindow: 6_000 },
          }),
        )
        // The background summary and the second main step are both in flight when the run is cancelled.
        while (context.server.requests().length < 3) yield* Effect.sleep("5 millis")
        yield* running.cancel
        const result = yield* running.wait
        // The first interruption the cancellation commits lands, but its caller is told the outcome is unknown.
        assert.isTrue(faults!.fired(), faults!.labels.join(" "))
        // A commit in doubt outranks the cancellation (docs/engine.md §5.4): the seal read what landed.
        assert.deepStrictEqual(result.outcome, {
          kind: "failed",
          class: "event_commit",
          message: "commit outcome unknown: the connection dropped during COMMIT (injected)",
        })
        const own = yield* context.log.events("session-1")
        // The interruption that landed, and the other request the seal closed from the log.
        assert.deepStrictEqual(kinds(own).filter((kind) => kind.startsWith("model_interrupted")), ["model_interrupted:cancelled", "model_interrupted:failed"])
        assert.deepStrictEqual(effects.ran, ["a"])
        assert.deepStrictEqual(yield* context.log.unfinishedInvocations(10), [])
        held.release()
        const next = yield* context.engine.run(input(context, "Again.", ToolCatalog.make([])))
        assert.strictEqual(next.outcome.kind, "completed")
      }),
    ))
})
