import { assert, describe, it } from "@effect/vitest"
import { EventLogError, type EventLog } from "@maka/event-log"
import * as LogTesting from "@maka/event-log/testing"
import type { Outcome } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import { Ids } from "@maka/tools"
import { Effect } from "effect"
import * as Recovery from "../src/Recovery.ts"

/** The sealing rule of docs/engine.md §5.13 case by case, and `recover`'s skip and idempotence. */

const call = (id: string): EventLog.UndispatchedCall => ({
  operationId: `step-1:${id}`,
  identity: { toolCallId: id, origin: { kind: "provider", stepId: "step-1" } },
  name: "echo",
  input: { value: id },
})

const state = (overrides: Partial<EventLog.InvocationRecovery> = {}): EventLog.InvocationRecovery => ({
  unfinishedModelSteps: [],
  undispatchedCalls: [],
  uncertainOperations: [],
  ...overrides,
})

const terminalOf = (recovery: EventLog.InvocationRecovery, outcome: Outcome.InvocationOutcome) => {
  const facts = Recovery.sealingFacts(recovery, outcome)
  const last = facts[facts.length - 1]!
  assert.strictEqual(last.kind, "invocation_ended")
  return last.kind === "invocation_ended" ? last.outcome : undefined
}

describe("Recovery.sealingFacts", () => {
  it("interrupts every open request failed, rejects every undispatched call cancelled, in that order, then the terminal", () => {
    const facts = Recovery.sealingFacts(
      state({ unfinishedModelSteps: ["step-a", "step-b"], undispatchedCalls: [call("call-1"), call("call-2")] }),
      { kind: "failed", class: "host_interrupted" },
    )
    assert.deepStrictEqual(facts, [
      { kind: "model_interrupted", stepId: "step-a", status: "failed" },
      { kind: "model_interrupted", stepId: "step-b", status: "failed" },
      {
        kind: "tool_rejected",
        operationId: "step-1:call-1",
        call: { toolCallId: "call-1", origin: { kind: "provider", stepId: "step-1" } },
        name: "echo",
        input: { value: "call-1" },
        reason: { kind: "cancelled" },
      },
      {
        kind: "tool_rejected",
        operationId: "step-1:call-2",
        call: { toolCallId: "call-2", origin: { kind: "provider", stepId: "step-1" } },
        name: "echo",
        input: { value: "call-2" },
        reason: { kind: "cancelled" },
      },
      { kind: "invocation_ended", outcome: { kind: "failed", class: "host_interrupted" } },
    ])
  })

  it("keeps the intended outcome when every dispatch is settled", () => {
    const outcomes: ReadonlyArray<Outcome.InvocationOutcome> = [
      { kind: "completed" },
      { kind: "cancelled", source: "runtime_cancellation" },
      { kind: "failed", class: "host_interrupted" },
      { kind: "failed", class: "model_provider", message: "boom" },
    ]
    for (const outcome of outcomes) assert.deepStrictEqual(terminalOf(state(), outcome), outcome)
    assert.deepStrictEqual(Recovery.sealingFacts(state(), { kind: "completed" }), [
      { kind: "invocation_ended", outcome: { kind: "completed" } },
    ])
  })

  it("turns any other outcome into failed {outcome_unknown} when a dispatch has no settlement, keeping only a failure's message", () => {
    const uncertain = state({ uncertainOperations: ["step-1:call-1"] })
    assert.deepStrictEqual(terminalOf(uncertain, { kind: "completed" }), { kind: "failed", class: "outcome_unknown" })
    assert.deepStrictEqual(terminalOf(uncertain, { kind: "cancelled", source: "runtime_cancellation" }), {
      kind: "failed",
      class: "outcome_unknown",
    })
    assert.deepStrictEqual(terminalOf(uncertain, { kind: "failed", class: "host_interrupted" }), {
      kind: "failed",
      class: "outcome_unknown",
    })
    assert.deepStrictEqual(terminalOf(uncertain, { kind: "failed", class: "model_provider", message: "the model failed" }), {
      kind: "failed",
      class: "outcome_unknown",
      message: "the model failed",
    })
  })

  it("keeps an intended outcome_unknown as it is, message included", () => {
    const uncertain = state({ uncertainOperations: ["step-1:call-1"] })
    const intended: Outcome.InvocationOutcome = { kind: "failed", class: "outcome_unknown", message: "the tool lost its outcome" }
    assert.deepStrictEqual(terminalOf(uncertain, intended), intended)
    assert.deepStrictEqual(terminalOf(state(), intended), intended)
  })
})

describe("Recovery.recover", () => {
  it.live("leaves the invocations `skip` names open and seals the others; a second pass seals only what is left", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { log } = yield* LogTesting.makeTemporary()
        const history = new History.History()
        const kept = history.open({ turnId: "turn-a", runId: "run-a", invocationId: "invocation-a" })
        kept.request()
        const other = new History.History({ sessionId: "session-2", firstId: 1_000 })
        const sealedRun = other.open({ turnId: "turn-b", runId: "run-b", invocationId: "invocation-b" })
        sealedRun.request()
        yield* log.appendBatch(history.writes)
        yield* log.appendBatch(other.writes)
        const skipKept = (invocation: { readonly invocationId: string }) => invocation.invocationId === "invocation-a"
        const first = yield* Recovery.recover(log, skipKept).pipe(Effect.provide(Ids.layer))
        assert.deepStrictEqual(first, {
          sealed: [{ invocation: sealedRun.invocation, failureClass: "host_interrupted" }],
          count: 1,
          unsealed: [],
        })
        assert.deepStrictEqual(
          (yield* log.unfinishedInvocations(10)).map((invocation) => invocation.invocationId),
          ["invocation-a"],
        )
        const second = yield* Recovery.recover(log).pipe(Effect.provide(Ids.layer))
        assert.deepStrictEqual(second, {
          sealed: [{ invocation: kept.invocation, failureClass: "host_interrupted" }],
          count: 1,
          unsealed: [],
        })
        assert.deepStrictEqual(yield* Recovery.recover(log).pipe(Effect.provide(Ids.layer)), { sealed: [], count: 0, unsealed: [] })
        const ended = (yield* log.events("session-2")).filter((stored) => stored.event.fact.kind === "invocation_ended")
        assert.strictEqual(ended.length, 1)
        assert.strictEqual(ended[0]!.event.invocation.invocationId, "invocation-b")
      }),
    ))

  it.live("seals a crashed run past the read limits (over 8 MiB of its own events)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { log } = yield* LogTesting.makeTemporary()
        const history = new History.History()
        const run = history.open()
        const step = run.request()
        const calls = Array.from({ length: 48 }, (_, index) => ({ id: `call-${index}`, name: "read_file" }))
        run.complete(step, FactBuilders.toolCallStep(calls))
        // 48 results of 200 KiB (each under the projection's limit, so stored in its settlement): 9.4 MiB
        // of the run's own events, then a request the crash left unanswered.
        for (const call of calls) run.succeed(run.dispatch(step, call.id), { format: "text", value: "z".repeat(200 * 1024) })
        const next = run.request()
        yield* log.appendBatch(history.writes)
        const limited = yield* Effect.flip(log.invocationRecovery(run.invocation))
        assert.strictEqual(limited.reason._tag === "Rejected" && limited.reason.rejection._tag, "PrefixTooLarge")
        const report = yield* Recovery.recover(log).pipe(Effect.provide(Ids.layer))
        assert.deepStrictEqual(report, { sealed: [{ invocation: run.invocation, failureClass: "host_interrupted" }], count: 1, unsealed: [] })
        const tail = (yield* log.events(run.invocation.sessionId)).slice(-2).map((stored) => stored.event.fact)
        assert.deepStrictEqual(tail, [
          { kind: "model_interrupted", stepId: next, status: "failed" },
          { kind: "invocation_ended", outcome: { kind: "failed", class: "host_interrupted" } },
        ])
        assert.deepStrictEqual(yield* log.unfinishedInvocations(10), [])
      }),
    ))

  it.live("seal returns the terminal it wrote: outcome_unknown over an unsettled dispatch", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { log } = yield* LogTesting.makeTemporary()
        const history = new History.History()
        const run = history.open({ turnId: "turn-c", runId: "run-c", invocationId: "invocation-c" })
        const step = run.request()
        run.complete(step, FactBuilders.toolCallStep([{ id: "call-1", name: "echo", input: { value: "one" } }]))
        run.dispatch(step, "call-1")
        yield* log.appendBatch(history.writes)
        const outcome = yield* Recovery.seal(log, run.invocation, { kind: "cancelled", source: "runtime_cancellation" }).pipe(
          Effect.provide(Ids.layer),
        )
        assert.deepStrictEqual(outcome, { kind: "failed", class: "outcome_unknown" })
        const facts = (yield* log.events("session-1")).slice(history.events.length).map((stored) => stored.event.fact)
        assert.deepStrictEqual(facts, [{ kind: "invocation_ended", outcome: { kind: "failed", class: "outcome_unknown" } }])
      }),
    ))

  it.live("a run another recovery sealed after it was listed is neither sealed again nor reported unsealed", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { log } = yield* LogTesting.makeTemporary()
        const history = new History.History()
        const run = history.open({ turnId: "turn-e", runId: "run-e", invocationId: "invocation-e" })
        run.request()
        yield* log.appendBatch(history.writes)
        // The other recovery seals it between this one's list and its read of what to seal.
        const racing: EventLog.EventLogShape = {
          ...log,
          invocationRecovery: (invocation, maxEvents, maxBytes) =>
            Effect.andThen(
              Effect.ignore(Recovery.seal(log, invocation, { kind: "failed", class: "host_interrupted" }).pipe(Effect.provide(Ids.layer))),
              log.invocationRecovery(invocation, maxEvents, maxBytes),
            ),
        }
        const report = yield* Recovery.recover(racing).pipe(Effect.provide(Ids.layer))
        assert.deepStrictEqual(report, { sealed: [], count: 0, unsealed: [] })
        const ended = (yield* log.events(run.invocation.sessionId)).filter((stored) => stored.event.fact.kind === "invocation_ended")
        assert.strictEqual(ended.length, 1)
      }),
    ))

  it.live("sealOne reports a refused batch as a Commit error of the engine, with the store's message", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { log } = yield* LogTesting.makeTemporary()
        const history = new History.History()
        const run = history.open({ turnId: "turn-d", runId: "run-d", invocationId: "invocation-d" })
        run.request()
        yield* log.appendBatch(history.writes)
        const refused = EventLogError.make({ _tag: "Database", message: "disk I/O error (injected)" })
        const failing: EventLog.EventLogShape = { ...log, appendBatch: () => Effect.fail(refused) }
        const error = yield* Effect.flip(Recovery.sealOne(failing, run.invocation).pipe(Effect.provide(Ids.layer)))
        assert.strictEqual(error._tag, "EngineError")
        assert.deepStrictEqual(error._tag === "EngineError" ? error.reason : undefined, { _tag: "Commit", message: refused.message })
        // Nothing was written: the invocation is still open.
        assert.deepStrictEqual((yield* log.unfinishedInvocations(10)).map((invocation) => invocation.invocationId), ["invocation-d"])
      }),
    ))
})
