/**
 * `@maka/event-log/testing`: an `EventLog` over a SQLite file in a fresh temporary folder, removed
 * when the scope closes. Fact builders for tests live in `@maka/testkit`.
 */
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { EventSink } from "@maka/facts"
import * as EventLog from "./EventLog.ts"
import type * as EventLogError from "./EventLogError.ts"
import { openSqlite } from "./internal/open-sqlite.ts"

/** A temporary folder for the life of the scope. */
export const temporaryDirectory = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "maka-log-"))),
  (directory) => Effect.sync(() => fs.rmSync(directory, { recursive: true, force: true })),
)

/** Opens an `EventLog` on `events.sqlite` in a temporary folder; returns the log and the file path. */
export const makeTemporary = (options: { readonly synchronous?: "FULL" | "NORMAL" } = {}) =>
  Effect.gen(function* () {
    const directory = yield* temporaryDirectory
    const file = path.join(directory, "events.sqlite")
    const log = yield* EventLog.fromDatabase(() =>
      openSqlite(file, options.synchronous === undefined ? {} : { synchronous: options.synchronous }),
    )
    return { log, file, directory }
  })

/** The `EventLog` layer over a temporary SQLite file (`synchronous=NORMAL` for speed unless told otherwise). */
export const layer = (options: { readonly synchronous?: "FULL" | "NORMAL" } = {}) =>
  Layer.effect(
    EventLog.EventLog,
    Effect.map(makeTemporary({ synchronous: options.synchronous ?? "NORMAL" }), ({ log }) => log),
  )

/** The temporary log plus its `EventSink`. */
export const layerWithSink = (
  options: { readonly synchronous?: "FULL" | "NORMAL" } = {},
): Layer.Layer<EventLog.EventLog | EventSink.EventSink, EventLogError.EventLogError> =>
  Layer.provideMerge(EventLog.layerEventSink, layer(options))
export * as EventLog from "./EventLog.ts"

/** The process id of this process's lease keeper while one runs (for tests that end it). */
export { keeperProcessId } from "./internal/lease.ts"
