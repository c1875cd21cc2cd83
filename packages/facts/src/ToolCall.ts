/**
 * Tool call records (docs/log-format.md §2.8): call identities and operation ids, rejections and the text
 * the model reads for them, tool outputs, raw result references, the frozen model-visible projection
 * and settled outcomes.
 */
import { Schema } from "effect"
import { Digest, Id, IntBetween, Json } from "./Identity.ts"
import { MAX_RAW_TOOL_RESULT_BYTES } from "./Limits.ts"
import { PROJECTION_FAILURE_TEXT, TOOL_REJECTION_TEXT } from "./Prompts.ts"

export const ProviderOrigin = Schema.Struct({ kind: Schema.tag("provider"), stepId: Id })
export const StandaloneOrigin = Schema.Struct({ kind: Schema.tag("standalone") })
export const ToolCallOrigin = Schema.Union([ProviderOrigin, StandaloneOrigin])
export type ToolCallOrigin = typeof ToolCallOrigin.Type

export const ToolCallIdentity = Schema.Struct({
  toolCallId: Id,
  origin: ToolCallOrigin,
}).annotate({ identifier: "ToolCallIdentity" })
export type ToolCallIdentity = typeof ToolCallIdentity.Type

/** The operation id of a provider call: `"{stepId}:{toolCallId}"`. */
export const providerOperationId = (stepId: string, toolCallId: string): string => `${stepId}:${toolCallId}`

const withMessage = <const Kind extends string>(kind: Kind) =>
  Schema.Struct({ kind: Schema.tag(kind), message: Schema.String })

export const ToolRejection = Schema.Union([
  Schema.Struct({ kind: Schema.tag("unavailable") }),
  withMessage("invalid_input"),
  withMessage("policy_denied"),
  withMessage("preparation_failed"),
  Schema.Struct({ kind: Schema.tag("exclusive_conflict") }),
  Schema.Struct({ kind: Schema.tag("cancelled") }),
]).annotate({ identifier: "ToolRejection" })
export type ToolRejection = typeof ToolRejection.Type

/** The text the model reads for a rejected call. */
export const rejectionText = (rejection: ToolRejection): string => {
  switch (rejection.kind) {
    case "invalid_input":
    case "policy_denied":
    case "preparation_failed":
      return rejection.message
    case "unavailable":
    case "exclusive_conflict":
    case "cancelled":
      return TOOL_REJECTION_TEXT[rejection.kind]
  }
}

/** What a tool returns; the canonical JSON of it is the raw payload. */
export const ToolOutput = Schema.Union([
  Schema.Struct({ format: Schema.tag("text"), value: Schema.String }),
  Schema.Struct({ format: Schema.tag("json"), value: Json }),
]).annotate({ identifier: "ToolOutput" })
export type ToolOutput = typeof ToolOutput.Type

/** Binds a raw payload, stored apart, by its length and digest. */
export const RawToolResultRef = Schema.Struct({
  bytes: IntBetween(0, MAX_RAW_TOOL_RESULT_BYTES),
  digest: Digest,
}).annotate({ identifier: "RawToolResultRef" })
export type RawToolResultRef = typeof RawToolResultRef.Type

/** The model-visible form of a result, frozen once at settle time. */
export const DurableToolProjection = Schema.Union([
  Schema.Struct({ kind: Schema.tag("text"), text: Schema.String }),
  Schema.Struct({ kind: Schema.tag("json"), value: Json }),
  Schema.Struct({ kind: Schema.tag("failure") }),
]).annotate({ identifier: "DurableToolProjection" })
export type DurableToolProjection = typeof DurableToolProjection.Type

/** The text the model reads for a `failure` projection. */
export const projectionFailureText = PROJECTION_FAILURE_TEXT

export const ToolSucceeded = Schema.Struct({
  kind: Schema.tag("succeeded"),
  raw: RawToolResultRef,
  projection: DurableToolProjection,
})
export const ToolFailed = Schema.Struct({ kind: Schema.tag("failed"), message: Schema.String })

export const ToolOutcome = Schema.Union([ToolSucceeded, ToolFailed]).annotate({ identifier: "ToolOutcome" })
export type ToolOutcome = typeof ToolOutcome.Type
