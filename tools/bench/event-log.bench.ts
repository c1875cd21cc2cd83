/**
 * The durable log (docs/architecture.md §12): `EventLog.append` of a streamed observation against a raw
 * better-sqlite3 insert of the same row in its own `BEGIN IMMEDIATE` transaction (same file settings:
 * WAL, synchronous=FULL), once into a bare table and once into a file with the log's own schema (its
 * indexes included), the SQL statements one append executes, and `readModelContext` at 100, 1,000
 * and 10,000 events of history against a raw read of the same rows with `JSON.parse`. Every figure
 * is a ratio against its own baseline.
 */
import Database from "better-sqlite3"
import { Effect, Result } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { EventWrite, type EventWrite as EventWriteType } from "@maka/facts"
import { EventLog } from "@maka/event-log"
import { FactBuilders, History } from "@maka/testkit"
import { countStatements, emit, entry, type Entry, integer, median } from "./lib.ts"

const APPENDS = Number(process.env["MAKA_BENCH_APPENDS"] ?? 2_000)
/**
 * Timed rounds of both reads at a size: at least 15, and at least 10,000 events read, so a read of a
 * small session is not timed over a few milliseconds in all.
 */
const readRounds = (size: number): number => Math.max(15, Math.ceil(10_000 / size))
/**
 * Untimed rounds of both reads first, so each runs compiled code when it is timed: at least
 * `MAKA_BENCH_WARMUP` (default 2), and at least 20,000 events read (the engine's read runs far more
 * of its own code per row than `JSON.parse`, and V8 compiles it only after it has run a while).
 */
const readWarmup = (size: number): number => Math.max(Number(process.env["MAKA_BENCH_WARMUP"] ?? 2), Math.ceil(20_000 / size))
const directory = fs.mkdtempSync(path.join(os.tmpdir(), "maka-bench-log-"))

const round3 = (value: number): number => Math.round(value * 1000) / 1000

/** A live run with one open request, and `count` observations of it. */
const observations = (count: number) => {
  const history = new History.History()
  const run = history.open()
  const step = run.request()
  const preamble = [...history.writes]
  const writes: Array<EventWriteType.EventWrite> = []
  for (let index = 0; index < count; index++) {
    writes.push(
      Result.getOrThrow(
        EventWrite.plain({
          id: FactBuilders.eventId(100_000 + index),
          recordedAt: index,
          invocation: run.invocation,
          fact: { kind: "model_observed", stepId: step, event: { kind: "part_delta", id: "0", text: `token ${index} ` } },
        }),
      ),
    )
  }
  return { preamble, writes }
}

const openLog = (file: string, synchronous: "FULL" | "NORMAL") => EventLog.layerSqlite({ path: file, synchronous })

const withLog = <A>(file: string, synchronous: "FULL" | "NORMAL", body: (log: EventLog.EventLogShape) => Effect.Effect<A, unknown>) =>
  Effect.runPromise(
    Effect.scoped(
      Effect.provide(
        Effect.gen(function* () {
          return yield* body(yield* EventLog.EventLog)
        }),
        openLog(file, synchronous),
      ),
    ),
  )

// --- append -------------------------------------------------------------------------------------

const BLOCKS = 10
const blockSize = Math.ceil(APPENDS / BLOCKS)
/**
 * Untimed blocks of each path first (`MAKA_BENCH_APPEND_WARMUP`, default 10, i.e. 2,000 appends of each),
 * as every other bench warms up before it times. The append path reaches its steady cost only after a
 * couple of thousand appends, while the raw insert is steady from the first: one process appending
 * 60,000 observations at synchronous=FULL took 420 µs each over its first 500, then 276, 258, 227, and
 * 205–245 from the 2,000th on (at NORMAL 130, 138, 110, 119, then 80–100). Three runs of this bench
 * on the same machine and day (2026-12-04) gave 1.59× with 2 warm-up blocks and 1.32× and 1.37× with
 * 10: with 2, the median of the timed blocks fell in that warm-up, which a long-running engine pays
 * once, not per append.
 */
const WARMUP_BLOCKS = integer("MAKA_BENCH_APPEND_WARMUP", 10)
const { preamble, writes } = observations(APPENDS + WARMUP_BLOCKS * blockSize)

/** A file holding the log's `event_log` table: bare (one unique index), or the log's own schema. */
const rawFile = path.join(directory, "raw.sqlite")
const raw = new Database(rawFile)
raw.exec(
  "CREATE TABLE event_log (sequence INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE, session_id TEXT NOT NULL, turn_id TEXT NOT NULL, run_id TEXT NOT NULL, invocation_id TEXT NOT NULL, kind TEXT NOT NULL, operation_id TEXT, event_json TEXT NOT NULL)",
)
// The same raw insert into a file the log itself created, so the row also meets the log's indexes.
const schemaFile = path.join(directory, "schema.sqlite")
await withLog(schemaFile, "FULL", () => Effect.void)
const schemaRaw = new Database(schemaFile)
for (const connection of [raw, schemaRaw]) {
  connection.pragma("journal_mode = WAL")
  connection.pragma("synchronous = FULL")
}
// The log's checkpoint size on the file with its schema (its 1,024-byte pages); the bare file's 4,096-byte
// pages give the same 4 MiB with SQLite's default of 1,000 pages.
schemaRaw.pragma("wal_autocheckpoint = 4000")

/** Inserts each write in its own transaction through `connection`; returns milliseconds per row. */
const rawInserter = (connection: Database.Database) => {
  const insert = connection.prepare(
    "INSERT INTO event_log (event_id, session_id, turn_id, run_id, invocation_id, kind, operation_id, event_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
  )
  const begin = connection.prepare("BEGIN IMMEDIATE")
  const commit = connection.prepare("COMMIT")
  return (block: ReadonlyArray<EventWriteType.EventWrite>): number => {
    const start = performance.now()
    for (const write of block) {
      const event = write.event
      begin.run()
      insert.run(event.id, event.invocation.sessionId, event.invocation.turnId, event.invocation.runId, event.invocation.invocationId, event.fact.kind, "step", write.json)
      commit.run()
    }
    return (performance.now() - start) / block.length
  }
}
const rawBlock = rawInserter(raw)
const schemaBlock = rawInserter(schemaRaw)

// The engine's appends and the raw inserts alternate in blocks, so load drift on a shared machine hits
// both alike; each side's figure is the median of its blocks' per-row times. The last block is
// appended again under the statement counter (its own file), for the statements one append costs.
const logFile = path.join(directory, "append.sqlite")
const appendTimes: Array<number> = []
const rawTimes: Array<number> = []
const schemaTimes: Array<number> = []
await withLog(logFile, "FULL", (log) =>
  Effect.gen(function* () {
    yield* log.appendBatch(preamble)
    for (let index = 0; index < WARMUP_BLOCKS; index++) {
      const block = writes.slice(APPENDS + index * blockSize, APPENDS + (index + 1) * blockSize)
      for (const write of block) yield* log.append(write)
      rawBlock(block)
      schemaBlock(block)
    }
    for (let index = 0; index < BLOCKS; index++) {
      const block = writes.slice(index * blockSize, Math.min(APPENDS, (index + 1) * blockSize))
      if (block.length === 0) break
      // The three take turns going first, so whatever one file's flush leaves behind for the next
      // (the disk's queue, the page cache's writeback) falls on each alike.
      for (let turn = 0; turn < 3; turn++) {
        const which = (index + turn) % 3
        if (which === 0) {
          const start = performance.now()
          for (const write of block) yield* log.append(write)
          appendTimes.push((performance.now() - start) / block.length)
        } else if (which === 1) rawTimes.push(rawBlock(block))
        else schemaTimes.push(schemaBlock(block))
      }
    }
  }),
)
raw.close()
schemaRaw.close()
const COUNTED = 200
let statementsPerAppend = 0
await withLog(path.join(directory, "counted.sqlite"), "FULL", (log) =>
  Effect.gen(function* () {
    yield* log.appendBatch(preamble)
    yield* log.append(writes[0]!)
    const counted = writes.slice(1, 1 + COUNTED)
    const statements = yield* Effect.promise(() =>
      countStatements(() => Effect.runPromise(Effect.forEach(counted, (write) => log.append(write), { discard: true }))),
    )
    statementsPerAppend = statements / counted.length
  }),
)
const engineAppendMs = median(appendTimes)
const rawAppendMs = median(rawTimes)
const schemaAppendMs = median(schemaTimes)
console.log(
  `append: engine ${round3(engineAppendMs * 1000)} µs, raw insert ${round3(rawAppendMs * 1000)} µs (into the log's schema ${round3(schemaAppendMs * 1000)} µs) per durable commit; ${round3(statementsPerAppend)} SQL statements per append`,
)

// --- model-context read -------------------------------------------------------------------------

/** A completed session of `events` events: tool steps of four facts each. */
const sessionOf = (events: number) => {
  const history = new History.History()
  const run = history.open()
  while (history.writes.length + 4 <= events - 1) {
    const step = run.request()
    run.complete(step, FactBuilders.toolCallStep([{ id: "c", name: "read_file", input: { path: "README.md" } }]))
    run.succeed(run.dispatch(step, "c"), FactBuilders.textOutput("line of the file\n".repeat(8)))
  }
  while (history.writes.length < events - 1) run.steer(`m${history.writes.length}`, "more")
  run.end({ kind: "failed", class: "runtime_internal" })
  return history
}

/**
 * A young-generation collection before each timed read (the bench runs with `--expose-gc`), so each
 * read starts with an empty young generation and pays for its own garbage and its own live objects
 * only: without it a collection during the raw read could copy the engine's result of the round
 * before, still alive, and charge it to the raw read (the raw read keeps nothing it parses; the engine
 * keeps every decoded event it returns). A full collection instead would also age the engine's
 * compiled code between reads, which no engine meets between two steps.
 */
const gc = (globalThis as { gc?: (options: { type: "minor" }) => void }).gc
if (gc === undefined) throw new Error("the model-context reads need --expose-gc (pnpm bench passes it)")
const collect = () => gc({ type: "minor" })

const contextFigures: Record<string, { engineMs: number; rawMs: number; ratio: number }> = {}
for (const size of (process.env["MAKA_BENCH_SIZES"] ?? "100,1000,10000").split(",").map(Number)) {
  const history = sessionOf(size)
  const file = path.join(directory, `context-${size}.sqlite`)
  // The engine's read and the raw read alternate round by round (a read-only connection of its own
  // beside the log's), so cache warmth and load drift hit both alike.
  const { engineMs, rawMs } = await withLog(file, "NORMAL", (log) =>
    Effect.gen(function* () {
      for (let start = 0; start < history.writes.length; start += 500) yield* log.appendBatch(history.writes.slice(start, start + 500))
      const reader = new Database(file, { readonly: true })
      const select = reader.prepare("SELECT sequence, event_json FROM event_log WHERE session_id = ? ORDER BY sequence")
      const rawRead = (): number => {
        const start = performance.now()
        const rows = select.all("session-1") as Array<{ event_json: string }>
        for (const row of rows) JSON.parse(row.event_json)
        return performance.now() - start
      }
      // The engine's result is checked and dropped inside, so nothing of it is alive after the read.
      const engineRead = Effect.gen(function* () {
        const start = performance.now()
        const source = yield* log.readModelContext("session-1")
        const elapsed = performance.now() - start
        if (source.tail.length !== size) throw new Error(`expected ${size} tail items, read ${source.tail.length}`)
        return elapsed
      })
      const engineTimes: Array<number> = []
      const rawTimes: Array<number> = []
      try {
        for (let round = 0; round < readWarmup(size); round++) {
          yield* engineRead
          rawRead()
        }
        for (let round = 0; round < readRounds(size); round++) {
          collect()
          engineTimes.push(yield* engineRead)
          collect()
          rawTimes.push(rawRead())
        }
      } finally {
        reader.close()
      }
      return { engineMs: median(engineTimes), rawMs: median(rawTimes) }
    }),
  )
  contextFigures[String(size)] = { engineMs: round3(engineMs), rawMs: round3(rawMs), ratio: round3(engineMs / rawMs) }
  console.log(`readModelContext at ${size} events: ${round3(engineMs)} ms (raw select + JSON.parse ${round3(rawMs)} ms)`)
}

fs.rmSync(directory, { recursive: true, force: true })
const entries: Record<string, Entry> = {
  "event-log.appendUs.vsRawInsert": entry(
    engineAppendMs * 1000,
    "µs",
    rawAppendMs * 1000,
    `EventLog.append of one streamed observation (its own transaction) vs a better-sqlite3 prepared insert of the same row in BEGIN IMMEDIATE/COMMIT; both WAL, synchronous=FULL; ${APPENDS} appends timed after ${WARMUP_BLOCKS * blockSize} untimed`,
  ),
  "event-log.appendUs.vsRawInsertLogSchema": entry(
    engineAppendMs * 1000,
    "µs",
    schemaAppendMs * 1000,
    "EventLog.append vs the same raw insert into a file with the log's own schema (every index of event_log), both WAL, synchronous=FULL",
  ),
  "event-log.appendStatements": entry(
    statementsPerAppend,
    "statements/append",
    3,
    "better-sqlite3 statements one EventLog.append of an observation executes (counted over 200 appends) vs the raw insert's BEGIN/INSERT/COMMIT",
  ),
}
for (const [size, figures] of Object.entries(contextFigures)) {
  entries[`event-log.readModelContextMs.${size}.vsRawSelect`] = entry(
    figures.engineMs,
    "ms",
    figures.rawMs,
    `readModelContext of a ${size}-event session vs a better-sqlite3 select of the session's rows + JSON.parse per row; each read timed after a young-generation collection`,
  )
}
emit(entries)
