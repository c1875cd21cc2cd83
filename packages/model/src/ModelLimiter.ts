/**
 * The model concurrency limiter (docs/model.md §4.2): `size` permits shared by every stream of the models
 * built with it. A foreground stream waits (interruptibly) for a permit; a *background reservation*
 * takes two permits atomically and gives one back at once, so it succeeds only while it leaves a slot
 * free for the foreground. A reservation serves one summary job, one stream at a time.
 */
import { Effect, Option, Scope, Semaphore } from "effect"

/** A permit held for a background job; its streams run one after another on it. */
export interface BackgroundReservation {
  /** Held by the reservation's current stream until that stream has drained. */
  readonly turn: Semaphore.Semaphore
}

export interface ModelLimiter {
  readonly size: number
  /** One permit for the life of the current scope; waits until one is free. */
  readonly acquire: Effect.Effect<void, never, Scope.Scope>
  /**
   * A background reservation for the life of the current scope, or none when fewer than two permits
   * are free (the foreground always keeps a slot).
   */
  readonly tryReserveBackground: Effect.Effect<Option.Option<BackgroundReservation>, never, Scope.Scope>
}

/** A limiter of `size` permits (a safe integer ≥ 1). */
export const make = (size: number): Effect.Effect<ModelLimiter> =>
  Effect.sync(() => makeUnsafe(size))

export const makeUnsafe = (size: number): ModelLimiter => {
  if (!Number.isSafeInteger(size) || size < 1) throw new RangeError(`model concurrency must be ≥ 1, got ${size}`)
  const permits = Semaphore.makeUnsafe(size)
  return {
    size,
    acquire: Semaphore.takeScoped(permits, 1),
    tryReserveBackground: Effect.uninterruptible(
      Effect.gen(function* () {
        const taken = yield* Semaphore.takeIfAvailable(permits, 2)
        if (!taken) return Option.none<BackgroundReservation>()
        yield* Semaphore.release(permits, 1)
        yield* Effect.addFinalizer(() => Semaphore.release(permits, 1))
        return Option.some<BackgroundReservation>({ turn: Semaphore.makeUnsafe(1) })
      }),
    ),
  }
}

/** The permit a stream holds: a foreground permit, or its reservation's turn. */
export const acquireFor = (
  limiter: ModelLimiter,
  reservation: BackgroundReservation | undefined,
): Effect.Effect<void, never, Scope.Scope> =>
  reservation === undefined ? limiter.acquire : Semaphore.takeScoped(reservation.turn, 1)
