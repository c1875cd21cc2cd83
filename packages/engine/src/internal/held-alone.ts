/**
 * A run its caller holds alone (`run`, `compact`, a `start` not yet returned): a caller that stops
 * waiting drops it, so the run is cancelled, and the interruption ends once the run has, leaving the
 * session free (docs/engine.md §5.14).
 */
import { Effect } from "effect"

/** Cancels with `cancel`, then waits for `ended`, whatever it gives. */
export const cancelAndWait = (cancel: Effect.Effect<void>, ended: Effect.Effect<unknown, unknown>): Effect.Effect<void> =>
  Effect.andThen(cancel, Effect.ignore(ended))
