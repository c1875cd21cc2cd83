import { Prompts, type Model } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import type { EventLogError } from "../src/EventLogError.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import { dialects } from "./support/dialects.ts"
import { appendAll, expectRefused, failure, withLog, write } from "./support/harness.ts"

/** A completed main step whose one call the provider executed itself. */
const providerExecutedStep = (): Model.ModelStep => ({
  parts: [{ ...FactBuilders.toolCallPart({ id: "web", name: "web_search", input: { q: "x" } }), providerExecuted: true }],
  finishReason: "tool-calls",
  usage: FactBuilders.usage(20, 8),
})

/** The gate's exact refusal: `InvalidTransition` whose reason is the unsafe-history message. */
const expectUnsafe = (error: { readonly reason: { readonly _tag: string } } & { readonly reason: unknown }) => {
  const reason = error.reason as { _tag: string; rejection?: { _tag: string; reason?: string } }
  expect(reason._tag).toBe("Rejected")
  expect(reason.rejection?._tag).toBe("InvalidTransition")
  expect(reason.rejection?.reason).toBe(Prompts.UNSAFE_HISTORY_MESSAGE)
  expect(Prompts.UNSAFE_HISTORY_MESSAGE).toBe("Session contains unsealed or unresolved prior execution")
}

for (const dialect of dialects()) {
  describe(`rules on ${dialect.name}`, () => {
    it("checks history safety by its own name, excluding a live current invocation", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          yield* log.checkHistorySafety("session-1")
          const history = History.smallRun()
          const live = history.open()
          yield* appendAll(log, history.writes)
          expectUnsafe(yield* failure(log.checkHistorySafety("session-1")))
          yield* log.checkHistorySafety("session-1", { current: live.invocation.invocationId })
          const notLive = yield* failure(log.checkHistorySafety("session-1", { current: "invocation-1" }))
          expect(notLive.message).toContain(Prompts.CURRENT_NOT_LIVE_MESSAGE)
          // The old spelling still runs the same gate.
          expectUnsafe(yield* failure(log.preparePruneCandidates("session-1", { maxCandidates: 0, maxBytes: 0 })))
          yield* log.append(write(live.invocation, { kind: "invocation_ended", outcome: { kind: "completed" } }))
          yield* log.checkHistorySafety("session-1")
        }),
      ))

    it("refuses a fact whose turn or session differs from its opening's", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          yield* appendAll(log, history.writes)
          const fact = { kind: "invocation_ended", outcome: { kind: "failed", class: "cancelled" } } as const
          yield* expectRefused(log, "session-1", log.append(write({ ...run.invocation, turnId: "turn-x" }, fact)), "InvalidTransition", "differs from its opening")
          yield* expectRefused(log, "session-x", log.append(write({ ...run.invocation, sessionId: "session-x" }, fact)), "InvalidTransition", "differs from its opening")
          expect(yield* log.events("session-x")).toEqual([])
        }),
      ))

    it("refuses a settlement or a model follow-up in another invocation than its dispatch or request", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const first = history.open()
          const step = first.request()
          first.complete(step, FactBuilders.toolCallStep([{ id: "a", name: "read_file", input: { path: "x" } }]))
          const operation = first.dispatch(step, "a")
          const pending = first.request()
          first.end({ kind: "failed", class: "outcome_unknown" })
          const second = history.open()
          yield* appendAll(log, history.writes)
          const inSecond = (fact: Parameters<typeof write>[1]) => log.append(write(second.invocation, fact))
          yield* expectRefused(log, "session-1", inSecond({ kind: "tool_settled", operationId: operation, outcome: { kind: "failed", message: "x" } }), "InvalidTransition", "in this invocation")
          yield* expectRefused(log, "session-1", inSecond({ kind: "model_completed", stepId: pending, output: FactBuilders.textStep("late") }), "InvalidTransition", "no request in this invocation")
          yield* expectRefused(log, "session-1", inSecond({ kind: "model_interrupted", stepId: pending, status: "failed" }), "InvalidTransition", "no request in this invocation")
          yield* expectRefused(
            log,
            "session-1",
            inSecond({ kind: "model_observed", stepId: pending, event: { kind: "part_started", id: "p", textKind: "text" } }),
            "InvalidTransition",
            "no request in this invocation",
          )
        }),
      ))

    it("never dispatches or rejects a provider-executed call", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          run.complete(step, providerExecutedStep())
          yield* appendAll(log, history.writes)
          const call = { toolCallId: "web", origin: { kind: "provider", stepId: step } } as const
          const common = { operationId: `${step}:web`, call, name: "web_search", input: { q: "x" } }
          yield* expectRefused(log, "session-1", log.append(write(run.invocation, { kind: "tool_dispatched", ...common })), "InvalidTransition", "local tool call")
          yield* expectRefused(
            log,
            "session-1",
            log.append(write(run.invocation, { kind: "tool_rejected", ...common, reason: { kind: "unavailable" } })),
            "InvalidTransition",
            "local tool call",
          )
        }),
      ))

    it("holds a sealed step with a provider-executed call as unresolved history", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          run.complete(step, providerExecutedStep())
          run.end({ kind: "failed", class: "model_adapter" })
          yield* appendAll(log, history.writes)
          expectUnsafe(yield* failure(log.checkHistorySafety("session-1")))
          expectUnsafe(yield* failure(log.readModelContext("session-1")))
        }),
      ))

    it("holds an interrupted step that observed a provider-executed call as unresolved history", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          run.observe(step, { kind: "tool_call", id: "web", name: "web_search", input: { q: "x" }, providerExecuted: true })
          run.interrupt(step, "failed")
          run.end({ kind: "failed", class: "model_provider" })
          yield* appendAll(log, history.writes)
          expectUnsafe(yield* failure(log.checkHistorySafety("session-1")))
          // The same history with a local call observed is safe.
          const local = new History.History({ sessionId: "session-2", firstId: 900 })
          const other = local.open({ invocationId: "invocation-l", runId: "run-l", turnId: "turn-l" })
          const otherStep = other.request()
          other.observe(otherStep, { kind: "tool_call", id: "r", name: "read_file", input: {}, providerExecuted: false })
          other.interrupt(otherStep, "failed")
          other.end({ kind: "failed", class: "model_provider" })
          yield* appendAll(log, local.writes)
          yield* log.checkHistorySafety("session-2")
          // So is one whose local call's input names the flag: only the call's own flag counts.
          const named = new History.History({ sessionId: "session-3", firstId: 1_800 })
          const namer = named.open({ invocationId: "invocation-n", runId: "run-n", turnId: "turn-n" })
          const namerStep = namer.request()
          namer.observe(namerStep, { kind: "tool_call", id: "n", name: "configure", input: { providerExecuted: true }, providerExecuted: false })
          namer.interrupt(namerStep, "failed")
          namer.end({ kind: "failed", class: "model_provider" })
          yield* appendAll(log, named.writes)
          yield* log.checkHistorySafety("session-3")
        }),
      ))

    it("refuses a checkpoint whose coveredThrough lies beyond the session's history", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          const run = history.open({ input: { kind: "context_compact", requestFingerprint: "c" } })
          const summary = run.request({ purpose: "summary", stepId: "summary-1" })
          run.complete(summary, FactBuilders.textStep(FactBuilders.VALID_SUMMARY))
          // A summary request whose source claims a high water the session never reached.
          const requestIndex = history.written.findIndex((item) => item.stored.event.fact.kind === "model_requested" && item.stored.event.fact.stepId === "summary-1")
          const original = history.written[requestIndex]!.stored.event
          const fact = original.fact
          if (fact.kind !== "model_requested") throw new Error("expected the summary request")
          const beyond = write(run.invocation, { ...fact, stepId: "summary-2", sourceHighWater: 999 })
          yield* appendAll(log, history.writes)
          yield* log.append(beyond)
          yield* log.append(write(run.invocation, { kind: "model_completed", stepId: "summary-2", output: FactBuilders.textStep(FactBuilders.VALID_SUMMARY) }))
          const checkpoint = write(run.invocation, {
            kind: "context_checkpoint_recorded",
            checkpoint: {
              mode: { kind: "standalone" },
              coveredThrough: 999,
              sourceDigest: fact.sourceDigest,
              summary: { format: "sections_v1", text: FactBuilders.VALID_SUMMARY },
              summaryStepId: "summary-2",
            },
          })
          const terminal = write(run.invocation, {
            kind: "invocation_ended",
            outcome: { kind: "context_compact_finished", outcome: { kind: "compacted", checkpointId: checkpoint.event.id } },
          })
          yield* expectRefused(log, "session-1", log.appendBatch([checkpoint, terminal]), "InvalidTransition", "beyond the session's history")
        }),
      ))
  })
}

describe("the safety gate over tampered payloads", () => {
  // The writer lease makes the open log the file's only writer, and its index keeps each sealed
  // invocation's verdict: a payload changed behind its back is found by the next writer that opens it.
  it("holds a successful settlement whose stored payload has the wrong length as unresolved history", async () => {
    const directory = fs.mkdtempSync(path.join(os.tmpdir(), "maka-tampered-"))
    const file = path.join(directory, "log.sqlite")
    const withFile = <A>(body: (log: EventLog.EventLogShape) => Effect.Effect<A, EventLogError>) =>
      Effect.runPromise(Effect.scoped(Effect.flatMap(EventLog.fromDatabase(() => openSqlite(file, { synchronous: "NORMAL" })), body)))
    try {
      await withFile((log) =>
        Effect.gen(function* () {
          yield* appendAll(log, History.smallRun().writes)
          yield* log.checkHistorySafety("session-1")
        }),
      )
      const connection = new BetterSqlite3(file)
      connection.prepare("UPDATE tool_result_payloads SET payload = payload || ' '").run()
      connection.close()
      await withFile((log) =>
        Effect.gen(function* () {
          expectUnsafe(yield* failure(log.checkHistorySafety("session-1")))
        }),
      )
    } finally {
      fs.rmSync(directory, { recursive: true, force: true })
    }
  })
})
