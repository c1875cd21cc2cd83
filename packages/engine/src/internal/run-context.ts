/**
 * What one run carries through its steps: the log, the bound model, the invocation and its frozen
 * settings, the in-memory context, the cancellation controller, and `commit`, the one path every
 * fact of the run takes to the log (so the live context sees exactly what was committed).
 */
import { EventWrite, type Configuration, type Event, type Identity, type Input, type Lineage, type ModelContext } from "@maka/facts"
import { EventLogError, type EventLog } from "@maka/event-log"
import type { LanguageModel } from "@maka/model"
import { Cancellation, Ids, type ToolCatalog } from "@maka/tools"
import { Clock, Effect, Result, type Redacted, type Ref, type Semaphore } from "effect"
import * as EngineError from "../EngineError.ts"
import * as Hints from "../Hints.ts"
import { faultPoint } from "./fault.ts"
import type { EngineOptions } from "./options.ts"
import type { HandoffGate } from "./handoff.ts"
import type { LiveContext } from "./live-context.ts"
import * as Steering from "./steering.ts"

export interface RunSettings {
  readonly invocation: Identity.Invocation
  readonly configuration: Configuration.InvocationConfiguration
  readonly providerOptions: Identity.JsonObject
  readonly context?: ModelContext.ModelRequestContext
  readonly mainOutputLimit?: number
  readonly requestFingerprint?: string
  /** A continuation: the sealed run it claims (docs/engine.md §5.9). */
  readonly continuation?: { readonly source: Identity.Invocation }
  /** A handoff successor: the paused run and its sealed pause (docs/engine.md §5.10). */
  readonly successor?: { readonly paused: Identity.Invocation; readonly pause: Lineage.HandoffPause }
  /** The message of a message run; a `context_compact` run and a handoff successor have none. */
  readonly message?: Input.MessageInput
  readonly tools: ToolCatalog.ToolCatalog
  readonly maxSteps: number
  readonly allowPriorUnknown: boolean
  /** Scrubbed from every tool failure message before it is stored (the provider key, secret headers). */
  readonly secrets: ReadonlyArray<Redacted.Redacted<string>>
}

/**
 * The live contexts of sessions whose last run ended cleanly in this engine, kept for their next run
 * (docs/engine.md §5.4 "Kept context"): a new turn then costs O(new events) instead of a read of the
 * whole session. Bounded by count and by the bytes the contexts hold together (as the read limits
 * count them): the least recently used session is dropped first, and a context over the whole byte
 * bound is not kept.
 */
export class SessionContexts<C extends { size(): { readonly bytes: number } } = LiveContext> {
  private readonly contexts = new Map<string, { readonly context: C; readonly bytes: number }>()
  private bytes = 0

  constructor(
    private readonly capacity: number,
    private readonly maxBytes: number,
  ) {}

  /** Takes the session's context out: the run that took it owns it until it puts it back. */
  take(sessionId: string): C | undefined {
    const entry = this.contexts.get(sessionId)
    if (entry === undefined) return undefined
    this.contexts.delete(sessionId)
    this.bytes -= entry.bytes
    return entry.context
  }

  put(sessionId: string, context: C): void {
    this.take(sessionId)
    const bytes = context.size().bytes
    if (bytes > this.maxBytes) return
    this.contexts.set(sessionId, { context, bytes })
    this.bytes += bytes
    while (this.contexts.size > this.capacity || this.bytes > this.maxBytes) this.take(this.contexts.keys().next().value!)
  }

  /** Drops every kept context (the engine closed): nothing it kept outlives it. */
  clear(): void {
    this.contexts.clear()
    this.bytes = 0
  }

  /** How many contexts are kept, and the bytes they hold together. */
  held(): { readonly count: number; readonly bytes: number } {
    return { count: this.contexts.size, bytes: this.bytes }
  }
}

export interface Run {
  readonly log: EventLog.EventLogShape
  readonly model: LanguageModel.LanguageModelShape
  readonly settings: RunSettings
  /** A message run's opening, built and checked at admission; the runner appends it as it is. */
  readonly openingWrite?: EventWrite.EventWrite | undefined
  readonly options: EngineOptions
  readonly cancellation: Cancellation.Controller
  readonly steering: Ref.Ref<ReadonlyArray<Input.DeliveredMessage>>
  /** Set once the opening is durable. */
  live: LiveContext | undefined
  /** The run's handoff gate (docs/engine.md §5.10). */
  readonly handoff: HandoffGate
  /** A successor's claim on the paused run's boundary, prepared before its opening. */
  claim: Lineage.ContinuationClaim | undefined
  /** The opening, once it is durable, with its sequence and stored JSON. */
  opening: { readonly stored: Event.StoredEvent; readonly json: string } | undefined
  /**
   * An opening that rides the run's first commit instead of one of its own (a message run that goes
   * on from a context read before it, docs/engine.md §5.3): its write, carried, and the admission
   * that commit signals. Undefined once the opening is durable, or when it committed alone.
   */
  pendingOpening: { readonly write: EventWrite.EventWrite; readonly admit: Effect.Effect<void> } | undefined
  /** The engine's kept contexts, per session. */
  readonly contexts: SessionContexts
  /** The opening's commit failed without a refusal: it may have landed. */
  openingUncertain: boolean
  /**
   * A commit failed, or a step's journal was abandoned: what the log holds may differ from what the
   * run knows, so the seal reads the durable state to resolve it.
   */
  mayBeUnresolved: boolean
  /**
   * A commit of the run whose outcome is unknown (its own, or a background summary's, which may have
   * carried the run's settlements): what the run knows of the log may be wrong, so it commits
   * nothing more but what resolves it (the seal, which reads the durable state first).
   */
  uncertain: EventLogError.EventLogError | undefined
  /**
   * Writes built but not yet committed, which ride the run's next commit (docs/engine.md §5.4): the
   * settlements of a step, steering, and a completion with its last observations. A step has two
   * durability points: the request (with the settlements and steering before it) and the first
   * dispatch (with the completion). Nothing in here is shown before it is durable.
   */
  carry: Array<EventWrite.EventWrite>
  /**
   * The steering delivered since the run's last main request committed: the next main request
   * carries it with the step before it, so `steer` bounds it together with the queue (a handoff
   * preflight may commit it before that request, with no cut between them).
   */
  readonly steeringWindow: { current: Steering.Window }
  /**
   * One commit of the run at a time: a background summary commits beside the step loop, and the
   * live context must see every commit in sequence order.
   */
  readonly commitLock: Semaphore.Semaphore
  /** Events committed by this run, for `events()` subscribers. */
  readonly onCommitted: (events: ReadonlyArray<Event.StoredEvent>) => Effect.Effect<void>
}

/** A fresh event id and the informational time of a write (one per event: chained, not `Effect.all`). */
export const stamp = Effect.flatMap(Ids.next, (id) => Effect.map(Clock.currentTimeMillis, (recordedAt) => ({ id, recordedAt })))

/** Builds a checked plain write of the run's invocation. */
export const plainWrite = (run: Run, fact: Event.RuntimeEvent["fact"]) =>
  Effect.flatMap(stamp, ({ id, recordedAt }) => {
    const built = EventWrite.plain({ id, recordedAt, invocation: run.settings.invocation, fact })
    return Result.isSuccess(built)
      ? Effect.succeed(built.success)
      : Effect.fail(EngineError.internal(`the engine built an invalid ${fact.kind}: ${built.failure.message}`))
  })

/** A checked write of an event built by the caller. */
export const eventWrite = (event: Event.RuntimeEvent) => {
  const built = EventWrite.plain(event)
  return Result.isSuccess(built)
    ? Effect.succeed(built.success)
    : Effect.fail(EngineError.internal(`the engine built an invalid ${event.fact.kind}: ${built.failure.message}`))
}

export const storeError = (error: EventLogError.EventLogError) => EngineError.fromStore(error)
/** A refused or failed commit of the run; one refused because the run is sealed says who sealed it. */
export const commitError = (error: EventLogError.EventLogError) =>
  EngineError.commit(
    Hints.append(
      error.message,
      error.reason._tag === "Rejected" && error.reason.rejection._tag === "Sealed"
        ? Hints.SEALED_HINT
        : error.reason._tag === "WriterBusy" && error.reason.lost === true
          ? Hints.WRITER_LOST_HINT
          : undefined,
    ),
  )

/** An event of a batch about to commit: its sequence is assigned, the transaction still open. */
export interface Leading {
  readonly sequence: number
  readonly json: string
  readonly event: Event.RuntimeEvent
}

/** Builds the trailing writes of a commit from its leading writes, once their sequences are known. */
export type Complete = (leading: ReadonlyArray<Leading>) => ReadonlyArray<EventWrite.EventWrite>

/** The refusals of a commit that carried the run's opening over a kept context the session outgrew. */
const staleFolds = new WeakSet<EventLogError.EventLogError>()

/**
 * Whether `error` refused a commit because it carried the run's opening over a kept context the
 * session has outgrown: something other than this run appended to the session after the engine found
 * the context current (docs/engine.md §5.4 "Kept context"). Nothing of the commit landed; `commit`
 * then writes the opening alone, and the run's context is stale (read again before it is used).
 */
export const isStaleFold = (error: EventLogError.EventLogError): boolean => staleFolds.has(error)

/** Appends writes (and what `complete` builds after them) in one transaction, then applies them. */
const append = (run: Run, writes: ReadonlyArray<EventWrite.EventWrite>, complete?: Complete) =>
  Effect.gen(function* () {
    const built: Array<EventWrite.EventWrite> = [...writes]
    // The run's opening rides this commit over a kept context: inside the transaction, the store says
    // whether the session grew past that context's high water (SQLite: its writer's index knows).
    const live = run.live
    const folded = run.pendingOpening !== undefined && live !== undefined && !live.stale && writes.includes(run.pendingOpening.write)
    const keptHighWater = folded ? live.highWaterMark : undefined
    const completing =
      complete === undefined && keptHighWater === undefined
        ? undefined
        : (sequences: ReadonlyArray<number>, priorHighWater?: (sessionId: string) => number | undefined) => {
            // Unknown (PostgreSQL, or a wrapper of the log that does not pass it on): not checked.
            const prior = keptHighWater === undefined ? undefined : priorHighWater?.(run.settings.invocation.sessionId)
            if (prior !== undefined && prior !== keptHighWater) {
              live!.markStale()
              const refused = EventLogError.make({
                _tag: "Database",
                message: `the session grew past the run's kept context (events after ${keptHighWater}, up to ${prior})`,
              })
              staleFolds.add(refused)
              throw refused
            }
            if (complete === undefined) return []
            const trailing = complete(writes.map((write, index) => ({ sequence: sequences[index]!, json: write.json, event: write.event })))
            built.length = writes.length
            built.push(...trailing)
            return trailing
          }
    const sequences = yield* Effect.tapError(run.log.appendBatch(writes, completing), (error) =>
      Effect.sync(() => {
        // A stale fold was refused before anything was written: the run still knows the log.
        if (!isStaleFold(error)) run.mayBeUnresolved = true
        if (error.reason._tag === "OutcomeUnknown") run.uncertain ??= error
      }),
    )
    faultPoint("engine.commit")
    // A main request committed: the steering delivered before it is behind it.
    if (built.some(({ event: { fact } }) => fact.kind === "model_requested" && fact.purpose === "main")) run.steeringWindow.current = Steering.emptyWindow
    const stored = built.map((write, index) => ({ sequence: sequences[index]!, event: write.event }))
    for (const [index, item] of stored.entries()) run.live?.apply(item, built[index]!.json)
    yield* run.onCommitted(stored)
    // The carried opening is durable: the run is admitted (after its events reach the feed).
    const pending = run.pendingOpening
    const opened = pending === undefined ? -1 : built.indexOf(pending.write)
    if (pending !== undefined && opened >= 0) {
      run.opening = { stored: stored[opened]!, json: pending.write.json }
      run.pendingOpening = undefined
      yield* pending.admit
    }
    return sequences
  })

/**
 * Commits the run's carried writes, then `writes`, then what `complete` builds from the sequences
 * of both, in one transaction, and applies them to the live context, uninterruptibly. Returns the
 * sequences of `writes` and the completed writes. When the store refuses the batch, the carried
 * writes are committed on their own at once (a refusal of the rest never costs an effect's record,
 * docs/engine.md §5.4), and the refusal is returned: the rest is not written.
 */
export const commit = (run: Run, writes: ReadonlyArray<EventWrite.EventWrite>, complete?: Complete, resolving = false) =>
  Effect.uninterruptible(
    run.commitLock.withPermits(1)(Effect.gen(function* () {
      // After an unknown outcome only the seal commits: it reads what landed before it writes.
      if (run.uncertain !== undefined && !resolving) return yield* Effect.fail(run.uncertain)
      const carried = run.carry
      run.carry = []
      if (carried.length === 0) return yield* append(run, writes, complete)
      const together = yield* Effect.result(append(run, [...carried, ...writes], complete))
      if (Result.isSuccess(together)) return together.success.slice(carried.length)
      // Only a commit that may have landed keeps its carried writes in doubt.
      if (together.failure.reason._tag === "OutcomeUnknown") return yield* Effect.fail(together.failure)
      yield* append(run, carried)
      // Refused for the kept context only: writes that do not hash it follow the opening at once.
      if (isStaleFold(together.failure) && complete === undefined) return yield* append(run, writes)
      return yield* Effect.fail(together.failure)
    })),
  )

/** Commits what the run carries, if anything (before its durable state is read, or at the end). */
export const flushCarry = (run: Run, resolving = false) =>
  run.carry.length === 0 ? Effect.void : Effect.asVoid(commit(run, [], undefined, resolving))

/** Commits facts of the run; `resolving`: the seal's, which commit after an unknown outcome too. */
export const commitFacts = (run: Run, facts: ReadonlyArray<Event.RuntimeEvent["fact"]>, resolving = false) =>
  Effect.flatMap(
    Effect.forEach(facts, (fact) => plainWrite(run, fact)),
    (writes) => Effect.mapError(commit(run, writes, undefined, resolving), commitError),
  )

export const isCancelled = (run: Run) => run.cancellation.cancellation.isRequested

export const failIfCancelled = (run: Run) =>
  Effect.flatMap(isCancelled(run), (cancelled) => (cancelled ? Effect.fail(EngineError.cancelled()) : Effect.void))
