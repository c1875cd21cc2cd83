/**
 * Small helpers for log tests: run a body against a fresh log of one dialect, append testkit
 * histories, and assert that a refused append left the log exactly as it was.
 */
import { Archive, EventWrite, Lineage, type Event, type Fact, type Identity } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import { Cause, Effect, Exit, Option, Result, type Scope } from "effect"
import { expect } from "vitest"
import type * as EventLog from "../../src/EventLog.ts"
import type { EventLogError } from "../../src/EventLogError.ts"
import * as Testing from "../../src/testing.ts"
import type { DialectCase } from "./dialects.ts"

export const withLog = <A>(dialect: DialectCase, body: (log: EventLog.EventLogShape) => Effect.Effect<A, unknown>) =>
  Effect.runPromise(Effect.scoped(Effect.flatMap(dialect.open, body)))

/**
 * Runs `body` against a fresh SQLite log in a temporary file, with the file's path: for a test whose
 * other connection changes rows behind the log's back.
 */
export const withSqliteFile = <A>(body: (log: EventLog.EventLogShape, file: string) => Effect.Effect<A, unknown, Scope.Scope>) =>
  Effect.runPromise(Effect.scoped(Effect.flatMap(Testing.makeTemporary({ synchronous: "NORMAL" }), ({ log, file }) => body(log, file))))

export const appendAll = (log: EventLog.EventLogShape, writes: ReadonlyArray<EventWrite.EventWrite>) =>
  Effect.forEach(writes, (write) => log.append(write))

/** The failure of an effect that must fail with an `EventLogError`. */
export const failure = <A>(effect: Effect.Effect<A, EventLogError>) =>
  Effect.map(Effect.exit(effect), (exit) => {
    if (Exit.isSuccess(exit)) throw new Error(`expected a failure, got ${JSON.stringify(exit.value)}`)
    const error = Cause.findErrorOption(exit.cause)
    if (Option.isNone(error)) throw new Error(`expected a typed failure, got ${String(exit.cause)}`)
    return error.value
  })

/** Asserts that `effect` is refused with `tag` (and `text` in its message) and the session is unchanged. */
export const expectRefused = (
  log: EventLog.EventLogShape,
  sessionId: string,
  effect: Effect.Effect<unknown, EventLogError>,
  tag: string,
  text?: string,
) =>
  Effect.gen(function* () {
    const before = yield* log.events(sessionId)
    const error = yield* failure(effect)
    expect(error.reason._tag).toBe("Rejected")
    if (error.reason._tag === "Rejected") expect(error.reason.rejection._tag).toBe(tag)
    if (text !== undefined) expect(error.message).toContain(text)
    const after = yield* log.events(sessionId)
    expect(after).toEqual(before)
    return error
  })

/** A checked write of any event; refuses to build an invalid one. */
export const plain = (event: Event.RuntimeEvent) => Result.getOrThrow(EventWrite.plain(event))

let nextId = 10_000
/** A fresh event id for writes built outside a testkit `History`. */
export const freshId = () => FactBuilders.eventId(nextId++)

/** A checked write of `fact` for `invocation` with a fresh id. */
export const write = (invocation: Identity.Invocation, fact: Fact.Fact) =>
  plain({ id: freshId(), recordedAt: 1, invocation, fact })

/** The opening of `pause`'s successor: it claims `source` (the paused run's prefix) on `base`, with the paused run's configuration. */
export const handoffOpening = (
  run: History.Run,
  pause: Lineage.HandoffPause,
  source: { readonly highWater: number; readonly digest: string },
  base: { readonly highWater: number; readonly digest: string },
) => {
  const opened = run.opening.event.fact
  if (opened.kind !== "invocation_opened") throw new Error("expected an opening")
  return write(Lineage.successorOf(pause.intent, run.invocation), {
    kind: "invocation_opened",
    configuration: opened.configuration,
    input: {
      kind: "handoff",
      claim: { id: pause.intent.claimId, source: { invocation: run.invocation, highWater: source.highWater, digest: source.digest }, base, replay: pause.execution.replay },
      pause,
    },
  })
}

/** The ids of turn `turn` of `sessionId`, unique across sessions. */
export const turnIds = (sessionId: string, turn: number) => ({
  turnId: `${sessionId}-turn-${turn}`,
  runId: `${sessionId}-run-${turn}`,
  invocationId: `${sessionId}-invocation-${turn}`,
})

/**
 * `turns` finished turns of `sessionId` with observations: a tool step (`observations` deltas of its
 * stream, a `list_files` call settled) then a text answer; returns the history to go on with.
 */
export const finishedTurns = (sessionId: string, turns: number, options: { readonly firstId?: number; readonly observations?: ReadonlyArray<string> } = {}) => {
  const history = new History.History({ sessionId, firstId: options.firstId ?? 1 })
  for (let turn = 0; turn < turns; turn++) {
    const run = history.open({ message: `Turn ${turn}.`, ...turnIds(sessionId, turn) })
    const first = run.request()
    for (const text of options.observations ?? ["looking"]) run.observe(first, { kind: "part_delta", id: "0", text })
    run.complete(first, FactBuilders.toolCallStep([{ id: `call-${turn}`, name: "list_files", input: { path: "." } }]))
    run.succeed(run.dispatch(first, `call-${turn}`), FactBuilders.jsonOutput([{ name: "README.md" }]))
    const second = run.request()
    run.observe(second, { kind: "part_delta", id: "0", text: "done" })
    run.complete(second, FactBuilders.textStep("Done."))
    run.end({ kind: "completed" })
  }
  return history
}

/** A `read_file` step of `run` whose result (about 20 KB) is large enough to archive; returns its settlement. */
export const bigRead = (run: History.Run, callId: string): Event.StoredEvent => {
  const step = run.request()
  run.complete(step, FactBuilders.toolCallStep([{ id: callId, name: "read_file", input: { path: "big" } }]))
  return run.succeed(run.dispatch(step, callId), FactBuilders.textOutput("row\n".repeat(5_000)))
}

/** The placeholder that archives `settled`, the successful result of the `read_file` call `callId`. */
export const placeholderOf = (settled: Event.StoredEvent, callId: string): Archive.ArchivedPlaceholder => {
  const fact = settled.event.fact
  if (fact.kind !== "tool_settled" || fact.outcome.kind !== "succeeded") throw new Error("expected a success")
  return Archive.prepare(settled.event.id, callId, "read_file", { kind: "projection", projection: fact.outcome.projection })!
}

/**
 * A summary step (`summary-1`) of `run`, and the mid-turn checkpoint built from it, anchored on the
 * run's opening and covering through the summary's source; returns the checkpoint's event.
 */
export const summarised = (history: History.History, run: History.Run) => {
  const summary = run.request({ purpose: "summary", stepId: "summary-1" })
  run.complete(summary, FactBuilders.textStep(FactBuilders.VALID_SUMMARY))
  const request = history.events[history.events.length - 2]!.event.fact
  if (request.kind !== "model_requested") throw new Error("expected a request")
  return run.checkpoint({
    mode: { kind: "mid_turn", anchorEventId: run.opening.event.id },
    coveredThrough: request.sourceHighWater,
    sourceDigest: request.sourceDigest,
    summary: { format: "sections_v1", text: FactBuilders.VALID_SUMMARY },
    summaryStepId: summary,
  })
}
