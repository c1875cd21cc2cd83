/**
 * The dispatch/settle journal over `EventSink` (docs/tools.md §2.12, docs/engine.md §5.7): preparation decodes a
 * call at the boundary or rejects it; `reject` commits `tool_rejected`; `invoke` commits
 * `tool_dispatched`, runs the effect, and commits `tool_settled`, leaving an unknown outcome unknown;
 * `runStep` does this for one step's calls in order, with exclusivity and cancellation.
 */
import { Canonical, EventSink, EventWrite, Prompts, ToolCall, Validation, type Event, type Identity } from "@maka/facts"
import { Clock, Effect, Exit, Fiber, type Redacted, Result } from "effect"
import * as Cancellation from "./Cancellation.ts"
import { defaults } from "./Defaults.ts"
import { Ids } from "./Ids.ts"
import { execute, type Execution, unrecordableOutputMessage } from "./internal/execution.ts"
import { scrub, scrubOutput } from "./internal/secrets.ts"
import type { Runner, Semantics, Tool } from "./Tool.ts"
import { admit, type CapturedCatalog } from "./ToolCatalog.ts"
import { commitFailed, invalidWrite, type ToolError } from "./ToolError.ts"

// ---------------------------------------------------------------------------------------------
// Calls

/** One call as the journal records it: its operation, identity, tool name and input as the model sent it. */
export interface CallRequest {
  readonly operationId: string
  readonly call: ToolCall.ToolCallIdentity
  readonly name: string
  readonly input: Identity.Json
}

/** A model-visible call of step `stepId`: operation `"{stepId}:{id}"`, provider origin. */
export const providerCall = (
  stepId: string,
  part: { readonly id: string; readonly name: string; readonly input: Identity.Json },
): CallRequest => ({
  operationId: ToolCall.providerOperationId(stepId, part.id),
  call: { toolCallId: part.id, origin: { kind: "provider", stepId } },
  name: part.name,
  input: part.input,
})

/** A journaled call a host makes outside any model step. */
export const standaloneCall = (options: {
  readonly operationId: string
  readonly toolCallId: string
  readonly name: string
  readonly input: Identity.Json
}): CallRequest => ({
  operationId: options.operationId,
  call: { toolCallId: options.toolCallId, origin: { kind: "standalone" } },
  name: options.name,
  input: options.input,
})

// ---------------------------------------------------------------------------------------------
// Results

/** A call admitted by preparation: decoded, with its one-shot effect not yet started. */
export interface Prepared {
  readonly _tag: "Prepared"
  readonly request: CallRequest
  readonly tool: Tool
  readonly runner: Runner
}

/** A call preparation refused; nothing was committed yet. */
export interface Refused {
  readonly _tag: "Refused"
  readonly request: CallRequest
  readonly reason: ToolCall.ToolRejection
}

export type Preparation = Prepared | Refused

/** `tool_rejected` is durable; `text` is what the model reads. */
export interface Rejected {
  readonly _tag: "Rejected"
  readonly request: CallRequest
  readonly reason: ToolCall.ToolRejection
  readonly text: string
  readonly sequence: number
}

/** `tool_settled` is durable with `outcome`. */
export interface Settled {
  readonly _tag: "Settled"
  readonly request: CallRequest
  readonly semantics: Semantics
  readonly outcome: ToolCall.ToolOutcome
  readonly sequence: number
}

/**
 * `tool_dispatched` is durable and no settlement is: the tool failed with `ToolOutcomeUnknown`
 * (`outcome_unknown`), or the settlement could not be built or committed (`settle_commit`).
 */
export interface OutcomeUnknown {
  readonly _tag: "OutcomeUnknown"
  readonly request: CallRequest
  readonly cause: "outcome_unknown" | "settle_commit"
  readonly message: string
}

export type Invoked = Settled | OutcomeUnknown
export type CallResult = Rejected | Invoked

// ---------------------------------------------------------------------------------------------
// Writes

/** What the journal needs: the sink it commits to and the ids of the facts it writes. */
export type Requirements = EventSink.EventSink | Ids

const stamp = Effect.flatMap(Ids.use((ids) => ids.next), (id) => Effect.map(Clock.currentTimeMillis, (recordedAt) => ({ id, recordedAt })))

const plainWrite = (
  invocation: Identity.Invocation,
  fact: Event.RuntimeEvent["fact"] & { readonly kind: "tool_dispatched" | "tool_rejected" | "tool_settled" },
): Effect.Effect<EventWrite.EventWrite, ToolError, Ids> =>
  Effect.flatMap(stamp, ({ id, recordedAt }) => {
    const built = EventWrite.plain({ id, recordedAt, invocation, fact })
    return Result.isSuccess(built) ? Effect.succeed(built.success) : Effect.fail(invalidWrite(fact.kind, built.failure))
  })

const commit = (write: EventWrite.EventWrite) => EventSink.EventSink.use((sink) => sink.commit(write))

// ---------------------------------------------------------------------------------------------
// Preparation and rejection

/**
 * Prepares a call against the step's captured catalog, committing nothing: an unknown name is
 * `unavailable`; input that fails the tool's Schema is `invalid_input` with the decode message.
 */
export const prepare = (captured: CapturedCatalog, request: CallRequest): Effect.Effect<Preparation> => {
  const tool = captured.get(request.name)
  if (tool === undefined) return Effect.succeed({ _tag: "Refused", request, reason: { kind: "unavailable" } })
  return tool.decode(request.input).pipe(
    Effect.match({
      onFailure: (reason): Preparation => ({ _tag: "Refused", request, reason }),
      onSuccess: (runner): Preparation => ({ _tag: "Prepared", request, tool, runner }),
    }),
  )
}

/**
 * A rejection as it is stored. Its message (a validator's or a decoder's, which may quote anything
 * the tool's code saw, a key included) goes through `failureMessage` like a failure's: made
 * well-formed, `secrets` scrubbed, then cut.
 */
const storedRejection = (
  reason: ToolCall.ToolRejection,
  secrets: ReadonlyArray<Redacted.Redacted<string>>,
): ToolCall.ToolRejection => ("message" in reason ? { ...reason, message: failureMessage(reason.message, secrets) } : reason)

/**
 * Commits `tool_rejected`; no effect was or will be started. Returns the text the model reads. A
 * rejection's message is stored as a failure message is: the host's `secrets` scrubbed, then cut to
 * 2,048 UTF-16 units.
 */
export const reject = (
  invocation: Identity.Invocation,
  request: CallRequest,
  rejection: ToolCall.ToolRejection,
  secrets: ReadonlyArray<Redacted.Redacted<string>> = [],
): Effect.Effect<Rejected, ToolError, Requirements> =>
  Effect.uninterruptible(
    Effect.gen(function* () {
      const reason = storedRejection(rejection, secrets)
      const write = yield* plainWrite(invocation, {
        kind: "tool_rejected",
        operationId: request.operationId,
        call: request.call,
        name: request.name,
        input: request.input,
        reason,
      })
      const sequence = yield* Effect.mapError(commit(write), (error) => commitFailed("tool_rejected", error))
      return { _tag: "Rejected", request, reason, text: ToolCall.rejectionText(reason), sequence } satisfies Rejected
    }),
  )

// ---------------------------------------------------------------------------------------------
// Invocation

/** The message of a success whose output cannot be recorded (over 64 MiB raw, too deep, or unreadable). */
export { unrecordableOutputMessage }

export interface InvokeOptions {
  readonly cancellation?: Cancellation.Cancellation | undefined
  /**
   * Secrets of the host (an API key, a token) that must never be stored: each is replaced by
   * `[redacted]` in a failure or rejection message, as given, trimmed, JSON-escaped and URL-encoded.
   */
  readonly secrets?: ReadonlyArray<Redacted.Redacted<string>> | undefined
}

/**
 * A failure or rejection message as it is stored: made well-formed (a lone surrogate becomes U+FFFD,
 * or the store would refuse the fact), secrets scrubbed, then cut to `MAX_FAILURE_MESSAGE` units
 * (scrubbed first, so a secret across the cut leaves no fragment).
 */
export const failureMessage = (message: string, secrets: ReadonlyArray<Redacted.Redacted<string>> = []): string =>
  Canonical.truncateUtf16(scrub(Validation.toWellFormedText(message), secrets), defaults.failureMessageUnits)

/** Whether an interruption of the calling fiber is pending (inside an uninterruptible region). */
const interruptionPending = (restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>) =>
  Effect.map(Effect.exit(restore(Effect.void)), Exit.isFailure)

/** How a dispatched effect ended, and whether the caller was interrupted while it ran. */
interface Ran {
  readonly execution: Execution
  readonly interrupted: boolean
}

/**
 * Runs the effect in a child fiber with an `AbortSignal` aborted on cancellation or on interruption
 * of the caller, and waits for it to finish either way: a dispatched effect is let finish.
 */
const runDispatched = (
  runner: Runner,
  cancellation: Cancellation.Cancellation,
  restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>,
): Effect.Effect<Ran> =>
  Effect.gen(function* () {
    const controller = new AbortController()
    const abort = Effect.sync(() => controller.abort())
    // Started at once: an effect that ends without waiting (a synchronous tool) needs no watcher.
    const running = yield* Effect.forkChild(execute(runner, controller.signal), { startImmediately: true })
    const ended = running.pollUnsafe()
    if (ended !== undefined && Exit.isSuccess(ended)) return { execution: ended.value, interrupted: false }
    const watcher = yield* Effect.forkChild(Effect.andThen(cancellation.requested, abort), { uninterruptible: false, startImmediately: true })
    const waited = yield* Effect.exit(restore(Fiber.join(running)))
    const execution = Exit.isSuccess(waited) ? waited.value : yield* Effect.andThen(abort, Fiber.join(running))
    yield* Fiber.interrupt(watcher)
    return { execution, interrupted: Exit.isFailure(waited) }
  })

/** Two keys of one object that differ only in their lone surrogates: no repair keeps both. */
const KEYS_MERGED = Symbol("keys merged")

/**
 * A JSON value with U+FFFD in place of each lone surrogate of its strings and keys; `KEYS_MERGED`
 * when two keys of an object would become one (the output is then not stored, rather than stored
 * with a value lost).
 */
const wellFormedJson = (value: Identity.Json): Identity.Json | typeof KEYS_MERGED => {
  if (typeof value === "string") return Validation.toWellFormedText(value)
  if (value === null || typeof value !== "object") return value
  if (Array.isArray(value)) {
    const items: Array<Identity.Json> = []
    for (const item of value) {
      const repaired = wellFormedJson(item)
      if (repaired === KEYS_MERGED) return KEYS_MERGED
      items.push(repaired)
    }
    return items
  }
  const entries = Object.entries(value as { readonly [key: string]: Identity.Json })
  const repaired: Array<readonly [string, Identity.Json]> = []
  const keys = new Set<string>()
  for (const [key, child] of entries) {
    const name = Validation.toWellFormedText(key)
    const inner = wellFormedJson(child)
    if (keys.has(name) || inner === KEYS_MERGED) return KEYS_MERGED
    keys.add(name)
    repaired.push([name, inner])
  }
  // `fromEntries` defines each key as its own property: a `__proto__` key stays a key.
  return Object.fromEntries(repaired)
}

/** The settlement write of a known outcome, with the outcome it records. */
const settleWrite = (
  invocation: Identity.Invocation,
  request: CallRequest,
  execution: Execution & { readonly _tag: "Succeeded" | "Failed" },
  secrets: ReadonlyArray<Redacted.Redacted<string>>,
): Effect.Effect<{ readonly write: EventWrite.EventWrite; readonly outcome: ToolCall.ToolOutcome }, ToolError, Ids> => {
  const failed = (message: string) => {
    const outcome: ToolCall.ToolOutcome = { kind: "failed", message: failureMessage(message, secrets) }
    return Effect.map(
      plainWrite(invocation, { kind: "tool_settled", operationId: request.operationId, outcome }),
      (write) => ({ write, outcome }),
    )
  }
  if (execution._tag === "Failed") return failed(execution.message)
  return Effect.flatMap(stamp, ({ id, recordedAt }) => {
    const build = (output: ToolCall.ToolOutput) =>
      EventWrite.toolSuccess({ id, recordedAt, invocation, operationId: request.operationId, output })
    // Its output is stored, and read by the model, with the secrets scrubbed, as a failure's message is.
    const output = scrubOutput(execution.output, secrets)
    let built = build(output)
    // A fact's text is well-formed Unicode (packages/facts/README.md), so an output holding a lone
    // surrogate (text cut inside a pair, in a text output or any string of a JSON one) is refused.
    // Like a failure message the journal stores but did not write, it is then stored with U+FFFD in
    // place of each lone surrogate, as a UTF-8 encoder (and so the model) would read it anyway. Only
    // after the refusal: the usual output, well-formed, is not scanned once more.
    if (Result.isFailure(built) && built.failure.rule === "text_ill_formed") {
      const repaired = output.format === "text" ? Validation.toWellFormedText(output.value) : wellFormedJson(output.value)
      if (repaired !== KEYS_MERGED) {
        built = build(output.format === "text" ? { format: "text", value: repaired as string } : { format: "json", value: repaired })
      }
    }
    if (Result.isFailure(built)) {
      // The effect happened but its output cannot be stored: say so as a known failure.
      return failed(unrecordableOutputMessage(built.failure.message))
    }
    const fact = built.success.event.fact
    return fact.kind === "tool_settled"
      ? Effect.succeed({ write: built.success, outcome: fact.outcome })
      : Effect.die(new Error("EventWrite.toolSuccess built a fact other than tool_settled"))
  })
}

const invokeWith = (
  invocation: Identity.Invocation,
  prepared: Prepared,
  options: InvokeOptions,
  restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>,
): Effect.Effect<{ readonly invoked: Invoked; readonly interrupted: boolean }, ToolError, Requirements> =>
  Effect.gen(function* () {
    const { request } = prepared
    const cancellation = options.cancellation ?? Cancellation.none
    // T1: nothing runs before the dispatch is durable; any commit error aborts with no effect.
    const dispatch = yield* plainWrite(invocation, {
      kind: "tool_dispatched",
      operationId: request.operationId,
      call: request.call,
      name: request.name,
      input: request.input,
    })
    yield* Effect.mapError(commit(dispatch), (error) => commitFailed("tool_dispatched", error))
    const pending = yield* interruptionPending(restore)
    const cancelled = pending || (yield* cancellation.isRequested)
    const { execution, interrupted }: Ran = cancelled
      ? { execution: { _tag: "Failed", message: Prompts.CANCELLED_BEFORE_EFFECT }, interrupted: pending }
      : yield* runDispatched(prepared.runner, cancellation, restore)
    if (execution._tag === "Unknown") {
      const message = failureMessage(execution.message, options.secrets)
      const unknown = { _tag: "OutcomeUnknown", request, cause: "outcome_unknown", message } satisfies OutcomeUnknown
      return { invoked: unknown, interrupted }
    }
    // T2: the settlement; if its commit fails the call stays uncertain, never reported settled.
    const unsettled = (message: string) => {
      const unknown = {
        _tag: "OutcomeUnknown",
        request,
        cause: "settle_commit",
        message: failureMessage(message, options.secrets),
      } satisfies OutcomeUnknown
      return { invoked: unknown, interrupted }
    }
    const built = yield* Effect.result(settleWrite(invocation, request, execution, options.secrets ?? []))
    if (Result.isFailure(built)) return unsettled(built.failure.message)
    const settle = built.success
    const committed = yield* Effect.result(commit(settle.write))
    if (Result.isFailure(committed)) {
      return unsettled(`tool_settled commit ${committed.failure.kind}: ${committed.failure.reason}`)
    }
    const settled = {
      _tag: "Settled",
      request,
      semantics: prepared.tool.semantics,
      outcome: settle.outcome,
      sequence: committed.success,
    } satisfies Settled
    return { invoked: settled, interrupted }
  })

/**
 * T1 → effect → T2 for one prepared call. Fails only when `tool_dispatched` could not be committed
 * (or built), in which case no effect was started. Cancellation requested before the effect starts
 * settles the known failure `cancelled before effect`; once started, the effect is let finish and is
 * settled with what it returns. Interrupting the caller acts as cancellation, then interrupts it.
 */
export const invoke = (
  invocation: Identity.Invocation,
  prepared: Prepared,
  options: InvokeOptions = {},
): Effect.Effect<Invoked, ToolError, Requirements> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(invokeWith(invocation, prepared, options, restore), (ran) =>
      ran.interrupted ? Effect.interrupt : Effect.succeed(ran.invoked),
    ),
  )

// ---------------------------------------------------------------------------------------------
// One step

export interface StepResult {
  /** One result per call, in the order given. */
  readonly calls: ReadonlyArray<CallResult>
  /** A `finish_turn` call settled successfully. */
  readonly finishTurn: boolean
  /** Cancellation was requested before every call was dispatched or rejected. */
  readonly cancelled: boolean
  /** Some call ended `OutcomeUnknown`; the calls after it were rejected `cancelled`. */
  readonly uncertain: boolean
}

/**
 * Runs one step's calls in order (docs/engine.md §5.7): exclusivity, preparation, then the journal.
 * Once cancellation is requested (or the caller is interrupted) every call not yet dispatched is
 * rejected `cancelled`; after an unknown outcome the remaining calls are rejected `cancelled` too.
 * Fails with `ToolError` when a `tool_dispatched` or `tool_rejected` commit fails; the calls before
 * it are durable and the rest untouched.
 */
export const runStep = (
  invocation: Identity.Invocation,
  captured: CapturedCatalog,
  requests: ReadonlyArray<CallRequest>,
  options: InvokeOptions = {},
): Effect.Effect<StepResult, ToolError, Requirements> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function* () {
      const cancellation = options.cancellation ?? Cancellation.none
      const admissions = admit(
        captured,
        requests.map((request) => request.name),
      )
      const calls: Array<CallResult> = []
      let cancelled = false
      let interrupted = false
      let uncertain = false
      let finishTurn = false
      for (const [index, request] of requests.entries()) {
        if (!interrupted) interrupted = yield* interruptionPending(restore)
        if (!cancelled) cancelled = interrupted || (yield* cancellation.isRequested)
        if (cancelled || uncertain) {
          calls.push(yield* reject(invocation, request, { kind: "cancelled" }))
          continue
        }
        if (admissions[index] === "exclusive_conflict") {
          calls.push(yield* reject(invocation, request, { kind: "exclusive_conflict" }))
          continue
        }
        const preparation = yield* prepare(captured, request)
        if (preparation._tag === "Refused") {
          calls.push(yield* reject(invocation, request, preparation.reason, options.secrets))
          continue
        }
        const ran = yield* invokeWith(invocation, preparation, options, restore)
        const result = ran.invoked
        if (ran.interrupted) interrupted = cancelled = true
        calls.push(result)
        if (result._tag === "OutcomeUnknown") uncertain = true
        else if (result.semantics === "finish_turn" && result.outcome.kind === "succeeded") finishTurn = true
      }
      // Every fact is written; an interrupted caller now sees its interruption.
      if (interrupted) return yield* Effect.interrupt
      return { calls, finishTurn, cancelled, uncertain } satisfies StepResult
    }),
  )
