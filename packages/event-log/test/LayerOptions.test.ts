/**
 * The layers' options, as a host without types passes them: what is no options object, or a path or
 * URL that is no non-empty string, is refused as `UnsupportedDatabase` naming it, before anything is
 * opened (no file made in the working directory, no connection tried), never a bare `TypeError`.
 */
import { Cause, Effect, Exit, type Layer } from "effect"
import * as process from "node:process"
import { describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import * as EventLogError from "../src/EventLogError.ts"
import { listing } from "./fixtures/storage.ts"

const untyped = <A>(value: unknown): A => value as A

const refusal = async (layer: Layer.Layer<EventLog.EventLog, EventLogError.EventLogError>) => {
  const exit = await Effect.runPromiseExit(Effect.provide(
      Effect.gen(function* () {
        return (yield* EventLog.EventLog).location
      }),
      layer,
    ),)
  if (Exit.isSuccess(exit)) throw new Error(`opened ${exit.value}`)
  const error = Cause.squash(exit.cause)
  if (!EventLogError.isEventLogError(error)) throw new Error(`not an EventLogError: ${String(error)}`)
  return error
}

describe("the layers' options", () => {
  it("refuses options that are no object, and a path or URL that is no non-empty string, creating nothing", async () => {
    const before = listing(process.cwd())
    const cases: ReadonlyArray<readonly [Layer.Layer<EventLog.EventLog, EventLogError.EventLogError>, string]> = [
      [EventLog.layerSqlite(untyped(null)), "layerSqlite takes an options object, not null"],
      [EventLog.layerSqlite(untyped("events.sqlite")), "layerSqlite takes an options object, not string"],
      [EventLog.layerSqlite(untyped({})), "path must be a non-empty string, not undefined"],
      [EventLog.layerSqlite(untyped({ path: 5 })), "path must be a non-empty string, not number"],
      [EventLog.layerSqlite({ path: "" }), "path must be a non-empty string, not an empty string"],
      [EventLog.layerSqliteReadOnly(untyped(null)), "path must be a non-empty string, not null"],
      [EventLog.layerPostgres(untyped(undefined)), "layerPostgres takes an options object, not undefined"],
      [EventLog.layerPostgres(untyped({ url: 5 })), "url must be a non-empty string, not number"],
      [EventLog.layerPostgresReadOnly(untyped({})), "url must be a non-empty string, not undefined"],
    ]
    for (const [layer, message] of cases) {
      const error = await refusal(layer)
      expect(error.reason._tag).toBe("UnsupportedDatabase")
      expect(error.message).toContain(message)
    }
    expect(listing(process.cwd())).toEqual(before)
  })
})
