/**
 * Interaction records (docs/log-format.md §2.10): approval requests a tool's preparation may raise, their
 * one append-only outcome, and the reasons a pending request is closed without an answer.
 */
import { Schema } from "effect"
import { EpochMillis, Id } from "./Identity.ts"

export const ClosureReason = Schema.Literals([
  "turn_stopped",
  "turn_terminal",
  "producer_cancelled",
  "timed_out",
  "host_restarted",
  "provider_disconnected",
])
export type ClosureReason = typeof ClosureReason.Type

export const InteractionRequest = Schema.Struct({
  kind: Schema.tag("approval"),
  toolCallId: Id,
  reason: Schema.String,
})

export const InteractionOutcome = Schema.Union([
  Schema.Struct({
    kind: Schema.tag("approval_decision"),
    decision: Schema.Literals(["allow", "deny"]),
    committedAt: EpochMillis,
  }),
  Schema.Struct({ kind: Schema.tag("closure"), reason: ClosureReason, committedAt: EpochMillis }),
]).annotate({ identifier: "InteractionOutcome" })
export type InteractionOutcome = typeof InteractionOutcome.Type

export const InteractionRecord = Schema.Struct({
  sessionId: Id,
  turnId: Id,
  runId: Id,
  requestId: Id,
  createdAt: EpochMillis,
  request: InteractionRequest,
  outcome: Schema.optionalKey(InteractionOutcome),
}).annotate({ identifier: "InteractionRecord" })
export type InteractionRecord = typeof InteractionRecord.Type
