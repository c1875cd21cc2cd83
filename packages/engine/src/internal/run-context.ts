/**
 * What one run carries through its steps: the log, the bound model, the invocation and its frozen
 * settings, the in-memory context, the cancellation controller, and `commit`, the one path every
 * fact of the run takes to the log (so the live context sees exactly what was committed).
 */
import { EventWrite, type Configuration, type Event, type Identity, type Input, type ModelContext } from "@maka/facts"
import type { EventLog, EventLogError } from "@maka/event-log"
import type { LanguageModel } from "@maka/model"
import { Cancellation, Ids, type ToolCatalog } from "@maka/tools"
import { Clock, Effect, Result, type Redacted, type Ref } from "effect"
import * as EngineError from "../EngineError.ts"
import { faultPoint } from "./fault.ts"
import type { EngineOptions } from "./options.ts"
import type { LiveContext } from "./live-context.ts"

export interface RunSettings {
  readonly invocation: Identity.Invocation
  readonly configuration: Configuration.InvocationConfiguration
  readonly providerOptions: Identity.JsonObject
  readonly context?: ModelContext.ModelRequestContext
  readonly mainOutputLimit?: number
  readonly requestFingerprint?: string
  readonly message: Input.MessageInput
  readonly tools: ToolCatalog.ToolCatalog
  readonly maxSteps: number
  readonly allowPriorUnknown: boolean
  /** Scrubbed from every tool failure message before it is stored (the provider key, secret headers). */
  readonly secrets: ReadonlyArray<Redacted.Redacted<string>>
}

export interface Run {
  readonly log: EventLog.EventLogShape
  readonly model: LanguageModel.LanguageModelShape
  readonly settings: RunSettings
  readonly options: EngineOptions
  readonly cancellation: Cancellation.Controller
  readonly steering: Ref.Ref<ReadonlyArray<Input.DeliveredMessage>>
  /** Set once the opening is durable. */
  live: LiveContext | undefined
  /** The opening's commit failed without a refusal: it may have landed. */
  openingUncertain: boolean
  /**
   * A commit failed, or a step's journal was abandoned: what the log holds may differ from what the
   * run knows, so the seal reads the durable state to resolve it.
   */
  mayBeUnresolved: boolean
  /** Events committed by this run, for `events()` subscribers. */
  readonly onCommitted: (events: ReadonlyArray<Event.StoredEvent>) => Effect.Effect<void>
}

/** A fresh event id and the informational time of a write. */
export const stamp = Effect.all({ id: Ids.next, recordedAt: Clock.currentTimeMillis })

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
export const commitError = (error: EventLogError.EventLogError) => EngineError.commit(error.message)

/** Commits writes in one transaction and applies them to the live context, uninterruptibly. */
export const commit = (run: Run, writes: ReadonlyArray<EventWrite.EventWrite>) =>
  Effect.uninterruptible(
    Effect.gen(function* () {
      const sequences = yield* Effect.tapError(run.log.appendBatch(writes), () =>
        Effect.sync(() => {
          run.mayBeUnresolved = true
        }),
      )
      faultPoint("engine.commit")
      const stored = writes.map((write, index) => ({ sequence: sequences[index]!, event: write.event }))
      for (const [index, item] of stored.entries()) run.live?.apply(item, writes[index]!.json)
      yield* run.onCommitted(stored)
      return sequences
    }),
  )

export const commitFacts = (run: Run, facts: ReadonlyArray<Event.RuntimeEvent["fact"]>) =>
  Effect.flatMap(
    Effect.forEach(facts, (fact) => plainWrite(run, fact)),
    (writes) => Effect.mapError(commit(run, writes), commitError),
  )

export const isCancelled = (run: Run) => run.cancellation.cancellation.isRequested

export const failIfCancelled = (run: Run) =>
  Effect.flatMap(isCancelled(run), (cancelled) => (cancelled ? Effect.fail(EngineError.cancelled()) : Effect.void))
