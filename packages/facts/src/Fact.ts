/**
 * The twelve facts of the log (docs/architecture.md §4, docs/log-format.md §2.2), discriminated by `kind`. The
 * `operation_id` column of the store holds `operationId` for tool facts and `stepId` for model facts.
 */
import { Schema } from "effect"
import { InvocationConfiguration } from "./Configuration.ts"
import { ContextCheckpoint, ModelRequestContext } from "./ModelContext.ts"
import { Digest, EventId, Id, Json, LogScope, NonNegativeInt, OperationId } from "./Identity.ts"
import { DeliveredMessage, InvocationInput } from "./Input.ts"
import { ArchivedPlaceholder } from "./Archive.ts"
import { ModelEvent, ModelInterruption, ModelPurpose, ModelStep } from "./Model.ts"
import { InvocationOutcome } from "./Outcome.ts"
import { ToolCallIdentity, ToolOutcome, ToolRejection } from "./ToolCall.ts"

export const InvocationOpened = Schema.Struct({
  kind: Schema.tag("invocation_opened"),
  input: InvocationInput,
  configuration: InvocationConfiguration,
})
export type InvocationOpened = typeof InvocationOpened.Type

export const ModelRequested = Schema.Struct({
  kind: Schema.tag("model_requested"),
  stepId: Id,
  modelId: Id,
  purpose: ModelPurpose,
  sourceScope: LogScope,
  sourceHighWater: NonNegativeInt,
  sourceDigest: Digest,
  inputDigest: Digest,
  routeIdentity: Digest,
  checkpointEventId: Schema.optionalKey(EventId),
  context: Schema.optionalKey(ModelRequestContext),
  effectiveSourceDigest: Schema.optionalKey(Digest),
})
export type ModelRequested = typeof ModelRequested.Type

export const ModelObserved = Schema.Struct({
  kind: Schema.tag("model_observed"),
  stepId: Id,
  event: ModelEvent,
})
export type ModelObserved = typeof ModelObserved.Type

export const ModelCompleted = Schema.Struct({
  kind: Schema.tag("model_completed"),
  stepId: Id,
  output: ModelStep,
})
export type ModelCompleted = typeof ModelCompleted.Type

export const ModelInterrupted = Schema.Struct({
  kind: Schema.tag("model_interrupted"),
  stepId: Id,
  status: ModelInterruption,
})
export type ModelInterrupted = typeof ModelInterrupted.Type

export const ToolDispatched = Schema.Struct({
  kind: Schema.tag("tool_dispatched"),
  operationId: OperationId,
  call: ToolCallIdentity,
  name: Schema.String,
  input: Json,
})
export type ToolDispatched = typeof ToolDispatched.Type

export const ToolSettled = Schema.Struct({
  kind: Schema.tag("tool_settled"),
  operationId: OperationId,
  outcome: ToolOutcome,
})
export type ToolSettled = typeof ToolSettled.Type

export const ToolRejected = Schema.Struct({
  kind: Schema.tag("tool_rejected"),
  operationId: OperationId,
  call: ToolCallIdentity,
  name: Schema.String,
  input: Json,
  reason: ToolRejection,
})
export type ToolRejected = typeof ToolRejected.Type

export const MessageSteered = Schema.Struct({
  kind: Schema.tag("message_steered"),
  message: DeliveredMessage,
})
export type MessageSteered = typeof MessageSteered.Type

export const ContextCheckpointRecorded = Schema.Struct({
  kind: Schema.tag("context_checkpoint_recorded"),
  checkpoint: ContextCheckpoint,
})
export type ContextCheckpointRecorded = typeof ContextCheckpointRecorded.Type

export const ToolResultArchived = Schema.Struct({
  kind: Schema.tag("tool_result_archived"),
  placeholder: ArchivedPlaceholder,
})
export type ToolResultArchived = typeof ToolResultArchived.Type

export const InvocationEnded = Schema.Struct({
  kind: Schema.tag("invocation_ended"),
  outcome: InvocationOutcome,
})
export type InvocationEnded = typeof InvocationEnded.Type

export const Fact = Schema.Union([
  InvocationOpened,
  ModelRequested,
  ModelObserved,
  ModelCompleted,
  ModelInterrupted,
  ToolDispatched,
  ToolSettled,
  ToolRejected,
  MessageSteered,
  ContextCheckpointRecorded,
  ToolResultArchived,
  InvocationEnded,
]).annotate({ identifier: "Fact" })
export type Fact = typeof Fact.Type
export type FactKind = Fact["kind"]

export const FACT_KINDS: ReadonlyArray<FactKind> = [
  "invocation_opened",
  "model_requested",
  "model_observed",
  "model_completed",
  "model_interrupted",
  "tool_dispatched",
  "tool_settled",
  "tool_rejected",
  "message_steered",
  "context_checkpoint_recorded",
  "tool_result_archived",
  "invocation_ended",
]

/** The value of the store's `operation_id` column: `operationId` for tool facts, `stepId` for model facts. */
export const operationKey = (fact: Fact): string | undefined => {
  switch (fact.kind) {
    case "model_requested":
    case "model_observed":
    case "model_completed":
    case "model_interrupted":
      return fact.stepId
    case "tool_dispatched":
    case "tool_settled":
    case "tool_rejected":
      return fact.operationId
    default:
      return undefined
  }
}
