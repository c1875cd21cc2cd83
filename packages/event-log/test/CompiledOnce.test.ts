/**
 * The hot reads compiled once per dialect (`rows.ts` `compiledOnce`, docs/architecture.md §12): run by
 * their SQL with each call's parameters, they answer as the same queries built by Kysely on every
 * call, call after call with other sessions and ranges in between; a query whose parameters do not
 * each reach the SQL as one bound value is refused at its first run instead of answering for the
 * wrong one.
 */
import { FactBuilders, History } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Effect } from "effect"
import { Kysely, sql } from "kysely"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import * as Rows from "../src/internal/rows.ts"
import { SqliteDialect } from "../src/internal/sqlite-driver.ts"
import type { Tables } from "../src/internal/tables.ts"
import { temporaryDirectory } from "./fixtures/storage.ts"

const SESSIONS = 3

let connection: BetterSqlite3.Database | undefined
let kysely: Kysely<Tables> | undefined

beforeAll(async () => {
  const file = path.join(temporaryDirectory(), "compiled-once.sqlite")
  await Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const log = yield* EventLog.fromDatabase(() => openSqlite(file, { synchronous: "NORMAL" }))
        for (let session = 0; session < SESSIONS; session++) {
          const history = new History.History({ sessionId: `session-${session}`, firstId: 1 + session * 10_000 })
          for (let turn = 0; turn <= session + 1; turn++) {
            const run = history.open({ message: `Turn ${turn}.`, invocationId: `session-${session}-invocation-${turn}` })
            const step = run.request()
            run.observe(step, { kind: "part_delta", id: "0", text: `turn ${turn}` })
            run.complete(step, FactBuilders.textStep("Done."))
            if (turn <= session) run.end({ kind: "completed" })
          }
          yield* log.appendBatch(history.writes)
        }
      }),
    ),
  )
  connection = new BetterSqlite3(file, { readonly: true })
  kysely = new Kysely<Tables>({ dialect: new SqliteDialect({ connection, closeOnDestroy: false }) })
})

afterAll(async () => {
  await kysely?.destroy()
  connection?.close()
})

const read = <A>(body: (tx: Rows.Tx) => Promise<A>): Promise<A> => kysely!.transaction().execute(body)

describe("reads compiled once per dialect", () => {
  it("answer as the queries built on every call, whatever was asked before", async () => {
    const built = {
      rows: (tx: Rows.Tx, sessionId: string) =>
        tx
          .selectFrom("event_log")
          .select(["sequence", "kind", "invocation_id", "event_json"])
          .where("session_id", "=", sessionId)
          .orderBy("sequence")
          .execute(),
      boundaries: (tx: Rows.Tx, invocationId: string) =>
        tx
          .selectFrom("event_log")
          .select(["kind", "event_json"])
          .where("invocation_id", "=", invocationId)
          .where("kind", "in", ["invocation_opened", "invocation_ended"])
          .orderBy("sequence")
          .execute(),
    }
    let compared = 0
    for (let round = 0; round < 2; round++) {
      for (let session = 0; session < SESSIONS; session++) {
        const sessionId = `session-${session}`
        await read(async (tx) => {
          const expected = await built.rows(tx, sessionId)
          const shape = expected.map((row) => [row.sequence, row.kind === "model_observed" ? row.invocation_id : null, row.event_json])
          expect(await Rows.sessionRows(tx, sessionId)).toEqual(shape)
          const highWater = await Rows.sessionHighWater(tx, sessionId)
          expect(highWater).toBe(Number(expected[expected.length - 1]!.sequence))
          // Every range of the session's rows, each bound where it belongs.
          const sequences = expected.map((row) => Number(row.sequence))
          for (const after of [0, sequences[1]!, sequences[3]!]) {
            for (const through of [sequences[2]!, sequences[5]!, highWater]) {
              expect(await Rows.sessionRowsBetween(tx, sessionId, after, through)).toEqual(
                shape.filter((row) => Number(row[0]) > after && Number(row[0]) <= through),
              )
              compared++
            }
          }
          for (let turn = 0; turn <= session + 2; turn++) {
            const invocationId = `session-${session}-invocation-${turn}`
            const { opening, terminal } = await Rows.boundaries(tx, invocationId)
            const rows = await built.boundaries(tx, invocationId)
            expect([opening?.json, terminal?.json].filter((json) => json !== undefined)).toEqual(rows.map((row) => row.event_json))
            compared++
          }
        })
      }
    }
    expect(compared).toBeGreaterThan(50)
    // The session before last had a live turn: its last invocation has an opening and no terminal.
    const live = await read((tx) => Rows.boundaries(tx, `session-${SESSIONS - 1}-invocation-${SESSIONS}`))
    expect(live.opening).toBeDefined()
    expect(live.terminal).toBeUndefined()
  })

  it("refuses, at its first run, a query that does not bind each of its parameters once", async () => {
    const literal = Rows.compiledOnce(1, (tx: Rows.Tx, sessionId: string) =>
      tx.selectFrom("event_log").select("sequence").where(sql<boolean>`session_id = ${sql.lit(sessionId)}`),
    )
    await expect(read((tx) => literal(tx, "session-0"))).rejects.toThrow("binds 0 of its 1 parameters")
    const twice = Rows.compiledOnce(1, (tx: Rows.Tx, sessionId: string) =>
      tx.selectFrom("event_log").select("sequence").where("session_id", "=", sessionId).where("invocation_id", "<>", sessionId),
    )
    await expect(read((tx) => twice(tx, "session-0"))).rejects.toThrow("binds 2 of its 1 parameters")
    const once = Rows.compiledOnce(1, (tx: Rows.Tx, sessionId: string) =>
      tx.selectFrom("event_log").select("sequence").where("session_id", "=", sessionId),
    )
    expect((await read((tx) => once(tx, "session-1"))).rows.length).toBeGreaterThan(0)
    expect((await read((tx) => once(tx, "session-9"))).rows).toEqual([])
  })
})
