/**
 * One model attempt and its physical retries (docs/engine.md §5.6): `model_requested` before sending,
 * every stream event folded and committed as `model_observed` before it is shown (consecutive deltas
 * of one part coalesced, never dropped), `model_interrupted` for a failed attempt, and byte-identical
 * re-sends of replay-safe provider failures after a cancellable backoff.
 */
import { EventWrite, Limits, Model, type Fact, type Lineage, type Prompt } from "@maka/facts"
import type { EventLog } from "@maka/event-log"
import { ModelError, StepBuilder, type ModelLimiter } from "@maka/model"
import { Ids, type Cancellation } from "@maka/tools"
import { Cause, Clock, Data, Effect, Option, Queue, Random, Result, Stream } from "effect"
import * as EngineError from "../EngineError.ts"
import type { Evidence } from "./live-context.ts"
import { commit, commitError, commitFacts, isStaleFold, plainWrite, stamp, type Complete, type Run } from "./run-context.ts"

export interface AttemptInput {
  /** The route-projected request, frozen for every retry of the logical step. */
  readonly request: Prompt.ModelRequest
  readonly inputDigest: string
  readonly source: EventLog.ModelContextSource
  /**
   * Whether the source's tail holds an archived result, when the caller knows it without a look at
   * every item (a live context's snapshot); otherwise the tail is scanned.
   */
  readonly archived?: boolean | undefined
  /**
   * The source evidence of the step's requests: computed inside the first request's commit (it
   * covers the settlements and steering committed with it), then frozen for the retries.
   */
  readonly evidence: { current?: Evidence }
  /** `main` (the default) or `summary` (docs/engine.md §5.12): a summary request's evidence is given up front. */
  readonly purpose?: Model.ModelPurpose | undefined
  /** A background reservation the stream runs on instead of a foreground permit. */
  readonly reservation?: ModelLimiter.BackgroundReservation | undefined
  /** What stops the attempt; the run's cancellation by default (a background summary has its own). */
  readonly cancellation?: Cancellation.Cancellation | undefined
}

/** What stops an attempt. */
/** The monotonic clock in milliseconds (the `Clock`'s, so a test clock moves it). */
const monotonicMillis = Effect.map(Clock.monotonicTimeNanos, (nanos) => Number(nanos) / 1_000_000)

const cancellationOf = (run: Run, input: AttemptInput): Cancellation.Cancellation =>
  input.cancellation ?? run.cancellation.cancellation

export type { Evidence }

export interface Completed {
  readonly stepId: string
  readonly step: Model.ModelStep
}

const modelFailure = (error: ModelError.ModelError) => EngineError.make({ _tag: "Model", error })

/** How a failed attempt is recorded. */
export const interruptionOf = (error: ModelError.ModelError): Model.ModelInterruption => {
  const reason = error.reason
  switch (reason._tag) {
    case "Cancelled":
      return "cancelled"
    case "TimedOut":
      return "timed_out"
    case "Adapter":
    case "ContextOverflow":
      return "failed"
    case "Provider":
      return error.isRetryable ? "retryable_failure" : "failed"
  }
}

/** How many stream events may wait for their commit before the stream reader waits too. */
const OBSERVATION_QUEUE_CAPACITY = 1_024

/** An observation could not be committed: a store failure, not a model one. */
class ObservationCommitFailed extends Data.TaggedError("ObservationCommitFailed")<{ readonly error: EngineError.EngineError }> {}

const isStreamingText = (event: Model.ModelEvent): boolean => event.kind === "part_delta" || event.kind === "part_started"

/** Merges consecutive text deltas of one part (without provider options) up to `maxChars`. */
export const coalesce = (events: ReadonlyArray<Model.ModelEvent>, maxChars: number): ReadonlyArray<Model.ModelEvent> => {
  const out: Array<Model.ModelEvent> = []
  for (const event of events) {
    const previous = out[out.length - 1]
    if (
      event.kind === "part_delta" &&
      event.providerOptions === undefined &&
      previous?.kind === "part_delta" &&
      previous.providerOptions === undefined &&
      previous.id === event.id &&
      previous.text.length + event.text.length <= maxChars
    ) {
      out[out.length - 1] = { kind: "part_delta", id: event.id, text: previous.text + event.text }
    } else {
      out.push(event)
    }
  }
  return out
}

/**
 * Whether a request binds its `effectiveSourceDigest` (docs/engine.md §5.4 step 2): a summary, a
 * lineage-scoped source, or a source with an archive replacement applied.
 */
const bindsEffectiveSource = (input: AttemptInput): boolean =>
  input.purpose === "summary" ||
  input.source.sourceEvidence.scope.kind === "lineage" ||
  (input.archived ?? input.source.tail.some((item) => item.kind === "archived"))

const requestedFact = (run: Run, input: AttemptInput, stepId: string, evidence: Evidence): Fact.ModelRequested => {
  const source = input.source
  return {
    kind: "model_requested",
    stepId,
    modelId: run.model.model,
    purpose: input.purpose ?? "main",
    sourceScope: source.sourceEvidence.scope,
    sourceHighWater: evidence.highWater,
    sourceDigest: evidence.digest,
    inputDigest: input.inputDigest,
    routeIdentity: run.model.routeIdentity,
    ...(source.baseline === undefined ? {} : { checkpointEventId: source.baseline.eventId }),
    ...(run.settings.context === undefined ? {} : { context: run.settings.context }),
    ...(bindsEffectiveSource(input) ? { effectiveSourceDigest: evidence.effectiveSourceDigest } : {}),
  }
}

/** The failures of requests built over a kept context the session outgrew (`isStaleSource`). */
const staleSources = new WeakSet<EngineError.EngineError>()

/**
 * Whether a step failed because its request was built over a kept context the session outgrew
 * before the commit that carried the run's opening (`isStaleFold`): nothing of the step was written,
 * the opening is, and the step is built again from a fresh read (docs/engine.md §5.4 "Kept context").
 */
export const isStaleSource = (error: EngineError.EngineError): boolean => staleSources.has(error)

/**
 * Commits the step's request with whatever the run carries (the previous step's settlements,
 * steering): the request's source evidence is computed inside the transaction, once the carried
 * events have their sequences, so it covers them (docs/engine.md §5.4). A request is not written
 * when the live context turns out stale at the commit that carries the run's opening
 * (`isStaleSource`). Only a main request can carry it: a summary's capture commits what the run
 * carries first.
 */
const commitRequest = (run: Run, input: AttemptInput, stepId: string) =>
  Effect.gen(function* () {
    const { id, recordedAt } = yield* stamp
    let evidence: Evidence | undefined
    const request: Complete = (leading) => {
      evidence = input.evidence.current ?? run.live!.evidence(leading)
      const event = { id, recordedAt, invocation: run.settings.invocation, fact: requestedFact(run, input, stepId, evidence) }
      const built = EventWrite.plain(event)
      if (Result.isFailure(built)) throw new Error(`the engine built an invalid model_requested: ${built.failure.message}`)
      return [built.success]
    }
    yield* Effect.mapError(commit(run, [], request), (error) => {
      const refused = commitError(error)
      if (isStaleFold(error)) staleSources.add(refused)
      return refused
    })
    if (evidence !== undefined) input.evidence.current = evidence
  })

/** A finished stream: the step, and the observations that ride the completion's commit. */
interface Streamed {
  readonly step: Model.ModelStep
  readonly pending: ReadonlyArray<Fact.Fact>
}

/** A failed stream, with the observations not yet committed (they commit with the interruption). */
class StreamFailed extends Data.TaggedError("StreamFailed")<{
  readonly error: ModelError.ModelError
  readonly pending: ReadonlyArray<Fact.Fact>
}> {}

/** What a model output that no fact may hold (a tool input nested deeper than a fact allows) fails as. */
const OUTPUT_EXCEEDS_EVENT = "model output exceeds event limit"

const unrecordable = (rule: string): ModelError.ModelError =>
  rule === "event_too_large" ? ModelError.adapter(OUTPUT_EXCEEDS_EVENT) : ModelError.adapter(`model output is not a valid fact: ${rule}`)

/**
 * The writes of `facts` (the step's observations), and the facts they were built from; a fact that
 * cannot be written is left out and its rule reported, so the step fails as `unrecordable`.
 */
const observationWrites = (run: Run, facts: ReadonlyArray<Fact.Fact>) =>
  Effect.gen(function* () {
    const writes: Array<EventWrite.EventWrite> = []
    const kept: Array<Fact.Fact> = []
    let refused: string | undefined
    for (const fact of facts) {
      const { id, recordedAt } = yield* stamp
      const built = EventWrite.plain({ id, recordedAt, invocation: run.settings.invocation, fact })
      if (Result.isFailure(built)) {
        refused ??= built.failure.rule
        continue
      }
      writes.push(built.success)
      kept.push(fact)
    }
    return { writes, kept, refused }
  })

/** One turn of the event loop: pending I/O (the socket's buffered chunks) is read in it. */
const nextTurn = Effect.callback<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

/** How many event-loop turns one commit waits for arrivals, at most. */
const DRAIN_TURNS = 4

/**
 * Adds to `events` what the stream has read by the next turns of the event loop, until a turn brings
 * nothing (or after `DRAIN_TURNS`): the events that arrived while the previous commit held the thread.
 */
const drainArrived = (queue: Queue.Dequeue<Model.ModelEvent, unknown>, events: Array<Model.ModelEvent>) =>
  Effect.gen(function* () {
    for (let turn = 0; turn < DRAIN_TURNS; turn++) {
      yield* nextTurn
      const before = events.length
      while (true) {
        const next = yield* Queue.poll(queue)
        if (Option.isNone(next)) break
        events.push(next.value)
      }
      if (events.length === before) return
    }
  })

/** What the step reads next: the events that arrived (one or more), or the end of the stream. */
type NextEvents = Effect.Effect<ReadonlyArray<Model.ModelEvent> | typeof STREAM_END, ModelError.ModelError>
const STREAM_END = Symbol("stream end")

/** What the cancellation's side of a pull's race returns: the read stops (the loop then checks the cancellation). */
const CANCELLED = Symbol("cancelled")

/**
 * Reads the stream by pulling it in the step's own fiber (the default, `observationDelayMs` 0): each
 * pull returns what has arrived, one network chunk's events or more, so what reached the socket while
 * the last commit held the thread comes in one pull. A requested cancellation ends a pending pull.
 */
const pulled = (stream: Stream.Stream<Model.ModelEvent, ModelError.ModelError>, cancellation: Cancellation.Cancellation) =>
  Effect.map(Stream.toPull(stream), (pull): NextEvents => {
    const cancelled = Effect.as(cancellation.requested, CANCELLED)
    // The cancellation first: one already requested ends the read without starting the pull (which
    // would build the request before its own abort stopped the send).
    return Effect.flatMap(Effect.result(Effect.raceFirst(cancelled, pull)), (taken): NextEvents => {
      if (Result.isSuccess(taken)) return Effect.succeed(taken.success === CANCELLED ? STREAM_END : taken.success)
      return Cause.isDone(taken.failure) ? Effect.succeed(STREAM_END) : Effect.fail(taken.failure)
    })
  })

/**
 * Reads the stream through a queue filled by a fiber of its own (with `observationDelayMs` above 0):
 * after a take, a few turns of the event loop gather what arrived meanwhile, and a batch of streaming
 * text may wait up to the delay for the deltas that follow, so one commit carries them.
 */
const queued = (run: Run, stream: Stream.Stream<Model.ModelEvent, ModelError.ModelError>, cancellation: Cancellation.Cancellation) =>
  Effect.map(
    // Bounded: a model that outruns the log waits for the commits (default strategy: suspend).
    Stream.toQueue(stream.pipe(Stream.interruptWhen(cancellation.requested)), { capacity: OBSERVATION_QUEUE_CAPACITY }),
    (queue): NextEvents =>
      Effect.flatMap(Effect.result(Queue.takeAll(queue)), (taken): NextEvents => {
        if (Result.isFailure(taken)) return Cause.isDone(taken.failure) ? Effect.succeed(STREAM_END) : Effect.fail(taken.failure)
        const events: Array<Model.ModelEvent> = [...taken.success]
        // After the finish nothing more comes (a later event fails the step as it is folded).
        if (events.some((event) => event.kind === "finished")) return Effect.succeed(events)
        return Effect.gen(function* () {
          yield* drainArrived(queue, events)
          if (events.every(isStreamingText)) {
            yield* Effect.sleep(run.options.observationDelayMs)
            while (true) {
              const next = yield* Queue.poll(queue)
              if (Option.isNone(next)) break
              events.push(next.value)
            }
          }
          return events
        })
      }),
  )

/**
 * Streams the request, group-committing observations (docs/architecture.md §12): the first events
 * commit at once, and whatever arrives during a commit goes into the next one (no timer unless
 * `observationDelayMs` asks for one). Events that arrive with the finish are not committed here: they
 * ride the completion's commit. Fails with the model error (`Cancelled` included) or
 * `ObservationCommitFailed`.
 */
const streamStep = (run: Run, input: AttemptInput, stepId: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      const builder = StepBuilder.forStep(stepId)
      const cancellation = cancellationOf(run, input)
      const stream = input.reservation === undefined ? run.model.stream(input.request) : run.model.stream(input.request, { reservation: input.reservation })
      const next = yield* (run.options.observationDelayMs > 0 ? queued(run, stream, cancellation) : pulled(stream, cancellation))
      const pending: Array<Model.ModelEvent> = []
      const observed = (events: ReadonlyArray<Model.ModelEvent>) =>
        coalesce(events, run.options.observationMaxChars).map((event): Fact.Fact => ({ kind: "model_observed", stepId, event }))
      const failed = (error: ModelError.ModelError) => Effect.fail(new StreamFailed({ error, pending: observed(pending) }))
      while (true) {
        const taken = yield* Effect.result(next)
        if (Result.isFailure(taken)) return yield* failed(taken.failure)
        if (taken.success === STREAM_END) break
        const events = taken.success
        for (const event of events) {
          const added = builder.add(event)
          if (Result.isFailure(added)) {
            pending.push(...events)
            return yield* failed(added.failure)
          }
        }
        pending.push(...events)
        if (builder.isFinished) continue
        const { writes, kept, refused } = yield* observationWrites(run, observed(pending))
        pending.length = 0
        if (refused !== undefined) return yield* Effect.fail(new StreamFailed({ error: unrecordable(refused), pending: kept }))
        yield* Effect.mapError(commit(run, writes), (error) => new ObservationCommitFailed({ error: commitError(error) }))
      }
      if (!builder.isFinished && (yield* cancellation.isRequested)) return yield* failed(ModelError.cancelled())
      const finished = builder.finish()
      return Result.isSuccess(finished)
        ? ({ step: finished.success, pending: observed(pending) } satisfies Streamed)
        : yield* failed(finished.failure)
    }),
  )

/** One physical attempt of a main step. */
export const attempt = (run: Run, input: AttemptInput): Effect.Effect<Completed, EngineError.EngineError, Ids.Ids> =>
  Effect.gen(function* () {
    const stepId = yield* Ids.next
    yield* commitRequest(run, input, stepId)
    const interrupted = (error: ModelError.ModelError, pending: ReadonlyArray<Fact.Fact>) =>
      Effect.andThen(
        commitFacts(run, [...pending, { kind: "model_interrupted", stepId, status: interruptionOf(error) }]),
        Effect.fail(modelFailure(error)),
      )
    const { step, pending } = yield* streamStep(run, input, stepId).pipe(
      Effect.catchDefect((defect) =>
        Effect.fail(new StreamFailed({ error: ModelError.adapter(`model stream failed: ${String(defect)}`), pending: [] })),
      ),
      // The seal resolves the open request (docs/engine.md §5.3): one path for every refused commit.
      Effect.catchTag("ObservationCommitFailed", (failure) => Effect.fail(failure.error)),
      Effect.catchTag("StreamFailed", (failure) => interrupted(failure.error, failure.pending)),
    )
    const completed: Fact.ModelCompleted = { kind: "model_completed", stepId, output: step }
    const { id, recordedAt } = yield* stamp
    const event = { id, recordedAt, invocation: run.settings.invocation, fact: completed }
    // The completion's write is built once; a refusal is the output's own (over the event limit, or
    // a tool input nested deeper than a fact may hold): the step is interrupted like any adapter
    // failure, with the observations that can be written (one as large as the completion cannot),
    // so the run seals and the session stays usable.
    const built = EventWrite.plain(event)
    const { writes: observations, kept, refused } = yield* observationWrites(run, pending)
    // A summary that calls a tool is no summary: the attempt fails as an adapter error, its request
    // interrupted (docs/engine.md §5.6 step 5); the run that made it ends reconciliation_required.
    if (input.purpose === "summary" && step.parts.some((part) => part.kind === "tool_call")) {
      return yield* interrupted(ModelError.adapter(EngineError.SUMMARY_TOOL_CONTENT_MESSAGE), kept)
    }
    if (Result.isFailure(built)) return yield* interrupted(unrecordable(built.failure.rule), kept)
    if (refused !== undefined) return yield* interrupted(unrecordable(refused), kept)
    // A summary has no calls here (refused above); a main step's are run.
    const calls = input.purpose === "summary" ? 0 : Model.localToolCalls(step).length
    if (calls > Limits.MAX_TOOL_CALLS_PER_STEP) {
      return yield* interrupted(
        ModelError.adapter(`model output has ${calls} tool calls; a step runs at most ${Limits.MAX_TOOL_CALLS_PER_STEP}`),
        kept,
      )
    }
    const completion = built.success
    if (input.purpose === "summary") {
      // A summary's completion is durable before the job reads it: its checkpoint names it.
      yield* Effect.mapError(commit(run, [...observations, completion]), (error) => EngineError.commit(error.message))
      return { stepId, step }
    }
    if (step.finishReason === "length") {
      const rejections = Model.localToolCalls(step).map(
        (part): Fact.Fact => ({
          kind: "tool_rejected",
          operationId: `${stepId}:${part.id}`,
          call: { toolCallId: part.id, origin: { kind: "provider", stepId } },
          name: part.name,
          input: part.input,
          reason: { kind: "preparation_failed", message: EngineError.INCOMPLETE_MESSAGE },
        }),
      )
      const rejectionWrites = yield* Effect.forEach(rejections, (fact) => plainWrite(run, fact))
      const writes = [...observations, completion, ...rejectionWrites]
      yield* Effect.mapError(commit(run, writes), (error) => EngineError.commit(error.message))
      return yield* Effect.fail(EngineError.make({ _tag: "ModelIncomplete" }))
    }
    // The completion rides the step's next commit: its first dispatch or rejection, or the terminal
    // (docs/engine.md §5.4). A cancellation requested now is handled by the tool step.
    run.carry.push(...observations, completion)
    return { stepId, step }
  })

/** The backoff before attempt `failed + 1`: `retryAfterMs`, or base × 2^(n−1) (capped) plus 0–25 % jitter. */
export const backoffMs = (run: Run, failedAttempts: number, retryAfterMs: number | undefined): Effect.Effect<number> => {
  if (retryAfterMs !== undefined) return Effect.succeed(retryAfterMs)
  const base = Math.min(run.options.backoffBaseMs * 2 ** Math.min(failedAttempts - 1, 5), run.options.backoffMaxMs)
  return Effect.map(Random.nextIntBetween(0, Math.floor(base / 4)), (jitter) => base + jitter)
}

/** The model package's retry rule (`ModelError.isRetryable`), with the provider's `retryAfterMs`. */
const retryable = (error: EngineError.EngineError): { readonly retryAfterMs: number | undefined } | undefined => {
  const reason = error.reason
  if (reason._tag !== "Model" || !reason.error.isRetryable) return undefined
  return { retryAfterMs: ModelError.retryAfterMs(reason.error) }
}

/** A pause taken before a physical retry, instead of the retry (docs/engine.md §5.10). */
export interface PausedAtRetry {
  readonly _tag: "Paused"
  readonly pause: Lineage.HandoffPause
}

/**
 * The handoff boundary a main step's retries offer: the pause when a requested handoff's preflight
 * succeeds there, else nothing (the retries go on).
 */
export type RetryBoundary = Effect.Effect<Lineage.HandoffPause | undefined, EngineError.EngineError, Ids.Ids>

/**
 * Runs attempts until one completes, a failure is not retryable, the attempts are spent, or a
 * handoff pauses the run at `boundary` before a retry. `beforeRetry` runs before each retry, after
 * its backoff: a failure there ends the step (a continuation's check of its frozen input).
 */
export const attemptWithRetries = (
  run: Run,
  input: AttemptInput,
  boundary: RetryBoundary,
  beforeRetry: Effect.Effect<void, EngineError.EngineError, Ids.Ids> = Effect.void,
): Effect.Effect<Completed | PausedAtRetry, EngineError.EngineError, Ids.Ids> =>
  Effect.gen(function* () {
    for (let failed = 0; ; ) {
      if (failed > 0) yield* beforeRetry
      const result = yield* Effect.result(attempt(run, input))
      if (Result.isSuccess(result)) return result.success
      failed++
      const retry = retryable(result.failure)
      if (retry === undefined || failed >= run.options.maxModelAttempts) return yield* Effect.fail(result.failure)
      // A cancellation already requested wins the race at once.
      const cancellation = cancellationOf(run, input)
      const delay = yield* backoffMs(run, failed, retry.retryAfterMs)
      // The failed attempt is closed (`model_interrupted`) and the next not yet requested: a handoff
      // requested before or during the backoff is taken here, and the successor sends the retry.
      // A preflight that fails lets the backoff run out.
      // On the monotonic clock: a wall clock stepped meanwhile neither ends nor stretches the wait.
      const until = (yield* monotonicMillis) + delay
      // Once a boundary here did not pause, the backoff runs out: a reservation it kept (steering
      // came meanwhile) waits for the step boundary after the retry.
      let watchHandoff = true
      for (;;) {
        const left = Math.max(0, until - (yield* monotonicMillis))
        const slept = yield* Effect.raceFirst(
          Effect.as(Effect.sleep(left), "slept" as const),
          Effect.raceFirst(
            Effect.as(cancellation.requested, "cancelled" as const),
            watchHandoff ? Effect.as(run.handoff.requested, "handoff" as const) : Effect.never,
          ),
        )
        if (slept === "cancelled") return yield* Effect.fail(EngineError.cancelled())
        if (slept === "slept") break
        const pause = yield* boundary
        if (pause !== undefined) return { _tag: "Paused", pause } satisfies PausedAtRetry
        watchHandoff = false
      }
    }
  })
