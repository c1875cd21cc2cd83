/**
 * Context records (docs/log-format.md §2.5): model request context, checkpoint modes, summaries and context
 * checkpoints. The summary template and its validator live in `Summary.ts`.
 */
import { Schema } from "effect"
import { Digest, EventId, Id, IntBetween, Sequence } from "./Identity.ts"
import { MAX_WINDOW } from "./Limits.ts"

const Window = IntBetween(1, MAX_WINDOW)

/** Frozen facts about the selected model; an absent window is unknown. */
export const ModelRequestContext = Schema.Struct({
  providerId: Id,
  contextWindow: Schema.optionalKey(Window),
  declaredWindow: Schema.optionalKey(Window),
  modelContextWindow: Schema.optionalKey(Window),
}).annotate({ identifier: "ModelRequestContext" })
export type ModelRequestContext = typeof ModelRequestContext.Type

export const CheckpointMode = Schema.Union([
  Schema.Struct({ kind: Schema.tag("standalone") }),
  Schema.Struct({ kind: Schema.tag("pre_turn") }),
  Schema.Struct({ kind: Schema.tag("mid_turn"), anchorEventId: EventId }),
]).annotate({ identifier: "CheckpointMode" })
export type CheckpointMode = typeof CheckpointMode.Type

export const SummaryText = Schema.Struct({
  format: Schema.Literal("sections_v1"),
  text: Schema.String,
})
export type SummaryText = typeof SummaryText.Type

export const ContextCheckpoint = Schema.Struct({
  mode: CheckpointMode,
  coveredThrough: Sequence,
  sourceDigest: Digest,
  previousCheckpointId: Schema.optionalKey(EventId),
  summary: SummaryText,
  summaryStepId: Id,
}).annotate({ identifier: "ContextCheckpoint" })
export type ContextCheckpoint = typeof ContextCheckpoint.Type
