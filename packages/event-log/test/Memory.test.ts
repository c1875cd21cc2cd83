import { History } from "@maka/testkit"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import { MIGRATIONS } from "../src/internal/migrations.ts"
import { expectReason, temporaryDirectory } from "./fixtures/storage.ts"
import { appendAll } from "./support/harness.ts"

const stray = () => [":memory:", ":memory:.writer.lock", ":memory:-wal", ":memory:-shm"].filter((name) => fs.existsSync(path.resolve(name)))

describe("an in-memory log", () => {
  it("opens for \":memory:\" through layerSqlite with no file and no lease, and two are independent", async () => {
    expect(stray()).toEqual([])
    const program = Effect.gen(function* () {
      const log = yield* EventLog.EventLog
      const history = History.smallRun()
      yield* appendAll(log, history.writes)
      // A second in-memory log in the same process is a different database: no WriterBusy, no events.
      const other = yield* Effect.scoped(
        Effect.flatMap(EventLog.fromDatabase(() => openSqlite(":memory:")), (second) => second.events("session-1")),
      )
      return { events: yield* log.events("session-1"), other, location: log.location }
    })
    const result = await Effect.runPromise(Effect.provide(program, Layer.fresh(EventLog.layerSqlite({ path: ":memory:" }))))
    expect(result.events.length).toBe(8)
    expect(result.other).toEqual([])
    expect(result.location).toBe(":memory:")
    expect(stray()).toEqual([])
  })

  it("backs up to a file that opens as a log, and refuses a read-only open", async () => {
    const destination = path.join(temporaryDirectory(), "from-memory.sqlite")
    const database = await openSqlite(":memory:")
    await database.backup(destination)
    await database.close()
    const copy = await openSqlite(destination, { readOnly: true })
    expect(await copy.read((transaction) => transaction.selectFrom("schema_migrations").select("version").execute())).toEqual(MIGRATIONS.map((migration) => ({ version: migration.version })))
    await copy.close()
    await expectReason(openSqlite(":memory:", { readOnly: true }), "UnsupportedDatabase", "in-memory")
    expect(stray()).toEqual([])
  })
})
