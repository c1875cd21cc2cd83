/**
 * Migration 2 on a log written by version 1 (docs/log-format.md §3.1): a store built with version
 * 1's statements and rows as its append wrote them opens, records version 2, gains the openings'
 * partial indexes and loses the turn index, and keeps every event, digest and rule. On SQLite, on
 * PGlite, and on a PostgreSQL server when `MAKA_TEST_DATABASE_URL` is set.
 */
import type { PGlite } from "@electric-sql/pglite"
import { freshPglite } from "./support/pglite-snapshot.ts"
import { Fact, type EventWrite } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Effect } from "effect"
import * as crypto from "node:crypto"
import * as path from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import type { Database } from "../src/internal/database.ts"
import { INDEXES, MIGRATIONS } from "../src/internal/migrations.ts"
import { openPglite, openPostgres } from "../src/internal/open-postgres.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import { temporaryDirectory } from "./fixtures/storage.ts"
import { databaseUrl } from "./support/dialects.ts"
import { write } from "./support/harness.ts"

const VERSION_1 = MIGRATIONS.find((migration) => migration.version === 1)!
const NEW_INDEXES = ["event_log_openings", "event_log_session_openings"]
const DROPPED_INDEX = "event_log_session_turn_openings"

/** Two sessions: finished turns with a tool call and an observation, and a live last turn each. */
const histories = () =>
  ["session-1", "session-2"].map((sessionId, index) => {
    const history = new History.History({ sessionId, firstId: 1 + index * 1_000 })
    const ids = (turn: number) => ({
      turnId: `${sessionId}-turn-${turn}`,
      runId: `${sessionId}-run-${turn}`,
      invocationId: `${sessionId}-invocation-${turn}`,
    })
    for (let turn = 0; turn < 2; turn++) {
      const run = history.open({ message: `Turn ${turn}.`, ...ids(turn) })
      const step = run.request()
      run.observe(step, { kind: "part_delta", id: "0", text: "looking" })
      run.complete(step, FactBuilders.toolCallStep([{ id: `call-${turn}`, name: "list_files", input: { path: "." } }]))
      run.succeed(run.dispatch(step, `call-${turn}`), FactBuilders.jsonOutput([{ name: "README.md" }]))
      const answer = run.request()
      run.complete(answer, FactBuilders.textStep("Done."))
      run.end({ kind: "completed" })
    }
    const live = history.open({ message: "And now?", ...ids(2) })
    return { history, live, step: live.request() }
  })

/** The row version 1's append inserts for `write`, in column order, and its payload row if any. */
const rowOf = (item: EventWrite.EventWrite) => {
  const event = item.event
  return {
    values: [
      event.id,
      event.invocation.sessionId,
      event.invocation.turnId,
      event.invocation.runId,
      event.invocation.invocationId,
      event.fact.kind,
      Fact.operationKey(event.fact) ?? null,
      item.json,
    ],
    payload: item.rawPayload === undefined ? undefined : [event.id, item.rawPayload],
  }
}

interface Backend {
  readonly name: string
  readonly isAvailable: boolean
  /** Builds a version-1 store holding `writes` (interleaved as given) and returns how to open it. */
  readonly build: (writes: ReadonlyArray<EventWrite.EventWrite>) => Promise<{
    readonly open: () => Promise<Database>
    readonly indexes: () => Promise<ReadonlyArray<string>>
  }>
}

const sqlite: Backend = {
  name: "sqlite",
  isAvailable: true,
  build: async (writes) => {
    const file = path.join(temporaryDirectory(), "version-1.sqlite")
    const connection = new BetterSqlite3(file)
    connection.pragma("journal_mode = WAL")
    connection.transaction(() => {
      for (const statement of VERSION_1.sqlite) connection.exec(statement)
      connection.prepare("INSERT INTO schema_migrations (version, applied_at) VALUES (1, 1700000000000)").run()
      const insert = connection.prepare(
        "INSERT INTO event_log (event_id, session_id, turn_id, run_id, invocation_id, kind, operation_id, event_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
      )
      const payload = connection.prepare("INSERT INTO tool_result_payloads (event_id, payload) VALUES (?, ?)")
      for (const item of writes) {
        const row = rowOf(item)
        insert.run(...row.values)
        if (row.payload !== undefined) payload.run(...row.payload)
      }
    })()
    connection.close()
    return {
      open: () => openSqlite(file, { synchronous: "NORMAL" }),
      indexes: async () => {
        const reader = new BetterSqlite3(file, { readonly: true })
        const rows = reader.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%'").all()
        reader.close()
        return rows.map((row) => String(Reflect.get(row as object, "name"))).sort()
      },
    }
  },
}

/** A PostgreSQL-family backend over a `query(text, parameters)` function. */
const postgresFamily = (
  name: string,
  isAvailable: boolean,
  query: () => (text: string, parameters?: ReadonlyArray<unknown>) => Promise<ReadonlyArray<unknown>>,
  open: (schema: string) => Promise<Database>,
): Backend => ({
  name,
  isAvailable,
  build: async (writes) => {
    const schema = `m2_${process.pid}_${crypto.randomBytes(3).toString("hex")}`
    const run = query()
    await run(`CREATE SCHEMA "${schema}"`)
    await run(`SET search_path TO "${schema}"`)
    for (const statement of VERSION_1.postgres) await run(statement)
    await run("INSERT INTO schema_migrations (version, applied_at) VALUES (1, 1700000000000)")
    for (const item of writes) {
      const row = rowOf(item)
      await run(
        "INSERT INTO event_log (event_id, session_id, turn_id, run_id, invocation_id, kind, operation_id, event_json) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        row.values,
      )
      if (row.payload !== undefined) await run("INSERT INTO tool_result_payloads (event_id, payload) VALUES ($1, $2)", row.payload)
    }
    await run("RESET search_path")
    return {
      open: () => open(schema),
      indexes: async () =>
        (await run("SELECT indexname FROM pg_indexes WHERE schemaname = $1", [schema]))
          .map((row) => String(Reflect.get(row as object, "indexname")))
          .filter((index) => !index.endsWith("_pkey"))
          .sort(),
    }
  },
})

let pglite: PGlite | undefined
const pgliteInstance = () => (pglite ??= freshPglite())
let client: pg.Client | undefined
let clientReady: Promise<void> | undefined
const serverClient = async () => {
  client ??= new pg.Client({ connectionString: databaseUrl })
  clientReady ??= client.connect().then(() => undefined)
  await clientReady
  return client
}

// Starting PGlite can take long on a loaded machine: do it outside the tests' time limit.
beforeAll(async () => {
  await pgliteInstance().waitReady
}, 180_000)

afterAll(async () => {
  await pglite?.close()
  await client?.end()
})

const backends: ReadonlyArray<Backend> = [
  sqlite,
  postgresFamily(
    "pglite",
    true,
    () => async (text, parameters) => (await pgliteInstance().query(text, parameters === undefined ? [] : [...parameters])).rows,
    (schema) => openPglite(pgliteInstance(), { schema }),
  ),
  postgresFamily(
    "postgres",
    databaseUrl !== undefined && databaseUrl !== "",
    () => async (text, parameters) => (await (await serverClient()).query(text, parameters === undefined ? [] : [...parameters])).rows,
    (schema) => openPostgres({ url: databaseUrl ?? "" }, { schema }),
  ),
]

for (const backend of backends) {
  describe.skipIf(!backend.isAvailable)(`migration 2 on a version-1 log on ${backend.name}`, () => {
    it("records version 2, swaps the openings' indexes and keeps every event, digest and rule", async () => {
      const built = histories()
      // Interleaved as two live sessions would write them.
      const writes: Array<EventWrite.EventWrite> = []
      const [first, second] = built
      for (let index = 0; index < Math.max(first!.history.writes.length, second!.history.writes.length); index++) {
        for (const { history } of built) {
          const item = history.writes[index]
          if (item !== undefined) writes.push(item)
        }
      }
      const store = await backend.build(writes)
      const before = await store.indexes()
      expect(before).toContain(DROPPED_INDEX)
      for (const index of NEW_INDEXES) expect(before).not.toContain(index)

      const database = await store.open()
      const versions = await database.read(async (tx) =>
        (await tx.selectFrom("schema_migrations").select("version").orderBy("version").execute()).map((row) => Number(row.version)),
      )
      expect(versions).toEqual([1, 2])
      const after = await store.indexes()
      for (const index of NEW_INDEXES) expect(after).toContain(index)
      expect(after).not.toContain(DROPPED_INDEX)
      expect(after.filter((index) => index !== "event_log_event_id")).toEqual(
        [...INDEXES].filter((index) => index !== "event_log_event_id").sort(),
      )

      await Effect.runPromise(
        Effect.gen(function* () {
          const log = yield* EventLog.make(database)
          for (const { history, live, step } of built) {
            const sessionId = history.sessionId
            const stored = yield* log.events(sessionId)
            expect(stored.map((item) => item.event)).toEqual(history.events.map((item) => item.event))
            const read = yield* log.readModelContextWithHash(sessionId, { current: live.invocation.invocationId })
            const highWater = stored[stored.length - 1]!.sequence
            expect(read.source.sourceEvidence.highWater).toBe(highWater)
            expect(yield* log.sessionHighWater(sessionId)).toBe(highWater)
            expect(read.hash.digest(highWater)).toBe((yield* log.sessionHash(sessionId, highWater)).digest(highWater))
            // The rules still hold: the live invocation takes its next event, a second opening is refused.
            yield* log.append(write(live.invocation, { kind: "model_observed", stepId: step, event: { kind: "part_delta", id: "0", text: "on" } }))
            history.open({ message: "Again.", turnId: `${sessionId}-turn-9`, runId: `${sessionId}-run-9`, invocationId: `${sessionId}-invocation-9` })
            const refused = yield* Effect.flip(log.append(history.writes[history.writes.length - 1]!))
            expect(refused.reason._tag).toBe("Rejected")
          }
          const page = yield* log.unfinishedInvocationPage()
          expect(page.invocations.map((invocation) => invocation.invocationId)).toEqual(["session-1-invocation-2", "session-2-invocation-2"])
          yield* log.close
        }),
      )
    })
  })
}

describe("the page size of SQLite logs", () => {
  it("creates a new log with 1,024-byte pages and keeps an existing log's own", async () => {
    const fresh = path.join(temporaryDirectory(), "fresh.sqlite")
    await (await openSqlite(fresh, { synchronous: "NORMAL" })).close()
    const pageSize = (file: string) => {
      const reader = new BetterSqlite3(file, { readonly: true })
      const size = reader.pragma("page_size", { simple: true })
      reader.close()
      return size
    }
    expect(pageSize(fresh)).toBe(1_024)
    const store = await sqlite.build([])
    const database = await store.open()
    const file = database.location
    await database.close()
    expect(pageSize(file)).toBe(4_096)
  })
})
