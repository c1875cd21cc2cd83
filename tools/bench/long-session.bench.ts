/**
 * A long session (docs/architecture.md §12): `MAKA_BENCH_LONG_TURNS` (default 1,000) turns in one
 * session through `createEngine` (SQLite, `synchronous=FULL`), each a 2-step tool loop (one `noop`
 * call, then an answer) against the fake server. Turn time is the median over the 20 turns ending at
 * turn 100 and over the last 20 turns; the heap is measured after a forced collection at turn 100 and
 * at the end. Flat is the goal: both ratios within ±20 %. No context window is declared, so automatic
 * compaction is due only when the live context passes 80 % of the 10,000-event / 8 MiB read limits
 * (docs/engine.md §5.12): from about turn 1,000 on, some turns also make a summary request (counted
 * apart from the two main requests) and fold the history into a checkpoint; the output states how many.
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
let summaryRequests = 0
let checkpoints = 0
let firstCheckpointTurn: number | undefined
let referenceHeap = 0
const started = performance.now()
for (let turn = 1; turn <= TURNS; turn++) {
  const before = performance.now()
  const result = await engine.turn("long", "loop-2", `Turn ${turn}.`)
  times.push(performance.now() - before)
  if (result.requestedAt.length !== 2) throw new Error(`turn ${turn} made ${result.requestedAt.length} main requests, not 2`)
  summaryRequests += result.summaryRequests
  checkpoints += result.checkpoints
  if (result.checkpoints > 0) firstCheckpointTurn ??= turn
  if (turn === REFERENCE) referenceHeap = heapMb()
  if (turn % 100 === 0) {
    console.log(
      `turn ${turn}: ${round(median(times.slice(-WINDOW)), 2)} ms per turn (median of the last ${WINDOW}); ` +
        `${summaryRequests} summary requests, ${checkpoints} checkpoints so far`,
    )
  }
}
const finalHeap = heapMb()
const atReference = median(times.slice(REFERENCE - WINDOW, REFERENCE))
const atEnd = median(times.slice(-WINDOW))
await engine.engine.close()
await server.close()
fs.rmSync(directory, { recursive: true, force: true })
console.log(
  `long session: turn ${REFERENCE} ${round(atReference, 2)} ms, turn ${TURNS} ${round(atEnd, 2)} ms; heap ${round(referenceHeap, 1)} → ${round(finalHeap, 1)} MB ` +
    `(${round((performance.now() - started) / 1000, 1)} s); ${summaryRequests} summary requests, ${checkpoints} checkpoints` +
    `${firstCheckpointTurn === undefined ? "" : `, the first at turn ${firstCheckpointTurn}`}`,
)
emit({
  "long-session.turnMs.vsTurn100": entry(atEnd, "ms", atReference, `median turn time (a 2-step tool loop) over the last ${WINDOW} of ${TURNS} turns in one session vs over turns ${REFERENCE - WINDOW + 1}–${REFERENCE}`),
  "long-session.heapMB.vsTurn100": entry(finalHeap, "MB", referenceHeap, `heap used after a forced collection at turn ${TURNS} vs at turn ${REFERENCE}`),
  "long-session.checkpoints": entry(
    checkpoints,
    "checkpoints",
    null,
    `context checkpoints recorded in the ${TURNS} turns (automatic compaction near the read limits, no declared window; ${summaryRequests} summary requests` +
      `${firstCheckpointTurn === undefined ? "" : `, the first checkpoint at turn ${firstCheckpointTurn}`})`,
  ),
})
