/**
 * The tunables of `@maka/model` in one frozen object (docs/architecture.md §1.2, docs/model.md §4.2). Every value comes from
 * `@maka/facts` `Limits`, so one change there moves every check here.
 */
import { Limits } from "@maka/facts"

export const ModelDefaults = Object.freeze({
  /** Idle timeout per request; configurable within `[minIdleTimeoutMs, maxIdleTimeoutMs]`. */
  idleTimeoutMs: Limits.IDLE_TIMEOUT_MS,
  minIdleTimeoutMs: Limits.MIN_IDLE_TIMEOUT_MS,
  maxIdleTimeoutMs: Limits.MAX_IDLE_TIMEOUT_MS,
  /** Time the adapter gives itself to release a response after an abort. */
  cleanupGraceMs: Limits.CLEANUP_GRACE_MS,
  /** How long a response body may stay open after the finish before the step completes without its end. */
  afterFinishGraceMs: 1_000,
  /** Size of the concurrency limiter (≥ 1). */
  concurrency: Limits.MODEL_CONCURRENCY,
  maxDeltaChars: Limits.MAX_DELTA_CHARS,
  maxModelOutputBytes: Limits.MAX_MODEL_OUTPUT_BYTES,
  maxStreamEventBytes: Limits.MAX_STREAM_EVENT_BYTES,
  maxRequestBytes: Limits.MAX_REQUEST_BYTES,
  maxErrorBodyBytes: Limits.MAX_ERROR_BODY_BYTES,
  /** `anthropic-version` header sent to Anthropic. */
  anthropicVersion: "2023-06-01",
} as const)
