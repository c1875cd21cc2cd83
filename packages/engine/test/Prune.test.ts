/**
 * Prune scenarios of docs/engine.md §5.11 (docs/scenarios.md §6, scenarios 48 and 49): cursor paging
 * reaches a large result behind many small ones, and a history too large to read is archived down to
 * one that fits before the run's first request. Real SQLite files and the scripted server.
 */
import { assert, describe, it } from "@effect/vitest"
import { FactBuilders, History } from "@maka/testkit"
import { Effect } from "effect"
import { ToolCatalog } from "@maka/tools"
import { answer, echoCall, mainEntry } from "./support/compaction.ts"
import { expectFrozenSources, factsOf, kinds } from "./support/harness.ts"
import { catalog, echoTool, input, setup, type Setup } from "./support/setup.ts"

/** Writes one finished old run whose single step called `echo` once per result, each settled with its text. */
const oldRun = (context: Setup, results: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const history = new History.History({ sessionId: "session-1" })
    const run = history.open({ message: "Produce results.", turnId: "old-turn", runId: "old-run", invocationId: "old-invocation" })
    const step = run.request()
    run.complete(step, FactBuilders.toolCallStep(results.map((_, index) => ({ id: `call-${index}`, name: "echo", input: { value: `${index}` } }))))
    results.forEach((text, index) => run.succeed(run.dispatch(step, `call-${index}`), FactBuilders.textOutput(text)))
    run.complete(run.request(), FactBuilders.textStep("Produced."))
    run.end({ kind: "completed" })
    const writes = history.written.map((written) => written.write)
    for (let start = 0; start < writes.length; start += 50) yield* context.log.appendBatch(writes.slice(start, start + 50))
  })

describe("prune", () => {
  it.live("pages past 128 small results to archive the large one behind them (scenario 48)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(answer("Done."))] })
        const large = `LARGE ${"l".repeat(20_000)} TAIL-OF-LARGE`
        yield* oldRun(context, [...Array.from({ length: 128 }, (_, index) => `small ${index}`), large])
        yield* context.engine.run(input(context, "Summarise.", catalog({ ran: [] })))
        const events = yield* context.log.events("session-1", 0, 10_000)
        const archives = factsOf(events, "tool_result_archived")
        assert.strictEqual(archives.length, 1)
        assert.strictEqual(archives[0]!.placeholder.identity.toolCallId, "call-128")
        assert.notInclude(context.server.requests()[0]!.body, "TAIL-OF-LARGE")
      }),
    ),
  )

  it.live("archives a history too large to read until it fits, before the run's first request (scenario 49)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(answer("Done."))] })
        yield* oldRun(context, Array.from({ length: 40 }, (_, index) => `${index}:${"p".repeat(220_000)}`))
        const tooLarge = yield* Effect.flip(context.log.readModelContext("session-1"))
        assert.strictEqual(tooLarge.reason._tag === "Rejected" ? tooLarge.reason.rejection._tag : tooLarge.reason._tag, "PrefixTooLarge")
        const run = input(context, "Go on.", catalog({ ran: [] }))
        const result = yield* context.engine.run(run)
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1", 0, 10_000)
        const own = events.filter((stored) => stored.event.invocation.invocationId === run.invocation.invocationId)
        assert.strictEqual(factsOf(own, "tool_result_archived").length, 40)
        // No summary was needed: pruning alone brought the context within the limits.
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded"), [])
        assert.strictEqual(kinds(own).indexOf("model_requested"), 41)
        yield* context.log.readModelContext("session-1")
        // The request's source re-reads with its archived projection; later archiving would not
        // shrink it, and without the archives the history is too large to read.
        const request = factsOf(own, "model_requested")[0]!
        assert.isDefined(request.effectiveSourceDigest)
        assert.strictEqual(yield* expectFrozenSources(context.log, own), 1)
      }),
    ),
  )

  it.live("a tool batch after more than a page of archived results prunes its own large result (docs/log-format.md §3.9)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // A pass whose cursor never moves would ask for the same page forever: it fails instead.
        let pages = 0
        const context = yield* setup(
          { script: [mainEntry(answer("Done.")), mainEntry(echoCall("call-new", "big")), mainEntry(answer("Read."))] },
          undefined,
          {},
          {
            wrapLog: (log) => ({
              ...log,
              preparePruneCandidates: (sessionId, options) =>
                ++pages > 100 ? Effect.die(new Error("the prune cursor does not move")) : log.preparePruneCandidates(sessionId, options),
            }),
          },
        )
        // 40 results of 220,000 characters: archived by the first run, together over the 4 MiB a
        // prune page charges, so the next pass holds pages without a candidate before the new result.
        yield* oldRun(context, Array.from({ length: 40 }, (_, index) => `${index}:${"p".repeat(220_000)}`))
        const effects = { ran: [] as Array<string> }
        const tools = ToolCatalog.make([echoTool(effects, () => `NEW ${"n".repeat(20_000)} TAIL-OF-NEW`)])
        assert.deepStrictEqual((yield* context.engine.run(input(context, "Go on.", tools))).outcome, { kind: "completed" })
        const again = input(context, "Read it.", tools)
        assert.deepStrictEqual((yield* context.engine.run(again)).outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, ["big"])
        const events = yield* context.log.events("session-1", 0, 10_000)
        const archives = factsOf(events, "tool_result_archived").map((fact) => fact.placeholder.identity.toolCallId)
        assert.strictEqual(archives.length, 41)
        assert.strictEqual(archives[40], "call-new")
        const requests = context.server.requests()
        assert.notInclude(requests[requests.length - 1]!.body, "TAIL-OF-NEW")
      }),
    ),
    60_000,
  )
})
