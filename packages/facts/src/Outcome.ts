/**
 * How an invocation ends (docs/log-format.md §2.3): outcomes, the durable failure classes, compaction
 * outcomes and their reasons, and the terminal status derived from an outcome.
 */
import { Schema } from "effect"
import { truncateUtf16 } from "./Canonical.ts"
import { EventId } from "./Identity.ts"
import { HandoffPause } from "./Lineage.ts"
import { MAX_FAILURE_MESSAGE } from "./Limits.ts"
import { SummaryDefect } from "./Summary.ts"

/** Durable failure classes; recovery adds `host_interrupted` and `outcome_unknown`. */
export const FailureClass = Schema.Literals([
  "session_busy",
  "reconciliation_required",
  "invalid_input",
  "cancelled",
  "step_limit",
  "model_incomplete",
  "event_commit",
  "event_store",
  "model_timeout",
  "model_adapter",
  "model_provider",
  "context_overflow",
  "tool_execution",
  "runtime_internal",
  "host_interrupted",
  "outcome_unknown",
]).annotate({ identifier: "FailureClass" })
export type FailureClass = typeof FailureClass.Type

export const CompactReason = Schema.Union([
  Schema.Literals(["no_new_history", "input_too_large", "output_length"]),
  SummaryDefect,
])
export type CompactReason = typeof CompactReason.Type

export const CompactOutcome = Schema.Union([
  Schema.Struct({ kind: Schema.tag("compacted"), checkpointId: EventId }),
  Schema.Struct({ kind: Schema.tag("unchanged"), reason: CompactReason }),
  Schema.Struct({ kind: Schema.tag("failed"), reason: CompactReason }),
]).annotate({ identifier: "CompactOutcome" })
export type CompactOutcome = typeof CompactOutcome.Type

export const CancellationSource = Schema.Literals(["runtime_cancellation", "handoff_abandoned"])
export type CancellationSource = typeof CancellationSource.Type

export const InvocationOutcome = Schema.Union([
  Schema.Struct({ kind: Schema.tag("completed") }),
  Schema.Struct({ kind: Schema.tag("handoff_paused"), pause: HandoffPause }),
  Schema.Struct({ kind: Schema.tag("context_compact_finished"), outcome: CompactOutcome }),
  Schema.Struct({
    kind: Schema.tag("failed"),
    class: FailureClass,
    message: Schema.optionalKey(Schema.String.check(Schema.isMaxLength(MAX_FAILURE_MESSAGE))),
  }),
  Schema.Struct({ kind: Schema.tag("cancelled"), source: CancellationSource }),
]).annotate({ identifier: "InvocationOutcome" })
export type InvocationOutcome = typeof InvocationOutcome.Type

/**
 * A failure message as a `failed` outcome stores it: cut to 2,048 UTF-16 units without splitting a
 * surrogate pair. The schema refuses a longer message, so every writer cuts through this one rule.
 */
export const cutFailureMessage = (message: string): string => truncateUtf16(message, MAX_FAILURE_MESSAGE)

export const TerminalStatus = Schema.Literals(["completed", "failed", "cancelled", "paused"])
export type TerminalStatus = typeof TerminalStatus.Type

export const terminalStatus = (outcome: InvocationOutcome): TerminalStatus => {
  switch (outcome.kind) {
    case "completed":
    case "context_compact_finished":
      return "completed"
    case "failed":
      return "failed"
    case "cancelled":
      return "cancelled"
    case "handoff_paused":
      return "paused"
  }
}

/** Whether the outcome is a clean completion, which the store refuses while work is unresolved. */
export const isCleanCompletion = (outcome: InvocationOutcome): boolean =>
  outcome.kind === "completed" || outcome.kind === "context_compact_finished"
