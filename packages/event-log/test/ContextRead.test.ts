/**
 * The context read with its running hash, the stored-row decode it runs on, and `sessionHighWater`:
 * the hash returned with a context equals `sessionHash` over the same rows (observations included),
 * the decode accepts exactly what `Codec.decodeEventJson` accepts, and the high water is the
 * session's own.
 */
import { Codec, Prompts, type EventWrite } from "@maka/facts"
import { FactBuilders } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Effect, Result } from "effect"
import { beforeAll, describe, expect, it } from "vitest"
import * as Rows from "../src/internal/rows.ts"
import * as Testing from "../src/testing.ts"
import { dialects } from "./support/dialects.ts"
import { appendAll, failure, finishedTurns, turnIds, withLog, write } from "./support/harness.ts"

/** Two finished turns with observations, then a live third one with its own observation. */
const sessionWithObservations = (sessionId = "session-1", firstId = 1) => {
  const history = finishedTurns(sessionId, 2, { firstId })
  const live = history.open({ message: "And now?", ...turnIds(sessionId, 2) })
  const step = live.request()
  live.observe(step, { kind: "part_delta", id: "0", text: "partial" })
  return { history, live, step }
}

/** `json` with `"extra": 1` added to the object at `path` (an empty path is the event itself). */
const withExtraKey = (json: string, path: ReadonlyArray<string>): string => {
  const value: unknown = JSON.parse(json)
  let target = value as Record<string, unknown>
  for (const key of path) target = target[key] as Record<string, unknown>
  target["extra"] = 1
  return JSON.stringify(value)
}

describe("stored-row decode", () => {
  const { history } = sessionWithObservations()

  it("decodes every stored event to what Codec.decodeEventJson returns", () => {
    expect(history.writes.length).toBeGreaterThan(20)
    for (const item of history.writes) {
      const expected = Codec.decodeEventJson(item.json)
      expect(Result.isSuccess(expected)).toBe(true)
      if (Result.isSuccess(expected)) expect(Rows.decodeJson(item.json, item.event.id, 1)).toEqual(expected.success)
    }
  })

  it("refuses an unknown key at any depth as a Decode error, as the closed decode does", () => {
    const cases: ReadonlyArray<readonly [EventWrite.EventWrite, ReadonlyArray<string>]> = history.writes.flatMap(
      (item) => {
        const paths: Array<ReadonlyArray<string>> = [[], ["invocation"], ["fact"]]
        if (item.event.fact.kind === "model_completed") paths.push(["fact", "output"], ["fact", "output", "usage"])
        if (item.event.fact.kind === "invocation_opened") paths.push(["fact", "configuration"], ["fact", "input"])
        if (item.event.fact.kind === "tool_settled") paths.push(["fact", "outcome"])
        return paths.map((path) => [item, path] as const)
      },
    )
    expect(cases.length).toBeGreaterThan(60)
    for (const [item, path] of cases) {
      const damaged = withExtraKey(item.json, path)
      expect(Result.isFailure(Codec.decodeEventJson(damaged))).toBe(true)
      let caught: unknown
      try {
        Rows.decodeJson(damaged, item.event.id, 7)
      } catch (error) {
        caught = error
      }
      expect(caught).toMatchObject({ reason: { _tag: "Decode" } })
      expect(String(caught)).toContain(`event ${item.event.id} at 7`)
    }
  })

  it("refuses text that is not JSON as a Decode error", () => {
    expect(() => Rows.decodeJson("{not json", "e-1", 3)).toThrow(/event e-1 at 3/)
  })

  it("names the damaged row's event id and sequence when a context read meets it", () =>
    Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log, file } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          const { history: turns } = sessionWithObservations()
          yield* appendAll(log, turns.writes.slice(0, 20))
          const connection = new BetterSqlite3(file)
          yield* Effect.addFinalizer(() => Effect.sync(() => connection.close()))
          const target = turns.writes[6]!
          const damaged = connection.prepare("UPDATE event_log SET event_json = ? WHERE event_id = ?").run(withExtraKey(target.json, ["fact"]), target.event.id)
          expect(damaged.changes).toBe(1)
          const caught = yield* failure(log.readModelContext("session-1"))
          expect(caught.reason).toMatchObject({ _tag: "Decode" })
          expect(caught.message).toContain(`event ${target.event.id} at 7:`)
        }),
      ),
    ))
})

for (const dialect of dialects()) {
  describe(`context read with its hash on ${dialect.name}`, () => {
    // Starting a store (PGlite above all) can take long on a loaded machine: do it outside the tests' time limit.
    beforeAll(() => withLog(dialect, () => Effect.void), 180_000)

    it("reports the newest summary request after the baseline and whether it was drained", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = finishedTurns("session-1", 1)
          const live = history.open({ message: "Long one.", ...turnIds("session-1", 1) })
          const current = live.invocation.invocationId
          const main = live.request()
          yield* appendAll(log, history.writes)
          expect((yield* log.readModelContext("session-1", { current })).latestSummary).toBeUndefined()
          // A summary beside the main request, cancelled when its run ended: drained.
          const first = live.request({ purpose: "summary" })
          live.interrupt(first, "cancelled")
          live.complete(main, FactBuilders.textStep("Done."))
          yield* appendAll(log, history.writes.slice(-3))
          const drained = yield* log.readModelContext("session-1", { current })
          expect(drained.latestSummary).toEqual({ stepId: first, sequence: drained.latestSummary!.sequence, drained: true })
          // A later summary that ends otherwise is the newest one: not drained.
          const second = live.request({ purpose: "summary" })
          live.interrupt(second, "failed")
          yield* appendAll(log, history.writes.slice(-2))
          expect((yield* log.readModelContext("session-1", { current })).latestSummary).toMatchObject({ stepId: second, drained: false })
        }),
      ))

    it("reads a main step interrupted before any summary request: no summary to report", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = finishedTurns("session-1", 1)
          const run = history.open({ message: "Again.", ...turnIds("session-1", 1) })
          run.interrupt(run.request(), "failed")
          run.end({ kind: "failed", class: "model_provider" })
          yield* appendAll(log, history.writes)
          const read = yield* log.readModelContext("session-1")
          expect(read.latestSummary).toBeUndefined()
          expect(read.sourceEvidence.highWater).toBe(history.highWater)
        }),
      ))

    it("returns the running hash sessionHash computes over the same rows, observations included", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, live, step } = sessionWithObservations()
          yield* appendAll(log, history.writes)
          yield* appendAll(log, sessionWithObservations("session-2", 1_000).history.writes)
          const current = live.invocation.invocationId
          const read = yield* log.readModelContextWithHash("session-1", { current })
          const highWater = read.source.sourceEvidence.highWater
          expect(highWater).toBe(history.highWater)
          const expected = yield* log.sessionHash("session-1", highWater)
          expect(read.hash.digest(highWater)).toBe(expected.digest(highWater))
          expect(read.hash.digest(highWater)).toBe(read.source.sourceEvidence.digest)
          expect(read.source.sourceEvidence.digest).toBe(history.prefixDigest())
          expect(read.source).toEqual(yield* log.readModelContext("session-1", { current }))
          // The hash keeps running: extended by the next event it equals a fresh sessionHash.
          const next = write(live.invocation, { kind: "model_observed", stepId: step, event: { kind: "part_delta", id: "0", text: "more" } })
          const sequence = yield* log.append(next)
          read.hash.update(sequence, next.json)
          expect(read.hash.digest(sequence)).toBe((yield* log.sessionHash("session-1", sequence)).digest(sequence))
        }),
      ))

    it("gives the events of one run one invocation object, and each run its own, equal to what was written", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, live } = sessionWithObservations()
          yield* appendAll(log, history.writes)
          const read = yield* log.readModelContext("session-1", { current: live.invocation.invocationId })
          const events = read.tail.flatMap((item) => (item.kind === "canonical" ? [item.stored.event] : []))
          const written = new Map(history.writes.map((item) => [item.event.id, item.event.invocation]))
          const byRun = new Map<string, Set<object>>()
          for (const event of events) {
            expect(event.invocation).toEqual(written.get(event.id))
            const objects = byRun.get(event.invocation.invocationId) ?? new Set<object>()
            objects.add(event.invocation)
            byRun.set(event.invocation.invocationId, objects)
          }
          // Three runs (two finished turns and the live one), each with several events in the tail.
          expect(byRun.size).toBe(3)
          for (const objects of byRun.values()) expect(objects.size).toBe(1)
          expect(events.length).toBeGreaterThan(byRun.size * 2)
        }),
      ))

    it("returns the running hash with the manual-message context too", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history } = sessionWithObservations()
          // The two finished turns only: the manual policy gates every invocation.
          yield* appendAll(log, history.writes.slice(0, 20))
          const read = yield* log.readManualMessageContextWithHash("session-1")
          const highWater = read.source.sourceEvidence.highWater
          expect(highWater).toBe(20)
          expect(read.hash.digest(highWater)).toBe((yield* log.sessionHash("session-1", highWater)).digest(highWater))
          expect(read.source).toEqual(yield* log.readManualMessageContext("session-1"))
        }),
      ))

    it("refuses the context of an unsafe session with the same error with or without the hash", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history } = sessionWithObservations()
          yield* appendAll(log, history.writes)
          const plain = yield* failure(log.readModelContext("session-1"))
          const hashed = yield* failure(log.readModelContextWithHash("session-1"))
          expect(hashed.reason).toEqual(plain.reason)
          expect(hashed.reason).toMatchObject({ _tag: "Rejected", rejection: { _tag: "InvalidTransition", reason: Prompts.UNSAFE_HISTORY_MESSAGE } })
        }),
      ))

    it("reads the session's highest sequence, 0 for a session without events", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          expect(yield* log.sessionHighWater("session-1")).toBe(0)
          const first = sessionWithObservations()
          yield* appendAll(log, first.history.writes.slice(0, 5))
          const second = sessionWithObservations("session-2", 1_000)
          yield* appendAll(log, second.history.writes.slice(0, 3))
          expect(yield* log.sessionHighWater("session-1")).toBe(5)
          expect(yield* log.sessionHighWater("session-2")).toBe(8)
          yield* appendAll(log, first.history.writes.slice(5, 6))
          expect(yield* log.sessionHighWater("session-1")).toBe(9)
          expect(yield* log.sessionHighWater("session-3")).toBe(0)
        }),
      ))
  })
}
