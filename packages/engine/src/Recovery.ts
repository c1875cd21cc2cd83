/**
 * Recovery (docs/engine.md §5.13) and the one sealing rule it shares with the runner: open requests are
 * interrupted `failed`, calls never dispatched are rejected `cancelled`, and the terminal records the
 * intended outcome, or `failed {outcome_unknown}` when a dispatch has no settlement. Recovery seals
 * what a crashed host left open without calling a model or a tool; one invocation it cannot seal is
 * reported and the others are sealed all the same. Idempotent: a second pass seals nothing.
 */
import { EventWrite, Limits, type Fact, type Identity, type Outcome } from "@maka/facts"
import type { EventLog, EventLogError } from "@maka/event-log"
import { Ids } from "@maka/tools"
import { Clock, Effect, Result } from "effect"
import * as EngineError from "./EngineError.ts"

export interface Sealed {
  readonly invocation: Identity.Invocation
  readonly failureClass: Extract<Outcome.FailureClass, "host_interrupted" | "outcome_unknown">
}

/** An invocation recovery could not seal, and why; it stays open for the next pass. */
export interface Unsealed {
  readonly invocation: Identity.Invocation
  readonly message: string
}

export interface Report {
  readonly sealed: ReadonlyArray<Sealed>
  readonly count: number
  readonly unsealed: ReadonlyArray<Unsealed>
}

/**
 * The facts that seal an invocation in the state `recovery` read, ending with its terminal: the
 * intended `outcome`, unless a dispatch has no settlement, which only `failed {outcome_unknown}` may
 * seal (keeping the intended failure's message).
 */
export const sealingFacts = (
  recovery: EventLog.InvocationRecovery,
  outcome: Outcome.InvocationOutcome,
): ReadonlyArray<Fact.Fact> => {
  const uncertain = recovery.uncertainOperations.length > 0
  const terminal: Outcome.InvocationOutcome =
    uncertain && !(outcome.kind === "failed" && outcome.class === "outcome_unknown")
      ? {
          kind: "failed",
          class: "outcome_unknown",
          ...(outcome.kind === "failed" && outcome.message !== undefined ? { message: outcome.message } : {}),
        }
      : outcome
  return [
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
    { kind: "invocation_ended", outcome: terminal },
  ]
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

/**
 * Seals one open invocation with `outcome` in one batch, from its durable state; returns the
 * terminal outcome written. Fails with the log's error when the read or the batch fails.
 */
export const seal = (
  log: EventLog.EventLogShape,
  invocation: Identity.Invocation,
  outcome: Outcome.InvocationOutcome,
): Effect.Effect<Outcome.InvocationOutcome, EventLogError.EventLogError | EngineError.EngineError, Ids.Ids> =>
  Effect.gen(function* () {
    // Read whatever its length: a crashed run that grew past the read limits is sealed all the same.
    const facts = sealingFacts(yield* log.invocationRecovery(invocation, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY), outcome)
    const writes = yield* Effect.forEach(facts, (fact) => write(invocation, fact))
    yield* log.appendBatch(writes)
    const terminal = facts[facts.length - 1]!
    return terminal.kind === "invocation_ended" ? terminal.outcome : outcome
  })

/**
 * Seals one unfinished invocation a crashed host left: `host_interrupted`, or `outcome_unknown`;
 * `undefined` when another engine's recovery sealed it since it was listed (its seal is refused
 * `Sealed`: nothing is left to do, and nothing failed).
 */
export const sealOne = (log: EventLog.EventLogShape, invocation: Identity.Invocation) =>
  seal(log, invocation, { kind: "failed", class: "host_interrupted" }).pipe(
    Effect.map(
      (outcome): Sealed | undefined => ({
        invocation,
        failureClass: outcome.kind === "failed" && outcome.class === "outcome_unknown" ? "outcome_unknown" : "host_interrupted",
      }),
    ),
    Effect.catchIf(
      (error) => error._tag === "EventLogError" && error.reason._tag === "Rejected" && error.reason.rejection._tag === "Sealed",
      () => Effect.succeed(undefined),
    ),
    Effect.mapError((error) => (error._tag === "EventLogError" ? EngineError.commit(error.message) : error)),
  )

/** Every unfinished invocation of the log, read page by page however many there are. */
export const unfinishedInvocations = (
  log: EventLog.EventLogShape,
): Effect.Effect<ReadonlyArray<Identity.Invocation>, EventLogError.EventLogError> =>
  Effect.gen(function* () {
    const all: Array<Identity.Invocation> = []
    let after: number | undefined = undefined
    for (;;) {
      const page: EventLog.UnfinishedPage = yield* log.unfinishedInvocationPage({
        ...(after === undefined ? {} : { after }),
        limit: Limits.MAX_HISTORY_EVENTS,
      })
      all.push(...page.invocations)
      if (page.next === undefined) return all
      after = page.next
    }
  })

/**
 * Seals every unfinished invocation of the log except those `skip` names.
 * An invocation that cannot be sealed is reported in `unsealed`; the pass goes on with the others.
 */
export const recover = (log: EventLog.EventLogShape, skip: (invocation: Identity.Invocation) => boolean = () => false) =>
  Effect.gen(function* () {
    const unfinished = yield* Effect.mapError(unfinishedInvocations(log), EngineError.fromStore)
    const sealed: Array<Sealed> = []
    const unsealed: Array<Unsealed> = []
    for (const invocation of unfinished) {
      if (skip(invocation)) continue
      yield* sealOne(log, invocation).pipe(
        Effect.match({
          onSuccess: (item) => item !== undefined && sealed.push(item),
          onFailure: (error) => unsealed.push({ invocation, message: error.message }),
        }),
      )
    }
    return { sealed, count: sealed.length, unsealed } satisfies Report
  })
