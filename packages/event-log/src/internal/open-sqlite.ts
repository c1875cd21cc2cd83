/**
 * Opens an SQLite event log in the open order of docs/log-format.md §3.1. A writer first refuses what
 * it can tell is no maka log without creating anything beside the file (so it leaves no lock file
 * there either), then takes the lease, reads the file header without SQLite (another application's
 * id, or not SQLite at all, is refused before anything opens it; a file without an id that has a
 * `-wal` or `-journal` is classified on a copy), refuses anything that is neither empty nor a maka log
 * of a known version while the file is still untouched (`journal_mode=WAL` rewrites a foreign file's
 * header), then sets WAL, `synchronous` and foreign keys, migrates in one transaction and stamps
 * maka's application id. A read-only open takes no lease and never creates, migrates or changes the
 * database. `":memory:"` opens a private in-memory log with no file and no lease. `backup` copies a
 * live log with SQLite's backup API.
 */
import BetterSqlite3 from "better-sqlite3"
import { Kysely } from "kysely"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import * as EventLogError from "../EventLogError.ts"
import type { Database } from "./database.ts"
import { makeDatabase, type TransactionRunner } from "./database-handle.ts"
import { acquireLease, canonicalDatabasePath, type Lease, LOCK_SUFFIX, lstatOrUndefined, sidecarOf } from "./lease.ts"
import { classifySchema, LATEST_VERSION, migrate, type SchemaState, type SchemaSurvey } from "./migrations.ts"
import { SqliteDialect, sqliteTransaction } from "./sqlite-driver.ts"
import { errorCode, storeError } from "./store-error.ts"
import { isSynchronous, SYNCHRONOUS_LEVELS, type Synchronous } from "./synchronous.ts"
import type { Tables } from "./tables.ts"

export { isSynchronous, SYNCHRONOUS_LEVELS, type Synchronous } from "./synchronous.ts"

export interface SqliteOptions {
  /** Inspection: no lease, the file must exist and be a maka log of the current version. */
  readonly readOnly?: boolean | undefined
  /** `FULL` (default) is durable across power loss; `NORMAL` across process crashes only (docs/architecture.md §12). */
  readonly synchronous?: Synchronous | undefined
  /** Milliseconds a statement waits for a lock held by another connection (default 5,000). */
  readonly busyTimeout?: number | undefined
}

/**
 * `pageSize` is the page size of a log this code creates (an existing file keeps its own). Every
 * commit writes each page it dirties whole into the WAL, and a step's commits dirty one leaf in each
 * index for a few dozen bytes of entries (the event id index, keyed by random UUIDs, one leaf per
 * event): 1,024-byte pages write about 30 % fewer WAL bytes per step than 2,048 and 70 % fewer than
 * SQLite's 4,096, and reads of a session measured no slower; an event over a page continues on
 * overflow pages (docs/architecture.md §12).
 *
 * `walAutocheckpoint` is the WAL's size in pages that makes a commit checkpoint it: 4,000 pages of
 * 1,024 bytes, the 4 MiB SQLite's own default of 1,000 pages gives at its default page size. A
 * checkpoint writes each page once however many commits wrote it (a step's index leaves are written
 * again by the next steps), so counted in pages the default would checkpoint four times as often
 * and write the same leaves back more often.
 */
export const SQLITE_DEFAULTS = Object.freeze({
  synchronous: "FULL" satisfies Synchronous,
  busyTimeout: 5_000,
  pageSize: 1_024,
  walAutocheckpoint: 4_000,
})

/** The bytes of a WAL frame's header, and of the WAL file's own. */
const WAL_FRAME_HEADER = 24
const WAL_FILE_HEADER = 32

/**
 * The size a WAL is cut back to when it starts over (`journal_size_limit`; docs/log-format.md §3.2):
 * the size it reaches at the checkpoint threshold, so a WAL a reader grew past it shrinks at its next
 * restart, and one of normal use loses at most the part of a commit that went past the threshold.
 */
export const walSizeLimit = (pageSize: number): number =>
  WAL_FILE_HEADER + SQLITE_DEFAULTS.walAutocheckpoint * (pageSize + WAL_FRAME_HEADER)

const textField = (row: unknown, key: string): string | undefined => {
  if (typeof row !== "object" || row === null || !(key in row)) return undefined
  const value: unknown = Reflect.get(row, key)
  return typeof value === "string" ? value : undefined
}

const field = (row: unknown, key: string): unknown =>
  typeof row === "object" && row !== null && key in row ? Reflect.get(row, key) : undefined

/**
 * Reads what the open-order check needs with plain `SELECT`s (no pragma statement, no write):
 * the user objects of `sqlite_master`, the columns of `schema_migrations` and its versions.
 */
export const surveySqlite = (connection: BetterSqlite3.Database, location: string): SchemaSurvey => {
  const objects = connection
    .prepare("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")
    .all()
  const names = objects.flatMap((row) => {
    const name = textField(row, "name")
    return name === undefined ? [] : [name]
  })
  const tables = objects.flatMap((row) => {
    const name = textField(row, "name")
    return name !== undefined && textField(row, "type") === "table" ? [name] : []
  })
  const migrationColumns = tables.includes("schema_migrations")
    ? connection
        .prepare("SELECT name FROM pragma_table_info('schema_migrations')")
        .all()
        .flatMap((row) => {
          const name = textField(row, "name")
          return name === undefined ? [] : [name]
        })
    : []
  const versions = migrationColumns.includes("version")
    ? connection
        .prepare("SELECT version FROM schema_migrations")
        .all()
        .map((row) => field(row, "version"))
    : []
  return { location, objects: names, tables, migrationColumns, versions }
}

const unsupported = (message: string): EventLogError.EventLogError =>
  EventLogError.make({ _tag: "UnsupportedDatabase", message })

const isWritable = (file: string): boolean => {
  try {
    fs.accessSync(file, fs.constants.W_OK)
    return true
  } catch {
    return false
  }
}

/**
 * A writer needs to write the log and, beside it, its `-wal`, `-shm` and lock files: a read-only
 * file or folder is refused before anything is opened, naming what to change (SQLite itself would
 * open a read-only file for reading and refuse only the first write, without naming the file).
 */
const requireWritable = (file: string): void => {
  const folder = nodePath.dirname(file)
  if (!isWritable(folder)) {
    throw io(`${file}: its folder ${folder} is not writable; a writer needs to make the log's -wal, -shm and lock files there`)
  }
  if (fs.existsSync(file) && !isWritable(file)) throw io(`${file} is read-only; a writer needs to write it`)
  // Sidecars left by another user (a reader's -wal and -shm, a lock file made by another account).
  for (const sidecar of [`${file}-wal`, `${file}-shm`, `${file}${LOCK_SUFFIX}`]) {
    if (fs.existsSync(sidecar) && !isWritable(sidecar)) {
      throw io(`${sidecar} is not writable by this user; a writer of ${file} needs to write it`)
    }
  }
}

/**
 * Refuses a sidecar another user may have planted: SQLite reads a `-wal` (or a hot `-journal`) into
 * the log it opens, so one made by another account beside a log in a folder every user can write (a
 * sticky `/tmp`) would make history of theirs the log's. A sidecar of the log's owner or of this user
 * is the log's own; so is any in a folder others cannot write, whose writers the folder's owner chose
 * (a log a group of users shares).
 */
const refuseForeignSidecars = (file: string): void => {
  const euid = process.geteuid?.()
  const log = lstatOrUndefined(file)
  const folder = lstatOrUndefined(nodePath.dirname(file))
  if (euid === undefined || log === undefined || folder === undefined || (folder.mode & 0o002) === 0) return
  // Only what SQLite would read in: a `-shm` is rebuilt from the `-wal`, and an empty `-wal` (a
  // reader of another account that ended without its close) holds nothing.
  for (const suffix of ["-wal", "-journal"]) {
    const sidecar = lstatOrUndefined(`${file}${suffix}`)
    if (sidecar === undefined || sidecar.size === 0 || sidecar.uid === log.uid || sidecar.uid === euid) continue
    throw io(
      `${file}${suffix} belongs to another user (uid ${sidecar.uid}) than the log (uid ${log.uid}), in a folder every user ` +
        "can write: SQLite would read it into the log; keep the log in a folder of its own",
    )
  }
}

/**
 * A reader of a cleanly closed log needs its folder writable: SQLite makes the log's `-wal` and
 * `-shm` there, and would refuse with "attempt to write a readonly database" naming nothing.
 */
const requireReadable = (file: string): void => {
  const folder = nodePath.dirname(file)
  if (isWritable(folder) || (fs.existsSync(`${file}-wal`) && fs.existsSync(`${file}-shm`))) return
  throw io(`${file}: reading the log needs its folder ${folder} to be writable; SQLite makes the log's -wal and -shm files there`)
}

const io = (message: string): EventLogError.EventLogError => EventLogError.make({ _tag: "Io", message })

const fileSize = (file: string): number | undefined => {
  try {
    return fs.statSync(file).size
  } catch {
    return undefined
  }
}

/** The schema state of an opened, still untouched file (a zero-byte file is empty). */
const inspect = (connection: BetterSqlite3.Database, file: string): SchemaState => {
  if ((fileSize(file) ?? 0) === 0) return { kind: "empty" }
  try {
    return classifySchema(surveySqlite(connection, file))
  } catch (error) {
    throw storeError(error, file)
  }
}

/** maka's SQLite application id (`PRAGMA application_id`, header offset 68): `"maka"` in ASCII. */
export const MAKA_APPLICATION_ID = 0x6d616b61

const SQLITE_MAGIC = Buffer.from("SQLite format 3\u0000", "latin1")
const HEADER_BYTES = 100

type Header =
  | { readonly kind: "empty" }
  | { readonly kind: "not_sqlite" }
  | {
      readonly kind: "sqlite"
      readonly applicationId: number
      /** The page size (header offset 16; 1 stands for 65,536). */
      readonly pageSize: number
      /** Write and read versions 1 (header offsets 18, 19): a rollback journal, not WAL. */
      readonly isRollbackJournal: boolean
    }

/** The database header read with plain file reads, before SQLite opens the file (it cannot write). */
const readHeader = (file: string): Header => {
  let descriptor: number
  try {
    descriptor = fs.openSync(file, "r")
  } catch (error) {
    if (errorCode(error) === "ENOENT") return { kind: "empty" }
    throw storeError(error, file)
  }
  try {
    const header = Buffer.alloc(HEADER_BYTES)
    const read = fs.readSync(descriptor, header, 0, HEADER_BYTES, 0)
    if (read === 0) return { kind: "empty" }
    if (read < HEADER_BYTES || !header.subarray(0, SQLITE_MAGIC.length).equals(SQLITE_MAGIC)) return { kind: "not_sqlite" }
    const pageSize = header.readUInt16BE(16)
    return {
      kind: "sqlite",
      applicationId: header.readUInt32BE(68),
      pageSize: pageSize === 1 ? 65_536 : pageSize,
      isRollbackJournal: header[18] === 1 && header[19] === 1,
    }
  } finally {
    fs.closeSync(descriptor)
  }
}

/** The sidecars SQLite would replay or delete on open: a `-wal` or a hot `-journal`. */
const SIDECARS = ["-wal", "-journal"] as const

const hasSidecar = (file: string): boolean => SIDECARS.some((suffix) => fs.existsSync(`${file}${suffix}`))

/** The failures of `surveyFolder`: no survey can be made, so the open stops before it takes the lease. */
const noSurveyFolder = new WeakSet<object>()

/**
 * A new folder in the temporary folder (`os.tmpdir()`, `TMPDIR`) for a survey's copy, or the `Io`
 * failure saying that none could be made there and what to do.
 */
const surveyFolder = (file: string): string => {
  try {
    return fs.mkdtempSync(nodePath.join(os.tmpdir(), "maka-survey-"))
  } catch (error) {
    const failure = io(
      `${file}: no folder for a copy to survey it could be made in the temporary folder ${os.tmpdir()} ` +
        `(${errorCode(error) ?? (error instanceof Error ? error.message : String(error))}); set TMPDIR to a writable folder`,
    )
    noSurveyFolder.add(failure)
    throw failure
  }
}

/**
 * Classifies a database without opening it: a copy of the file and its sidecars in a temporary
 * folder is opened and surveyed instead, so the original, its `-wal` and `-shm` stay byte-for-byte
 * unchanged whatever it turns out to be, and no file appears beside it (SQLite opening a WAL-mode
 * file creates its `-wal` and `-shm`, read-only too, and a read-only connection cannot remove them).
 */
const surveyCopy = (file: string): SchemaState => {
  const directory = surveyFolder(file)
  try {
    const copy = nodePath.join(directory, "survey.sqlite")
    fs.copyFileSync(file, copy)
    for (const suffix of SIDECARS) {
      if (fs.existsSync(`${file}${suffix}`)) fs.copyFileSync(`${file}${suffix}`, `${copy}${suffix}`)
    }
    const connection = openConnection(copy, {})
    try {
      return classifySchema(surveySqlite(connection, file))
    } finally {
      connection.close()
    }
  } catch (error) {
    throw storeError(error, file)
  } finally {
    fs.rmSync(directory, { recursive: true, force: true })
  }
}

/**
 * The part of the open-order check that runs before SQLite opens the file, so that opening another
 * application's database can never checkpoint its WAL, roll back its journal or delete a sidecar:
 * not SQLite, or stamped with another application id, is refused from the header alone; a file
 * without an application id (another program's, or a log of an earlier maka) that has a `-wal` or
 * `-journal` is classified on a copy. Returns whether the file already carries maka's id.
 */
const checkBeforeOpen = (file: string): boolean => {
  const header = refuseForeignHeader(file)
  if (header.kind === "empty") return false
  if (header.applicationId === MAKA_APPLICATION_ID) return true
  if (hasSidecar(file)) surveyCopy(file)
  return false
}

/**
 * The check of a read-only open before SQLite opens the file, which must leave a file it refuses as
 * it found it: as `checkBeforeOpen`, and a WAL-mode file without an application id is classified on
 * a copy too (another application's database that was closed cleanly has no sidecars, and opening it
 * read-only would leave a `-wal` and `-shm` beside it). A file in rollback-journal mode without
 * sidecars is read where it lies: a read-only connection creates nothing beside it.
 */
const checkBeforeReading = (file: string): Exclude<Header, { readonly kind: "not_sqlite" }> => {
  const header = refuseForeignHeader(file)
  if (header.kind === "empty" || header.applicationId === MAKA_APPLICATION_ID) return header
  if (!header.isRollbackJournal || hasSidecar(file)) surveyCopy(file)
  return header
}

/**
 * Why a read-only open found no tables: a WAL-mode file whose `-wal` was not beside it may be a copy
 * of a live log whose commits were all still in that `-wal` (docs/log-format.md §3.1).
 */
const emptyReason = (file: string, header: Exclude<Header, { readonly kind: "not_sqlite" }>, hadWal: boolean): string =>
  header.kind === "sqlite" && !header.isRollbackJournal && !hadWal
    ? `${file} is an empty database, not a maka event log (it is in WAL mode with no ${file}-wal beside it: a copy ` +
      "of a live log that left its -wal behind holds none of its events; copy a live log with backup)"
    : `${file} is an empty database, not a maka event log`

/**
 * Surveys a file in rollback-journal mode without sidecars where it lies, through a read-only
 * connection that does not wait for locks: it reads under SQLite's shared lock and creates nothing
 * beside the file (only a write makes a `-journal`; a file not in WAL mode gets no `-wal` or `-shm`).
 */
const surveyInPlace = (file: string): SchemaState => {
  const connection = openConnection(file, { readonly: true, fileMustExist: true, timeout: 0 })
  try {
    return classifySchema(surveySqlite(connection, file))
  } catch (error) {
    throw storeError(error, file)
  } finally {
    connection.close()
  }
}

/**
 * The refusals a writer makes before it takes the lease, so that a file that is no maka log gets no
 * lock file beside it (docs/log-format.md §3.1): the header's, and for a file without an application
 * id the schema check of the open order, read so that nothing is created or changed beside the file
 * (in place in rollback-journal mode without sidecars, on a copy otherwise). An empty file and a maka
 * log of any known version pass. Only a refusal is final here, with the message the check under the
 * lease gives; any other failure (a database another process holds locked, a copy that could not be
 * made, a copy taken while a writer changed the file) is left to that check, which reports it as before.
 */
const refuseBeforeLease = (file: string): void => {
  const header = refuseForeignHeader(file)
  if (header.kind === "empty") return
  // A WAL-mode database of one page (no table) with no -wal beside it, or an empty one (a reader's
  // open leaves that): a live log copied without the -wal that held all its commits. A writer would
  // make it a new, empty log in silence.
  if (!header.isRollbackJournal && (lstatOrUndefined(`${file}-wal`)?.size ?? 0) === 0 && fs.statSync(file).size <= header.pageSize && isSurveyedEmpty(file)) {
    throw unsupported(`${emptyReason(file, header, false)}, or a log whose first open was cut short; remove it to start a new log at this path`)
  }
  if (header.applicationId === MAKA_APPLICATION_ID) return
  try {
    if (header.isRollbackJournal && !hasSidecar(file)) surveyInPlace(file)
    else surveyCopy(file)
  } catch (error) {
    if (EventLogError.isEventLogError(error) && error.reason._tag === "UnsupportedDatabase") throw error
    // No temporary folder: the check after the lease could not survey it either, so stop before a
    // lock is made beside a file that may be no log.
    if (noSurveyFolder.has(error as object)) throw error
  }
}

/** Whether a survey on a copy finds no table; a survey that fails decides nothing here. */
const isSurveyedEmpty = (file: string): boolean => {
  try {
    return surveyCopy(file).kind === "empty"
  } catch {
    return false
  }
}

/**
 * The refusals the header alone decides: not SQLite, or stamped by another application. A writer
 * runs them before it takes the lease too (`refuseBeforeLease`).
 */
const refuseForeignHeader = (file: string): Exclude<Header, { readonly kind: "not_sqlite" }> => {
  const header = readHeader(file)
  if (header.kind === "not_sqlite") throw unsupported(`${file} is not a maka event log: it is not an SQLite database`)
  if (header.kind === "sqlite" && header.applicationId !== 0 && header.applicationId !== MAKA_APPLICATION_ID) {
    throw unsupported(
      `${file} is not a maka event log: its SQLite application id is ${header.applicationId} (another application's database)`,
    )
  }
  return header
}

/** Whether an entry is at `file`; a name too long for the file system names none. */
const isLeftBeside = (file: string): boolean => {
  try {
    fs.lstatSync(file)
    return true
  } catch (error) {
    const code = errorCode(error)
    if (code === "ENOENT" || code === "ENAMETOOLONG") return false
    throw storeError(error, file)
  }
}

/**
 * The online backup of `connection` to `destination`, a path that must not exist yet (a backup never
 * overwrites a file). Pages are copied in steps between other operations; pages this connection
 * changes meanwhile are carried into the copy, so it holds every commit made before it finished.
 * A commit by another connection restarts the copy; after one, the rest is copied in one step.
 */
const backupTo = (connection: BetterSqlite3.Database, source: string) => async (destination: string, signal?: AbortSignal): Promise<void> => {
  const target = nodePath.resolve(destination)
  // better-sqlite3 trims the name it writes: the checks below would look at another file.
  if (target.trimEnd() !== target) {
    throw EventLogError.make({ _tag: "Io", message: `${JSON.stringify(target)} ends in whitespace, which the SQLite driver drops; pick another path` })
  }
  // Any entry counts, a dangling symbolic link too: the copy would be written where it points.
  if (lstatOrUndefined(target) !== undefined) {
    throw EventLogError.make({ _tag: "Io", message: `${target} already exists; a backup never overwrites a file` })
  }
  // Beside a database, its sidecar's name is the database's: SQLite would take the copy for its hot
  // journal or WAL (and the database's next open delete it).
  const sidecar = sidecarOf(target)
  if (sidecar !== undefined) {
    throw EventLogError.make({ _tag: "Io", message: `${target} is the name of the ${sidecar.suffix} file of the database ${sidecar.database}; pick another path` })
  }
  // A sidecar left beside the name (the WAL or hot journal of a database once there) would be read
  // into the copy by its next open: the copy would hold that database, or be damaged by it.
  for (const suffix of ["-wal", "-journal", "-shm"]) {
    if (isLeftBeside(`${target}${suffix}`)) {
      throw EventLogError.make({
        _tag: "Io",
        message: `${target}${suffix} exists, the ${suffix} file of a database once at ${target}: SQLite would read it into the copy; remove it or pick another path`,
      })
    }
  }
  // Written under a temporary name beside it (apart from its name, which may be as long as a name
  // can be) and linked into place once whole: a backup stopped half-way leaves nothing at
  // `destination`, and a file that appeared there meanwhile is refused, never replaced.
  const temporary = nodePath.join(nodePath.dirname(target), `.maka-backup-${process.pid}-${crypto.randomBytes(6).toString("hex")}.tmp`)
  let remaining = Number.POSITIVE_INFINITY
  let wasRestarted = false
  const isStopped = (): boolean => signal?.aborted === true
  try {
    if (isStopped()) throw BACKUP_STOPPED
    await connection.backup(temporary, {
      // BACKUP_STEP_PAGES a step, between other work; once a write by another connection restarted
      // the copy (its remaining pages did not go down), the rest in one step: a log written without
      // pause would otherwise restart it for as long as the writes go on.
      progress: ({ remainingPages }) => {
        // Stopped by its caller: the driver ends the copy, and the temporary file is removed below.
        if (isStopped()) throw BACKUP_STOPPED
        wasRestarted ||= remainingPages >= remaining
        remaining = remainingPages
        return wasRestarted ? 0x7fff_ffff : BACKUP_STEP_PAGES
      },
    })
    // Stopped after the last step: the whole copy is not put in place.
    if (isStopped()) throw BACKUP_STOPPED
    try {
      fs.linkSync(temporary, target)
    } catch (error) {
      const code = errorCode(error)
      if (code === "EEXIST") {
        throw EventLogError.make({ _tag: "Io", message: `${target} appeared while the backup ran; a backup never overwrites a file` })
      }
      // A file system without hard links: checked, then renamed.
      if (code !== "EPERM" && code !== "ENOTSUP" && code !== "EOPNOTSUPP") throw error
      if (lstatOrUndefined(target) !== undefined) {
        throw EventLogError.make({ _tag: "Io", message: `${target} appeared while the backup ran; a backup never overwrites a file` })
      }
      fs.renameSync(temporary, target)
    }
  } catch (error) {
    if (error === BACKUP_STOPPED) {
      throw EventLogError.make({ _tag: "Io", message: `the backup to ${target} was stopped; nothing was written there` })
    }
    throw storeError(error, `${source} → ${target}`)
  } finally {
    for (const file of [temporary, `${temporary}-journal`]) {
      try {
        fs.rmSync(file, { force: true })
      } catch {
        // The backup's own outcome is the one to report.
      }
    }
  }
}

/** What a backup's progress throws to end it once its caller stopped it. */
const BACKUP_STOPPED = new Error("backup stopped")

/** How many pages a step of a backup copies before it lets other work run. */
const BACKUP_STEP_PAGES = 100

const openConnection = (file: string, options: BetterSqlite3.Options): BetterSqlite3.Database => {
  try {
    return new BetterSqlite3(file, options)
  } catch (error) {
    throw storeError(error, file)
  }
}

/** The path that opens an in-memory log: no file, no lease, gone when the log closes. */
export const MEMORY_PATH = ":memory:"

export const openSqlite = async (path: string, options: SqliteOptions = {}): Promise<Database> => {
  if (options.synchronous !== undefined && !isSynchronous(options.synchronous)) {
    throw unsupported(`synchronous must be one of ${SYNCHRONOUS_LEVELS.join(", ")}, not ${String(options.synchronous)}`)
  }
  return path === MEMORY_PATH
    ? openMemory(options)
    : options.readOnly === true
      ? openReadOnly(path, options)
      : openWriter(path, options)
}

/** The log's write and read transactions: the driver's own on maka's dialect (always, here). */
const writeTransaction = (handle: Kysely<Tables>): TransactionRunner => sqliteTransaction(handle, "read write") ?? handle.transaction()
const readTransaction = (handle: Kysely<Tables>): TransactionRunner =>
  sqliteTransaction(handle, "read only") ?? handle.transaction().setAccessMode("read only")

/**
 * An in-memory log for tests and notebooks: one private database that no other connection can
 * reach, so it needs no lease and creates no file; everything in it is gone when it closes.
 */
const openMemory = async (options: SqliteOptions): Promise<Database> => {
  if (options.readOnly === true) throw unsupported("an in-memory log cannot be opened read-only: it would be empty")
  const connection = openConnection(MEMORY_PATH, {})
  try {
    connection.pragma("foreign_keys = ON")
    const kysely = new Kysely<Tables>({ dialect: new SqliteDialect({ connection }) })
    await kysely.transaction().execute(async (transaction) => {
      await migrate(transaction, "sqlite", { kind: "empty" })
    })
    return makeDatabase({
      dialect: "sqlite",
      location: MEMORY_PATH,
      db: kysely,
      beginWrite: writeTransaction,
      beginRead: readTransaction,
      release: () => undefined,
      backup: backupTo(connection, MEMORY_PATH),
    })
  } catch (error) {
    if (connection.open) connection.close()
    throw storeError(error, MEMORY_PATH)
  }
}

/**
 * A new log is made before SQLite opens it, empty, readable by this user and by its group when the
 * umask lets it, never by others: it holds every message and tool output of its sessions (SQLite
 * gives its `-wal` and `-shm` the same permission bits). A log that exists keeps its own.
 */
const createPrivately = (file: string): void => {
  try {
    fs.closeSync(fs.openSync(file, fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_WRONLY, 0o660))
  } catch (error) {
    if (errorCode(error) !== "EEXIST") throw storeError(error, file)
  }
}

const openWriter = async (path: string, options: SqliteOptions): Promise<Database> => {
  const file = canonicalDatabasePath(path)
  requireWritable(file)
  refuseForeignSidecars(file)
  refuseBeforeLease(file)
  const lease = await acquireLease(file)
  let connection: BetterSqlite3.Database | undefined
  let db: Kysely<Tables> | undefined
  try {
    createPrivately(file)
    const isStamped = checkBeforeOpen(file)
    connection = openConnection(file, { timeout: options.busyTimeout ?? SQLITE_DEFAULTS.busyTimeout })
    const opened = connection
    const state = inspect(opened, file)
    // Only now may anything change the file. The page size holds only for a database not yet written.
    if (state.kind === "empty") opened.pragma(`page_size = ${SQLITE_DEFAULTS.pageSize}`)
    const journalMode = opened.pragma("journal_mode = WAL", { simple: true })
    if (journalMode !== "wal") throw storeError(new Error(`journal_mode is ${String(journalMode)}, not wal`), file)
    opened.pragma(`synchronous = ${options.synchronous ?? SQLITE_DEFAULTS.synchronous}`)
    opened.pragma("foreign_keys = ON")
    opened.pragma(`wal_autocheckpoint = ${SQLITE_DEFAULTS.walAutocheckpoint}`)
    opened.pragma(`journal_size_limit = ${walSizeLimit(Number(opened.pragma("page_size", { simple: true })))}`)
    const kysely = new Kysely<Tables>({ dialect: new SqliteDialect({ connection: opened }) })
    db = kysely
    const epoch = await kysely.transaction().execute(async (transaction) => {
      await migrate(transaction, "sqlite", state)
      return nextEpoch(opened)
    })
    const epochRead = opened.prepare("PRAGMA user_version").pluck()
    // The files this writer writes, as it opened them (the opening transaction made the -wal).
    const identity = fileIdentity(file)
    if (!isStamped && opened.pragma("application_id", { simple: true }) !== MAKA_APPLICATION_ID) {
      opened.pragma(`application_id = ${MAKA_APPLICATION_ID}`)
    }
    return makeDatabase({
      dialect: "sqlite",
      location: file,
      db: kysely,
      beginWrite: writeTransaction,
      beginRead: readTransaction,
      release: () => lease.release(),
      isLeaseHeld: () => lease.isHeld(),
      writerLost: () =>
        !identity.isSame()
          ? EventLogError.FILE_REPLACED
          : epochRead.get() === epoch
            ? undefined
            : "another writer opened the log since",
      backup: backupTo(opened, file),
    })
  } catch (error) {
    await abandon(db, connection, lease)
    throw storeError(error, file)
  }
}

/**
 * The log file and its `-wal` as they are now, and whether the path still names both: a writer whose
 * file was removed or replaced (a tool's `rm`, a `git clean`, a restore) writes into files no open of
 * the path finds, and everything it writes is lost with them. Two `stat`s a write transaction.
 */
const fileIdentity = (file: string): { readonly isSame: () => boolean } => {
  const idOf = (path: string): string | undefined => {
    try {
      const stat = fs.statSync(path)
      return `${stat.dev}:${stat.ino}`
    } catch {
      return undefined
    }
  }
  const wal = `${file}-wal`
  const opened = [idOf(file), idOf(wal)]
  return { isSame: () => idOf(file) === opened[0] && idOf(wal) === opened[1] }
}

/**
 * Bumps the lease epoch, the header's `user_version`, in the writer's opening transaction and returns
 * it (docs/log-format.md §3.1): a writer whose lease was lost unseen (its keeper ended while its event
 * loop was busy) finds another epoch in its next write transaction and writes nothing.
 */
const nextEpoch = (connection: BetterSqlite3.Database): number => {
  const current = Number(connection.pragma("user_version", { simple: true }))
  const next = current >= 0 && current < 0x7fff_ffff ? current + 1 : 1
  connection.pragma(`user_version = ${next}`)
  return next
}

const abandon = async (
  db: Kysely<Tables> | undefined,
  connection: BetterSqlite3.Database | undefined,
  lease: Lease | undefined,
): Promise<void> => {
  try {
    if (db !== undefined) await db.destroy()
    else if (connection?.open === true) connection.close()
  } finally {
    await lease?.release()
  }
}

const openReadOnly = async (path: string, options: SqliteOptions): Promise<Database> => {
  const file = canonicalDatabasePath(path, "reader")
  if (!fs.existsSync(file)) throw unsupported(`${file}: no event log at this path (a read-only open never creates one)`)
  const header = checkBeforeReading(file)
  const hadWal = fs.existsSync(`${file}-wal`)
  requireReadable(file)
  refuseForeignSidecars(file)
  const connection = openConnection(file, {
    readonly: true,
    fileMustExist: true,
    timeout: options.busyTimeout ?? SQLITE_DEFAULTS.busyTimeout,
  })
  try {
    const state = inspect(connection, file)
    if (state.kind === "empty") throw unsupported(emptyReason(file, header, hadWal))
    if (state.version < LATEST_VERSION) {
      throw unsupported(
        `${file} has schema ${state.version} < ${LATEST_VERSION}; open it once for writing to migrate it`,
      )
    }
    connection.pragma("query_only = ON")
    const db = new Kysely<Tables>({ dialect: new SqliteDialect({ connection }) })
    return makeDatabase({
      dialect: "sqlite",
      location: file,
      db,
      beginWrite: undefined,
      beginRead: readTransaction,
      release: () => undefined,
      backup: backupTo(connection, file),
    })
  } catch (error) {
    if (connection.open) connection.close()
    throw storeError(error, file)
  }
}
