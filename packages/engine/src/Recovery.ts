/**
 * Recovery (SEMANTICS.md §5.13): seals every invocation a crashed host left open, without calling a
 * model or a tool. Open requests are interrupted `failed`, calls never dispatched are rejected
 * `cancelled`, and the terminal is `failed {host_interrupted}` or, when a dispatch has no settlement,
 * `failed {outcome_unknown}`. Idempotent: a second pass seals nothing.
 */
import { EventWrite, Limits, type Fact, type Identity, type Outcome } from "@maka/facts"
import type { EventLog } from "@maka/event-log"
import { Ids } from "@maka/tools"
import { Clock, Effect, Result } from "effect"
import * as EngineError from "./EngineError.ts"

export interface Sealed {
  readonly invocation: Identity.Invocation
  readonly failureClass: Extract<Outcome.FailureClass, "host_interrupted" | "outcome_unknown">
}

export interface Report {
  readonly sealed: ReadonlyArray<Sealed>
  readonly count: number
}

const write = (invocation: Identity.Invocation, fact: Fact.Fact) =>
  Effect.gen(function* () {
    const id = yield* Ids.next
    const recordedAt = yield* Clock.currentTimeMillis
    const built = EventWrite.plain({ id, recordedAt, invocation, fact })
    return Result.isSuccess(built)
      ? built.success
      : yield* Effect.fail(EngineError.internal(`recovery built an invalid ${fact.kind}: ${built.failure.message}`))
  })

/** Seals one unfinished invocation in one batch. */
export const sealOne = (log: EventLog.EventLogShape, invocation: Identity.Invocation) =>
  Effect.gen(function* () {
    const recovery = yield* Effect.mapError(log.invocationRecovery(invocation), (error) => EngineError.store(error.message))
    const failureClass = recovery.uncertainOperations.length === 0 ? "host_interrupted" : "outcome_unknown"
    const facts: Array<Fact.Fact> = [
      ...recovery.unfinishedModelSteps.map((stepId): Fact.Fact => ({ kind: "model_interrupted", stepId, status: "failed" })),
      ...recovery.undispatchedCalls.map(
        (call): Fact.Fact => ({
          kind: "tool_rejected",
          operationId: call.operationId,
          call: call.identity,
          name: call.name,
          input: call.input,
          reason: { kind: "cancelled" },
        }),
      ),
      { kind: "invocation_ended", outcome: { kind: "failed", class: failureClass } },
    ]
    const writes = yield* Effect.forEach(facts, (fact) => write(invocation, fact))
    yield* Effect.mapError(log.appendBatch(writes), (error) => EngineError.commit(error.message))
    return { invocation, failureClass } satisfies Sealed
  })

/** Seals every unfinished invocation of the log (at most 10,000 per pass). */
export const recover = (log: EventLog.EventLogShape, skip: (invocation: Identity.Invocation) => boolean = () => false) =>
  Effect.gen(function* () {
    const unfinished = yield* Effect.mapError(log.unfinishedInvocations(Limits.MAX_HISTORY_EVENTS), (error) =>
      EngineError.store(error.message),
    )
    const sealed: Array<Sealed> = []
    for (const invocation of unfinished) {
      if (skip(invocation)) continue
      sealed.push(yield* sealOne(log, invocation))
    }
    return { sealed, count: sealed.length } satisfies Report
  })
