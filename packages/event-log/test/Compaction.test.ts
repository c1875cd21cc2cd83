/**
 * `prepareContextCompaction`: the context read of a compaction source. The fence of each mode, the
 * live and settled-boundary requirements on `current`, the previous checkpoint as baseline, `fit`
 * lowering the fence to a clean cut (several passes over a session past the limits), and the
 * checkpoint built from such a source accepted by append and used by the next context read.
 */
import BetterSqlite3 from "better-sqlite3"
import { Prompts, type Identity, type ModelContext } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import { Effect } from "effect"
import { beforeAll, describe, expect, it } from "vitest"
import type * as EventLog from "../src/EventLog.ts"
import { dialects } from "./support/dialects.ts"
import { appendAll, bigRead, failure, finishedTurns, placeholderOf, withLog, withSqliteFile, write } from "./support/harness.ts"

const turnIds = (turn: number) => ({ turnId: `turn-${turn}`, runId: `run-${turn}`, invocationId: `invocation-${turn}` })

/** One finished turn of eight events: a `list_files` call and its result, then a text answer. */
const finishedTurn = (history: History.History, turn: number) => {
  const run = history.open({ message: `Turn ${turn}.`, ...turnIds(turn) })
  const first = run.request()
  run.complete(first, FactBuilders.toolCallStep([{ id: `call-${turn}`, name: "list_files", input: { path: "." } }]))
  run.succeed(run.dispatch(first, `call-${turn}`), FactBuilders.jsonOutput([{ name: "README.md" }]))
  run.complete(run.request(), FactBuilders.textStep(`Answer ${turn}.`))
  run.end({ kind: "completed" })
  return run
}

/** `turns` finished turns (eight events each), then a live message run with nothing but its opening. */
const historyWithLiveRun = (turns: number) => {
  const history = new History.History()
  for (let turn = 0; turn < turns; turn++) finishedTurn(history, turn)
  const live = history.open({ message: "And now?", ...turnIds(turns) })
  return { history, live }
}

const sequences = (source: EventLog.ModelContextSource): ReadonlyArray<number> =>
  source.tail.map((item) => (item.kind === "canonical" ? item.stored.sequence : item.sequence))

const tailIds = (source: EventLog.ModelContextSource): ReadonlyArray<string> =>
  source.tail.map((item) => (item.kind === "canonical" ? item.stored.event.id : item.eventId))

/**
 * The summary request, its completion and the checkpoint a compaction builds from `read`: the
 * request's source is the read's evidence and its baseline, the checkpoint covers the fence.
 */
const summaryWrites = (
  invocation: Identity.Invocation,
  read: EventLog.ModelContextRead,
  mode: ModelContext.CheckpointMode,
  stepId: string,
) => {
  const evidence = read.source.sourceEvidence
  const baselineId = read.source.baseline?.eventId
  const request = write(invocation, {
    kind: "model_requested",
    stepId,
    modelId: "test-model",
    purpose: "summary",
    sourceScope: evidence.scope,
    sourceHighWater: evidence.highWater,
    sourceDigest: evidence.digest,
    effectiveSourceDigest: read.source.effectiveSourceDigest,
    inputDigest: FactBuilders.digestOf(`summary:${stepId}`),
    routeIdentity: FactBuilders.digestOf("route"),
    ...(baselineId === undefined ? {} : { checkpointEventId: baselineId }),
  })
  const completion = write(invocation, { kind: "model_completed", stepId, output: FactBuilders.textStep(FactBuilders.VALID_SUMMARY) })
  const checkpoint = write(invocation, {
    kind: "context_checkpoint_recorded",
    checkpoint: {
      mode,
      coveredThrough: evidence.highWater,
      sourceDigest: evidence.digest,
      ...(baselineId === undefined ? {} : { previousCheckpointId: baselineId }),
      summary: { format: "sections_v1", text: FactBuilders.VALID_SUMMARY },
      summaryStepId: stepId,
    },
  })
  return { request, completion, checkpoint }
}

/** Opens a `context_compact` run, prepares its fitted standalone source and commits the checkpoint with its terminal. */
const standalonePass = (log: EventLog.EventLogShape, pass: number, limits: { readonly maxEvents: number; readonly maxBytes?: number }) =>
  Effect.gen(function* () {
    const invocation = FactBuilders.invocation({ turnId: `compact-${pass}`, runId: `compact-${pass}`, invocationId: `compact-${pass}` })
    const opening = write(invocation, {
      kind: "invocation_opened",
      input: { kind: "context_compact", requestFingerprint: `fingerprint-${pass}` },
      configuration: FactBuilders.configuration(),
    })
    const openedAt = yield* log.append(opening)
    const read = yield* log.prepareContextCompaction("session-1", { current: invocation.invocationId, mode: "standalone", fit: true, ...limits })
    const writes = summaryWrites(invocation, read, { kind: "standalone" }, `compact-${pass}-summary`)
    yield* appendAll(log, [writes.request, writes.completion])
    const terminal = write(invocation, {
      kind: "invocation_ended",
      outcome: { kind: "context_compact_finished", outcome: { kind: "compacted", checkpointId: writes.checkpoint.event.id } },
    })
    yield* log.appendBatch([writes.checkpoint, terminal])
    return { read, openedAt, checkpointId: writes.checkpoint.event.id }
  })

/**
 * Two finished turns and a live run one step in, compacted mid-turn: its summary request, completion
 * and checkpoint (anchored on its opening) committed.
 */
const midTurnCompacted = (log: EventLog.EventLogShape) =>
  Effect.gen(function* () {
    const { history, live } = historyWithLiveRun(2)
    live.complete(live.request(), FactBuilders.textStep("Thinking."))
    yield* appendAll(log, history.writes)
    const current = live.invocation.invocationId
    const read = yield* log.prepareContextCompaction("session-1", { current, mode: "mid_turn" })
    const mode = { kind: "mid_turn", anchorEventId: live.opening.event.id } as const
    const writes = summaryWrites(live.invocation, read, mode, "mid-turn-summary")
    yield* appendAll(log, [writes.request, writes.completion, writes.checkpoint])
    return { live, current, read, writes }
  })

const expectInvalid = (error: { readonly reason: unknown }, text: string) => {
  expect(error.reason).toMatchObject({ _tag: "Rejected", rejection: { _tag: "InvalidTransition" } })
  expect(JSON.stringify(error.reason)).toContain(text)
}

for (const dialect of dialects()) {
  describe(`prepareContextCompaction on ${dialect.name}`, () => {
    beforeAll(() => withLog(dialect, () => Effect.void), 180_000)

    it("fences pre_turn before the current opening and mid_turn at the read, each with the session digest and hash there", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, live } = historyWithLiveRun(2)
          live.complete(live.request(), FactBuilders.textStep("Thinking."))
          yield* appendAll(log, history.writes)
          const current = live.invocation.invocationId
          const openingSequence = live.opening.sequence
          const preTurn = yield* log.prepareContextCompaction("session-1", { current, mode: "pre_turn" })
          const midTurn = yield* log.prepareContextCompaction("session-1", { current, mode: "mid_turn" })
          expect(preTurn.source.sourceEvidence.highWater).toBe(openingSequence - 1)
          expect(midTurn.source.sourceEvidence.highWater).toBe(history.highWater)
          for (const read of [preTurn, midTurn]) {
            const highWater = read.source.sourceEvidence.highWater
            const expected = (yield* log.sessionHash("session-1", highWater)).digest(highWater)
            expect(read.source.sourceEvidence.digest).toBe(expected)
            expect(read.hash.digest(highWater)).toBe(expected)
            expect(Math.max(...sequences(read.source))).toBe(highWater)
          }
          // latestMain is cut at the fence too: the live run's completion is after the pre_turn fence.
          expect(preTurn.source.latestMain).toMatchObject({ kind: "selected", sequence: 15 })
          expect(midTurn.source.latestMain).toMatchObject({ kind: "selected", sequence: 19 })
          expect(tailIds(preTurn.source)).not.toContain(live.opening.event.id)
          expect(tailIds(midTurn.source)).toContain(live.opening.event.id)
          // mid_turn covers what the plain context read covers.
          const plain = yield* log.readModelContextWithHash("session-1", { current })
          expect(midTurn.source).toEqual(plain.source)
        }),
      ))

    it("fences standalone before the compaction run's opening", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          finishedTurn(history, 0)
          finishedTurn(history, 1)
          yield* appendAll(log, history.writes)
          const { read, openedAt } = yield* standalonePass(log, 1, { maxEvents: 10_000 })
          expect(read.source.sourceEvidence.highWater).toBe(openedAt - 1)
          expect(read.source.sourceEvidence.highWater).toBe(16)
          expect(read.source.sourceEvidence.digest).toBe(history.prefixDigest())
          expect(sequences(read.source)).toEqual(history.events.map((stored) => stored.sequence))
        }),
      ))

    it("refuses a current invocation that is not a live opening of the session", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history } = historyWithLiveRun(1)
          yield* appendAll(log, history.writes)
          for (const current of ["invocation-0", "invocation-9"]) {
            const error = yield* failure(log.prepareContextCompaction("session-1", { current, mode: "pre_turn" }))
            expect(error.reason).toMatchObject({ _tag: "Rejected", rejection: { _tag: "InvalidTransition", reason: Prompts.CURRENT_NOT_LIVE_MESSAGE } })
          }
          const error = yield* failure(log.prepareContextCompaction("session-2", { current: "invocation-1", mode: "mid_turn" }))
          expectInvalid(error, Prompts.CURRENT_NOT_LIVE_MESSAGE)
        }),
      ))

    it("refuses a current invocation that is not at a settled boundary", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          finishedTurn(history, 0)
          const live = history.open(turnIds(1))
          const step = live.request()
          yield* appendAll(log, history.writes)
          const current = live.invocation.invocationId
          const attempt = (mode: EventLog.CompactionMode) => failure(log.prepareContextCompaction("session-1", { current, mode }))
          expectInvalid(yield* attempt("pre_turn"), "a model request is unresolved")
          expectInvalid(yield* attempt("mid_turn"), "not at a settled boundary")
          yield* log.append(
            write(live.invocation, {
              kind: "model_completed",
              stepId: step,
              output: FactBuilders.toolCallStep([{ id: "a", name: "read_file", input: { path: "x" } }]),
            }),
          )
          expectInvalid(yield* attempt("mid_turn"), "a local tool call is neither rejected nor settled")
          const dispatch = write(live.invocation, {
            kind: "tool_dispatched",
            operationId: `${step}:a`,
            call: { toolCallId: "a", origin: { kind: "provider", stepId: step } },
            name: "read_file",
            input: { path: "x" },
          })
          yield* log.append(dispatch)
          expectInvalid(yield* attempt("pre_turn"), "a dispatched tool is unsettled")
          yield* log.append(write(live.invocation, { kind: "tool_settled", operationId: `${step}:a`, outcome: { kind: "failed", message: "no such file" } }))
          const settled = yield* log.prepareContextCompaction("session-1", { current, mode: "mid_turn" })
          expect(settled.source.sourceEvidence.highWater).toBe(yield* log.sessionHighWater("session-1"))
        }),
      ))

    it("accepts a current invocation whose only unresolved request is its own summary", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, live } = historyWithLiveRun(1)
          live.request({ purpose: "summary" })
          yield* appendAll(log, history.writes)
          const read = yield* log.prepareContextCompaction("session-1", { current: live.invocation.invocationId, mode: "pre_turn" })
          expect(read.source.sourceEvidence.highWater).toBe(8)
        }),
      ))

    it("runs the history-safety gate on every other invocation", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const failed = history.open(turnIds(0))
          failed.request()
          failed.end({ kind: "failed", class: "runtime_internal" })
          const live = history.open(turnIds(1))
          yield* appendAll(log, history.writes)
          const error = yield* failure(log.prepareContextCompaction("session-1", { current: live.invocation.invocationId, mode: "pre_turn" }))
          expect(error.reason).toMatchObject({ _tag: "Rejected", rejection: { _tag: "InvalidTransition", reason: Prompts.UNSAFE_HISTORY_MESSAGE } })
        }),
      ))

    it("takes the latest earlier checkpoint as baseline and leaves its coverage out of the tail", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          finishedTurn(history, 0)
          finishedTurn(history, 1)
          yield* appendAll(log, history.writes)
          const first = yield* standalonePass(log, 1, { maxEvents: 10_000 })
          const more = new History.History({ firstId: 500, firstSequence: (yield* log.sessionHighWater("session-1")) + 1 })
          finishedTurn(more, 2)
          const live = more.open(turnIds(3))
          yield* appendAll(log, more.writes)
          const read = yield* log.prepareContextCompaction("session-1", { current: live.invocation.invocationId, mode: "pre_turn" })
          expect(read.source.baseline?.eventId).toBe(first.checkpointId)
          expect(read.source.baseline?.checkpoint.coveredThrough).toBe(16)
          // The covered history and the compaction run are out; the finished turn after them is the tail.
          expect(tailIds(read.source)).toEqual(more.events.slice(0, 8).map((stored) => stored.event.id))
          expect(read.source.sourceEvidence.highWater).toBe(live.opening.sequence - 1)
        }),
      ))

    it("fails PrefixTooLarge over the limits without fit, and with fit on mid_turn when no cut at or above the opening fits", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, live } = historyWithLiveRun(3)
          yield* appendAll(log, history.writes)
          const current = live.invocation.invocationId
          for (const request of [
            { current, mode: "pre_turn", maxEvents: 12 },
            { current, mode: "mid_turn", maxEvents: 12, fit: true },
          ] as const) {
            const error = yield* failure(log.prepareContextCompaction("session-1", request))
            expect(error.reason).toMatchObject({ _tag: "Rejected", rejection: { _tag: "PrefixTooLarge" } })
          }
        }),
      ))

    it("with fit on mid_turn, lowers the fence to the highest clean cut at or above the current opening", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          finishedTurn(history, 0)
          const live = history.open({ message: "And now?", ...turnIds(1) })
          for (let step = 0; step < 3; step++) {
            const request = live.request()
            live.complete(request, FactBuilders.toolCallStep([{ id: `live-${step}`, name: "list_files", input: { path: "." } }]))
            live.succeed(live.dispatch(request, `live-${step}`), FactBuilders.jsonOutput([{ name: "README.md" }]))
          }
          yield* appendAll(log, history.writes)
          const current = live.invocation.invocationId
          expect(live.opening.sequence).toBe(9)
          // Clean cuts: 8 (before the opening), 9, 13 and 17 (before each main request). Fourteen
          // events allow 13; 17 would hold seventeen.
          const read = yield* log.prepareContextCompaction("session-1", { current, mode: "mid_turn", maxEvents: 14, fit: true })
          expect(read.source.sourceEvidence.highWater).toBe(13)
          expect(sequences(read.source)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13])
          expect(read.source.sourceEvidence.digest).toBe((yield* log.sessionHash("session-1", 13)).digest(13))
          // Eight events fit only the cut before the opening, which a mid_turn checkpoint, re-sending
          // the opening as its anchor, may not take.
          const error = yield* failure(log.prepareContextCompaction("session-1", { current, mode: "mid_turn", maxEvents: 8, fit: true }))
          expect(error.reason).toMatchObject({ _tag: "Rejected", rejection: { _tag: "PrefixTooLarge" } })
          const whole = yield* log.prepareContextCompaction("session-1", { current, mode: "mid_turn", fit: true })
          expect(whole.source.sourceEvidence.highWater).toBe(21)
        }),
      ))

    it("with fit, lowers the fence to the highest clean cut whose tail fits", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, live } = historyWithLiveRun(3)
          yield* appendAll(log, history.writes)
          const current = live.invocation.invocationId
          // Clean cuts: the rows before each opening and each main request (1, 5, 8, 9, 13, 16, ...).
          // Twelve events allow the cut at 9 (turn 1's opening); the next clean cut, 13, would hold 13.
          const read = yield* log.prepareContextCompaction("session-1", { current, mode: "pre_turn", maxEvents: 12, fit: true })
          expect(read.source.sourceEvidence.highWater).toBe(9)
          expect(sequences(read.source)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9])
          expect(read.source.sourceEvidence.digest).toBe((yield* log.sessionHash("session-1", 9)).digest(9))
          expect(read.hash.digest(9)).toBe(read.source.sourceEvidence.digest)
          const next = history.events[9]!.event.fact
          expect(next.kind === "model_requested" && next.purpose === "main").toBe(true)
          // The row before an opening is a clean cut too: eight events end at turn 0's terminal.
          const beforeOpening = yield* log.prepareContextCompaction("session-1", { current, mode: "pre_turn", maxEvents: 8, fit: true })
          expect(beforeOpening.source.sourceEvidence.highWater).toBe(8)
          expect(history.events[8]!.event.fact.kind).toBe("invocation_opened")
          // A byte limit cuts the same way: the tail through the cut fits, the next cut would not.
          const bytesOf = (through: number) =>
            history.writes.slice(0, through).reduce((total, item) => total + Buffer.byteLength(item.json), 0)
          const byBytes = yield* log.prepareContextCompaction("session-1", { current, mode: "pre_turn", maxBytes: bytesOf(16) - 1, fit: true })
          expect(byBytes.source.sourceEvidence.highWater).toBe(13)
          // With everything fitting, fit changes nothing.
          const whole = yield* log.prepareContextCompaction("session-1", { current, mode: "pre_turn", fit: true })
          expect(whole.source).toEqual((yield* log.prepareContextCompaction("session-1", { current, mode: "pre_turn" })).source)
          expect(whole.source.sourceEvidence.highWater).toBe(24)
        }),
      ))

    it("with fit, never cuts before a summary request: a call's result may still follow it", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          finishedTurn(history, 0)
          // Turn 1 (rows 9–18): its summary request (13) is asked while its call (12) runs.
          const run = history.open({ message: "Turn 1.", ...turnIds(1) })
          const first = run.request()
          run.complete(first, FactBuilders.toolCallStep([{ id: "call-1", name: "list_files", input: { path: "." } }]))
          const operation = run.dispatch(first, "call-1")
          const summary = run.request({ purpose: "summary", stepId: "summary-1" })
          run.complete(summary, FactBuilders.textStep(FactBuilders.VALID_SUMMARY))
          run.succeed(operation, FactBuilders.jsonOutput([{ name: "README.md" }]))
          run.complete(run.request(), FactBuilders.textStep("Answer 1."))
          run.end({ kind: "completed" })
          const live = history.open({ message: "And now?", ...turnIds(2) })
          yield* appendAll(log, history.writes)
          expect(history.events[12]!.event.fact).toMatchObject({ kind: "model_requested", purpose: "summary" })
          // Twelve tail events would reach the dispatch (12), whose next row is the summary request:
          // not a clean cut, so the fence is the row before turn 1's first main request.
          const read = yield* log.prepareContextCompaction("session-1", { current: live.invocation.invocationId, mode: "pre_turn", maxEvents: 12, fit: true })
          expect(read.source.sourceEvidence.highWater).toBe(9)
        }),
      ))

    it("with fit, fails PrefixTooLarge when no clean cut fits", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, live } = historyWithLiveRun(2)
          yield* appendAll(log, history.writes)
          const error = yield* failure(
            log.prepareContextCompaction("session-1", { current: live.invocation.invocationId, mode: "pre_turn", maxBytes: 64, fit: true }),
          )
          expect(error.reason).toMatchObject({ _tag: "Rejected", rejection: { _tag: "PrefixTooLarge" } })
        }),
      ))

    it("with fit, never cuts before a summary request, only before an opening or a main request", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open(turnIds(0))
          const first = run.request()
          run.complete(first, FactBuilders.toolCallStep([{ id: "call-0", name: "list_files", input: { path: "." } }]))
          run.succeed(run.dispatch(first, "call-0"), FactBuilders.jsonOutput([{ name: "README.md" }]))
          const summary = run.request({ purpose: "summary" })
          run.steer("m-1", "Also this.")
          run.complete(run.request(), FactBuilders.textStep("Done."))
          run.complete(summary, FactBuilders.textStep(FactBuilders.VALID_SUMMARY))
          run.end({ kind: "completed" })
          const live = history.open(turnIds(1))
          yield* appendAll(log, history.writes)
          // Rows 1–5 fit five events, but row 6 is a summary request: the highest clean cut that fits is 1.
          const read = yield* log.prepareContextCompaction("session-1", { current: live.invocation.invocationId, mode: "pre_turn", maxEvents: 5, fit: true })
          expect(read.source.sourceEvidence.highWater).toBe(1)
        }),
      ))

    it("with fit, never cuts at or below the baseline's coverage", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          for (let turn = 0; turn < 3; turn++) finishedTurn(history, turn)
          yield* appendAll(log, history.writes)
          const first = yield* standalonePass(log, 1, { maxEvents: 12 })
          expect(first.read.source.sourceEvidence.highWater).toBe(9)
          // From coverage 9 the first clean cut, 13, holds four events.
          const error = yield* failure(standalonePass(log, 2, { maxEvents: 3 }))
          expect(error.reason).toMatchObject({ _tag: "Rejected", rejection: { _tag: "PrefixTooLarge" } })
        }),
      ))

    it("compacts a session past the limits in several standalone passes, each from the newest checkpoint", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          for (let turn = 0; turn < 3; turn++) finishedTurn(history, turn)
          yield* appendAll(log, history.writes)
          const limits = { maxEvents: 12 }
          const plainTooLarge = yield* failure(log.readModelContext("session-1", limits))
          expect(plainTooLarge.reason).toMatchObject({ _tag: "Rejected", rejection: { _tag: "PrefixTooLarge" } })
          const first = yield* standalonePass(log, 1, limits)
          expect(first.read.source.sourceEvidence.highWater).toBe(9)
          expect(first.read.source.baseline).toBeUndefined()
          const second = yield* standalonePass(log, 2, limits)
          expect(second.read.source.baseline?.eventId).toBe(first.checkpointId)
          // From coverage 9: the clean cuts 13, 16, 17, 21 hold 4, 7, 8, 12 events; 24 would hold 15.
          expect(second.read.source.sourceEvidence.highWater).toBe(21)
          expect(sequences(second.read.source)).toEqual([10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21])
          const third = yield* standalonePass(log, 3, limits)
          expect(third.read.source.baseline?.eventId).toBe(second.checkpointId)
          expect(third.read.source.sourceEvidence.highWater).toBe(third.openedAt - 1)
          expect(sequences(third.read.source)).toEqual([22, 23, 24])
          const after = yield* log.readModelContext("session-1", limits)
          expect(after.baseline?.eventId).toBe(third.checkpointId)
          expect(after.tail).toEqual([])
        }),
      ))

    it("a pre_turn source never takes as baseline the run's own checkpoint that covers past its fence", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { live, current, writes } = yield* midTurnCompacted(log)
          expect((yield* log.readModelContext("session-1", { current })).baseline?.eventId).toBe(writes.checkpoint.event.id)
          // The mid-turn checkpoint covers through 19, past the pre_turn fence before the opening.
          const read = yield* log.prepareContextCompaction("session-1", { current, mode: "pre_turn" })
          expect(read.source.sourceEvidence.highWater).toBe(live.opening.sequence - 1)
          expect(read.source.baseline).toBeUndefined()
        }),
      ))

    it("with fit, charges an archived result at its placeholder's size", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const reading = history.open({ message: "Read it.", ...turnIds(0) })
          const settled = bigRead(reading, "big")
          reading.complete(reading.request(), FactBuilders.textStep("Read."))
          reading.end({ kind: "completed" })
          const archiving = history.open({ message: "Shrink it.", ...turnIds(1) })
          archiving.archive(placeholderOf(settled, "big"))
          archiving.complete(archiving.request(), FactBuilders.textStep("Done."))
          archiving.end({ kind: "completed" })
          for (let turn = 2; turn < 5; turn++) finishedTurn(history, turn)
          yield* appendAll(log, history.writes)
          // The 20 KB result is in every cut (nothing is covered yet): only its placeholder fits 16 KiB.
          const pass = yield* standalonePass(log, 1, { maxEvents: 20, maxBytes: 16 * 1024 })
          expect(pass.read.source.tail.some((item) => item.kind === "archived" && item.eventId === settled.event.id)).toBe(true)
          expect(pass.read.source.tail.length).toBeLessThanOrEqual(20)
          expect(pass.read.source.sourceEvidence.highWater).toBeLessThan(pass.openedAt - 1)
        }),
      ))

    it("with fit, cuts a session whose steps were observed by its events, never charging an observation", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = finishedTurns("session-1", 4)
          yield* appendAll(log, history.writes)
          const pass = yield* standalonePass(log, 1, { maxEvents: 20 })
          // Each turn: 10 events, 2 of them observations, 8 in the tail. The highest clean cut whose
          // tail holds at most 20 events is before the third turn's first request (its opening at 21
          // included: 17 events); the next one, before its second request, would hold 21.
          expect(sequences(pass.read.source)).toEqual([1, 2, 4, 5, 6, 7, 9, 10, 11, 12, 14, 15, 16, 17, 19, 20, 21])
          expect(pass.read.source.sourceEvidence.highWater).toBe(21)
        }),
      ))

    it("with fit, cuts by bytes a session whose steps were observed, never charging an observation", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = finishedTurns("session-1", 4)
          yield* appendAll(log, history.writes)
          // Exactly the bytes of the tail through 21 (above): the same cut, now set by the bytes (the
          // whole prefix, through 40, holds far fewer than 1,000 events).
          const maxBytes = history.events
            .filter((stored) => stored.sequence <= 21 && stored.event.fact.kind !== "model_observed")
            .reduce((sum, stored) => sum + Buffer.byteLength(history.writes[stored.sequence - 1]!.json, "utf8"), 0)
          const pass = yield* standalonePass(log, 1, { maxEvents: 1_000, maxBytes })
          expect(pass.read.source.sourceEvidence.highWater).toBe(21)
        }),
      ))

    it("accepts a pre_turn checkpoint built from the source, and the next context read starts from it", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, live } = historyWithLiveRun(2)
          yield* appendAll(log, history.writes)
          const current = live.invocation.invocationId
          const read = yield* log.prepareContextCompaction("session-1", { current, mode: "pre_turn" })
          const writes = summaryWrites(live.invocation, read, { kind: "pre_turn" }, "pre-turn-summary")
          yield* appendAll(log, [writes.request, writes.completion, writes.checkpoint])
          const next = yield* log.readModelContext("session-1", { current })
          expect(next.baseline?.eventId).toBe(writes.checkpoint.event.id)
          expect(next.baseline?.checkpoint.coveredThrough).toBe(16)
          // The current opening stays in the tail; the summary's facts and the checkpoint do not.
          expect(tailIds(next)).toEqual([live.opening.event.id])
          // A later pre_turn source still stops before the opening, and goes on from the run's own
          // checkpoint (it covers no more than the fence): nothing new is left to summarise.
          const again = yield* log.prepareContextCompaction("session-1", { current, mode: "pre_turn" })
          expect(again.source.baseline?.eventId).toBe(writes.checkpoint.event.id)
          expect(again.source.sourceEvidence).toEqual(read.source.sourceEvidence)
          expect(again.source.tail).toEqual([])
        }),
      ))

    it("accepts a mid_turn checkpoint built from the source, and the next context read anchors the opening", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { live, current, read, writes } = yield* midTurnCompacted(log)
          expect(read.source.sourceEvidence.highWater).toBe(19)
          const steered = write(live.invocation, { kind: "message_steered", message: FactBuilders.deliveredMessage("m-1", "Also this.") })
          yield* log.append(steered)
          const next = yield* log.readModelContext("session-1", { current })
          expect(next.baseline?.eventId).toBe(writes.checkpoint.event.id)
          expect(next.anchor?.event.id).toBe(live.opening.event.id)
          expect(tailIds(next)).toEqual([steered.event.id])
        }),
      ))
  })
}

/** Rewrites `from` to `to` in the text of the log's checkpoints through another connection: one row must change. */
const rewriteCheckpoint = (file: string, from: string, to: string) => {
  const connection = new BetterSqlite3(file)
  const changed = connection
    .prepare("UPDATE event_log SET event_json = replace(event_json, ?, ?) WHERE kind = 'context_checkpoint_recorded' AND instr(event_json, ?) > 0")
    .run(from, to, from)
  connection.close()
  expect(changed.changes).toBe(1)
}

describe("a baseline whose checkpoint changed behind the log", () => {
  it("is refused when its predecessor is not a checkpoint of the selection", () =>
    withSqliteFile((log, file) =>
      Effect.gen(function* () {
        const history = new History.History()
        for (let turn = 0; turn < 3; turn++) finishedTurn(history, turn)
        yield* appendAll(log, history.writes)
        const limits = { maxEvents: 12 }
        const first = yield* standalonePass(log, 1, limits)
        const second = yield* standalonePass(log, 2, limits)
        expect((yield* log.readModelContext("session-1")).baseline?.eventId).toBe(second.checkpointId)
        // The second checkpoint now names the first turn's opening as its predecessor: an event of
        // the log, but no checkpoint.
        const opening = history.events[0]!.event.id
        rewriteCheckpoint(file, `"previousCheckpointId":"${first.checkpointId}"`, `"previousCheckpointId":"${opening}"`)
        expectInvalid(yield* failure(log.readModelContext("session-1")), "the baseline's predecessor chain is broken")
      }),
    ))

  it("is refused when its mid-turn anchor is not in the log", () =>
    withSqliteFile((log, file) =>
      Effect.gen(function* () {
        const { live, current } = yield* midTurnCompacted(log)
        expect((yield* log.readModelContext("session-1", { current })).anchor?.event.id).toBe(live.opening.event.id)
        rewriteCheckpoint(file, `"anchorEventId":"${live.opening.event.id}"`, `"anchorEventId":"${FactBuilders.eventId(999_999)}"`)
        expectInvalid(yield* failure(log.readModelContext("session-1", { current })), "the baseline's anchor is missing")
      }),
    ))
})
