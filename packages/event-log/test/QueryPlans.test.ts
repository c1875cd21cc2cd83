/**
 * The plans SQLite chooses for the safety and recovery reads (docs/log-format.md §3.2): the busy
 * check, the unfinished-invocation scan at open and its pages, the latest opening and the high water
 * each descend an index, and none walks `event_log` or a session's every event. The SQL is the SQL the
 * reads send (captured from Kysely), planned with `EXPLAIN QUERY PLAN` on a log holding several
 * sessions.
 */
import { FactBuilders, History } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Effect } from "effect"
import { Kysely, type CompiledQuery } from "kysely"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import * as Reads from "../src/internal/reads.ts"
import * as Rows from "../src/internal/rows.ts"
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
    const openings = await plansOf((tx) => Rows.ofSessionKind(tx, "session-1", "invocation_opened"))
    expect(openings[0]![0]).toMatch(/USING (COVERING )?INDEX event_log_session_openings \(session_id=\?\)/)
    expect(fullScans([...latest, ...openings])).toEqual([])
  })

  it("reads a session's high water from one covering index descent", async () => {
    const plans = await plansOf((tx) => Rows.sessionHighWater(tx, "session-3"))
    expect(plans).toEqual([["SEARCH event_log USING COVERING INDEX event_log_session_sequence (session_id=?)"]])
  })

  it("reads a context in one select of the session through its index", async () => {
    const plans = await plansOf((tx) => Rows.sessionRows(tx, "session-0"))
    expect(plans).toEqual([["SEARCH event_log USING INDEX event_log_session_sequence (session_id=?)"]])
  })
})
