/**
 * Handoff (docs/engine.md §5.10): the in-memory gate that schedules a pause at a settled step
 * boundary, the pause a run seals there (`handoff_paused` with its frozen settings, remaining steps
 * and compaction budget), and the successor's claim on the sealed run's boundary, checked against
 * the pause before anything is written (docs/engine.md §5.9 `prepareClaim`).
 */
import { Canonical, Identity, Lineage, type Fact } from "@maka/facts"
import type { EventLog, EventLogError } from "@maka/event-log"
import { Deferred, Effect } from "effect"
import * as EngineError from "../EngineError.ts"
import type { Budget } from "./compaction.ts"
import { storeError, type Run } from "./run-context.ts"

/** What a requested handoff became: the sealed pause, or nothing (the run ended first, or the preflight failed). */
export type HandoffResult = Lineage.HandoffPause | undefined

type GateState = "running" | "requested" | "held" | "committed" | "sealed" | "closed"

/** The `Busy` message of a reservation the gate refuses in `state`. */
export const gateRefusal = (state: GateState): string => `the run's handoff gate is ${state}`

/**
 * Whether `message` is a reservation refused because the run has ended (paused or sealed otherwise):
 * the facade's `handoff()` resolves `null` for it, as for a run that ended while the reservation waited.
 */
export const refusedAsEnded = (message: string): boolean => message === gateRefusal("closed") || message === gateRefusal("sealed")

/**
 * Whether `message` is a reservation refused because a handoff of the run was asked for already and
 * is under way or sealed (requested, held at a boundary, committing, sealed): the facade's
 * `handoff()` during `close({handoff: true})` then shares the pause that close takes.
 */
export const refusedAsTaken = (message: string): boolean =>
  (["requested", "held", "committed", "sealed"] as const).some((state) => message === gateRefusal(state))

/**
 * The gate of one run (docs/engine.md §5.10): `running → requested → held → committed → sealed`, or
 * `closed` when the run ends. It only schedules: the store's checks decide whether a pause seals.
 */
export class HandoffGate {
  private state: GateState = "running"
  private pending: { readonly intent: Lineage.HandoffIntent; readonly done: Deferred.Deferred<HandoffResult> } | undefined
  /** Completed by the next reservation: what a retry's backoff waits on beside its sleep. */
  private reserved: Deferred.Deferred<void> | undefined

  constructor(readonly rootRunId: string) {}

  get current(): GateState {
    return this.state
  }

  private steeringEnded: string | undefined

  /** Whether a steering message can still be delivered: not once a pause commits or the run ended. */
  get acceptsSteering(): boolean {
    return this.steeringEnded === undefined && (this.state === "running" || this.state === "requested" || this.state === "held")
  }

  /** Why steering ends here, once it has (`endSteering`). */
  get steeringEndedBecause(): string | undefined {
    return this.steeringEnded
  }

  /**
   * No later step will deliver steering (the run answered with nothing left to deliver, or its last
   * step begins): later steering is refused with `reason` rather than dropped. Returns `true`.
   */
  endSteering(reason = EngineError.STEERING_ENDED_MESSAGE): boolean {
    this.steeringEnded ??= reason
    return true
  }

  /** Reserves a handoff at the next step boundary; `Busy` unless the run is running and the intent names its root. */
  reserve(intent: Lineage.HandoffIntent): Effect.Effect<Deferred.Deferred<HandoffResult>, EngineError.EngineError> {
    return Effect.suspend(() => {
      if (intent.rootRunId !== this.rootRunId) return Effect.fail(EngineError.invalidInput("handoff changes the logical Run"))
      if (this.state !== "running") return Effect.fail(EngineError.busy(gateRefusal(this.state)))
      const done = Deferred.makeUnsafe<HandoffResult>()
      this.state = "requested"
      this.pending = { intent, done }
      const reserved = this.reserved
      this.reserved = undefined
      return reserved === undefined ? Effect.succeed(done) : Effect.as(Deferred.succeed(reserved, undefined), done)
    })
  }

  /** What the handoff already requested (reserved, held or committing) becomes, when one is. */
  get pendingResult(): Deferred.Deferred<HandoffResult> | undefined {
    return this.pending?.done
  }

  /** Resolves once a handoff is requested (at once when one is): a retry's backoff ends for it. */
  readonly requested: Effect.Effect<void> = Effect.suspend(() => {
    if (this.state === "requested") return Effect.void
    this.reserved ??= Deferred.makeUnsafe<void>()
    return Deferred.await(this.reserved)
  })

  /**
   * Drops a reservation not yet committed (requested, or held while its preflight runs): nothing is
   * written and the same run goes on; a held preflight's commit then fails and the step proceeds.
   */
  readonly drop: Effect.Effect<void> = Effect.suspend(() => {
    if ((this.state !== "requested" && this.state !== "held") || this.pending === undefined) return Effect.void
    const { done } = this.pending
    this.pending = undefined
    this.state = "running"
    return Deferred.succeed(done, undefined)
  })

  /** The intent to hold at this boundary, if one is requested (the state becomes `held`). */
  hold(): Lineage.HandoffIntent | undefined {
    if (this.state !== "requested" || this.pending === undefined) return undefined
    this.state = "held"
    return this.pending.intent
  }

  /** The preflight failed or the run was cancelled: back to `running`, the caller learns nothing sealed. */
  readonly release: Effect.Effect<void> = Effect.suspend(() => {
    if (this.state !== "held" || this.pending === undefined) return Effect.void
    const { done } = this.pending
    this.pending = undefined
    this.state = "running"
    return Deferred.succeed(done, undefined)
  })

  /**
   * Steering came during the preflight: the run goes on to deliver it, and the reservation is kept
   * (back to `requested`) for the next step boundary, where the pause is tried again.
   */
  defer(): void {
    if (this.state === "held") this.state = "requested"
  }

  /**
   * The pause of `held` (the intent `hold()` returned: the hold's ticket) is about to be appended;
   * refused unless that very intent is the one held, so a stale hold cannot commit a later one.
   */
  commit(held: Lineage.HandoffIntent): boolean {
    if (this.state !== "held" || this.pending?.intent !== held) return false
    this.state = "committed"
    return true
  }

  /** The pause is durable. */
  sealed(pause: Lineage.HandoffPause): Effect.Effect<void> {
    return Effect.suspend(() => {
      const pending = this.pending
      this.pending = undefined
      this.state = "sealed"
      return pending === undefined ? Effect.void : Deferred.succeed(pending.done, pause)
    })
  }

  /** The run ended: a waiting reservation learns nothing was sealed. */
  readonly close: Effect.Effect<void> = Effect.suspend(() => {
    const pending = this.pending
    this.pending = undefined
    if (this.state !== "sealed") this.state = "closed"
    return pending === undefined ? Effect.void : Deferred.succeed(pending.done, undefined)
  })
}

/** The tool checkpoint of a pause: the catalog's digest and its sorted names. */
export const toolsOf = (run: Run): Lineage.HandoffTools => ({
  catalogDigest: run.settings.tools.digest,
  names: [...run.settings.tools.names],
})

/** The pause a run seals at step `step` (0-based) with the replay the successor's first request must match. */
export const pauseOf = (
  run: Run,
  intent: Lineage.HandoffIntent,
  step: number,
  replayDigest: string,
  budget: Budget,
): Lineage.HandoffPause => {
  const { settings } = run
  // The continuation cut of a lineage-scoped run (docs/log-format.md §2.6): a continuation's is its
  // claim's base, and a handoff passes on its predecessor's, neither adding nor dropping one.
  const replayBase =
    settings.successor !== undefined
      ? settings.successor.pause.execution.replayBase
      : settings.continuation !== undefined
        ? run.claim?.base.highWater
        : undefined
  return {
    intent,
    remainingSteps: settings.maxSteps - step,
    execution: {
      replay: { version: 1, digest: replayDigest, routeIdentity: run.model.routeIdentity },
      ...(settings.context === undefined ? {} : { context: settings.context }),
      providerOptions: settings.providerOptions,
      ...(settings.mainOutputLimit === undefined ? {} : { mainOutputLimit: settings.mainOutputLimit }),
      tools: toolsOf(run),
      compaction: budget,
      ...(replayBase === undefined ? {} : { replayBase }),
    },
  }
}

/** A refusal of the successor's admission: nothing is written. */
const refused = (message: string) => EngineError.reconciliation(message)

/** A log read of the claim's checks: a refusal is `ReconciliationRequired`, anything else a store failure. */
export const readError = (error: EventLogError.EventLogError) =>
  error.reason._tag === "Rejected" && error.reason.rejection._tag === "InvalidTransition"
    ? EngineError.reconciliation(error.message)
    : storeError(error)

/**
 * The base a run's lineage passes on (docs/engine.md §5.9 step 3): a continuation's or handoff's claim
 * base, or the session just before a message-opened run.
 */
export const inheritedBase = (log: EventLog.EventLogShape, run: Identity.Invocation, opening: Fact.InvocationOpened) =>
  opening.input.kind === "continuation" || opening.input.kind === "handoff"
    ? Effect.succeed(opening.input.claim.base)
    : Effect.mapError(log.contextBeforeRun(run), readError)

/** The claim a pause's successor makes on the paused run's boundary: the pause's claim id and replay. */
export const pauseClaim = (
  prefix: { readonly invocation: Identity.Invocation; readonly highWater: number; readonly digest: string },
  base: Lineage.SessionBase,
  pause: Lineage.HandoffPause,
): Lineage.ContinuationClaim => ({
  id: pause.intent.claimId,
  source: { invocation: prefix.invocation, highWater: prefix.highWater, digest: prefix.digest },
  base,
  replay: pause.execution.replay,
})

/** The paused run's opening and its sealed pause, read from its run prefix. */
export const readPaused = (log: EventLog.EventLogShape, paused: Identity.Invocation) =>
  Effect.gen(function* () {
    const prefix = yield* Effect.mapError(log.runPrefix(paused.sessionId, paused.runId), readError)
    if (prefix === undefined || !Identity.sameInvocation(prefix.invocation, paused)) {
      return yield* Effect.fail(refused("no sealed run of that invocation"))
    }
    const opening = prefix.events[0]!.event.fact
    const last = prefix.events[prefix.events.length - 1]!.event.fact
    if (opening.kind !== "invocation_opened") return yield* Effect.fail(refused("the paused run has no opening"))
    if (last.kind !== "invocation_ended" || last.outcome.kind !== "handoff_paused") {
      return yield* Effect.fail(refused("the run is not sealed handoff_paused"))
    }
    return { prefix, opening: opening satisfies Fact.InvocationOpened, pause: last.outcome.pause }
  })

/**
 * The successor's claim (docs/engine.md §5.9 steps 1–8 for a handoff): the paused run's exact
 * boundary, the inherited base, identical settings and catalog, and a replay whose digest equals
 * the pause's. Every failure is `ReconciliationRequired` and writes nothing.
 */
export const prepareClaim = (run: Run, replayDigest: (source: EventLog.ModelContextSource) => Effect.Effect<string, EngineError.EngineError>) =>
  Effect.gen(function* () {
    const successor = run.settings.successor!
    const { log } = run
    const { prefix, opening, pause } = yield* readPaused(log, successor.paused)
    if (!Canonical.equal(pause, successor.pause)) return yield* Effect.fail(refused("the pause differs from the sealed one"))
    const expected = Lineage.successorOf(pause.intent, successor.paused)
    if (!Identity.sameInvocation(expected, run.settings.invocation)) {
      return yield* Effect.fail(refused("the successor's invocation is not the pause's"))
    }
    if (!Canonical.equal(opening.configuration, run.settings.configuration)) {
      return yield* Effect.fail(refused("a handoff successor runs with the paused run's configuration"))
    }
    const execution = pause.execution
    if (!Canonical.equal(execution.providerOptions, run.settings.providerOptions)) {
      return yield* Effect.fail(refused("a handoff successor runs with the paused run's provider options"))
    }
    if (!Canonical.equal(execution.context ?? null, run.settings.context ?? null)) {
      return yield* Effect.fail(refused("a handoff successor runs with the paused run's context windows"))
    }
    if (execution.mainOutputLimit !== run.settings.mainOutputLimit) {
      return yield* Effect.fail(refused("a handoff successor runs with the paused run's output limit"))
    }
    if (execution.replay.routeIdentity !== run.model.routeIdentity) {
      return yield* Effect.fail(refused("a handoff successor runs on the paused run's route"))
    }
    if (execution.tools.catalogDigest !== run.settings.tools.digest) {
      return yield* Effect.fail(refused("a handoff successor restores the paused run's tool catalog"))
    }
    const base = yield* inheritedBase(log, successor.paused, opening)
    // A lineage-scoped run's pause (one with a replay base) replays the paused run's lineage, as the
    // successor reads it; any other replays the session.
    const lineage = execution.replayBase === undefined ? {} : { lineageOf: successor.paused.invocationId }
    const source = yield* Effect.mapError(log.readModelContext(successor.paused.sessionId, lineage), readError)
    const digest = yield* replayDigest(source)
    if (digest !== execution.replay.digest) return yield* Effect.fail(refused("handoff admission replay changed after sealing"))
    const claim = pauseClaim(prefix, base, pause)
    return claim
  })
