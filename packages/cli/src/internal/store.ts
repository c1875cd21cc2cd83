/**
 * Opening the event log from the CLI: read-only for `events`, `inspect` and `sessions` (no lease,
 * never creates, migrates or changes a file or a PostgreSQL schema; a missing or non-maka log is
 * exit 1), or as the writer for `recover`. Every store failure becomes a one-line `CliError` with exit 1.
 */
import { EventLog, EventLogError } from "@maka/event-log"
import type { Event } from "@maka/facts"
import { Ids } from "@maka/tools"
import { Cause, Effect, Exit, Layer, ManagedRuntime } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { defaults } from "../Configuration.ts"
import { CliError, ExitCode } from "./exit.ts"
import type { DatabaseTarget } from "./flags.ts"

export interface OpenLog {
  readonly log: EventLog.EventLogShape
  /** Runs an Effect of the log; a failure rejects with a `CliError`. */
  /** Runs `effect` on the log; an abort of `signal` interrupts it. */
  readonly run: <A, E>(effect: Effect.Effect<A, E, EventLog.EventLog | Ids.Ids>, signal?: AbortSignal) => Promise<A>
  readonly close: () => Promise<void>
}

/** How many events a read-only command reads at a time (`sessionEventPages`). */
const EVENTS_PAGE = 1_000

/**
 * A session's events, page by page in sequence order: what `maka events` and `maka inspect` read,
 * so a long session is never held whole (events a live run appends meanwhile may follow at the end).
 */
export async function* sessionEventPages(open: OpenLog, sessionId: string): AsyncGenerator<ReadonlyArray<Event.StoredEvent>> {
  let after = 0
  while (true) {
    const page = await open.run(open.log.events(sessionId, after, EVENTS_PAGE))
    if (page.length > 0) yield page
    if (page.length < EVENTS_PAGE) return
    after = page[page.length - 1]!.sequence
  }
}

/**
 * Why `maka recover` is refused beside a live writer: that process recovered the log when it opened
 * it (SQLite), so nothing is left to seal until it ends.
 */
export const WRITER_BUSY_HINT =
  "another process holds the log as its writer (a maka run, chat or resume, which recovered it when it opened it); recover once it has ended"

/**
 * A store failure as one line. With `refusalAsIs`, a refusal of the database (`UnsupportedDatabase`,
 * whose message names the redacted location and says why) is shown as it is, as the read-only
 * PostgreSQL open's "no maka log at …" (docs/cli.md §10.1).
 */
const storeError = (cause: Cause.Cause<unknown>, refusalAsIs: boolean): CliError => {
  const error = Cause.squash(cause)
  const message = error instanceof Error ? error.message : String(error)
  if (refusalAsIs && EventLogError.isEventLogError(error) && error.reason._tag === "UnsupportedDatabase") {
    return new CliError(message, ExitCode.failed)
  }
  if (EventLogError.isEventLogError(error) && error.reason._tag === "WriterBusy" && error.reason.lost !== true) {
    // `maka recover`, the one command that opens the log as its writer here.
    return new CliError(`store error: ${message}; ${WRITER_BUSY_HINT}`, ExitCode.failed)
  }
  return new CliError(`store error: ${message}`, ExitCode.failed)
}

const open = async (layer: Layer.Layer<EventLog.EventLog, unknown>, refusalAsIs = false): Promise<OpenLog> => {
  const runtime = ManagedRuntime.make(Layer.merge(layer, Ids.layer))
  const run = async <A, E>(effect: Effect.Effect<A, E, EventLog.EventLog | Ids.Ids>, signal?: AbortSignal): Promise<A> => {
    const exit = await runtime.runPromiseExit(effect, signal === undefined ? undefined : { signal })
    if (Exit.isSuccess(exit)) return exit.value
    throw storeError(exit.cause, false)
  }
  try {
    const opened = await runtime.runPromiseExit(Effect.service(EventLog.EventLog))
    if (!Exit.isSuccess(opened)) throw storeError(opened.cause, refusalAsIs)
    const log = opened.value
    return { log, run, close: () => runtime.dispose() }
  } catch (error) {
    await runtime.dispose()
    throw error
  }
}

/**
 * Opens the log without a lease and without changing it; a missing file, or a PostgreSQL database
 * without a maka log of the current version, is exit 1 (docs/cli.md §10.1). `given` says how the
 * command takes the log, for the refusal's way out (`--db PATH`, or `backup`'s `DB`).
 */
export const openReadOnly = (target: DatabaseTarget, given = "pass --db PATH of an existing log"): Promise<OpenLog> => {
  if (target.kind === "postgres") return open(EventLog.layerPostgresReadOnly({ url: target.url }), true)
  if (!fs.existsSync(target.path)) {
    return Promise.reject(new CliError(`no maka log at ${target.path}; ${given}`, ExitCode.failed))
  }
  return open(EventLog.layerSqliteReadOnly(target.path))
}

/** Opens the log as its writer (the SQLite lease), for recovery. */
export const openWriter = (target: DatabaseTarget): Promise<OpenLog> =>
  open(target.kind === "postgres" ? EventLog.layerPostgres({ url: target.url }) : EventLog.layerSqlite({ path: target.path }))

/** Why a folder cannot be made: the nearest existing ancestor that is no directory, or the system's reason. */
const folderProblem = (folder: string, error: unknown): string => {
  for (let current = folder; ; current = path.dirname(current)) {
    let stat: fs.Stats | undefined
    try {
      stat = fs.statSync(current, { throwIfNoEntry: false })
    } catch {
      stat = undefined // ENOTDIR: a file further up; the walk gets to it
    }
    if (stat !== undefined) {
      if (!stat.isDirectory()) return `${current} is not a directory`
      break
    }
    if (path.dirname(current) === current) break
  }
  const code = (error as { readonly code?: unknown } | undefined)?.code
  if (code === "EACCES" || code === "EPERM") return "permission denied"
  if (code === "EROFS") return "read-only file system"
  return error instanceof Error ? error.message : String(error)
}

/**
 * Makes `folder` and the folders above it that are missing, one by one, and returns the first made.
 * Not `mkdirSync`'s `recursive`: on Node 20 it loops for ever, deaf to signals, where a parent that
 * exists refuses a child (`ENOENT` under /proc or /sys); made one by one, that refusal is an error.
 */
const makeFolders = (folder: string): string | undefined => {
  const missing: Array<string> = []
  for (let current = folder; !fs.existsSync(current); current = path.dirname(current)) {
    missing.unshift(current)
    if (path.dirname(current) === current) break
  }
  for (const each of missing) {
    try {
      fs.mkdirSync(each)
    } catch (error) {
      // Made meanwhile by another process: it is there, as wanted.
      if ((error as { readonly code?: unknown }).code !== "EEXIST") throw error
    }
  }
  if (missing.length === 0 && !fs.statSync(folder).isDirectory()) {
    throw Object.assign(new Error(`${folder} is not a directory`), { code: "ENOTDIR" })
  }
  return missing[0]
}

/**
 * Makes the folder of the SQLite log a writing command opens. With `defaultUnder` (the current
 * directory), a log that does not exist is created only at the default path there: a missing `--db` /
 * `MAKA_DB` file is most likely a typo. Returns what removes the folders it made, while they are empty.
 */
export const prepareLogFolder = (target: DatabaseTarget, options: { readonly defaultUnder?: string } = {}): (() => void) => {
  if (target.kind !== "sqlite") return () => undefined
  const { defaultUnder } = options
  if (defaultUnder !== undefined && !fs.existsSync(target.path) && target.path !== path.resolve(defaultUnder, defaults.database)) {
    throw new CliError(`no maka log at ${target.path}; pass --db PATH of an existing log`, ExitCode.failed)
  }
  const folder = path.dirname(target.path)
  let made: string | undefined
  try {
    made = makeFolders(folder)
  } catch (error) {
    throw new CliError(`store error: cannot make the folder ${folder} of the log: ${folderProblem(folder, error)}`, ExitCode.failed)
  }
  // Undoes the folders made here while they are still empty: a log that failed to open leaves none.
  return () => {
    if (made === undefined) return
    for (let current = folder; ; current = path.dirname(current)) {
      try {
        fs.rmdirSync(current)
      } catch {
        return
      }
      if (current === made) return
    }
  }
}
