/**
 * maka's Kysely dialect for SQLite (docs/architecture.md §5, §12): one better-sqlite3 connection behind a FIFO
 * mutex, prepared statements cached by SQL text (least recently used evicted first), write
 * transactions begun with `BEGIN IMMEDIATE` so a writer holds the write lock before its first read,
 * and read transactions (access mode `read only`) with a plain deferred `BEGIN`.
 *
 * `sqliteAccessOf` gives the append path the connection's prepared statements directly (no query
 * building) and a hook that runs when the current transaction ends, before the connection is
 * released, so in-memory state follows exactly what committed.
 *
 * `sqliteTransaction` runs the log's transactions on the connection directly: the mutex, the
 * cached BEGIN / COMMIT / ROLLBACK statements and one Kysely `Transaction` per transaction whose
 * queries are refused once it has ended, without Kysely's transaction builder and its layers of
 * connection providers (the same steps, fewer objects and promise hops on every append).
 */
import type BetterSqlite3 from "better-sqlite3"
import type { SqliteAccess } from "./database.ts"
import {
  CompiledQuery,
  SelectQueryNode,
  SqliteAdapter,
  SqliteIntrospector,
  SqliteQueryCompiler,
  type DatabaseConnection,
  type DatabaseIntrospector,
  type Dialect,
  type DialectAdapter,
  type Driver,
  type Kysely,
  type QueryCompiler,
  type QueryExecutor,
  type QueryResult,
  Transaction,
  type TransactionSettings,
} from "kysely"
import { Mutex } from "./mutex.ts"

/** How many prepared statements one connection keeps. */
export const STATEMENT_CACHE_SIZE = 256

type Statement = BetterSqlite3.Statement<Array<unknown>, unknown>

/** A bounded map from SQL text to its prepared statement; a hit moves the entry to the back. */
export class StatementCache {
  readonly #connection: BetterSqlite3.Database
  readonly #capacity: number
  readonly #statements = new Map<string, Statement>()
  #prepared = 0

  constructor(connection: BetterSqlite3.Database, capacity: number) {
    this.#connection = connection
    this.#capacity = Math.max(1, capacity)
  }

  /** How many statements were prepared (cache misses) since the connection opened. */
  get preparedCount(): number {
    return this.#prepared
  }

  get size(): number {
    return this.#statements.size
  }

  /** The cached statement for `sql`, or a fresh one; a statement still iterating is never shared. */
  get(sql: string): Statement {
    const cached = this.#statements.get(sql)
    if (cached !== undefined && !cached.busy) {
      this.#statements.delete(sql)
      this.#statements.set(sql, cached)
      return cached
    }
    const statement: Statement = this.#connection.prepare(sql)
    this.#prepared += 1
    if (cached === undefined) {
      this.#statements.set(sql, statement)
      if (this.#statements.size > this.#capacity) {
        const oldest = this.#statements.keys().next()
        if (oldest.done !== true) this.#statements.delete(oldest.value)
      }
    }
    return statement
  }
}

const toBigInt = (value: number | bigint): bigint => (typeof value === "bigint" ? value : BigInt(value))

class SqliteConnection implements DatabaseConnection {
  readonly statements: StatementCache
  /** Callbacks of the current transaction, run once with whether it committed. */
  #onEnd: Array<(committed: boolean) => void> = []

  constructor(connection: BetterSqlite3.Database, cacheSize: number) {
    this.statements = new StatementCache(connection, cacheSize)
  }

  onTransactionEnd(callback: (committed: boolean) => void): void {
    this.#onEnd.push(callback)
  }

  /** Runs and clears the end callbacks; a throwing callback does not stop the others. */
  endTransaction(committed: boolean): void {
    const callbacks = this.#onEnd
    this.#onEnd = []
    let failure: unknown
    for (const callback of callbacks) {
      try {
        callback(committed)
      } catch (error) {
        failure ??= error
      }
    }
    if (failure !== undefined) throw failure
  }

  executeQuery<R>(compiledQuery: CompiledQuery): Promise<QueryResult<R>> {
    try {
      return Promise.resolve(this.#execute<R>(compiledQuery))
    } catch (error) {
      return Promise.reject(error)
    }
  }

  /** Runs a statement without parameters (BEGIN, COMMIT, ROLLBACK) from the cache. */
  run(sql: string): void {
    this.statements.get(sql).run()
  }

  #execute<R>(compiledQuery: CompiledQuery): QueryResult<R> {
    const statement = this.statements.get(compiledQuery.sql)
    const parameters = [...compiledQuery.parameters]
    if (statement.reader) {
      const rows: Array<R> = asQueryRows<R>(statement.all(parameters))
      return { rows }
    }
    const { changes, lastInsertRowid } = statement.run(parameters)
    return { numAffectedRows: toBigInt(changes), insertId: toBigInt(lastInsertRowid), rows: [] }
  }

  async *streamQuery<R>(compiledQuery: CompiledQuery): AsyncIterableIterator<QueryResult<R>> {
    if (!SelectQueryNode.is(compiledQuery.query)) {
      throw new Error("the SQLite driver streams select queries only")
    }
    const statement = this.statements.get(compiledQuery.sql)
    for (const row of statement.iterate([...compiledQuery.parameters])) {
      yield { rows: asQueryRows<R>([row]) }
    }
  }
}

/**
 * better-sqlite3's rows typed as Kysely's generic result. This is not a decode: `R` is Kysely's
 * compile-time claim about the SQL it built, and the log's row readers check every field they use.
 */
function asQueryRows<R>(rows: Array<unknown>): Array<R>
function asQueryRows(rows: Array<unknown>): Array<unknown> {
  return rows
}

export interface SqliteDriverConfiguration {
  readonly connection: BetterSqlite3.Database
  /** Prepared statements kept per connection (default `STATEMENT_CACHE_SIZE`). */
  readonly statementCacheSize?: number | undefined
  /** Whether `destroy()` closes the better-sqlite3 connection (default true). */
  readonly closeOnDestroy?: boolean | undefined
}

export class SqliteDriver implements Driver {
  readonly #configuration: SqliteDriverConfiguration
  readonly #mutex = new Mutex()
  readonly #connection: SqliteConnection

  constructor(configuration: SqliteDriverConfiguration) {
    this.#configuration = Object.freeze({ ...configuration })
    this.#connection = new SqliteConnection(
      configuration.connection,
      configuration.statementCacheSize ?? STATEMENT_CACHE_SIZE,
    )
  }

  /** The statement cache of the one connection (exposed for tests and diagnostics). */
  get statements(): StatementCache {
    return this.#connection.statements
  }

  async init(): Promise<void> {}

  async acquireConnection(): Promise<DatabaseConnection> {
    await this.#mutex.lock()
    return this.#connection
  }

  async beginTransaction(_connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    this.#begin(settings.accessMode === "read only" ? "read only" : "read write")
  }

  async commitTransaction(): Promise<void> {
    this.#commit()
  }

  async rollbackTransaction(): Promise<void> {
    this.#rollback()
  }

  #begin(accessMode: "read only" | "read write"): void {
    this.#connection.run(accessMode === "read only" ? "begin" : "begin immediate")
  }

  /** COMMIT; a failed one rolls back what is still open and rethrows the COMMIT's error. */
  #commit(): void {
    try {
      this.#connection.run("commit")
    } catch (error) {
      try {
        this.#rollback()
      } catch {
        // The COMMIT's error is the one to report; the transaction is gone either way.
      }
      throw error
    }
    this.#connection.endTransaction(true)
  }

  /**
   * ROLLBACK while a transaction is open: SQLite may have rolled it back itself (a full disk, an I/O
   * error), and the error that made it do so is then the one to report, not a ROLLBACK with none.
   */
  #rollback(): void {
    try {
      if (this.#configuration.connection.inTransaction) this.#connection.run("rollback")
    } finally {
      this.#connection.endTransaction(false)
    }
  }

  /**
   * Runs `callback` in one transaction of the connection, as Kysely's transaction builder would:
   * the connection is taken (FIFO), BEGIN (`begin immediate` for a write), the callback, COMMIT;
   * a callback that throws is rolled back (unless SQLite already did) and its error passes through; a failed BEGIN leaves
   * nothing to roll back; a failed COMMIT rolls back what is still open and rethrows the COMMIT's
   * error. The end callbacks run with whether it committed, before the connection is released.
   * The callback's `Transaction` runs queries only while this transaction is open.
   */
  async transact<DB, A>(
    executor: QueryExecutor,
    props: Omit<KyselyPropsOf, "executor">,
    accessMode: "read only" | "read write",
    callback: (transaction: Transaction<DB>) => Promise<A>,
  ): Promise<A> {
    // A free connection is taken at once: the transaction begins in the caller's turn.
    if (!this.#mutex.tryLock()) await this.#mutex.lock()
    const connection = this.#connection
    const state = { isOpen: false }
    try {
      const transaction = new Transaction<DB>({ ...props, executor: executor.withConnectionProvider(scopedProvider(connection, state)) })
      this.#begin(accessMode)
      state.isOpen = true
      let result: A
      try {
        result = await callback(transaction)
      } catch (error) {
        state.isOpen = false
        this.#rollback()
        throw error
      }
      state.isOpen = false
      this.#commit()
      return result
    } finally {
      state.isOpen = false
      this.#mutex.unlock()
    }
  }

  /** Direct access to the one connection for code that runs inside one of its transactions. */
  get access(): SqliteAccess {
    const connection = this.#connection
    return {
      statement: (sql) => connection.statements.get(sql),
      onTransactionEnd: (callback) => connection.onTransactionEnd(callback),
    }
  }

  async savepoint(connection: DatabaseConnection, savepointName: string): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw(`savepoint ${quoteIdentifier(savepointName)}`))
  }

  async rollbackToSavepoint(connection: DatabaseConnection, savepointName: string): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw(`rollback to ${quoteIdentifier(savepointName)}`))
  }

  async releaseSavepoint(connection: DatabaseConnection, savepointName: string): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw(`release ${quoteIdentifier(savepointName)}`))
  }

  async releaseConnection(): Promise<void> {
    this.#mutex.unlock()
  }

  async destroy(): Promise<void> {
    if (this.#configuration.closeOnDestroy !== false && this.#configuration.connection.open) {
      this.#configuration.connection.close()
    }
  }
}

type KyselyPropsOf = ConstructorParameters<typeof Transaction>[0]

/** Hands the connection to queries of one transaction while it is open; refuses them after. */
const scopedProvider = (connection: SqliteConnection, state: { readonly isOpen: boolean }) => ({
  provideConnection: <T>(consumer: (connection: DatabaseConnection) => Promise<T>): Promise<T> =>
    state.isOpen
      ? consumer(connection)
      : Promise.reject(new Error("the transaction has ended; a query of it cannot run")),
})

const quoteIdentifier = (name: string): string => `"${name.replaceAll('"', '""')}"`


/** The adapter of this dialect, carrying it so a Kysely instance leads back to its driver. */
class MakaSqliteAdapter extends SqliteAdapter {
  readonly dialect: SqliteDialect

  constructor(dialect: SqliteDialect) {
    super()
    this.dialect = dialect
  }
}

/** The connection access of a Kysely instance built on `SqliteDialect`, else undefined. */
export const sqliteAccessOf = <DB>(db: Kysely<DB>): SqliteAccess | undefined => {
  const adapter = db.getExecutor().adapter
  return adapter instanceof MakaSqliteAdapter ? adapter.dialect.driver?.access : undefined
}

/**
 * The log's transactions on a Kysely instance built on `SqliteDialect` (see `SqliteDriver.transact`),
 * else undefined: `execute` takes the same callback as Kysely's transaction builder.
 */
export const sqliteTransaction = <DB>(
  db: Kysely<DB>,
  accessMode: "read only" | "read write",
): { readonly execute: <A>(callback: (transaction: Transaction<DB>) => Promise<A>) => Promise<A> } | undefined => {
  const executor = db.getExecutor()
  const adapter = executor.adapter
  if (!(adapter instanceof MakaSqliteAdapter)) return undefined
  const dialect = adapter.dialect
  const driver = dialect.driver
  if (driver === undefined) return undefined
  const props = { config: { dialect }, dialect, driver }
  return { execute: (callback) => driver.transact(executor, props, accessMode, callback) }
}

export class SqliteDialect implements Dialect {
  readonly #configuration: SqliteDriverConfiguration
  #driver: SqliteDriver | undefined

  constructor(configuration: SqliteDriverConfiguration) {
    this.#configuration = Object.freeze({ ...configuration })
  }

  /** The driver Kysely created from this dialect (after `new Kysely(...)`). */
  get driver(): SqliteDriver | undefined {
    return this.#driver
  }

  createDriver(): Driver {
    this.#driver = new SqliteDriver(this.#configuration)
    return this.#driver
  }

  createQueryCompiler(): QueryCompiler {
    return new SqliteQueryCompiler()
  }

  createAdapter(): DialectAdapter {
    return new MakaSqliteAdapter(this)
  }

  createIntrospector(db: Kysely<unknown>): DatabaseIntrospector {
    return new SqliteIntrospector(db)
  }
}
