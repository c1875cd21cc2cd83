/**
 * Continuation and handoff records (docs/log-format.md §2.6): run boundaries, session bases, replay
 * evidence, claims, handoff intents, pauses, execution settings, tool checkpoints and the compaction
 * budget. Their cross-field rules live in `Validation.ts`.
 */
import { Schema } from "effect"
import { Digest, Id, IntBetween, Invocation, NonNegativeInt, ProviderOptions } from "./Identity.ts"
import { MAX_HANDOFF_TOOL_NAME_CHARS, MAX_HANDOFF_TOOL_NAMES, MAX_MAIN_OUTPUT_LIMIT, MAX_STEPS } from "./Limits.ts"
import { ModelRequestContext } from "./ModelContext.ts"

/** A sealed run's cut: `highWater` is run-local (the count of that run's events). */
export const RunBoundary = Schema.Struct({
  invocation: Invocation,
  highWater: IntBetween(1, Number.MAX_SAFE_INTEGER),
  digest: Digest,
}).annotate({ identifier: "RunBoundary" })
export type RunBoundary = typeof RunBoundary.Type

/** The session position just before the first fresh run of a lineage. */
export const SessionBase = Schema.Struct({
  highWater: NonNegativeInt,
  digest: Digest,
}).annotate({ identifier: "SessionBase" })
export type SessionBase = typeof SessionBase.Type

export const ReplayEvidence = Schema.Struct({
  version: Schema.Literal(1),
  digest: Digest,
  routeIdentity: Digest,
}).annotate({ identifier: "ReplayEvidence" })
export type ReplayEvidence = typeof ReplayEvidence.Type

export const ContinuationClaim = Schema.Struct({
  id: Id,
  source: RunBoundary,
  base: SessionBase,
  replay: ReplayEvidence,
}).annotate({ identifier: "ContinuationClaim" })
export type ContinuationClaim = typeof ContinuationClaim.Type

export const HandoffIntent = Schema.Struct({
  handoffId: Id,
  hostEpoch: Id,
  rootRunId: Id,
  successorRunId: Id,
  successorInvocationId: Id,
  claimId: Id,
}).annotate({ identifier: "HandoffIntent" })
export type HandoffIntent = typeof HandoffIntent.Type

/** The successor of a paused run: same session and turn, the intent's run and invocation ids. */
export const successorOf = (intent: HandoffIntent, source: Invocation): Invocation => ({
  sessionId: source.sessionId,
  turnId: source.turnId,
  runId: intent.successorRunId,
  invocationId: intent.successorInvocationId,
})

/** The tool names a successor must restore: sorted, unique, at most 128 names of 1–128 characters. */
export const HandoffTools = Schema.Struct({
  catalogDigest: Digest,
  names: Schema.Array(
    Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(MAX_HANDOFF_TOOL_NAME_CHARS)),
  ).check(Schema.isMaxLength(MAX_HANDOFF_TOOL_NAMES)),
}).annotate({ identifier: "HandoffTools" })
export type HandoffTools = typeof HandoffTools.Type

/** One budget shared by proactive and reactive compaction (docs/engine.md §5.12). */
export const CompactionBudget = Schema.Literals(["available", "reshaped", "failed"])
export type CompactionBudget = typeof CompactionBudget.Type

/** Continuation settings of a pause, never credentials. */
export const HandoffExecution = Schema.Struct({
  replay: ReplayEvidence,
  context: Schema.optionalKey(ModelRequestContext),
  providerOptions: ProviderOptions,
  mainOutputLimit: Schema.optionalKey(IntBetween(1, MAX_MAIN_OUTPUT_LIMIT)),
  tools: HandoffTools,
  compaction: CompactionBudget,
  replayBase: Schema.optionalKey(NonNegativeInt),
}).annotate({ identifier: "HandoffExecution" })
export type HandoffExecution = typeof HandoffExecution.Type

export const HandoffPause = Schema.Struct({
  intent: HandoffIntent,
  remainingSteps: IntBetween(1, MAX_STEPS),
  execution: HandoffExecution,
}).annotate({ identifier: "HandoffPause" })
export type HandoffPause = typeof HandoffPause.Type
