/**
 * The plans SQLite chooses for the safety and recovery reads (docs/log-format.md §3.2): the busy
 * check, the unfinished-invocation scan at open and its pages, the latest opening and the high water
 * each descend an index, and none walks `event_log` or a session's every event. The SQL is the SQL the
 * reads send (captured from Kysely), planned with `EXPLAIN QUERY PLAN` on a log holding several
 * sessions. On PostgreSQL (PGlite) the same reads keep the openings' partial indexes under a generic
 * plan, which never sees a bound value: their kinds are literals.
 */
import type { PGlite } from "@electric-sql/pglite"
import { freshPglite } from "./support/pglite-snapshot.ts"
import { FactBuilders, History } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Effect } from "effect"
import {
  DummyDriver,
  Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  type CompiledQuery,
} from "kysely"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import { openPglite } from "../src/internal/open-postgres.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import * as Reads from "../src/internal/reads.ts"
import * as Rows from "../src/internal/rows.ts"
import * as SessionView from "../src/internal/session-view.ts"
import { SqliteDialect } from "../src/internal/sqlite-driver.ts"
import type { Tables } from "../src/internal/tables.ts"
import { temporaryDirectory } from "./fixtures/storage.ts"

/** Sessions of finished turns with tool calls, each with a live last turn. */
const histories = (): ReadonlyArray<History.History> =>
  Array.from({ length: 4 }, (_, session) => {
    const sessionId = `session-${session}`
    const history = new History.History({ sessionId, firstId: 1 + session * 10_000 })
    for (let turn = 0; turn < 6; turn++) {
      const run = history.open({
        message: `Turn ${turn}.`,
        turnId: `${sessionId}-turn-${turn}`,
        runId: `${sessionId}-run-${turn}`,
        invocationId: `${sessionId}-invocation-${turn}`,
      })
      const step = run.request()
      run.observe(step, { kind: "part_delta", id: "0", text: "looking" })
      run.complete(step, FactBuilders.toolCallStep([{ id: `call-${turn}`, name: "list_files", input: { path: "." } }]))
      run.succeed(run.dispatch(step, `call-${turn}`), FactBuilders.jsonOutput([{ name: "README.md" }]))
      const answer = run.request()
      run.complete(answer, FactBuilders.textStep("Done."))
      if (turn < 5) run.end({ kind: "completed" })
    }
    return history
  })

let file = ""
let connection: BetterSqlite3.Database | undefined
let kysely: Kysely<Tables> | undefined
let captured: Array<CompiledQuery> = []

beforeAll(async () => {
  file = path.join(temporaryDirectory(), "plans.sqlite")
  await Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const log = yield* EventLog.fromDatabase(() => openSqlite(file, { synchronous: "NORMAL" }))
        for (const history of histories()) yield* log.appendBatch(history.writes)
      }),
    ),
  )
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

/** The plan lines of every statement `read` sends, in order. */
const plansOf = async (read: (tx: Rows.Tx) => Promise<unknown>): Promise<ReadonlyArray<ReadonlyArray<string>>> => {
  if (kysely === undefined || connection === undefined) throw new Error("the log is not open")
  captured = []
  await kysely.transaction().execute(read)
  const open = connection
  return captured
    .filter((query) => /^\s*select/i.test(query.sql))
    .map((query) =>
      open
        .prepare(`EXPLAIN QUERY PLAN ${query.sql}`)
        .all(...query.parameters)
        .map((row) => String(Reflect.get(row as object, "detail"))),
    )
}

/** A plan line that reads every row of a table (a `SCAN` without an index) or of a full index. */
const fullScans = (plans: ReadonlyArray<ReadonlyArray<string>>): ReadonlyArray<string> =>
  plans.flat().filter((line) => /^SCAN /.test(line) && !/USING (COVERING )?INDEX event_log_(session_)?openings\b/.test(line))

describe("query plans of the safety and recovery reads on SQLite", () => {
  it("finds a session's unsealed openings from the session's openings, not its every event", async () => {
    const plans = await plansOf((tx) => Rows.unsealedOpenings(tx, "session-2"))
    expect(plans).toHaveLength(1)
    expect(fullScans(plans)).toEqual([])
    expect(plans[0]![0]).toMatch(/^SEARCH opening USING INDEX event_log_session_openings \(session_id=\?\)/)
    expect(plans[0]!.join("\n")).toMatch(/SEARCH terminal USING COVERING INDEX event_log_invocation_boundary \(invocation_id=\? AND kind=\?\)/)
    expect((await kysely!.transaction().execute((tx) => Rows.unsealedOpenings(tx, "session-2"))).map((row) => row.invocationId)).toEqual([
      "session-2-invocation-5",
    ])
  })

  it("walks the log's openings in order for the unfinished-invocation scan and its pages, never the log", async () => {
    const all = await plansOf((tx) => Reads.unfinishedInvocations(tx, 100))
    expect(fullScans(all)).toEqual([])
    expect(all[0]![0]).toMatch(/^SCAN opening USING INDEX event_log_openings$/)
    const page = await plansOf((tx) => Reads.unfinishedInvocationPage(tx, 5, 2))
    expect(fullScans(page)).toEqual([])
    expect(page[0]![0]).toMatch(/^SEARCH opening USING INDEX event_log_openings \(sequence>\?\)/)
    const found = await kysely!.transaction().execute((tx) => Reads.unfinishedInvocationPage(tx, 0, 3))
    expect(found.invocations.map((invocation) => invocation.invocationId)).toEqual([
      "session-0-invocation-5",
      "session-1-invocation-5",
      "session-2-invocation-5",
    ])
    expect(found.next).toBeGreaterThan(0)
  })

  it("reads the latest opening and the openings of a session from the openings' index", async () => {
    const latest = await plansOf((tx) => Rows.latestOpening(tx, "session-1"))
    expect(latest[0]![0]).toMatch(/USING (COVERING )?INDEX event_log_session_openings \(session_id=\?\)/)
    // The statement itself returns one row of the session's six openings, not all of them.
    const [sent] = captured.filter((query) => /^\s*select/i.test(query.sql))
    expect(connection!.prepare(sent!.sql).all(...sent!.parameters)).toHaveLength(1)
    const openings = await plansOf((tx) => Rows.ofSessionKind(tx, "session-1", "invocation_opened"))
    expect(await kysely!.transaction().execute((tx) => Rows.ofSessionKind(tx, "session-1", "invocation_opened"))).toHaveLength(6)
    expect(openings[0]![0]).toMatch(/USING (COVERING )?INDEX event_log_session_openings \(session_id=\?\)/)
    expect(fullScans([...latest, ...openings])).toEqual([])
  })

  it("reads a batch's rows by event id, by operation and its invocations' boundaries from three unique indexes, never the log", async () => {
    const plans = await plansOf((tx) => Rows.byEventsOrOperations(tx, ["event-1", "event-2"], ["step-1", "step-2:call-1"], ["invocation-1"]))
    expect(plans).toHaveLength(1)
    expect(fullScans(plans)).toEqual([])
    expect(plans[0]!.join("\n")).toMatch(/INDEX event_log_event_id \(event_id=\?\)/)
    expect(plans[0]!.join("\n")).toMatch(/INDEX event_log_operation_fact \(operation_id=\?\)/)
    expect(plans[0]!.join("\n")).toMatch(/INDEX event_log_invocation_boundary \(invocation_id=\? AND kind=\?\)/)
  })

  /** The plan of SQL the log runs by its own prepared statement on SQLite (not through Kysely). */
  const planOf = (sql: string, ...parameters: ReadonlyArray<unknown>) =>
    connection!
      .prepare(`EXPLAIN QUERY PLAN ${sql}`)
      .all(...parameters)
      .map((row) => String(Reflect.get(row as object, "detail")))

  it("reads a session's high water from one covering index descent", async () => {
    expect(await plansOf((tx) => Rows.sessionHighWater(tx, "session-3"))).toEqual([])
    expect(planOf(Rows.SESSION_HIGH_WATER_SQL, "session-3")).toEqual(["SEARCH event_log USING COVERING INDEX event_log_session_sequence (session_id=?)"])
  })

  it("reads a session's rows for the writer's index through the session's index, by their own SQL", async () => {
    expect(await plansOf((tx) => Rows.ofSession(tx, "session-3"))).toEqual([])
    expect(await plansOf((tx) => Rows.ofSession(tx, "session-3", { withObservations: false }))).toEqual([])
    for (const sql of [Rows.SESSION_FACTS_SQL, Rows.SESSION_FACTS_WITHOUT_OBSERVATIONS_SQL]) {
      expect(planOf(sql, "session-3")).toEqual(["SEARCH event_log USING INDEX event_log_session_sequence (session_id=?)"])
    }
  })

  it("summarises the sessions from the session index and one boundary look-up per opening", async () => {
    const plans = await plansOf((tx) => Reads.sessionSummaries(tx))
    // Counting a session's events reads its index entries (covering: no row); no session here holds
    // a run sealed outcome_unknown, so no session's calls are read.
    expect(plans).toEqual([
      ["SCAN event_log USING COVERING INDEX event_log_session_sequence", "USE TEMP B-TREE FOR ORDER BY"],
      [
        "SCAN opened USING INDEX event_log_openings",
        "SEARCH ended USING INDEX event_log_invocation_boundary (invocation_id=? AND kind=?) LEFT-JOIN",
      ],
    ])
    const summaries = await kysely!.transaction().execute((tx) => Reads.sessionSummaries(tx))
    expect(summaries.map(({ sessionId, invocations, unsealed, unknownOutcomes }) => [sessionId, invocations, unsealed, unknownOutcomes])).toEqual(
      [0, 1, 2, 3].map((session) => [`session-${session}`, 6, 1, 0]),
    )
    expect(summaries.map((summary) => summary.events)).toEqual(histories().map((history) => history.events.length))
  })

  it("finds a session's newest checkpoint by walking its index down from the fence, never the log", async () => {
    const bounded = await plansOf((tx) => Rows.latestOfKind(tx, "session-1", "context_checkpoint_recorded", 40_000))
    expect(bounded).toEqual([["SEARCH event_log USING INDEX event_log_session_sequence (session_id=? AND sequence<?)"]])
    const newest = await plansOf((tx) => Rows.latestOfKind(tx, "session-1", "context_checkpoint_recorded"))
    expect(newest).toEqual([["SEARCH event_log USING INDEX event_log_session_sequence (session_id=?)"]])
  })

  it("reads an invocation's settled operations for its boundary check from the invocation's index", async () => {
    const plans = await plansOf((tx) => Rows.operationsOfKind(tx, "session-1-invocation-5", "tool_settled"))
    expect(plans).toEqual([["SEARCH event_log USING INDEX event_log_invocation_sequence (invocation_id=?)"]])
    expect(await kysely!.transaction().execute((tx) => Rows.operationsOfKind(tx, "session-1-invocation-5", "tool_settled"))).toHaveLength(1)
  })

  it("checks whether a result is archived already through the archived-result index, never the session's archives", async () => {
    const plans = await plansOf((tx) => new SessionView.SqlView(tx, "sqlite").isArchived("session-1", "event-1"))
    expect(plans).toEqual([["SEARCH event_log USING INDEX event_log_archived_result (session_id=? AND <expr>=?)"]])
  })

  it("reads a context in one select of the session through its index", async () => {
    // On SQLite the log runs the select by its own SQL (raw rows, no query building): nothing goes
    // through Kysely, so its plan is read from that SQL.
    expect(await plansOf((tx) => Rows.sessionRows(tx, "session-0"))).toEqual([])
    expect(planOf(Rows.SESSION_ROWS_SQL, "session-0")).toEqual(["SEARCH event_log USING INDEX event_log_session_sequence (session_id=?)"])
    expect(planOf(Rows.SESSION_ROWS_BETWEEN_SQL, "session-0", 1, 9)).toEqual([
      "SEARCH event_log USING INDEX event_log_session_sequence (session_id=? AND sequence>? AND sequence<?)",
    ])
  })
})

describe("query plans of the openings' reads on PostgreSQL under a generic plan", () => {
  const schema = `plans_${process.pid}`
  let pglite: PGlite | undefined
  const compiled: Array<CompiledQuery> = []
  // Compiles the reads' SQL without running it (the dummy driver returns no rows).
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
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const log = yield* EventLog.fromDatabase(() => openPglite(instance, { schema }))
          for (const history of histories()) yield* log.appendBatch(history.writes)
        }),
      ),
    )
    await instance.exec(`SET search_path TO "${schema}"; SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off`)
  }, 120_000)

  afterAll(async () => {
    await compiler.destroy()
    await pglite?.close()
  })

  const literal = (value: unknown): string =>
    typeof value === "number" ? String(value) : `'${String(value).replaceAll("'", "''")}'`

  /** The generic plan of the one statement `read` sends, as text. */
  const genericPlan = async (read: (tx: Rows.Tx) => Promise<unknown>): Promise<string> => {
    compiled.length = 0
    await compiler.transaction().execute(read)
    const selects = compiled.filter((query) => /^\s*select/i.test(query.sql))
    expect(selects).toHaveLength(1)
    const query = selects[0]!
    const instance = pglite!
    await instance.exec("DEALLOCATE ALL")
    await instance.query(`PREPARE plan_under_test AS ${query.sql}`)
    const rows = (await instance.query(`EXPLAIN EXECUTE plan_under_test(${query.parameters.map(literal).join(", ")})`)).rows
    return rows.map((row) => String(Reflect.get(row as object, "QUERY PLAN"))).join("\n")
  }

  it("finds a session's unsealed openings through event_log_session_openings", async () => {
    const plan = await genericPlan((tx) => Rows.unsealedOpenings(tx, "session-2"))
    expect(plan).toMatch(/event_log_session_openings/)
    expect(plan).toMatch(/event_log_invocation_boundary/)
  })

  it("reads a batch's rows by event id, by operation and its invocations' boundaries through their unique indexes", async () => {
    const plan = await genericPlan((tx) => Rows.byEventsOrOperations(tx, ["event-1", "event-2"], ["step-1"], ["invocation-1"]))
    expect(plan).toMatch(/BitmapOr/)
    expect(plan).toMatch(/event_log_invocation_boundary/)
    expect(plan).toMatch(/event_log_event_id/)
    expect(plan).toMatch(/event_log_operation_fact/)
  })

  it("checks whether a result is archived already through event_log_archived_result", async () => {
    expect(await genericPlan((tx) => new SessionView.SqlView(tx, "postgres").isArchived("session-1", "event-1"))).toMatch(/event_log_archived_result/)
  })

  it("walks the log's openings through event_log_openings, and reads the latest opening from its index", async () => {
    expect(await genericPlan((tx) => Reads.unfinishedInvocationPage(tx, 5, 2))).toMatch(/event_log_openings/)
    expect(await genericPlan((tx) => Rows.latestOpening(tx, "session-1"))).toMatch(/event_log_session_openings/)
  })
})
