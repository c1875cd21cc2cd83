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
  /**
   * How long `close({handoff: true})` (`Engine.handOffAll`) waits for each live run to reach a step
   * boundary and pause (a step's model stream and tools end first). A run not paused by then (a
   * tool or a stream that does not end) is cancelled, as `close()` cancels it.
   */
  readonly handoffWaitMs: number
  /**
   * How many sessions' live contexts the engine keeps for their next run (docs/engine.md §5.4 "Kept
   * context"), least recently used dropped first; 0 keeps none (each run reads its session).
   */
  readonly keptContexts: number
  /**
   * The most bytes the kept contexts hold together, as the read limits count them; a context over it
   * alone is not kept. A context's heap is a few times its bytes.
   */
  readonly keptContextBytes: number
}

/** Options as a host gives them: any may be left out or `undefined` (its default then holds). */
export type EngineOptionsInput = { readonly [K in keyof EngineOptions]?: EngineOptions[K] | undefined }

/** The most steering messages one run holds for its next step boundary; `steer` refuses more. */
export const MAX_QUEUED_STEERING = 64

/**
 * The most serialized bytes of steering one run holds for its next step boundary; `steer` refuses a
 * message that would pass it (one message alone is at most as large). The next request carries the
 * queue with the step before it, and no compaction can cut between them: the bound keeps that step
 * within the read limits (docs/engine.md §5.6, `MAX_TOOL_CALLS_PER_STEP`).
 */
export const MAX_QUEUED_STEERING_BYTES = Limits.MAX_DELIVERED_MESSAGE_BYTES

/** How many sessions' live contexts an engine keeps by default (`keptContexts`). */
export const SESSION_CONTEXTS = 256

/**
 * The default of `keptContextBytes`, the most bytes the kept contexts hold together, as the read
 * limits count them (stored JSON; an archived result at its placeholder's size): 32 MiB, four
 * contexts at the 8 MiB read limit. A
 * context's memory is a few times its JSON, so this bounds the cache's heap whatever the sessions'
 * sizes (docs/engine.md §5.4 "Kept context").
 */
export const SESSION_CONTEXT_BYTES = 32 * 1024 * 1024

/** The most `observationDelayMs` may be: nothing waits longer to be shown. */
export const MAX_OBSERVATION_DELAY_MS = 50

export const defaults: EngineOptions = Object.freeze({
  backoffBaseMs: Limits.BACKOFF_INITIAL_MS,
  backoffMaxMs: Limits.BACKOFF_MAX_MS,
  maxModelAttempts: Limits.MAX_MODEL_ATTEMPTS,
  observationMaxChars: Limits.MAX_DELTA_CHARS,
  observationDelayMs: 0,
  cancelGraceMs: 10_000,
  handoffWaitMs: 60_000,
  keptContexts: SESSION_CONTEXTS,
  keptContextBytes: SESSION_CONTEXT_BYTES,
})

/**
 * The longest wait an option may ask for: the most a Node.js timer holds (2^31−1 ms, about 24.8 days).
 * A longer or infinite grace would let `close()` wait forever on a tool that ignores its signal.
 */
export const MAX_WAIT_MS = 2 ** 31 - 1

/** The most sessions whose contexts an engine may keep (`keptContexts`). */
export const MAX_KEPT_CONTEXTS = 1_000_000

/** The most attempts per step: enough for any retry policy, finite so a step always ends. */
export const MAX_MODEL_ATTEMPTS = 1_000

/**
 * The most text one coalesced observation may hold: an eighth of the event limit, so the largest
 * observation fits in one event however its text escapes in JSON (at most 6 bytes a UTF-16 unit).
 */
export const MAX_OBSERVATION_CHARS = Limits.MAX_EVENT_BYTES / 8

/** Each option's integer range; `observationDelayMs` is any finite number, clamped below. */
const RANGES: Readonly<Record<Exclude<keyof EngineOptions, "observationDelayMs">, readonly [number, number]>> = {
  backoffBaseMs: [0, MAX_WAIT_MS],
  backoffMaxMs: [0, MAX_WAIT_MS],
  maxModelAttempts: [1, MAX_MODEL_ATTEMPTS],
  observationMaxChars: [1, MAX_OBSERVATION_CHARS],
  cancelGraceMs: [0, MAX_WAIT_MS],
  handoffWaitMs: [0, MAX_WAIT_MS],
  keptContexts: [0, MAX_KEPT_CONTEXTS],
  keptContextBytes: [0, Number.MAX_SAFE_INTEGER],
}

/**
 * The first option of `options` outside its range, as a message naming it, or `undefined`. A host
 * without types can pass anything: a string or `NaN` would reach the retry loop or a timer and
 * misbehave there (a string grace fails the cancelled run, `NaN` attempts still make one), so the
 * engine refuses it before it opens anything. An absent or `undefined` option takes its default.
 */
export const optionsProblem = (options: unknown): string | undefined => {
  if (options === undefined) return undefined
  if (typeof options !== "object" || options === null || Array.isArray(options)) return "engineOptions must be an object"
  const given = options as Readonly<Record<string, unknown>>
  // A misspelt option would be ignored and its default used without a word.
  const unknown = Object.keys(given).find((name) => !Object.hasOwn(defaults, name))
  if (unknown !== undefined) return `engineOptions has no option '${unknown}' (the options are ${Object.keys(defaults).join(", ")})`
  for (const [name, [min, max]] of Object.entries(RANGES)) {
    const value = given[name]
    if (value !== undefined && (typeof value !== "number" || !Number.isSafeInteger(value) || value < min || value > max)) {
      return `engineOptions.${name} must be an integer in ${min}..${max}`
    }
  }
  const delay = given["observationDelayMs"]
  if (delay !== undefined && (typeof delay !== "number" || !Number.isFinite(delay))) {
    return `engineOptions.observationDelayMs must be a finite number (clamped to 0..${MAX_OBSERVATION_DELAY_MS})`
  }
  return undefined
}

/**
 * The defaults with the given options over them (an `undefined` one keeps its default),
 * `observationDelayMs` clamped to 0..`MAX_OBSERVATION_DELAY_MS`.
 */
export const resolveOptions = (options: EngineOptionsInput): EngineOptions => {
  const given = Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined))
  const merged: EngineOptions = { ...defaults, ...given }
  return { ...merged, observationDelayMs: Math.min(MAX_OBSERVATION_DELAY_MS, Math.max(0, merged.observationDelayMs)) }
}
