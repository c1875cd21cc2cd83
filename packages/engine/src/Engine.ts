/**
 * The `Engine` service (docs/architecture.md §8, docs/engine.md §5.1–§5.2): admission that returns only after the
 * opening is durable, one live run per session, the runner in the engine's scope, live `events()`,
 * steering, cancellation that drains, and recovery. Time, randomness and ids come from services.
 */
import {
  Canonical,
  Codec,
  Configuration,
  Digest,
  EventWrite,
  Identity,
  Input,
  Limits,
  Lineage,
  ModelContext,
  Validation,
  type Event,
  type Fact,
  type Outcome,
} from "@maka/facts"
import { EventLog, EventLogError } from "@maka/event-log"
import type { LanguageModel } from "@maka/model"
import { Cancellation, Ids, ReadToolResult, ToolCatalog } from "@maka/tools"
import { Clock, Context, Deferred, Effect, Exit, Fiber, Layer, Option, type Redacted, Ref, Result, Schema, Scope, Semaphore, Stream } from "effect"
import * as EngineError from "./EngineError.ts"
import * as AbortFanout from "./internal/abort-fanout.ts"
import { defaults, MAX_QUEUED_STEERING, MAX_QUEUED_STEERING_BYTES, optionsProblem, resolveOptions, type EngineOptions, type EngineOptionsInput } from "./internal/options.ts"
import { SessionContexts, stamp, type Run, type RunSettings } from "./internal/run-context.ts"
import * as EventFeed from "./internal/event-feed.ts"
import * as Handoff from "./internal/handoff.ts"
import * as HeldAlone from "./internal/held-alone.ts"
import { catalogOf, reservedNameProblem } from "./internal/read-tool-result.ts"
import { checkContinuation as checkContinuationOf, LAST_STEP_STEERING, runCompact, runMessage } from "./internal/runner.ts"
import * as PromptBuilder from "./PromptBuilder.ts"
import * as Recovery from "./Recovery.ts"
import * as Steering from "./internal/steering.ts"
import { describeThrown } from "./internal/start-options.ts"

export { defaults, type EngineOptions, type EngineOptionsInput }

/** `pendingHandoffs` returns pages of at most this many pauses. */
const MAX_PENDING_PAGE = 64
/**
 * How long a run that ended without its terminal waits for the one immediate try to write it
 * (docs/engine.md §5.3 step 8); past it the engine writes the terminal before its next start on the session.
 */
const UNWRITTEN_RETRY_MS = 5_000

export interface StartInput {
  readonly invocation: Identity.Invocation
  /** The bound model; its `model` must equal `configuration.model.model`. */
  readonly model: LanguageModel.LanguageModelShape
  readonly configuration: Configuration.InvocationConfiguration
  readonly message: Input.MessageInput
  readonly tools: ToolCatalog.ToolCatalog
  readonly maxSteps?: number | undefined
  readonly allowPriorUnknown?: boolean | undefined
  readonly providerOptions?: Identity.JsonObject | undefined
  readonly context?: ModelContext.ModelRequestContext | undefined
  readonly mainOutputLimit?: number | undefined
  readonly requestFingerprint?: string | undefined
  /**
   * Secrets scrubbed from every tool failure message before it is stored, beside the model's own
   * credentials (its key and Redacted header values, always scrubbed: `LanguageModel.secrets`).
   */
  readonly secrets?: ReadonlyArray<Redacted.Redacted<string>> | undefined
  /** Cancels the run when it aborts; aborted before admission, nothing is written. */
  readonly signal?: AbortSignal | undefined
}

/** A standalone compaction (docs/engine.md §5.12): a `context_compact` invocation over the session's history. */
export interface CompactInput {
  readonly invocation: Identity.Invocation
  readonly model: LanguageModel.LanguageModelShape
  readonly configuration: Configuration.InvocationConfiguration
  readonly providerOptions?: Identity.JsonObject | undefined
  readonly context?: ModelContext.ModelRequestContext | undefined
  /** The run's output limit (default 8,000), of which a summary request asks at most 8,000 (docs/engine.md §5.6). */
  readonly mainOutputLimit?: number | undefined
  /** Names the request; a fresh id when absent. */
  readonly requestFingerprint?: string | undefined
  readonly secrets?: ReadonlyArray<Redacted.Redacted<string>> | undefined
  readonly signal?: AbortSignal | undefined
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
  /** Queues a user message for the next step boundary; `Busy` when no later step could deliver it. */
  readonly steer: (text: string) => Effect.Effect<void, EngineError.EngineError>
  /** Requests cancellation: dispatched effects finish, the run seals `cancelled`. */
  readonly cancel: Effect.Effect<void>
  /**
   * Requests a handoff at the next step boundary (docs/engine.md §5.10): the in-flight step settles,
   * then the run seals `handoff_paused`. Resolves with the sealed pause, or `undefined` when the run
   * ends while the reservation waits or the preflight failed (the run then goes on). A reservation
   * made once the run has ended or paused is refused `Busy` (`the run's handoff gate is closed` or
   * `… sealed`, docs/scenarios.md scenario 61); the facade's `run.handoff()` resolves `null` for it.
   */
  readonly handoff: Effect.Effect<Lineage.HandoffPause | undefined, EngineError.EngineError>
  readonly wait: Effect.Effect<RunResult, EngineError.EngineError>
}

/** A successor of a sealed pause (docs/engine.md §5.10): the paused run, and how this host serves it. */
export interface ResumeInput {
  /** The paused run's invocation. */
  readonly paused: Identity.Invocation
  /** The sealed pause; it must equal the log's. */
  readonly pause: Lineage.HandoffPause
  readonly model: LanguageModel.LanguageModelShape
  readonly tools: ToolCatalog.ToolCatalog
  /** The paused run's configuration when absent; any other is refused. */
  readonly configuration?: Configuration.InvocationConfiguration | undefined
  /** The pause's frozen settings when absent; any other is refused. */
  readonly providerOptions?: Identity.JsonObject | undefined
  readonly context?: ModelContext.ModelRequestContext | undefined
  readonly mainOutputLimit?: number | undefined
  readonly secrets?: ReadonlyArray<Redacted.Redacted<string>> | undefined
  readonly signal?: AbortSignal | undefined
}

/**
 * A continuation of a sealed run (docs/engine.md §5.9): a new turn, run and invocation of the same
 * session whose first request replays the source's lineage; no new user message.
 */
export interface ContinueInput {
  /** The sealed run to continue. */
  readonly source: Identity.Invocation
  /** A new turn, run and invocation in the source's session. */
  readonly invocation: Identity.Invocation
  readonly model: LanguageModel.LanguageModelShape
  /** Its `workspaceIdentity` must equal the source's. */
  readonly configuration: Configuration.InvocationConfiguration
  readonly tools: ToolCatalog.ToolCatalog
  readonly maxSteps?: number | undefined
  readonly providerOptions?: Identity.JsonObject | undefined
  readonly context?: ModelContext.ModelRequestContext | undefined
  readonly mainOutputLimit?: number | undefined
  /** A digest naming the request (`sha256:…`); a digest of the claim when absent. */
  readonly requestFingerprint?: string | undefined
  readonly secrets?: ReadonlyArray<Redacted.Redacted<string>> | undefined
  readonly signal?: AbortSignal | undefined
}

/** The paused run a resolver is asked about: its session, invocation and configuration (its `cwd` included). */
export interface PausedRun {
  readonly sessionId: string
  readonly invocation: Identity.Invocation
  readonly configuration: Configuration.InvocationConfiguration
}

/** How a host serves pauses it finds (docs/engine.md §5.10 `resumePending`). */
export interface ResumeResolvers {
  /** The model of a pause's route, or `undefined` when this host cannot serve it (or will not: another session). */
  readonly provider: (
    routeIdentity: string,
    binding: Configuration.InvocationConfiguration["model"],
    paused: PausedRun,
  ) => Effect.Effect<LanguageModel.LanguageModelShape | undefined, EngineError.EngineError>
  /** The catalog the pause recorded (its names, the engine's `read_tool_result` included, and digest), or `undefined`. */
  readonly tools: (names: ReadonlyArray<string>, catalogDigest: string, paused: PausedRun) => ToolCatalog.ToolCatalog | undefined
}

export type ResumeReport =
  | { readonly sessionId: string; readonly invocation: Identity.Invocation; readonly started: RunningInvocation }
  | { readonly sessionId: string; readonly invocation: Identity.Invocation; readonly skipped: string }

/**
 * What became of a live run when the engine closed handing off: `paused` (with its pause),
 * `cancelled`, or `ended` when the run reached its own terminal first (completed, or failed, before
 * its pause or its cancellation took effect), with that terminal: a host must not run it again.
 */
export type ClosedRun =
  | {
      readonly invocation: Identity.Invocation
      readonly outcome: "paused"
      readonly pause: Lineage.HandoffPause
      readonly terminal?: undefined
    }
  | { readonly invocation: Identity.Invocation; readonly outcome: "cancelled"; readonly pause?: undefined; readonly terminal?: undefined }
  | {
      readonly invocation: Identity.Invocation
      readonly outcome: "ended"
      readonly pause?: undefined
      /** The terminal the run reached on its own. */
      readonly terminal: Outcome.InvocationOutcome
    }

/**
 * What a close tells of a run it cancelled, from the terminal the run was sealed with (`undefined`
 * when it ended without one): `cancelled`, or, when the run reached a terminal of its own before
 * the cancellation took effect, that terminal (`paused` with its pause, or `ended`).
 */
export const closedRunOf = (invocation: Identity.Invocation, terminal: Outcome.InvocationOutcome | undefined): ClosedRun =>
  terminal === undefined || terminal.kind === "cancelled"
    ? { invocation, outcome: "cancelled" }
    : terminal.kind === "handoff_paused"
      ? { invocation, outcome: "paused", pause: terminal.pause }
      : { invocation, outcome: "ended", terminal }

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
  /**
   * Continues a sealed run in a new turn (docs/engine.md §5.9): claims its exact boundary and replays
   * its lineage; refused with `ReconciliationRequired`, writing nothing, when the claim cannot be made.
   */
  readonly continueRun: (input: ContinueInput) => Effect.Effect<RunningInvocation, EngineError.EngineError>
  /** The claim `continueRun` would make, and the session's safety, checked without writing anything. */
  readonly checkContinuation: (input: ContinueInput) => Effect.Effect<Lineage.ContinuationClaim, EngineError.EngineError>
  /** Starts the successor of a sealed pause; refused, writing nothing, unless every setting is identical. */
  readonly resume: (input: ResumeInput) => Effect.Effect<RunningInvocation, EngineError.EngineError>
  /** Starts each sealed pause of the log this host can serve, and says why it skipped the others. */
  readonly resumePending: (resolvers: ResumeResolvers) => Effect.Effect<ReadonlyArray<ResumeReport>, EngineError.EngineError>
  /**
   * Releases a pause that can never be resumed (docs/engine.md §5.10 Abandon): its successor opens
   * and is sealed `cancelled {handoff_abandoned}` at once, without a model. Returns the successor.
   */
  readonly abandonHandoff: (sessionId: string) => Effect.Effect<Identity.Invocation, EngineError.EngineError>
  /** Hands off every live run it can at its next step boundary, cancels the others, and waits until each is sealed. */
  readonly handOffAll: Effect.Effect<ReadonlyArray<ClosedRun>>
  /** The invocations of the runs live in this engine now. */
  readonly liveInvocations: () => ReadonlyArray<Identity.Invocation>
  /** Cancels every live run and waits until each is sealed. */
  readonly close: Effect.Effect<void>
}

export class Engine extends Context.Service<Engine, EngineShape>()("@maka/engine/Engine") {}

/**
 * The first problem of `value` against `schema` decoded closed, or undefined: a value the compiled
 * shape check accepts passes at once (the decode would accept it); any other gets the decode's verdict.
 */
const closedCheck = <S extends Schema.Top & Schema.ConstraintDecoder<unknown>>(schema: S) => {
  const hasShape = Codec.shapeGuard(schema)
  const decode = Codec.decodeClosed(schema)
  return (value: unknown, what: string): string | undefined => {
    if (hasShape(value)) return undefined
    const decoded = decode(value)
    return Result.isFailure(decoded) ? `${what}: ${decoded.failure.message}` : undefined
  }
}

const checkInvocation = closedCheck(Identity.Invocation)
const checkContext = closedCheck(ModelContext.ModelRequestContext)
const checkJsonObject = closedCheck(Identity.JsonObject)

/**
 * Provider options decoded closed, and plain JSON as canonical JSON writes it: a `Date`, `Map` or
 * class instance (through `any` or a cast) is refused with its path, never sealed into the run.
 */
const checkProviderOptions = (value: unknown, what: string): string | undefined => {
  const problem = checkJsonObject(value, what)
  if (problem !== undefined) return problem
  const text = Canonical.tryStringify(value)
  if (Result.isFailure(text)) return `${what}: ${text.failure.message}`
  // Sent as given, and stored in a handoff's pause: a lone surrogate would leave the pause unwritable.
  const wellFormed = Validation.wellFormed(value, what)
  // Its path may hold the key at fault: the refusal itself is well-formed.
  return Result.isFailure(wellFormed) ? Validation.toWellFormedText(wellFormed.failure.message) : undefined
}

/** How a resuming host's tool catalog differs from a pause's: the names added or removed, or a definition. */
const catalogChange = (paused: ReadonlyArray<string>, resuming: ReadonlyArray<string>): string => {
  // The engine's own tool comes and goes with the host's: it is never the host's change.
  const own = (name: string) => name !== ReadToolResult.NAME
  const added = resuming.filter((name) => own(name) && !paused.includes(name))
  const removed = paused.filter((name) => own(name) && !resuming.includes(name))
  const changes = [
    ...(removed.length === 0 ? [] : [`without ${removed.join(", ")}`]),
    ...(added.length === 0 ? [] : [`with ${added.join(", ")} added`]),
  ]
  return changes.length === 0
    ? "the tool catalog differs from the pause's: a tool of the same name has another definition (description or input schema)"
    : `the tool catalog differs from the pause's: ${changes.join(", ")}`
}

/** What `start` and `compact` share: everything but the message and the tools. */
type LaunchInput = Omit<StartInput, "message" | "tools"> & {
  readonly message?: Input.MessageInput
  readonly tools?: ToolCatalog.ToolCatalog
  readonly successor?: { readonly paused: Identity.Invocation; readonly pause: Lineage.HandoffPause }
  readonly continuation?: { readonly source: Identity.Invocation }
}

/** The input checks of docs/engine.md §5.2 for a message run; the first problem, or `undefined`. */
export const validateInput = (input: LaunchInput): string | undefined =>
  typeof input !== "object" || input === null ? "the input must be an object" : (settingsProblem(input) ?? openingProblem(input))

/** The opening of a message or standalone compaction run (a successor's and a continuation's hold claims prepared later). */
const openingFact = (input: LaunchInput): Fact.InvocationOpened => ({
  kind: "invocation_opened",
  input:
    input.message === undefined
      ? // Only checked, never written as it is: a missing fingerprint is the check's refusal.
        { kind: "context_compact", requestFingerprint: input.requestFingerprint as string }
      : {
          kind: "message",
          content: input.message,
          ...(input.requestFingerprint === undefined ? {} : { requestFingerprint: input.requestFingerprint }),
        },
  configuration: input.configuration,
})

/** Whether the run's opening is written at admission: a message run's (the others are built later). */
const opensAtAdmission = (input: LaunchInput): boolean =>
  input.message !== undefined && input.successor === undefined && input.continuation === undefined

/** The opening's check, as the store will check it; a successor's and a continuation's come later. */
const openingProblem = (input: LaunchInput): string | undefined => {
  // A continuation's opening names its request by a digest (docs/engine.md §5.2): refused before the
  // claim is prepared, as the opening built after it would be.
  const fingerprint: unknown = input.requestFingerprint
  if (input.continuation !== undefined && fingerprint !== undefined && !(typeof fingerprint === "string" && Digest.isDigest(fingerprint))) {
    return "requestFingerprint: a continuation's must be a digest (sha256: and 64 lowercase hex digits)"
  }
  // A successor's opening holds its claim, prepared and checked against the pause before it is written.
  if (input.successor !== undefined || input.continuation !== undefined) return undefined
  const opening = Codec.checkFact(openingFact(input), input.invocation)
  return Result.isFailure(opening) ? opening.failure.message : undefined
}

/**
 * How many events past its last seen commit a run that ended without a durable terminal reads back
 * for the terminal it may have after all: its own unseen commits, a step's at most.
 */
const LANDED_READ_LIMIT = 1_000

/** Why a continuation's source is refused at admission (docs/engine.md §5.2): an invalid id, or another session. */
const CONTINUATION_SESSION_MESSAGE = "source: a continuation continues a run of its own session"

const continuationSourceProblem = (input: LaunchInput): string | undefined => {
  const source = input.continuation?.source
  if (source === undefined) return undefined
  const problem = checkInvocation(source, "source")
  if (problem !== undefined) return problem
  const target: unknown = input.invocation
  const sessionId = typeof target === "object" && target !== null ? (target as { readonly sessionId?: unknown }).sessionId : undefined
  return source.sessionId === sessionId ? undefined : CONTINUATION_SESSION_MESSAGE
}

/**
 * Whether a provider of `kind` refuses a user message of `text`: the Anthropic API refuses a text
 * block with no visible character, so a run (or a steering message) with one would fail its next
 * request (a history that holds one from before is sent with `(an empty message)` in its place).
 */
const invisibleTo = (kind: string, text: string): boolean => kind === "anthropic" && text.trim() === ""

const INVISIBLE_TEXT_MESSAGE = "the Anthropic API refuses a message without a visible character"

/** Every check of `validateInput` but the opening's. */
const settingsProblem = (input: LaunchInput): string | undefined => {
  const maxSteps = input.maxSteps ?? Limits.DEFAULT_MAX_STEPS
  if (!Number.isSafeInteger(maxSteps) || maxSteps < 1 || maxSteps > Limits.MAX_STEPS) {
    return `maxSteps must be an integer in 1..${Limits.MAX_STEPS}`
  }
  const limit = input.mainOutputLimit
  if (limit !== undefined && (!Number.isSafeInteger(limit) || limit < 1 || limit > Limits.MAX_MAIN_OUTPUT_LIMIT)) {
    return `mainOutputLimit must be an integer in 1..${Limits.MAX_MAIN_OUTPUT_LIMIT}`
  }
  const problems = [
    checkInvocation(input.invocation, "invocation"),
    continuationSourceProblem(input),
    input.context === undefined ? undefined : checkContext(input.context, "context"),
    input.providerOptions === undefined ? undefined : checkProviderOptions(input.providerOptions, "providerOptions"),
  ]
  const first = [...problems, reservedNameProblem(input.tools ?? ToolCatalog.empty)].find((problem) => problem !== undefined)
  if (first !== undefined) return first
  // Anthropic refuses a request whose `max_tokens` is not above its thinking budget: every request
  // of the run (a summary's too) would be refused.
  const budget = PromptBuilder.thinkingBudgetOf(input.model.kind, input.providerOptions)
  const outputLimit = input.mainOutputLimit ?? Limits.DEFAULT_OUTPUT_LIMIT
  if (budget > 0 && budget >= outputLimit) {
    return `providerOptions.thinking.budget_tokens (${budget}) must be below the output limit (${outputLimit}) the requests are sent with: raise the output limit (maxOutputTokens) or lower the budget`
  }
  const text: unknown = input.message?.text
  if (typeof text === "string" && invisibleTo(input.model.kind, text)) return `message.text: ${INVISIBLE_TEXT_MESSAGE}`
  const binding = input.configuration.model
  if (binding !== undefined && binding.model !== input.model.model) {
    return `the configuration's model ${binding.model} differs from the provider's model ${input.model.model}`
  }
  return undefined
}

/**
 * `method`'s work over `input`, built only once `input` is known to be an object: anything else
 * (`undefined`, `null` through a cast) is refused `InvalidInput`, writing nothing, where reading its
 * fields would have thrown (while the Effect was built, for some methods) or died.
 */
const objectInput = <A>(
  method: string,
  input: unknown,
  work: () => Effect.Effect<A, EngineError.EngineError>,
  fields: Readonly<Record<string, "object" | "catalog">> = {},
): Effect.Effect<A, EngineError.EngineError> => {
  if (typeof input !== "object" || input === null) {
    return Effect.fail(EngineError.invalidInput(`${method}: the input must be an object, got ${input === null ? "null" : typeof input}`))
  }
  const problem = fieldsProblem(method, input, fields)
  return problem === undefined ? Effect.suspend(work) : Effect.fail(EngineError.invalidInput(problem))
}

const describeValue = (value: unknown): string => (value === null ? "null" : Array.isArray(value) ? "an array" : typeof value)

/**
 * The first of `fields` that `input` lacks or holds in another kind (a host without types, or a
 * cast): refused here, where reading into it would die. A `catalog` is a `ToolCatalog`; a plain list
 * of tools is named as what to wrap.
 */
const fieldsProblem = (method: string, input: object, fields: Readonly<Record<string, "object" | "catalog">>): string | undefined => {
  for (const [name, kind] of Object.entries(fields)) {
    let value: unknown
    try {
      value = Reflect.get(input, name)
    } catch (error) {
      return `${method}: reading ${name} threw: ${error instanceof Error ? String(error.message) : String(error)}`
    }
    const isObject = typeof value === "object" && value !== null
    if (kind === "object" && !isObject) return `${method}: ${name} must be an object, got ${describeValue(value)}`
    const isCatalog = isObject && typeof Reflect.get(value as object, "get") === "function" && typeof Reflect.get(value as object, "capture") === "function"
    if (kind === "catalog" && !isCatalog) {
      return `${method}: tools must be a ToolCatalog (ToolCatalog.from(tools)), got ${describeValue(value)}`
    }
  }
  return undefined
}

/** The fields each method reads into: a run's model, configuration and tools, its invocation. */
const RUN_FIELDS = { invocation: "object", model: "object", configuration: "object", tools: "catalog" } as const

/**
 * Whether the caller's `signal` has aborted; reading it may run a caller's getter, which may throw.
 * One that has not is listened to once and let go here: an `addEventListener` (or its removal) that
 * throws refuses the start, where the run's own listening would have died.
 */
const signalAborted = (signal: AbortSignal | undefined): Effect.Effect<boolean, EngineError.EngineError> =>
  signal === undefined
    ? Effect.succeed(false)
    : Effect.flatMap(
        Effect.try({
          try: () => signal.aborted === true,
          catch: (error) => EngineError.invalidInput(`signal: reading aborted threw: ${error instanceof Error ? error.message : String(error)}`),
        }),
        (aborted) =>
          aborted
            ? Effect.succeed(true)
            : Effect.try({
                try: () => {
                  AbortFanout.subscribe(signal, () => undefined)()
                  return false
                },
                catch: (error) =>
                  EngineError.invalidInput(`signal: adding or removing its abort listener threw: ${error instanceof Error ? error.message : String(error)}`),
              }),
      )

/** Waits until `signal` aborts; it stops listening when the wait ends or is interrupted. */
const onAbort = (signal: AbortSignal): Effect.Effect<void> =>
  Effect.callback<void>((resume) => {
    const unsubscribe = AbortFanout.subscribe(signal, () => resume(Effect.void))
    return Effect.sync(unsubscribe)
  })

/** No provider options, sealed. */
const NO_PROVIDER_OPTIONS: Identity.JsonObject = Canonical.seal({})

/**
 * A run's provider options sealed (`Canonical.seal`, docs/architecture.md §12): every request of
 * the run carries the same object, so the model's request check and body take it once. They were
 * checked as a plain JSON object by `validateInput`, so sealing cannot fail.
 */
const sealedOptions = (options: Identity.JsonObject | undefined): Identity.JsonObject =>
  options === undefined ? NO_PROVIDER_OPTIONS : Canonical.seal(options)

/** The frozen settings of a run from its input; its catalog gains `read_tool_result` over `log`. */
const runSettings = (input: LaunchInput, log: EventLog.EventLogShape): RunSettings => ({
  invocation: input.invocation,
  configuration: input.configuration,
  providerOptions: sealedOptions(input.providerOptions),
  ...(input.context === undefined ? {} : { context: input.context }),
  ...(input.mainOutputLimit === undefined ? {} : { mainOutputLimit: input.mainOutputLimit }),
  ...(input.requestFingerprint === undefined ? {} : { requestFingerprint: input.requestFingerprint }),
  ...(input.message === undefined ? {} : { message: input.message }),
  ...(input.successor === undefined ? {} : { successor: input.successor }),
  ...(input.continuation === undefined ? {} : { continuation: input.continuation }),
  tools: catalogOf(input.tools ?? ToolCatalog.empty, log, input.invocation.sessionId),
  maxSteps: input.maxSteps ?? Limits.DEFAULT_MAX_STEPS,
  allowPriorUnknown: input.allowPriorUnknown ?? false,
  // The model's own credentials always, whoever started the run (a successor, a continuation, the
  // Effect API without `secrets`), and the host's.
  secrets: [...(input.model.secrets ?? []), ...(input.secrets ?? [])],
})

/**
 * Every committed event of a run from its opening, live: ends after the terminal, or when the run
 * ended without one (its terminal could not be appended).
 */
const liveEvents = (feed: EventFeed.EventFeed): Stream.Stream<Event.StoredEvent> => {
  // Each run of the stream reads the feed from the run's first event; the feed never fails.
  const stream = Stream.orDie(Stream.fromAsyncIterable({ [Symbol.asyncIterator]: () => feed.events() }, (cause) => cause))
  // The facade reads the same feed directly, with no fiber per event.
  EventFeed.register(stream, feed)
  return stream
}

/**
 * A run's handoff request (docs/engine.md §5.10): a fresh intent reserved at its gate; a caller that
 * stops waiting drops a reservation not yet committed, and the same run goes on.
 */
const handoffRequest = (gate: Handoff.HandoffGate, hostEpoch: string, ids: Ids.IdsShape) =>
  Effect.gen(function* () {
    const intent: Lineage.HandoffIntent = {
      handoffId: yield* Ids.next,
      hostEpoch,
      rootRunId: gate.rootRunId,
      successorRunId: yield* Ids.next,
      successorInvocationId: yield* Ids.next,
      claimId: yield* Ids.next,
    }
    const done = yield* gate.reserve(intent)
    return yield* Effect.onInterrupt(Deferred.await(done), () => gate.drop)
  }).pipe(Effect.provideService(Ids.Ids, ids))

/**
 * An admitted run's handle, built here from the parts it serves and nothing else: a handle a host
 * keeps must not pin the run's state (its live context, its opening, the prompt history those key),
 * which a closure made beside the run would (docs/engine.md §5.4 "Kept context").
 */
const runningHandle = (parts: {
  readonly invocation: Identity.Invocation
  readonly toolNames: ReadonlyArray<string>
  readonly feed: EventFeed.EventFeed
  readonly steering: Ref.Ref<ReadonlyArray<Input.DeliveredMessage>>
  readonly gate: Handoff.HandoffGate
  readonly steeringWindow: { readonly current: Steering.Window }
  readonly cancel: Effect.Effect<void>
  readonly handoff: Effect.Effect<Lineage.HandoffPause | undefined, EngineError.EngineError>
  readonly result: Deferred.Deferred<RunResult, EngineError.EngineError>
  readonly ids: Ids.IdsShape
  readonly providerKind: string
}): RunningInvocation => {
  const { invocation, steering, gate, steeringWindow, ids } = parts
  return {
    invocation,
    toolNames: parts.toolNames,
    events: liveEvents(parts.feed),
    steer: (text: string) =>
      Effect.provideService(steer(invocation, steering, gate, steeringWindow, parts.providerKind, text), Ids.Ids, ids),
    cancel: parts.cancel,
    handoff: parts.handoff,
    wait: Deferred.await(parts.result),
  }
}

/**
 * Queues a steering message after the whole validation of the fact it becomes, so it can always be
 * committed; what the next request carries is bounded (`MAX_QUEUED_STEERING` messages and
 * `MAX_QUEUED_STEERING_BYTES` serialized, the queue with what `window` says was delivered since the
 * last request, then `Busy`).
 */
const steer = (
  invocation: Identity.Invocation,
  steering: Ref.Ref<ReadonlyArray<Input.DeliveredMessage>>,
  gate: Handoff.HandoffGate,
  window: { readonly current: Steering.Window },
  providerKind: string,
  text: string,
) =>
  Effect.gen(function* () {
    if (typeof text !== "string") return yield* Effect.fail(EngineError.invalidInput("steering message: the text must be a string"))
    if (invisibleTo(providerKind, text)) return yield* Effect.fail(EngineError.invalidInput(`steering message: ${INVISIBLE_TEXT_MESSAGE}`))
    const content = { text }
    const messageId = yield* Ids.next
    const delivered = { messageId, content, submittedContentDigest: Digest.messageContent(content) }
    const checked = Codec.checkFact({ kind: "message_steered", message: delivered }, invocation)
    if (Result.isFailure(checked)) {
      return yield* Effect.fail(EngineError.invalidInput(`steering message: ${checked.failure.message}`))
    }
    const bytes = Steering.bytesOf(delivered)
    const queuedBytes = (queue: Queue) => queue.reduce((sum, message) => sum + Steering.bytesOf(message), 0)
    // Checked in the same step as the queue: a run whose pause is committing takes no more messages.
    type Queue = ReadonlyArray<Input.DeliveredMessage>
    const queued = yield* Ref.modify(steering, (queued: Queue): readonly ["queued" | "full" | "full_bytes" | "ended", Queue] =>
      !gate.acceptsSteering
        ? ["ended", queued]
        : window.current.count + queued.length >= MAX_QUEUED_STEERING
          ? ["full", queued]
          : window.current.bytes + queuedBytes(queued) + bytes > MAX_QUEUED_STEERING_BYTES
            ? ["full_bytes", queued]
            : ["queued", [...queued, delivered]],
    )
    if (queued === "ended") {
      const handingOff = gate.current === "committed" || gate.current === "sealed"
      return yield* Effect.fail(
        EngineError.busy(handingOff ? EngineError.STEERING_HANDING_OFF_MESSAGE : (gate.steeringEndedBecause ?? EngineError.STEERING_ENDED_MESSAGE)),
      )
    }
    if (queued === "full") {
      return yield* Effect.fail(
        EngineError.busy(EngineError.STEERING_FULL_MESSAGE),
      )
    }
    if (queued === "full_bytes") {
      return yield* Effect.fail(
        EngineError.busy(EngineError.STEERING_FULL_BYTES_MESSAGE),
      )
    }
  })

/** Builds the engine over the `EventLog` in context; runs live in the surrounding scope. */
/**
 * The handoff a host's shutdown asks for: the one a caller requested already, when one is pending,
 * else its own. A joined request that ends with nothing while the run goes on (its caller dropped
 * it, or the preflight released it) is followed by the next: one requested meanwhile, or its own.
 */
const joinHandoff = (
  gate: Handoff.HandoffGate,
  handoff: Effect.Effect<Lineage.HandoffPause | undefined, EngineError.EngineError>,
): Effect.Effect<Lineage.HandoffPause | undefined, EngineError.EngineError> =>
  Effect.suspend(() => {
    const pending = gate.pendingResult
    if (pending === undefined) return handoff
    return Effect.flatMap(Deferred.await(pending), (pause) =>
      pause === undefined && (gate.pendingResult !== undefined || gate.current === "running") ? joinHandoff(gate, handoff) : Effect.succeed(pause),
    )
  })

export const make = (given: EngineOptionsInput = {}) =>
  Effect.gen(function* () {
    // Read once (a getter or a proxy trap of the host's that throws is the same refusal as the
    // facade's, never a defect), then checked: the facade checks them before it opens the log.
    const read = Result.try({
      try: (): EngineOptionsInput => (typeof given === "object" && given !== null && !Array.isArray(given) ? { ...given } : given),
      catch: (error) => EngineError.invalidInput(`the engine's options could not be read: ${describeThrown(error)}`),
    })
    if (Result.isFailure(read)) return yield* Effect.fail(read.failure)
    const options = read.success
    const problem = optionsProblem(options)
    if (problem !== undefined) return yield* Effect.fail(EngineError.invalidInput(problem))
    const log = yield* EventLog.EventLog
    const ids = yield* Ids.Ids
    // Runs live in the engine's own scope, so closing the surrounding scope first cancels and drains
    // them (the finalizer below) instead of interrupting them mid-step.
    const runScope = yield* Scope.make()
    // Set as the engine closes: no run is admitted after it.
    let closed = false
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
            message: EngineError.SEALED_LATER_MESSAGE,
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
    /** A refusal naming an unsealed run where the session's unsealed run may be one whose terminal this engine owes. */
    const owesTerminal = (error: EngineError.EngineError, sessionId: string) =>
      error.reason._tag === "ReconciliationRequired" &&
      error.reason.message === EngineError.UNSEALED_RUN_MESSAGE &&
      [...unwritten.values()].some((invocation) => invocation.sessionId === sessionId)
    const contexts = new SessionContexts(settingsOf.keptContexts, settingsOf.keptContextBytes)
    const live = new Map<
      string,
      {
        readonly invocation: Identity.Invocation
        readonly cancel: Effect.Effect<void>
        readonly handoff: Effect.Effect<Lineage.HandoffPause | undefined, EngineError.EngineError>
        /** The handoff a host's shutdown asks for: the one already requested, when a caller asked first. */
        readonly joinedHandoff: Effect.Effect<Lineage.HandoffPause | undefined, EngineError.EngineError>
        readonly fiber: Fiber.Fiber<unknown, unknown>
        readonly result: Deferred.Deferred<RunResult, EngineError.EngineError>
        /** Whether it may pause at all: the seal of a pause needs the run's workspace identity. */
        readonly pausable: boolean
      }
    >()
    // The host generation that pauses runs (informational in each intent).
    const hostEpoch = yield* Effect.provideService(Ids.next, Ids.Ids, ids)

    /** `runSettings` as a typed failure: a value past the checks that throws (through a cast) is `Internal`. */
    const buildSettings = (input: LaunchInput): Effect.Effect<RunSettings, EngineError.EngineError> =>
      Effect.try({
        try: () => runSettings(input, log),
        catch: (error) => EngineError.internal(`the run's settings could not be built: ${error instanceof Error ? error.message : String(error)}`),
      })

    /** A start's handle, returned. */
    const handOver = (running: RunningInvocation) => Effect.succeed(running)

    /** A run's terminal: a caller interrupted while it waits cancels the run (docs/engine.md §5.14). */
    const heldToEnd = (running: RunningInvocation, restore: <B, E, R>(effect: Effect.Effect<B, E, R>) => Effect.Effect<B, E, R>) =>
      Effect.onInterrupt(restore(running.wait), () => HeldAlone.cancelAndWait(running.cancel, running.wait))

    /**
     * Admits a run and gives its handle to `then` inside the same uninterruptible region that
     * admitted it: `handOver` returns it, `heldToEnd` waits for its terminal, an interruption of that
     * wait cancelling the run. Leaving the region delivers an interruption that came meanwhile and
     * drops what it returns: `run` and `compact` leave it only once their run has ended, so none of
     * theirs is dropped; a `start` interrupted in the region's last few operations (only a scheduler
     * that yields within them reaches those) drops its handle, as any Effect that returns one can.
     */
    const launch = <A>(
      input: LaunchInput,
      body: typeof runMessage,
      then: (running: RunningInvocation, restore: <B, E, R>(effect: Effect.Effect<B, E, R>) => Effect.Effect<B, E, R>) => Effect.Effect<A, EngineError.EngineError>,
    ): Effect.Effect<A, EngineError.EngineError> =>
      Effect.gen(function* () {
        const problem = settingsProblem(input)
        if (problem !== undefined) return yield* Effect.fail(EngineError.invalidInput(problem))
        // A message run's opening is built and checked here, once: the runner appends this write.
        let openingWrite: EventWrite.EventWrite | undefined
        if (opensAtAdmission(input)) {
          const { id, recordedAt } = yield* Effect.provideService(stamp, Ids.Ids, ids)
          const built = EventWrite.plain({ id, recordedAt, invocation: input.invocation, fact: openingFact(input) })
          if (Result.isFailure(built)) return yield* Effect.fail(EngineError.invalidInput(built.failure.message))
          openingWrite = built.success
        } else {
          const openingIssue = openingProblem(input)
          if (openingIssue !== undefined) return yield* Effect.fail(EngineError.invalidInput(openingIssue))
        }
        // The run's frozen settings are built before the session is taken: nothing after `active.add`
        // can fail before the worker owns the release, so no refusal leaves the session busy.
        const settings = yield* buildSettings(input)
        const sessionId = input.invocation.sessionId
        if (active.has(sessionId)) return yield* Effect.fail(EngineError.busy(EngineError.SESSION_ACTIVE_MESSAGE))
        yield* sealUnwritten(sessionId)
        // From taking the session to handing it to the worker (which releases it however it ends), an
        // interruption of the caller (a timeout, a race) waits: landing in between, it would leave the
        // session taken for the engine's lifetime. Only the wait for the admission is interruptible,
        // and an interruption there cancels the run, whose worker still releases the session.
        return yield* Effect.uninterruptibleMask((restore) =>
          Effect.flatMap(admit(input, body, settings, openingWrite, restore), (running) => then(running, restore)),
        )
      })

    /** `launch` from taking the session on, uninterruptible but for `restore`'s part. */
    const admit = (
      input: LaunchInput,
      body: typeof runMessage,
      settings: RunSettings,
      openingWrite: EventWrite.EventWrite | undefined,
      restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>,
    ): Effect.Effect<RunningInvocation, EngineError.EngineError> =>
      Effect.gen(function* () {
        const sessionId = input.invocation.sessionId
        // A closed engine's run scope would never start the worker, and nothing would admit the run.
        if (closed) return yield* Effect.fail(EngineError.internal(EngineError.ENGINE_CLOSED_MESSAGE))
        if (active.has(sessionId)) return yield* Effect.fail(EngineError.busy(EngineError.SESSION_ACTIVE_MESSAGE))
        active.add(sessionId)
        // The caller's signal is read once: a getter that throws refuses the start, the session given back.
        const aborted = yield* Effect.tapError(signalAborted(input.signal), () => Effect.sync(() => active.delete(sessionId)))
        const cancellation = yield* Cancellation.make
        if (aborted) yield* cancellation.cancel
        const steering = yield* Ref.make<ReadonlyArray<Input.DeliveredMessage>>([])
        // The logical Run a handoff continues: a successor's root is its predecessor's.
        const gate = new Handoff.HandoffGate(input.successor?.pause.intent.rootRunId ?? input.invocation.runId)
        // A claim's first step delivers no steering (its request is the replay): with no step after
        // it, steering is refused from the start, as in any run's last step.
        if ((input.successor !== undefined || input.continuation !== undefined) && settings.maxSteps === 1) gate.endSteering(LAST_STEP_STEERING)
        // A run that can never pause (a compaction, a run without a workspace) answers a handoff at
        // once with none, rather than at its next step boundary, which a shutdown would wait for.
        const pausable = body !== runCompact && settings.configuration.workspaceIdentity !== undefined
        const handoff = pausable ? handoffRequest(gate, hostEpoch, ids) : Effect.succeed(undefined)
        const steeringWindow = { current: Steering.emptyWindow }
        const feed = new EventFeed.EventFeed()
        const committed = feed.committed
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
          uncertain: undefined,
          carry: [],
          steeringWindow,
          commitLock: Semaphore.makeUnsafe(1),
          handoff: gate,
          claim: undefined,
          opening: undefined,
          pendingOpening: undefined,
          contexts,
          settings,
          openingWrite,
          onCommitted: (events) => Effect.sync(() => feed.add(events)),
        }
        // The caller's signal cancels the run while it runs; its listener goes with the run.
        const watched =
          input.signal === undefined || aborted
            ? body(run, Deferred.succeed(admitted, undefined))
            : Effect.raceFirst(
                body(run, Deferred.succeed(admitted, undefined)),
                Effect.andThen(onAbort(input.signal), Effect.andThen(cancellation.cancel, Effect.never)),
              )
        // The session is released before the result is, so a caller that awaits `wait` can start again.
        const release = Effect.sync(() => {
          active.delete(sessionId)
          live.delete(input.invocation.invocationId)
          feed.end()
        })
        const failed = (error: EngineError.EngineError) =>
          Effect.suspend(() => {
            // Ended without a durable terminal: the engine seals it before its next start on the session.
            if (!(committed.length > 0 || run.openingUncertain)) return Effect.andThen(release, Deferred.fail(result, error))
            unwritten.set(input.invocation.invocationId, input.invocation)
            // And tries once at once: a dropped connection fails one commit, not the next one, and a host
            // that runs once and exits (`maka run`) would leave the session unsealed until a recover.
            // Bounded: a store that does not answer is tried again at the next start, as before.
            const retry = Effect.ignore(Effect.timeout(sealUnwritten(input.invocation.sessionId), UNWRITTEN_RETRY_MS))
            // After a commit whose outcome was unknown, the run's terminal may be durable after all
            // (that commit had landed, or the retry wrote one): then the run ended with it, and its
            // caller is told so. A refusal (nothing landed, another engine's seal) or a defect is
            // told as it is.
            const byTheLog = error.reason._tag === "Commit" && error.reason.message.startsWith(EventLogError.OUTCOME_UNKNOWN_MESSAGE)
            return Effect.andThen(
              retry,
              Effect.flatMap(byTheLog ? landedTerminal(committed) : Effect.succeed(undefined), (terminal) =>
                Effect.andThen(
                  release,
                  terminal === undefined
                    ? Deferred.fail(result, error)
                    : Deferred.succeed(result, { invocation: input.invocation, outcome: terminal }),
                ),
              ),
            )
          })
        /**
         * This run's events the log holds past those it saw committed, added to its feed, and the
         * terminal among them; nothing when they cannot be read (within the retry's bound) or the
         * run saw no commit of its own (its opening's place in the log is then unknown).
         */
        const landedTerminal = (seen: ReadonlyArray<Event.StoredEvent>) =>
          Effect.suspend(() => {
            const last = seen.at(-1)
            if (last === undefined) return Effect.succeed(undefined)
            return log.events(input.invocation.sessionId, last.sequence, LANDED_READ_LIMIT).pipe(
              Effect.timeout(UNWRITTEN_RETRY_MS),
              Effect.map((events) => {
                const own = events.filter((stored) => stored.event.invocation.invocationId === input.invocation.invocationId)
                const ended = own.find((stored) => stored.event.fact.kind === "invocation_ended")?.event.fact
                // A pause whose commit was uncertain is told as none (docs/engine.md §5.10): the
                // handoff's caller learns that none was sealed, and the reserved session says the rest.
                if (ended?.kind !== "invocation_ended" || ended.outcome.kind === "handoff_paused") return undefined
                feed.add(own)
                return ended.outcome
              }),
              Effect.orElseSucceed(() => undefined),
            )
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
        // Started at once (no turn of the event loop before the preflight). A worker that already
        // ended (a run cancelled before it began) released its session: it is not live.
        const fiber = yield* Effect.forkIn(worker, runScope, { startImmediately: true })
        if (fiber.pollUnsafe() === undefined) {
          live.set(input.invocation.invocationId, {
            invocation: input.invocation,
            cancel: cancellation.cancel,
            handoff,
            joinedHandoff: joinHandoff(gate, handoff),
            fiber,
            result,
            // A compaction has no handoff gate: it never pauses, and a close with handoff cancels it at once.
            pausable,
          })
        }
        // A caller that stops waiting drops the handle it would get: the run is cancelled, and the
        // interruption ends once the run has, so the session is free again by then (docs/engine.md §5.14).
        yield* Effect.onInterrupt(restore(Deferred.await(admitted)), () => HeldAlone.cancelAndWait(cancellation.cancel, Deferred.await(result)))
        if (committed.length === 0) {
          // The worker ended before the opening was durable: its error, nothing written.
          const error = yield* Effect.match(Deferred.await(result), {
            onFailure: (error) => error,
            onSuccess: () => EngineError.internal("worker omitted durable admission"),
          })
          return yield* Effect.fail(owesTerminal(error, sessionId) ? EngineError.reconciliation(EngineError.UNWRITTEN_TERMINAL_MESSAGE) : error)
        }
        return runningHandle({
          invocation: input.invocation,
          toolNames: settings.tools.names,
          feed,
          steering,
          gate,
          steeringWindow,
          cancel: cancellation.cancel,
          handoff,
          result,
          ids,
          providerKind: input.model.kind,
        })
      })

    const start = (input: StartInput) => objectInput("start", input, () => launch(input, runMessage, handOver), { ...RUN_FIELDS, message: "object" })

    const compact = (input: CompactInput): Effect.Effect<RunResult, EngineError.EngineError> =>
      objectInput("compact", input, () => compactObject(input), { invocation: "object", model: "object", configuration: "object" })

    const compactObject = (input: CompactInput): Effect.Effect<RunResult, EngineError.EngineError> =>
      Effect.flatMap(input.requestFingerprint === undefined ? Effect.provideService(Ids.Ids, ids)(Ids.next) : Effect.succeed(input.requestFingerprint), (requestFingerprint) =>
        launch({ ...input, requestFingerprint, maxSteps: 1 }, runCompact, heldToEnd),
      )

    const resume = (input: ResumeInput): Effect.Effect<RunningInvocation, EngineError.EngineError> =>
      objectInput("resume", input, () => resumeObject(input), { paused: "object", pause: "object", model: "object", tools: "catalog" })

    const resumeObject = (input: ResumeInput): Effect.Effect<RunningInvocation, EngineError.EngineError> =>
      Effect.gen(function* () {
        const { opening } = yield* Handoff.readPaused(log, input.paused)
        const execution = input.pause.execution
        return yield* launch(
          {
            invocation: Lineage.successorOf(input.pause.intent, input.paused),
            model: input.model,
            configuration: input.configuration ?? opening.configuration,
            tools: input.tools,
            maxSteps: input.pause.remainingSteps,
            providerOptions: input.providerOptions ?? execution.providerOptions,
            ...(input.context !== undefined
              ? { context: input.context }
              : execution.context === undefined
                ? {}
                : { context: execution.context }),
            ...(input.mainOutputLimit !== undefined
              ? { mainOutputLimit: input.mainOutputLimit }
              : execution.mainOutputLimit === undefined
                ? {}
                : { mainOutputLimit: execution.mainOutputLimit }),
            ...(input.secrets === undefined ? {} : { secrets: input.secrets }),
            ...(input.signal === undefined ? {} : { signal: input.signal }),
            successor: { paused: input.paused, pause: input.pause },
          },
          runMessage,
          handOver,
        )
      })

    const continueRun = (input: ContinueInput) =>
      objectInput("continueRun", input, () => launch({ ...input, continuation: { source: input.source } }, runMessage, handOver), { ...RUN_FIELDS, source: "object" })

    const checkContinuation = (input: ContinueInput) =>
      objectInput("checkContinuation", input, () => checkContinuationObject(input), { ...RUN_FIELDS, source: "object" })

    const checkContinuationObject = (input: ContinueInput) =>
      Effect.gen(function* () {
        const launchInput: LaunchInput = { ...input, continuation: { source: input.source } }
        const problem = validateInput(launchInput)
        if (problem !== undefined) return yield* Effect.fail(EngineError.invalidInput(problem))
        // The check only reads: the log, the model's route and the frozen settings, never a run's
        // commit path, cancellation or live context.
        const run = {
          log,
          model: input.model,
          options: settingsOf,
          settings: yield* buildSettings(launchInput),
        } as unknown as Run
        const sessionId = input.invocation.sessionId
        // The unsealed run the check met may be one of this engine's, whose terminal it owes: the
        // refusal says so rather than naming another host (continueRun writes that terminal first).
        return yield* Effect.provideService(checkContinuationOf(run), Ids.Ids, ids).pipe(
          Effect.mapError((error) =>
            owesTerminal(error, sessionId) ? EngineError.reconciliation(EngineError.UNWRITTEN_TERMINAL_CHECK_MESSAGE) : error,
          ),
        )
      })

    /** Every sealed pause of the log, paged from 0 (docs/log-format.md §3.10). */
    const allPending = Effect.gen(function* () {
      const found: Array<EventLog.PendingHandoff> = []
      for (let after = 0; ; ) {
        const page = yield* Effect.mapError(log.pendingHandoffs(after), EngineError.fromStore)
        found.push(...page)
        if (page.length < MAX_PENDING_PAGE) return found
        after = page[page.length - 1]!.sequence
      }
    })

    const resolverFailed = (resolver: "provider" | "tools", defect: unknown) => {
      let said: string
      try {
        // `String`, not a template: a Symbol (as a message too) converts, where a template throws.
        said = defect instanceof Error ? String(defect.message) : String(defect)
      } catch {
        said = "a value that could not be described"
      }
      return EngineError.invalidInput(`the ${resolver} resolver threw: ${said}`)
    }

    const resumePending = (resolvers: ResumeResolvers) => objectInput("resumePending", resolvers, () => resumeAllPending(resolvers))

    const resumeAllPending = (resolvers: ResumeResolvers) =>
      Effect.gen(function* () {
        const reports: Array<ResumeReport> = []
        for (const pending of yield* allPending) {
          const successor = Lineage.successorOf(pending.pause.intent, pending.invocation)
          const skip = (skipped: string) => reports.push({ sessionId: pending.sessionId, invocation: successor, skipped })
          const paused = yield* Effect.result(Handoff.readPaused(log, pending.invocation))
          if (Result.isFailure(paused)) {
            skip(paused.failure.message)
            continue
          }
          const execution = pending.pause.execution
          const pausedRun: PausedRun = {
            sessionId: pending.sessionId,
            invocation: pending.invocation,
            configuration: paused.success.opening.configuration,
          }
          // A resolver is the host's own code: one that throws skips its pause, as one that fails, and
          // never costs the runs this call already started their handles.
          const resolved = yield* Effect.result(
            Effect.suspend(() =>
              resolvers.provider(execution.replay.routeIdentity, paused.success.opening.configuration.model, pausedRun),
            ).pipe(Effect.catchDefect((defect) => Effect.fail(resolverFailed("provider", defect)))),
          )
          if (Result.isFailure(resolved)) {
            skip(resolved.failure.message)
            continue
          }
          const model = resolved.success
          if (model === undefined) {
            skip("no provider for the pause's route")
            continue
          }
          if (model.routeIdentity !== execution.replay.routeIdentity) {
            skip("handoff execution settings changed: the provider's route differs from the pause's")
            continue
          }
          const catalog = Result.try({
            try: () => resolvers.tools(execution.tools.names, execution.tools.catalogDigest, pausedRun),
            // The facade's own refusal of what a resolver returned keeps its words.
            catch: (defect) => (defect instanceof EngineError.EngineError ? defect : resolverFailed("tools", defect)),
          })
          if (Result.isFailure(catalog)) {
            skip(catalog.failure.message)
            continue
          }
          const tools = catalog.success
          if (tools === undefined) {
            skip("no tool catalog for the pause")
            continue
          }
          // As the successor will run it: with the engine's own `read_tool_result` when it has tools
          // (a host tool of that name is the resume's own refusal, below).
          const reserved = reservedNameProblem(tools)
          if (reserved === undefined) {
            const offered = catalogOf(tools, log, pending.sessionId)
            if (offered.digest !== execution.tools.catalogDigest) {
              skip(`handoff execution settings changed: ${catalogChange(execution.tools.names, offered.names)}`)
              continue
            }
          }
          const started = yield* Effect.result(resume({ paused: pending.invocation, pause: pending.pause, model, tools }))
          if (Result.isFailure(started)) skip(started.failure.message)
          else reports.push({ sessionId: pending.sessionId, invocation: successor, started: started.success })
        }
        return reports
      })

    /** Whether the session holds a `handoff_paused` terminal, pending or taken: its events, paged, up to the first. */
    const hasPaused = (sessionId: string): Effect.Effect<boolean, EngineError.EngineError> =>
      Effect.gen(function* () {
        for (let after = 0; ; ) {
          const page = yield* Effect.mapError(log.events(sessionId, after, PAUSE_SCAN_PAGE), EngineError.fromStore)
          const paused = page.some(
            (stored) => stored.event.fact.kind === "invocation_ended" && stored.event.fact.outcome.kind === "handoff_paused",
          )
          if (paused) return true
          if (page.length < PAUSE_SCAN_PAGE) return false
          after = page[page.length - 1]!.sequence
        }
      })

    const abandonHandoff = (sessionId: string) =>
      Effect.gen(function* () {
        // A closed engine writes nothing, as its `start` admits nothing.
        if (closed) return yield* Effect.fail(EngineError.internal(EngineError.ENGINE_CLOSED_MESSAGE))
        // As the facade says it: an id that is no string names no session, paused or not.
        if (typeof sessionId !== "string") return yield* Effect.fail(EngineError.invalidInput("sessionId must be a string"))
        const pending = (yield* allPending).find((item) => item.sessionId === sessionId)
        if (pending === undefined) {
          // A pause another caller took first (a successor, live or ended, or another abandon) is
          // `Busy`, as when the take races this one's append; a session that never paused is the
          // caller's mistake.
          return yield* Effect.fail(
            (yield* hasPaused(sessionId))
              ? EngineError.busy(EngineError.HANDOFF_TAKEN_MESSAGE)
              : EngineError.invalidInput(`session ${sessionId} holds no sealed handoff`),
          )
        }
        if (active.has(sessionId)) return yield* Effect.fail(EngineError.busy(EngineError.SESSION_ACTIVE_MESSAGE))
        const { prefix, opening } = yield* Handoff.readPaused(log, pending.invocation)
        const base = yield* Handoff.inheritedBase(log, pending.invocation, opening)
        const claim = Handoff.pauseClaim(prefix, base, pending.pause)
        const successor = Lineage.successorOf(pending.pause.intent, pending.invocation)
        const writes = yield* Effect.forEach(
          [
            { kind: "invocation_opened", input: { kind: "handoff", claim, pause: pending.pause }, configuration: opening.configuration },
            { kind: "invocation_ended", outcome: { kind: "cancelled", source: "handoff_abandoned" } },
          ] as const,
          (fact) =>
            Effect.gen(function* () {
              const built = EventWrite.plain({ id: yield* Ids.next, recordedAt: yield* Clock.currentTimeMillis, invocation: successor, fact })
              return Result.isSuccess(built) ? built.success : yield* Effect.fail(EngineError.internal(built.failure.message))
            }),
        ).pipe(Effect.provideService(Ids.Ids, ids))
        yield* log.appendBatch(writes).pipe(
          Effect.catch((error) =>
            !error.isRejected
              ? Effect.fail(EngineError.commit(error.message))
              : // Refused: another abandon or a successor took the pause after it was read (on a shared log).
                Effect.flatMap(Effect.orElseSucceed(log.hasPendingHandoff(sessionId), () => true), (pending) =>
                  Effect.fail(pending ? EngineError.reconciliation(error.message) : EngineError.busy(EngineError.HANDOFF_TAKEN_MESSAGE)),
                ),
          ),
        )
        return successor
      })

    const handOffAll = Effect.gen(function* () {
      const runs = [...live.values()]
      return yield* Effect.forEach(
        runs,
        (item) =>
          Effect.gen(function* () {
            // A run that can never pause is cancelled at once: waiting for its step boundary would
            // let it start new effects after the host began to shut down. One that has not reached
            // a boundary within `handoffWaitMs` (a tool or a model stream that does not end) is
            // cancelled then: a shutdown is bounded (docs/engine.md §5.10). A handoff a caller asked
            // for already is the one waited for: the run pauses once, never cancelled for the race.
            const pause = item.pausable
              ? yield* item.joinedHandoff.pipe(
                  Effect.timeoutOption(settingsOf.handoffWaitMs),
                  Effect.map(Option.getOrUndefined),
                  Effect.orElseSucceed(() => undefined),
                )
              : undefined
            if (pause !== undefined) {
              yield* Fiber.await(item.fiber)
              return { invocation: item.invocation, outcome: "paused", pause } satisfies ClosedRun
            }
            yield* item.cancel
            yield* Fiber.await(item.fiber)
            // The run may have reached its own terminal before the cancellation took effect: that
            // terminal is what the log holds, and what the host is told.
            const ended = yield* Effect.result(Deferred.await(item.result))
            return closedRunOf(item.invocation, Result.isSuccess(ended) ? ended.success.outcome : undefined)
          }),
        { concurrency: "unbounded" },
      )
    })

    const close = Effect.gen(function* () {
      closed = true
      const runs = [...live.values()]
      for (const item of runs) yield* item.cancel
      for (const item of runs) yield* Fiber.await(item.fiber)
      yield* Scope.close(runScope, Exit.void)
      // A closed engine keeps no session's context: a host's old `Run` handles pin none of them.
      contexts.clear()
    })
    yield* Effect.addFinalizer(() => close)

    return {
      log,
      start,
      run: (input: StartInput) => objectInput("start", input, () => launch(input, runMessage, heldToEnd), { ...RUN_FIELDS, message: "object" }),
      compact,
      continueRun,
      checkContinuation,
      resume,
      resumePending,
      abandonHandoff,
      handOffAll,
      liveInvocations: () => [...live.values()].map((item) => item.invocation),
      recover: Effect.suspend(() =>
        closed
          ? Effect.fail(EngineError.internal(EngineError.ENGINE_CLOSED_MESSAGE))
          : Effect.provideService(Recovery.recover(log, (invocation) => active.has(invocation.sessionId)), Ids.Ids, ids),
      ),
      close,
    } satisfies EngineShape
  })

/** The events a look for a session's pause reads at a time. */
const PAUSE_SCAN_PAGE = 1_000

/** What the recovery `layer` ran when it opened the log sealed, by engine. */
const openRecoveries = new WeakMap<EngineShape, Recovery.Report>()

/**
 * The report of the recovery `layer` ran as it opened a SQLite log (what a crashed host had left
 * open, now sealed), or `undefined` for an engine that ran none (PostgreSQL, or one built by `make`).
 */
export const recoveredOnOpen = (engine: EngineShape): Recovery.Report | undefined => openRecoveries.get(engine)

/** The engine over the `EventLog` and `Ids` in context; on SQLite it recovers when it opens the log. */
export const layer = (options: EngineOptionsInput = {}) =>
  Layer.effect(
    Engine,
    Effect.gen(function* () {
      const engine = yield* make(options)
      if (engine.log.dialect === "sqlite") {
        // What it could not seal is in the report (`recoveredOnOpen`); a library prints nothing.
        openRecoveries.set(engine, yield* engine.recover)
      }
      return engine
    }),
  )
