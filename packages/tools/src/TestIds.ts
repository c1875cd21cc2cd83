/**
 * Deterministic `Ids` for tests (`@maka/tools/testing`): the n-th id is
 * `00000000-0000-4000-9000-<n as 12 hex digits>`, a valid lowercase UUIDv4 whose variant digit (9)
 * keeps it apart from `@maka/testkit`'s `FactBuilders.eventId(n)` (variant 8).
 */
import { Effect, Layer } from "effect"
import { Ids } from "./Ids.ts"

export const id = (n: number): string => `00000000-0000-4000-9000-${n.toString(16).padStart(12, "0")}`

/** Ids `id(first)`, `id(first + 1)`, … */
export const layer = (first = 1): Layer.Layer<Ids> =>
  Layer.sync(Ids, () => {
    let next = first
    return { next: Effect.sync(() => id(next++)) }
  })
