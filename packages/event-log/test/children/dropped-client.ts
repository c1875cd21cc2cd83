/**
 * Child process of the dropped-connection test, run as `node --import tsx dropped-client.ts <url>`:
 * it takes a client from the log's pool and holds it idle while another connection terminates its
 * server process. The process must survive (no uncaught `error` event), the held client's next
 * query must fail, and the pool must hand out a working client after it is released. Prints
 * `held <pid>`, `failed <message>` and `reconnected <value>`.
 */
import type { EventEmitter } from "node:events"
import { loadPg, makePool } from "../../src/internal/open-postgres.ts"

const [url] = process.argv.slice(2)
if (url === undefined) throw new Error("usage: dropped-client.ts <url>")

const main = async (): Promise<void> => {
  const pool = makePool(await loadPg(), url)
  const held = await pool.connect()
  const pid = (await held.query<{ readonly pid: number }>(`SELECT pg_backend_pid() AS pid`, [])).rows[0]?.pid
  process.stdout.write(`held ${String(pid)}\n`)
  const ended = new Promise<void>((resolve) => (held as unknown as EventEmitter).once("end", () => resolve()))
  const killer = await pool.connect()
  await killer.query(`SELECT pg_terminate_backend($1)`, [pid])
  killer.release()
  // The held client is idle and checked out while its connection ends.
  await ended
  await new Promise((resolve) => setTimeout(resolve, 50))
  try {
    await held.query(`SELECT 1 AS one`, [])
    process.stdout.write("failed nothing: the query on a terminated connection succeeded\n")
  } catch (error) {
    process.stdout.write(`failed ${error instanceof Error ? error.message : String(error)}\n`)
  }
  held.release()
  const fresh = await pool.connect()
  const value = (await fresh.query(`SELECT 1 AS one`, [])).rows[0]
  process.stdout.write(`reconnected ${JSON.stringify(value)}\n`)
  fresh.release()
  await pool.end()
}

main().catch((error: unknown) => {
  process.stdout.write(`error ${error instanceof Error ? error.message : String(error)}\n`)
  process.exitCode = 1
})
