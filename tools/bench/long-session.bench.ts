/**
 * A long session (docs/architecture.md §12): `MAKA_BENCH_LONG_TURNS` (default 1,000) turns in one
 * session through `createEngine` (SQLite, `synchronous=FULL`), each a 2-step tool loop (one `noop`
 * call, then an answer) against the fake server. Turn time is the median over the 20 turns ending at
 * turn 100 and over the last 20 turns; the heap is measured after a forced collection at turn 100 and
 * at the end. Flat is the goal: both ratios within ±20 %.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { maka } from "./contenders.ts"
import { startFakeServer } from "./fake-server.ts"
import { emit, entry, integer, median, round, temporaryDirectory } from "./lib.ts"

const TURNS = integer("MAKA_BENCH_LONG_TURNS", 1_000)
const WINDOW = 20
const REFERENCE = 100
if (TURNS < REFERENCE + WINDOW) throw new Error(`MAKA_BENCH_LONG_TURNS must be at least ${REFERENCE + WINDOW}`)

const directory = temporaryDirectory("maka-bench-long-")
const workspace = path.join(directory, "workspace")
fs.mkdirSync(workspace)
const server = await startFakeServer()
const engine = await maka({ database: path.join(directory, "maka.sqlite"), baseUrl: server.baseUrl, workspace })

const heapMb = (): number => {
  const collect = (globalThis as { gc?: () => void }).gc
  collect?.()
  return process.memoryUsage().heapUsed / (1024 * 1024)
}

const times: Array<number> = []
let referenceHeap = 0
const started = performance.now()
for (let turn = 1; turn <= TURNS; turn++) {
  const before = performance.now()
  const result = await engine.turn("long", "loop-2", `Turn ${turn}.`)
  times.push(performance.now() - before)
  if (result.requestedAt.length !== 2) throw new Error(`turn ${turn} made ${result.requestedAt.length} requests, not 2`)
  if (turn === REFERENCE) referenceHeap = heapMb()
  if (turn % 100 === 0) console.log(`turn ${turn}: ${round(median(times.slice(-WINDOW)), 2)} ms per turn (median of the last ${WINDOW})`)
}
const finalHeap = heapMb()
const atReference = median(times.slice(REFERENCE - WINDOW, REFERENCE))
const atEnd = median(times.slice(-WINDOW))
await engine.engine.close()
await server.close()
fs.rmSync(directory, { recursive: true, force: true })
console.log(
  `long session: turn ${REFERENCE} ${round(atReference, 2)} ms, turn ${TURNS} ${round(atEnd, 2)} ms; heap ${round(referenceHeap, 1)} → ${round(finalHeap, 1)} MB ` +
    `(${round((performance.now() - started) / 1000, 1)} s)`,
)
emit({
  "long-session.turnMs.vsTurn100": entry(atEnd, "ms", atReference, `median turn time (a 2-step tool loop) over the last ${WINDOW} of ${TURNS} turns in one session vs over turns ${REFERENCE - WINDOW + 1}–${REFERENCE}`),
  "long-session.heapMB.vsTurn100": entry(finalHeap, "MB", referenceHeap, `heap used after a forced collection at turn ${TURNS} vs at turn ${REFERENCE}`),
})
