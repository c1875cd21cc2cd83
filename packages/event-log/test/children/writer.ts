/**
 * Child process of the lease and storage crash tests, run as `node --import tsx writer.ts <mode> <database>`:
 * `hold` opens the log as its writer, prints `ready` and waits to be killed (`read-lock` holds a read
 * lock on its lock file instead); `hold-io` does the same
 * after reading the lock and database files and copying the log folder many times, as a host that
 * backs its folder up would; `open-and-leave` opens it and ends without closing it (`stop-keeper-and-leave` after stopping its keeper); `try` opens it and prints
 * `opened` or `refused <reason>` (`try-lease` and `try-message` below); `crash-in-write` inserts a row inside a write transaction and then
 * reaches the fault point `storage.in-write` (the parent sets MAKA_TEST_FAULT to it).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import * as EventLogError from "../../src/EventLogError.ts"
import { faultPoint } from "../../src/internal/fault.ts"
import BetterSqlite3 from "better-sqlite3"
import { acquireLease, canonicalDatabasePath, keeperProcessId, LOCK_SUFFIX } from "../../src/internal/lease.ts"
import { openSqlite } from "../../src/internal/open-sqlite.ts"

const [mode, file] = process.argv.slice(2)
if (mode === undefined || file === undefined) throw new Error("usage: writer.ts <hold|hold-io|try|crash-in-write> <database>")

const main = async (): Promise<void> => {
  // Another program that reads the writer's lock file as a database: its read lock, held, keeps
  // every writer out (the refusal names it).
  if (mode === "read-lock") {
    const lock = new BetterSqlite3(`${file}${LOCK_SUFFIX}`, { readonly: true })
    lock.exec("BEGIN")
    lock.prepare("SELECT count(*) FROM sqlite_master").get()
    process.stdout.write("ready\n")
    setInterval(() => lock.open, 60_000)
    return
  }
  if (mode === "try-lease" || mode === "try-message") {
    // `try-lease` takes the lease alone (no checks of the host's open before it), `try-message`
    // opens the log; each prints `opened` or `refused <reason>: <message>`.
    try {
      if (mode === "try-lease") await (await acquireLease(canonicalDatabasePath(file))).release()
      else await (await openSqlite(file)).close()
      process.stdout.write("opened\n")
    } catch (error) {
      process.stdout.write(`refused ${EventLogError.isEventLogError(error) ? `${error.reason._tag}: ${error.message}` : String(error)}\n`)
    }
    return
  }
  if (mode === "try") {
    try {
      const database = await openSqlite(file)
      process.stdout.write("opened\n")
      await database.close()
    } catch (error) {
      process.stdout.write(`refused ${EventLogError.isEventLogError(error) ? error.reason._tag : String(error)}\n`)
    }
    return
  }
  const database = await openSqlite(file, { synchronous: "NORMAL" })
  if (mode === "hold-io") {
    const directory = path.dirname(file)
    const copies = fs.mkdtempSync(`${directory}-copies-`)
    for (let round = 0; round < 20; round++) {
      for (const name of fs.readdirSync(directory)) fs.readFileSync(path.join(directory, name))
      const handle = fs.openSync(`${file}.writer.lock`, "r")
      fs.closeSync(handle)
      fs.cpSync(directory, path.join(copies, String(round)), { recursive: true })
    }
    fs.rmSync(copies, { recursive: true, force: true })
  }
  if (mode === "hold" || mode === "hold-io") {
    process.stdout.write("ready\n")
    // The timer keeps the process and the log reachable: a collected connection would drop its lock.
    setInterval(() => database.location, 60_000)
    return
  }
  if (mode === "open-and-leave") {
    // Never closes the log: the process must still end on its own, and its lease with it.
    await database.write(async () => undefined)
    process.stdout.write("left\n")
    return
  }
  if (mode === "stop-keeper-and-leave") {
    // Stops its own keeper (it can no longer see its pipe close) and ends without closing the log:
    // the keeper must not outlive this process with the lock.
    const keeper = keeperProcessId()!
    process.kill(keeper, "SIGSTOP")
    process.stdout.write(`left ${keeper}\n`)
    return
  }
  if (mode === "crash-in-write") {
    await database.write(async (transaction) => {
      await transaction
        .insertInto("event_log")
        .values({
          event_id: "crash-event",
          session_id: "session-1",
          turn_id: "turn-1",
          run_id: "run-1",
          invocation_id: "invocation-1",
          kind: "model_observed",
          operation_id: null,
          event_json: "{}",
        })
        .execute()
      process.stdout.write("inserted\n")
      faultPoint("storage.in-write")
    })
    process.stdout.write("survived\n")
    await database.close()
    return
  }
  throw new Error(`unknown mode ${mode}`)
}

main().catch((error: unknown) => {
  process.stderr.write(`${String(error)}\n`)
  process.exit(1)
})
