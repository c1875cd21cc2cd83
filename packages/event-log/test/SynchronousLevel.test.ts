/**
 * The `synchronous` level is written into a pragma, so only the documented levels (`FULL`, `NORMAL`)
 * reach it: anything else a caller without types passes fails the open before the file, its lease or
 * its WAL exists.
 */
import { Effect, Exit } from "effect"
import { sql } from "kysely"
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import { openSqlite, type Synchronous } from "../src/internal/open-sqlite.ts"
import { expectReason, listing, temporaryDirectory } from "./fixtures/storage.ts"

/** A level the types forbid, as a host without types would pass it. */
const untyped = (value: unknown): Synchronous => value as Synchronous

describe("the synchronous level", () => {
  it("refuses a level other than FULL and NORMAL as UnsupportedDatabase, creating nothing", async () => {
    const folder = temporaryDirectory()
    const file = path.join(folder, "events.sqlite")
    for (const level of ["garbage", "OFF", "full", "FULL; PRAGMA foreign_keys = OFF", 5, 2, null]) {
      await expectReason(openSqlite(file, { synchronous: untyped(level) }), "UnsupportedDatabase", "synchronous must be one of FULL, NORMAL")
      await expectReason(openSqlite(":memory:", { synchronous: untyped(level) }), "UnsupportedDatabase", "synchronous must be one of FULL, NORMAL")
    }
    expect(listing(folder)).toEqual([])
  })

  it("refuses it through layerSqlite too", async () => {
    const folder = temporaryDirectory()
    const exit = await Effect.runPromiseExit(
      Effect.provide(
        Effect.gen(function* () {
          return (yield* EventLog.EventLog).location
        }),
        EventLog.layerSqlite({ path: path.join(folder, "events.sqlite"), synchronous: untyped("EXTRA") }),
      ),
    )
    expect(Exit.isFailure(exit)).toBe(true)
    expect(String(Exit.isFailure(exit) ? exit.cause : "")).toContain("synchronous must be one of FULL, NORMAL")
    expect(fs.readdirSync(folder)).toEqual([])
  })

  it("opens with each documented level, and the connection runs at it", async () => {
    expect(EventLog.SYNCHRONOUS_LEVELS).toEqual(["FULL", "NORMAL"])
    const folder = temporaryDirectory()
    // SQLite reports FULL as 2 and NORMAL as 1.
    for (const [level, reported] of [["FULL", 2], ["NORMAL", 1]] as const) {
      const database = await openSqlite(path.join(folder, `${level}.sqlite`), { synchronous: level })
      try {
        const rows = await database.read((transaction) => sql<{ readonly synchronous: number }>`PRAGMA synchronous`.execute(transaction))
        expect(rows.rows).toEqual([{ synchronous: reported }])
      } finally {
        await database.close()
      }
    }
  })
})
