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
  readonly backup?: (destination: string) => Promise<void>
  /** Whether the writer lease is still held (SQLite); a write without it is refused `WriterBusy`. */
  readonly isLeaseHeld?: () => boolean
  /**
   * Whether the log still carries this writer's lease epoch, read inside a write transaction before
   * its first statement (SQLite, docs/log-format.md §3.1): another writer opened the log since, and
   * the write is refused `WriterBusy` (lost) with nothing written.
   */
  readonly holdsEpoch?: () => boolean
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
  const progress: { stage: Stage } = { stage: "begin" }
  try {
    return await builder.execute(async (transaction) => {
      progress.stage = "body"
      const result = await body(transaction)
      progress.stage = "commit"
      return result
    })
  } catch (error) {
    if (progress.stage === "body") throw error
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

/** The waits before the second, third and fourth try of a write that met a transient answer. */
const TRANSIENT_RETRY_MS: ReadonlyArray<number> = [10, 50, 250]

/** The first error a write's body threw, when it is a transient PostgreSQL answer; else undefined. */
const transientCode = (error: unknown): string | undefined => {
  const code = errorCode(error)
  return code !== undefined && TRANSIENT_SQLSTATES.has(code) ? code : undefined
}

/**
 * A PostgreSQL write: `runTransaction`, tried again (up to three more times, after a short wait)
 * when its body met a transient answer. One that fails at the commit is never tried again (it may
 * have landed).
 */
const runWrite = async <A>(
  begin: () => TransactionRunner,
  body: (transaction: Transaction<Tables>) => Promise<A>,
  location: string,
): Promise<A> => {
  for (let attempt = 0; ; attempt++) {
    let failedInBody = false
    try {
      return await runTransaction(
        begin(),
        async (transaction) => {
          try {
            return await body(transaction)
          } catch (error) {
            failedInBody = true
            throw error
          }
        },
        true,
        location,
      )
    } catch (error) {
      const wait = TRANSIENT_RETRY_MS[attempt]
      if (!failedInBody || wait === undefined || transientCode(error) === undefined) throw error
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
  const { holdsEpoch } = parts
  const fenced = <A>(body: (transaction: Transaction<Tables>) => Promise<A>) =>
    holdsEpoch === undefined
      ? body
      : (transaction: Transaction<Tables>) =>
          holdsEpoch() ? body(transaction) : Promise.reject(EventLogError.make({ _tag: "WriterBusy", path: location, lost: true }))
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
          ? runWrite(() => beginWrite(db), served(body, false), location)
          : runTransaction(beginWrite(db), fenced(served(body, false)), true, location),
      )
    },
    read: (body) => {
      if (closing !== undefined) return closed()
      return track(runTransaction(parts.beginRead(db), served(body, true), false, location))
    },
    backup: (destination) => {
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
      return track(backup(destination))
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
