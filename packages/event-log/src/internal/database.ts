/**
 * The store connection the `EventLog` runs on: one Kysely instance per dialect plus the two
 * transaction kinds every operation uses. Opening (lease, open-order check, pragmas, migrations)
 * lives in `open-sqlite.ts` and `open-postgres.ts`; nothing here awaits another operation while a
 * transaction is held.
 */
import type { Kysely, Transaction } from "kysely"
import type { LogIndex } from "./log-index.ts"
import type { Tables } from "./tables.ts"

export type Dialect = "sqlite" | "postgres"

export interface Database {
  readonly dialect: Dialect
  /** A human-readable location for messages (a file path, or a redacted URL). */
  readonly location: string
  readonly db: Kysely<Tables>
  /** The SQLite connection's prepared statements, for the append path (SQLite only). */
  readonly sqlite?: SqliteAccess | undefined
  /**
   * The writer's in-memory index (SQLite opened for writing only: the lease makes this process
   * the one writer). Every transaction of `write` and `read` is served by it while the lease holds.
   */
  readonly index?: LogIndex | undefined
  /**
   * Runs `body` in one write transaction (`BEGIN IMMEDIATE` on SQLite; a read-committed transaction
   * on PostgreSQL, where the caller takes the session row lock). Operations are serialised on
   * single-connection stores. Rejects with the body's error after rolling back.
   */
  readonly write: <A>(body: (transaction: Transaction<Tables>) => Promise<A>) => Promise<A>
  /** Runs `body` in one read transaction that sees one snapshot (`BEGIN` on SQLite; `REPEATABLE READ READ ONLY` on PostgreSQL). */
  readonly read: <A>(body: (transaction: Transaction<Tables>) => Promise<A>) => Promise<A>
  /**
   * Copies the live database to the new file `destination` with SQLite's online backup API: a
   * consistent copy holding every transaction committed before it finishes. SQLite only. An abort
   * of `signal` stops it between two steps, leaving nothing at `destination`.
   */
  readonly backup: (destination: string, signal?: AbortSignal) => Promise<void>
  /** Finishes accepted operations, closes the store, then releases the writer lease. */
  readonly close: () => Promise<void>
}

/**
 * The connection as the append path uses it inside a transaction it holds: cached prepared
 * statements, and a callback run when that transaction ends (`true` after a commit; `false` after a
 * rollback or a failed commit), before another operation can take the connection.
 */
export interface SqliteAccess {
  readonly statement: (sql: string) => SqliteStatement
  readonly onTransactionEnd: (callback: (committed: boolean) => void) => void
}

/**
 * A prepared statement of that connection, as the append path uses it. Structural, so the package's
 * declarations name no type of the SQLite driver (a consumer needs no `@types/better-sqlite3`).
 */
export interface SqliteStatement {
  readonly run: (...parameters: ReadonlyArray<unknown>) => { readonly changes: number; readonly lastInsertRowid: number | bigint }
  readonly all: (...parameters: ReadonlyArray<unknown>) => Array<unknown>
  /** With `true`, rows come as arrays of column values in select order (better-sqlite3's raw mode). */
  readonly raw: (toggle?: boolean) => SqliteStatement
}
