/**
 * Maps what the drivers throw (better-sqlite3's `SqliteError`, pg's `DatabaseError`, Node system
 * errors) to `EventLogError` reasons: a file that is not SQLite is `UnsupportedDatabase`, disk and
 * file-system failures are `Io`, everything else the store reports is `Database`.
 */
import * as EventLogError from "../EventLogError.ts"

/** The `code` of a driver or system error (`SQLITE_BUSY`, `23505`, `ENOENT`), if it has one. */
export const errorCode = (error: unknown): string | undefined =>
  typeof error === "object" && error !== null && "code" in error && typeof error.code === "string"
    ? error.code
    : undefined

export const errorMessage = (error: unknown): string =>
  error instanceof Error ? error.message : typeof error === "string" ? error : String(error)

const IO_SQLITE_CODES = ["SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_FULL", "SQLITE_READONLY", "SQLITE_PERM"]

const isIoCode = (code: string): boolean =>
  IO_SQLITE_CODES.some((prefix) => code === prefix || code.startsWith(`${prefix}_`)) || /^E[A-Z]+$/.test(code)

/** `cause` as an `EventLogError`; an `EventLogError` is returned unchanged. */
export const storeError = (cause: unknown, location?: string): EventLogError.EventLogError => {
  if (EventLogError.isEventLogError(cause)) return cause
  const code = errorCode(cause)
  const message = `${location === undefined ? "" : `${location}: `}${errorMessage(cause)}`
  if (code === "SQLITE_NOTADB") {
    return EventLogError.make({ _tag: "UnsupportedDatabase", message: `${message} (not a maka event log)` })
  }
  if (code !== undefined && isIoCode(code)) return EventLogError.make({ _tag: "Io", message })
  return EventLogError.make({ _tag: "Database", message })
}
