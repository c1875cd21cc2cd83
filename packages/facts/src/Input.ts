/**
 * What opens an invocation (docs/log-format.md §2.4): user messages, delivered (steered) messages and the
 * four opening inputs, with the purpose rule that says which model requests each opening allows.
 */
import { Schema } from "effect"
import { Digest, Id } from "./Identity.ts"
import { ContinuationClaim, HandoffPause } from "./Lineage.ts"
import type { ModelPurpose } from "./Model.ts"

/** A user message; `displayText` is kept for presentation and never sent to a model. */
export const MessageInput = Schema.Struct({
  text: Schema.String,
  displayText: Schema.optionalKey(Schema.String),
}).annotate({ identifier: "MessageInput" })
export type MessageInput = typeof MessageInput.Type

/** A queued user message delivered at a step boundary; delivered at most once per session. */
export const DeliveredMessage = Schema.Struct({
  messageId: Id,
  content: MessageInput,
  submittedContentDigest: Digest,
}).annotate({ identifier: "DeliveredMessage" })
export type DeliveredMessage = typeof DeliveredMessage.Type

export const MessageOpening = Schema.Struct({
  kind: Schema.tag("message"),
  content: MessageInput,
  requestFingerprint: Schema.optionalKey(Id),
})
export const ContinuationOpening = Schema.Struct({
  kind: Schema.tag("continuation"),
  claim: ContinuationClaim,
  requestFingerprint: Digest,
})
export const HandoffOpening = Schema.Struct({
  kind: Schema.tag("handoff"),
  claim: ContinuationClaim,
  pause: HandoffPause,
})
export const ContextCompactOpening = Schema.Struct({
  kind: Schema.tag("context_compact"),
  requestFingerprint: Id,
})

export const InvocationInput = Schema.Union([
  MessageOpening,
  ContinuationOpening,
  HandoffOpening,
  ContextCompactOpening,
]).annotate({ identifier: "InvocationInput" })
export type InvocationInput = typeof InvocationInput.Type

/** The purpose rule: a `context_compact` opening accepts only `summary` requests. */
export const allowsPurpose = (input: InvocationInput, purpose: ModelPurpose): boolean =>
  input.kind === "context_compact" ? purpose === "summary" : true
