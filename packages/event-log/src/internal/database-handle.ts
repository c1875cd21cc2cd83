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
import { errorMessage, storeError } from "./store-error.ts"
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
      if (parts.isLeaseHeld !== undefined && !parts.isLeaseHeld()) {
        return Promise.reject(EventLogError.make({ _tag: "WriterBusy", path: location }))
      }
      if (beginWrite === undefined) {
        return Promise.reject(
          EventLogError.make({ _tag: "Database", message: `${location} was opened read-only; it cannot be written` }),
        )
      }
      return track(runTransaction(beginWrite(db), served(body, false), true, location))
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
