/**
 * A run under the prior-unknown policy over a history past the read limits (docs/engine.md §5.3
 * step 6, docs/engine.md §5.12): the opening's fit passes (pruning, then compaction) are not tried under that
 * policy, so the run fails `event_store` at its context read, sending nothing and writing no archive
 * or checkpoint. The history is written with the testkit's builder into a real SQLite log.
 */
import { assert, describe, it } from "@effect/vitest"
import { EventLogError } from "@maka/event-log"
import { Limits } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import { ToolCatalog } from "@maka/tools"
import { Effect } from "effect"
import { factsOf, kinds } from "./support/harness.ts"
import { input, setup } from "./support/setup.ts"

describe("a prior-unknown run over a history past the read limits", () => {
  it.live("fails event_store without fitting the history, sending nothing", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [] })
        const history = new History.History({ sessionId: "session-1" })
        // A run that left an unknown outcome, a large result, then turns of 450 KB answers, past the 8 MiB a read takes.
        const unsure = history.open({ message: "Deploy.", turnId: "unsure-turn", runId: "unsure-run", invocationId: "unsure-invocation" })
        const step = unsure.request()
        unsure.complete(step, FactBuilders.toolCallStep([{ id: "call-1", name: "deploy", input: { target: "prod" } }]))
        unsure.dispatch(step, "call-1")
        unsure.end({ kind: "failed", class: "outcome_unknown", message: "the deploy host stopped answering" })
        // A result of several pages, never archived: what a fit pass would prune first.
        const dump = history.open({ message: "Dump.", turnId: "dump-turn", runId: "dump-run", invocationId: "dump-invocation" })
        const dumpStep = dump.request()
        dump.complete(dumpStep, FactBuilders.toolCallStep([{ id: "call-d", name: "dump", input: {} }]))
        dump.succeed(dump.dispatch(dumpStep, "call-d"), FactBuilders.textOutput(`START ${"r".repeat(30_000)} END`))
        dump.complete(dump.request(), FactBuilders.textStep("Dumped."))
        dump.end({ kind: "completed" })
        const bulk = "b".repeat(450_000)
        const turns = Math.ceil(Limits.MAX_HISTORY_BYTES / 450_000) + 1
        for (let turn = 0; turn < turns; turn++) {
          const run = history.open({ message: `Turn ${turn}.`, turnId: `old-turn-${turn}`, runId: `old-run-${turn}`, invocationId: `old-invocation-${turn}` })
          run.complete(run.request(), FactBuilders.textStep(`Answer ${turn}: ${bulk}`))
          run.end({ kind: "completed" })
        }
        const writes = history.written.map((written) => written.write)
        for (let start = 0; start < writes.length; start += 20) yield* context.log.appendBatch(writes.slice(start, start + 20))

        const run = input(context, "Go on.", ToolCatalog.make([]), { allowPriorUnknown: true })
        const result = yield* context.engine.run(run)
        // The read's own refusal, not one of a fit pass (the gate of a prune, say).
        assert.deepStrictEqual(result.outcome, { kind: "failed", class: "event_store", message: EventLogError.prefixTooLarge().message })
        assert.strictEqual(context.server.requests().length, 0)
        const own = (yield* context.log.events("session-1", writes.length, 100)).filter(
          (stored) => stored.event.invocation.invocationId === run.invocation.invocationId,
        )
        assert.deepStrictEqual(kinds(own), ["invocation_opened", "invocation_ended:failed:event_store"])
        assert.deepStrictEqual(factsOf(own, "tool_result_archived"), [])
      }),
    ),
  60_000)
})
