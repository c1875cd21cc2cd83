/**
 * The runner and the step loop of a message run (docs/engine.md §5.3–§5.4, §5.7). The loop keeps the
 * seams where later capabilities insert their steps — handoff boundary, background-summary adoption,
 * proactive compaction, overflow recovery, prune — as marked no-ops, never as pretend work.
 */
import { Digest, EventSink, Limits, type EventWrite, type Fact, type Lineage, type ModelContext, type Outcome, type Prompt } from "@maka/facts"
import { EventLogError, type EventLog } from "@maka/event-log"
import { projectPrompt } from "@maka/model"
import { Ids, Journal, type ToolCatalog } from "@maka/tools"
import { Cause, Effect, Exit, Fiber, Option, Ref, Result, Semaphore } from "effect"
import * as EngineError from "../EngineError.ts"
import * as PromptBuilder from "../PromptBuilder.ts"
import * as Recovery from "../Recovery.ts"
import { attemptWithRetries, isStaleSource, type AttemptInput, type PausedAtRetry } from "./attempt.ts"
import * as Compaction from "./compaction.ts"
import * as Continuation from "./continuation.ts"
import { faultPoint } from "./fault.ts"
import * as Handoff from "./handoff.ts"
import { LiveContext, sourceBytes } from "./live-context.ts"
import { isArchivable, prune } from "./prune.ts"
import { commit, commitError, commitFacts, flushCarry, isCancelled, plainWrite, storeError, type Run } from "./run-context.ts"
import * as Steering from "./steering.ts"

type Done = { readonly _tag: "Completed" } | { readonly _tag: "Paused"; readonly pause: Lineage.HandoffPause }

const admissionRefusal = (error: EventLogError.EventLogError): EngineError.EngineError => {
  if (error.reason._tag === "Rejected") {
    const rejection = error.reason.rejection
    if (rejection._tag === "SessionBusy") return EngineError.busy(EngineError.SESSION_ACTIVE_MESSAGE)
    if (rejection._tag === "Reserved") return EngineError.busy(EngineError.SESSION_RESERVED_MESSAGE)
    if (rejection._tag === "InvalidTransition") return EngineError.reconciliation(rejection.reason)
    return EngineError.commit(error.message)
  }
  return error.reason._tag === "OutcomeUnknown" ? EngineError.commit(error.message) : EngineError.fromStore(error)
}

/** The reason of a store's `InvalidTransition` refusal, or `undefined` for any other error. */
const invalidTransition = (error: EventLogError.EventLogError): string | undefined =>
  error.reason._tag === "Rejected" && error.reason.rejection._tag === "InvalidTransition" ? error.reason.rejection.reason : undefined

/** Why an unsettled history (the gate's refusal `reason`) refuses admission, in words that name the way out. */
const unsettledHistory = (run: Run, reason: string) =>
  Effect.gen(function* () {
    const { log, settings } = run
    const sessionId = settings.invocation.sessionId
    const unsealed = yield* Effect.mapError(Recovery.unfinishedInvocations(log), storeError)
    if (unsealed.some((invocation) => invocation.sessionId === sessionId)) {
      return yield* Effect.fail(EngineError.reconciliation(EngineError.UNSEALED_RUN_MESSAGE))
    }
    // Sealed history the manual-message policy admits: only unknown outcomes stand in the way.
    const manual = settings.allowPriorUnknown
      ? false
      : yield* Effect.orElseSucceed(log.checkManualMessageHistory(sessionId), () => false)
    return yield* Effect.fail(EngineError.reconciliation(manual ? EngineError.PRIOR_UNKNOWN_MESSAGE : reason))
  })

/**
 * A handoff successor's admission step, its refusal told as `Busy` when the pause is no longer
 * pending: another successor or an abandon took it first (on a shared log, another host's, which
 * the store or the gate then refuses in its own words). An opening whose commit may have landed is
 * left as it failed: the pause may be gone because of it.
 */
const unlessTaken = <A, R>(run: Run, step: Effect.Effect<A, EngineError.EngineError, R>): Effect.Effect<A, EngineError.EngineError, R> =>
  run.settings.successor === undefined
    ? step
    : Effect.catch(step, (error) =>
        error.reason._tag === "Busy" || error.reason._tag === "Cancelled" || run.openingUncertain
          ? Effect.fail(error)
          : Effect.flatMap(Effect.orElseSucceed(run.log.hasPendingHandoff(run.settings.invocation.sessionId), () => true), (pending) =>
              Effect.fail(pending ? error : EngineError.busy(EngineError.HANDOFF_TAKEN_MESSAGE)),
            ),
      )

/** The safety preflight (docs/engine.md §5.3 step 2): returns whether the run proceeds under the prior-unknown policy. */
export const preflight = (run: Run) =>
  Effect.gen(function* () {
    const { log, settings } = run
    const sessionId = settings.invocation.sessionId
    // A handoff successor is the one opening the reservation admits (the store checks it).
    if (settings.successor === undefined && (yield* Effect.mapError(log.hasPendingHandoff(sessionId), storeError))) {
      return yield* Effect.fail(EngineError.busy(EngineError.SESSION_RESERVED_MESSAGE))
    }
    const gate = settings.allowPriorUnknown
      ? log.checkManualMessageHistory(sessionId)
      : Effect.as(log.checkHistorySafety(sessionId), false)
    return yield* gate.pipe(
      Effect.catch((error) => {
        const reason = invalidTransition(error)
        return reason === undefined ? Effect.fail(storeError(error)) : unsettledHistory(run, reason)
      }),
    )
  })

/** The opening of the run: a message run's, a handoff successor's, or a `context_compact` run's. */
const openingInput = (run: Run): Fact.InvocationOpened["input"] => {
  const settings = run.settings
  // A claim is prepared for a handoff successor and for a continuation, and only for them.
  if (run.claim !== undefined) {
    if (settings.successor !== undefined) return { kind: "handoff", claim: run.claim, pause: settings.successor.pause }
    // A continuation's fingerprint is a digest: the caller's, or the claim's own.
    const requestFingerprint = settings.requestFingerprint ?? Digest.tagged("maka.continuation-request.v1", run.claim)
    return { kind: "continuation", claim: run.claim, requestFingerprint }
  }
  return settings.message === undefined
    ? { kind: "context_compact", requestFingerprint: settings.requestFingerprint ?? "" }
    : {
        kind: "message",
        content: settings.message,
        ...(settings.requestFingerprint === undefined ? {} : { requestFingerprint: settings.requestFingerprint }),
      }
}

/** The run's opening write: the one admission built and checked, or built now. */
const openingWriteOf = (run: Run) =>
  run.openingWrite === undefined
    ? plainWrite(run, { kind: "invocation_opened", input: openingInput(run), configuration: run.settings.configuration })
    : Effect.succeed(run.openingWrite)

/** A commit of the opening, its error as admission reports it. */
const asAdmission = <A, R>(run: Run, committing: Effect.Effect<A, EventLogError.EventLogError, R>) =>
  committing.pipe(
    Effect.tapError((error) =>
      Effect.sync(() => {
        // Not a refusal: the opening may have landed, and the engine must seal it later.
        if (!error.isRejected) run.openingUncertain = true
      }),
    ),
    Effect.mapError(admissionRefusal),
  )

/** Appends the opening; the run is admitted once it is durable. */
export const open = (run: Run) =>
  Effect.gen(function* () {
    const write = yield* openingWriteOf(run)
    const [sequence] = yield* asAdmission(run, commit(run, [write]))
    run.opening = { stored: { sequence: sequence!, event: write.event }, json: write.json }
  })

/**
 * The context a run whose opening rides its first commit goes on from, instead of a flush of the
 * opening's own (docs/engine.md §5.3): a message run (no claim, no continuation, no successor) on
 * SQLite, whose one writer is this engine, outside the prior-unknown policy, over the session's kept
 * context when it is current (nothing of the session appended since it was kept) and owes no prune,
 * or, when the engine keeps none, over one read of the session as it stands that owes no prune at
 * the opening. Otherwise undefined: the opening commits alone first, and a kept context is left
 * where it was.
 */
const foldable = (run: Run, priorUnknown: boolean) =>
  Effect.gen(function* () {
    const { settings } = run
    if (
      priorUnknown ||
      run.claim !== undefined ||
      settings.message === undefined ||
      settings.continuation !== undefined ||
      settings.successor !== undefined ||
      run.log.dialect !== "sqlite"
    ) {
      return undefined
    }
    const sessionId = settings.invocation.sessionId
    const kept = run.contexts.take(sessionId)
    if (kept === undefined) {
      const read = yield* Effect.exit(LiveContext.load(run.log, sessionId, undefined, settings.configuration, false))
      if (Exit.isSuccess(read)) {
        if (!read.value.holdsArchivable(isArchivable)) return read.value
        // A prune is owed at the opening, which then commits first: the run goes on from this read
        // as from a kept context (no second read of the session), and prunes.
        read.value.pruneOwed = true
        run.contexts.put(sessionId, read.value)
        return undefined
      }
      // A context over the read limits is pruned and compacted after the opening; any other failure
      // (an unsettled history, a store error, a defect) is the run's, after its opening, as there.
      const failure = Cause.findErrorOption(read.cause)
      if (Option.isSome(failure) && isPrefixTooLargeRejection(failure.value)) return undefined
      return { failed: read.cause }
    }
    const current =
      !kept.stale &&
      !kept.pruneOwed &&
      (yield* Effect.mapError(run.log.sessionHighWater(sessionId), storeError)) === kept.highWaterMark
    if (!current) {
      run.contexts.put(sessionId, kept)
      return undefined
    }
    return kept
  })

/**
 * Commits an opening the run still carries (its first commit failed, or none came): alone, now. The
 * run is admitted if it lands; otherwise the run ends with the admission's error and writes nothing more.
 * After a first commit whose outcome is unknown this commit resolves it, as the seal's do: the same
 * opening again is an exact replay when it landed, and lands now when it did not.
 */
const commitPendingOpening = (run: Run, write: EventWrite.EventWrite) =>
  Effect.gen(function* () {
    if (!run.carry.includes(write)) run.carry.unshift(write)
    yield* asAdmission(run, flushCarry(run, true))
  })

/**
 * The run's live context: the one the engine kept from the session's last run when nothing but this
 * run's opening was appended since, else one read of the log (docs/architecture.md §12).
 */
const liveContext = (run: Run, priorUnknown: boolean) =>
  Effect.gen(function* () {
    const { invocation, configuration } = run.settings
    const kept = run.contexts.take(invocation.sessionId)
    const opening = run.opening
    // A continuation reads its lineage, not the session the kept context holds.
    if (kept !== undefined && !kept.stale && opening !== undefined && !priorUnknown && run.settings.continuation === undefined) {
      // The opening right after the mark: nothing was appended in between, in any session.
      const adjacent = opening.stored.sequence === kept.highWaterMark + 1
      const newer = adjacent
        ? [opening.stored]
        : yield* Effect.mapError(run.log.events(invocation.sessionId, kept.highWaterMark, 2), storeError)
      // The run's own opening was appended after the mark: when it is the only event since, it is that one.
      if (newer.length === 1) {
        kept.continueWith(opening.stored, opening.json, configuration)
        return { context: kept, kept: true }
      }
    }
    return { context: yield* readContext(run, priorUnknown), kept: false }
  })

/** How many passes may bring a context past the read limits back within them, at a run's opening or a step boundary. */
export const MAX_FIT_PASSES = 64

/** The log's refusal of a context over its read limits. */
const isPrefixTooLargeRejection = (error: unknown) =>
  EventLogError.isEventLogError(error) && error.reason._tag === "Rejected" && error.reason.rejection._tag === "PrefixTooLarge"

/** Only a store error carries an `EventLogError` cause. */
const isPrefixTooLarge = (error: EngineError.EngineError) => isPrefixTooLargeRejection(error.cause)

/**
 * The run's context at its opening. A session whose context is already past the read limits (a log
 * written before compaction was due at 80 % of them) is compacted from its newest checkpoint, one
 * clean cut that fits at a time, instead of failing (docs/engine.md §5.12).
 */
const openingContext = (run: Run, loop: LoopState, priorUnknown: boolean) =>
  Effect.gen(function* () {
    let pruned = false
    for (let pass = 0; ; pass++) {
      const read = yield* Effect.result(liveContext(run, priorUnknown))
      if (Result.isSuccess(read)) return { ...read.success, pruned }
      if (priorUnknown || pass >= MAX_FIT_PASSES || !isPrefixTooLarge(read.failure)) return yield* Effect.fail(read.failure)
      // Large results archived first (candidate paging needs no materialised context), then folding.
      if (!pruned) {
        yield* pruneOwing(run, loop)
        pruned = true
        continue
      }
      if (!(yield* compactNow(run, loop, { kind: "pre_turn" }, true))) return yield* unfitted(loop, read.failure)
    }
  })

/** A prune pass: owed until it reaches its end (a store error or a cancellation leaves it owed, to the kept context). */
const pruneOwing = (run: Run, loop: LoopState) =>
  Effect.gen(function* () {
    loop.pruneOwed = true
    loop.pruneOwed = !(yield* prune(run))
  })

/**
 * The failure of a pass that could not bring the context within the limits: a summary that answered
 * with tool content ends the run for that (docs/engine.md §5.4), not for its length.
 */
const unfitted = (loop: LoopState, failure: EngineError.EngineError) =>
  Effect.fail(loop.summaryToolContent ? EngineError.reconciliation(EngineError.SUMMARY_TOOL_CONTENT_MESSAGE) : failure)

/** A context read's failure as the run's: an unsettled history is a reconciliation, anything else the store's. */
const readFailure = (error: EventLogError.EventLogError): EngineError.EngineError =>
  invalidTransition(error) === undefined ? storeError(error) : EngineError.reconciliation(error.message)

/** One read of the run's context from the log. */
const readContext = (run: Run, priorUnknown: boolean) => {
  const { invocation, configuration } = run.settings
  return Effect.mapError(LiveContext.load(run.log, invocation.sessionId, invocation.invocationId, configuration, priorUnknown), readFailure)
}

/** Queued steering rides the next request's commit (docs/engine.md §5.4), and is in its prompt. */
const deliverSteering = (run: Run) =>
  Effect.gen(function* () {
    const queued = yield* Ref.getAndSet(run.steering, [])
    const writes = yield* Effect.forEach(queued, (message) => plainWrite(run, { kind: "message_steered", message }))
    run.carry.push(...writes)
    run.steeringWindow.current = queued.reduce(
      (window, message) => ({ bytes: window.bytes + Steering.bytesOf(message), count: window.count + 1 }),
      run.steeringWindow.current,
    )
  })

/**
 * What the engine keeps of one step's journal: the dispatches without a settlement, and whether the
 * step was abandoned. The gate orders every journal commit against the abandonment, so once it is
 * set no fact of the step lands any more and the seal reads a state that stays put.
 */
interface JournalGuard {
  readonly gate: Semaphore.Semaphore
  readonly unsettled: Set<string>
  abandoned: boolean
  /** A settlement of the step holds a result over one page: prune after the batch. */
  archivable: boolean
}

const sinkError = (error: EventLogError.EventLogError) =>
  error.isRejected ? EventSink.rejected(error.message) : EventSink.outcomeUnknown(error.message)

/** The event sink the tool journal commits through: the run's own commit path, behind the guard. */
const journalSink = (run: Run, guard: JournalGuard): EventSink.EventSinkShape => {
  const guarded = <A>(effect: Effect.Effect<A, EventLogError.EventLogError>) =>
    guard.gate.withPermits(1)(
      Effect.suspend(() =>
        guard.abandoned ? Effect.fail(EventSink.rejected(ABANDONED_MESSAGE)) : Effect.mapError(effect, sinkError),
      ),
    )
  const track = (writes: ReadonlyArray<EventWrite.EventWrite>) => {
    for (const write of writes) {
      const fact = write.event.fact
      if (fact.kind === "tool_dispatched") guard.unsettled.add(fact.operationId)
      if (fact.kind === "tool_settled") guard.unsettled.delete(fact.operationId)
    }
  }
  return {
    // A settlement rides the run's next commit: the step's next dispatch or rejection, the next
    // request, or the seal (docs/engine.md §5.4); it is durable before anything else is started.
    // Its sequence is not known yet: the journal does not read it.
    commit: (write) =>
      guarded(
        Effect.suspend(() => {
          const kind = write.event.fact.kind
          if (kind === "tool_settled") {
            // Stryker disable next-line all: a crash-test hook; only the crash suites (child processes) set its variable
            faultPoint("engine.before-settle")
            if (isArchivable(write)) guard.archivable = true
            run.carry.push(write)
            track([write])
            return Effect.succeed(0)
          }
          return Effect.map(commit(run, [write]), (sequences) => {
            track([write])
            // Stryker disable next-line all: a crash-test hook; only the crash suites (child processes) set its variable
            if (kind === "tool_dispatched") faultPoint("engine.after-dispatch")
            return sequences[0]!
          })
        }),
      ),
    // Stryker disable next-line all: the journal commits each of its facts alone and never calls it
    commitBatch: (writes) => guarded(Effect.tap(commit(run, writes), () => Effect.sync(() => track(writes)))),
  }
}

const ABANDONED_MESSAGE = "the step was abandoned after its cancellation grace; its run is sealed"

/**
 * Runs one step's journal. Once cancellation is requested, dispatched effects have `cancelGraceMs`
 * to finish after their AbortSignal fired; a tool that ignores it is then abandoned (its fiber is
 * left to end on its own, its facts refused): the step fails `ToolOutcomeUnknown` for the unsettled
 * dispatch, or `Cancelled` when none is left, and the seal resolves the rest from the log.
 */
const journalWithin = <E>(
  run: Run,
  guard: JournalGuard,
  journal: Effect.Effect<Journal.StepResult, E>,
): Effect.Effect<Journal.StepResult, E | EngineError.EngineError> =>
  Effect.gen(function* () {
    // Started at once (no turn of the event loop before the step's first dispatch).
    const fiber = yield* Effect.forkDetach(Effect.exit(journal), { startImmediately: true })
    const grace = Effect.andThen(run.cancellation.cancellation.requested, Effect.sleep(run.options.cancelGraceMs))
    // Interrupting the run cancels the step: the journal rejects what it has not dispatched.
    const ended = yield* Effect.onInterrupt(Effect.raceFirst(Fiber.join(fiber), Effect.as(grace, undefined)), () =>
      run.cancellation.cancel,
    )
    if (ended !== undefined) return yield* ended
    yield* guard.gate.withPermits(1)(
      Effect.sync(() => {
        guard.abandoned = true
        run.mayBeUnresolved = true
      }),
    )
    const [unknown] = guard.unsettled
    return yield* Effect.fail(
      unknown === undefined
        ? EngineError.cancelled()
        : EngineError.make({
            _tag: "ToolOutcomeUnknown",
            operationId: unknown,
            detail: `its tool ran on past cancelGraceMs (${run.options.cancelGraceMs} ms) after the run was cancelled, and was abandoned`,
          }),
    )
  })

/** The Anthropic thinking budget in the provider options (0 otherwise), which the output cap reserves. */
const thinkingBudget = (run: Run): number => PromptBuilder.thinkingBudgetOf(run.model.kind, run.settings.providerOptions)

/** What decides whether the source's latest main request describes this run's next one (docs/engine.md §5.12). */
const routeMatch = (run: Run, source: EventLog.ModelContextSource): PromptBuilder.CompactionDueInput => {
  const { settings } = run
  return {
    context: settings.context,
    latestMain: source.latestMain,
    routeIdentity: run.model.routeIdentity,
    connectionId: settings.configuration.model?.connectionId,
    modelId: run.model.model,
    baselineId: source.baseline?.eventId,
  }
}

/** The main request of a step from the context (docs/engine.md §5.5), frozen for its retries. */
const mainRequest = (
  run: Run,
  source: EventLog.ModelContextSource,
  projection: PromptBuilder.ProjectedHistory,
  tools: Prompt.ModelRequest["tools"],
  priorUnknown: boolean,
  archived?: boolean,
) =>
  Effect.gen(function* () {
    const { settings } = run
    const notice = priorUnknown ? PromptBuilder.priorUnknownNotice(source) : undefined
    if (priorUnknown && notice === undefined) {
      return yield* Effect.fail(EngineError.reconciliation(EngineError.PRIOR_UNKNOWN_MISSING_MESSAGE))
    }
    const prompt = PromptBuilder.buildMainPrompt({ systemPrompt: settings.configuration.systemPrompt?.text, notice, source, projection })
    const maxOutputTokens = PromptBuilder.outputLimit({
      ...routeMatch(run, source),
      mainOutputLimit: settings.mainOutputLimit,
      thinkingBudget: thinkingBudget(run),
    })
    const projected = projectPrompt(run.model.kind, run.model.routeIdentity, prompt)
    const request: Prompt.ModelRequest = { prompt: projected, tools, providerOptions: settings.providerOptions, maxOutputTokens }
    const evidence: AttemptInput["evidence"] = {}
    return { request, inputDigest: Digest.modelInput(request), source, archived, evidence }
  })

/** Runs the local calls of a completed step through the journal; returns whether the turn is done. */
const runTools = (run: Run, loop: LoopState, captured: ToolCatalog.CapturedCatalog, calls: ReadonlyArray<Journal.CallRequest>) =>
  Effect.gen(function* () {
    const guard: JournalGuard = { gate: yield* Semaphore.make(1), unsettled: new Set(), abandoned: false, archivable: false }
    const journal = Journal.runStep(run.settings.invocation, captured, calls, {
      cancellation: run.cancellation.cancellation,
      secrets: run.settings.secrets,
    }).pipe(
      Effect.provideService(EventSink.EventSink, journalSink(run, guard)),
      Effect.provideService(Ids.Ids, yield* Ids.Ids),
      Effect.mapError((error) => EngineError.commit(error.message)),
    )
    const result = yield* journalWithin(run, guard, journal)
    // The step is uncertain exactly when one of its calls ended `OutcomeUnknown` (the rest were rejected).
    const unknown = result.calls.find((call) => call._tag === "OutcomeUnknown")
    if (unknown !== undefined) {
      // Named with its tool and what the tool said (its message, already scrubbed of secrets): the
      // one clue to what the effect did, which the host must now check.
      return yield* Effect.fail(
        EngineError.make({ _tag: "ToolOutcomeUnknown", operationId: unknown.request.operationId, toolName: unknown.request.name, detail: unknown.message }),
      )
    }
    if (result.cancelled) {
      // The batch ends the run unpruned: the prune it owes goes to the session's next run.
      if (guard.archivable) loop.pruneOwed = true
      return yield* Effect.fail(EngineError.cancelled())
    }
    return { finishTurn: result.finishTurn, archivable: guard.archivable }
  })

/**
 * What the step loop keeps between steps (docs/engine.md §5.4): the compaction budget, the summary
 * running in the background, and whether a main step of this run completed (which makes an
 * automatic compaction `mid_turn`).
 */
export interface LoopState {
  budget: Compaction.Budget
  pending: Compaction.Pending | undefined
  completedStep: boolean
  /** A summary attempt produced tool content: the run ends `ReconciliationRequired`. */
  summaryToolContent: boolean
  /**
   * A prune is owed: a tool batch settled a result over one page while a summary was pending, or a
   * pass did not reach its end (cancellation, a store error, a batch cancellation ended); paid at the
   * next chance, or by the session's next run (the kept context carries it).
   */
  pruneOwed: boolean
  /**
   * The bytes of the source of a background summary the provider refused as too long: the next
   * summary of this run is made in slices from half of them (docs/engine.md §5.12 "Slices").
   */
  refusedBytes: number | undefined
}

export const initialLoopState = (budget: Compaction.Budget): LoopState => ({
  budget,
  pending: undefined,
  completedStep: false,
  summaryToolContent: false,
  pruneOwed: false,
  refusedBytes: undefined,
})

/** The mode of an automatic compaction now (docs/engine.md §5.12 "Automatic start"). */
const automaticMode = (run: Run, loop: LoopState): ModelContext.CheckpointMode =>
  loop.completedStep ? { kind: "mid_turn", anchorEventId: run.opening!.stored.event.id } : { kind: "pre_turn" }

/** Adopts a job's result: a committed checkpoint makes the live context read the log again. */
const adopted = (run: Run, loop: LoopState, adoption: Compaction.Adoption) => {
  if (adoption.kind === "not_adopted" && adoption.toolContent === true) loop.summaryToolContent = true
  if (adoption.kind === "adopted" && run.live !== undefined) {
    // Rebuilt from memory when the context holds what the checkpoint keeps; read again otherwise.
    const rebased = run.live.rebase(adoption.stored)
    if (rebased === undefined) run.live.markStale()
    else run.live = rebased
  }
  return adoption.kind === "adopted"
}

/** Runs a compaction in the foreground and adopts it; returns whether a checkpoint was adopted. */
const compactNow = (run: Run, loop: LoopState, mode: ModelContext.CheckpointMode, fit: boolean) =>
  Effect.map(compaction(run, loop, mode, fit), (how) => how === "adopted")

/** A foreground compaction, and how it went: adopted, no clean cut to summarise, or a summary not adopted. */
const compaction = (run: Run, loop: LoopState, mode: ModelContext.CheckpointMode, fit: boolean) =>
  Effect.gen(function* () {
    const captured = yield* Compaction.capture(run, mode, fit)
    if (captured.kind !== "captured") return "no_cut" as const
    return (yield* foregroundOf(run, loop, captured.captured)) ? ("adopted" as const) : ("not_adopted" as const)
  })

/** Why a history past the read limits could not be brought back within them, added to the store's refusal. */
const UNFITTED_BECAUSE = {
  no_cut: "no clean cut of the history fits, so no summary could fold it",
  not_adopted: "the summary asked to fold it was not adopted (the session's summary requests say why)",
} as const

const withCause = (failure: EngineError.EngineError, because: keyof typeof UNFITTED_BECAUSE): EngineError.EngineError =>
  failure.reason._tag === "Store" ? EngineError.make({ ...failure.reason, message: `${failure.reason.message}: ${UNFITTED_BECAUSE[because]}` }) : failure

/** `foreground`, in slices from the start when a background summary of this run was refused as too long. */
const foregroundOf = (run: Run, loop: LoopState, captured: Compaction.Captured) => {
  const refused = loop.refusedBytes
  loop.refusedBytes = undefined
  return foreground(run, loop, captured, refused)
}

/** How many summaries one compaction may make when its summary is too long for the model (docs/engine.md §5.12 "Slices"). */
export const MAX_SLICES = 16

/**
 * Runs a job in the foreground and adopts it: a model error adopts nothing; cancellation fails. A
 * summary the provider refuses as too long (a history that outgrew the window before it was
 * compacted) is made again over a slice: the history through the highest clean cut holding at most
 * half the bytes of the source refused, and the rest slice after slice, each summary updating the
 * one before, until no history is left (docs/engine.md §5.12 "Slices"); a `mid_turn` slice covers
 * at least the current opening, its anchor. `refusedBytes`: the job over `captured` was refused
 * already (a background summary), so the first slice holds half of them. Returns whether a
 * checkpoint was adopted.
 */
const foreground = (run: Run, loop: LoopState, captured: Compaction.Captured, refusedBytes?: number) =>
  Effect.gen(function* () {
    let current: Compaction.Captured | undefined = refusedBytes === undefined ? captured : undefined
    let mode = captured.mode
    let maxBytes = refusedBytes === undefined ? undefined : Math.floor(refusedBytes / 2)
    // The smallest source refused: a limit below it that no clean cut fits is raised toward it.
    let smallestRefused = refusedBytes
    // What the newest checkpoint covers: a `pre_turn` slice never passes over one of the run's own.
    let coveredThrough = captured.source.baseline?.checkpoint.coveredThrough ?? 0
    let adoptedAny = false
    // The first requests refused as too long: a slice that would ask the same (its extra events are
    // ones the prompt does not show, an interrupted run's requests) counts as refused unasked.
    const refusedRequests = new Set<string>()
    const refuse = (source: Compaction.Captured) => {
      const refused = sourceBytes(source.source)
      smallestRefused = Math.min(smallestRefused ?? refused, refused)
      maxBytes = Math.floor(refused / 2)
    }
    // A refused background summary was the first of the compaction's summaries.
    for (let slice = refusedBytes === undefined ? 1 : 2; slice <= MAX_SLICES; slice++) {
      if (current === undefined) {
        const sliced = yield* raising((limit) => nextSlice(run, captured.mode, mode, coveredThrough, limit), maxBytes!, smallestRefused)
        const next = sliced.next
        maxBytes = sliced.maxBytes
        if (next === undefined || next === "too_large") return adoptedAny
        current = next
        mode = next.mode
        if (refusedRequests.size > 0 && refusedRequests.has(Compaction.firstRequestDigest(run, current))) {
          refuse(current)
          current = undefined
          continue
        }
      }
      const result = yield* Effect.result(Compaction.job(run, current))
      if (Result.isFailure(result)) {
        const error = result.failure
        if (error.reason._tag !== "Model" || error.reason.error.reason._tag === "Cancelled") return yield* Effect.fail(error)
        if (Compaction.isToolContent(error)) loop.summaryToolContent = true
        if (!Compaction.isOverflow(error)) return adoptedAny
        refusedRequests.add(Compaction.firstRequestDigest(run, current))
        refuse(current)
      } else {
        if (!adopted(run, loop, yield* Compaction.adoptResult(run, result.success))) return adoptedAny
        adoptedAny = true
        // A whole source is done; a slice leaves the rest of the history for the next one.
        if (maxBytes === undefined) return true
        coveredThrough = current.source.sourceEvidence.highWater
      }
      current = undefined
    }
    return adoptedAny
  })

/** How many times one slice's limit may rise toward the smallest source refused. */
export const MAX_RAISES = 8

/**
 * `slice` at `maxBytes`; while no clean cut fits it and a larger slice, still smaller than any source
 * refused, was never tried, the limit rises halfway to the smallest refused (docs/engine.md §5.12
 * "Slices"). Returns the slice and the limit it was taken at.
 */
export const raising = <A, E, R>(
  slice: (maxBytes: number) => Effect.Effect<A | "too_large", E, R>,
  maxBytes: number,
  smallestRefused: number | undefined,
) =>
  Effect.gen(function* () {
    let limit = maxBytes
    let next = yield* slice(limit)
    for (let raise = 0; next === "too_large" && smallestRefused !== undefined && raise < MAX_RAISES; raise++) {
      const raised = Math.floor((limit + smallestRefused) / 2)
      if (raised <= limit) break
      limit = raised
      next = yield* slice(limit)
    }
    return { next, maxBytes: limit }
  })

/**
 * The next slice of a sliced compaction begun in `first` mode, after one in `last` mode: the capture
 * in `last` mode with the byte limit; `too_large` when no clean cut fits it, `undefined` when no
 * history is left. A `mid_turn` slice covers the opening: when the history between the newest
 * checkpoint and the opening is alone over the limit, and that checkpoint covers less than the
 * opening, the history before the run is sliced first (`pre_turn`), then the run's own, from the
 * checkpoint that covers everything before it.
 */
const nextSlice = (
  run: Run,
  first: ModelContext.CheckpointMode,
  last: ModelContext.CheckpointMode,
  coveredThrough: number,
  maxBytes: number,
) =>
  Effect.gen(function* () {
    let next = yield* Compaction.capture(run, last, true, maxBytes)
    if (next.kind === "too_large" && last.kind === "mid_turn" && coveredThrough < run.opening!.stored.sequence) {
      next = yield* Compaction.capture(run, { kind: "pre_turn" }, true, maxBytes)
    } else if (next.kind === "unchanged" && last.kind === "pre_turn" && first.kind === "mid_turn") {
      next = yield* Compaction.capture(run, first, true, maxBytes)
    }
    return asSlice(next)
  })

/** A capture as a slice: the captured source, `too_large` when no clean cut fits, `undefined` when no history is left. */
const asSlice = (capture: Compaction.Capture) =>
  capture.kind === "captured" ? capture.captured : capture.kind === "too_large" ? ("too_large" as const) : undefined

/**
 * Proactive compaction (docs/engine.md §5.4 step 7), when the budget is available, no summary is
 * pending and compaction is due: the budget is spent before trying; with a background reservation
 * the job runs beside this step, else it runs and is adopted now.
 */
const maybeCompact = (run: Run, loop: LoopState, source: EventLog.ModelContextSource) =>
  Effect.gen(function* () {
    if (loop.budget !== "available" || loop.pending !== undefined || !isDue(run, source)) return
    loop.budget = "failed"
    const mode = automaticMode(run, loop)
    const captured = yield* Compaction.capture(run, mode, false)
    if (captured.kind !== "captured") return
    // Near a read limit the job runs now: in the background it would be adopted only if it finished
    // before the run's next step boundary, and a turn shorter than a summary would never compact.
    // So it does when the session's newest summary (after its baseline) was drained at the end of its run.
    // And so after a background summary the provider refused as too long: the next is sliced now.
    const inForeground = nearReadLimit(run) || source.latestSummary?.drained === true || loop.refusedBytes !== undefined
    const pending = inForeground ? undefined : yield* Compaction.startBackground(run, captured.captured)
    if (pending !== undefined) {
      loop.pending = pending
      return
    }
    if (yield* foregroundOf(run, loop, captured.captured)) loop.budget = "reshaped"
  })

/**
 * Whether automatic compaction is due (docs/engine.md §5.12 "Due"): the latest main request of the
 * same route reached the declared window, or the next main context passes `READ_LIMIT_SHARE` of
 * either read limit, whatever the window (a session never dies of its own length).
 */
export const isDue = (run: Run, source: EventLog.ModelContextSource): boolean =>
  nearReadLimit(run) || PromptBuilder.compactionDue(routeMatch(run, source))

/** The next main context passes `READ_LIMIT_SHARE` of either read limit. */
const nearReadLimit = (run: Run): boolean => {
  const size = run.live!.size(run.carry)
  const limits = LiveContext.defaultLimits
  return size.events >= limits.maxEvents * Compaction.READ_LIMIT_SHARE || size.bytes >= limits.maxBytes * Compaction.READ_LIMIT_SHARE
}

/** A finished background summary is adopted at the step boundary (docs/engine.md §5.4). */
const adoptFinished = (run: Run, loop: LoopState) =>
  Effect.gen(function* () {
    const pending = loop.pending
    if (pending === undefined || !(yield* pending.isFinished)) return
    yield* adoptPending(run, loop, pending)
  })

/** Waits for the background summary and adopts it; one the provider refused as too long makes the next summary sliced. */
const adoptPending = (run: Run, loop: LoopState, pending: Compaction.Pending) =>
  Effect.gen(function* () {
    loop.pending = undefined
    const adoption = yield* Compaction.adopt(run, pending)
    if (adopted(run, loop, adoption)) loop.budget = "reshaped"
    else if (adoption.kind === "not_adopted" && adoption.reason === "overflow") loop.refusedBytes = sourceBytes(pending.captured.source)
  })

/** Overflow recovery applies: no output was observed, a summary can be had, and a step remains. */
const recoversOverflow = (run: Run, loop: LoopState, error: EngineError.EngineError, step: number) =>
  Effect.gen(function* () {
    const reason = error.reason
    if (reason._tag !== "Model" || reason.error.reason._tag !== "ContextOverflow" || reason.error.reason.observedOutput) return false
    if (loop.budget !== "available" && loop.pending === undefined) return false
    if (step + 1 >= run.settings.maxSteps || (yield* isCancelled(run))) return false
    return true
  })

/**
 * A prune a batch owed while the summary ran is paid before a summary that replaces it: its source,
 * like the next request, never carries whole a result over one page (docs/engine.md §5.11).
 */
const payOwedPrune = (run: Run, loop: LoopState) =>
  Effect.gen(function* () {
    if (!loop.pruneOwed) return
    yield* pruneOwing(run, loop)
    if (run.live!.stale) run.live = yield* readContext(run, false)
  })

/**
 * Overflow recovery (docs/engine.md §5.4 step 11): adopt the pending summary, or make one now; the
 * recovery consumes the step. Returns whether a checkpoint was adopted.
 */
const recoverOverflow = (run: Run, loop: LoopState) =>
  Effect.gen(function* () {
    const pending = loop.pending
    if (pending !== undefined) {
      loop.pending = undefined
      const adoption = yield* Compaction.adopt(run, pending)
      if (adopted(run, loop, adoption)) {
        loop.budget = "reshaped"
        return true
      }
      // A background summary the provider refused as too long is sliced now, whatever the budget:
      // it overflowed for the same reason as the step, and a summary of the same history again would.
      if (adoption.kind === "not_adopted" && adoption.reason === "overflow") {
        loop.budget = "failed"
        yield* payOwedPrune(run, loop)
        // Its source's baseline still holds (no other summary runs beside one), its mode is now's.
        const refused = { ...pending.captured, mode: automaticMode(run, loop) }
        loop.refusedBytes = undefined
        if (!(yield* foreground(run, loop, refused, sourceBytes(pending.captured.source)))) return false
        loop.budget = "reshaped"
        return true
      }
      if (loop.budget !== "available") return false
    }
    loop.budget = "failed"
    yield* payOwedPrune(run, loop)
    if (!(yield* compactNow(run, loop, automaticMode(run, loop), false))) return false
    loop.budget = "reshaped"
    return true
  })

/**
 * The handoff boundary at the top of a step (docs/engine.md §5.10): a requested handoff is held, and
 * its preflight drains the background summary, commits what the run carries, builds the successor's
 * replay (the request this step would send) and the pause, and asks the store's dry run. A failed
 * preflight releases the gate and the step proceeds; one that steering came during keeps the
 * reservation for the next boundary (the step delivers the steering); a successful one returns the
 * pause to seal.
 */
const handoffBoundary = (run: Run, loop: LoopState, step: number, priorUnknown: boolean) =>
  Effect.gen(function* () {
    const intent = run.handoff.hold()
    if (intent === undefined) return undefined
    if (priorUnknown) {
      yield* run.handoff.release
      return undefined
    }
    const prepared = yield* Effect.result(
      Effect.gen(function* () {
        if (loop.pending !== undefined) {
          const pending = loop.pending
          loop.pending = undefined
          yield* Compaction.drain(pending)
        }
        yield* Effect.mapError(flushCarry(run), commitError)
        // A result a batch left unarchived while the summary ran is archived before the replay is fixed.
        if (loop.pruneOwed) yield* pruneOwing(run, loop)
        if (run.live!.stale) run.live = yield* readContext(run, false)
        const source = yield* Effect.mapError(Effect.fromResult(run.live!.snapshot()), storeError)
        const captured = run.settings.tools.capture()
        const request = yield* mainRequest(run, source, run.live!.projection(), captured.definitions, false, run.live!.holdsArchived)
        const pause = Handoff.pauseOf(run, intent, step, request.inputDigest, loop.budget)
        yield* Effect.mapError(run.log.checkHandoff(run.settings.invocation, pause), storeError)
        return pause
      }),
    )
    // Steering queued during the preflight would miss the pause: the run goes on and delivers it, and
    // the reservation waits for the next step boundary. The queue is read and the gate committed in
    // one step, so no message slips in between.
    const proceeds = Result.isSuccess(prepared) && !(yield* isCancelled(run))
    const committed =
      proceeds &&
      (yield* Ref.modify(run.steering, (queued) => {
        if (queued.length === 0) return [run.handoff.commit(intent), queued] as const
        run.handoff.defer()
        return [false, queued] as const
      }))
    if (!committed) {
      yield* run.handoff.release
      // A commit that failed is the run's failure, not the preflight's.
      if (Result.isFailure(prepared) && prepared.failure.reason._tag === "Commit") return yield* Effect.fail(prepared.failure)
      return undefined
    }
    return prepared.success
  })

/**
 * The next request's context. Over the history limits the live context fails as a fresh read would
 * (`PrefixTooLarge`); what the run carries (the last settlements, steering) commits with the request,
 * and is in its prompt. A context past the limits (a step that added more than the room the due mark
 * leaves, a kept context that grew there) is brought back within them as at the opening: the
 * background summary adopted, the session pruned once, then compactions with `fit`, `mid_turn` once
 * a step of the run completed, one clean cut that fits at a time (docs/engine.md §5.12 "Fit passes").
 */
const fittedSnapshot = (run: Run, loop: LoopState, priorUnknown: boolean) =>
  Effect.gen(function* () {
    let pruned = false
    for (let pass = 0; ; pass++) {
      const read = yield* Effect.result(currentSnapshot(run, priorUnknown))
      if (Result.isSuccess(read)) return read.success
      if (priorUnknown || pass >= MAX_FIT_PASSES || !isPrefixTooLarge(read.failure)) return yield* Effect.fail(read.failure)
      if (loop.pending !== undefined) {
        yield* adoptPending(run, loop, loop.pending)
      } else if (!pruned) {
        // Large results archived first (an owed prune, or one a cancelled pass left), then folding.
        pruned = true
        yield* pruneOwing(run, loop)
      } else if (loop.summaryToolContent) {
        // A summary already answered with tool content: no other is asked.
        return yield* unfitted(loop, read.failure)
      } else {
        const how = yield* compaction(run, loop, automaticMode(run, loop), true)
        if (how !== "adopted") return yield* unfitted(loop, withCause(read.failure, how))
        loop.budget = "reshaped"
      }
    }
  })

/** The live context's snapshot with what the run carries; an archive or a checkpoint since makes it read the log again, once. */
const currentSnapshot = (run: Run, priorUnknown: boolean) =>
  Effect.gen(function* () {
    if (run.live!.stale) run.live = yield* readContext(run, priorUnknown)
    return yield* Effect.mapError(Effect.fromResult(run.live!.snapshot(run.carry)), storeError)
  })

/**
 * One logical step after the context read: prompt, model, tools. Returns whether the turn is done,
 * or the pause a handoff took before one of the step's physical retries.
 */
const runStep = (
  run: Run,
  loop: LoopState,
  step: number,
  priorUnknown: boolean,
): Effect.Effect<boolean | PausedAtRetry, EngineError.EngineError, Ids.Ids> =>
  Effect.gen(function* () {
    let source = yield* fittedSnapshot(run, loop, priorUnknown)
    if (!priorUnknown) {
      const before = run.live
      yield* maybeCompact(run, loop, source)
      // An adopted checkpoint rebuilt the context (or left it to be read again): snapshot it anew.
      if (run.live!.stale) run.live = yield* readContext(run, priorUnknown)
      if (run.live !== before) source = yield* Effect.mapError(Effect.fromResult(run.live!.snapshot(run.carry)), storeError)
    }
    const captured = run.settings.tools.capture()
    const input = yield* mainRequest(run, source, run.live!.projection(run.carry), captured.definitions, priorUnknown, run.live!.holdsArchived)
    // A handoff requested while the step's attempts fail replay-safely is taken before a retry:
    // the step has no completion yet, so the pause is the top of this step (docs/engine.md §5.10).
    // A continuation's or a successor's retry re-reads its request's source and rebuilds the request
    // (docs/engine.md §5.6): a retry re-sends the frozen request, which the log must still give.
    // The source is re-read from the request's evidence, as it was then: what the run wrote since
    // (an archive paid during the backoff) is no difference.
    const sameInput =
      run.claim === undefined
        ? Effect.void
        : Effect.gen(function* () {
            const evidence = input.evidence.current
            if (evidence === undefined) return
            const changed = EngineError.reconciliation(EngineError.RETRY_CHANGED_INPUT_MESSAGE)
            const frozen = yield* Effect.result(
              run.log.readFrozenModelContext({ scope: input.source.sourceEvidence.scope, highWater: evidence.highWater, digest: evidence.digest }),
            )
            // Rows that no longer give the evidence's digest are a difference too.
            if (Result.isFailure(frozen)) {
              return yield* Effect.fail(frozen.failure.isRejected ? changed : storeError(frozen.failure))
            }
            const source = frozen.success
            const rebuilt = yield* mainRequest(run, source, PromptBuilder.projectSource(source), captured.definitions, priorUnknown)
            if (rebuilt.inputDigest !== input.inputDigest) return yield* Effect.fail(changed)
          })
    const attempted = yield* Effect.result(attemptWithRetries(run, input, handoffBoundary(run, loop, step, priorUnknown), sameInput))
    if (Result.isFailure(attempted)) {
      // The request was built over a kept context something else outgrew: the opening is written,
      // nothing of the step is; the step is built again over a fresh read (once: the opening is in).
      if (isStaleSource(attempted.failure)) return yield* runStep(run, loop, step, priorUnknown)
      if (!priorUnknown && (yield* recoversOverflow(run, loop, attempted.failure, step))) {
        if (yield* recoverOverflow(run, loop)) return false
        // A recovery summary that answered with tool content ends the run for that (scenario 43).
        return yield* unfitted(loop, attempted.failure)
      }
      return yield* Effect.fail(attempted.failure)
    }
    if ("_tag" in attempted.success) return attempted.success
    const completed = attempted.success
    // An accepted main step renews the budget.
    loop.budget = "available"
    loop.completedStep = true
    const calls = completed.step.parts.flatMap((part) =>
      part.kind === "tool_call" && !part.providerExecuted ? [Journal.providerCall(completed.stepId, part)] : [],
    )
    // An answer ends the turn unless steering waits: then the next step delivers it. The queue is
    // closed in the same step, so no message is accepted and then dropped.
    if (calls.length === 0) return yield* Ref.modify(run.steering, (queued) => [queued.length === 0 && run.handoff.endSteering(), queued] as const)
    const { finishTurn: finished, archivable } = yield* runTools(run, loop, captured, calls)
    // A finish_turn tool ends the turn as an answer does: unless steering waits, which the next
    // step delivers.
    const finishTurn = finished && (yield* Ref.modify(run.steering, (queued) => [queued.length === 0 && run.handoff.endSteering(), queued] as const))
    // Prune after the tool batch (docs/engine.md §5.11) when a result it settled is over one page
    // (earlier results were archived by earlier passes), unless a summary is pending.
    // A batch that settled one while a summary was pending owes the prune to the next boundary
    // (or to the session's next run).
    if (!priorUnknown && (archivable || loop.pruneOwed)) {
      if (loop.pending === undefined) yield* pruneOwing(run, loop)
      else loop.pruneOwed = true
    }
    return finishTurn
  })

/** Why a run that is being sealed takes no steering. */
const RUN_ENDED_STEERING = EngineError.STEERING_RUN_ENDED_MESSAGE

/** Why a run in its last step takes no steering: no later step could deliver it. */
export const LAST_STEP_STEERING = EngineError.STEERING_LAST_STEP_MESSAGE

/** The step loop (docs/engine.md §5.4); a background summary never outlives it. */
export const stepLoop = (run: Run, loop: LoopState, priorUnknown: boolean): Effect.Effect<Done, EngineError.EngineError, Ids.Ids> =>
  Effect.gen(function* () {
    for (let step = 0; step < run.settings.maxSteps; step++) {
      // A claim's first request is its replay (docs/engine.md §5.9), with no new user message and
      // nothing pruned: steering queued before it waits for the next step (a claim of one step takes none).
      const holdsSteering = step === 0 && run.claim !== undefined
      if (!holdsSteering) yield* deliverSteering(run)
      if (yield* isCancelled(run)) {
        yield* run.handoff.drop
        return yield* Effect.fail(EngineError.cancelled())
      }
      const pause = yield* handoffBoundary(run, loop, step, priorUnknown)
      if (pause !== undefined) return { _tag: "Paused", pause } as const
      // No step after the last delivers steering: from here it is refused, not queued and dropped.
      if (step === run.settings.maxSteps - 1) run.handoff.endSteering(LAST_STEP_STEERING)
      // Steering that arrived during a handoff preflight the run did not take goes into this step.
      if (!holdsSteering) yield* deliverSteering(run)
      // Under the prior-unknown policy no summary is ever pending: nothing to adopt.
      yield* adoptFinished(run, loop)
      // A prune a batch owed while the summary ran is paid here, once none is pending (adopted or
      // not): the step's request never carries whole a result over one page (docs/engine.md §5.11).
      // Not before a claim's first request, which is its replay (docs/engine.md §5.9).
      if (loop.pruneOwed && loop.pending === undefined && !priorUnknown && !holdsSteering) yield* pruneOwing(run, loop)
      const stepped = yield* runStep(run, loop, step, priorUnknown)
      if (typeof stepped === "object") return stepped
      if (stepped) {
        // A summary that finished during the last step is adopted, not drained: the next run starts
        // from its checkpoint (one still running is drained, docs/engine.md §5.12).
        yield* adoptFinished(run, loop)
        return { _tag: "Completed" } as const
      }
    }
    return yield* Effect.fail(
      (yield* isCancelled(run)) ? EngineError.cancelled() : EngineError.make({ _tag: "StepLimit" }),
    )
  }).pipe(
    Effect.ensuring(
      Effect.suspend(() => {
        const pending = loop.pending
        loop.pending = undefined
        return pending === undefined ? Effect.void : Compaction.drain(pending)
      }),
    ),
  )

/** The epilogue's zero-budget safety check with `current` = this run (docs/engine.md §5.4). */
const epilogue = (run: Run, priorUnknown: boolean) =>
  priorUnknown
    ? Effect.void
    : Effect.mapError(run.log.checkHistorySafety(run.settings.invocation.sessionId, { current: run.settings.invocation.invocationId }), (error) =>
        invalidTransition(error) === undefined ? storeError(error) : EngineError.reconciliation(error.message),
      )

/**
 * Seals the run with the outcome of its work (uninterruptibly). A run that did not complete may have
 * left a request open, a call neither dispatched nor rejected, or a dispatch unsettled (after a
 * refused or uncertain commit, an abandoned step, a defect): its durable state is read and resolved
 * in the terminal's batch, as recovery does, so a session is never sealed over unresolved work.
 * Fails only when the batch fails, or the read does after a failed commit; the run then stays open
 * and the engine seals it later.
 */
const seal = (run: Run, intended: Outcome.InvocationOutcome): Effect.Effect<Outcome.InvocationOutcome, EngineError.EngineError, Ids.Ids> =>
  Effect.uninterruptible(
    Effect.gen(function* () {
      // After a commit whose outcome is unknown (a background summary's, beside a step that went on)
      // the run's own account may be wrong: it ends `event_commit`, resolved from what landed.
      let outcome = intended
      const uncertain = run.uncertain
      if (uncertain !== undefined && (outcome.kind === "completed" || outcome.kind === "handoff_paused")) {
        outcome = { kind: "failed", class: "event_commit", message: uncertain.message }
      }
      const terminal: ReadonlyArray<Fact.Fact> = [{ kind: "invocation_ended", outcome }]
      // Steering accepted but not yet delivered (the run was cancelled or failed within a step) is
      // written before the terminal: delivered, never dropped (docs/engine.md §5.4). From here on
      // `steer` is refused. An answer or a pause delivered or refused all of it already.
      if (outcome.kind !== "completed" && outcome.kind !== "handoff_paused") {
        run.handoff.endSteering(RUN_ENDED_STEERING)
        yield* deliverSteering(run)
      }
      // What the run carries is made durable before its state is read (a refusal of the terminal
      // below would commit it alone anyway).
      if (outcome.kind !== "completed") yield* Effect.ignore(flushCarry(run, true))
      // A pause is sealed only at a settled boundary the store's dry run checked: nothing to resolve.
      const facts =
        outcome.kind === "completed" || outcome.kind === "handoff_paused"
          ? terminal
          : yield* run.log.invocationRecovery(run.settings.invocation, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY).pipe(
              Effect.map((recovery) => Recovery.sealingFacts(recovery, outcome)),
              // Unreadable: the run's own account holds when every commit went through.
              Effect.catchIf(
                () => !run.mayBeUnresolved,
                () => Effect.succeed(terminal),
              ),
              Effect.mapError(commitError),
            )
      yield* commitFacts(run, facts, true)
      // Every batch ends with the terminal, whose outcome recovery may have made `outcome_unknown`.
      return (facts[facts.length - 1] as Fact.InvocationEnded).outcome
    }),
  )

export interface RunResult {
  readonly outcome: Outcome.InvocationOutcome
}

/**
 * Runs an admitted message run: preflight and opening (then `admitted` resolves), the step loop,
 * and the seal. Fails only before admission (nothing written) or when the terminal itself fails.
 */
export const runMessage = (
  run: Run,
  admitted: Effect.Effect<void>,
): Effect.Effect<RunResult, EngineError.EngineError, Ids.Ids> =>
  Effect.gen(function* () {
    if (yield* isCancelled(run)) return yield* Effect.fail(EngineError.cancelled())
    const priorUnknown = yield* unlessTaken(run, preflight(run))
    if (yield* isCancelled(run)) return yield* Effect.fail(EngineError.cancelled())
    const successor = run.settings.successor
    // A handoff successor claims the paused run's boundary: checked before anything is written.
    if (successor !== undefined) run.claim = yield* unlessTaken(run, Handoff.prepareClaim(run, (source) => replayDigest(run, source)))
    // A continuation claims a sealed run's boundary, replaying its lineage.
    const continuation = run.settings.continuation
    if (continuation !== undefined) run.claim = yield* Continuation.prepare(run, continuation.source, (source) => replayRequest(run, source))
    // Over a context read before it (kept, or read now) the opening rides the run's first commit
    // (the first request's, most often), which admits the run; otherwise it commits alone first.
    const found = yield* foldable(run, priorUnknown)
    const folded = found instanceof LiveContext ? found : undefined
    if (folded === undefined) {
      yield* unlessTaken(run, open(run))
      yield* admitted
    } else {
      const write = yield* openingWriteOf(run)
      run.pendingOpening = { write, admit: admitted }
      run.carry.push(write)
      folded.beginRun(run.settings.configuration)
    }
    const loop = initialLoopState(successor?.pause.execution.compaction ?? "available")
    const work = Effect.gen(function* () {
      if (found !== undefined && !(found instanceof LiveContext)) yield* Effect.mapError(Effect.failCause(found.failed), readFailure)
      const live = folded === undefined ? yield* openingContext(run, loop, priorUnknown) : { context: folded, kept: true, pruned: false }
      run.live = live.context
      // Prune once after the opening (docs/engine.md §5.11): a context the engine kept was pruned
      // after each of its tool batches already, and one that holds no result over a page has no candidate.
      // A handoff successor finds nothing to prune: its pause's preflight archived what was owed, so
      // its first request stays the pause's replay. A continuation's first request is its claim's
      // replay (docs/engine.md §5.9): it owes the prune to the steps after it.
      const owesPrune = live.kept ? live.context.pruneOwed : live.context.holdsArchivable(isArchivable)
      if (!priorUnknown && !live.pruned && owesPrune) {
        if (continuation === undefined) yield* pruneOwing(run, loop)
        else loop.pruneOwed = true
      }
      const done = yield* stepLoop(run, loop, priorUnknown)
      if (loop.summaryToolContent) return yield* Effect.fail(EngineError.reconciliation(EngineError.SUMMARY_TOOL_CONTENT_MESSAGE))
      if (done._tag === "Paused") return done
      yield* epilogue(run, priorUnknown)
      return done
    })
    const ended = yield* work.pipe(
      Effect.catchDefect((defect) => Effect.fail(EngineError.internal(`the run failed: ${String(defect)}`))),
      Effect.result,
    )
    const pending = run.pendingOpening
    if (pending !== undefined) yield* commitPendingOpening(run, pending.write)
    const cancelled = yield* isCancelled(run)
    const outcome: Outcome.InvocationOutcome = Result.isFailure(ended)
      ? EngineError.outcomeOf(ended.failure)
      : ended.success._tag === "Paused"
        ? { kind: "handoff_paused", pause: ended.success.pause }
        : cancelled
          ? { kind: "cancelled", source: "runtime_cancellation" }
          : { kind: "completed" }
    // A seal that fails seals no pause either: the gate closes, and whoever waits for one learns so
    // (docs/engine.md §5.10).
    const sealed = yield* seal(run, outcome).pipe(Effect.onError(() => run.handoff.close))
    const pause = sealedPause(sealed)
    if (pause !== undefined) yield* run.handoff.sealed(pause)
    else yield* run.handoff.close
    // Every commit of the run went through: its context, when it is the session's (not a lineage),
    // is kept for the next run.
    if (!run.mayBeUnresolved && !priorUnknown && run.live !== undefined && run.live.isSessionWide) {
      run.live.pruneOwed = loop.pruneOwed
      run.contexts.put(run.settings.invocation.sessionId, run.live)
    }
    return { outcome: sealed } satisfies RunResult
  })

const sealedPause = (outcome: Outcome.InvocationOutcome) => (outcome.kind === "handoff_paused" ? outcome.pause : undefined)

/** The main request `run` would send over `source`, and its `inputDigest`: a replay's evidence. */
const replayRequest = (run: Run, source: EventLog.ModelContextSource) =>
  Effect.map(
    mainRequest(run, source, PromptBuilder.projectSource(source), run.settings.tools.capture().definitions, false),
    (built) => ({ inputDigest: built.inputDigest, prompt: built.request.prompt }),
  )

const replayDigest = (run: Run, source: EventLog.ModelContextSource) =>
  Effect.map(replayRequest(run, source), (built) => built.inputDigest)

/** Checks a continuation's claim (docs/engine.md §5.9 steps 1–8) and the session's safety, writing nothing. */
export const checkContinuation = (run: Run): Effect.Effect<Lineage.ContinuationClaim, EngineError.EngineError, Ids.Ids> =>
  Effect.gen(function* () {
    yield* preflight(run)
    const claim = yield* Continuation.prepare(run, run.settings.continuation!.source, (source) => replayRequest(run, source))
    // A boundary another continuation claimed already: its append would be refused (one claim each).
    const claimed = yield* Effect.mapError(run.log.continuationForSource(claim.source), storeError)
    if (claimed !== undefined) return yield* Effect.fail(EngineError.reconciliation("the source boundary is already claimed"))
    return claim
  })

/**
 * Runs an admitted `context_compact` invocation (docs/engine.md §5.12 "Standalone"): the summary of
 * the session's history before its opening. Nothing new gives `unchanged {no_new_history}`, a source
 * that fits the read limits at no clean cut `failed {input_too_large}`; a job's outcome becomes the
 * terminal `context_compact_finished`, and a checkpoint commits in the terminal's batch. A model error
 * fails the invocation with its class; cancellation seals `cancelled`, with no checkpoint.
 */
export const runCompact = (
  run: Run,
  admitted: Effect.Effect<void>,
): Effect.Effect<RunResult, EngineError.EngineError, Ids.Ids> =>
  Effect.gen(function* () {
    if (yield* isCancelled(run)) return yield* Effect.fail(EngineError.cancelled())
    yield* preflight(run)
    if (yield* isCancelled(run)) return yield* Effect.fail(EngineError.cancelled())
    yield* open(run)
    yield* admitted
    const work = Effect.gen(function* () {
      const captured = yield* Compaction.capture(run, { kind: "standalone" }, true)
      if (captured.kind === "unchanged") return { facts: [], outcome: { kind: "unchanged", reason: "no_new_history" } } as const
      if (captured.kind === "too_large") return { facts: [], outcome: { kind: "failed", reason: "input_too_large" } } as const
      // A summary too long for the model is made over a slice of half the bytes, again and again;
      // the next compaction goes on from the slice's checkpoint (docs/engine.md §5.12 "Slices").
      let source = captured.captured
      let result = yield* Effect.result(Compaction.job(run, source))
      let smallestRefused: number | undefined
      for (let slice = 1; Result.isFailure(result) && Compaction.isOverflow(result.failure) && slice < MAX_SLICES; slice++) {
        const refused = sourceBytes(source.source)
        smallestRefused = Math.min(smallestRefused ?? refused, refused)
        const { next } = yield* raising(
          (limit) => Effect.map(Compaction.capture(run, source.mode, true, limit), asSlice),
          Math.floor(refused / 2),
          smallestRefused,
        )
        if (next === undefined || next === "too_large") break
        source = next
        result = yield* Effect.result(Compaction.job(run, source))
      }
      if (Result.isFailure(result)) return yield* Effect.fail(result.failure)
      const job = result.success
      if (yield* isCancelled(run)) return yield* Effect.fail(EngineError.cancelled())
      if (job.kind === "failed") return { facts: [], outcome: { kind: "failed", reason: job.reason } } as const
      const write = yield* plainWrite(run, Compaction.checkpointFact(job.checkpoint))
      return { facts: [write], outcome: { kind: "compacted", checkpointId: write.event.id } } as const
    })
    const ended = yield* work.pipe(
      Effect.catchDefect((defect) => Effect.fail(EngineError.internal(`the run failed: ${String(defect)}`))),
      Effect.result,
    )
    if (Result.isFailure(ended)) return { outcome: yield* seal(run, EngineError.outcomeOf(ended.failure)) } satisfies RunResult
    // The checkpoint commits atomically with the terminal that names it.
    const outcome: Outcome.InvocationOutcome = { kind: "context_compact_finished", outcome: ended.success.outcome }
    const terminal = yield* plainWrite(run, { kind: "invocation_ended", outcome })
    const committed = yield* Effect.result(commit(run, [...ended.success.facts, terminal]))
    if (Result.isFailure(committed)) {
      if (committed.failure.reason._tag === "OutcomeUnknown") return yield* Effect.fail(commitError(committed.failure))
      return { outcome: yield* seal(run, { kind: "failed", class: "event_commit", message: committed.failure.message }) } satisfies RunResult
    }
    return { outcome } satisfies RunResult
  })
