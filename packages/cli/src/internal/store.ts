/**
 * Opening the event log from the CLI: read-only for `events`, `inspect` and `sessions` (no lease,
 * never creates, migrates or changes a file; a missing or non-maka file is exit 1), or as the writer
 * for `recover`. Every store failure becomes a one-line `CliError` with exit 1.
 */
import { EventLog } from "@maka/event-log"
import { Ids } from "@maka/tools"
import { Cause, Effect, Exit, Layer, ManagedRuntime } from "effect"
import * as fs from "node:fs"
import { CliError, ExitCode } from "./exit.ts"
import type { DatabaseTarget } from "./flags.ts"

export interface OpenLog {
  readonly log: EventLog.EventLogShape
  /** Runs an Effect of the log; a failure rejects with a `CliError`. */
  readonly run: <A, E>(effect: Effect.Effect<A, E, EventLog.EventLog | Ids.Ids>) => Promise<A>
  readonly close: () => Promise<void>
}

const storeError = (cause: Cause.Cause<unknown>): CliError => {
  const error = Cause.squash(cause)
  const message = error instanceof Error ? error.message : String(error)
  return new CliError(`store error: ${message}`, ExitCode.failed)
}

const open = async (layer: Layer.Layer<EventLog.EventLog, unknown>): Promise<OpenLog> => {
  const runtime = ManagedRuntime.make(Layer.merge(layer, Ids.layer))
  const run = async <A, E>(effect: Effect.Effect<A, E, EventLog.EventLog | Ids.Ids>): Promise<A> => {
    const exit = await runtime.runPromiseExit(effect)
    if (Exit.isSuccess(exit)) return exit.value
    throw storeError(exit.cause)
  }
  try {
    const log = await run(Effect.service(EventLog.EventLog))
    return { log, run, close: () => runtime.dispose() }
  } catch (error) {
    await runtime.dispose()
    throw error
  }
}

/** Opens the log without a lease and without changing it; a missing file is exit 1. */
export const openReadOnly = (target: DatabaseTarget): Promise<OpenLog> => {
  if (target.kind === "postgres") return open(EventLog.layerPostgres({ url: target.url }))
  if (!fs.existsSync(target.path)) {
    return Promise.reject(new CliError(`no maka log at ${target.path}; pass --db PATH of an existing log`, ExitCode.failed))
  }
  return open(EventLog.layerSqliteReadOnly(target.path))
}

/** Opens the log as its writer (the SQLite lease), for recovery. */
export const openWriter = (target: DatabaseTarget): Promise<OpenLog> =>
  open(target.kind === "postgres" ? EventLog.layerPostgres({ url: target.url }) : EventLog.layerSqlite({ path: target.path }))
