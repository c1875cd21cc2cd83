/**
 * A query past `query_timeout` on PostgreSQL (docs/log-format.md §3.1): pg fails it but leaves it
 * running on its client's connection, so the log's pool drops that client when it is released; the
 * next checkout gets another client, whose query is answered at once, not behind the stuck one.
 * Runs when MAKA_TEST_DATABASE_URL names a server; skipped with a printed reason otherwise, except
 * under CI (CI=true), where a missing server fails the test.
 */
import { describe, expect, it } from "vitest"
import { loadPg, makePool } from "../src/internal/open-postgres.ts"

const inCi = process.env["CI"] === "true" || process.env["CI"] === "1"
const url = process.env["MAKA_TEST_DATABASE_URL"] === "" ? undefined : process.env["MAKA_TEST_DATABASE_URL"]

describe.skipIf(url === undefined && !inCi)("a query past query_timeout", () => {
  it("fails, and its client is dropped on release instead of being handed out again", async () => {
    if (url === undefined) throw new Error("MAKA_TEST_DATABASE_URL is unset: under CI this test needs the PostgreSQL server")
    const pool = makePool(await loadPg(), url, { queryTimeout: 300 })
    try {
      const stuck = await pool.connect()
      await expect(stuck.query("SELECT pg_sleep(3)", [])).rejects.toThrow("Query read timeout")
      stuck.release()
      const next = await pool.connect()
      try {
        // The pool would hand back its one idle client, the stuck one, whose query waits ~3 s.
        expect(next).not.toBe(stuck)
        expect((await next.query<{ readonly one: number }>("SELECT 1 AS one", [])).rows).toEqual([{ one: 1 }])
      } finally {
        next.release()
      }
      // A client whose queries all answered goes back to the pool and is handed out again.
      const again = await pool.connect()
      again.release()
      expect(again).toBe(next)
    } finally {
      await pool.end()
    }
  }, 20_000)
})

if (url === undefined) {
  process.stdout.write(
    inCi
      ? "note: MAKA_TEST_DATABASE_URL is unset under CI; PostgresQueryTimeout.test.ts fails\n"
      : "note: MAKA_TEST_DATABASE_URL is unset; PostgresQueryTimeout.test.ts does not run here (tools/pg-start prints a URL)\n",
  )
}
