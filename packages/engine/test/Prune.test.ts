/**
 * Prune scenarios of docs/engine.md §5.11 (docs/scenarios.md §6, scenarios 48 and 49): cursor paging
 * reaches a large result behind many small ones, and a history too large to read is archived down to
 * one that fits before the run's first request. Real SQLite files and the scripted server.
 */
import { assert, describe, it } from "@effect/vitest"
import { FactBuilders, History, OpenAiSse, Respond } from "@maka/testkit"
import { Deferred, Effect, Schema } from "effect"
import { EventLogError } from "@maka/event-log"
import { Tool, ToolCatalog } from "@maka/tools"
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

/** A tool that starts, waits for `release`, then returns a result over one page. */
const slowTool = (started: Deferred.Deferred<void>, release: Deferred.Deferred<void>) =>
  Tool.make({
    name: "slow",
    description: "Waits until released.",
    input: Schema.Struct({ value: Schema.String }),
    semantics: "parallel",
    execute: () =>
      Effect.gen(function* () {
        yield* Deferred.succeed(started, undefined)
        yield* Deferred.await(release)
        return Tool.text(`BIG ${"b".repeat(20_000)} TAIL-OF-BIG`)
      }),
  })

/**
 * After a run that left `call-1`'s result over one page unarchived (a pass it owed), the session's
 * next run in the same engine archives it before its request, which never carries it whole.
 */
const paysOwedPrune = (context: Setup, tools: ToolCatalog.ToolCatalog) =>
  Effect.gen(function* () {
    assert.deepStrictEqual(factsOf(yield* context.log.events("session-1"), "tool_result_archived"), [])
    const next = yield* context.engine.run(input(context, "What happened?", tools))
    assert.deepStrictEqual(next.outcome, { kind: "completed" })
    const archives = factsOf(yield* context.log.events("session-1"), "tool_result_archived")
    assert.deepStrictEqual(archives.map((fact) => fact.placeholder.identity.toolCallId), ["call-1"])
    const requests = context.server.requests()
    assert.notInclude(requests[requests.length - 1]!.body, "TAIL-OF-BIG")
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

  it.live("a batch that settled a result over one page in a cancelled run owes its prune to the session's next run in the same process", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            mainEntry(
              Respond.sse(
                OpenAiSse.response({
                  toolCalls: [
                    { id: "call-1", name: "slow", arguments: ['{"value":"first"}'] },
                    { id: "call-2", name: "echo", arguments: ['{"value":"second"}'] },
                  ],
                }),
              ),
            ),
            mainEntry(answer("It was cancelled.")),
          ],
        })
        const started = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const tools = ToolCatalog.make([slowTool(started, release), echoTool({ ran: [] })])
        const running = yield* context.engine.start(input(context, "Run both.", tools))
        yield* Deferred.await(started)
        yield* running.cancel
        yield* Deferred.succeed(release, undefined)
        assert.strictEqual((yield* running.wait).outcome.kind, "cancelled")
        // The slow call settled its large result; the other was not dispatched after the cancellation.
        const settled = factsOf(yield* context.log.events("session-1"), "tool_settled")
        assert.deepStrictEqual(settled.map((fact) => fact.outcome.kind), ["succeeded"])
        yield* paysOwedPrune(context, tools)
      }),
    ),
  )

  it.live("a prune pass the run's cancellation stopped is owed to the session's next run in the same process", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The first page of the pass after the batch is read; the run is cancelled before its archive commits.
        const reading = yield* Deferred.make<void>()
        const cancelled = yield* Deferred.make<void>()
        let pages = 0
        const context = yield* setup(
          { script: [mainEntry(echoCall("call-1", "big")), mainEntry(answer("It was cancelled."))] },
          undefined,
          {},
          {
            wrapLog: (log) => ({
              ...log,
              preparePruneCandidates: (sessionId, options) =>
                Effect.gen(function* () {
                  if (++pages === 1) {
                    yield* Deferred.succeed(reading, undefined)
                    yield* Deferred.await(cancelled)
                  }
                  return yield* log.preparePruneCandidates(sessionId, options)
                }),
            }),
          },
        )
        const tools = ToolCatalog.make([echoTool({ ran: [] }, () => `BIG ${"b".repeat(20_000)} TAIL-OF-BIG`)])
        const running = yield* context.engine.start(input(context, "Read it.", tools))
        yield* Deferred.await(reading)
        yield* running.cancel
        yield* Deferred.succeed(cancelled, undefined)
        assert.strictEqual((yield* running.wait).outcome.kind, "cancelled")
        yield* paysOwedPrune(context, tools)
      }),
    ),
  )

  it.live("a prune pass a store error stopped is owed to the session's next run in the same process", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The pass after the batch fails at its first page: the run fails, and its kept context owes the pass.
        let pages = 0
        const context = yield* setup(
          { script: [mainEntry(echoCall("call-1", "big")), mainEntry(answer("It failed."))] },
          undefined,
          {},
          {
            wrapLog: (log) => ({
              ...log,
              preparePruneCandidates: (sessionId, options) =>
                ++pages === 1
                  ? Effect.fail(EventLogError.make({ _tag: "Database", message: "disk I/O error (injected)" }))
                  : log.preparePruneCandidates(sessionId, options),
            }),
          },
        )
        const tools = ToolCatalog.make([echoTool({ ran: [] }, () => `BIG ${"b".repeat(20_000)} TAIL-OF-BIG`)])
        const failed = yield* context.engine.run(input(context, "Read it.", tools))
        assert.strictEqual(failed.outcome.kind === "failed" && failed.outcome.class, "event_store")
        yield* paysOwedPrune(context, tools)
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
