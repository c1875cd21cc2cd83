/**
 * Ids that must be unique across the whole log, not only within a session (docs/log-format.md §3.3):
 * a continuation's claim id already taken by another session's opening is refused `InvalidTransition`
 * (the store's unique index is the rule here: the session's own reads cannot see another session's
 * claims), nothing is written, and both sessions stay usable. On every dialect; on SQLite this is the
 * writer's mapping of a unique-index violation met on insert.
 */
import { Digest } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import type * as EventLog from "../src/EventLog.ts"
import { dialects } from "./support/dialects.ts"
import { appendAll, expectRefused, withLog, write } from "./support/harness.ts"

/** The continuation of `session`'s sealed `run-1` under `claimId`. */
const continuation = (log: EventLog.EventLogShape, history: History.History, claimId: string) =>
  Effect.gen(function* () {
    const sessionId = history.sessionId
    const source = (yield* log.runPrefix(sessionId, history.events[0]!.event.invocation.runId))!
    const opening = history.events[0]!.event.fact
    if (opening.kind !== "invocation_opened") throw new Error("expected an opening")
    return write(
      { sessionId, turnId: `${sessionId}-turn-c`, runId: `${sessionId}-run-c`, invocationId: `${sessionId}-invocation-c` },
      {
        kind: "invocation_opened",
        configuration: opening.configuration,
        input: {
          kind: "continuation",
          requestFingerprint: FactBuilders.digestOf(`fingerprint-${sessionId}`),
          claim: {
            id: claimId,
            source: { invocation: source.invocation, highWater: source.highWater, digest: source.digest },
            base: { highWater: 0, digest: Digest.logPrefix({ kind: "session", id: sessionId }, [], 0) },
            replay: { version: 1, digest: FactBuilders.digestOf("replay"), routeIdentity: FactBuilders.digestOf("route") },
          },
        },
      },
    )
  })

for (const dialect of dialects()) {
  describe(`ids unique across sessions on ${dialect.name}`, () => {
    it("refuses a claim id another session's opening holds, writes nothing, and both sessions go on", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const first = History.smallRun()
          const second = new History.History({ sessionId: "session-2", firstId: 500 })
          const run = second.open({ invocationId: "invocation-2", runId: "run-2", turnId: "turn-2" })
          run.complete(run.request(), FactBuilders.textStep("done"))
          run.end({ kind: "completed" })
          yield* appendAll(log, first.writes)
          yield* appendAll(log, second.writes)
          yield* log.append(yield* continuation(log, first, "claim-shared"))
          // SQLite's writer checks the session from memory, and its unique index backs the rule; PostgreSQL
          // reports the index it met.
          const text = dialect.name === "sqlite" ? "an id of this write is already used in the log" : "unique index refused the write"
          yield* expectRefused(log, "session-2", log.append(yield* continuation(log, second, "claim-shared")), "InvalidTransition", text)
          // The refused session takes a claim of its own; the first one goes on.
          const own = yield* continuation(log, second, "claim-own")
          yield* log.append(own)
          expect((yield* log.events("session-2")).at(-1)?.event.id).toBe(own.event.id)
        }),
      ))
  })
}
