/**
 * `readFrozenModelContext` (docs/log-format.md §3.7): an earlier read's evidence re-reads exactly the
 * context that read gave, whatever was appended after it (runs, archives, a run left unsealed), and
 * later archives never shrink it (scenario 50's last clause, docs/scenarios.md). Evidence whose rows
 * changed, or that names no such position, is refused. And `readLineageContext`: the context of the
 * sealed run a boundary names.
 */
import { Digest } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Effect, Result } from "effect"
import { describe, expect, it } from "vitest"
import type * as EventLog from "../src/EventLog.ts"
import { dialects } from "./support/dialects.ts"
import { appendAll, bigRead, failure, finishedTurns, placeholderOf, withLog, withSqliteFile } from "./support/harness.ts"

/** A completed run whose one tool call returned a result of about 20 KB. */
const largeResultRun = (history: History.History) => {
  const run = history.open()
  const settled = bigRead(run, "a")
  const answer = run.request()
  run.complete(answer, FactBuilders.textStep("read it"))
  run.end()
  return settled
}

/** A second run that archives `settled` before its own step. */
const archivingRun = (history: History.History, settled: ReturnType<typeof largeResultRun>): History.Run => {
  const run = history.open({ message: "And now?" })
  run.archive(placeholderOf(settled, "a"))
  const step = run.request()
  run.complete(step, FactBuilders.textStep("done"))
  run.end()
  return run
}

const refusal = (log: EventLog.EventLogShape, evidence: EventLog.SourceEvidence) =>
  Effect.map(failure(log.readFrozenModelContext(evidence)), (error) => {
    expect(error.reason._tag === "Rejected" && error.reason.rejection._tag).toBe("InvalidTransition")
    return error.message
  })

for (const dialect of dialects()) {
  describe(`frozen model context on ${dialect.name}`, () => {
    it("re-reads a session source after later runs and an archive, charging the original bytes", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const settled = largeResultRun(history)
          const written = history.written.length
          yield* appendAll(log, history.writes)
          const earlier = yield* log.readModelContext("session-1")
          const second = archivingRun(history, settled)
          yield* appendAll(log, history.writes.slice(written))
          // The session's context now shows the placeholder, and fits 16 KiB.
          const now = yield* log.readModelContext("session-1", { maxBytes: 16 * 1024 })
          const archived = now.tail.find((item) => item.kind === "archived" && item.eventId === settled.event.id)
          // A result that succeeded stays one behind its placeholder.
          expect(archived).toMatchObject({ kind: "archived", operationId: "invocation-1-step-1:a", isError: false })
          expect(now.sourceEvidence.highWater).toBe(history.highWater)
          // The frozen read is the earlier read, item for item: the result canonical, no later row.
          const frozen = yield* log.readFrozenModelContext(earlier.sourceEvidence)
          expect(frozen).toEqual(earlier)
          expect(frozen.tail.some((item) => item.kind === "canonical" && item.stored.event.id === settled.event.id)).toBe(true)
          expect(frozen.tail.every((item) => item.kind !== "canonical" || item.stored.event.invocation.runId !== second.invocation.runId)).toBe(true)
          // Later archiving never shrinks a frozen source: the original 20 KB is still charged.
          const tooSmall = yield* failure(log.readFrozenModelContext(earlier.sourceEvidence, { maxBytes: 16 * 1024 }))
          expect(tooSmall.reason._tag === "Rejected" && tooSmall.reason.rejection._tag).toBe("PrefixTooLarge")
          const tooFew = yield* failure(log.readFrozenModelContext(earlier.sourceEvidence, { maxEvents: earlier.tail.length - 1 }))
          expect(tooFew.reason._tag === "Rejected" && tooFew.reason.rejection._tag).toBe("PrefixTooLarge")
          // And the newer evidence re-reads the archived projection it was read with.
          expect(yield* log.readFrozenModelContext(now.sourceEvidence, { maxBytes: 16 * 1024 })).toEqual(now)
        }),
      ))

    it("re-reads a live run's source once the run has ended, and past a later run left unsealed", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          // A sealed run first: only the run live at the high water is left out of the gate.
          const history = History.smallRun()
          const run = history.open({ message: "And now?" })
          const first = run.request()
          run.complete(first, FactBuilders.toolCallStep([{ id: "a", name: "list_files", input: { path: "." } }]))
          run.succeed(run.dispatch(first, "a"), FactBuilders.textOutput("README.md"))
          const written = history.written.length
          yield* appendAll(log, history.writes)
          // The source of the run's second request, read while the run is live.
          const live = yield* log.readModelContext("session-1", { current: run.invocation.invocationId })
          const second = run.request()
          run.complete(second, FactBuilders.textStep("one file"))
          run.end()
          // A later run opened and never sealed: the session's own reads now refuse.
          history.open({ message: "crashed" }).request()
          yield* appendAll(log, history.writes.slice(written))
          const unsafe = yield* failure(log.readModelContext("session-1"))
          expect(unsafe.message).toContain("unsealed or unresolved prior execution")
          // The frozen read sees the session as it stood at the high water: the live run is the one
          // excluded from the gate there, and nothing above it counts.
          expect(live.sourceEvidence.highWater).toBe(13)
          expect(yield* log.readFrozenModelContext(live.sourceEvidence)).toEqual(live)
          // The empty position before the session's first event is a source too (a first run's
          // pre_turn fence).
          const empty = { scope: { kind: "session", id: "session-1" }, highWater: 0, digest: Digest.logPrefix({ kind: "session", id: "session-1" }, [], 0) } as const
          const before = yield* log.readFrozenModelContext(empty)
          expect(before.tail).toEqual([])
          expect(before.sourceEvidence).toEqual(empty)
        }),
      ))

    it("re-reads a source whose steps were observed: the observations are part of its evidence", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = finishedTurns("session-1", 2, { observations: ["looking", "further"] })
          expect(history.writes.filter((item) => item.event.fact.kind === "model_observed")).toHaveLength(6)
          yield* appendAll(log, history.writes)
          const read = yield* log.readModelContext("session-1")
          expect(read.sourceEvidence.highWater).toBe(history.highWater)
          expect(yield* log.readFrozenModelContext(read.sourceEvidence)).toEqual(read)
          const [batched] = yield* log.readFrozenModelContexts([read.sourceEvidence])
          expect(batched).toEqual(Result.succeed(read))
        }),
      ))

    it("re-reads a source read under the manual-message policy, with its unknown operations", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          run.complete(step, FactBuilders.toolCallStep([{ id: "a", name: "write_file", input: { path: "x" } }]))
          run.dispatch(step, "a")
          run.end({ kind: "failed", class: "outcome_unknown", message: "the tool's outcome is unknown" })
          yield* appendAll(log, history.writes)
          const manual = yield* log.readManualMessageContext("session-1")
          expect(manual.unknownOperations.map((operation) => operation.name)).toEqual(["write_file"])
          expect(yield* log.readFrozenModelContext(manual.sourceEvidence)).toEqual(manual)
        }),
      ))

    it("refuses evidence whose rows do not give its digest or that names no position of the session", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          yield* appendAll(log, history.writes)
          const { sourceEvidence } = yield* log.readModelContext("session-1")
          const { highWater } = sourceEvidence
          expect(yield* refusal(log, { ...sourceEvidence, digest: FactBuilders.digestOf("other") })).toContain(
            `the frozen source changed: its rows through ${highWater} no longer give the digest it recorded`,
          )
          // An earlier position of the same session is other rows under the same digest.
          expect(yield* refusal(log, { ...sourceEvidence, highWater: highWater - 1 })).toContain("the frozen source changed")
          expect(yield* refusal(log, { ...sourceEvidence, highWater: highWater + 1 })).toContain(
            `the frozen source's high water ${highWater + 1} is past the session's last event (${highWater})`,
          )
          expect(yield* refusal(log, { ...sourceEvidence, scope: { kind: "session", id: "session-2" } })).toContain(
            "past the session's last event (0)",
          )
          for (const bad of [-1, 1.5, Number.NaN]) {
            expect(yield* refusal(log, { ...sourceEvidence, highWater: bad })).toContain("a frozen source's high water must be a sequence")
          }
          expect(yield* refusal(log, { ...sourceEvidence, scope: { kind: "root" } })).toContain("read from a session or lineage scope")
          expect(
            yield* refusal(log, { ...sourceEvidence, scope: { kind: "session", id: "" } as unknown as EventLog.SourceEvidence["scope"] }),
          ).toContain("read from a session or lineage scope")
          expect(yield* refusal(log, { ...sourceEvidence, scope: { kind: "lineage", sessionId: "session-1", runId: "run-9" } })).toContain(
            "the frozen source's run run-9 has no opening at or below its high water",
          )
          // None of it wrote anything, and the evidence itself still reads.
          expect((yield* log.events("session-1")).length).toBe(history.events.length)
          expect((yield* log.readFrozenModelContext(sourceEvidence)).sourceEvidence).toEqual(sourceEvidence)
        }),
      ))

    it("reads a sealed run's lineage from its boundary, and refuses a boundary that is not the run's sealed prefix", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          const later = history.open({ message: "UNRELATED-LATER-RUN" })
          later.complete(later.request(), FactBuilders.textStep("later"))
          later.end()
          yield* appendAll(log, history.writes)
          const prefix = (yield* log.runPrefix("session-1", "run-1"))!
          const boundary = { invocation: prefix.invocation, highWater: prefix.highWater, digest: prefix.digest }
          const lineage = yield* log.readLineageContext(boundary)
          // A later run's lineage: its base is the session just before its opening (run 1's events).
          const second = (yield* log.runPrefix("session-1", later.invocation.runId))!
          const secondLineage = yield* log.readLineageContext({ invocation: second.invocation, highWater: second.highWater, digest: second.digest })
          expect(secondLineage.tail.map((item) => (item.kind === "canonical" ? item.stored.event.invocation.runId : "")).join(" ")).toBe(
            [...Array.from({ length: 8 }, () => "run-1"), ...Array.from({ length: 4 }, () => later.invocation.runId)].join(" "),
          )
          // The run's lineage: a message-opened root's base is the session before its opening.
          expect(lineage.sourceEvidence.scope).toEqual({ kind: "lineage", sessionId: "session-1", runId: "run-1" })
          expect(lineage).toEqual(yield* log.readModelContext("session-1", { lineageOf: prefix.invocation.invocationId }))
          expect(lineage.tail.map((item) => item.kind === "canonical" && item.stored.event.invocation.runId)).toEqual(
            Array.from({ length: 8 }, () => "run-1"),
          )
          const refused = (bad: typeof boundary) =>
            Effect.map(failure(log.readLineageContext(bad)), (error) => {
              expect(error.reason._tag === "Rejected" && error.reason.rejection._tag).toBe("InvalidTransition")
              return error.message
            })
          expect(yield* refused({ ...boundary, highWater: boundary.highWater - 1 })).toContain(
            `the boundary is not its run's sealed prefix: the run has ${boundary.highWater} events`,
          )
          expect(yield* refused({ ...boundary, digest: FactBuilders.digestOf("other") })).toContain("the boundary is not its run's sealed prefix")
          expect(yield* refused({ ...boundary, invocation: { ...boundary.invocation, invocationId: "invocation-9" } })).toContain(
            "the boundary's run run-1 of invocation invocation-9 does not exist",
          )
          // A run still open has no sealed prefix to claim.
          const written = history.written.length
          const live = history.open({ message: "still running" })
          yield* appendAll(log, history.writes.slice(written))
          // Lineage evidence re-reads as it was read, past the run opened since (the lineage's run
          // found at or below the high water); a run with no opening there is refused.
          expect(yield* log.readFrozenModelContext(secondLineage.sourceEvidence)).toEqual(secondLineage)
          expect(yield* log.readFrozenModelContext(lineage.sourceEvidence)).toEqual(lineage)
          expect(
            (yield* failure(log.readFrozenModelContext({ ...lineage.sourceEvidence, scope: { kind: "lineage", sessionId: "session-1", runId: live.invocation.runId } })))
              .message,
          ).toContain(`the frozen source's run ${live.invocation.runId} has no opening at or below its high water`)
          const open = (yield* log.runPrefix("session-1", live.invocation.runId))!
          expect(yield* refused({ invocation: open.invocation, highWater: open.highWater, digest: open.digest })).toContain(
            "the boundary's run is not sealed",
          )
        }),
      ))
  })
}

describe("a frozen source whose rows changed", () => {
  it("is refused, never rebuilt from the changed rows", () =>
    withSqliteFile((log, file) =>
      Effect.gen(function* () {
        const history = History.smallRun()
        yield* appendAll(log, history.writes)
        const { sourceEvidence } = yield* log.readModelContext("session-1")
        // Another connection rewrites the opening's message: the event still decodes.
        const connection = new BetterSqlite3(file)
        const changed = connection
          .prepare("UPDATE event_log SET event_json = replace(event_json, 'repository', 'repositorx') WHERE sequence = 1")
          .run()
        connection.close()
        expect(changed.changes).toBe(1)
        const error = yield* failure(log.readFrozenModelContext(sourceEvidence))
        expect(error.message).toContain("the frozen source changed")
      }),
    ))
})
