/**
 * The session settings a PostgreSQL log makes on each client of its pool (`search_path`, read-only)
 * before the client is first handed out (src/internal/open-postgres.ts `preparing`,
 * docs/log-format.md §3.3): a client whose settings fail, its connection dropped meanwhile, is
 * released as broken. Kept out of the pool, it would keep the pool's `end()` (at the log's close)
 * waiting for ever. Over PGlite, whose pool hands out one client at a time: a client never released
 * would keep every later one waiting.
 */
import type { PostgresPool, PostgresPoolClient } from "kysely"
import { afterAll, describe, expect, it } from "vitest"
import { makePool, openPostgresStore, type PgModule } from "../src/internal/open-postgres.ts"
import { pglitePool } from "../src/internal/pglite-dialect.ts"
import { freshPglite } from "./support/pglite-snapshot.ts"

const pglite = freshPglite()
afterAll(() => pglite.close())

/** `pglitePool` whose next `failures` `SET search_path` statements fail as a dropped connection would. */
const droppingPool = (failures: number) => {
  const counts = { handedOut: 0, released: 0, releasedBroken: 0, failures }
  const inner = pglitePool(pglite)
  const pool: PostgresPool = {
    connect: async () => {
      const client = await inner.connect()
      counts.handedOut++
      const wrapped: PostgresPoolClient = {
        query: ((sql: string, parameters: ReadonlyArray<unknown>) => {
          if (typeof sql === "string" && sql.startsWith("SET search_path") && counts.failures > 0) {
            counts.failures--
            return Promise.reject(new Error("Connection terminated unexpectedly"))
          }
          return client.query(sql, parameters)
        }) as PostgresPoolClient["query"],
        release: (destroy?: boolean) => {
          counts.released++
          if (destroy === true) counts.releasedBroken++
          client.release(destroy)
        },
      }
      return wrapped
    },
    end: () => inner.end(),
  }
  return { counts, pool }
}

describe("a PostgreSQL log's client whose session settings fail", () => {
  it("is released as broken, so the open fails and the next open and its close go on", async () => {
    const dropping = droppingPool(1)
    const store = { pool: dropping.pool, location: "PGlite (dropping)", schema: "prepare_test" }
    await pglite.query("CREATE SCHEMA IF NOT EXISTS prepare_test")
    await expect(openPostgresStore(store)).rejects.toThrow("Connection terminated unexpectedly")
    expect(dropping.counts).toMatchObject({ handedOut: 1, released: 1, releasedBroken: 1 })
    // The next client gets its settings; the log opens, writes nothing yet, and closes.
    const database = await openPostgresStore(store)
    await database.close()
    expect(dropping.counts.released).toBe(dropping.counts.handedOut)
    expect(dropping.counts.releasedBroken).toBe(1)
  })
})

describe("the pool of a URL", () => {
  it("drops a client released as broken, and keeps one released as usable", async () => {
    const releases: Array<unknown> = []
    const pg: PgModule = {
      Pool: class {
        connect() {
          const client = { query: () => Promise.resolve({ command: "SELECT", rowCount: 0, rows: [] }), release: (error?: unknown) => void releases.push(error) }
          return Promise.resolve(client as unknown as PostgresPoolClient)
        }
        end() {
          return Promise.resolve()
        }
        on() {
          return this
        }
      },
    }
    const pool = makePool(pg, "postgres://db.example/agents")
    ;(await pool.connect()).release(true)
    ;(await pool.connect()).release()
    // pg's release drops a client for any truthy argument, and keeps it for none.
    expect(releases).toEqual([true, undefined])
  })
})
