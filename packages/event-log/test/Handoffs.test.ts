/**
 * The handoff reads and checks of the store: `pendingHandoffs` lists sealed pauses whose successor
 * has not opened, across the log and in pages; `checkHandoff` is the dry run of the pause's terminal,
 * refusing exactly as the append would and writing nothing; `contextBeforeRun` is the session base
 * a successor's claim inherits from a message-opened root.
 */
import { Canonical, Digest, Lineage, type EventWrite, type Identity } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import { Effect } from "effect"
import { beforeAll, describe, expect, it } from "vitest"
import type * as EventLog from "../src/EventLog.ts"
import { dialects } from "./support/dialects.ts"
import { appendAll, expectRefused, failure, freshId, handoffOpening, withLog, write } from "./support/harness.ts"

/** A run of `sessionId` with one completed step: at a settled boundary, ready to pause. */
const settledRun = (sessionId: string, firstId: number) => {
  const history = new History.History({ sessionId, firstId })
  const run = history.open({ turnId: `${sessionId}-turn`, runId: `${sessionId}-run`, invocationId: `${sessionId}-invocation` })
  run.complete(run.request(), FactBuilders.textStep("Working."))
  return { history, run }
}

/** A session whose only run is sealed `handoff_paused`. */
const pausedSession = (sessionId: string, firstId: number) => {
  const { history, run } = settledRun(sessionId, firstId)
  const pause = run.pause()
  const terminal = run.end({ kind: "handoff_paused", pause })
  return { history, run, pause, terminal }
}

const terminalWrite = (invocation: Identity.Invocation, pause: Lineage.HandoffPause) =>
  write(invocation, { kind: "invocation_ended", outcome: { kind: "handoff_paused", pause } })

/** The successor opening the reservation admits: its claim's base is `contextBeforeRun` of the paused root. */
const successorOpening = (log: EventLog.EventLogShape, paused: ReturnType<typeof pausedSession>) =>
  Effect.gen(function* () {
    const { run, pause } = paused
    const source = yield* log.runPrefix(run.invocation.sessionId, run.invocation.runId)
    if (source === undefined) throw new Error("the paused run has no prefix")
    const base = yield* log.contextBeforeRun(run.invocation)
    return handoffOpening(run, pause, source, base)
  })

/** `checkHandoff` and then the append of the same terminal fail alike, and neither writes. */
const expectBothRefuse = (
  log: EventLog.EventLogShape,
  invocation: Identity.Invocation,
  pause: Lineage.HandoffPause,
  tag: string,
  text?: string,
) =>
  Effect.gen(function* () {
    const checked = yield* expectRefused(log, invocation.sessionId, log.checkHandoff(invocation, pause), tag, text)
    const appended = yield* expectRefused(log, invocation.sessionId, log.append(terminalWrite(invocation, pause)), tag, text)
    expect(checked.reason).toEqual(appended.reason)
  })

for (const dialect of dialects()) {
  describe(`handoff reads and checks on ${dialect.name}`, () => {
    beforeAll(() => withLog(dialect, () => Effect.void), 180_000)

    it("lists sealed pauses whose successor has not opened, across sessions in sequence order, until the successor opens", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const first = pausedSession("session-a", 1)
          const finished = History.smallRun({ sessionId: "session-b", firstId: 100 })
          const second = pausedSession("session-c", 200)
          yield* appendAll(log, first.history.writes)
          yield* appendAll(log, finished.writes)
          const live = settledRun("session-d", 300)
          yield* appendAll(log, live.history.writes)
          yield* appendAll(log, second.history.writes)
          const firstSequence = 4
          const secondSequence = 4 + 8 + 3 + 4
          expect(yield* log.pendingHandoffs()).toEqual([
            { sequence: firstSequence, sessionId: "session-a", invocation: first.run.invocation, pause: first.pause },
            { sequence: secondSequence, sessionId: "session-c", invocation: second.run.invocation, pause: second.pause },
          ])
          expect((yield* log.pendingHandoffs(firstSequence)).map((item) => item.sessionId)).toEqual(["session-c"])
          expect(yield* log.pendingHandoffs(secondSequence)).toEqual([])
          // The same answer per session: only the paused ones, on a log that holds them in memory or not.
          for (const [sessionId, pending] of [["session-a", true], ["session-b", false], ["session-c", true], ["session-d", false], ["session-e", false]] as const) {
            expect(yield* log.hasPendingHandoff(sessionId)).toBe(pending)
          }
          yield* log.append(yield* successorOpening(log, first))
          expect((yield* log.pendingHandoffs(0)).map((item) => item.sessionId)).toEqual(["session-c"])
          expect(yield* log.hasPendingHandoff("session-a")).toBe(false)
        }),
      ))

    it("pages pending pauses by 64", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          for (let index = 0; index < 65; index++) {
            yield* log.appendBatch(pausedSession(`session-${index}`, 1 + index * 10).history.writes)
          }
          const page = yield* log.pendingHandoffs()
          expect(page.length).toBe(64)
          expect(page.map((item) => item.sequence)).toEqual(Array.from({ length: 64 }, (_, index) => 4 + index * 4))
          const rest = yield* log.pendingHandoffs(page[page.length - 1]!.sequence)
          expect(rest.map((item) => item.sessionId)).toEqual(["session-64"])
        }),
      ))

    it("passes a valid pause in a dry run that writes nothing, and the append then accepts it", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, run } = settledRun("session-1", 1)
          yield* appendAll(log, history.writes)
          const highWater = yield* log.sessionHighWater("session-1")
          const pause = run.pause()
          yield* log.checkHandoff(run.invocation, pause)
          expect(yield* log.sessionHighWater("session-1")).toBe(highWater)
          expect(yield* log.pendingHandoffs()).toEqual([])
          const sequence = yield* log.append(terminalWrite(run.invocation, pause))
          expect((yield* log.pendingHandoffs()).map((item) => item.sequence)).toEqual([sequence])
        }),
      ))

    it("refuses a pause the append would refuse, with the same error", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          yield* appendAll(log, history.writes)
          yield* expectBothRefuse(log, run.invocation, run.pause(), "InvalidTransition", "settled boundary")
          yield* log.append(write(run.invocation, { kind: "model_completed", stepId: step, output: FactBuilders.textStep("Working.") }))
          yield* expectBothRefuse(log, run.invocation, run.pause({ rootRunId: "run-other" }), "InvalidTransition", "the intent's root is the run itself")
          const other = new History.History({ sessionId: "session-2", firstId: 500 })
          other.open({ turnId: "turn-x", runId: "run-x", invocationId: "invocation-x" })
          yield* appendAll(log, other.writes)
          yield* expectBothRefuse(log, run.invocation, run.pause({ successorRunId: "run-x" }), "InvalidTransition", "already used")
          yield* expectBothRefuse(log, { ...run.invocation, turnId: "turn-other" }, run.pause(), "InvalidTransition", "differs from its opening")
          yield* expectBothRefuse(log, { ...run.invocation, invocationId: "invocation-9" }, run.pause(), "InvalidTransition", "no opening")
          // A pause outside the record's rules (no steps left): the write the append would check is refused alike.
          const spent = run.pause({}, 0)
          const event = { id: freshId(), recordedAt: 1, invocation: run.invocation, fact: { kind: "invocation_ended", outcome: { kind: "handoff_paused", pause: spent } } } as const
          const handBuilt: EventWrite.EventWrite = { event, json: Canonical.stringify(event) }
          const checked = yield* expectRefused(log, "session-1", log.checkHandoff(run.invocation, spent), "InvalidTransition", "remainingSteps")
          const appended = yield* expectRefused(log, "session-1", log.append(handBuilt), "InvalidTransition", "remainingSteps")
          expect(checked.reason).toEqual(appended.reason)
          yield* log.checkHandoff(run.invocation, run.pause())
          yield* log.append(write(run.invocation, { kind: "invocation_ended", outcome: { kind: "completed" } }))
          yield* expectBothRefuse(log, run.invocation, run.pause(), "Sealed")
        }),
      ))

    it("refuses remaining steps that grow across a handoff, as the append does", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const paused = pausedSession("session-1", 1)
          yield* appendAll(log, paused.history.writes)
          const opening = yield* successorOpening(log, paused)
          yield* log.append(opening)
          const successor = opening.event.invocation
          const step = "successor-step-1"
          const source = yield* log.readModelContextWithHash("session-1", { current: successor.invocationId })
          yield* log.append(
            write(successor, {
              kind: "model_requested",
              stepId: step,
              modelId: "test-model",
              purpose: "main",
              sourceScope: source.source.sourceEvidence.scope,
              sourceHighWater: source.source.sourceEvidence.highWater,
              sourceDigest: source.source.sourceEvidence.digest,
              inputDigest: FactBuilders.digestOf("successor-input"),
              routeIdentity: FactBuilders.digestOf("route"),
            }),
          )
          yield* log.append(write(successor, { kind: "model_completed", stepId: step, output: FactBuilders.textStep("More.") }))
          const next = (remainingSteps: number): Lineage.HandoffPause => {
            const base = paused.pause
            return {
              ...base,
              intent: {
                ...base.intent,
                handoffId: "handoff-2",
                successorRunId: "run-successor-2",
                successorInvocationId: "invocation-successor-2",
                claimId: "claim-2",
              },
              remainingSteps,
            }
          }
          yield* expectBothRefuse(log, successor, next(paused.pause.remainingSteps + 1), "InvalidTransition", "remaining steps never grow")
          yield* log.checkHandoff(successor, next(paused.pause.remainingSteps - 1))
          yield* log.append(terminalWrite(successor, next(paused.pause.remainingSteps - 1)))
        }),
      ))

    it("gives the session position and digest just before a message-opened run", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          const digestBefore = history.prefixDigest()
          const second = history.open({ turnId: "turn-2", runId: "run-2", invocationId: "invocation-2" })
          yield* appendAll(log, history.writes)
          const empty = Digest.logPrefix({ kind: "session", id: "session-1" }, [], 0)
          expect(yield* log.contextBeforeRun(history.events[0]!.event.invocation)).toEqual({ highWater: 0, digest: empty })
          const base = yield* log.contextBeforeRun(second.invocation)
          expect(base).toEqual({ highWater: 8, digest: digestBefore })
          expect(base.digest).toBe((yield* log.sessionHash("session-1", 8)).digest(8))
        }),
      ))

    it("refuses the base of a run that is not message-opened or does not exist", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          const compact = history.open({
            turnId: "turn-2",
            runId: "run-2",
            invocationId: "invocation-2",
            input: { kind: "context_compact", requestFingerprint: "fingerprint-1" },
          })
          yield* appendAll(log, history.writes)
          const refusals = [
            [compact.invocation, "message-opened"],
            [{ ...compact.invocation, invocationId: "invocation-9" }, "no opening"],
            [{ ...history.events[0]!.event.invocation, sessionId: "session-2" }, "no opening"],
          ] as const
          for (const [invocation, text] of refusals) {
            const error = yield* failure(log.contextBeforeRun(invocation))
            expect(error.reason).toMatchObject({ _tag: "Rejected", rejection: { _tag: "InvalidTransition" } })
            expect(error.message).toContain(text)
          }
        }),
      ))
  })
}
