/**
 * A single-connection Kysely `PostgresPool` over an in-process PGlite, for tests (STACK.md): one
 * client at a time per PGlite instance (a FIFO lock shared by every pool over that instance), a
 * fresh client object per acquisition, and `bigint`/`numeric` returned as text as `pg` returns them,
 * so both PostgreSQL paths decode the same rows. The instance belongs to the caller: `end()` leaves it open.
 */
import type { PostgresCursor, PostgresPool, PostgresPoolClient, PostgresQueryResult } from "kysely"
import { Mutex } from "./mutex.ts"

/** The part of PGlite's interface the adapter uses (structural, so the package needs PGlite only in tests). */
export interface PgliteLike {
  query<T>(
    query: string,
    parameters?: Array<unknown>,
    options?: { readonly parsers?: Record<number, (value: string) => unknown> },
  ): Promise<{ readonly rows: Array<T>; readonly command?: string; readonly rowCount?: number; readonly affectedRows?: number }>
}

/** pg type ids read as text: int8 (sequence, count) and numeric (sums), as `pg` reads them by default. */
const TEXT_PARSERS: Record<number, (value: string) => unknown> = Object.freeze({
  20: (value: string) => value,
  1700: (value: string) => value,
})

const COMMANDS = ["UPDATE", "DELETE", "INSERT", "SELECT", "MERGE", "COMMIT", "ROLLBACK"] as const
type Command = (typeof COMMANDS)[number]

const isCommand = (command: string | undefined): command is Command =>
  COMMANDS.some((known) => known === command)

class PgliteClient implements PostgresPoolClient {
  readonly #pglite: PgliteLike
  readonly #onRelease: () => void
  #isReleased = false

  constructor(pglite: PgliteLike, onRelease: () => void) {
    this.#pglite = pglite
    this.#onRelease = onRelease
  }

  query<R>(sql: string, parameters: ReadonlyArray<unknown>): Promise<PostgresQueryResult<R>>
  query<R>(cursor: PostgresCursor<R>): PostgresCursor<R>
  query<R>(
    sql: string | PostgresCursor<R>,
    parameters?: ReadonlyArray<unknown>,
  ): Promise<PostgresQueryResult<R>> | PostgresCursor<R> {
    if (typeof sql !== "string") throw new Error("the PGlite pool does not support cursors")
    if (this.#isReleased) return Promise.reject(new Error("the PGlite client was already released"))
    return this.#pglite.query<R>(sql, [...(parameters ?? [])], { parsers: TEXT_PARSERS }).then((result) => ({
      // Kysely reads the command only to count affected rows and to see a COMMIT that rolled back.
      command: isCommand(result.command) ? result.command : "SELECT",
      rowCount: result.rowCount ?? result.affectedRows ?? 0,
      rows: result.rows,
    }))
  }

  release(): void {
    if (this.#isReleased) return
    this.#isReleased = true
    this.#onRelease()
  }
}

const locks = new WeakMap<PgliteLike, Mutex>()

/** A pool of one connection over `pglite`, serialised with every other pool over the same instance. */
export const pglitePool = (pglite: PgliteLike): PostgresPool => {
  const mutex = locks.get(pglite) ?? new Mutex()
  locks.set(pglite, mutex)
  return {
    connect: async () => {
      await mutex.lock()
      return new PgliteClient(pglite, () => mutex.unlock())
    },
    end: async () => undefined,
  }
}
