/**
 * The `Engine` service (docs/architecture.md §8, docs/engine.md §5.1–§5.2): admission that returns only after the
 * opening is durable, one live run per session, the runner in the engine's scope, live `events()`,
 * steering, cancellation that drains, and recovery. Time, randomness and ids come from services.
 */
import {
  Codec,
  Configuration,
  Digest,
  Identity,
  Input,
  Limits,
  ModelContext,
  type Event,
  type Outcome,
} from "@maka/facts"
import { EventLog } from "@maka/event-log"
import type { LanguageModel } from "@maka/model"
import { Cancellation, Ids, ToolCatalog } from "@maka/tools"
import { Context, Deferred, Effect, Exit, Fiber, Layer, type Redacted, Ref, Result, Schema, Scope, Semaphore, Stream, SubscriptionRef } from "effect"
import * as EngineError from "./EngineError.ts"
import { defaults, MAX_QUEUED_STEERING, resolveOptions, SESSION_CONTEXTS, type EngineOptions } from "./internal/options.ts"
import { SessionContexts, type Run, type RunSettings } from "./internal/run-context.ts"
import { catalogOf, reservedNameProblem } from "./internal/read-tool-result.ts"
import { runCompact, runMessage } from "./internal/runner.ts"
import * as Recovery from "./Recovery.ts"

export { defaults, type EngineOptions }

export interface StartInput {
  readonly invocation: Identity.Invocation
  /** The bound model; its `model` must equal `configuration.model.model`. */
  readonly model: LanguageModel.LanguageModelShape
  readonly configuration: Configuration.InvocationConfiguration
  readonly message: Input.MessageInput
  readonly tools: ToolCatalog.ToolCatalog
  readonly maxSteps?: number
  readonly allowPriorUnknown?: boolean
  readonly providerOptions?: Identity.JsonObject
  readonly context?: ModelContext.ModelRequestContext
  readonly mainOutputLimit?: number
  readonly requestFingerprint?: string
  /** Secrets scrubbed from every tool failure message before it is stored (the provider key, secret headers). */
  readonly secrets?: ReadonlyArray<Redacted.Redacted<string>>
  /** Cancels the run when it aborts; aborted before admission, nothing is written. */
  readonly signal?: AbortSignal
}

/** A standalone compaction (docs/engine.md §5.12): a `context_compact` invocation over the session's history. */
export interface CompactInput {
  readonly invocation: Identity.Invocation
  readonly model: LanguageModel.LanguageModelShape
  readonly configuration: Configuration.InvocationConfiguration
  readonly providerOptions?: Identity.JsonObject
  readonly context?: ModelContext.ModelRequestContext
  /** The summary request's output limit (default 8,000). */
  readonly mainOutputLimit?: number
  /** Names the request; a fresh id when absent. */
  readonly requestFingerprint?: string
  readonly secrets?: ReadonlyArray<Redacted.Redacted<string>>
  readonly signal?: AbortSignal
}

export interface RunResult {
  readonly invocation: Identity.Invocation
  readonly outcome: Outcome.InvocationOutcome
}

export interface RunningInvocation {
  readonly invocation: Identity.Invocation
  readonly toolNames: ReadonlyArray<string>
  /** Every committed event of this invocation from its opening, live, ending after the terminal. */
  readonly events: Stream.Stream<Event.StoredEvent>
  /** Queues a user message for the next step boundary. */
  readonly steer: (text: string) => Effect.Effect<void, EngineError.EngineError>
  /** Requests cancellation: dispatched effects finish, the run seals `cancelled`. */
  readonly cancel: Effect.Effect<void>
  readonly wait: Effect.Effect<RunResult, EngineError.EngineError>
}

export interface EngineShape {
  readonly log: EventLog.EventLogShape
  readonly start: (input: StartInput) => Effect.Effect<RunningInvocation, EngineError.EngineError>
  /** `start` then `wait`. */
  readonly run: (input: StartInput) => Effect.Effect<RunResult, EngineError.EngineError>
  readonly recover: Effect.Effect<Recovery.Report, EngineError.EngineError>
  /**
   * Compacts the session's history before this invocation into a checkpoint; resolves with the
   * terminal `context_compact_finished {compacted | unchanged | failed}`, or a failed or cancelled one.
   */
  readonly compact: (input: CompactInput) => Effect.Effect<RunResult, EngineError.EngineError>
  /** Cancels every live run and waits until each is sealed. */
  readonly close: Effect.Effect<void>
}

export class Engine extends Context.Service<Engine, EngineShape>()("@maka/engine/Engine") {}

const decodeClosed = <S extends Schema.ConstraintDecoder<unknown>>(schema: S, value: unknown, what: string) => {
  const decoded = Codec.decodeClosed(schema)(value)
  return Result.isFailure(decoded) ? `${what}: ${decoded.failure.message}` : undefined
}

/** What `start` and `compact` share: everything but the message and the tools. */
type LaunchInput = Omit<StartInput, "message" | "tools"> & {
  readonly message?: Input.MessageInput
  readonly tools?: ToolCatalog.ToolCatalog
}

/** The input checks of docs/engine.md §5.2 for a message run; the first problem, or `undefined`. */
export const validateInput = (input: LaunchInput): string | undefined => {
  const maxSteps = input.maxSteps ?? Limits.DEFAULT_MAX_STEPS
  if (!Number.isSafeInteger(maxSteps) || maxSteps < 1 || maxSteps > Limits.MAX_STEPS) {
    return `maxSteps must be an integer in 1..${Limits.MAX_STEPS}`
  }
  const limit = input.mainOutputLimit
  if (limit !== undefined && (!Number.isSafeInteger(limit) || limit < 1 || limit > Limits.MAX_MAIN_OUTPUT_LIMIT)) {
    return `mainOutputLimit must be an integer in 1..${Limits.MAX_MAIN_OUTPUT_LIMIT}`
  }
  const problems = [
    decodeClosed(Identity.Invocation, input.invocation, "invocation"),
    input.context === undefined ? undefined : decodeClosed(ModelContext.ModelRequestContext, input.context, "context"),
    input.providerOptions === undefined ? undefined : decodeClosed(Identity.JsonObject, input.providerOptions, "providerOptions"),
  ]
  const first = [...problems, reservedNameProblem(input.tools ?? ToolCatalog.empty)].find((problem) => problem !== undefined)
  if (first !== undefined) return first
  const binding = input.configuration.model
  if (binding !== undefined && binding.model !== input.model.model) {
    return `the configuration's model ${binding.model} differs from the provider's model ${input.model.model}`
  }
  const opening = Codec.decodeFact(
    {
      kind: "invocation_opened",
      input:
        input.message === undefined
          ? { kind: "context_compact", requestFingerprint: input.requestFingerprint }
          : {
              kind: "message",
              content: input.message,
              ...(input.requestFingerprint === undefined ? {} : { requestFingerprint: input.requestFingerprint }),
            },
      configuration: input.configuration,
    },
    input.invocation,
  )
  return Result.isFailure(opening) ? opening.failure.message : undefined
}

/** Waits until `signal` aborts; its listener is removed when the wait ends or is interrupted. */
const onAbort = (signal: AbortSignal): Effect.Effect<void> =>
  Effect.callback<void>((resume) => {
    const listener = () => resume(Effect.void)
    signal.addEventListener("abort", listener, { once: true })
    return Effect.sync(() => signal.removeEventListener("abort", listener))
  })

/** The frozen settings of a run from its input; its catalog gains `read_tool_result` over `log`. */
const runSettings = (input: LaunchInput, log: EventLog.EventLogShape): RunSettings => ({
  invocation: input.invocation,
  configuration: input.configuration,
  providerOptions: input.providerOptions ?? {},
  ...(input.context === undefined ? {} : { context: input.context }),
  ...(input.mainOutputLimit === undefined ? {} : { mainOutputLimit: input.mainOutputLimit }),
  ...(input.requestFingerprint === undefined ? {} : { requestFingerprint: input.requestFingerprint }),
  ...(input.message === undefined ? {} : { message: input.message }),
  tools: catalogOf(input.tools ?? ToolCatalog.empty, log, input.invocation.sessionId),
  maxSteps: input.maxSteps ?? Limits.DEFAULT_MAX_STEPS,
  allowPriorUnknown: input.allowPriorUnknown ?? false,
  secrets: input.secrets ?? [],
})

/**
 * Every committed event of a run from its opening, live: ends after the terminal, or when the run
 * ended without one (its terminal could not be appended).
 */
const liveEvents = (
  progress: SubscriptionRef.SubscriptionRef<{ readonly total: number; readonly done: boolean }>,
  committed: ReadonlyArray<Event.StoredEvent>,
): Stream.Stream<Event.StoredEvent> =>
  Stream.suspend(() => {
    let emitted = 0
    return Stream.flatMap(SubscriptionRef.changes(progress).pipe(Stream.takeUntil((state) => state.done)), (state) => {
      const next = committed.slice(emitted, state.total)
      emitted = Math.max(emitted, state.total)
      return Stream.fromIterable(next)
    })
  })

/**
 * Queues a steering message after the whole validation of the fact it becomes, so it can always be
 * committed; the queue is bounded (`MAX_QUEUED_STEERING`, then `Busy`).
 */
const steer = (invocation: Identity.Invocation, steering: Ref.Ref<ReadonlyArray<Input.DeliveredMessage>>, text: string) =>
  Effect.gen(function* () {
    const content = { text }
    const messageId = yield* Ids.next
    const delivered = { messageId, content, submittedContentDigest: Digest.messageContent(content) }
    const checked = Codec.decodeFact({ kind: "message_steered", message: delivered }, invocation)
    if (Result.isFailure(checked)) {
      return yield* Effect.fail(EngineError.invalidInput(`steering message: ${checked.failure.message}`))
    }
    const queued = yield* Ref.modify(steering, (queued) =>
      queued.length >= MAX_QUEUED_STEERING ? [false, queued] : [true, [...queued, delivered]],
    )
    if (!queued) {
      return yield* Effect.fail(
        EngineError.busy(`the run already holds ${MAX_QUEUED_STEERING} steering messages for its next step`),
      )
    }
  })

/** Builds the engine over the `EventLog` in context; runs live in the surrounding scope. */
export const make = (options: Partial<EngineOptions> = {}) =>
  Effect.gen(function* () {
    const log = yield* EventLog.EventLog
    const ids = yield* Ids.Ids
    // Runs live in the engine's own scope, so closing the surrounding scope first cancels and drains
    // them (the finalizer below) instead of interrupting them mid-step.
    const runScope = yield* Scope.make()
    const settingsOf = resolveOptions(options)
    const active = new Set<string>()
    // Runs of this engine that ended without a durable terminal (or whose opening may have landed):
    // no fiber runs them any more, so the engine seals them itself before its next start on the session.
    const unwritten = new Map<string, Identity.Invocation>()
    const sealUnwritten = (sessionId: string) =>
      Effect.forEach(
        [...unwritten.values()].filter((invocation) => invocation.sessionId === sessionId),
        (invocation) =>
          Recovery.seal(log, invocation, {
            kind: "failed",
            class: "event_commit",
            message: EngineError.UNWRITTEN_TERMINAL_MESSAGE,
          }).pipe(
            Effect.provideService(Ids.Ids, ids),
            Effect.match({
              onSuccess: () => unwritten.delete(invocation.invocationId),
              // A refusal: already sealed, or the opening never landed. Anything else: try again next time.
              onFailure: (error) => error._tag === "EventLogError" && error.isRejected && unwritten.delete(invocation.invocationId),
            }),
          ),
        { discard: true },
      )
    const contexts = new SessionContexts(SESSION_CONTEXTS)
    const live = new Map<string, { readonly cancel: Effect.Effect<void>; readonly fiber: Fiber.Fiber<unknown, unknown> }>()

    const launch = (input: LaunchInput, body: typeof runMessage): Effect.Effect<RunningInvocation, EngineError.EngineError> =>
      Effect.gen(function* () {
        const problem = validateInput(input)
        if (problem !== undefined) return yield* Effect.fail(EngineError.invalidInput(problem))
        const sessionId = input.invocation.sessionId
        if (active.has(sessionId)) return yield* Effect.fail(EngineError.busy(EngineError.SESSION_ACTIVE_MESSAGE))
        yield* sealUnwritten(sessionId)
        if (active.has(sessionId)) return yield* Effect.fail(EngineError.busy(EngineError.SESSION_ACTIVE_MESSAGE))
        active.add(sessionId)
        const cancellation = yield* Cancellation.make
        if (input.signal?.aborted === true) yield* cancellation.cancel
        const steering = yield* Ref.make<ReadonlyArray<Input.DeliveredMessage>>([])
        const committed: Array<Event.StoredEvent> = []
        const progress = yield* SubscriptionRef.make({ total: 0, done: false })
        const admitted = yield* Deferred.make<void>()
        const result = yield* Deferred.make<RunResult, EngineError.EngineError>()
        const run: Run = {
          log,
          model: input.model,
          options: settingsOf,
          cancellation,
          steering,
          live: undefined,
          openingUncertain: false,
          mayBeUnresolved: false,
          carry: [],
          commitLock: Semaphore.makeUnsafe(1),
          opening: undefined,
          contexts,
          settings: runSettings(input, log),
          onCommitted: (events) =>
            Effect.suspend(() => {
              committed.push(...events)
              return SubscriptionRef.set(progress, { total: committed.length, done: false })
            }),
        }
        // The caller's signal cancels the run while it runs; its listener goes with the run.
        const watched =
          input.signal === undefined || input.signal.aborted
            ? body(run, Deferred.succeed(admitted, undefined))
            : Effect.raceFirst(
                body(run, Deferred.succeed(admitted, undefined)),
                Effect.andThen(onAbort(input.signal), Effect.andThen(cancellation.cancel, Effect.never)),
              )
        // The session is released before the result is, so a caller that awaits `wait` can start again.
        const release = Effect.suspend(() => {
          active.delete(sessionId)
          live.delete(input.invocation.invocationId)
          return SubscriptionRef.set(progress, { total: committed.length, done: true })
        })
        const failed = (error: EngineError.EngineError) =>
          Effect.suspend(() => {
            // Ended without a durable terminal: the engine seals it before its next start on the session.
            if (committed.length > 0 || run.openingUncertain) unwritten.set(input.invocation.invocationId, input.invocation)
            return Effect.andThen(release, Deferred.fail(result, error))
          })
        const worker = watched.pipe(
          Effect.provideService(Ids.Ids, ids),
          Effect.catchDefect((defect) => Effect.fail(EngineError.internal(`the run failed: ${String(defect)}`))),
          Effect.matchEffect({
            onSuccess: ({ outcome }) => Effect.andThen(release, Deferred.succeed(result, { invocation: input.invocation, outcome })),
            onFailure: failed,
          }),
          Effect.onInterrupt(() => failed(EngineError.internal("the run was interrupted before its terminal"))),
          Effect.ensuring(Deferred.succeed(admitted, undefined)),
        )
        const fiber = yield* Effect.forkIn(worker, runScope)
        live.set(input.invocation.invocationId, { cancel: cancellation.cancel, fiber })
        yield* Deferred.await(admitted)
        if (committed.length === 0) {
          // The worker ended before the opening was durable: its error, nothing written.
          const error = yield* Effect.match(Deferred.await(result), {
            onFailure: (error) => error,
            onSuccess: () => EngineError.internal("worker omitted durable admission"),
          })
          const own =
            error.reason._tag === "ReconciliationRequired" &&
            error.reason.message === EngineError.UNSEALED_RUN_MESSAGE &&
            [...unwritten.values()].some((invocation) => invocation.sessionId === sessionId)
          return yield* Effect.fail(own ? EngineError.reconciliation(EngineError.UNWRITTEN_TERMINAL_MESSAGE) : error)
        }
        return {
          invocation: input.invocation,
          toolNames: run.settings.tools.names,
          events: liveEvents(progress, committed),
          steer: (text: string) => Effect.provideService(steer(input.invocation, steering, text), Ids.Ids, ids),
          cancel: cancellation.cancel,
          wait: Deferred.await(result),
        } satisfies RunningInvocation
      })

    const start = (input: StartInput) => launch(input, runMessage)

    const compact = (input: CompactInput): Effect.Effect<RunResult, EngineError.EngineError> =>
      Effect.gen(function* () {
        const requestFingerprint = input.requestFingerprint ?? (yield* Effect.provideService(Ids.Ids, ids)(Ids.next))
        const running = yield* launch({ ...input, requestFingerprint, maxSteps: 1 }, runCompact)
        return yield* running.wait
      })

    const close = Effect.gen(function* () {
      const runs = [...live.values()]
      for (const item of runs) yield* item.cancel
      for (const item of runs) yield* Fiber.await(item.fiber)
      yield* Scope.close(runScope, Exit.void)
    })
    yield* Effect.addFinalizer(() => close)

    return {
      log,
      start,
      run: (input: StartInput) => Effect.flatMap(start(input), (running) => running.wait),
      compact,
      recover: Effect.provideService(
        Recovery.recover(log, (invocation) => active.has(invocation.sessionId)),
        Ids.Ids,
        ids,
      ),
      close,
    } satisfies EngineShape
  })

/** The engine over the `EventLog` and `Ids` in context; on SQLite it recovers when it opens the log. */
export const layer = (options: Partial<EngineOptions> = {}) =>
  Layer.effect(
    Engine,
    Effect.gen(function* () {
      const engine = yield* make(options)
      if (engine.log.dialect === "sqlite") {
        const report = yield* engine.recover
        for (const item of report.unsealed) {
          yield* Effect.logWarning(`recovery could not seal invocation ${item.invocation.invocationId}: ${item.message}`)
        }
      }
      return engine
    }),
  )
