/**
 * A run its caller holds alone (`run`, `compact`, a `start` not yet returned): a caller that stops
 * waiting drops it, so the run is cancelled, and the interruption ends once the run has, leaving the
 * session free (docs/engine.md §5.14).
 */
import { Effect } from "effect"

/** Cancels with `cancel`, then waits for `ended`, whatever it gives. */
export const cancelAndWait = (cancel: Effect.Effect<void>, ended: Effect.Effect<unknown, unknown>): Effect.Effect<void> =>
  Effect.andThen(cancel, Effect.ignore(ended))

/** `running.wait`, the run cancelled (and waited for) when the caller is interrupted. */
export const waitHeldAlone = <A, E>(running: { readonly wait: Effect.Effect<A, E>; readonly cancel: Effect.Effect<void> }): Effect.Effect<A, E> =>
  Effect.onInterrupt(running.wait, () => cancelAndWait(running.cancel, running.wait))
