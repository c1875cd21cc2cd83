import BetterSqlite3 from "better-sqlite3"
import { Kysely, sql, type Generated } from "kysely"
import * as fs from "node:fs"
import * as path from "node:path"
import { History } from "@maka/testkit"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import { FAULT_VARIABLE, faultPoint } from "../src/internal/fault.ts"
import { KNOWN_SESSIONS } from "../src/internal/append.ts"
import { openSqlite, walSizeLimit } from "../src/internal/open-sqlite.ts"
import { SqliteDialect, StatementCache } from "../src/internal/sqlite-driver.ts"
import type { Database } from "../src/internal/database.ts"
import { errorCode } from "../src/internal/store-error.ts"
import {
  childScript,
  expectReason,
  rawEvent,
  spawnChild,
  temporaryDirectory,
} from "./fixtures/storage.ts"

const rowCount = async (database: Database) =>
  database.read(async (transaction) => {
    const rows = await transaction.selectFrom("event_log").select("event_id").execute()
    return rows.length
  })

/** Runs `body` against an event log over `file`, which holds the writer lease while it runs. */
const withLog = <A, E>(file: string, body: (log: EventLog.EventLogShape) => Effect.Effect<A, E>, synchronous?: "FULL" | "NORMAL") =>
  Effect.runPromise(
    Effect.scoped(Effect.flatMap(EventLog.fromDatabase(() => openSqlite(file, synchronous === undefined ? {} : { synchronous })), body)),
  )

/** A Kysely over a raw better-sqlite3 connection with maka's dialect, for driver-level tests. */
const driverFixture = () => {
  const connection = new BetterSqlite3(path.join(temporaryDirectory(), "driver.sqlite"))
  connection.exec("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
  const dialect = new SqliteDialect({ connection })
  const db = new Kysely<{ items: { id: Generated<number>; name: string } }>({ dialect })
  const statements = () => {
    const driver = dialect.driver
    if (driver === undefined) throw new Error("the dialect has not created its driver")
    return driver.statements
  }
  return { connection, db, statements }
}

describe("the SQLite driver", () => {
  it("prepares each SQL text once and reuses the statement", async () => {
    const { db, statements } = driverFixture()
    await db.insertInto("items").values({ name: "a" }).execute()
    const before = statements().preparedCount
    for (let index = 0; index < 20; index += 1) {
      await db.selectFrom("items").selectAll().where("id", "=", index).execute()
      await db.insertInto("items").values({ name: `n${index}` }).execute()
    }
    // One select text, and the insert text was prepared before the loop.
    expect(statements().preparedCount - before).toBe(1)
    await db.destroy()
  })

  it("evicts the least recently used statement beyond its bound", () => {
    const connection = new BetterSqlite3(":memory:")
    const cache = new StatementCache(connection, 2)
    const first = cache.get("SELECT 1")
    cache.get("SELECT 2")
    expect(cache.get("SELECT 1")).toBe(first)
    cache.get("SELECT 3")
    expect(cache.size).toBe(2)
    expect(cache.get("SELECT 1")).toBe(first)
    const prepared = cache.preparedCount
    cache.get("SELECT 2")
    expect(cache.preparedCount).toBe(prepared + 1)
    connection.close()
  })

  it("returns affected rows and insert ids as bigint", async () => {
    const { db } = driverFixture()
    const inserted = await db.insertInto("items").values({ name: "a" }).executeTakeFirstOrThrow()
    expect(inserted.insertId).toBe(1n)
    expect(inserted.numInsertedOrUpdatedRows).toBe(1n)
    const updated = await db.updateTable("items").set({ name: "b" }).executeTakeFirstOrThrow()
    expect(updated.numUpdatedRows).toBe(1n)
    const deleted = await db.deleteFrom("items").executeTakeFirstOrThrow()
    expect(deleted.numDeletedRows).toBe(1n)
    await db.destroy()
  })

  it("serialises concurrent transactions on its one connection", async () => {
    const { db } = driverFixture()
    const insertSlowly = (name: string) =>
      db.transaction().execute(async (transaction) => {
        await transaction.insertInto("items").values({ name: `${name}-1` }).execute()
        await new Promise((resolve) => setTimeout(resolve, 5))
        await transaction.insertInto("items").values({ name: `${name}-2` }).execute()
      })
    await Promise.all(["a", "b", "c", "d"].map(insertSlowly))
    const names = (await db.selectFrom("items").select("name").orderBy("id").execute()).map((row) => row.name)
    expect(names).toEqual(["a-1", "a-2", "b-1", "b-2", "c-1", "c-2", "d-1", "d-2"])
    await db.destroy()
  })

  it("streams select rows", async () => {
    const { db } = driverFixture()
    await db.insertInto("items").values([{ name: "a" }, { name: "b" }]).execute()
    const names: Array<string> = []
    for await (const row of db.selectFrom("items").select("name").orderBy("id").stream()) names.push(row.name)
    expect(names).toEqual(["a", "b"])
    await db.destroy()
  })
})

describe("openSqlite transactions", () => {
  it("begins writes with BEGIN IMMEDIATE: another connection cannot write while one is open", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const database = await openSqlite(file)
    const other = new BetterSqlite3(file, { timeout: 0 })
    const outcome = await database.write(async () => {
      // No statement has run in the body yet: only BEGIN IMMEDIATE can hold the write lock now.
      try {
        other.exec("INSERT INTO sessions (session_id, created_at) VALUES ('other', 1)")
        return "written"
      } catch (error) {
        return error instanceof Error && "code" in error ? String(error.code) : String(error)
      }
    })
    expect(outcome).toBe("SQLITE_BUSY")
    other.exec("INSERT INTO sessions (session_id, created_at) VALUES ('other', 1)")
    other.close()
    await database.close()
  })

  it("begins reads with a deferred BEGIN that sees one snapshot while another connection writes", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const database = await openSqlite(file)
    const other = new BetterSqlite3(file, { timeout: 0 })
    const counts = await database.read(async (transaction) => {
      const count = async () => (await transaction.selectFrom("sessions").select("session_id").execute()).length
      const before = await count()
      other.exec("INSERT INTO sessions (session_id, created_at) VALUES ('other', 1)")
      return [before, await count()]
    })
    expect(counts).toEqual([0, 0])
    expect(await database.read(async (transaction) => (await transaction.selectFrom("sessions").selectAll().execute()).length)).toBe(1)
    other.close()
    await database.close()
  })

  it("sets WAL, synchronous FULL by default or NORMAL when asked, foreign keys, a 4,000-page WAL checkpoint and the WAL size it is cut back to", async () => {
    const directory = temporaryDirectory()
    const pragmas = async (options: Parameters<typeof openSqlite>[1]) => {
      const database = await openSqlite(path.join(directory, `${String(options?.synchronous)}.sqlite`), options)
      const values = await database.read(async (transaction) => ({
        journal: (await sql<{ journal_mode: string }>`PRAGMA journal_mode`.execute(transaction)).rows[0],
        synchronous: (await sql<{ synchronous: number }>`PRAGMA synchronous`.execute(transaction)).rows[0],
        foreignKeys: (await sql<{ foreign_keys: number }>`PRAGMA foreign_keys`.execute(transaction)).rows[0],
        autocheckpoint: (await sql<{ wal_autocheckpoint: number }>`PRAGMA wal_autocheckpoint`.execute(transaction)).rows[0],
        sizeLimit: (await sql<{ journal_size_limit: number }>`PRAGMA journal_size_limit`.execute(transaction)).rows[0],
      }))
      await database.close()
      return values
    }
    expect(await pragmas({})).toEqual({
      journal: { journal_mode: "wal" },
      synchronous: { synchronous: 2 },
      foreignKeys: { foreign_keys: 1 },
      autocheckpoint: { wal_autocheckpoint: 4_000 },
      // 32 + 4,000 × (1,024 + 24): the WAL's size at the checkpoint threshold, frame headers included.
      sizeLimit: { journal_size_limit: 4_192_032 },
    })
    expect((await pragmas({ synchronous: "NORMAL" })).synchronous).toEqual({ synchronous: 1 })
  })

  it("cuts a WAL a reader grew back to its checkpoint size when it starts over", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const database = await openSqlite(file)
    const write = (body: string) => database.write(async (transaction) => void (await sql.raw(body).execute(transaction)))
    await write("CREATE TABLE filler (body BLOB)")
    // A reader's snapshot keeps the WAL from starting over while 12 MiB are written behind it.
    const reader = new BetterSqlite3(file, { readonly: true })
    reader.exec("BEGIN")
    reader.prepare("SELECT count(*) FROM filler").get()
    for (let index = 0; index < 24; index += 1) await write("INSERT INTO filler (body) VALUES (zeroblob(524288))")
    const grown = fs.statSync(`${file}-wal`).size
    expect(grown).toBeGreaterThan(2 * walSizeLimit(1_024))
    reader.exec("COMMIT")
    reader.close()
    // The first write checkpoints the whole WAL; the next starts it over and cuts the file.
    for (let index = 0; index < 2; index += 1) await write("DELETE FROM filler WHERE rowid = (SELECT min(rowid) FROM filler)")
    expect(fs.statSync(`${file}-wal`).size).toBe(walSizeLimit(1_024))
    await database.close()
  })

  it("rolls back a write whose body rejects and passes its error through unchanged", async () => {
    const database = await openSqlite(path.join(temporaryDirectory(), "events.sqlite"))
    const failure = new Error("validator refused")
    const result = await database
      .write(async (transaction) => {
        await transaction.insertInto("event_log").values(rawEvent("model_observed")).execute()
        throw failure
      })
      .catch((error: unknown) => error)
    expect(result).toBe(failure)
    expect(await rowCount(database)).toBe(0)
    await database.close()
  })

  it("reports a write whose commit fails as OutcomeUnknown and keeps nothing of it", async () => {
    const database = await openSqlite(path.join(temporaryDirectory(), "events.sqlite"))
    // A deferred foreign key is checked at COMMIT: the payload names no event, so the commit fails.
    await expectReason(
      database.write(async (transaction) => {
        await sql`PRAGMA defer_foreign_keys = ON`.execute(transaction)
        await transaction.insertInto("tool_result_payloads").values({ event_id: "missing", payload: "{}" }).execute()
      }),
      "OutcomeUnknown",
      "FOREIGN KEY",
    )
    expect(await database.read(async (transaction) => (await transaction.selectFrom("tool_result_payloads").selectAll().execute()).length)).toBe(0)
    await database.close()
  })

  it("reports an append whose statement fails before COMMIT as Database, not OutcomeUnknown, and keeps nothing", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const history = History.smallRun()
    const outcome = await withLog(file, (log) =>
      Effect.gen(function* () {
        yield* log.append(history.writes[0]!)
        // Another connection makes every later insert fail inside the write transaction.
        const other = new BetterSqlite3(file)
        other.exec("CREATE TRIGGER refuse_insert BEFORE INSERT ON event_log BEGIN SELECT RAISE(ABORT, 'disk says no'); END")
        other.close()
        const error = yield* Effect.flip(log.appendBatch(history.writes.slice(1, 4)))
        const events = yield* log.events("session-1")
        return { error, events }
      }),
    )
    expect(outcome.error.reason._tag).toBe("Database")
    expect(outcome.error.message).toContain("disk says no")
    expect(outcome.events.map((stored) => stored.sequence)).toEqual([1])
  })

  it("counts a session's row as written only once its commit lands: the append after a failed COMMIT writes it", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const history = History.smallRun()
    const outcome = await withLog(file, (log) =>
      Effect.gen(function* () {
        // Another connection arms a trap: each event row also inserts a row whose deferred foreign
        // key names no session, so the COMMIT of the session's first append fails.
        const other = new BetterSqlite3(file)
        other.exec("CREATE TABLE trap (session_id TEXT REFERENCES sessions (session_id) DEFERRABLE INITIALLY DEFERRED)")
        other.exec("CREATE TRIGGER spring AFTER INSERT ON event_log BEGIN INSERT INTO trap VALUES ('nowhere'); END")
        const refused = yield* Effect.flip(log.append(history.writes[0]!))
        other.exec("DROP TRIGGER spring")
        other.close()
        yield* log.appendBatch(history.writes.slice(0, 2))
        return { refused, events: yield* log.events("session-1") }
      }),
    )
    expect(outcome.refused.reason._tag).toBe("OutcomeUnknown")
    expect(outcome.events.map((stored) => stored.sequence)).toHaveLength(2)
    const reader = new BetterSqlite3(file, { readonly: true })
    const sessions = reader.prepare("SELECT session_id FROM sessions").pluck().all()
    reader.close()
    expect(sessions).toEqual(["session-1"])
  })

  it(`remembers the ${KNOWN_SESSIONS} sessions written last: the least recently written one inserts its row again`, async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const runs = Array.from({ length: KNOWN_SESSIONS + 1 }, (_, index) =>
      new History.History({ sessionId: `s-${index}`, firstId: 1 + index * 4 }).open({
        invocationId: `i-${index}`,
        runId: `r-${index}`,
        turnId: `t-${index}`,
      }),
    )
    // The inserts of session rows the log's own connection runs.
    const probe = new BetterSqlite3(":memory:")
    const statementPrototype = Object.getPrototypeOf(probe.prepare("SELECT 1")) as { run: (...args: Array<unknown>) => unknown }
    probe.close()
    const run = statementPrototype.run
    let sessionInserts = 0
    statementPrototype.run = function (this: { readonly source: string }, ...args: Array<unknown>) {
      if (this.source.startsWith("INSERT INTO sessions")) sessionInserts++
      return run.apply(this, args)
    }
    try {
      const inserts = await withLog(
        file,
        (log) =>
          Effect.gen(function* () {
            const steer = (index: number) =>
              Effect.gen(function* () {
                const before = sessionInserts
                const opened = runs[index]!
                opened.steer(`m-${index}-${opened.history.writes.length}`, "more")
                yield* log.append(opened.history.writes.at(-1)!)
                return sessionInserts - before
              })
            for (const opened of runs.slice(0, KNOWN_SESSIONS)) yield* log.appendBatch(opened.history.writes)
            // The first session written becomes the most recent; the second is now the least recent.
            const first = yield* steer(0)
            yield* log.appendBatch(runs[KNOWN_SESSIONS]!.history.writes)
            return { first, second: yield* steer(1), firstAgain: yield* steer(0), newest: yield* steer(KNOWN_SESSIONS) }
          }),
        "NORMAL",
      )
      expect(inserts).toEqual({ first: 0, second: 1, firstAgain: 0, newest: 0 })
    } finally {
      statementPrototype.run = run
    }
  })

  it("finishes accepted operations at close, then refuses new ones with ConnectionClosed", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const database = await openSqlite(file)
    let release: () => void = () => undefined
    const gate = new Promise<void>((resolve) => {
      release = resolve
    })
    const slow = database.write(async (transaction) => {
      await gate
      await transaction.insertInto("event_log").values(rawEvent("model_observed")).execute()
      return "committed"
    })
    const closing = database.close()
    await expectReason(database.read(async () => 1), "ConnectionClosed")
    await expectReason(database.write(async () => 1), "ConnectionClosed")
    // The lease is still held while the accepted write runs.
    await expectReason(openSqlite(file), "WriterBusy")
    release()
    expect(await slow).toBe("committed")
    await closing
    expect(database.close()).toBe(closing)
    const reopened = await openSqlite(file)
    expect(await rowCount(reopened)).toBe(1)
    await reopened.close()
  })

  it("runs writes given at once one after another on its one connection", async () => {
    const database = await openSqlite(path.join(temporaryDirectory(), "events.sqlite"))
    const order: Array<string> = []
    const slowWrite = (name: string) =>
      database.write(async (transaction) => {
        order.push(`${name} begins`)
        await transaction.insertInto("sessions").values({ session_id: name, created_at: 1 }).execute()
        await new Promise((resolve) => setTimeout(resolve, 5))
        order.push(`${name} ends`)
      })
    await Promise.all(["a", "b", "c"].map(slowWrite))
    expect(order).toEqual(["a begins", "a ends", "b begins", "b ends", "c begins", "c ends"])
    await database.close()
  })

  it("begins a write on a free connection in the caller's turn, and one given while it is busy after it", async () => {
    const database = await openSqlite(path.join(temporaryDirectory(), "events.sqlite"))
    const order: Array<string> = []
    const first = database.write(async (transaction) => {
      order.push("first begins")
      await transaction.insertInto("sessions").values({ session_id: "first", created_at: 1 }).execute()
      order.push("first ends")
    })
    // No turn of the microtask queue yet: the first write already holds the connection.
    expect(order).toEqual(["first begins"])
    const second = database.write(async () => {
      order.push("second begins")
    })
    expect(order).toEqual(["first begins"])
    await Promise.all([first, second])
    expect(order).toEqual(["first begins", "first ends", "second begins"])
    await database.close()
  })

  it("passes a body's error through when SQLite already rolled the transaction back, and writes again after", async () => {
    const database = await openSqlite(path.join(temporaryDirectory(), "events.sqlite"))
    const failure = new Error("the disk is full")
    const result = await database
      .write(async (transaction) => {
        await transaction.insertInto("event_log").values(rawEvent("model_observed")).execute()
        // As SQLite does itself after some errors (SQLITE_FULL, SQLITE_IOERR): the transaction is gone.
        await sql`ROLLBACK`.execute(transaction)
        throw failure
      })
      .catch((error: unknown) => error)
    expect(result).toBe(failure)
    expect(await rowCount(database)).toBe(0)
    await database.write(async (transaction) => transaction.insertInto("event_log").values(rawEvent("model_observed")).execute())
    expect(await rowCount(database)).toBe(1)
    await database.close()
  })

  it("refuses a query of a transaction that has ended, and writes nothing", async () => {
    const database = await openSqlite(path.join(temporaryDirectory(), "events.sqlite"))
    const kept = await database.write(async (transaction) => transaction)
    const late = await kept.insertInto("event_log").values(rawEvent("model_observed")).execute().catch((error: unknown) => error)
    expect(String(late)).toContain("the transaction has ended")
    // Not even inside a later transaction of the same connection.
    const during = await database.write(async () =>
      kept.insertInto("event_log").values(rawEvent("model_observed")).execute().catch((error: unknown) => error),
    )
    expect(String(during)).toContain("the transaction has ended")
    expect(await rowCount(database)).toBe(0)
    await database.close()
  })

  it("tells the end callbacks whether the transaction committed, before the next one begins", async () => {
    const database = await openSqlite(path.join(temporaryDirectory(), "events.sqlite"))
    const ends: Array<string> = []
    const sqlite = database.sqlite!
    await database.write(async () => sqlite.onTransactionEnd((committed) => ends.push(`first ${committed}`)))
    await database
      .write(async () => {
        sqlite.onTransactionEnd((committed) => ends.push(`second ${committed}`))
        throw new Error("refused")
      })
      .catch(() => undefined)
    await database
      .write(async (transaction) => {
        sqlite.onTransactionEnd((committed) => ends.push(`third ${committed}`))
        await sql`PRAGMA defer_foreign_keys = ON`.execute(transaction)
        await transaction.insertInto("tool_result_payloads").values({ event_id: "missing", payload: "{}" }).execute()
      })
      .catch(() => undefined)
    await database.write(async () => ends.push("fourth begins"))
    expect(ends).toEqual(["first true", "second false", "third false", "fourth begins"])
    await database.close()
  })

  it("refuses writes on a read-only open", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    await (await openSqlite(file)).close()
    const reader = await openSqlite(file, { readOnly: true })
    await expectReason(
      reader.write(async (transaction) => transaction.insertInto("event_log").values(rawEvent("model_observed")).execute()),
      "Database",
      "read-only",
    )
    // Even a statement that slips into a read transaction cannot change the file.
    const error = await reader
      .read(async (transaction) => transaction.insertInto("sessions").values({ session_id: "s", created_at: 1 }).execute())
      .catch((caught: unknown) => caught)
    expect(errorCode(error)).toMatch(/^SQLITE_READONLY/)
    await reader.close()
  })
})

describe("fault points", () => {
  it("do nothing unless MAKA_TEST_FAULT names them", () => {
    const previous = process.env[FAULT_VARIABLE]
    process.env[FAULT_VARIABLE] = "some.other-point"
    try {
      faultPoint("storage.in-write")
    } finally {
      if (previous === undefined) delete process.env[FAULT_VARIABLE]
      else process.env[FAULT_VARIABLE] = previous
    }
    faultPoint("storage.in-write")
    expect(process.pid).toBeGreaterThan(0)
  })

  it("kill the writer inside its transaction: the reopened log holds none of it and opens at once", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    await (await openSqlite(file)).close()
    const child = spawnChild(childScript("writer.ts"), ["crash-in-write", file], { [FAULT_VARIABLE]: "storage.in-write" })
    const { signal } = await child.exited
    expect(signal).toBe("SIGKILL")
    expect(child.output()).toContain("inserted")
    expect(child.output()).not.toContain("survived")
    const started = performance.now()
    const reopened = await openSqlite(file)
    expect(performance.now() - started).toBeLessThan(1_000)
    expect(await rowCount(reopened)).toBe(0)
    await reopened.close()
  })

  it("let the same child commit when MAKA_TEST_FAULT is unset", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const child = spawnChild(childScript("writer.ts"), ["crash-in-write", file], { [FAULT_VARIABLE]: "" })
    expect((await child.exited).code).toBe(0)
    expect(child.output()).toContain("survived")
    const reopened = await openSqlite(file)
    expect(await rowCount(reopened)).toBe(1)
    await reopened.close()
  })
})
