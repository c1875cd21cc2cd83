/**
 * The streaming 10-step tool loop on PostgreSQL (docs/architecture.md §12): maka through `createEngine`
 * with `databaseUrl` (the PostgreSQL event log, `pg` pool, in a fresh schema), against the same loop on
 * SQLite (`synchronous=FULL`) and against the PostgreSQL durable floor (`fetch` + `eventsource-parser` +
 * two durable writes per step with a raw `pg` client, each one autocommitted `INSERT … unnest(…)`: one
 * round trip, one commit), with the SQLite floor beside it, all round-robin in each trial (the order
 * rotates), medians over the trials.
 *
 * The server is `MAKA_BENCH_DATABASE_URL`, else `MAKA_TEST_DATABASE_URL`; with neither set, every
 * figure is recorded as skipped (unit `skipped`, with the reason) and the bench succeeds. The bench
 * creates two schemas of its own (maka's log, the floor's table) and drops them at the end, so a
 * shared server is safe; its timings share that server's load.
 *
 * Commits and statements per step come from an accounting pass that counts what every `pg` client of
 * this process sends (`Client.prototype.query` wrapped): a commit is a `COMMIT` of a transaction that
 * wrote, or a writing statement outside a transaction (autocommit); read-only transactions are not
 * commits (they flush nothing). WAL bytes are not measured on PostgreSQL: the server's WAL position is
 * shared with every other client of the server.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import pg from "pg"
import { floor as sqliteFloor, maka, pgFloor } from "./contenders.ts"
import { startFakeServer } from "./fake-server.ts"
import { cpuMs, emit, entry, type Entry, integer, median, round, temporaryDirectory } from "./lib.ts"

const STEPS = 10
const LOOP_MODEL = `loop-${STEPS}`
const TRIALS = integer("MAKA_BENCH_TRIALS", 5)
/** Untimed round-robin trials first, as the engine bench's loop (`MAKA_BENCH_LOOP_WARMUP`, default 40). */
const WARMUP = integer("MAKA_BENCH_LOOP_WARMUP", 40)
const LOOPS = integer("MAKA_BENCH_PG_LOOPS", 3)
const ACCOUNTING_LOOPS = 3

const FIGURES = [
  "postgres.loop.msPerStep.vsSqlite",
  "postgres.loop.msPerStep.vsPgFloor",
  "postgres.loop.cpuMsPerStep.vsSqlite",
  "postgres.loop.commitsPerStep.vsPgFloor",
  "postgres.loop.statementsPerStep.vsPgFloor",
  "postgres.loop.pgFloor.msPerStep.vsSqliteFloor",
] as const

const url = process.env["MAKA_BENCH_DATABASE_URL"] || process.env["MAKA_TEST_DATABASE_URL"] || ""
if (url === "") {
  const reason = "skipped: neither MAKA_BENCH_DATABASE_URL nor MAKA_TEST_DATABASE_URL is set, so there is no PostgreSQL server to measure"
  console.log(reason)
  emit(Object.fromEntries(FIGURES.map((name) => [name, { value: 0, unit: "skipped", baseline: null, ratio: null, note: reason } satisfies Entry])))
  process.exit(0)
}

/** `url` with its `search_path` set to `schema` for every connection opened from it. */
const inSchema = (schema: string): string => {
  const parsed = new URL(url)
  parsed.searchParams.set("options", `-c search_path=${schema}`)
  return parsed.toString()
}

// --- statement and commit counter -----------------------------------------------------------------

const counts = { statements: 0, commits: 0 }
let counting = false
const writing = new WeakMap<object, { open: boolean; wrote: boolean }>()
const WRITE = /^\s*(insert|update|delete|merge|create|alter|drop|truncate|with\b[\s\S]*\b(insert|update|delete)\b)/i
const clientPrototype = pg.Client.prototype as unknown as { query: (...args: Array<unknown>) => unknown }
const originalQuery = clientPrototype.query
clientPrototype.query = function (this: object, ...args: Array<unknown>) {
  if (counting) {
    const first = args[0]
    const text = typeof first === "string" ? first : typeof first === "object" && first !== null ? String((first as { text?: unknown }).text ?? "") : ""
    const state = writing.get(this) ?? { open: false, wrote: false }
    writing.set(this, state)
    counts.statements++
    if (/^\s*(begin|start transaction)/i.test(text)) {
      state.open = true
      state.wrote = false
    } else if (/^\s*commit/i.test(text)) {
      if (state.wrote) counts.commits++
      state.open = false
    } else if (/^\s*rollback/i.test(text)) state.open = false
    else if (WRITE.test(text)) {
      if (state.open) state.wrote = true
      else counts.commits++
    }
  }
  return originalQuery.apply(this, args)
}

// --- setup -----------------------------------------------------------------------------------------

const stamp = `${process.pid}_${Date.now()}`
const makaSchema = `maka_bench_${stamp}`
const floorSchema = `maka_bench_floor_${stamp}`
const admin = new pg.Client({ connectionString: url })
await admin.connect()
await admin.query(`CREATE SCHEMA "${makaSchema}"`)
await admin.query(`CREATE SCHEMA "${floorSchema}"`)

const directory = temporaryDirectory("maka-bench-postgres-")
const workspace = path.join(directory, "workspace")
fs.mkdirSync(workspace)
const server = await startFakeServer()
const onPostgres = await maka({ databaseUrl: inSchema(makaSchema), baseUrl: server.baseUrl, workspace })
const onSqlite = await maka({ database: path.join(directory, "maka.sqlite"), baseUrl: server.baseUrl, workspace })
const floorClient = new pg.Client({ connectionString: inSchema(floorSchema) })
await floorClient.connect()
const floor = await pgFloor(floorClient, server.baseUrl)
const liteFloor = sqliteFloor(path.join(directory, "floor.sqlite"), server.baseUrl)

let sessions = 0
const makaLoop = (engine: typeof onPostgres) => async (): Promise<void> => {
  const turn = await engine.turn(`loop-${++sessions}`, LOOP_MODEL)
  if (turn.requestedAt.length !== STEPS) throw new Error(`maka made ${turn.requestedAt.length} requests, not ${STEPS}`)
}
const floorLoop = async (): Promise<void> => {
  const steps = await floor.loop(LOOP_MODEL)
  if (steps.length !== STEPS) throw new Error(`the floor made ${steps.length} requests, not ${STEPS}`)
}
const sqliteFloorLoop = async (): Promise<void> => {
  const steps = await liteFloor.loop(LOOP_MODEL)
  if (steps.length !== STEPS) throw new Error(`the SQLite floor made ${steps.length} requests, not ${STEPS}`)
}
const contenders = [
  { name: "postgres", loop: makaLoop(onPostgres) },
  { name: "sqlite", loop: makaLoop(onSqlite) },
  { name: "pgFloor", loop: floorLoop },
  { name: "sqliteFloor", loop: sqliteFloorLoop },
] as const
type Name = (typeof contenders)[number]["name"]

let results: Record<string, Entry> = {}
const wall: Record<Name, Array<number>> = { postgres: [], sqlite: [], pgFloor: [], sqliteFloor: [] }
const cpu: Record<Name, Array<number>> = { postgres: [], sqlite: [], pgFloor: [], sqliteFloor: [] }
try {
  for (let trial = 0; trial < WARMUP + TRIALS; trial++) {
    for (let position = 0; position < contenders.length; position++) {
      const contender = contenders[(trial + position) % contenders.length]!
      const cpuBefore = process.cpuUsage()
      const started = performance.now()
      for (let loop = 0; loop < LOOPS; loop++) await contender.loop()
      const elapsed = performance.now() - started
      const cpuUsed = cpuMs(cpuBefore)
      if (trial < WARMUP) continue
      wall[contender.name].push(elapsed / (LOOPS * STEPS))
      cpu[contender.name].push(cpuUsed / (LOOPS * STEPS))
    }
    const last = (name: Name) => round(wall[name].at(-1) ?? Number.NaN, 2)
    console.log(
      trial < WARMUP
        ? `warm-up ${trial + 1}/${WARMUP}`
        : `trial ${trial - WARMUP + 1}/${TRIALS}: ms per step maka on PostgreSQL ${last("postgres")}, on SQLite ${last("sqlite")}, PostgreSQL floor ${last("pgFloor")}, SQLite floor ${last("sqliteFloor")}`,
    )
  }

  /** Statements and commits per step in a pass of its own. */
  const account = async (loop: () => Promise<void>) => {
    counts.statements = 0
    counts.commits = 0
    counting = true
    try {
      for (let index = 0; index < ACCOUNTING_LOOPS; index++) await loop()
    } finally {
      counting = false
    }
    const steps = ACCOUNTING_LOOPS * STEPS
    return { statements: counts.statements / steps, commits: counts.commits / steps }
  }
  const makaWrites = await account(makaLoop(onPostgres))
  const floorWrites = await account(floorLoop)

  const medians = (values: Record<Name, Array<number>>) =>
    Object.fromEntries(Object.entries(values).map(([name, list]) => [name, median(list)])) as Record<Name, number>
  const msPerStep = medians(wall)
  const cpuPerStep = medians(cpu)
  console.log(
    `tool loop, ms per step: maka on PostgreSQL ${round(msPerStep.postgres, 2)}, on SQLite ${round(msPerStep.sqlite, 2)}, PostgreSQL floor ${round(msPerStep.pgFloor, 2)}, SQLite floor ${round(msPerStep.sqliteFloor, 2)}; ` +
      `CPU ms per step ${round(cpuPerStep.postgres, 2)}, ${round(cpuPerStep.sqlite, 2)}, ${round(cpuPerStep.pgFloor, 2)}, ${round(cpuPerStep.sqliteFloor, 2)}; ` +
      `commits per step ${round(makaWrites.commits, 2)} (floor ${round(floorWrites.commits, 2)}), statements per step ${round(makaWrites.statements, 1)} (floor ${round(floorWrites.statements, 1)})`,
  )

  const FLOOR = "the PostgreSQL durable floor: fetch + eventsource-parser + 2 autocommitted INSERT … unnest statements per step with a raw pg client, same server, same run"
  const entries: Record<(typeof FIGURES)[number], Entry> = {
    "postgres.loop.msPerStep.vsSqlite": entry(
      msPerStep.postgres,
      "ms/step",
      msPerStep.sqlite,
      "maka's 10-step streaming tool loop through createEngine on PostgreSQL (databaseUrl, a fresh schema) vs the same loop on SQLite (synchronous=FULL), same run",
    ),
    "postgres.loop.msPerStep.vsPgFloor": entry(msPerStep.postgres, "ms/step", msPerStep.pgFloor, `maka's tool loop on PostgreSQL vs ${FLOOR}`),
    "postgres.loop.cpuMsPerStep.vsSqlite": entry(cpuPerStep.postgres, "CPU ms/step", cpuPerStep.sqlite, "process CPU per step (the PostgreSQL server's own CPU is not counted), PostgreSQL vs SQLite"),
    "postgres.loop.commitsPerStep.vsPgFloor": entry(
      makaWrites.commits,
      "commits/step",
      floorWrites.commits,
      "writing commits per step on PostgreSQL (COMMITs of transactions that wrote, and autocommitted writes, counted at the pg client), maka vs the floor",
    ),
    "postgres.loop.statementsPerStep.vsPgFloor": entry(
      makaWrites.statements,
      "statements/step",
      floorWrites.statements,
      "statements sent to PostgreSQL per step (BEGIN and COMMIT included), maka vs the floor",
    ),
    "postgres.loop.pgFloor.msPerStep.vsSqliteFloor": entry(
      msPerStep.pgFloor,
      "ms/step",
      msPerStep.sqliteFloor,
      "the PostgreSQL floor vs the SQLite floor (2 synchronous=FULL commits per step with raw better-sqlite3), same run: what the store alone costs any durable client",
    ),
  }
  results = entries
} finally {
  await onPostgres.engine.close()
  await onSqlite.engine.close()
  liteFloor.close()
  await floorClient.end()
  await admin.query(`DROP SCHEMA "${makaSchema}" CASCADE`)
  await admin.query(`DROP SCHEMA "${floorSchema}" CASCADE`)
  await admin.end()
  await server.close()
  fs.rmSync(directory, { recursive: true, force: true })
}
emit(results)
