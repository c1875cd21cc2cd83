/**
 * `EngineError`, the one error of `@maka/engine` (docs/engine.md §5.1): why a run could not be admitted
 * or how it failed. `failureClass` maps a reason to the durable failure class its terminal records.
 */
import { Outcome, Prompts, Validation } from "@maka/facts"
import type { EventLogError } from "@maka/event-log"
import type { ModelError } from "@maka/model"
import { Data } from "effect"
import * as Hints from "./Hints.ts"
import { MAX_QUEUED_STEERING, MAX_QUEUED_STEERING_BYTES } from "./internal/options.ts"

export type Reason =
  | { readonly _tag: "Busy"; readonly message: string }
  | { readonly _tag: "ReconciliationRequired"; readonly message: string }
  | { readonly _tag: "InvalidInput"; readonly message: string }
  | { readonly _tag: "Cancelled" }
  | { readonly _tag: "StepLimit" }
  | { readonly _tag: "ModelIncomplete" }
  | { readonly _tag: "Commit"; readonly message: string }
  | {
      readonly _tag: "Store"
      readonly message: string
      /** The log's own reason (`WriterBusy`, `UnsupportedDatabase`, …) when the error came from the log. */
      readonly storeReason?: EventLogError.Reason["_tag"]
    }
  | { readonly _tag: "Model"; readonly error: ModelError.ModelError }
  | { readonly _tag: "Tool"; readonly message: string }
  | {
      readonly _tag: "ToolOutcomeUnknown"
      readonly operationId: string
      /** The tool called, and what it said of its outcome (scrubbed of secrets), when known. */
      readonly toolName?: string | undefined
      readonly detail?: string | undefined
    }
  | { readonly _tag: "Internal"; readonly message: string }

export const SESSION_ACTIVE_MESSAGE = "session already has an active invocation"

/** A continuation's or a successor's retry whose context, read again, no longer gives its frozen request (docs/engine.md §5.6). */
export const RETRY_CHANGED_INPUT_MESSAGE = "continuation retry changed frozen model input"
/** A start on an engine that has closed (`close()`, or the scope that made it ended): `Internal`. */
export const ENGINE_CLOSED_MESSAGE = "the engine is closed"
/** `steer`'s `Busy` refusals: the run took its last steering, or holds all it can for its next step. */
export const STEERING_ENDED_MESSAGE = "the run has ended its turn"
/** A run being sealed (cancelled, failed): `STEERING_ENDED_MESSAGE` begins with it too. */
export const STEERING_RUN_ENDED_MESSAGE = "the run has ended"
export const STEERING_HANDING_OFF_MESSAGE = "the run is handing off: steer its successor"
export const STEERING_LAST_STEP_MESSAGE = "the run is in its last step (maxSteps): no later step could deliver steering"
export const STEERING_FULL_MESSAGE = `the run already holds ${MAX_QUEUED_STEERING} steering messages for its next step`
export const STEERING_FULL_BYTES_MESSAGE =
  `the run's steering for its next step would pass ${MAX_QUEUED_STEERING_BYTES} serialized bytes with this message; steer it after that step`
export const SESSION_RESERVED_MESSAGE = Prompts.SESSION_RESERVED_MESSAGE
/** A successor or an abandon of a pause that is no longer pending: another caller took it first. */
export const HANDOFF_TAKEN_MESSAGE = "the handoff was already resumed or abandoned (by this or another host)"
export const UNSEALED_RUN_MESSAGE =
  "session has an unsealed run: it is live on another host, or it crashed; run recover when no other engine is live"
/** The terminal this engine writes later for a run whose own could not be written when it ended. */
export const SEALED_LATER_MESSAGE = "the run's terminal could not be written when it ended; its engine sealed it later"
/** A run of this engine ended but its terminal could not be written; the engine seals it itself. */
export const UNWRITTEN_TERMINAL_MESSAGE =
  "session has a run of this engine whose terminal could not be written; it is sealed when the log accepts writes again"
/**
 * `checkContinuation` (which writes nothing) meets such a run of this engine: the engine writes its
 * terminal before its next run on the session starts, and a continuation's claim is made after it.
 */
export const UNWRITTEN_TERMINAL_CHECK_MESSAGE =
  "session has a run of this engine whose terminal is not written yet; the engine writes it when it next starts a run on the session, and a continuation is checked after that"
/** The way out of an unknown tool outcome (docs/engine.md §5.8). */
export const PRIOR_UNKNOWN_MESSAGE =
  "session has a tool effect whose outcome is unknown: check what it did, then send an explicit new message with allowPriorUnknown"
export const INCOMPLETE_MESSAGE = Prompts.INCOMPLETE_OUTPUT_REJECTION_TEXT
/** Under `allowPriorUnknown`, the context lost the unknown operation the notice must name. */
export const PRIOR_UNKNOWN_MISSING_MESSAGE = "unknown prior tool is missing from model context"

const describe = (reason: Reason): string => {
  switch (reason._tag) {
    case "Busy":
    case "ReconciliationRequired":
    case "InvalidInput":
    case "Commit":
    case "Store":
    case "Tool":
    case "Internal":
      return reason.message
    case "Cancelled":
      return "the run was cancelled"
    case "StepLimit":
      return "the run reached its step limit"
    case "ModelIncomplete":
      return INCOMPLETE_MESSAGE
    case "Model":
      // The idle timeout's message is fixed (docs/engine.md §5.3); a request deadline names itself.
      return reason.error.reason._tag === "TimedOut"
        ? reason.error.reason.deadlineMs === undefined
          ? Prompts.MODEL_IDLE_TIMEOUT_MESSAGE
          : reason.error.reason.message
        : Hints.append(reason.error.message, Hints.forModel(reason.error))
    case "ToolOutcomeUnknown":
      return (
        `the outcome of tool operation ${reason.operationId}${reason.toolName === undefined ? "" : ` (${reason.toolName})`} is unknown` +
        (reason.detail === undefined || reason.detail === "" ? "" : `: ${reason.detail}`)
      )
  }
}

export class EngineError extends Data.TaggedError("EngineError")<{ readonly reason: Reason; readonly cause?: unknown }> {
  override get message(): string {
    return describe(this.reason)
  }
}

export const make = (reason: Reason): EngineError => new EngineError({ reason })
export const busy = (message: string) => make({ _tag: "Busy", message })
export const reconciliation = (message: string) => make({ _tag: "ReconciliationRequired", message })
export const invalidInput = (message: string) => make({ _tag: "InvalidInput", message })
export const cancelled = () => make({ _tag: "Cancelled" })
export const commit = (message: string) => make({ _tag: "Commit", message })
export const store = (message: string) => make({ _tag: "Store", message })
/** A log failure as `Store`: the log's reason tag as `storeReason`, the `EventLogError` as `cause`. */
export const fromStore = (error: EventLogError.EventLogError): EngineError =>
  new EngineError({
    reason: {
      _tag: "Store",
      message: Hints.storeMessage(error.reason._tag, error.message),
      storeReason: error.reason._tag,
    },
    cause: error,
  })
/** A summary attempt answered with a tool call: its run ends here rather than guess (docs/engine.md §5.4). */
export const SUMMARY_TOOL_CONTENT_MESSAGE = "summary contains tool content"

export const internal = (message: string) => make({ _tag: "Internal", message })

/** The durable failure class of a reason (docs/engine.md §5.3). */
export const failureClass = (reason: Reason): Outcome.FailureClass => {
  switch (reason._tag) {
    case "Busy":
      return "session_busy"
    case "ReconciliationRequired":
      return "reconciliation_required"
    case "InvalidInput":
      return "invalid_input"
    case "Cancelled":
      return "cancelled"
    case "StepLimit":
      return "step_limit"
    case "ModelIncomplete":
      return "model_incomplete"
    case "Commit":
      return "event_commit"
    case "Store":
      return "event_store"
    case "Tool":
      return "tool_execution"
    case "ToolOutcomeUnknown":
      return "outcome_unknown"
    case "Internal":
      return "runtime_internal"
    case "Model":
      switch (reason.error.reason._tag) {
        case "TimedOut":
          return "model_timeout"
        case "Adapter":
          return "model_adapter"
        case "Provider":
          return "model_provider"
        case "ContextOverflow":
          return "context_overflow"
        case "Cancelled":
          return "cancelled"
      }
  }
}

/** The terminal outcome of a failed run: `cancelled` for cancellation, else `failed {class, message}`. */
export const outcomeOf = (error: EngineError): Outcome.InvocationOutcome => {
  const reason = error.reason
  if (reason._tag === "Cancelled" || (reason._tag === "Model" && reason.error.reason._tag === "Cancelled")) {
    return { kind: "cancelled", source: "runtime_cancellation" }
  }
  // A provider's or a tool's text may hold a lone surrogate, which the store refuses.
  const message = Outcome.cutFailureMessage(Validation.toWellFormedText(error.message))
  return message === "" ? { kind: "failed", class: failureClass(reason) } : { kind: "failed", class: failureClass(reason), message }
}
