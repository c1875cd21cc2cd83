/**
 * Connections a PostgreSQL log's pool holds idle, ended under it (docs/log-format.md §3.3): by the
 * server (`pg_terminate_backend`, a restart) or by a proxy. The next write or read may be handed a
 * client whose connection is gone before the pool has seen it close; it fails before anything of it
 * was written, so it is tried again on a fresh client, and an append, whose loss would lose a tool's
 * settlement, lands. Runs when MAKA_TEST_DATABASE_URL names a server; skipped with a printed reason
 * otherwise, except under CI (CI=true), where a missing server fails the tests.
 */
import { FactBuilders, History } from "@maka/testkit"
import { Context, Effect, Layer } from "effect"
import pg from "pg"
import { describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import { isConnectionLost } from "../src/internal/database-handle.ts"

const inCi = process.env["CI"] === "true" || process.env["CI"] === "1"
const url = process.env["MAKA_TEST_DATABASE_URL"] === "" ? undefined : process.env["MAKA_TEST_DATABASE_URL"]

/** Rounds of ending every idle connection of the pool, each followed at once by an append and a read. */
const ROUNDS = 12

/** The URL with an `application_name` of this test's own: only its connections are ended. */
const named = (server: string, name: string): string => `${server}${server.includes("?") ? "&" : "?"}application_name=${name}`

describe("a PostgreSQL log whose pooled connections are ended while idle", () => {
  if (url === undefined && !inCi) {
    console.log("note: MAKA_TEST_DATABASE_URL is unset; the dropped-connection cases of PostgresDroppedConnections.test.ts do not run here")
  }

  it.runIf(url !== undefined || inCi)("tries a write or read that met a lost connection again: every append lands, once", async () => {
    if (url === undefined) throw new Error("MAKA_TEST_DATABASE_URL is unset: under CI this suite needs the PostgreSQL server")
    const name = `maka_dropped_${process.pid}_${Date.now().toString(36)}`
    const schema = name
    const killer = new pg.Client({ connectionString: url })
    await killer.connect()
    try {
      await Effect.runPromise(
        Effect.scoped(
          Effect.gen(function* () {
            const context = yield* Layer.build(EventLog.layerPostgres({ url: named(url, name), schema }))
            const log = Context.get(context, EventLog.EventLog)
            const history = History.smallRun()
            let written = 0
            for (let round = 0; round < ROUNDS; round++) {
              // One more run of the session: its opening, a request, the answer and its terminal.
              const run = history.open({ message: `Round ${round}.` })
              run.complete(run.request(), FactBuilders.textStep(`Answer ${round}.`))
              run.end()
              const writes = history.writes.slice(written)
              // Several clients of the pool in use, then idle.
              yield* Effect.all(
                Array.from({ length: 4 }, () => log.events("session-1", 0, 10)),
                { concurrency: 4 },
              )
              const ended = yield* Effect.promise(() =>
                killer.query(
                  `SELECT count(pg_terminate_backend(pid)) AS ended FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`,
                  [name],
                ),
              )
              expect(Number(ended.rows[0]?.ended)).toBeGreaterThan(0)
              // At once: the pool may not have seen the ends yet.
              for (const write of writes) yield* log.append(write)
              written = history.writes.length
              const stored = yield* log.events("session-1", 0, 10_000)
              expect(stored.map((event) => event.event.id)).toEqual(history.writes.map((write) => write.event.id))
            }
          }),
        ),
      )
    } finally {
      await killer.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
      await killer.end()
    }
  }, 60_000)
})

describe("isConnectionLost", () => {
  it("is the server ending the backend, a connection exception or a closed socket, never another error", () => {
    const withCode = (code: string, message = "x") => Object.assign(new Error(message), { code })
    for (const lost of [
      withCode("57P01", "terminating connection due to administrator command"),
      withCode("57P02"),
      withCode("57P03"),
      withCode("08006"),
      withCode("08003"),
      // PgBouncer's "server conn crashed?" when the server side of a pooled connection went away.
      withCode("08P01", "server conn crashed?"),
      withCode("ECONNRESET"),
      withCode("EPIPE"),
      new Error("Connection terminated unexpectedly"),
      new Error("Client has encountered a connection error and is not queryable"),
    ]) {
      expect(isConnectionLost(lost), lost.message).toBe(true)
    }
    for (const other of [
      withCode("23505", "duplicate key"),
      withCode("40001"),
      withCode("42P01"),
      new Error("the session is busy"),
      new Error("Connection terminated due to connection timeout"),
      withCode("ETIMEDOUT"),
    ]) {
      expect(isConnectionLost(other), other.message).toBe(false)
    }
  })
})

describe("hosts opening one PostgreSQL log at once under a short lock_timeout", () => {
  it.runIf(url !== undefined || inCi)("all open: each waits for the others' open at the schema's lock", async () => {
    if (url === undefined) throw new Error("MAKA_TEST_DATABASE_URL is unset: under CI this suite needs the PostgreSQL server")
    const killer = new pg.Client({ connectionString: url })
    await killer.connect()
    // The role's settings as a connection's: every statement of these hosts gives up a lock after 1 ms.
    const impatient = `${url}${url.includes("?") ? "&" : "?"}options=${encodeURIComponent("-c lock_timeout=1ms")}`
    const schemas: Array<string> = []
    try {
      for (let round = 0; round < 3; round++) {
        const schema = `maka_open_race_${process.pid}_${Date.now().toString(36)}_${round}`
        schemas.push(schema)
        // The first round's hosts create and migrate the schema; the later rounds' open it again too.
        for (const _pass of [0, 1]) {
          const opened = await Promise.allSettled(
            Array.from({ length: 6 }, () =>
              Effect.runPromise(
                Effect.scoped(
                  Effect.gen(function* () {
                    const context = yield* Layer.build(EventLog.layerPostgres({ url: impatient, schema }))
                    return yield* Context.get(context, EventLog.EventLog).events("session-1", 0, 1)
                  }),
                ),
              ),
            ),
          )
          const failed = opened.flatMap((outcome) => (outcome.status === "rejected" ? [String(outcome.reason)] : []))
          expect(failed).toEqual([])
        }
      }
    } finally {
      for (const schema of schemas) await killer.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
      await killer.end()
    }
  }, 60_000)
})
