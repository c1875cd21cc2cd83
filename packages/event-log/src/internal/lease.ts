/**
 * The single-writer lease of an SQLite log (SEMANTICS.md §3.1): an exclusive SQLite lock on the
 * sibling file `<database>.writer.lock`, taken without waiting and held until `release()`. The
 * operating system drops it when the process dies, so a writer killed with SIGKILL never blocks the
 * next one. The lock file is never deleted. Also the canonicalisation of database paths.
 */
import BetterSqlite3 from "better-sqlite3"
import * as fs from "node:fs"
import * as path from "node:path"
import * as EventLogError from "../EventLogError.ts"
import { errorCode, storeError } from "./store-error.ts"

export const LOCK_SUFFIX = ".writer.lock"

export interface Lease {
  /** The canonical database path the lease guards. */
  readonly databasePath: string
  readonly lockPath: string
  readonly isHeld: () => boolean
  /** Releases the lock (closes its connection); later calls do nothing. */
  readonly release: () => void
}

const unsupported = (message: string): EventLogError.EventLogError =>
  EventLogError.make({ _tag: "UnsupportedDatabase", message })

const io = (message: string): EventLogError.EventLogError => EventLogError.make({ _tag: "Io", message })

const lstatOrUndefined = (file: string): fs.Stats | undefined => {
  try {
    return fs.lstatSync(file)
  } catch (error) {
    if (errorCode(error) === "ENOENT") return undefined
    throw storeError(error, file)
  }
}

/**
 * The canonical path of a database file: symlinks resolved (a dangling one is refused), the
 * directory's real path plus the basename when the file does not exist yet. An existing file must
 * be a regular file with exactly one link: a hard-linked database would split its WAL sidecars.
 */
export const canonicalDatabasePath = (databasePath: string): string => {
  const absolute = path.resolve(databasePath)
  const stats = lstatOrUndefined(absolute)
  let canonical: string
  if (stats?.isSymbolicLink() === true) {
    try {
      canonical = fs.realpathSync(absolute)
    } catch (error) {
      const code = errorCode(error)
      if (code === "ENOENT" || code === "ELOOP") {
        throw unsupported(`${absolute} is a dangling symbolic link; refusing to open it as an event log`)
      }
      throw storeError(error, absolute)
    }
  } else {
    const directory = path.dirname(absolute)
    try {
      canonical = path.join(fs.realpathSync(directory), path.basename(absolute))
    } catch (error) {
      if (errorCode(error) === "ENOENT") throw io(`${absolute}: the directory ${directory} does not exist`)
      throw storeError(error, absolute)
    }
  }
  const target = lstatOrUndefined(canonical)
  if (target !== undefined) {
    if (!target.isFile()) throw unsupported(`${canonical} is not a regular file; refusing to open it as an event log`)
    if (target.nlink !== 1) {
      throw unsupported(
        `${canonical} has ${target.nlink} hard links; an event log must have exactly one (its WAL files would be split)`,
      )
    }
  }
  return canonical
}

/**
 * Takes the writer lease of the database at `canonicalPath` (already canonical) or fails at once
 * with `WriterBusy`, also when another connection of this process holds it. The lock connection
 * keeps its journal in memory, so a killed holder leaves no `-journal` file beside the lock file.
 */
export const acquireLease = (canonicalPath: string): Lease => {
  const lockPath = `${canonicalPath}${LOCK_SUFFIX}`
  let connection: BetterSqlite3.Database | undefined
  try {
    connection = new BetterSqlite3(lockPath, { timeout: 0 })
    connection.pragma("journal_mode = MEMORY")
    connection.pragma("locking_mode = EXCLUSIVE")
    connection.exec("BEGIN EXCLUSIVE")
  } catch (error) {
    connection?.close()
    const code = errorCode(error)
    if (code === "SQLITE_BUSY" || code === "SQLITE_LOCKED") {
      throw EventLogError.make({ _tag: "WriterBusy", path: canonicalPath })
    }
    throw storeError(error, lockPath)
  }
  const held = connection
  return {
    databasePath: canonicalPath,
    lockPath,
    isHeld: () => held.open,
    release: () => {
      if (held.open) held.close()
    },
  }
}
