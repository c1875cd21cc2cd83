/**
 * `Ids`, where the journal and the workspace marker take fresh lowercase UUIDv4s: event ids of the
 * facts they write and the UUID of a new workspace. `Ids.layer` draws them from `node:crypto`; tests
 * pin them with `@maka/tools/testing`.
 */
import { randomUUID } from "node:crypto"
import { Context, Effect, Layer } from "effect"

export interface IdsShape {
  /** A fresh lowercase UUIDv4. */
  readonly next: Effect.Effect<string>
}

export class Ids extends Context.Service<Ids, IdsShape>()("@maka/tools/Ids") {}

/** The default: random UUIDv4s from `node:crypto`. */
export const layer: Layer.Layer<Ids> = Layer.succeed(Ids, { next: Effect.sync(() => randomUUID()) })

/** A layer over any generator (it must return lowercase UUIDv4s). */
export const layerFrom = (next: () => string): Layer.Layer<Ids> => Layer.succeed(Ids, { next: Effect.sync(next) })

/** A fresh id from the current `Ids`. */
export const next: Effect.Effect<string, never, Ids> = Ids.use((ids) => ids.next)
