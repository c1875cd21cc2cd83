/**
 * Step time against session history (docs/architecture.md §12): after `MAKA_BENCH_HISTORY_WARMUP`
 * (default 100) turns on an engine and a file of their own, each followed by one loop of the raw loop,
 * so the smallest size is not timed while either side's code is still being compiled (its figures
 * were the largest then, and every larger size was compared with them), one session per size grown to
 * 100, 1,000, 10,000 and 100,000 events (the last takes about a minute to build;
 * `MAKA_BENCH_HISTORY_LARGE=0` leaves it out) by running real
 * turns through `createEngine` (`build-<n>`: n parallel `noop` calls, then an answer), never by
 * writing rows. After one untimed 10-step tool-loop turn per session, `MAKA_BENCH_HISTORY_TURNS`
 * (default 15) rounds of such turns are measured, one turn of every size per round, round-robin
 * (in an order where each size follows every other equally often, `roundOrder`); after each turn, the raw loop (`node:http` with a keep-alive agent,
 * the transport maka's model client is built on, + `eventsource-parser` + two FULL commits per step)
 * replays the very request bodies maka sent in that turn (kept by the fake server), so both
 * carry the same requests, and so does the same loop over `fetch` (reported beside it). Reported per size: maka's time per step against the raw loop's, maka's
 * time above the raw loop against the same figure at the smallest size (flat is the goal), and the
 * first step of a new turn in the same process (from `start` to the second `model_requested`) against
 * a steady step (between consecutive `model_requested` events), with the raw loop's own first step
 * of each replay against its steady ones beside it (it has no turn to open, so its ratio is what
 * coming back to a loop after other work costs by itself), and the first step of a turn on an
 * engine created afresh over the same file (what a new process pays) against the same steady step,
 * with the rows of `event_log` that turn reads before its first request (counted at better-sqlite3)
 * against the events in the session: a new process reads its session once.
 * At each size the session's context read (`readModelContextWithHash`, on a read-only log over the
 * same file) is also timed against a raw select of the same rows with `JSON.parse` of each
 * (`MAKA_BENCH_HISTORY_READS` round-robin trials, default 7, after `MAKA_BENCH_HISTORY_READ_WARMUP`
 * untimed ones, default 5: at 100 events a median over 7 reads after one warm-up fell inside the JIT's
 * warm-up of the context read and gave 2.2 times what 31 reads gave; the first read is printed). No context window is declared: past
 * 80 % of the read limits (8,000 events) automatic compaction folds the session's history, so from
 * 10,000 events on the context is a checkpoint and its tail; summary requests are neither counted as
 * steps nor replayed by the raw loop (`scale.bench.ts` measures step time with compaction on).
 */
import Database from "better-sqlite3"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { EventLog } from "@maka/event-log"
import { floor, maka } from "./contenders.ts"
import { startFakeServer } from "./fake-server.ts"
import { cpuMs, emit, entry, type Entry, integer, median, profiled, round, roundOrder, sqlitePrototypes, temporaryDirectory, topSelfTime } from "./lib.ts"

const STEPS = 10
const TURNS = integer("MAKA_BENCH_HISTORY_TURNS", 15)
const READS = integer("MAKA_BENCH_HISTORY_READS", 7)
const READ_WARMUP = integer("MAKA_BENCH_HISTORY_READ_WARMUP", 5)
/** With `MAKA_BENCH_HISTORY_PROFILE=1`, each size's first measured turn runs under the profiler (its figures are then not comparable). */
const PROFILE = process.env["MAKA_BENCH_HISTORY_PROFILE"] === "1"
const SIZES = (process.env["MAKA_BENCH_HISTORY_SIZES"] ?? "100,1000,10000").split(",").map(Number)
// The acceptance names 100,000 events too; its session takes about a minute to build on 2 cores.
if (process.env["MAKA_BENCH_HISTORY_LARGE"] !== "0" && !SIZES.includes(100_000)) SIZES.push(100_000)
if (SIZES.some((size) => !Number.isInteger(size) || size <= 0)) throw new Error("MAKA_BENCH_HISTORY_SIZES must list positive integers")
SIZES.sort((left, right) => left - right)

/** Rows of `event_log` better-sqlite3 returns while `rowCount.on` (every connection of this process). */
const rowCount = { on: false, rows: 0 }
{
  const prototype = sqlitePrototypes().statement
  const all = prototype["all"]!
  const get = prototype["get"]!
  const counted = (source: string) => rowCount.on && /from "?event_log"?/i.test(source)
  prototype["all"] = function (this: { readonly source: string }, ...args: Array<unknown>) {
    const result = all.apply(this, args) as ReadonlyArray<unknown>
    if (counted(this.source)) rowCount.rows += result.length
    return result
  }
  prototype["get"] = function (this: { readonly source: string }, ...args: Array<unknown>) {
    const result = get.apply(this, args)
    if (result !== undefined && counted(this.source)) rowCount.rows += 1
    return result
  }
}

const directory = temporaryDirectory("maka-bench-history-")
const workspace = path.join(directory, "workspace")
fs.mkdirSync(workspace)
const server = await startFakeServer()

/** The end of the compaction instruction: a body holding it is a summary request, which the raw loop does not replay. */
const SUMMARY_MARK = "Now write the structured summary of the conversation above."
/**
 * The main requests among the bodies the fake server kept since the last call (maka sends through its
 * own HTTP client to the server's capturing address; the server keeps each body as it arrived).
 */
const takeMainRequests = async (): Promise<Array<string>> =>
  (await server.captured()).filter((body) => !body.includes(SUMMARY_MARK))
const databaseFile = path.join(directory, "maka.sqlite")
const openEngine = () => maka({ database: databaseFile, baseUrl: server.capturingBaseUrl, workspace })

/**
 * Medians of the session's context read with its running hash (a read-only log beside the engine's
 * writer) and of a raw select of the same rows plus `JSON.parse` of each, timed round-robin.
 */
const timeContextRead = async (sessionId: string) => {
  const raw = new Database(databaseFile, { readonly: true })
  const select = raw.prepare(
    "SELECT sequence, event_id, session_id, turn_id, run_id, invocation_id, kind, operation_id, event_json FROM event_log WHERE session_id = ? ORDER BY sequence",
  )
  const rawMs: Array<number> = []
  const contextMs: Array<number> = []
  const first = { rawMs: 0, contextMs: 0 }
  await Effect.runPromise(
    Effect.provide(
      Effect.gen(function* () {
        const log = yield* EventLog.EventLog
        for (let trial = 0; trial < READ_WARMUP + READS; trial++) {
          let started = performance.now()
          const rows = select.all(sessionId).map((row) => JSON.parse((row as { event_json: string }).event_json) as unknown)
          const rawElapsed = performance.now() - started
          started = performance.now()
          const read = yield* log.readModelContextWithHash(sessionId)
          const contextElapsed = performance.now() - started
          if (rows.length === 0 || read.source.sourceEvidence.highWater === 0) throw new Error("the session is empty")
          if (trial === 0) Object.assign(first, { rawMs: rawElapsed, contextMs: contextElapsed })
          // The first trials warm both paths up.
          if (trial >= READ_WARMUP) {
            rawMs.push(rawElapsed)
            contextMs.push(contextElapsed)
          }
        }
      }),
      EventLog.layerSqliteReadOnly(databaseFile),
    ),
  )
  raw.close()
  return { rawMs: median(rawMs), contextMs: median(contextMs), first }
}
// The raw loop sends over `node:http` with a keep-alive agent, the transport maka's model client is
// built on; the same loop over `fetch` replays the same bodies too. `fetch` spends more than that
// transport on large requests (2026-12-04: requests of 504 KB at 10,000 events), so above a `fetch`
// loop maka's time per step shrank as the session grew, which is the transports' difference, not
// maka's work: the reference of flatness is the loop over `node:http`.
const raw = floor(path.join(directory, "floor.sqlite"), server.baseUrl, { transport: "http" })
const rawFetch = floor(path.join(directory, "floor-fetch.sqlite"), server.baseUrl)
// The process's warm-up, before anything is timed: turns of an engine of its own, over a file of its
// own, each followed by a loop of the raw loop (its own steps, the code its replays run), so neither
// side is timed while its code is still being compiled. Without the raw loop's share, its replays at
// the smallest size were its first runs: 3.6 ms a step with requests of 40 to 75 KB at 100 and 1,000
// events, against 2.1 ms with 48 KB ones at 100,000 events later in the same run (2026-12-04), which
// made the smallest size's figure above the raw loop, the reference of flatness, too small.
const WARMUP_TURNS = integer("MAKA_BENCH_HISTORY_WARMUP", 100)
if (WARMUP_TURNS > 0) {
  const warmUp = await maka({ database: path.join(directory, "warm-up.sqlite"), baseUrl: server.baseUrl, workspace })
  const warmStarted = performance.now()
  for (let turn = 0; turn < WARMUP_TURNS; turn++) {
    const result = await warmUp.turn(`warm-up-${turn % 10}`, `loop-${STEPS}`, `Warm-up turn ${turn + 1}.`)
    if (result.requestedAt.length !== STEPS) throw new Error(`warm-up turn ${turn + 1} made ${result.requestedAt.length} main requests, not ${STEPS}`)
    for (const loop of [raw, rawFetch]) {
      const rawSteps = await loop.loop(`loop-${STEPS}`)
      if (rawSteps.length !== STEPS) throw new Error(`the raw loop's warm-up made ${rawSteps.length} requests, not ${STEPS}`)
    }
  }
  await warmUp.engine.close()
  console.log(`${WARMUP_TURNS} warm-up turns on an engine of their own, each with a loop of the raw loop (${round((performance.now() - warmStarted) / 1000, 1)} s)`)
}
let engine = await openEngine()
/** The session of `size` events: each size has one of its own, so the sizes are timed round-robin. */
const sessionOf = (size: number) => `history-${size}`

let turns = 0
const entries: Record<string, Entry> = {}
const started = performance.now()

/** What one size's measured turns gathered, round by round. */
interface SizeSeries {
  readonly size: number
  readonly session: string
  events: number
  measuredAt: number
  requestBytes: number
  readonly makaStep: Array<number>
  readonly rawStep: Array<number>
  readonly rawFetchStep: Array<number>
  readonly makaCpuStep: Array<number>
  readonly rawCpuStep: Array<number>
  readonly firstStep: Array<number>
  readonly steadyStep: Array<number>
  readonly rawFirstStep: Array<number>
  readonly rawSteadyStep: Array<number>
}

// Every size's session is built first (ascending), by running turns, never by writing rows.
const series: Array<SizeSeries> = []
for (const size of SIZES) {
  const building = performance.now()
  const session = sessionOf(size)
  let events = 0
  while (events < size) {
    const turn = await engine.turn(session, size - events > 1_000 ? "build-50" : "build-10", `Build turn ${++turns}.`)
    events += turn.events
    // The server keeps every body sent to it: the build's are not replayed.
    await server.captured()
  }
  events = (await engine.engine.events(session)).length
  console.log(`history ${size}: ${events} events after ${turns} turns (${round((performance.now() - building) / 1000, 1)} s to build)`)
  series.push({
    size,
    session,
    events,
    measuredAt: events,
    requestBytes: 0,
    makaStep: [],
    rawStep: [],
    rawFetchStep: [],
    makaCpuStep: [],
    rawCpuStep: [],
    firstStep: [],
    steadyStep: [],
    rawFirstStep: [],
    rawSteadyStep: [],
  })
}

// One untimed loop turn per session first: the first after the build turns also pays for the build's
// garbage and a scenario it has not run at this size (it took 2 to 3 times the later turns at 100,000 events).
for (const sized of series) {
  sized.events += (await engine.turn(sized.session, `loop-${STEPS}`, `Warm-up turn ${++turns}.`)).events
  await takeMainRequests()
  sized.measuredAt = sized.events
}

/**
 * One measured turn of `sized`'s session, then the raw loop's replays of its request bodies (over
 * `node:http`, then over `fetch`).
 */
const measureTurn = async (sized: SizeSeries, profile: boolean) => {
  await takeMainRequests()
  const name = `Measured turn ${++turns}.`
  let measured: Awaited<ReturnType<typeof engine.turn>> | undefined
  const run = async () => {
    measured = await engine.turn(sized.session, `loop-${STEPS}`, name)
  }
  const cpuBefore = process.cpuUsage()
  if (profile) {
    const file = path.join("bench", "profiles", `history-${sized.size}-${new Date().toISOString().replace(/:/g, "-")}.cpuprofile`)
    const recorded = await profiled(file, run)
    console.log(`history ${sized.size}: profiled one measured turn, wrote ${file}; top functions by self time:`)
    for (const line of topSelfTime(recorded)) console.log(`  ${line}`)
  } else {
    await run()
  }
  sized.makaCpuStep.push(cpuMs(cpuBefore) / STEPS)
  const turn = measured!
  sized.events += turn.events
  const main = await takeMainRequests()
  if (turn.requestedAt.length !== STEPS || main.length !== STEPS) throw new Error(`expected ${STEPS} main requests, saw ${turn.requestedAt.length}`)
  sized.makaStep.push((turn.endedAt - turn.startedAt) / STEPS)
  sized.firstStep.push(turn.requestedAt[1]! - turn.startedAt)
  const steady: Array<number> = []
  for (let step = 1; step < STEPS - 1; step++) steady.push(turn.requestedAt[step + 1]! - turn.requestedAt[step]!)
  sized.steadyStep.push(median(steady))
  sized.requestBytes = Buffer.byteLength(main.at(-1)!)
  // The raw loop sends the bodies' bytes, encoded before it is timed, as maka sends its cached
  // messages' bytes: a 393 KB body sent as a string cost 1.8 ms more a request, CPU and wall time.
  const bodies = main.map((body) => Buffer.from(body, "utf8"))
  const replayStarted = performance.now()
  const rawCpuBefore = process.cpuUsage()
  const rawSteps = await raw.replay(bodies)
  sized.rawStep.push((performance.now() - replayStarted) / STEPS)
  sized.rawCpuStep.push(cpuMs(rawCpuBefore) / STEPS)
  // The raw loop's own first step (it follows maka's turn as maka's follows it) against its steady ones.
  sized.rawFirstStep.push(rawSteps[1]!.startedAt - rawSteps[0]!.startedAt)
  const rawSteady: Array<number> = []
  for (let step = 1; step < STEPS - 1; step++) rawSteady.push(rawSteps[step + 1]!.startedAt - rawSteps[step]!.startedAt)
  sized.rawSteadyStep.push(median(rawSteady))
  const fetchStarted = performance.now()
  await rawFetch.replay(bodies)
  sized.rawFetchStep.push((performance.now() - fetchStarted) / STEPS)
}

// The sizes are timed round-robin, so the machine's drift over the measurement falls on every size
// alike: measured one size after another, the figures above the raw loop moved by up to ±40 % between
// runs (2026-12-04/05), more than the sizes differed.
for (let index = 0; index < TURNS; index++) {
  for (const position of roundOrder(index, series.length)) {
    await measureTurn(series[position]!, PROFILE && index === 0)
  }
}

const smallest = series[0]!
const overheadOf = (sized: SizeSeries, of: (sized: SizeSeries) => ReadonlyArray<number>, base: (sized: SizeSeries) => ReadonlyArray<number>) =>
  median(of(sized).map((value, index) => value - base(sized)[index]!))
const smallestOverhead = overheadOf(smallest, (sized) => sized.makaStep, (sized) => sized.rawStep)
const smallestFetchOverhead = overheadOf(smallest, (sized) => sized.makaStep, (sized) => sized.rawFetchStep)
const smallestCpuOverhead = overheadOf(smallest, (sized) => sized.makaCpuStep, (sized) => sized.rawCpuStep)

for (const sized of series) {
  const { size } = sized
  const reference = sized === smallest
  const makaMs = median(sized.makaStep)
  const rawMs = median(sized.rawStep)
  const overhead = overheadOf(sized, (item) => item.makaStep, (item) => item.rawStep)
  const rawFetchMs = median(sized.rawFetchStep)
  const fetchOverhead = overheadOf(sized, (item) => item.makaStep, (item) => item.rawFetchStep)
  const cpuOverhead = overheadOf(sized, (item) => item.makaCpuStep, (item) => item.rawCpuStep)
  const first = median(sized.firstStep)
  const steady = median(sized.steadyStep)
  console.log(
    `history ${size}: maka ${round(makaMs, 2)} ms per step (raw loop, same requests: ${round(rawMs, 2)} ms; above it ${round(overhead, 2)} ms; ` +
      `over fetch ${round(rawFetchMs, 2)} ms, above it ${round(fetchOverhead, 2)} ms; CPU ${round(median(sized.makaCpuStep), 2)} ms vs ${round(median(sized.rawCpuStep), 2)} ms, above it ${round(cpuOverhead, 2)} ms), ` +
      `first step of a turn ${round(first, 2)} ms vs steady ${round(steady, 2)} ms, last request ${round(sized.requestBytes / 1024, 1)} KB`,
  )
  const label = `history.${size}`
  entries[`${label}.msPerStep.vsRaw`] = entry(makaMs, "ms/step", rawMs, `maka's 10-step turn over a session of ${sized.measuredAt} events vs the raw loop (node:http with a keep-alive agent + eventsource-parser + 2 FULL commits per step) sending the same request bodies`)
  entries[`${label}.msPerStep.vsRawFetch`] = entry(makaMs, "ms/step", rawFetchMs, `the same turns vs the raw loop over fetch instead of node:http, sending the same request bodies`)
  entries[`${label}.aboveRawMsPerStep.vsSmallest`] = entry(
    overhead,
    "ms/step",
    reference ? null : smallestOverhead,
    reference ? "maka's time per step above the raw loop at the smallest size: the reference of the larger sizes" : `maka's time per step above the raw loop at this size vs at ${SIZES[0]} events (flat means ratio ≈ 1)`,
  )
  entries[`${label}.aboveRawCpuMsPerStep.vsSmallest`] = entry(
    cpuOverhead,
    "ms/step",
    reference ? null : smallestCpuOverhead,
    reference
      ? "maka's CPU time per step (process.cpuUsage over the turn) above the raw loop's over its replay of the same bodies, at the smallest size"
      : `maka's CPU time per step above the raw loop's at this size vs at ${SIZES[0]} events: CPU adds up where wall time overlaps (maka's work beside the server's handling of a large request), so this is the figure whose flatness shows maka's work per step not growing with the session`,
  )
  entries[`${label}.aboveRawFetchMsPerStep.vsSmallest`] = entry(
    fetchOverhead,
    "ms/step",
    reference ? null : smallestFetchOverhead,
    reference ? "maka's time per step above the raw loop over fetch at the smallest size" : `maka's time per step above the raw loop over fetch at this size vs at ${SIZES[0]} events (shown beside the node:http loop's: fetch's own cost grows with the request)`,
  )
  entries[`${label}.firstStepMs.vsSteady`] = entry(first, "ms", steady, "the first step of a new turn in the same process (start → second model_requested) vs a steady step (between consecutive model_requested)")
  entries[`${label}.raw.firstStepMs.vsSteady`] = entry(
    median(sized.rawFirstStep),
    "ms",
    median(sized.rawSteadyStep),
    "the raw loop's first step of each replay (it runs right after maka's turn, as maka's first step runs after the replay) vs its steady steps: what coming back to a loop after other work costs a loop that has no turn to open",
  )
}

// Then, size by size, a fresh engine on the same file (what a new process meets, module loading
// aside): its first step pays for opening the log and reading the session once.
for (const sized of series) {
  const { size } = sized
  const label = `history.${size}`
  const steady = median(sized.steadyStep)
  await engine.engine.close()
  engine = await openEngine()
  const eventsBeforeCold = sized.events
  rowCount.rows = 0
  rowCount.on = true
  const cold = await engine.turn(sized.session, `loop-${STEPS}`, `Cold turn ${++turns}.`, undefined, () => {
    rowCount.on = false
  })
  const coldRows = rowCount.rows
  sized.events += cold.events
  const coldFirst = cold.requestedAt[1]! - cold.startedAt
  console.log(`history ${size}: first step after reopening the engine ${round(coldFirst, 2)} ms`)
  entries[`${label}.reopenedFirstStepMs.vsSteady`] = entry(coldFirst, "ms", steady, "the first step of a turn on a freshly created engine over the same file (opening the log, reading the session once) vs a steady step")
  console.log(`history ${size}: the reopened engine's turn read ${coldRows} rows of event_log before its first request (${eventsBeforeCold} events in the session)`)
  entries[`${label}.reopenedRowsRead.vsEvents`] = entry(coldRows, "rows", eventsBeforeCold, "rows of event_log a freshly created engine's turn reads before its first request (admission check, opening, context read; counted at better-sqlite3) vs the events in the session: reading it once is ≈ 1")
  const reads = await timeContextRead(sized.session)
  console.log(
    `history ${size}: readModelContextWithHash ${round(reads.contextMs, 2)} ms vs raw select + JSON.parse ${round(reads.rawMs, 2)} ms (first read of each: ${round(reads.first.contextMs, 2)} vs ${round(reads.first.rawMs, 2)} ms)`,
  )
  entries[`${label}.readModelContextMs.vsRawSelectParse`] = entry(reads.contextMs, "ms", reads.rawMs, "the session's context read with its running hash (readModelContextWithHash, read-only log) vs a raw better-sqlite3 select of the session's rows and JSON.parse of each")
  entries[`${label}.events`] = entry(sized.measuredAt, "events", null, "events in the session when its measurement began (grown by running turns)")
  entries[`${label}.requestKB`] = entry(sized.requestBytes / 1024, "KB", null, "the last request body's size")
}

await engine.engine.close()
raw.close()
rawFetch.close()
await server.close()
fs.rmSync(directory, { recursive: true, force: true })
console.log(`history series done in ${round((performance.now() - started) / 1000, 1)} s`)
emit(entries)
