/**
 * Builds a `Database` from a Kysely instance and its two transaction kinds, shared by both
 * dialects: the error mapping of a transaction (a failed commit of a write is `OutcomeUnknown`), the
 * bookkeeping of accepted operations, and `close()` (finish them, close the store, then release).
 */
import { isAbortedTransactionError, type Kysely, type Transaction } from "kysely"
import * as EventLogError from "../EventLogError.ts"
import type { Database, Dialect } from "./database.ts"
import * as LogIndex from "./log-index.ts"
import { sqliteAccessOf } from "./sqlite-driver.ts"
import { errorCode, errorMessage, storeError } from "./store-error.ts"
import type { Tables } from "./tables.ts"

/** Runs a callback in one transaction: Kysely's `TransactionBuilder`, or the SQLite driver's own. */
export interface TransactionRunner {
  readonly execute: <A>(callback: (transaction: Transaction<Tables>) => Promise<A>) => Promise<A>
}

export interface DatabaseParts {
  readonly dialect: Dialect
  readonly location: string
  readonly db: Kysely<Tables>
  /** The write transaction, or undefined for a read-only store (its writes are refused). */
  readonly beginWrite: ((db: Kysely<Tables>) => TransactionRunner) | undefined
  readonly beginRead: (db: Kysely<Tables>) => TransactionRunner
  /** Runs after the Kysely instance is destroyed: releases the lease, ends an owned pool. */
  readonly release: () => Promise<void> | void
  /** The online backup of an SQLite connection; undefined where the store has none (PostgreSQL). */
  readonly backup?: (destination: string, signal?: AbortSignal) => Promise<void>
  /** Whether the writer lease is still held (SQLite); a write without it is refused `WriterBusy`. */
  readonly isLeaseHeld?: () => boolean
  /**
   * Why this writer no longer writes the log, read inside a write transaction before its first
   * statement (SQLite, docs/log-format.md §3.1), or `undefined`: another writer opened the log since
   * (its lease epoch is gone), or the file (or its `-wal`) at the log's path is no longer the one it
   * opened. The write is refused `WriterBusy` (lost) with nothing written.
   */
  readonly writerLost?: () => string | undefined
}

type Stage = "begin" | "body" | "commit"

/**
 * Runs `body` in the transaction `builder` begins. The body's own rejection passes through
 * unchanged (after the rollback); a failure to begin is a store error; a failure of the commit is
 * `OutcomeUnknown` for a write (never assume success), except when the database reports that it
 * rolled the transaction back (PostgreSQL after a swallowed statement error), which is `Database`.
 */
export const runTransaction = async <A>(
  builder: TransactionRunner,
  body: (transaction: Transaction<Tables>) => Promise<A>,
  isWrite: boolean,
  location: string,
): Promise<A> => {
  const progress: { stage: Stage; bodyError?: { readonly error: unknown } } = { stage: "begin" }
  try {
    return await builder.execute(async (transaction) => {
      progress.stage = "body"
      const result = await body(transaction).catch((error: unknown) => {
        progress.bodyError = { error }
        throw error
      })
      progress.stage = "commit"
      return result
    })
  } catch (error) {
    // The body's own error, even when the rollback after it failed too (a connection gone: the
    // rollback's "not queryable" would hide the reset that caused it).
    if (progress.stage === "body") throw progress.bodyError === undefined ? error : progress.bodyError.error
    if (progress.stage === "commit") {
      if (isAbortedTransactionError(error)) {
        throw EventLogError.make({
          _tag: "Database",
          message: `${location}: the transaction was rolled back by the database after an earlier statement failed`,
        })
      }
      if (isWrite) throw EventLogError.make({ _tag: "OutcomeUnknown", message: `${location}: ${errorMessage(error)}` })
    }
    throw storeError(error, location)
  }
}

/**
 * PostgreSQL's answers to a statement that mean the transaction was rolled back before its commit
 * and may simply be tried again: a serialization failure, a deadlock, a lock not available in time
 * (`lock_timeout`), a statement cancelled (`statement_timeout`). Nothing of such a transaction was
 * written, so a write that met one in its body is run again, from its first statement.
 */
const TRANSIENT_SQLSTATES: ReadonlySet<string> = new Set(["40001", "40P01", "55P03", "57014"])

/** The waits before the second, third and fourth try of a transaction tried again (`runPostgres`). */
const TRANSIENT_RETRY_MS: ReadonlyArray<number> = [10, 50, 250]

/** The first error a write's body threw, when it is a transient PostgreSQL answer; else undefined. */
const transientCode = (error: unknown): string | undefined => {
  const code = errorCode(error)
  return code !== undefined && TRANSIENT_SQLSTATES.has(code) ? code : undefined
}

/**
 * Whether `error` says the connection itself is gone: the server ended the backend (57P01-57P03,
 * `pg_terminate_backend`, a restart), a connection exception (class 08), or the socket closed,
 * reset or refused under the client (never a connect timeout, which each try would wait out
 * again). A pooled client whose connection a proxy or the server dropped while it sat idle fails
 * its next statement so; the pool does not hand that client out again.
 */
export const isConnectionLost = (error: unknown): boolean => {
  const code = errorCode(error)
  if (code !== undefined) {
    // Class 08 whole: a pooler (PgBouncer) reports the server connection it lost as 08P01.
    if (code === "57P01" || code === "57P02" || code === "57P03" || code.startsWith("08")) return true
    if (code === "ECONNRESET" || code === "EPIPE" || code === "ECONNREFUSED") return true
  }
  // Not a connect timeout ("Connection terminated due to connection timeout"): each try would
  // wait it out again.
  return /connection terminated unexpectedly|not queryable|terminating connection/i.test(errorMessage(error))
}

/** A runner that keeps the raw error of its transaction (what `runTransaction` maps), for `runPostgres`. */
const recording = (runner: TransactionRunner, seen: { error?: unknown }): TransactionRunner => ({
  execute: (callback) =>
    runner.execute(callback).catch((error: unknown) => {
      seen.error = error
      throw error
    }),
})

/**
 * A PostgreSQL transaction: `runTransaction`, tried again (up to three more times, after a short
 * wait) when nothing of it can have been written or read wrong: it failed to begin, or its body
 * failed, on a lost connection, or (a write) its body met a transient answer. A write that fails at
 * the commit is never tried again, whatever the error says: the error Kysely passes on may be its
 * ROLLBACK's ("… is not queryable") after a COMMIT that was sent and landed. A read is tried again
 * at its commit on a lost connection.
 */
export const runPostgres = async <A>(
  begin: () => TransactionRunner,
  body: (transaction: Transaction<Tables>) => Promise<A>,
  isWrite: boolean,
  location: string,
): Promise<A> => {
  for (let attempt = 0; ; attempt++) {
    const progress: { stage: Stage } = { stage: "begin" }
    const seen: { error?: unknown } = {}
    try {
      return await runTransaction(
        recording(begin(), seen),
        async (transaction) => {
          progress.stage = "body"
          const result = await body(transaction)
          progress.stage = "commit"
          return result
        },
        isWrite,
        location,
      )
    } catch (error) {
      const wait = TRANSIENT_RETRY_MS[attempt]
      const raw = seen.error ?? error
      const retried =
        progress.stage === "commit"
          ? !isWrite && isConnectionLost(raw)
          : isConnectionLost(raw) || (isWrite && progress.stage === "body" && transientCode(error) !== undefined)
      if (wait === undefined || !retried) throw error
      await new Promise((resolve) => setTimeout(resolve, wait))
    }
  }
}

export const makeDatabase = (parts: DatabaseParts): Database => {
  const { db, location } = parts
  const active = new Set<Promise<void>>()
  let closing: Promise<void> | undefined

  const track = <A>(operation: Promise<A>): Promise<A> => {
    const settled = operation.then(
      () => undefined,
      () => undefined,
    )
    active.add(settled)
    void settled.then(() => active.delete(settled))
    return operation
  }

  const closed = (): Promise<never> => Promise.reject(EventLogError.make({ _tag: "ConnectionClosed" }))

  const sqlite = parts.dialect === "sqlite" ? sqliteAccessOf(db) : undefined
  // One writer per SQLite file (the lease), so its state can live in memory; PostgreSQL has several.
  const index =
    sqlite !== undefined && parts.beginWrite !== undefined
      ? new LogIndex.LogIndex(() => parts.isLeaseHeld?.() ?? true)
      : undefined
  const { writerLost } = parts
  const fenced = <A>(body: (transaction: Transaction<Tables>) => Promise<A>) =>
    writerLost === undefined
      ? body
      : (transaction: Transaction<Tables>) => {
          const why = writerLost()
          return why === undefined ? body(transaction) : Promise.reject(EventLogError.make({ _tag: "WriterBusy", path: location, lost: true, why }))
        }
  const served = <A>(body: (transaction: Transaction<Tables>) => Promise<A>, isRead: boolean) =>
    index === undefined
      ? body
      : async (transaction: Transaction<Tables>) => {
          LogIndex.register(transaction, index, isRead)
          try {
            return await body(transaction)
          } finally {
            LogIndex.release(transaction)
          }
        }

  return {
    dialect: parts.dialect,
    location,
    db,
    sqlite,
    index,
    write: (body) => {
      if (closing !== undefined) return closed()
      const { beginWrite } = parts
      // Not closing, so the lease was lost: its keeper ended.
      if (parts.isLeaseHeld !== undefined && !parts.isLeaseHeld()) {
        return Promise.reject(EventLogError.make({ _tag: "WriterBusy", path: location, lost: true }))
      }
      if (beginWrite === undefined) {
        return Promise.reject(
          EventLogError.make({ _tag: "Database", message: `${location} was opened read-only; it cannot be written` }),
        )
      }
      return track(
        parts.dialect === "postgres"
          ? runPostgres(() => beginWrite(db), served(body, false), true, location)
          : runTransaction(beginWrite(db), fenced(served(body, false)), true, location),
      )
    },
    read: (body) => {
      if (closing !== undefined) return closed()
      return track(
        parts.dialect === "postgres"
          ? runPostgres(() => parts.beginRead(db), served(body, true), false, location)
          : runTransaction(parts.beginRead(db), served(body, true), false, location),
      )
    },
    backup: (destination, signal) => {
      if (closing !== undefined) return closed()
      const { backup } = parts
      if (backup === undefined) {
        return Promise.reject(
          EventLogError.make({
            _tag: "Database",
            message: `${location}: backup copies SQLite logs; back a PostgreSQL log up with the server's tools (pg_dump)`,
          }),
        )
      }
      return track(backup(destination, signal))
    },
    close: () => {
      closing ??= (async () => {
        await Promise.all([...active])
        try {
          await db.destroy()
        } finally {
          await parts.release()
        }
      })()
      return closing
    },
  }
}
