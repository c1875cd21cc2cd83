/**
 * `sessionSummaries` (docs/log-format.md §3.10): every session in the order of its first event, its
 * events and invocations counted, its unsealed openings, and the dispatches of runs sealed
 * `outcome_unknown` that nothing settled.
 */
import { FactBuilders, History } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { dialects } from "./support/dialects.ts"
import { appendAll, failure, withLog, withSqliteFile } from "./support/harness.ts"

/**
 * Three runs: one that settled its call, one sealed `outcome_unknown` with one of its two calls
 * settled, and one live with a call dispatched.
 */
const unknownSession = () => {
  const history = new History.History({ sessionId: "zeta" })
  const first = history.open()
  const step = first.request()
  first.complete(step, FactBuilders.toolCallStep([{ id: "a", name: "read_file", input: { path: "README.md" } }]))
  first.succeed(first.dispatch(step, "a"), FactBuilders.textOutput("# Project"))
  first.complete(first.request(), FactBuilders.textStep("read"))
  first.end()
  const second = history.open({ message: "Write both." })
  const writes = second.request()
  second.complete(
    writes,
    FactBuilders.toolCallStep([
      { id: "b", name: "write_file", input: { path: "x" } },
      { id: "c", name: "write_file", input: { path: "y" } },
    ]),
  )
  second.succeed(second.dispatch(writes, "b"), FactBuilders.textOutput("written"))
  second.dispatch(writes, "c")
  second.end({ kind: "failed", class: "outcome_unknown", message: "the tool's outcome is unknown" })
  // A third run, live, with a call dispatched and not settled yet: open, not unknown.
  const third = history.open({ message: "Go on." })
  const live = third.request()
  third.complete(live, FactBuilders.toolCallStep([{ id: "e", name: "write_file", input: { path: "w" } }]))
  third.dispatch(live, "e")
  return history
}

/** A run that failed with a call unsettled, naming `outcome_unknown` in its message only; a run left open. */
const unsealedSession = (firstSequence: number) => {
  const history = new History.History({ sessionId: "alpha", firstId: 1_000, firstSequence })
  // Ids of their own: the other session's runs took the testkit's default ones.
  const ids = (n: number) => ({ turnId: `alpha-turn-${n}`, runId: `alpha-run-${n}`, invocationId: `alpha-invocation-${n}` })
  const failed = history.open(ids(1))
  const step = failed.request()
  failed.complete(step, FactBuilders.toolCallStep([{ id: "d", name: "write_file", input: { path: "z" } }]))
  failed.dispatch(step, "d")
  // Its text holds the string "outcome_unknown", as the message: not the class.
  failed.end({ kind: "failed", class: "runtime_internal", message: "outcome_unknown" })
  history.open({ message: "still running", ...ids(2) }).request()
  return history
}

for (const dialect of dialects()) {
  describe(`session summaries on ${dialect.name}`, () => {
    it("lists every session in the order of its first event, with its counts, open runs and unknown outcomes", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          expect(yield* log.sessionSummaries()).toEqual([])
          const zeta = unknownSession()
          yield* appendAll(log, zeta.writes)
          const alpha = unsealedSession(zeta.highWater + 1)
          yield* appendAll(log, alpha.writes)
          expect(yield* log.sessionSummaries()).toEqual([
            { sessionId: "zeta", events: zeta.events.length, invocations: 3, unsealed: 1, unknownOutcomes: 1 },
            { sessionId: "alpha", events: alpha.events.length, invocations: 2, unsealed: 1, unknownOutcomes: 0 },
          ])
          // The session's own read agrees: one dispatch sealed `outcome_unknown` is unsettled.
          const live = zeta.events.at(-1)!.event.invocation.invocationId
          expect((yield* log.readManualMessageContext("zeta", { current: live })).unknownOperations).toHaveLength(1)
        }),
      ))
  })
}

describe("session summaries over a damaged terminal", () => {
  it("fail Decode naming the terminal's invocation when a terminal that names outcome_unknown does not decode", () =>
    withSqliteFile((log, file) =>
      Effect.gen(function* () {
        const history = unknownSession()
        yield* appendAll(log, history.writes)
        const terminal = history.events.find((stored) => stored.event.fact.kind === "invocation_ended" && stored.event.fact.outcome.kind === "failed")!
        const connection = new BetterSqlite3(file)
        const changed = connection.prepare(`UPDATE event_log SET event_json = '{"outcome_unknown":true}' WHERE sequence = ?`).run(terminal.sequence)
        connection.close()
        expect(changed.changes).toBe(1)
        const error = yield* failure(log.sessionSummaries())
        expect(error.reason._tag).toBe("Decode")
        expect(error.message).toContain(`the terminal of invocation ${terminal.event.invocation.invocationId}: `)
      }),
    ))
})
