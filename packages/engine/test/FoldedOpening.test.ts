/**
 * A run's opening rides its first request's commit over the session's kept context only where the
 * engine is the log's one writer (docs/engine.md §5.4 "Kept context"): SQLite. Something else may
 * still append to the session between the engine's check that the context is current and that
 * commit: on SQLite a run appended through the same `EventLog` (a second engine, a host's own
 * append), on PostgreSQL another host. A request built over the kept context would then miss that
 * run, and its evidence would be a digest of no prefix the log holds. Here such a run is sealed
 * exactly then; the next request must show it, its evidence must be the log's prefix digest, and the
 * run must complete. SQLite checks inside the commit and builds the step again; PostgreSQL commits
 * the opening alone first. The PostgreSQL case runs when MAKA_TEST_DATABASE_URL names a server, and
 * is skipped with a printed reason otherwise.
 */
import { assert, describe, it } from "@effect/vitest"
import type { EventLog } from "@maka/event-log"
import { History } from "@maka/testkit"
import { Effect, type Scope } from "effect"
import { answer, mainEntry, summaryAnswer, summaryEntry, summaryText } from "./support/compaction.ts"
import { catalog, databaseUrl, input, setup, sharedPostgresLog } from "./support/setup.ts"

let schemas = 0
const freshSchema = () => `engine_fold_${process.pid}_${Date.now().toString(36)}_${++schemas}`

const OTHER_MESSAGE = "A message another writer's run answered."

/**
 * Two runs of `session-1` on one engine; just before the second run's first commit reaches the log,
 * `other` (or, without it, the engine's own log) seals a whole run of the session. The second run's
 * first request must show that run, and its evidence must be the log's prefix digest.
 */
const foldedOverAnAppend = (
  options: {
    readonly openLog?: Effect.Effect<EventLog.EventLogShape, unknown, Scope.Scope>
    readonly other?: EventLog.EventLogShape
    /** The first run's answer reaches the declared window: the second run starts with a `pre_turn` summary. */
    readonly compacts?: boolean
  } = {},
) =>
  Effect.gen(function* () {
    const { openLog, other, compacts = false } = options
    let armed = false
    let injected: number | undefined
    let folded: boolean | undefined
    const context = yield* setup(
      {
        script: compacts
          ? [mainEntry(answer("One.", 5_000)), summaryEntry(summaryAnswer(summaryText("first turn"))), mainEntry(answer("Two."))]
          : [mainEntry(answer("One.")), mainEntry(answer("Two."))],
      },
      { backoffBaseMs: 5, backoffMaxMs: 40 },
      // One permit: the summary runs in the foreground, before the main request.
      compacts ? { concurrency: 1 } : {},
      {
        ...(openLog === undefined ? {} : { openLog }),
        wrapLog: (log): EventLog.EventLogShape => {
          const appendBatch: EventLog.EventLogShape["appendBatch"] = (writes, complete) =>
            Effect.gen(function* () {
              if (armed && writes.some((write) => write.event.fact.kind === "invocation_opened")) {
                armed = false
                // The first commit of the run carries its opening: with the request it builds (folded), or alone.
                folded = complete !== undefined
                const history = new History.History({ sessionId: "session-1", firstId: 50_000 })
                history.open({ invocationId: "invocation-other", runId: "run-other", turnId: "turn-other", message: OTHER_MESSAGE }).end()
                const sequences = yield* (other ?? log).appendBatch(history.writes)
                injected = sequences.at(-1)
              }
              return yield* log.appendBatch(writes, complete)
            })
          return { ...log, appendBatch, append: (write) => Effect.map(appendBatch([write]), (sequences) => sequences[0]!) }
        },
      },
    )
    const reader = other ?? context.log
    const tools = catalog({ ran: [] })
    const windowed = compacts ? { context: { providerId: "openai-compatible", declaredWindow: 1_000 } } : {}
    const first = yield* context.engine.run(input(context, "First.", tools, windowed))
    assert.deepStrictEqual(first.outcome, { kind: "completed" })
    armed = true
    const second = yield* context.engine.run(input(context, "Second.", tools, windowed))
    assert.deepStrictEqual(second.outcome, { kind: "completed" })
    assert.isDefined(injected, "the other run was not written")
    const events = yield* reader.events("session-1")
    const ofSecond = events.filter((stored) => stored.event.invocation.invocationId === second.invocation.invocationId)
    assert.isAbove(ofSecond[0]!.sequence, injected!, "the other run landed after the opening")
    const request = ofSecond.find((stored) => stored.event.fact.kind === "model_requested" && stored.event.fact.purpose === "main")!.event.fact
    if (request.kind !== "model_requested") throw new Error("no main request of the second run")
    assert.isAtLeast(request.sourceHighWater, ofSecond[0]!.sequence, "the request's source misses the opening")
    // Its evidence is the session's prefix digest at its high water, the other run included.
    const prefix = yield* reader.sessionHash("session-1", request.sourceHighWater)
    assert.strictEqual(request.sourceDigest, prefix.digest(request.sourceHighWater), "the request's evidence is not the log's prefix")
    assert.include(context.server.requests().at(-1)!.body, OTHER_MESSAGE)
    // The run is whole: one opening, one request, one completion, its terminal; nothing failed.
    assert.deepStrictEqual(
      ofSecond.map((stored) => stored.event.fact.kind).filter((kind) => kind !== "model_observed"),
      compacts
        ? ["invocation_opened", "model_requested", "model_completed", "context_checkpoint_recorded", "model_requested", "model_completed", "invocation_ended"]
        : ["invocation_opened", "model_requested", "model_completed", "invocation_ended"],
    )
    return { folded: folded! }
  })

describe("a run's opening and a kept context something else outgrew", () => {
  it.live("SQLite: the opening rides the first request; a run appended through the same log meanwhile sends the step again over a fresh read", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The opening was folded into the request's commit (refused for the stale context, then alone).
        assert.isTrue((yield* foldedOverAnAppend()).folded)
      }),
    ))

  it.live("SQLite: a pre_turn summary commits what the run carries first: the opening alone, then the summary; the main step reads afresh", () =>
    Effect.scoped(
      Effect.gen(function* () {
        assert.isTrue((yield* foldedOverAnAppend({ compacts: true })).folded)
      }),
    ))

  it.live.skipIf(databaseUrl === undefined)(
    "PostgreSQL: the opening commits before the run reads its context; a run another host sealed meanwhile is in the first request",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const url = databaseUrl!
          const schema = freshSchema()
          const other = yield* sharedPostgresLog(url, schema)
          assert.isFalse((yield* foldedOverAnAppend({ openLog: sharedPostgresLog(url, schema), other })).folded)
        }),
      ),
    60_000,
  )
})

if (databaseUrl === undefined) {
  process.stdout.write("note: MAKA_TEST_DATABASE_URL is unset; the PostgreSQL case of FoldedOpening.test.ts does not run here\n")
}
