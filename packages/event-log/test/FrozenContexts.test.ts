/**
 * `readFrozenModelContexts` (docs/log-format.md §3.7): many evidences in one read give, each, what
 * its own `readFrozenModelContext` gives (the source or the same refusal), whatever their order;
 * the sources share the session's events; an undecodable row refuses only the reads that reach it.
 */
import { Digest, type Event } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Effect, Exit, Result } from "effect"
import { describe, expect, it } from "vitest"
import type * as EventLog from "../src/EventLog.ts"
import { dialects } from "./support/dialects.ts"
import { appendAll, bigRead, placeholderOf, summarised, withLog, withSqliteFile } from "./support/harness.ts"

/** What one read gives, comparable across the two paths: the source, or the refusal's tag and message. */
const verdictOf = (read: Result.Result<EventLog.ModelContextSource, { readonly message: string; readonly reason: { readonly _tag: string } }>) =>
  Result.isSuccess(read) ? { source: read.success } : { refused: read.failure.reason._tag, message: read.failure.message }

/** Each evidence read on its own. */
const singles = (log: EventLog.EventLogShape, evidences: ReadonlyArray<EventLog.SourceEvidence>) =>
  Effect.forEach(evidences, (evidence) =>
    Effect.map(Effect.exit(log.readFrozenModelContext(evidence, { maxBytes: 1 << 30 })), (exit) => {
      if (Exit.isSuccess(exit)) return verdictOf(Result.succeed(exit.value))
      const error = exit.cause.reasons.find((reason) => reason._tag === "Fail")
      if (error === undefined || error._tag !== "Fail") throw new Error(`a frozen read died: ${String(exit.cause)}`)
      return verdictOf(Result.fail(error.error))
    }),
  )

const batch = (log: EventLog.EventLogShape, evidences: ReadonlyArray<EventLog.SourceEvidence>) =>
  Effect.map(log.readFrozenModelContexts(evidences, { maxBytes: 1 << 30 }), (reads) => reads.map(verdictOf))

/**
 * A session of six runs, with the evidence of a read taken at each point of interest: a first run;
 * a large result; a live run that archives it, compacts mid-turn (a baseline with its anchor) and is
 * steered; the lineages of the first two runs; a run sealed `outcome_unknown` (read under the
 * manual-message policy) and a run admitted over it.
 */
const session = (log: EventLog.EventLogShape) =>
  Effect.gen(function* () {
    const history = History.smallRun()
    const evidences: Array<EventLog.SourceEvidence> = []
    let written = 0
    const flush = Effect.suspend(() => {
      const writes = history.writes.slice(written)
      written = history.writes.length
      return appendAll(log, writes)
    })
    yield* flush
    evidences.push((yield* log.readModelContext("session-1")).sourceEvidence)
    const second = history.open({ message: "Read the big file." })
    const settled = bigRead(second, "a")
    second.complete(second.request(), FactBuilders.textStep("read it"))
    second.end()
    yield* flush
    evidences.push((yield* log.readModelContext("session-1", { maxBytes: 1 << 30 })).sourceEvidence)
    const third = history.open({ message: "And now?" })
    yield* flush
    const current = { current: third.invocation.invocationId, maxBytes: 1 << 30 }
    evidences.push((yield* log.readModelContext("session-1", current)).sourceEvidence)
    third.archive(placeholderOf(settled, "a"))
    const step = third.request()
    third.complete(step, FactBuilders.toolCallStep([{ id: "r", name: "read_file", input: { path: "README.md" } }]))
    third.succeed(third.dispatch(step, "r"), FactBuilders.textOutput("# Project"))
    yield* flush
    evidences.push((yield* log.readModelContext("session-1", current)).sourceEvidence)
    summarised(history, third)
    third.steer("m-1", "and the tests")
    yield* flush
    const compacted = yield* log.readModelContext("session-1", current)
    expect(compacted.baseline).toBeDefined()
    expect(compacted.anchor).toBeDefined()
    evidences.push(compacted.sourceEvidence)
    third.complete(third.request(), FactBuilders.textStep("done"))
    third.end()
    yield* flush
    for (const runId of ["run-1", second.invocation.runId]) {
      const prefix = (yield* log.runPrefix("session-1", runId))!
      const boundary = { invocation: prefix.invocation, highWater: prefix.highWater, digest: prefix.digest }
      evidences.push((yield* log.readLineageContext(boundary, { maxBytes: 1 << 30 })).sourceEvidence)
    }
    const fourth = history.open({ message: "Write it." })
    const write = fourth.request()
    fourth.complete(write, FactBuilders.toolCallStep([{ id: "w", name: "write_file", input: { path: "x" } }]))
    fourth.dispatch(write, "w")
    fourth.end({ kind: "failed", class: "outcome_unknown", message: "the tool's outcome is unknown" })
    yield* flush
    const manual = yield* log.readManualMessageContext("session-1", { maxBytes: 1 << 30 })
    expect(manual.unknownOperations.map((operation) => operation.name)).toEqual(["write_file"])
    evidences.push(manual.sourceEvidence)
    // A later run admitted over it reads the same unknown operation (a sealed run's verdict, which
    // one read over many positions reaches once).
    const fifth = history.open({ message: "Go on anyway." })
    yield* flush
    const over = yield* log.readManualMessageContext("session-1", { current: fifth.invocation.invocationId, maxBytes: 1 << 30 })
    expect(over.unknownOperations).toEqual(manual.unknownOperations)
    evidences.push(over.sourceEvidence)
    return { history, evidences }
  })

for (const dialect of dialects()) {
  describe(`frozen model contexts in one read on ${dialect.name}`, () => {
    it("gives each evidence what its own read gives, in any order, refusals included", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, evidences } = yield* session(log)
          const [first, large] = evidences as [EventLog.SourceEvidence, EventLog.SourceEvidence]
          const highWater = history.highWater
          const refused: ReadonlyArray<EventLog.SourceEvidence> = [
            { ...large, digest: FactBuilders.digestOf("other") },
            { ...large, highWater: large.highWater - 1 },
            { ...first, highWater: highWater + 1 },
            { ...first, highWater: Number.NaN },
            { ...first, scope: { kind: "root" } },
            { ...first, scope: { kind: "session", id: "session-2" } },
            { ...first, scope: { kind: "lineage", sessionId: "session-1", runId: "run-9" } },
          ]
          const empty = { scope: { kind: "session", id: "session-1" }, highWater: 0, digest: Digest.logPrefix({ kind: "session", id: "session-1" }, [], 0) } as const
          const all = [...evidences, ...refused, empty]
          const expected = yield* singles(log, all)
          // Every kind of source is among them, and every refusal.
          expect(expected.filter((verdict) => "source" in verdict)).toHaveLength(evidences.length + 1)
          expect(expected.filter((verdict) => "refused" in verdict)).toHaveLength(refused.length)
          expect(new Set(evidences.map((evidence) => evidence.scope.kind))).toEqual(new Set(["session", "lineage"]))
          expect(yield* batch(log, all)).toEqual(expected)
          // Descending, and twice over: the same verdict for each, in the order asked.
          const reversed = [...all].reverse()
          expect(yield* batch(log, [...reversed, ...all])).toEqual([...[...expected].reverse(), ...expected])
          expect(yield* batch(log, [])).toEqual([])
        }),
      ))

    it("shares the session's events between the sources it gives", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { evidences } = yield* session(log)
          const reads = yield* log.readFrozenModelContexts(evidences, { maxBytes: 1 << 30 })
          const [earlier, later] = reads.map(Result.getOrThrow) as [EventLog.ModelContextSource, EventLog.ModelContextSource]
          const eventsOf = (source: EventLog.ModelContextSource) =>
            source.tail.flatMap((item): Array<Event.StoredEvent> => (item.kind === "canonical" ? [item.stored] : []))
          const shared = eventsOf(earlier)
          expect(shared.length).toBeGreaterThan(0)
          // The later source holds the very event objects of the earlier one, first to last.
          expect(eventsOf(later).slice(0, shared.length).every((stored, index) => stored === shared[index])).toBe(true)
          // Two separate reads decode their own.
          const alone = yield* log.readFrozenModelContext(evidences[1]!, { maxBytes: 1 << 30 })
          expect(eventsOf(alone)[0]).not.toBe(shared[0])
          expect(eventsOf(alone)[0]).toEqual(shared[0])
        }),
      ))
  })
}

describe("frozen model contexts over an undecodable row", () => {
  it("refuses the reads that reach the row, as their own reads do, and gives the reads below it", () =>
    withSqliteFile((log, file) =>
      Effect.gen(function* () {
        const history = History.smallRun()
        yield* appendAll(log, history.writes)
        const below = (yield* log.readModelContext("session-1")).sourceEvidence
        const written = history.writes.length
        const run = history.open({ message: "And now?" })
        run.complete(run.request(), FactBuilders.textStep("done"))
        run.end()
        yield* appendAll(log, history.writes.slice(written))
        const above = (yield* log.readModelContext("session-1")).sourceEvidence
        const broken = below.highWater + 2
        // Another connection breaks a row of the second run: it no longer decodes.
        const connection = new BetterSqlite3(file)
        expect(connection.prepare("UPDATE event_log SET event_json = '{\"not\":\"an event\"}' WHERE sequence = ?").run(broken).changes).toBe(1)
        connection.close()
        const evidences = [above, below, { ...above, highWater: broken }, { ...above, highWater: broken - 1 }]
        const expected = yield* singles(log, evidences)
        expect(expected.map((verdict) => ("refused" in verdict ? verdict.refused : "source"))).toEqual(["Decode", "source", "Decode", "Rejected"])
        expect(yield* batch(log, evidences)).toEqual(expected)
      }),
    ))
})
