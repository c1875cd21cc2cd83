/**
 * A run its caller holds alone (`run`, `compact`, a `start` not yet returned): a caller that stops
 * waiting drops it, so the run is cancelled, and the interruption ends once the run has, leaving the
 * session free (docs/engine.md §5.14).
 */
import { Effect } from "effect"

/** Cancels with `cancel`, then waits for `ended`, whatever it gives. */
export const cancelAndWait = (cancel: Effect.Effect<void>, ended: Effect.Effect<unknown, unknown>): Effect.Effect<void> =>
  Effect.andThen(cancel, Effect.ignore(ended))


/**
 * `start`, then its run's `wait`, the run cancelled (and waited for) when the caller is interrupted,
 * with no gap between the two where an interruption could drop the run uncancelled: once `start`
 * has given the run, an interruption waits for the wait.
 */
export const runHeldAlone = <A, E, R, E2>(
  start: Effect.Effect<{ readonly wait: Effect.Effect<A, E2>; readonly cancel: Effect.Effect<void> }, E, R>,
): Effect.Effect<A, E | E2, R> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(restore(start), (running) => Effect.onInterrupt(restore(running.wait), () => cancelAndWait(running.cancel, running.wait))),
  )
