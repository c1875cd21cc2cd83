/**
 * Engine tunables in one frozen defaults object: retry backoff, attempts per logical step, and the
 * bounds of `model_observed` coalescing. Tests pass smaller values; time always comes from `Clock`.
 */
import { Limits } from "@maka/facts"

export interface EngineOptions {
  /** First backoff delay; doubles per failed attempt up to `backoffMaxMs`, plus 0–25 % jitter. */
  readonly backoffBaseMs: number
  readonly backoffMaxMs: number
  /** Physical attempts per logical main step. */
  readonly maxModelAttempts: number
  /** At most this many UTF-16 units of text in one coalesced observation. */
  readonly observationMaxChars: number
  /**
   * How long a batch of text deltas may wait for the deltas that follow before it is committed
   * (at most 50 ms; 0, the default, commits at once). Observations are group-committed either way:
   * whatever arrives while a commit is in flight goes into the next one. Nothing is shown before it
   * is committed.
   */
  readonly observationDelayMs: number
  /**
   * How long a cancelled run (`cancel()`, the caller's signal, `close()`) waits for its dispatched
   * tool effects to finish after their AbortSignal fired. A tool still running then is abandoned:
   * its outcome is recorded as unknown and the run is sealed `failed {outcome_unknown}`. This bounds
   * `cancel()` → sealed and `close()`, whatever a tool does with its signal.
   */
  readonly cancelGraceMs: number
}

/** The most steering messages one run holds for its next step boundary; `steer` refuses more. */
export const MAX_QUEUED_STEERING = 64

/** How many sessions' live contexts an engine keeps for their next run (least recently used dropped first). */
export const SESSION_CONTEXTS = 256

/** The most `observationDelayMs` may be: nothing waits longer to be shown. */
export const MAX_OBSERVATION_DELAY_MS = 50

export const defaults: EngineOptions = Object.freeze({
  backoffBaseMs: Limits.BACKOFF_INITIAL_MS,
  backoffMaxMs: Limits.BACKOFF_MAX_MS,
  maxModelAttempts: Limits.MAX_MODEL_ATTEMPTS,
  observationMaxChars: Limits.MAX_DELTA_CHARS,
  observationDelayMs: 0,
  cancelGraceMs: 10_000,
})

/** The defaults with `options` over them, `observationDelayMs` clamped to 0..`MAX_OBSERVATION_DELAY_MS`. */
export const resolveOptions = (options: Partial<EngineOptions>): EngineOptions => {
  const merged: EngineOptions = { ...defaults, ...options }
  return { ...merged, observationDelayMs: Math.min(MAX_OBSERVATION_DELAY_MS, Math.max(0, merged.observationDelayMs)) }
}
