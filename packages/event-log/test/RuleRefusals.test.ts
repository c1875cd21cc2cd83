/**
 * The rarer refusals of the append rules (docs/log-format.md §3.3), each with its exact reason, on
 * every dialect: the writer's in-memory index on SQLite, rows read back on PostgreSQL (PGlite). Each
 * case is a rule whose removal the rest of the suite did not notice (`pnpm mutate append`).
 */
import { Archive, type EventWrite, type Identity } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import type { EventLogError } from "../src/EventLogError.ts"
import { appendBatch } from "../src/internal/append.ts"
import * as LogIndex from "../src/internal/log-index.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import * as Rows from "../src/internal/rows.ts"
import * as Testing from "../src/testing.ts"
import { dialects } from "./support/dialects.ts"
import { appendAll, expectRefused, failure, handoffOpening, withLog, write } from "./support/harness.ts"

/** A summary request and its completion in a `context_compact` run, and the request's fact. */
const compactRun = () => {
  const history = History.smallRun()
  const run = history.open({ input: { kind: "context_compact", requestFingerprint: "c" } })
  const summary = run.request({ purpose: "summary", stepId: "summary-1" })
  run.complete(summary, FactBuilders.textStep(FactBuilders.VALID_SUMMARY))
  const requested = history.events.find((stored) => stored.event.fact.kind === "model_requested" && stored.event.fact.stepId === summary)!.event.fact
  if (requested.kind !== "model_requested") throw new Error("expected the summary request")
  return { history, run, requested }
}

const checkpointWrite = (
  invocation: Identity.Invocation,
  requested: { readonly sourceHighWater: number; readonly sourceDigest: string },
  options: { readonly previousCheckpointId?: string; readonly mode?: "standalone" | "pre_turn"; readonly summaryStepId?: string } = {},
) =>
  write(invocation, {
    kind: "context_checkpoint_recorded",
    checkpoint: {
      mode: { kind: options.mode ?? "standalone" },
      coveredThrough: requested.sourceHighWater,
      sourceDigest: requested.sourceDigest,
      summary: { format: "sections_v1", text: FactBuilders.VALID_SUMMARY },
      summaryStepId: options.summaryStepId ?? "summary-1",
      ...(options.previousCheckpointId === undefined ? {} : { previousCheckpointId: options.previousCheckpointId }),
    },
  })

const standaloneCheckpoint = (invocation: Identity.Invocation, requested: { readonly sourceHighWater: number; readonly sourceDigest: string }, previousCheckpointId?: string) =>
  checkpointWrite(invocation, requested, previousCheckpointId === undefined ? {} : { previousCheckpointId })

const compactedTerminal = (invocation: Identity.Invocation, checkpointId: string) =>
  write(invocation, { kind: "invocation_ended", outcome: { kind: "context_compact_finished", outcome: { kind: "compacted", checkpointId } } })

for (const dialect of dialects()) {
  describe(`the rarer append refusals on ${dialect.name}`, () => {
    it("refuses a handoff successor when no sealed pause awaits it", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          run.complete(step, FactBuilders.textStep("done"))
          const pause = run.pause()
          // The run ended without a pause: nothing is reserved for a successor.
          run.end()
          yield* appendAll(log, history.writes)
          const prefix = yield* log.runPrefix("session-1", "run-1")
          if (prefix === undefined) throw new Error("expected a prefix")
          const successor = handoffOpening(run, pause, prefix, { highWater: 0, digest: FactBuilders.digestOf("base") })
          yield* expectRefused(log, "session-1", log.append(successor), "InvalidTransition", "no sealed handoff pause awaits this successor")
        }),
      ))

    it("refuses a dispatch naming no completed step of its invocation, or a summary step's call", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const summary = run.request({ purpose: "summary", stepId: "summary-1" })
          run.complete(summary, FactBuilders.toolCallStep([{ id: "c", name: "read_file", input: { path: "a" } }]))
          yield* appendAll(log, history.writes)
          const dispatch = (stepId: string) =>
            write(run.invocation, {
              kind: "tool_dispatched",
              operationId: `${stepId}:c`,
              call: { toolCallId: "c", origin: { kind: "provider", stepId } },
              name: "read_file",
              input: { path: "a" },
            })
          yield* expectRefused(log, "session-1", log.append(dispatch("step-unknown")), "InvalidTransition", "the call names no completed step of this invocation")
          yield* expectRefused(log, "session-1", log.append(dispatch(summary)), "InvalidTransition", "tool calls come only from main steps")
        }),
      ))

    it("refuses a dispatch naming a step still streaming or completed in another invocation, and takes a later call of its step", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const first = history.open()
          const done = first.request({ stepId: "step-done" })
          first.complete(done, FactBuilders.toolCallStep([{ id: "c", name: "read_file", input: { path: "a" } }]))
          first.end({ kind: "failed", class: "event_commit" })
          const second = history.open()
          const pending = second.request({ stepId: "step-pending" })
          yield* appendAll(log, history.writes)
          const dispatch = (stepId: string, id: string, path: string) =>
            write(second.invocation, {
              kind: "tool_dispatched",
              operationId: `${stepId}:${id}`,
              call: { toolCallId: id, origin: { kind: "provider", stepId } },
              name: "read_file",
              input: { path },
            })
          // Requested, not completed: it has no calls yet.
          yield* expectRefused(log, "session-1", log.append(dispatch(pending, "c", "a")), "InvalidTransition", "the call names no completed step of this invocation")
          // Completed, but by the first invocation: its calls are not this one's to run.
          yield* expectRefused(log, "session-1", log.append(dispatch(done, "c", "a")), "InvalidTransition", "the call names no completed step of this invocation")
          // A step of text and two calls: its second call is found by its id.
          second.complete(pending, FactBuilders.toolCallStep([{ id: "x", name: "read_file", input: { path: "x" } }, { id: "y", name: "read_file", input: { path: "y" } }], "Reading both."))
          yield* log.append(history.writes.at(-1)!)
          yield* log.append(dispatch(pending, "y", "y"))
          yield* expectRefused(log, "session-1", log.append(dispatch(pending, "x", "y")), "InvalidTransition", "the call does not match a local tool call of its step")
        }),
      ))

    it("refuses a checkpoint whose previousCheckpointId is not its summary's baseline, and one without a summary of this invocation", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, run, requested } = compactRun()
          yield* appendAll(log, history.writes)
          // The summary request named no baseline: a checkpoint claiming one differs from it.
          const claimed = standaloneCheckpoint(run.invocation, requested, history.events[0]!.event.id)
          yield* expectRefused(
            log,
            "session-1",
            log.appendBatch([claimed, compactedTerminal(run.invocation, claimed.event.id)]),
            "InvalidTransition",
            "previousCheckpointId differs from the summary's baseline",
          )
          // The same checkpoint written by another invocation's terminal batch: its summary is not that invocation's.
          const other = new History.History({ firstId: 700 })
          const otherRun = other.open({ input: { kind: "context_compact", requestFingerprint: "d" }, invocationId: "invocation-9", runId: "run-9", turnId: "turn-9" })
          yield* log.append(write(run.invocation, { kind: "invocation_ended", outcome: { kind: "context_compact_finished", outcome: { kind: "unchanged", reason: "no_new_history" } } }))
          yield* log.append(other.writes[0]!)
          const foreign = standaloneCheckpoint(otherRun.invocation, requested)
          yield* expectRefused(
            log,
            "session-1",
            log.appendBatch([foreign, compactedTerminal(otherRun.invocation, foreign.event.id)]),
            "InvalidTransition",
            "the checkpoint needs a completed summary request of this invocation",
          )
        }),
      ))

    it("commits a standalone checkpoint only in the batch of its own invocation's terminal that names it", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, run, requested } = compactRun()
          const other = new History.History({ sessionId: "session-2", firstId: 800 })
          const otherRun = other.open({ input: { kind: "context_compact", requestFingerprint: "e" }, invocationId: "invocation-9", runId: "run-9", turnId: "turn-9" })
          yield* appendAll(log, [...history.writes, ...other.writes])
          const checkpoint = standaloneCheckpoint(run.invocation, requested)
          const rule = "a standalone checkpoint commits only in the batch of the terminal that names it"
          const finished = (invocation: Identity.Invocation, outcome: { readonly kind: "compacted"; readonly checkpointId: string } | { readonly kind: "unchanged"; readonly reason: "no_new_history" }) =>
            write(invocation, { kind: "invocation_ended", outcome: { kind: "context_compact_finished", outcome } })
          yield* expectRefused(log, "session-1", log.appendBatch([checkpoint]), "InvalidTransition", rule)
          yield* expectRefused(log, "session-1", log.appendBatch([checkpoint, finished(run.invocation, { kind: "unchanged", reason: "no_new_history" })]), "InvalidTransition", rule)
          yield* expectRefused(log, "session-1", log.appendBatch([checkpoint, finished(run.invocation, { kind: "compacted", checkpointId: history.events[0]!.event.id })]), "InvalidTransition", rule)
          yield* expectRefused(log, "session-1", log.appendBatch([checkpoint, write(run.invocation, { kind: "invocation_ended", outcome: { kind: "failed", class: "cancelled" } })]), "InvalidTransition", rule)
          // Another invocation's terminal naming it does not commit it either.
          const before = yield* log.events("session-2")
          yield* expectRefused(log, "session-1", log.appendBatch([checkpoint, finished(otherRun.invocation, { kind: "compacted", checkpointId: checkpoint.event.id })]), "InvalidTransition", rule)
          expect(yield* log.events("session-2")).toEqual(before)
          yield* log.appendBatch([checkpoint, finished(run.invocation, { kind: "compacted", checkpointId: checkpoint.event.id })])
        }),
      ))

    it("refuses a checkpoint over a main step, an unfinished summary, or a mode its invocation does not take", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          const run = history.open()
          const main = run.request({ stepId: "main-1" })
          run.complete(main, FactBuilders.textStep("working"))
          const summary = run.request({ purpose: "summary", stepId: "summary-1" })
          yield* appendAll(log, history.writes)
          const factOf = (stepId: string) => {
            const fact = history.events.find((stored) => stored.event.fact.kind === "model_requested" && stored.event.fact.stepId === stepId)!.event.fact
            if (fact.kind !== "model_requested") throw new Error("expected a request")
            return fact
          }
          const needsSummary = "the checkpoint needs a completed summary request of this invocation"
          // A main step's request is no summary.
          yield* expectRefused(log, "session-1", log.append(checkpointWrite(run.invocation, factOf(main), { mode: "pre_turn", summaryStepId: main })), "InvalidTransition", needsSummary)
          // A summary not completed yet.
          yield* expectRefused(log, "session-1", log.append(checkpointWrite(run.invocation, factOf(summary), { mode: "pre_turn" })), "InvalidTransition", needsSummary)
          // A step no request of the log names.
          yield* expectRefused(log, "session-1", log.append(checkpointWrite(run.invocation, factOf(summary), { mode: "pre_turn", summaryStepId: "summary-none" })), "InvalidTransition", needsSummary)
          yield* log.append(write(run.invocation, { kind: "model_completed", stepId: summary, output: FactBuilders.textStep(FactBuilders.VALID_SUMMARY) }))
          // A standalone checkpoint belongs to a context_compact invocation, not to a message run.
          yield* expectRefused(
            log,
            "session-1",
            log.append(checkpointWrite(run.invocation, factOf(summary), { mode: "standalone" })),
            "InvalidTransition",
            "standalone checkpoints belong to context_compact invocations",
          )
          // The turn checkpoint the rules take.
          yield* log.append(checkpointWrite(run.invocation, factOf(summary), { mode: "pre_turn" }))
        }),
      ))

    it("refuses an archive whose dispatch differs from its identity, or whose result is another session's", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          run.complete(step, FactBuilders.toolCallStep([{ id: "a", name: "read_file", input: { path: "big" } }, { id: "c", name: "read_file", input: { path: "big2" } }]))
          const settled = run.succeed(run.dispatch(step, "a"), FactBuilders.textOutput("line\n".repeat(4_000)))
          const second = run.succeed(run.dispatch(step, "c"), FactBuilders.textOutput("row\n".repeat(4_000)))
          const other = new History.History({ sessionId: "session-2", firstId: 500 })
          const otherRun = other.open({ invocationId: "invocation-b", runId: "run-b", turnId: "turn-b" })
          const otherStep = otherRun.request()
          otherRun.complete(otherStep, FactBuilders.toolCallStep([{ id: "a", name: "read_file", input: { path: "big" } }]))
          const otherSettled = otherRun.succeed(otherRun.dispatch(otherStep, "a"), FactBuilders.textOutput("line\n".repeat(4_000)))
          yield* appendAll(log, [...history.writes, ...other.writes])
          const fact = settled.event.fact
          if (fact.kind !== "tool_settled" || fact.outcome.kind !== "succeeded") throw new Error("expected a success")
          const source = { kind: "projection", projection: fact.outcome.projection } as const
          const archive = (placeholder: Archive.ArchivedPlaceholder) => write(run.invocation, { kind: "tool_result_archived", placeholder })
          // Each placeholder is what its own identity produces: only the dispatch tells them apart.
          for (const [toolCallId, toolName] of [["b", "read_file"], ["a", "list_file"]] as const) {
            const placeholder = Archive.prepare(settled.event.id, toolCallId, toolName, source)!
            yield* expectRefused(log, "session-1", log.append(archive(placeholder)), "InvalidTransition", "the archive does not match the dispatch of its result")
          }
          const foreign = Archive.prepare(otherSettled.event.id, "a", "read_file", source)!
          yield* expectRefused(log, "session-1", log.append(archive(foreign)), "InvalidTransition", "the archive names no settled tool result of this session")
          yield* log.append(archive(Archive.prepare(settled.event.id, "a", "read_file", source)!))
          // Another result of the session archives on its own.
          const secondFact = second.event.fact
          if (secondFact.kind !== "tool_settled" || secondFact.outcome.kind !== "succeeded") throw new Error("expected a success")
          yield* log.append(archive(Archive.prepare(second.event.id, "c", "read_file", { kind: "projection", projection: secondFact.outcome.projection })!))
          expect((yield* log.events("session-1")).filter((stored) => stored.event.fact.kind === "tool_result_archived").length).toBe(2)
        }),
      ))

    it("refuses to archive the result of a standalone call: only a provider call's result has a placeholder in the history", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          history.append(run.invocation, {
            kind: "tool_dispatched",
            operationId: "standalone-1",
            call: { toolCallId: "a", origin: { kind: "standalone" } },
            name: "read_file",
            input: { path: "big" },
          })
          const message = `the file could not be read: ${"x".repeat(10_000)}`
          const settled = run.fail("standalone-1", message)
          yield* appendAll(log, history.writes)
          const placeholder = Archive.prepare(settled.event.id, "a", "read_file", { kind: "failed", message })!
          yield* expectRefused(
            log,
            "session-1",
            log.append(write(run.invocation, { kind: "tool_result_archived", placeholder })),
            "InvalidTransition",
            "the archive does not match the dispatch of its result",
          )
        }),
      ))

    it("checks an archive's result: it must be a settled tool result of this session; a failed result archives by its message", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          run.complete(step, FactBuilders.toolCallStep([{ id: "a", name: "read_file", input: { path: "big" } }]))
          const operation = run.dispatch(step, "a")
          const message = `the file could not be read: ${"x".repeat(10_000)}`
          const settled = run.fail(operation, message)
          yield* appendAll(log, history.writes)
          const archive = (placeholder: Archive.ArchivedPlaceholder) => write(run.invocation, { kind: "tool_result_archived", placeholder })
          const failed = Archive.prepare(settled.event.id, "a", "read_file", { kind: "failed", message })
          expect(failed).toBeDefined()
          // Naming the opening (not a settlement), or an id no row holds.
          for (const runtimeEventId of [history.events[0]!.event.id, FactBuilders.eventId(99_999)]) {
            const named = Archive.prepare(runtimeEventId, "a", "read_file", { kind: "failed", message })!
            yield* expectRefused(log, "session-1", log.append(archive(named)), "InvalidTransition", "the archive names no settled tool result of this session")
          }
          // The failure's text decides the placeholder: another message's placeholder differs.
          const otherText = Archive.prepare(settled.event.id, "a", "read_file", { kind: "failed", message: `${message}!` })!
          yield* expectRefused(log, "session-1", log.append(archive(otherText)), "InvalidTransition", "differs from the one its result produces")
          yield* log.append(archive(failed!))
          yield* expectRefused(log, "session-1", log.append(archive(failed!)), "InvalidTransition", "already archived")
        }),
      ))

    it("refuses a raw payload on a write that is not a successful settlement", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          yield* appendAll(log, history.writes)
          const steering = write(run.invocation, { kind: "message_steered", message: FactBuilders.deliveredMessage("m1", "more") })
          yield* expectRefused(log, "session-1", log.append({ ...steering, rawPayload: "{}" }), "PayloadMismatch")
          const opening = new History.History({ sessionId: "session-2", firstId: 300 }).open({ invocationId: "invocation-2", runId: "run-2", turnId: "turn-2" })
          yield* expectRefused(log, "session-2", log.append({ ...opening.history.writes[0]!, rawPayload: "{}" }), "PayloadMismatch")
          yield* log.append(steering)
        }),
      ))

    it("refuses an opening whose invocation id another session holds, and the session stays usable", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const first = new History.History()
          first.open()
          yield* appendAll(log, first.writes)
          const second = new History.History({ sessionId: "session-2", firstId: 500 })
          // The same invocation id as session-1's run: the ids of invocations are unique in the log.
          second.open({ invocationId: "invocation-1", runId: "run-b", turnId: "turn-b" })
          const error = yield* failure(log.append(second.writes[0]!))
          expect(error.reason._tag === "Rejected" && error.reason.rejection._tag).toBe("InvalidTransition")
          expect(error.message).toContain("the invocation is already opened")
          expect(yield* log.events("session-2")).toEqual([])
          const usable = new History.History({ sessionId: "session-2", firstId: 600 })
          usable.open({ invocationId: "invocation-2", runId: "run-b", turnId: "turn-b" })
          yield* log.append(usable.writes[0]!)
          expect((yield* log.events("session-2")).length).toBe(1)
        }),
      ))

    it("refuses a step id another session holds, and the session stays usable", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const first = new History.History()
          first.open().request({ stepId: "step-shared" })
          yield* appendAll(log, first.writes)
          const second = new History.History({ sessionId: "session-2", firstId: 500 })
          const run = second.open({ invocationId: "invocation-2", runId: "run-b", turnId: "turn-b" })
          yield* appendAll(log, second.writes)
          // Step ids are unique in the log, not only in their session.
          run.request({ stepId: "step-shared" })
          const error = yield* failure(log.append(second.writes.at(-1)!))
          expect(error.reason._tag === "Rejected" && error.reason.rejection._tag).toBe("InvalidTransition")
          expect(error.message).toContain("already used")
          expect((yield* log.events("session-2")).length).toBe(1)
          run.request({ stepId: "step-own" })
          yield* log.append(second.writes.at(-1)!)
          expect((yield* log.events("session-2")).length).toBe(2)
        }),
      ))

    it("appends the writes a batch builds from its leading sequences, in the same transaction", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          yield* appendAll(log, history.writes)
          const steering = write(run.invocation, { kind: "message_steered", message: FactBuilders.deliveredMessage("m1", "first") })
          let seen: ReadonlyArray<number> = []
          const sequences = yield* log.appendBatch([steering], (leading) => {
            seen = leading
            return [write(run.invocation, { kind: "message_steered", message: FactBuilders.deliveredMessage(`m${leading[0]! + 1}`, "built") })]
          })
          expect(seen).toEqual([2])
          expect(sequences).toEqual([2, 3])
          const stored = (yield* log.events("session-1")).map((event) => event.event.fact)
          expect(stored.at(-1)).toMatchObject({ kind: "message_steered", message: { messageId: "m3" } })
          // Each leading write's session's last sequence before the batch, where the writer's
          // in-memory index knows it (SQLite); PostgreSQL reads the rules by SQL and does not say.
          const other = new History.History({ sessionId: "session-2", firstId: 900 })
          other.open({ invocationId: "invocation-2", runId: "run-2", turnId: "turn-2" })
          yield* appendAll(log, other.writes)
          const before: Array<number | undefined> = []
          const later = write(run.invocation, { kind: "message_steered", message: FactBuilders.deliveredMessage("m7", "later") })
          yield* log.appendBatch([later], (_, priorHighWater) => {
            before.push(priorHighWater!("session-1"), priorHighWater!("session-9"))
            return []
          })
          expect(before).toEqual(dialect.name === "sqlite" ? [3, undefined] : [undefined, undefined])
          // A built write that breaks a rule takes the whole batch with it.
          yield* expectRefused(
            log,
            "session-1",
            log.appendBatch([write(run.invocation, { kind: "message_steered", message: FactBuilders.deliveredMessage("m9", "x") })], () => [
              write(run.invocation, { kind: "message_steered", message: FactBuilders.deliveredMessage("m1", "again") }),
            ]),
            "InvalidTransition",
            "already delivered",
          )
        }),
      ))
  })
}

/**
 * A session whose one invocation dispatched a call and was sealed with `terminal` before the call
 * settled, and a live invocation after it that steered `m1`; plus a second session holding a live
 * run whose step observed a call the provider executed, and a third whose run sealed a handoff pause.
 */
const gateHistories = (terminal: "outcome_unknown" | "cancelled") => {
  const unknown = new History.History()
  const sealed = unknown.open()
  const step = sealed.request()
  sealed.complete(step, FactBuilders.toolCallStep([{ id: "a", name: "send_mail", input: { to: "x" } }]))
  sealed.dispatch(step, "a")
  sealed.end({ kind: "failed", class: terminal })
  const later = unknown.open({ invocationId: "invocation-later", runId: "run-later", turnId: "turn-later" })
  later.steer("m1", "steered")
  later.end({ kind: "failed", class: "cancelled" })
  const provider = new History.History({ sessionId: "session-p", firstId: 400 })
  const live = provider.open({ invocationId: "invocation-p", runId: "run-p", turnId: "turn-p" })
  const observedStep = live.request({ stepId: "step-p" })
  live.observe(observedStep, { kind: "tool_call", id: "web", name: "web_search", input: { q: "x" }, providerExecuted: true })
  const paused = new History.History({ sessionId: "session-h", firstId: 600 })
  const pausing = paused.open({ invocationId: "invocation-h", runId: "run-h", turnId: "turn-h" })
  pausing.complete(pausing.request(), FactBuilders.textStep("working"))
  pausing.end({ kind: "handoff_paused", pause: pausing.pause() })
  return { writes: [...unknown.writes, ...provider.writes, ...paused.writes], live, observedStep, later }
}

/** The verdicts and reservations `gateHistories` must give, from memory or from a freshly loaded index. */
const expectGateVerdicts = (log: EventLog.EventLogShape, terminal: "outcome_unknown" | "cancelled", later: History.Run) =>
  Effect.gen(function* () {
    // An unsettled call is never safe; sealed outcome_unknown, a manual message may still go on.
    expect((yield* failure(log.checkHistorySafety("session-1"))).message).toContain("unsealed or unresolved")
    // A context read outside the manual policy is refused as well, whatever the terminal.
    expect((yield* failure(log.readModelContext("session-1"))).message).toContain("unsealed or unresolved")
    if (terminal === "outcome_unknown") {
      expect(yield* log.checkManualMessageHistory("session-1")).toBe(true)
      // The manual message's context names each call whose outcome is unknown.
      const source = yield* log.readManualMessageContext("session-1")
      expect(source.unknownOperations).toEqual([{ name: "send_mail", operationId: "invocation-1-step-1:a" }])
    } else {
      expect((yield* failure(log.checkManualMessageHistory("session-1"))).message).toContain("unsealed or unresolved")
    }
    // A message id a sealed run steered is delivered for good.
    const next = new History.History({ firstId: 950 }).open({ invocationId: "invocation-n", runId: "run-n", turnId: "turn-n" })
    yield* log.append(next.history.writes[0]!)
    yield* expectRefused(log, "session-1", log.append(write(next.invocation, { kind: "message_steered", message: FactBuilders.deliveredMessage("m1", "again") })), "InvalidTransition", "already delivered")
    expect(later.invocation.sessionId).toBe("session-1")
    // A sealed pause reserves its session for the successor.
    const intruder = new History.History({ sessionId: "session-h", firstId: 990 }).open({ invocationId: "invocation-i", runId: "run-i", turnId: "turn-i" })
    yield* expectRefused(log, "session-h", log.append(intruder.history.writes[0]!), "Reserved")
  })

for (const dialect of dialects()) {
  describe(`the gate's verdicts on ${dialect.name}`, () => {
    for (const terminal of ["outcome_unknown", "cancelled"] as const) {
      it(`holds an unsettled call sealed ${terminal} as ${terminal === "outcome_unknown" ? "unknown: unsafe, admissible to a manual message" : "unsafe"}`, () =>
        withLog(dialect, (log) =>
          Effect.gen(function* () {
            const { writes, later } = gateHistories(terminal)
            yield* appendAll(log, writes)
            yield* expectGateVerdicts(log, terminal, later)
          }),
        ))
    }
  })
}

describe("the writer's in-memory index of a reopened log", () => {
  for (const terminal of ["outcome_unknown", "cancelled"] as const) {
    it(`loads the gate's verdicts, steering, reservations and a live step's provider-executed calls from the file (${terminal})`, () =>
      Effect.runPromise(
        Effect.scoped(
          Effect.gen(function* () {
            const { directory } = yield* Testing.makeTemporary()
            const file = path.join(directory, "reopened.sqlite")
            const open = () => EventLog.fromDatabase(() => openSqlite(file, { synchronous: "NORMAL" }))
            const { writes, live, observedStep, later } = gateHistories(terminal)
            yield* Effect.scoped(Effect.flatMap(open(), (log) => appendAll(log, writes)))
            yield* Effect.scoped(
              Effect.gen(function* () {
                const log = yield* open()
                yield* expectGateVerdicts(log, terminal, later)
                // The live run's step observed a call its provider ran: once the run is sealed, the
                // session is unsafe even though the step never completed.
                yield* log.append(write(live.invocation, { kind: "model_interrupted", stepId: observedStep, status: "failed" }))
                yield* log.append(write(live.invocation, { kind: "invocation_ended", outcome: { kind: "failed", class: "cancelled" } }))
                expect((yield* failure(log.checkHistorySafety("session-p"))).message).toContain("unsealed or unresolved")
              }),
            )
          }),
        ),
      ))
  }
})

describe("the writer's in-memory index", () => {
  /** A SQLite log in a temporary folder (removed with the scope) and the database under it. */
  const indexedLog = (name: string) =>
    Effect.gen(function* () {
      const { directory } = yield* Testing.makeTemporary()
      const database = yield* Effect.promise(() => openSqlite(path.join(directory, name), { synchronous: "NORMAL" }))
      const log = yield* EventLog.fromDatabase(() => Promise.resolve(database))
      return { database, log }
    })

  it(`keeps at most ${LogIndex.MAX_SESSIONS} sessions and reloads a dropped one with its rules intact`, () =>
    Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { database, log } = yield* indexedLog("index.sqlite")
          const index = database.index!
          const count = LogIndex.MAX_SESSIONS + 2
          const openings = Array.from({ length: count }, (_, position) => {
            const history = new History.History({ sessionId: `session-${position}`, firstId: 10 * position + 1 })
            history.open({ invocationId: `invocation-${position}`, runId: `run-${position}`, turnId: `turn-${position}` })
            return history
          })
          for (const history of openings) yield* log.append(history.writes[0]!)
          expect(index.size).toBe(LogIndex.MAX_SESSIONS)
          // The least recently used went first: session-0 reloads, and still refuses a second opening.
          expect(index.loaded("session-0")).toBeUndefined()
          expect(index.loaded(`session-${count - 1}`)).toBeDefined()
          const second = new History.History({ sessionId: "session-0", firstId: 90_000 }).open({ invocationId: "invocation-x", runId: "run-x", turnId: "turn-x" })
          yield* expectRefused(log, "session-0", log.append(second.history.writes[0]!), "SessionBusy")
          // A refused batch drops the sessions it touched: they reload on their next use.
          expect(index.size).toBeLessThanOrEqual(LogIndex.MAX_SESSIONS)
        }),
      ),
    ))
  it("stops serving every transaction when it ends: committed, refused, or thrown by its body", () =>
    Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { database, log } = yield* indexedLog("served.sqlite")
          const history = new History.History()
          const run = history.open()
          yield* log.appendBatch(history.writes)
          yield* log.readModelContext(history.sessionId, { current: run.invocation.invocationId })
          expect(LogIndex.servedTransactions()).toBe(0)
          const second = new History.History({ sessionId: history.sessionId, firstId: 90_000 }).open({ invocationId: "invocation-x", runId: "run-x", turnId: "turn-x" })
          yield* expectRefused(log, history.sessionId, log.append(second.history.writes[0]!), "SessionBusy")
          expect(LogIndex.servedTransactions()).toBe(0)
          const thrown = new Error("the body failed")
          for (const begin of [database.read, database.write]) {
            const seen = yield* Effect.promise(() => begin(() => Promise.reject(thrown)).then(() => undefined, (error: unknown) => error))
            expect(seen).toBe(thrown)
            expect(LogIndex.servedTransactions()).toBe(0)
          }
        }),
      ),
    ))
})

describe("the append rules' SQL reads of a damaged row", () => {
  /**
   * A log whose rows were changed behind the writer's back (a second connection): the rules read by
   * SQL (PostgreSQL's path, taken on SQLite with `validation: "sql"`) refuse the write as `Decode`,
   * naming the row, and write nothing.
   */
  const damaged = async (damage: string, next: (run: History.Run, step: string) => EventWrite.EventWrite, options: { readonly complete?: boolean } = {}) => {
    const directory = fs.mkdtempSync(path.join(os.tmpdir(), "maka-damaged-"))
    const file = path.join(directory, "log.sqlite")
    try {
      const history = new History.History()
      const run = history.open()
      const step = run.request({ stepId: "step-1" })
      if (options.complete === true) run.complete(step, FactBuilders.toolCallStep([{ id: "c", name: "read_file", input: { path: "a" } }]))
      const first = await openSqlite(file, { synchronous: "NORMAL" })
      await appendBatch(first, history.writes, 0)
      await first.close()
      const connection = new BetterSqlite3(file)
      connection.exec(damage)
      connection.close()
      const database = await openSqlite(file, { synchronous: "NORMAL" })
      try {
        const before = await database.read((tx) => Rows.ofSession(tx, "session-1", { withObservations: true }))
        const error = await appendBatch(database, [next(run, step)], 0, { validation: "sql" }).then(
          () => undefined,
          (caught: unknown) => caught as EventLogError,
        )
        const after = await database.read((tx) => Rows.ofSession(tx, "session-1", { withObservations: true }))
        expect(after.length).toBe(before.length)
        return error
      } finally {
        await database.close()
      }
    } finally {
      fs.rmSync(directory, { recursive: true, force: true })
    }
  }
  const completion = (run: History.Run, step: string) =>
    write(run.invocation, { kind: "model_completed", stepId: step, output: FactBuilders.textStep("done") })

  it("refuses a row whose kind column names another fact than its JSON", async () => {
    const error = await damaged("UPDATE event_log SET kind = 'model_completed' WHERE kind = 'model_requested'", completion)
    expect(error?.reason._tag).toBe("Decode")
    expect(error?.message).toMatch(/event \S+ at 2 is not model_completed/)
  })

  it("refuses a row whose kind column says request or opening where its JSON is another fact", async () => {
    // The kinds of the request and the completion exchanged (a kind names one row per operation).
    const exchanged = "UPDATE event_log SET kind = CASE kind WHEN 'model_requested' THEN 'model_interrupted' ELSE 'model_requested' END WHERE kind IN ('model_requested', 'model_completed')"
    const asRequest = await damaged(exchanged, (run, step) =>
      write(run.invocation, { kind: "model_observed", stepId: step, event: { kind: "part_delta", id: "0", text: "x" } }),
    { complete: true })
    expect(asRequest?.reason._tag).toBe("Decode")
    expect(asRequest?.message).toMatch(/event \S+ at 3 is not model_requested/)
    const asOpening = await damaged(
      "UPDATE event_log SET kind = CASE kind WHEN 'invocation_opened' THEN 'model_requested' ELSE 'invocation_opened' END WHERE kind IN ('invocation_opened', 'model_requested')",
      completion,
    )
    expect(asOpening?.reason._tag).toBe("Decode")
    expect(asOpening?.message).toMatch(/event \S+ at 2 is not invocation_opened/)
  })

  it("refuses a row whose kind column says dispatch where its JSON is a completion", async () => {
    const error = await damaged("UPDATE event_log SET kind = 'tool_dispatched' WHERE kind = 'model_completed'", (run, step) =>
      write(run.invocation, {
        kind: "tool_dispatched",
        operationId: `${step}:c`,
        call: { toolCallId: "c", origin: { kind: "provider", stepId: step } },
        name: "read_file",
        input: { path: "a" },
      }),
    { complete: true })
    expect(error?.reason._tag).toBe("Decode")
    expect(error?.message).toMatch(/event \S+ at 3 is not tool_dispatched/)
  })
})
