/**
 * The plans of `pendingHandoffs`: it reads the handoff terminals from the successor index and never
 * walks the log, on SQLite (`EXPLAIN QUERY PLAN`) and on PostgreSQL (PGlite, under a generic plan,
 * where the planner may take either partial index of terminals on a log this small).
 */
import type { PGlite } from "@electric-sql/pglite"
import { freshPglite } from "./support/pglite-snapshot.ts"
import { FactBuilders, History } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Effect } from "effect"
import { DummyDriver, Kysely, PostgresAdapter, PostgresIntrospector, PostgresQueryCompiler, type CompiledQuery } from "kysely"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import * as Lineage from "../src/internal/lineage.ts"
import { openPglite } from "../src/internal/open-postgres.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import { SqliteDialect } from "../src/internal/sqlite-driver.ts"
import type { Tables } from "../src/internal/tables.ts"
import { temporaryDirectory } from "./fixtures/storage.ts"

/** Sessions of finished turns, every third one ending its last run `handoff_paused`. */
const histories = (): ReadonlyArray<History.History> =>
  Array.from({ length: 9 }, (_, session) => {
    const sessionId = `session-${session}`
    const history = new History.History({ sessionId, firstId: 1 + session * 1_000 })
    for (let turn = 0; turn < 4; turn++) {
      const run = history.open({ turnId: `${sessionId}-turn-${turn}`, runId: `${sessionId}-run-${turn}`, invocationId: `${sessionId}-invocation-${turn}` })
      run.complete(run.request(), FactBuilders.textStep("Done."))
      run.end(turn === 3 && session % 3 === 0 ? { kind: "handoff_paused", pause: run.pause() } : { kind: "completed" })
    }
    return history
  })

const seed = (log: EventLog.EventLogShape) => Effect.forEach(histories(), (history) => log.appendBatch(history.writes))

describe("the plan of pendingHandoffs on SQLite", () => {
  let file = ""
  let connection: BetterSqlite3.Database | undefined
  let kysely: Kysely<Tables> | undefined
  const captured: Array<CompiledQuery> = []

  beforeAll(async () => {
    file = path.join(temporaryDirectory(), "pending.sqlite")
    await Effect.runPromise(Effect.scoped(Effect.flatMap(EventLog.fromDatabase(() => openSqlite(file, { synchronous: "NORMAL" })), seed)))
    connection = new BetterSqlite3(file, { readonly: true })
    kysely = new Kysely<Tables>({
      dialect: new SqliteDialect({ connection, closeOnDestroy: false }),
      log: (event) => {
        if (event.level === "query") captured.push(event.query)
      },
    })
  })

  afterAll(async () => {
    await kysely?.destroy()
    connection?.close()
  })

  it("searches the successor index for handoff terminals, never scanning the log", async () => {
    captured.length = 0
    const found = await kysely!.transaction().execute((tx) => Lineage.pendingHandoffs(tx, "sqlite", 0))
    expect(found.map((item) => item.sessionId)).toEqual(["session-0", "session-3", "session-6"])
    const selects = captured.filter((query) => /^\s*select/i.test(query.sql))
    expect(selects).toHaveLength(1)
    const query = selects[0]!
    const plan = connection!
      .prepare(`EXPLAIN QUERY PLAN ${query.sql}`)
      .all(...query.parameters)
      .map((row) => String(Reflect.get(row as object, "detail")))
    expect(plan[0]).toMatch(/^SEARCH terminal USING INDEX event_log_successor_invocation \(<expr>>\?\)/)
    expect(plan.join("\n")).toMatch(/SEARCH opening USING COVERING INDEX event_log_invocation_boundary \(invocation_id=\? AND kind=\?\)/)
    expect(plan.filter((line) => /^SCAN /.test(line))).toEqual([])
  })
})

describe("the plan of pendingHandoffs on PostgreSQL under a generic plan", () => {
  const schema = `pending_plans_${process.pid}`
  let pglite: PGlite | undefined
  const compiled: Array<CompiledQuery> = []
  const compiler = new Kysely<Tables>({
    dialect: {
      createAdapter: () => new PostgresAdapter(),
      createDriver: () => new DummyDriver(),
      createIntrospector: (db) => new PostgresIntrospector(db),
      createQueryCompiler: () => new PostgresQueryCompiler(),
    },
    log: (event) => {
      if (event.level === "query") compiled.push(event.query)
    },
  })

  beforeAll(async () => {
    const instance = freshPglite()
    pglite = instance
    await Effect.runPromise(Effect.scoped(Effect.flatMap(EventLog.fromDatabase(() => openPglite(instance, { schema })), seed)))
    await instance.exec(`SET search_path TO "${schema}"; SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off`)
  }, 120_000)

  afterAll(async () => {
    await compiler.destroy()
    await pglite?.close()
  })

  it("reads the handoff terminals through a partial index of terminals, never the log", async () => {
    compiled.length = 0
    await compiler.transaction().execute((tx) => Lineage.pendingHandoffs(tx, "postgres", 0))
    const selects = compiled.filter((query) => /^\s*select/i.test(query.sql))
    expect(selects).toHaveLength(1)
    const instance = pglite!
    await instance.query(`PREPARE pending_plan AS ${selects[0]!.sql}`)
    const parameters = selects[0]!.parameters.map((value) => String(value)).join(", ")
    const rows = (await instance.query(`EXPLAIN EXECUTE pending_plan(${parameters})`)).rows
    const plan = rows.map((row) => String(Reflect.get(row as object, "QUERY PLAN"))).join("\n")
    // A partial index of terminals (the successor index, or the boundaries' on a log this small), never the log.
    expect(plan).toMatch(/Index (Only )?Scan using event_log_(successor_invocation|invocation_boundary) on event_log terminal/)
    expect(plan).not.toMatch(/Seq Scan/)
  })
})
