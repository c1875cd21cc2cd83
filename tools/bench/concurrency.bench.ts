/**
 * Concurrent sessions on one engine (docs/architecture.md §12): 20 and 200 sessions (override with
 * `MAKA_BENCH_CONCURRENCY`, e.g. `20,200`) each running the 10-step streaming tool loop at the same
 * time through one `createEngine` (SQLite, `synchronous=FULL`), against the OpenAI Agents SDK running
 * as many loops at once against the same server, and the durable floor doing the same on one raw
 * better-sqlite3 connection. Round-robin trials (`MAKA_BENCH_CONCURRENCY_TRIALS`, default 3, after
 * `MAKA_BENCH_CONCURRENCY_WARMUP` warm-up rounds at the first level); the figure is throughput in steps
 * per second (higher is better, so a ratio below 1 means maka is slower).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { agentsSdk, floor, maka } from "./contenders.ts"
import { startFakeServer } from "./fake-server.ts"
import { emit, entry, type Entry, integer, median, round, temporaryDirectory } from "./lib.ts"

const STEPS = 10
const MODEL = `loop-${STEPS}`
const LEVELS = (process.env["MAKA_BENCH_CONCURRENCY"] ?? "20,200").split(",").map(Number)
if (LEVELS.some((level) => !Number.isInteger(level) || level <= 0)) throw new Error("MAKA_BENCH_CONCURRENCY must list positive integers")
const TRIALS = integer("MAKA_BENCH_CONCURRENCY_TRIALS", 3)
/**
 * Untimed rounds at the first level (`MAKA_BENCH_CONCURRENCY_WARMUP`, default 10); the larger levels
 * run on warm code. At 20 sessions, after 1, 8 and 15 warm-up rounds (one run each, 2026-12-04): maka
 * 291, 336, 354 steps/s; the Agents SDK 421, 631, 663; the floor 888, 1,047, 1,093. One round timed
 * the SDK colder than maka (0.69× against 0.53× warm).
 */
const WARMUP = integer("MAKA_BENCH_CONCURRENCY_WARMUP", 10)

const directory = temporaryDirectory("maka-bench-concurrency-")
const workspace = path.join(directory, "workspace")
fs.mkdirSync(workspace)
const server = await startFakeServer()
const engine = await maka({ database: path.join(directory, "maka.sqlite"), baseUrl: server.baseUrl, workspace })
const sdk = agentsSdk(server.baseUrl)
const raw = floor(path.join(directory, "floor.sqlite"), server.baseUrl)
let sessions = 0

const contenders = [
  {
    name: "maka",
    loop: async () => {
      const turn = await engine.turn(`concurrent-${++sessions}`, MODEL)
      if (turn.requestedAt.length !== STEPS) throw new Error(`maka made ${turn.requestedAt.length} requests`)
    },
  },
  { name: "agentsSdk", loop: () => sdk.loop(MODEL) },
  {
    name: "floor",
    loop: async () => {
      const steps = await raw.loop(MODEL)
      if (steps.length !== STEPS) throw new Error(`the floor made ${steps.length} requests`)
    },
  },
] as const

const entries: Record<string, Entry> = {}
for (const [index, level] of LEVELS.entries()) {
  const throughput: Record<string, Array<number>> = { maka: [], agentsSdk: [], floor: [] }
  for (let trial = index === 0 ? -WARMUP : 0; trial < TRIALS; trial++) {
    for (let position = 0; position < contenders.length; position++) {
      const contender = contenders[(((trial + position) % contenders.length) + contenders.length) % contenders.length]!
      const started = performance.now()
      await Promise.all(Array.from({ length: level }, () => contender.loop()))
      const seconds = (performance.now() - started) / 1000
      if (trial >= 0) throughput[contender.name]!.push((level * STEPS) / seconds)
    }
  }
  const makaRate = median(throughput["maka"]!)
  const sdkRate = median(throughput["agentsSdk"]!)
  const floorRate = median(throughput["floor"]!)
  console.log(`${level} concurrent sessions: steps per second maka ${round(makaRate, 1)}, Agents SDK ${round(sdkRate, 1)}, floor ${round(floorRate, 1)}`)
  entries[`concurrency.${level}.stepsPerSecond.vsAgentsSdk`] = entry(
    makaRate,
    "steps/s",
    sdkRate,
    `${level} sessions running the 10-step tool loop at once on one engine vs the Agents SDK running ${level} loops at once (higher is better)`,
  )
  entries[`concurrency.${level}.stepsPerSecond.vsFloor`] = entry(makaRate, "steps/s", floorRate, `the same vs the durable floor running ${level} loops at once on one connection`)
}

await engine.engine.close()
raw.close()
await server.close()
fs.rmSync(directory, { recursive: true, force: true })
emit(entries)
