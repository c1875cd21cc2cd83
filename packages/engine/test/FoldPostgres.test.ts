/**
 * A run's opening rides its first request's commit only where the engine is the log's one writer
 * (docs/engine.md §5.3, docs/architecture.md §12): on SQLite. On PostgreSQL another host may append
 * to the session between the engine's check that its kept context is current and that commit, and
 * the store does not ask a request to cover the session's newest events; a folded request would then
 * be built from a context that misses them, its evidence a digest of no prefix the log holds. Here a
 * second host seals a whole run on the session exactly then: the first host's next request must
 * still show it, and its evidence must be the log's prefix digest. Runs when MAKA_TEST_DATABASE_URL
 * names a server, and is skipped with a printed reason otherwise.
 */
import { assert, describe, it } from "@effect/vitest"
import type { EventLog } from "@maka/event-log"
import { History } from "@maka/testkit"
import { Effect } from "effect"
import { answer, mainEntry } from "./support/compaction.ts"
import { catalog, databaseUrl, input, setup, sharedPostgresLog } from "./support/setup.ts"

let schemas = 0
const freshSchema = () => `engine_fold_${process.pid}_${Date.now().toString(36)}_${++schemas}`


const OTHER_HOST_MESSAGE = "A message another host's run answered."

describe("a run's opening on PostgreSQL", () => {
  it.live.skipIf(databaseUrl === undefined)(
    "commits before the run reads its context: a run another host sealed meanwhile is in the first request",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const url = databaseUrl!
          const schema = freshSchema()
          const other = yield* sharedPostgresLog(url, schema)
          // Armed for the second run: the other host seals a run of the session just before the
          // first write of that run reaches the log.
          let armed = false
          let injected: number | undefined
          const context = yield* setup(
            { script: [mainEntry(answer("One.")), mainEntry(answer("Two."))] },
            { backoffBaseMs: 5, backoffMaxMs: 40 },
            {},
            {
              openLog: sharedPostgresLog(url, schema),
              wrapLog: (log): EventLog.EventLogShape => ({
                ...log,
                appendBatch: (writes, complete) =>
                  Effect.gen(function* () {
                    if (armed && writes.some((write) => write.event.fact.kind === "invocation_opened")) {
                      armed = false
                      const history = new History.History({ sessionId: "session-1", firstId: 50_000 })
                      history.open({ invocationId: "invocation-other", runId: "run-other", turnId: "turn-other", message: OTHER_HOST_MESSAGE }).end()
                      const sequences = yield* other.appendBatch(history.writes)
                      injected = sequences.at(-1)
                    }
                    return yield* log.appendBatch(writes, complete)
                  }),
                append: (write) => Effect.map(log.appendBatch([write]), (sequences) => sequences[0]!),
              }),
            },
          )
          assert.strictEqual(context.log.dialect, "postgres")
          const tools = catalog({ ran: [] })
          const first = yield* context.engine.run(input(context, "First.", tools))
          assert.deepStrictEqual(first.outcome, { kind: "completed" })
          armed = true
          const second = yield* context.engine.run(input(context, "Second.", tools))
          assert.deepStrictEqual(second.outcome, { kind: "completed" })
          assert.isDefined(injected, "the other host's run was not written")
          const events = yield* other.events("session-1")
          const opening = events.find((stored) => stored.event.invocation.invocationId === second.invocation.invocationId)!
          assert.isAbove(opening.sequence, injected!, "the other host's run landed after the opening")
          const request = events.find(
            (stored) => stored.event.invocation.invocationId === second.invocation.invocationId && stored.event.fact.kind === "model_requested",
          )!.event.fact
          if (request.kind !== "model_requested") throw new Error("no request of the second run")
          assert.isAtLeast(request.sourceHighWater, opening.sequence, "the request's source misses the opening")
          // Its evidence is the session's prefix digest at its high water, the other host's run included.
          const prefix = yield* other.sessionHash("session-1", request.sourceHighWater)
          assert.strictEqual(request.sourceDigest, prefix.digest(request.sourceHighWater), "the request's evidence is not the log's prefix")
          assert.include(context.server.requests().at(-1)!.body, OTHER_HOST_MESSAGE)
        }),
      ),
    60_000,
  )
})

if (databaseUrl === undefined) {
  process.stdout.write("note: MAKA_TEST_DATABASE_URL is unset; FoldPostgres.test.ts does not run here\n")
}
