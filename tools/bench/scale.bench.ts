/**
 * The scale series with automatic compaction on (docs/architecture.md §12, docs/engine.md §5.12): the step
 * time and the bytes written per step of a live run, at 100, 1,000 and 10,000 events of session history
 * (and 100,000 with `MAKA_BENCH_SCALE_LARGE=1`), each against the same figure at the smallest size,
 * measured in the same run. Flat is the goal: compaction keeps the context bounded, and nothing else a
 * step does may grow with the history behind it.
 *
 * One engine (`createEngine`, SQLite, `synchronous=FULL`) over one database holds one session per size,
 * each grown by running real turns (`build-<n>`: n parallel `noop` calls, then an answer), never by
 * writing rows. Every measured run declares a context window of `MAKA_BENCH_SCALE_WINDOW` tokens
 * (default 1,500); the fake server counts a request's tokens as its body bytes / 4, so a session
 * compacts (in the background, adopted at the next step boundary) whenever its last main request
 * reached the window. The build turns declare a wider window, `MAKA_BENCH_SCALE_BUILD_WINDOW` (default
 * 50,000 tokens), so that building does not compact at every turn (each compaction reads the whole
 * session once, which made a 100,000-event build take over half an hour); the warm-up turns bring each
 * session into the measured window's regime.
 *
 * Timed: `MAKA_BENCH_SCALE_TURNS` (default 11) 10-step tool-loop turns per size after `MAKA_BENCH_WARMUP`
 * (default 2) warm-up turns, round-robin over the sizes (the order rotating each round), so load drifts
 * hit every size alike. A steady step is the time between consecutive main `model_requested` events
 * inside a turn (median over the turn's 8 inner steps, then over the turns); the first step of a new
 * turn runs from `start` to the turn's second main `model_requested`; the turn time per step divides
 * a whole turn, background summaries and adoptions included, by its 10 steps.
 *
 * Accounting (not timed): `MAKA_BENCH_SCALE_ACCOUNT_TURNS` (default 3) more turns per size with the WAL
 * meter running (a read transaction held across them, see `lib.ts`): the bytes the commits append to
 * the WAL, and the commits, per main step, checkpoints included.
 *
 * Memory (not timed): after the engine is closed, a fresh process per size opens the same database and
 * runs `MAKA_BENCH_SCALE_MEMORY_TURNS` (default 3) turns on that size's session alone, forcing a GC at
 * each main `model_requested` and sampling the heap used and the RSS there: the memory of a live run at
 * that much history, each a ratio to the same figure at the smallest size.
 *
 * `MAKA_BENCH_PROFILE=<file>` (what `pnpm bench scale --profile` sets) instead runs
 * `MAKA_BENCH_PROFILE_TURNS` (default 10) turns per size under the CPU profiler after the build,
 * writes `<file>` with the size before its extension, prints the top 15 self-time functions per size
 * and records no figure.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { maka, type MakaTurn } from "./contenders.ts"
import { startFakeServer } from "./fake-server.ts"
import { emit, entry, type Entry, integer, median, profiled, round, temporaryDirectory, topSelfTime, WalMeter } from "./lib.ts"

const STEPS = 10

/**
 * Memory mode (a child process per size, spawned below): opens the engine over the series' database,
 * runs `MEMORY_TURNS` turns on one session only, and samples the live run's memory at every main
 * `model_requested` after a forced GC (heap used) and as it stands (RSS); prints the medians over the
 * turns of each turn's largest sample.
 */
const MEMORY_TURNS = integer("MAKA_BENCH_SCALE_MEMORY_TURNS", 3)
const memoryChild = process.env["MAKA_BENCH_SCALE_MEMORY_CHILD"]
if (memoryChild !== undefined) {
  const { database, baseUrl, sessionId, window } = JSON.parse(memoryChild) as { database: string; baseUrl: string; sessionId: string; window: number }
  const gc = (globalThis as { gc?: () => void }).gc
  if (gc === undefined) throw new Error("the memory pass needs --expose-gc")
  const childWorkspace = temporaryDirectory("maka-bench-scale-memory-")
  const child = await maka({ database, baseUrl, workspace: childWorkspace, declaredWindow: window })
  gc()
  const idle = process.memoryUsage()
  const heap: Array<number> = []
  const rss: Array<number> = []
  for (let turn = 0; turn < MEMORY_TURNS; turn++) {
    let turnHeap = 0
    let turnRss = 0
    const sample = () => {
      gc()
      const usage = process.memoryUsage()
      turnHeap = Math.max(turnHeap, usage.heapUsed)
      turnRss = Math.max(turnRss, usage.rss)
    }
    await child.turn(sessionId, `loop-${STEPS}`, `Memory turn ${turn + 1}.`, undefined, sample)
    heap.push(turnHeap)
    rss.push(turnRss)
  }
  await child.engine.close()
  fs.rmSync(childWorkspace, { recursive: true, force: true })
  console.log(JSON.stringify({ heapMB: median(heap) / 2 ** 20, rssMB: median(rss) / 2 ** 20, idleHeapMB: idle.heapUsed / 2 ** 20, idleRssMB: idle.rss / 2 ** 20 }))
  process.exit(0)
}

/**
 * A first step is one of two kinds, with or without a summary's round trip in it (the 1,500-token
 * window makes compaction due every turn or two): over 5 turns the median fell in either and the
 * first-step ratios read 0.57 to 1.62 between runs; over 11 they held within 0.95–1.04.
 */
const TURNS = integer("MAKA_BENCH_SCALE_TURNS", 11)
const WARMUP = integer("MAKA_BENCH_WARMUP", 2)
const ACCOUNT_TURNS = integer("MAKA_BENCH_SCALE_ACCOUNT_TURNS", 3)
const WINDOW = integer("MAKA_BENCH_SCALE_WINDOW", 1_500)
const BUILD_WINDOW = integer("MAKA_BENCH_SCALE_BUILD_WINDOW", 50_000)
const SIZES = (process.env["MAKA_BENCH_SCALE_SIZES"] ?? "100,1000,10000").split(",").map(Number)
if (process.env["MAKA_BENCH_SCALE_LARGE"] === "1") SIZES.push(100_000)
if (SIZES.some((size) => !Number.isInteger(size) || size <= 0)) throw new Error("MAKA_BENCH_SCALE_SIZES must list positive integers")
SIZES.sort((left, right) => left - right)
if (TURNS < 1 || WINDOW < 1 || BUILD_WINDOW < 1) throw new Error("MAKA_BENCH_SCALE_TURNS, MAKA_BENCH_SCALE_WINDOW and MAKA_BENCH_SCALE_BUILD_WINDOW must be positive")

/** The end of the compaction instruction: a body holding it is a summary request, not a main one. */
const SUMMARY_MARK = "Now write the structured summary of the conversation above."

const directory = temporaryDirectory("maka-bench-scale-")
const workspace = path.join(directory, "workspace")
fs.mkdirSync(workspace)
const server = await startFakeServer()
const databaseFile = path.join(directory, "maka.sqlite")

/** The largest main request body per session, to show the context stays bounded. */
let largestRequest = 0
const measuringFetch = (input: string, init: RequestInit): Promise<Response> => {
  const body = typeof init.body === "string" ? init.body : new TextDecoder().decode(init.body as Uint8Array)
  if (!body.includes(SUMMARY_MARK)) largestRequest = Math.max(largestRequest, Buffer.byteLength(body))
  return globalThis.fetch(input, init)
}
const engine = await maka({ database: databaseFile, baseUrl: server.baseUrl, workspace, fetch: measuringFetch, declaredWindow: WINDOW })

interface Series {
  readonly size: number
  readonly sessionId: string
  events: number
  turns: number
  summaries: number
  checkpoints: number
  readonly steady: Array<number>
  readonly first: Array<number>
  readonly perStep: Array<number>
  largestRequest: number
}

const record = (series: Series, turn: MakaTurn): void => {
  series.events += turn.events
  series.summaries += turn.summaryRequests
  series.checkpoints += turn.checkpoints
}

const started = performance.now()
const all: Array<Series> = []
for (const size of SIZES) {
  const series: Series = {
    size,
    sessionId: `scale-${size}`,
    events: 0,
    turns: 0,
    summaries: 0,
    checkpoints: 0,
    steady: [],
    first: [],
    perStep: [],
    largestRequest: 0,
  }
  const building = performance.now()
  while (series.events < size) {
    const model = size - series.events > 1_000 ? "build-50" : "build-10"
    const turn = await engine.turn(series.sessionId, model, `Build turn ${++series.turns}.`, BUILD_WINDOW)
    record(series, turn)
  }
  console.log(
    `scale ${size}: ${series.events} events after ${series.turns} turns, ${series.checkpoints} checkpoints ` +
      `(${round((performance.now() - building) / 1000, 1)} s to build)`,
  )
  all.push(series)
}
const measuredAt = new Map(all.map((series) => [series.size, series.events]))
// Summaries and checkpoints are counted from here on: the warm-up turns' included.
const summariesBefore = new Map(all.map((series) => [series.size, series.summaries]))
const checkpointsBefore = new Map(all.map((series) => [series.size, series.checkpoints]))

/** One 10-step turn; the largest request counts once the session is in the measured regime (after the warm-up). */
const loopTurn = async (series: Series, label: string, warmUp = false): Promise<MakaTurn> => {
  largestRequest = 0
  const turn = await engine.turn(series.sessionId, `loop-${STEPS}`, `${label} turn ${++series.turns}.`)
  if (turn.requestedAt.length !== STEPS) throw new Error(`scale ${series.size}: expected ${STEPS} main requests, saw ${turn.requestedAt.length}`)
  record(series, turn)
  if (!warmUp) series.largestRequest = Math.max(series.largestRequest, largestRequest)
  return turn
}

const PROFILE = process.env["MAKA_BENCH_PROFILE"] ?? ""
if (PROFILE !== "") {
  const turns = integer("MAKA_BENCH_PROFILE_TURNS", 10)
  for (const series of all) {
    for (let index = 0; index < WARMUP; index++) await loopTurn(series, "Warm-up", true)
    const file = PROFILE.replace(/(\.cpuprofile)?$/, `-${series.size}.cpuprofile`)
    const profileStarted = performance.now()
    const profile = await profiled(file, async () => {
      for (let index = 0; index < turns; index++) await loopTurn(series, "Profiled")
    })
    console.log(`scale ${series.size}: profiled ${turns} turns (${round((performance.now() - profileStarted) / (turns * STEPS), 2)} ms per step under the profiler); wrote ${file}; top 15 functions by self time:`)
    for (const line of topSelfTime(profile)) console.log(line)
  }
  await engine.engine.close()
  await server.close()
  fs.rmSync(directory, { recursive: true, force: true })
  console.log(JSON.stringify({ entries: {} }))
  process.exit(0)
}

for (let pass = 0; pass < WARMUP + TURNS; pass++) {
  for (let offset = 0; offset < all.length; offset++) {
    const series = all[(pass + offset) % all.length]!
    const turn = await loopTurn(series, pass < WARMUP ? "Warm-up" : "Measured", pass < WARMUP)
    if (pass < WARMUP) continue
    const steady: Array<number> = []
    for (let step = 1; step < STEPS - 1; step++) steady.push(turn.requestedAt[step + 1]! - turn.requestedAt[step]!)
    series.steady.push(median(steady))
    series.first.push(turn.requestedAt[1]! - turn.startedAt)
    series.perStep.push((turn.endedAt - turn.startedAt) / STEPS)
  }
}

/** WAL bytes and commits per main step over `ACCOUNT_TURNS` turns, the meter's read transaction held across them. */
const account = async (series: Series) => {
  const meter = new WalMeter(databaseFile)
  const checkpoints = series.checkpoints
  meter.start()
  for (let index = 0; index < ACCOUNT_TURNS; index++) await loopTurn(series, "Accounting")
  const count = meter.stop()
  meter.close()
  const steps = ACCOUNT_TURNS * STEPS
  return { bytes: count.bytes / steps, commits: count.commits / steps, checkpoints: series.checkpoints - checkpoints }
}
const accounted = new Map<number, Awaited<ReturnType<typeof account>>>()
if (ACCOUNT_TURNS > 0) for (const series of all) accounted.set(series.size, await account(series))

await engine.engine.close()

/** The memory of a live run per size, each in a fresh process that holds that one session only. */
interface Memory {
  readonly heapMB: number
  readonly rssMB: number
  readonly idleHeapMB: number
  readonly idleRssMB: number
}
const memory = new Map<number, Memory>()
if (MEMORY_TURNS > 0) {
  for (const series of all) {
    const output = await new Promise<string>((resolve, reject) => {
      const child = spawn(process.execPath, ["--expose-gc", "--import", "tsx", fileURLToPath(import.meta.url)], {
        env: {
          ...process.env,
          MAKA_BENCH_SCALE_MEMORY_CHILD: JSON.stringify({ database: databaseFile, baseUrl: server.baseUrl, sessionId: series.sessionId, window: WINDOW }),
        },
        stdio: ["ignore", "pipe", "inherit"],
      })
      let text = ""
      child.stdout.on("data", (part: Buffer) => (text += part.toString("utf8")))
      child.on("close", (status) => (status === 0 ? resolve(text) : reject(new Error(`the memory pass of scale ${series.size} exited ${status}`))))
    })
    const measured = JSON.parse(output.trim().split("\n").at(-1)!) as Memory
    memory.set(series.size, measured)
    console.log(
      `scale ${series.size}: live run in a fresh process: heap ${round(measured.heapMB, 1)} MB, RSS ${round(measured.rssMB, 1)} MB ` +
        `(engine open, before the run: heap ${round(measured.idleHeapMB, 1)} MB, RSS ${round(measured.idleRssMB, 1)} MB)`,
    )
  }
}
await server.close()
fs.rmSync(directory, { recursive: true, force: true })

const entries: Record<string, Entry> = {}
const reference = all[0]!
const smallest = {
  steady: median(reference.steady),
  first: median(reference.first),
  perStep: median(reference.perStep),
  bytes: accounted.get(reference.size)?.bytes,
}
const against = `vs the same figure at ${reference.size} events, measured round-robin in the same run (flat means ratio ≈ 1)`
for (const series of all) {
  const isReference = series === reference
  const label = `scale.${series.size}`
  const steady = median(series.steady)
  const first = median(series.first)
  const perStep = median(series.perStep)
  const summaries = series.summaries - summariesBefore.get(series.size)!
  const checkpoints = series.checkpoints - checkpointsBefore.get(series.size)!
  console.log(
    `scale ${series.size}: steady step ${round(steady, 2)} ms, first step ${round(first, 2)} ms, turn ${round(perStep, 2)} ms per step; ` +
      `largest main request ${round(series.largestRequest / 1024, 1)} KB; ${summaries} summary requests, ${checkpoints} checkpoints while measuring`,
  )
  entries[`${label}.steadyStepMs.vs${reference.size}`] = entry(
    steady,
    "ms",
    isReference ? null : smallest.steady,
    isReference
      ? `a steady step of a 10-step tool-loop turn (between consecutive main model_requested) with compaction on (declared window ${WINDOW} tokens): the reference of the larger sizes`
      : `a steady step inside a running turn ${against}`,
  )
  entries[`${label}.firstStepMs.vs${reference.size}`] = entry(
    first,
    "ms",
    isReference ? null : smallest.first,
    isReference
      ? "the first step of a new turn (start → second main model_requested), compaction on: the reference of the larger sizes"
      : `the first step of a new turn ${against}`,
  )
  entries[`${label}.turnMsPerStep.vs${reference.size}`] = entry(
    perStep,
    "ms/step",
    isReference ? null : smallest.perStep,
    isReference
      ? "a whole 10-step turn / 10, background summaries and their adoption included: the reference of the larger sizes"
      : `a whole turn per step ${against}`,
  )
  const wal = accounted.get(series.size)
  if (wal !== undefined) {
    console.log(
      `scale ${series.size}: ${round(wal.bytes / 1024, 2)} KB of WAL and ${round(wal.commits, 2)} commits per step ` +
        `(${ACCOUNT_TURNS} turns, ${wal.checkpoints} checkpoints among them)`,
    )
    entries[`${label}.walBytesPerStep.vs${reference.size}`] = entry(
      wal.bytes,
      "B/step",
      isReference || smallest.bytes === undefined ? null : smallest.bytes,
      isReference
        ? `bytes the commits append to the WAL per main step over ${ACCOUNT_TURNS} 10-step turns, checkpoints included: the reference of the larger sizes`
        : `WAL bytes per main step ${against}`,
    )
    entries[`${label}.commitsPerStep`] = entry(wal.commits, "commits/step", null, `commits per main step over the same ${ACCOUNT_TURNS} turns (a summary and its checkpoint add theirs)`)
  }
  const live = memory.get(series.size)
  const referenceMemory = memory.get(reference.size)
  if (live !== undefined && referenceMemory !== undefined) {
    entries[`${label}.heapMB.vs${reference.size}`] = entry(
      live.heapMB,
      "MB",
      isReference ? null : referenceMemory.heapMB,
      isReference
        ? `heap used during a live 10-step turn (after a forced GC at each main model_requested, the turn's largest, median over ${MEMORY_TURNS} turns) in a fresh process holding this session only: the reference of the larger sizes`
        : `heap used during a live turn ${against.replace("measured round-robin in the same run", "each in a fresh process, same run")}`,
    )
    entries[`${label}.liveHeapMB.vs${reference.size}`] = entry(
      live.heapMB - live.idleHeapMB,
      "MB",
      isReference ? null : referenceMemory.heapMB - referenceMemory.idleHeapMB,
      isReference
        ? "the same heap minus the heap of the freshly opened engine before the run (after a forced GC): what the live run itself holds, the loaded code left out; the reference of the larger sizes"
        : `what the live run itself holds (heap during the turn − heap of the idle engine) ${against.replace("measured round-robin in the same run", "each in a fresh process, same run")}`,
    )
    entries[`${label}.rssMB.vs${reference.size}`] = entry(
      live.rssMB,
      "MB",
      isReference ? null : referenceMemory.rssMB,
      isReference
        ? "resident set size during the same live turns (the turn's largest sample): the reference of the larger sizes"
        : `RSS during a live turn ${against.replace("measured round-robin in the same run", "each in a fresh process, same run")}`,
    )
  }
  entries[`${label}.events`] = entry(measuredAt.get(series.size)!, "events", null, "events in the session when its measurement began (grown by running turns)")
  entries[`${label}.requestKB`] = entry(series.largestRequest / 1024, "KB", null, "the largest main request body in the timed and accounting turns: the context compaction keeps bounded")
  entries[`${label}.checkpoints`] = entry(series.checkpoints, "checkpoints", null, "context checkpoints the session holds at the end (build, timed and accounting turns)")
}
console.log(`scale series done in ${round((performance.now() - started) / 1000, 1)} s`)
emit(entries)
