/**
 * The selection of a lineage read (docs/log-format.md §3.6): a live continuation, or a handoff
 * successor carrying a replay base, reads the session at or below its base and the events of its
 * chain (its handoff predecessors and, recursively, its continuation sources), never a run of the
 * session outside them; a message-opened run's successor reads the whole session. A sealed run's
 * lineage (`lineageOf`) is the same chain over the base it inherits. Session: run 1 (the base of
 * what follows), run 2 (the root of the chain), run 3 (unrelated), then continuations and a handoff.
 */
import { Digest, Lineage, type Event, type Input } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import type * as EventLog from "../src/EventLog.ts"
import { dialects } from "./support/dialects.ts"
import { appendAll, failure, handoffOpening, withLog, write } from "./support/harness.ts"

const replay = { version: 1, digest: FactBuilders.digestOf("replay"), routeIdentity: FactBuilders.digestOf("route") } as const

/** A run of one text step, sealed `outcome`. */
const textRun = (run: History.Run, text: string, outcome?: Parameters<History.Run["end"]>[0]) => {
  const step = run.request()
  run.complete(step, FactBuilders.textStep(text))
  if (outcome !== undefined) run.end(outcome)
  return run
}

/** The runs whose events a context holds, in order of first appearance, from its tail. */
const runsOf = (source: EventLog.ModelContextSource): ReadonlyArray<string> => [
  ...new Set(source.tail.map((item) => (item.kind === "canonical" ? item.stored.event.invocation.runId : item.invocation.runId))),
]

/** The framed rows of `history`'s events that `keep` selects (the log gave them the history's sequences). */
const rowsOf = (history: History.History, keep: (stored: Event.StoredEvent) => boolean) =>
  history.written.filter(({ stored }) => keep(stored)).map(({ stored, write }) => ({ sequence: stored.sequence, json: write.json }))

for (const dialect of dialects()) {
  describe(`lineage context reads on ${dialect.name}`, () => {
    it("selects a continuation chain over its base, and a handoff successor's replay base, never an unrelated run", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          textRun(history.open({ message: "first" }), "base", { kind: "completed" })
          const root = textRun(history.open({ message: "root" }), "root answer", { kind: "completed" })
          textRun(history.open({ message: "unrelated" }), "unrelated answer", { kind: "completed" })
          yield* appendAll(log, history.writes)
          const base = yield* log.contextBeforeRun(root.invocation)
          // The chain's base is the session before its root: run 1's four events.
          const session = { kind: "session", id: "session-1" } as const
          expect(base).toEqual({ highWater: 4, digest: Digest.logPrefix(session, rowsOf(history, (stored) => stored.sequence <= 4), 4) })
          const configuration = root.opening.event.fact.kind === "invocation_opened" ? root.opening.event.fact.configuration : undefined
          /** A continuation of `source`'s sealed run, on the chain's base. */
          const continuation = (source: History.Run, runId: string) =>
            Effect.gen(function* () {
              const prefix = (yield* log.runPrefix("session-1", source.invocation.runId))!
              const input: Input.InvocationInput = {
                kind: "continuation",
                requestFingerprint: FactBuilders.digestOf(`fingerprint-${runId}`),
                claim: { id: `claim-${runId}`, source: { invocation: source.invocation, highWater: prefix.highWater, digest: prefix.digest }, base, replay },
              }
              const written = history.written.length
              const run = history.open({ input, runId, turnId: `turn-${runId}`, invocationId: `invocation-${runId}`, ...(configuration === undefined ? {} : { configuration }) })
              yield* appendAll(log, history.writes.slice(written))
              return run
            })

          // A live continuation of the root reads run 1 (at or below the base), the root and itself.
          const first = yield* continuation(root, "c1")
          const live = yield* log.readModelContext("session-1", { current: first.invocation.invocationId })
          expect(live.sourceEvidence.scope).toEqual({ kind: "lineage", sessionId: "session-1", runId: "c1" })
          expect(runsOf(live)).toEqual(["run-1", "run-2", "c1"])
          // Its evidence is the digest of exactly those rows.
          const selected = rowsOf(history, (stored) => stored.sequence <= base.highWater || ["run-2", "c1"].includes(stored.event.invocation.runId))
          expect(live.sourceEvidence.digest).toBe(Digest.logPrefix(live.sourceEvidence.scope, selected, live.sourceEvidence.highWater))

          // A continuation of the continuation: its chain is itself, c1 and the root, recursively.
          let written = history.written.length
          textRun(first, "c1 answer", { kind: "completed" })
          yield* appendAll(log, history.writes.slice(written))
          // Sealed, c1's lineage keeps the claim's base, not the session before c1 (which holds run 3).
          expect(runsOf(yield* log.readModelContext("session-1", { lineageOf: first.invocation.invocationId }))).toEqual(["run-1", "run-2", "c1"])
          const second = yield* continuation(first, "c2")
          expect(runsOf(yield* log.readModelContext("session-1", { current: second.invocation.invocationId }))).toEqual(["run-1", "run-2", "c1", "c2"])

          // c2 hands off: its successor carries the replay base, and reads the same chain and itself.
          written = history.written.length
          textRun(second, "c2 step")
          const paused = second.pause()
          const pause: Lineage.HandoffPause = { ...paused, execution: { ...paused.execution, replayBase: base.highWater } }
          second.end({ kind: "handoff_paused", pause })
          yield* appendAll(log, history.writes.slice(written))
          const pausedPrefix = (yield* log.runPrefix("session-1", "c2"))!
          yield* log.append(handoffOpening(second, pause, pausedPrefix, base))
          const successor = pause.intent.successorInvocationId
          const handedOff = yield* log.readModelContext("session-1", { current: successor })
          expect(handedOff.sourceEvidence.scope).toEqual({ kind: "lineage", sessionId: "session-1", runId: pause.intent.successorRunId })
          expect(runsOf(handedOff)).toEqual(["run-1", "run-2", "c1", "c2", pause.intent.successorRunId])

          // Sealed, the successor's lineage (as a continuation claiming it reads it) is the same chain.
          yield* log.append(
            write(Lineage.successorOf(pause.intent, second.invocation), { kind: "invocation_ended", outcome: { kind: "completed" } }),
          )
          const sealed = yield* log.readModelContext("session-1", { lineageOf: successor })
          expect(runsOf(sealed)).toEqual(["run-1", "run-2", "c1", "c2", pause.intent.successorRunId])
          // And the root's own lineage: the session before it, and the root alone.
          expect(runsOf(yield* log.readModelContext("session-1", { lineageOf: root.invocation.invocationId }))).toEqual(["run-1", "run-2"])
          // An invocation the session never opened has no lineage.
          const unknown = yield* failure(log.readModelContext("session-1", { lineageOf: "invocation-9" }))
          expect(unknown.reason).toMatchObject({ _tag: "Rejected", rejection: { _tag: "InvalidTransition" } })
          expect(unknown.message).toContain("the lineage's invocation has no opening")
        }),
      ))

    it("reads the whole session for a message-opened run's handoff successor, which has no replay base", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          textRun(history.open({ message: "first" }), "base", { kind: "completed" })
          const paused = textRun(history.open({ message: "paused" }), "step")
          const pause = paused.pause()
          paused.end({ kind: "handoff_paused", pause })
          yield* appendAll(log, history.writes)
          const prefix = (yield* log.runPrefix("session-1", paused.invocation.runId))!
          yield* log.append(handoffOpening(paused, pause, prefix, yield* log.contextBeforeRun(paused.invocation)))
          const read = yield* log.readModelContext("session-1", { current: pause.intent.successorInvocationId })
          expect(read.sourceEvidence.scope).toEqual({ kind: "session", id: "session-1" })
          expect(runsOf(read)).toEqual(["run-1", "run-2", pause.intent.successorRunId])
          // Sealed, its lineage (a continuation's claim reads it) is its chain over the root's base.
          const successor = Lineage.successorOf(pause.intent, paused.invocation)
          yield* log.append(write(successor, { kind: "invocation_ended", outcome: { kind: "completed" } }))
          expect(runsOf(yield* log.readModelContext("session-1", { lineageOf: successor.invocationId }))).toEqual(["run-1", "run-2", successor.runId])
        }),
      ))
  })
}
