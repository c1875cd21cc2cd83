/**
 * `Cancellation`, how a caller asks a journal batch to stop (docs/engine.md §5.14): calls not yet
 * dispatched are rejected `cancelled`, a dispatched effect is let finish (its `AbortSignal` is
 * aborted, which a tool may honour) and is settled with what it returns.
 */
import { Deferred, Effect } from "effect"

export interface Cancellation {
  /** Whether cancellation has been requested; never blocks. */
  readonly isRequested: Effect.Effect<boolean>
  /** Completes once cancellation is requested (never, for `none`). */
  readonly requested: Effect.Effect<void>
}

/** A cancellation that is never requested. */
export const none: Cancellation = { isRequested: Effect.succeed(false), requested: Effect.never }

/** A cancellation backed by a `Deferred`: it is requested once the deferred completes. */
export const fromDeferred = <E>(deferred: Deferred.Deferred<void, E>): Cancellation => ({
  isRequested: Deferred.isDone(deferred),
  requested: Effect.ignore(Deferred.await(deferred)),
})

/** A cancellation whose `cancel` requests it; cancelling twice is harmless. */
export interface Controller {
  readonly cancellation: Cancellation
  readonly cancel: Effect.Effect<void>
}

export const make: Effect.Effect<Controller> = Effect.map(Deferred.make<void>(), (deferred) => ({
  cancellation: fromDeferred(deferred),
  cancel: Effect.asVoid(Deferred.succeed(deferred, undefined)),
}))

/** A cancellation requested when `signal` aborts (for callers at a Promise edge). */
export const fromSignal = (signal: AbortSignal): Cancellation => ({
  isRequested: Effect.sync(() => signal.aborted),
  requested: Effect.callback<void>((resume) => {
    if (signal.aborted) return resume(Effect.void)
    const onAbort = () => resume(Effect.void)
    signal.addEventListener("abort", onAbort, { once: true })
    return Effect.sync(() => signal.removeEventListener("abort", onAbort))
  }),
})
