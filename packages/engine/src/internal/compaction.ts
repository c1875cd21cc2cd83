/**
 * Compaction (docs/engine.md §5.12): history folded into a validated `sections_v1` summary checkpoint.
 * `capture` reads the fenced summary source, `job` runs the summary request (one shorter retry after
 * a `length` finish, one repair of a malformed summary), and a checkpoint built from a successful job
 * replaces the covered history in every later request. A job runs in the foreground, or in the
 * background on a reservation of the model's limiter while the step goes on (`Pending`), and is
 * adopted at a step boundary.
 */
import {
  Limits,
  Lineage,
  Prompts,
  Summary,
  type Event,
  type Fact,
  type ModelContext,
  type Outcome,
  type Prompt,
} from "@maka/facts"
import type { EventLog } from "@maka/event-log"
import { projectPrompt, type ModelLimiter } from "@maka/model"
import { Cancellation, type Ids } from "@maka/tools"
import { Deferred, Effect, Exit, Fiber, Option, Scope } from "effect"
import * as EngineError from "../EngineError.ts"
import * as PromptBuilder from "../PromptBuilder.ts"
import { attempt, type Evidence } from "./attempt.ts"
import { LiveContext } from "./live-context.ts"
import { commit, commitError, flushCarry, plainWrite, storeError, type Run } from "./run-context.ts"

export type Budget = Lineage.CompactionBudget

/** A compaction is also due once the next main context passes this share of either read limit. */
export const READ_LIMIT_SHARE = 0.8

/** The summary source of one compaction, read with the mode's fence. */
export interface Captured {
  readonly mode: ModelContext.CheckpointMode
  readonly source: EventLog.ModelContextSource
}

/** What a capture found: a source to summarise, nothing new, or a source over the read limits. */
export type Capture =
  | { readonly kind: "captured"; readonly captured: Captured }
  | { readonly kind: "unchanged" }
  | { readonly kind: "too_large" }

/** Whether the tail holds conversation content: a message opening, steering, or a completion. */
const hasConversation = (source: EventLog.ModelContextSource): boolean =>
  source.tail.some((item) => {
    if (item.kind !== "canonical") return false
    const fact = item.stored.event.fact
    return (
      (fact.kind === "invocation_opened" && fact.input.kind === "message") ||
      fact.kind === "message_steered" ||
      fact.kind === "model_completed"
    )
  })

/**
 * Reads the summary source with the mode's fence (docs/log-format.md §3.7). What the run carries is
 * committed first: the store requires a settled boundary. `fit` lowers the fence to a clean cut that
 * fits the read limits (for `mid_turn`, one that covers the current opening), so a session past
 * them is compacted in passes;
 * `maxBytes` lowers the byte limit for a slice (docs/engine.md §5.12 "Slices"), of any mode.
 */
export const capture = (run: Run, mode: ModelContext.CheckpointMode, fit: boolean, maxBytes?: number): Effect.Effect<Capture, EngineError.EngineError> =>
  Effect.gen(function* () {
    yield* Effect.mapError(flushCarry(run), (error) => EngineError.commit(error.message))
    // A live context that saw the fence builds the same source from memory (docs/architecture.md §12).
    const fromMemory = !fit && mode.kind !== "standalone" ? run.live?.compactionSource(mode.kind) : undefined
    if (fromMemory !== undefined) {
      return hasConversation(fromMemory) ? ({ kind: "captured", captured: { mode, source: fromMemory } } satisfies Capture) : ({ kind: "unchanged" } satisfies Capture)
    }
    const { sessionId, invocationId } = run.settings.invocation
    const read = yield* Effect.result(
      run.log.prepareContextCompaction(sessionId, {
        current: invocationId,
        mode: mode.kind,
        ...LiveContext.defaultLimits,
        ...(maxBytes === undefined ? {} : { maxBytes }),
        // A `mid_turn` fence is lowered to a cut that covers the current opening, its anchor.
        ...(fit ? { fit: true } : {}),
      }),
    )
    if (read._tag === "Failure") {
      if (read.failure.reason._tag === "Rejected" && read.failure.reason.rejection._tag === "PrefixTooLarge") return { kind: "too_large" } satisfies Capture
      return yield* Effect.fail(
        read.failure.reason._tag === "Rejected" && read.failure.reason.rejection._tag === "InvalidTransition"
          ? EngineError.reconciliation(read.failure.message)
          : storeError(read.failure),
      )
    }
    const source = read.success.source
    if (hasConversation(source)) return { kind: "captured", captured: { mode, source } } satisfies Capture
    // Nothing under the byte limit past what the newest checkpoint covers: history left beyond it
    // is a slice no clean cut fits (raised by the caller), not a history with nothing left.
    if (maxBytes !== undefined && (yield* capture(run, mode, fit)).kind !== "unchanged") return { kind: "too_large" } satisfies Capture
    return { kind: "unchanged" } satisfies Capture
  })

/** How a summary job ended. */
export type JobResult =
  | { readonly kind: "compacted"; readonly checkpoint: ModelContext.ContextCheckpoint }
  | { readonly kind: "failed"; readonly reason: Outcome.CompactReason }

export interface JobOptions {
  readonly reservation?: ModelLimiter.BackgroundReservation | undefined
  readonly cancellation?: Cancellation.Cancellation | undefined
}

/** A summary attempt's request over `history` with `instruction`, and its input digest. */
const summaryRequest = (run: Run, history: Prompt.Prompt, instruction: string) => {
  const maxOutputTokens = PromptBuilder.summaryOutputLimit(
    run.settings.mainOutputLimit,
    PromptBuilder.thinkingBudgetOf(run.model.kind, run.settings.providerOptions),
  )
  const prompt: Prompt.Prompt = [...history, { role: "user", content: Prompts.compactionAttemptMessage(instruction) }]
  const projected = projectPrompt(run.model.kind, run.model.routeIdentity, prompt)
  const request: Prompt.ModelRequest = { prompt: projected, tools: [], providerOptions: run.settings.providerOptions, maxOutputTokens }
  return { request, inputDigest: PromptBuilder.inputDigest(projected, [], run.settings.providerOptions, maxOutputTokens) }
}

/**
 * The input digest of a job's first summary request over `captured`: two sources that give the same
 * one ask the provider the same question (a slice whose extra events the prompt does not show).
 */
export const firstRequestDigest = (run: Run, captured: Captured): string =>
  summaryRequest(run, PromptBuilder.buildSummaryPrompt({ source: captured.source }), Prompts.COMPACTION_BASE_INSTRUCTION).inputDigest

/**
 * Runs the summary job over a captured source: at most three attempts (one shorter retry after a
 * `length` finish, one repair of a repairable defect), each a `summary` request whose evidence is
 * the fenced source. Fails with the model's error, or `Cancelled`.
 */
export const job = (run: Run, captured: Captured, options: JobOptions = {}): Effect.Effect<JobResult, EngineError.EngineError, Ids.Ids> =>
  Effect.gen(function* () {
    const { source, mode } = captured
    const history = PromptBuilder.buildSummaryPrompt({ source })
    const evidence: Evidence = {
      highWater: source.sourceEvidence.highWater,
      digest: source.sourceEvidence.digest,
      effectiveSourceDigest: source.effectiveSourceDigest,
    }
    let instruction = Prompts.COMPACTION_BASE_INSTRUCTION
    let shortened = false
    let firstDefect: Summary.SummaryDefect | undefined
    const failed = (reason: Outcome.CompactReason): JobResult => ({ kind: "failed", reason })
    while (true) {
      const { request, inputDigest } = summaryRequest(run, history, instruction)
      // A summary attempt runs once: physical retries are for main requests only (docs/engine.md §5.6).
      const completed = yield* attempt(run, {
        request,
        inputDigest,
        source,
        evidence: { current: evidence },
        purpose: "summary",
        reservation: options.reservation,
        cancellation: options.cancellation,
      })
      const step = completed.step
      if (step.finishReason === "length") {
        if (shortened || firstDefect !== undefined) return failed("output_length")
        shortened = true
        instruction = Prompts.COMPACTION_LENGTH_RETRY_INSTRUCTION
        continue
      }
      const summary = Summary.fromModelStep(step, source.baseline === undefined)
      if (summary._tag === "Success") {
        const checkpoint: ModelContext.ContextCheckpoint = {
          mode,
          coveredThrough: source.sourceEvidence.highWater,
          sourceDigest: source.sourceEvidence.digest,
          ...(source.baseline === undefined ? {} : { previousCheckpointId: source.baseline.eventId }),
          summary: { format: Summary.SUMMARY_FORMAT, text: summary.success },
          summaryStepId: completed.stepId,
        }
        return { kind: "compacted", checkpoint } satisfies JobResult
      }
      const defect = summary.failure
      if (firstDefect !== undefined) return failed(firstDefect)
      if (!Summary.isRepairable(defect)) return failed(defect)
      firstDefect = defect
      instruction = Prompts.compactionRepairInstruction(defect)
    }
  })

/** The checkpoint fact of a successful job. */
export const checkpointFact = (checkpoint: ModelContext.ContextCheckpoint): Fact.ContextCheckpointRecorded => ({
  kind: "context_checkpoint_recorded",
  checkpoint,
})

/** A summary job running beside the step loop (docs/engine.md §5.12 `Pending`). */
export interface Pending {
  /** The source the job summarises. */
  readonly captured: Captured
  readonly fiber: Fiber.Fiber<JobResult, EngineError.EngineError>
  /** Stops the job: its stream is interrupted and recorded, no checkpoint results. */
  readonly cancel: Effect.Effect<void>
  readonly isFinished: Effect.Effect<boolean>
}

/** What adopting a job gave: a committed checkpoint, or nothing (and why). */
export type Adoption =
  | { readonly kind: "adopted"; readonly checkpointId: string; readonly stored: Event.StoredEvent }
  | {
      readonly kind: "not_adopted"
      /** `overflow`: the provider refused the summary request as too long for the model. */
      readonly reason: Outcome.CompactReason | "model_error" | "overflow" | "cancelled"
      /** An attempt answered with a tool call: the run that made it ends reconciliation_required. */
      readonly toolContent?: boolean
    }

/** Whether a summary job failed because the provider found its request too long for the model's window. */
export const isOverflow = (error: EngineError.EngineError): boolean =>
  error.reason._tag === "Model" && error.reason.error.reason._tag === "ContextOverflow"

/** Whether a summary job failed because an attempt answered with a tool call (docs/engine.md §5.6 step 5). */
export const isToolContent = (error: EngineError.EngineError): boolean =>
  error.reason._tag === "Model" &&
  error.reason.error.reason._tag === "Adapter" &&
  error.reason.error.reason.message === EngineError.SUMMARY_TOOL_CONTENT_MESSAGE

/** Whether a job's failure is one adoption absorbs (a model error or a cancellation) rather than propagates. */
const isAbsorbed = (error: EngineError.EngineError): boolean =>
  error.reason._tag === "Model" || error.reason._tag === "Cancelled"

/** Appends the checkpoint of a successful job; any other result adopts nothing. */
export const adoptResult = (run: Run, result: JobResult): Effect.Effect<Adoption, EngineError.EngineError, Ids.Ids> =>
  Effect.gen(function* () {
    if (result.kind === "failed") return { kind: "not_adopted", reason: result.reason } satisfies Adoption
    const write = yield* plainWrite(run, checkpointFact(result.checkpoint))
    const [sequence] = yield* Effect.mapError(commit(run, [write]), commitError)
    return { kind: "adopted", checkpointId: write.event.id, stored: { sequence: sequence!, event: write.event } } satisfies Adoption
  })

/** Joins a job and adopts what it gave: a model error or a cancellation adopts nothing. */
export const adopt = (run: Run, pending: Pending): Effect.Effect<Adoption, EngineError.EngineError, Ids.Ids> =>
  Effect.gen(function* () {
    const exit = yield* Fiber.await(pending.fiber)
    if (Exit.isFailure(exit)) {
      const error = Option.getOrUndefined(Exit.findErrorOption(exit))
      if (error !== undefined && isAbsorbed(error)) {
        const reason = error.reason._tag === "Cancelled" ? "cancelled" : isOverflow(error) ? "overflow" : "model_error"
        return { kind: "not_adopted", reason, toolContent: isToolContent(error) } satisfies Adoption
      }
      return yield* Effect.failCause(exit.cause)
    }
    if ((yield* run.cancellation.cancellation.isRequested) && exit.value.kind === "compacted") {
      return { kind: "not_adopted", reason: "cancelled" } satisfies Adoption
    }
    return yield* adoptResult(run, exit.value)
  })

/** Cancels a job and waits for it: a summary never outlives its run. */
export const drain = (pending: Pending): Effect.Effect<void> =>
  Effect.andThen(pending.cancel, Effect.asVoid(Fiber.await(pending.fiber)))

/**
 * Starts a job over a captured source in the background when the model's limiter has a spare slot
 * (the reservation is held for the job's life); otherwise `undefined`, and the caller runs it in the
 * foreground. The job has its own cancellation, also requested when the run is cancelled; the
 * runner drains it before the run ends.
 */
export const startBackground = (run: Run, captured: Captured): Effect.Effect<Pending | undefined, never, Ids.Ids> =>
  Effect.gen(function* () {
    const jobScope = yield* Scope.make()
    const reservation = yield* Scope.provide(run.model.tryReserveBackground, jobScope)
    if (Option.isNone(reservation)) {
      yield* Scope.close(jobScope, Exit.void)
      return undefined
    }
    const stop = yield* Deferred.make<void>()
    const own = Cancellation.fromDeferred(stop)
    const runs = run.cancellation.cancellation
    const cancellation: Cancellation.Cancellation = {
      isRequested: Effect.zipWith(own.isRequested, runs.isRequested, (a, b) => a || b),
      requested: Effect.raceFirst(own.requested, runs.requested),
    }
    const work = job(run, captured, { reservation: reservation.value, cancellation }).pipe(
      Effect.ensuring(Scope.close(jobScope, Exit.void)),
    )
    const fiber = yield* Effect.forkDetach(work)
    return {
      captured,
      fiber,
      cancel: Effect.asVoid(Deferred.succeed(stop, undefined)),
      isFinished: Effect.sync(() => fiber.pollUnsafe() !== undefined),
    } satisfies Pending
  })
