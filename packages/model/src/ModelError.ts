/**
 * `ModelError`, the one error of `@maka/model` (docs/architecture.md §6, docs/log-format.md §2.7, docs/model.md §4.5). Callers switch
 * on `reason._tag`: `ContextOverflow`, `Provider` (with its own `reason`), `TimedOut`, `Adapter`,
 * `Cancelled`. It is not a fact: the engine turns it into `model_interrupted` in one place. Messages
 * are short summaries that never carry headers or credentials.
 */
import { Data } from "effect"
import { Canonical, Limits } from "@maka/facts"

/** Why a provider failed: the first four are transient, `rejected` and `auth` are never retried. */
export type ProviderReason = "network" | "rate_limit" | "provider_unavailable" | "stream_truncated" | "rejected" | "auth"

export const TRANSIENT_PROVIDER_REASONS: ReadonlySet<ProviderReason> = new Set([
  "network",
  "rate_limit",
  "provider_unavailable",
  "stream_truncated",
])

/**
 * The request did not fit the model's context window; `observedOutput` tells whether content was
 * shown, `detail` what the provider said when it refused (status, code, start of its message).
 */
export class ContextOverflow extends Data.TaggedError("ContextOverflow")<{
  readonly observedOutput: boolean
  readonly detail?: string | undefined
}> {
  override get message(): string {
    return this.detail === undefined ? "model context window exceeded" : `model context window exceeded (${this.detail})`
  }
}

/** A provider or transport failure; `replaySafe` says whether re-sending the same request is safe. */
export class Provider extends Data.TaggedError("Provider")<{
  readonly reason: ProviderReason
  readonly message: string
  readonly status?: number | undefined
  readonly replaySafe: boolean
  readonly retryAfterMs?: number | undefined
}> {}

/** No byte arrived within the idle timeout, or the request outlived its deadline (`deadlineMs`). */
export class TimedOut extends Data.TaggedError("TimedOut")<{
  readonly deadlineMs?: number | undefined
}> {
  override get message(): string {
    return this.deadlineMs === undefined
      ? "model request timed out waiting for data"
      : `model request exceeded its deadline of ${this.deadlineMs} ms`
  }
}

/** The provider's output broke a rule of the stream vocabulary, or a local limit was exceeded. */
export class Adapter extends Data.TaggedError("Adapter")<{
  readonly message: string
}> {}

/** The request was aborted by its caller. */
export class Cancelled extends Data.TaggedError("Cancelled")<{}> {
  override get message(): string {
    return "model request cancelled"
  }
}

export type ModelErrorReason = ContextOverflow | Provider | TimedOut | Adapter | Cancelled

export class ModelError extends Data.TaggedError("ModelError")<{
  readonly reason: ModelErrorReason
}> {
  override get message(): string {
    return `${this.reason._tag}: ${this.reason.message}`
  }

  /** `isRetryable(this)`: the one retry predicate. */
  get isRetryable(): boolean {
    return isRetryable(this)
  }
}

/**
 * THE retry predicate of maka (docs/model.md §4.5, docs/engine.md §5.6): a `Provider` failure whose reason is
 * transient (`network`, `rate_limit`, `provider_unavailable`, `stream_truncated`) and that is still
 * replay-safe. The engine asks it; nothing else re-derives it.
 */
export const isRetryable = (error: ModelError): boolean =>
  error.reason._tag === "Provider" && error.reason.replaySafe && TRANSIENT_PROVIDER_REASONS.has(error.reason.reason)

/** The delay the provider asked for (`Retry-After`), for a retryable failure only. */
export const retryAfterMs = (error: ModelError): number | undefined =>
  isRetryable(error) && error.reason._tag === "Provider" ? error.reason.retryAfterMs : undefined

/** A provider message cut to 4 KiB of UTF-8 at a character boundary. */
export const providerMessage = (text: string): string => Canonical.truncateUtf8(text, Limits.MAX_PROVIDER_MESSAGE_BYTES)

export const contextOverflow = (observedOutput: boolean, detail?: string): ModelError =>
  new ModelError({ reason: new ContextOverflow(detail === undefined ? { observedOutput } : { observedOutput, detail }) })

export const provider = (options: {
  readonly reason: ProviderReason
  readonly message: string
  readonly status?: number | undefined
  readonly replaySafe: boolean
  readonly retryAfterMs?: number | undefined
}): ModelError =>
  new ModelError({
    reason: new Provider({
      reason: options.reason,
      message: providerMessage(options.message),
      replaySafe: options.reason === "rejected" || options.reason === "auth" ? false : options.replaySafe,
      ...(options.status === undefined ? {} : { status: options.status }),
      ...(options.retryAfterMs === undefined ? {} : { retryAfterMs: options.retryAfterMs }),
    }),
  })

export const timedOut = (): ModelError => new ModelError({ reason: new TimedOut({}) })

/** The request outlived the host's overall deadline (`ProviderConfig.requestDeadlineMs`). */
export const deadlineExceeded = (deadlineMs: number): ModelError => new ModelError({ reason: new TimedOut({ deadlineMs }) })

export const adapter = (message: string): ModelError => new ModelError({ reason: new Adapter({ message }) })

export const cancelled = (): ModelError => new ModelError({ reason: new Cancelled() })

/** Adapter messages fixed by docs/model.md §4.2–§4.4. */
export const AdapterMessage = Object.freeze({
  unsupportedEvent: "unsupported provider event",
  eventAfterFinish: "event after model finish",
  endedWithoutFinish: "model stream ended without finish",
  invalidToolInput: "invalid tool call input",
  invalidToolCallId: "invalid tool call id",
  invalidToolCallName: "invalid tool call name",
  outputTooLarge: "model output exceeds 64 MiB",
  openPart: "model stream finished with an open part",
  /** A decoder of the adapter threw on a chunk: a defect, reported as a failure rather than a hang. */
  decoderFailed: "model stream could not be decoded",
  notCompleted: (reason: string): string => `model did not complete: ${reason}`,
} as const)
