/**
 * The log's table layout and page size (docs/architecture.md §12), on SQLite files built here with
 * raw better-sqlite3 (WAL, `synchronous=FULL` while measured): the log's columns and the indexes every
 * event meets (the unique event id, the operation and invocation-boundary indexes, an invocation's
 * and a session's events in sequence order), either as the log stores them (a rowid table, the
 * session's order in an index) or clustered by `(session_id, sequence)` (`WITHOUT ROWID`, the
 * sequence kept unique by an index of its own), each with 1,024-byte pages (the log's) and 4,096.
 * Every file holds the same events: `MAKA_BENCH_LAYOUT_SESSIONS` sessions (default 10) of
 * `MAKA_BENCH_LAYOUT_EVENTS` events each (default 10,000), whose steps (seven events of the engine's
 * tool loop, of its sizes) alternate between the sessions, as concurrent sessions fill a shared log.
 *
 * 1. Reading one session (`SELECT sequence, event_json … WHERE session_id = ? ORDER BY sequence`),
 *    the files round-robin, a different session each round, medians over the timed rounds.
 * 2. Step-like commits (the request's four events, then the step's other three, each `BEGIN
 *    IMMEDIATE` … `COMMIT`), the files round-robin step by step: each COMMIT's time and the WAL
 *    frames it appended (read from the WAL index header).
 *
 * What it shows: which layout and page size a new log should use, the read a new process pays once
 * per session against the commits every step pays.
 */
import Database from "better-sqlite3"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { emit, entry, type Entry, integer, lastWalFrame, median, temporaryDirectory } from "./lib.ts"

const SESSIONS = Math.max(2, integer("MAKA_BENCH_LAYOUT_SESSIONS", 10))
const EVENTS = Math.max(70, integer("MAKA_BENCH_LAYOUT_EVENTS", 10_000))
const READ_ROUNDS = integer("MAKA_BENCH_TRIALS", 5) * 3
const READ_WARMUP = 3
const COMMIT_STEPS = 300

/** A step of the engine's tool loop: its events' kinds and the sizes of their JSON (bytes). */
const STEP: ReadonlyArray<readonly [kind: string, bytes: number]> = [
  ["model_requested", 750],
  ["model_observed", 440],
  ["model_observed", 440],
  ["model_observed", 450],
  ["model_completed", 620],
  ["tool_dispatched", 520],
  ["tool_settled", 535],
]
/** The step's two commits: the request with what rides it, then the completion with the dispatch. */
const COMMITS = [STEP.slice(0, 4), STEP.slice(4)] as const

const INDEXES = [
  "CREATE UNIQUE INDEX event_log_event_id ON event_log (event_id)",
  "CREATE UNIQUE INDEX event_log_invocation_boundary ON event_log (invocation_id, kind) WHERE kind IN ('invocation_opened', 'invocation_ended')",
  "CREATE UNIQUE INDEX event_log_operation_fact ON event_log (operation_id, kind) WHERE operation_id IS NOT NULL AND kind <> 'model_observed'",
  "CREATE INDEX event_log_invocation_sequence ON event_log (invocation_id, sequence)",
]
const COLUMNS =
  "event_id TEXT NOT NULL, session_id TEXT NOT NULL, turn_id TEXT NOT NULL, run_id TEXT NOT NULL, invocation_id TEXT NOT NULL, kind TEXT NOT NULL, operation_id TEXT, event_json TEXT NOT NULL"
const LAYOUTS = {
  rowid: [
    `CREATE TABLE event_log (sequence INTEGER PRIMARY KEY AUTOINCREMENT CHECK (sequence > 0), ${COLUMNS}) STRICT`,
    ...INDEXES,
    "CREATE INDEX event_log_session_sequence ON event_log (session_id, sequence)",
  ],
  clustered: [
    `CREATE TABLE event_log (sequence INTEGER NOT NULL CHECK (sequence > 0), ${COLUMNS}, PRIMARY KEY (session_id, sequence)) STRICT, WITHOUT ROWID`,
    ...INDEXES,
    "CREATE UNIQUE INDEX event_log_sequence ON event_log (sequence)",
  ],
} as const
type Layout = keyof typeof LAYOUTS
const PAGE_SIZES = [1_024, 4_096] as const

/** An event's JSON of `bytes` bytes (ASCII), unique by its sequence. */
const eventJson = (sequence: number, kind: string, bytes: number): string => {
  const head = `{"fact":{"kind":"${kind}","sequence":${sequence},"text":"`
  return `${head}${"x".repeat(Math.max(0, bytes - head.length - 3))}"}}`
}

const directory = temporaryDirectory("maka-bench-layout-")
const sessions = Array.from({ length: SESSIONS }, () => ({ id: randomUUID(), invocation: randomUUID() }))

interface LogFile {
  readonly name: string
  readonly layout: Layout
  readonly pageSize: number
  readonly file: string
  readonly database: Database.Database
  readonly insert: Database.Statement
  sequence: number
}

const insertStep = (log: LogFile, session: (typeof sessions)[number], events: ReadonlyArray<readonly [string, number]>, step: string) => {
  for (const [kind, bytes] of events) {
    const sequence = ++log.sequence
    // Observations carry their step's id; every other event an operation of its own.
    const operation = kind === "model_observed" ? step : randomUUID()
    log.insert.run(sequence, randomUUID(), session.id, "turn", "run", session.invocation, kind, operation, eventJson(sequence, kind, bytes))
  }
}

const logs: Array<LogFile> = []
for (const layout of Object.keys(LAYOUTS) as Array<Layout>) {
  for (const pageSize of PAGE_SIZES) {
    const file = path.join(directory, `${layout}-${pageSize}.sqlite`)
    const database = new Database(file)
    database.pragma(`page_size = ${pageSize}`)
    database.pragma("journal_mode = WAL")
    for (const statement of LAYOUTS[layout]) database.exec(statement)
    const insert = database.prepare(
      "INSERT INTO event_log (sequence, event_id, session_id, turn_id, run_id, invocation_id, kind, operation_id, event_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    const log: LogFile = { name: `${layout}.${pageSize}`, layout, pageSize, file, database, insert, sequence: 0 }
    // Built without flushes; measured at FULL.
    database.pragma("synchronous = OFF")
    database.exec("BEGIN")
    for (let step = 0; step < Math.ceil(EVENTS / STEP.length); step++) {
      for (const session of sessions) insertStep(log, session, STEP, randomUUID())
    }
    database.exec("COMMIT")
    database.pragma("wal_checkpoint(TRUNCATE)")
    database.pragma("synchronous = FULL")
    logs.push(log)
    console.log(`  built ${log.name}: ${log.sequence.toLocaleString("en-US")} events, ${(fs.statSync(file).size / 1e6).toFixed(1)} MB`)
  }
}

// --- 1. Reading one session ---------------------------------------------------------------------

/** Adds `value` to the list of `key`. */
const record = (into: Map<string, Array<number>>, key: string, value: number): void => {
  const list = into.get(key)
  if (list === undefined) into.set(key, [value])
  else list.push(value)
}

const readMs = new Map<string, Array<number>>()
for (let round = -READ_WARMUP; round < READ_ROUNDS; round++) {
  const session = sessions[(round + READ_WARMUP) % SESSIONS]!
  const order = round % 2 === 0 ? logs : [...logs].reverse()
  for (const log of order) {
    const statement = log.database.prepare("SELECT sequence, event_json FROM event_log WHERE session_id = ? ORDER BY sequence")
    const started = performance.now()
    const rows = statement.all(session.id)
    const elapsed = performance.now() - started
    if (rows.length < EVENTS) throw new Error(`${log.name} read ${rows.length} events of a session, not ${EVENTS} or more`)
    if (round >= 0) record(readMs, log.name, elapsed)
  }
}

// --- 2. Step-like commits -----------------------------------------------------------------------

const commitUs = new Map<string, Array<number>>()
const commitFrames = new Map<string, Array<number>>()
for (let step = 0; step < COMMIT_STEPS; step++) {
  const session = sessions[step % SESSIONS]!
  const stepId = randomUUID()
  const order = step % 2 === 0 ? logs : [...logs].reverse()
  for (const log of order) {
    for (const events of COMMITS) {
      log.database.exec("BEGIN IMMEDIATE")
      insertStep(log, session, events, stepId)
      const before = lastWalFrame(log.file)
      const started = performance.now()
      log.database.exec("COMMIT")
      const elapsed = (performance.now() - started) * 1000
      const after = lastWalFrame(log.file)
      // A commit that restarted the WAL (after a checkpoint) gives no frame count: its time still counts.
      record(commitUs, log.name, elapsed)
      if (after > before) record(commitFrames, log.name, after - before)
    }
  }
}

for (const log of logs) log.database.close()
fs.rmSync(directory, { recursive: true, force: true })

const mean = (values: ReadonlyArray<number>): number => values.reduce((sum, value) => sum + value, 0) / values.length
const read = (name: string) => median(readMs.get(name)!)
const commitTime = (name: string) => median(commitUs.get(name)!)
const frames = (name: string) => mean(commitFrames.get(name)!)
const walBytes = (name: string, pageSize: number) => frames(name) * (pageSize + 24)

for (const log of logs) {
  console.log(
    `  ${log.name}: read one session ${read(log.name).toFixed(1)} ms; a commit ${commitTime(log.name).toFixed(0)} µs, ` +
      `${frames(log.name).toFixed(1)} WAL frames (${(walBytes(log.name, log.pageSize) / 1024).toFixed(1)} KB)`,
  )
}

const SHAPE = `${SESSIONS} sessions of ${EVENTS.toLocaleString("en-US")} events whose steps alternate`
const entries: Record<string, Entry> = {}
for (const pageSize of PAGE_SIZES) {
  const [rowid, clustered] = [`rowid.${pageSize}`, `clustered.${pageSize}`]
  entries[`layout.${pageSize}.clustered.readSessionMs.vsRowid`] = entry(
    read(clustered),
    "ms",
    read(rowid),
    `reading one session's events in sequence order, the table clustered by (session_id, sequence) vs the log's rowid table, ${pageSize}-byte pages, ${SHAPE}`,
  )
  entries[`layout.${pageSize}.clustered.commitUs.vsRowid`] = entry(
    commitTime(clustered),
    "µs",
    commitTime(rowid),
    `a step-like commit (three or four events) at synchronous=FULL, clustered vs the rowid table, ${pageSize}-byte pages`,
  )
  entries[`layout.${pageSize}.clustered.commitFrames.vsRowid`] = entry(
    frames(clustered),
    "frames/commit",
    frames(rowid),
    `WAL frames a step-like commit appends, clustered vs the rowid table, ${pageSize}-byte pages`,
  )
}
entries["layout.rowid.4096.readSessionMs.vs1024"] = entry(
  read("rowid.4096"),
  "ms",
  read("rowid.1024"),
  `reading one session, the log's rowid table with 4,096-byte pages vs 1,024 (the log's), ${SHAPE}`,
)
entries["layout.rowid.4096.commitUs.vs1024"] = entry(
  commitTime("rowid.4096"),
  "µs",
  commitTime("rowid.1024"),
  "a step-like commit of the rowid table with 4,096-byte pages vs 1,024 (the log's)",
)
entries["layout.rowid.4096.commitWalBytes.vs1024"] = entry(
  walBytes("rowid.4096", 4_096),
  "bytes/commit",
  walBytes("rowid.1024", 1_024),
  "WAL bytes a step-like commit of the rowid table appends (frames × (page + 24)), 4,096-byte pages vs 1,024",
)
emit(entries)
