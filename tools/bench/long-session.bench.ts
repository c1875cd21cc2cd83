/**
 * A long session (docs/architecture.md §12): `MAKA_BENCH_LONG_TURNS` (default 1,000) turns through
 * `createEngine` (SQLite, `synchronous=FULL`), each a 2-step tool loop (one `noop` call, then an
 * answer) against the fake server, in two sessions of one engine taking turns (round-robin, so load
 * drifts hit both): one declares a context window (`MAKA_BENCH_LONG_WINDOW` tokens, default 4,000;
 * the fake server counts a request's tokens as its body bytes / 4), so automatic compaction keeps its
 * requests bounded as a real long session's are; the other declares none, so its requests carry the
 * whole session and grow with every turn (compaction is due only past 80 % of the 10,000-event /
 * 8 MiB read limits, docs/engine.md §5.12), which no engine can serve in flat time: its figure shows
 * what an unbounded context costs. The windowed session's turn time moves with its compaction cycle
 * (small requests after a checkpoint, growing until the next), so it is compared over whole cycles:
 * the median over the first cycle (the turns after one checkpoint up to and including the next) that
 * begins at or after turn 81, against the median over the last whole cycle; 20 turns, less than half
 * a cycle, measured where each fell in it. The other session (no cycle) compares the medians over
 * turns 81–100 and the last 20. The heap is measured after a forced collection at turn 100 and at
 * the end. Flat is the goal for the windowed session and for the heap: within ±20 %.
 *
 * After each round of turns the raw loop (`fetch` + `eventsource-parser` + two FULL commits per step,
 * nothing kept between loops) runs the same 2-step loop as a control: over the same spans of turns,
 * its drift is the machine's (the disk's sync latency above all, which a 2-step turn's commits make
 * most of its time), and `….turnMs.vsTurn100.machineDriftRemoved` divides it out of the session's.
 *
 * Before either session's first turn the engine runs `MAKA_BENCH_LONG_WARMUP` (default 300) turns of
 * a windowed session of its own, so both compared spans run compiled code: the code a turn runs once
 * (its start, its opening, its checks) is optimised only after some hundreds of turns, and without the
 * warm-up the windowed session's cycles, the same work each (46 turns, requests of 2.6 to 15.6 KB),
 * took a median 8.3, 7.2, 6.8, 6.6, 6.6 and 6.5 ms per turn one after another; after it, 6.5 to
 * 7.1 ms from the first cycle on.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { floor, maka } from "./contenders.ts"
import { startFakeServer } from "./fake-server.ts"
import { emit, entry, type Entry, integer, median, round, temporaryDirectory } from "./lib.ts"

const TURNS = integer("MAKA_BENCH_LONG_TURNS", 1_000)
const CONTEXT_WINDOW = integer("MAKA_BENCH_LONG_WINDOW", 4_000)
const WARMUP_TURNS = integer("MAKA_BENCH_LONG_WARMUP", 300)
const WINDOW = 20
const REFERENCE = 100
if (TURNS < REFERENCE + WINDOW) throw new Error(`MAKA_BENCH_LONG_TURNS must be at least ${REFERENCE + WINDOW}`)

const directory = temporaryDirectory("maka-bench-long-")
const workspace = path.join(directory, "workspace")
fs.mkdirSync(workspace)
const server = await startFakeServer()
const engine = await maka({ database: path.join(directory, "maka.sqlite"), baseUrl: server.baseUrl, workspace })
/**
 * The control: the raw loop (`fetch` + `eventsource-parser` + two FULL commits per step) runs the same
 * 2-step loop after each round of turns, in a file of its own, keeping nothing between its loops. Its
 * time moves only with the machine (the disk's sync latency, the other core's load, the server), so
 * its drift between two spans of turns says how much of the engine's drift over them is the
 * machine's: one isolated run of this bench measured the windowed session at ×0.60 between turns
 * 99–145 and 943–989 and another, the same hour, at ×1.01.
 */
const raw = floor(path.join(directory, "floor.sqlite"), server.baseUrl)
const rawTimes: Array<number> = []

const heapMb = (): number => {
  const collect = (globalThis as { gc?: () => void }).gc
  collect?.()
  return process.memoryUsage().heapUsed / (1024 * 1024)
}

interface Series {
  readonly session: string
  readonly window: number | undefined
  readonly times: Array<number>
  summaryRequests: number
  checkpoints: number
  firstCheckpointTurn: number | undefined
  /** The turns that recorded a checkpoint, in order. */
  readonly checkpointTurns: Array<number>
}
const series: ReadonlyArray<Series> = [
  { session: "long-windowed", window: CONTEXT_WINDOW, times: [], summaryRequests: 0, checkpoints: 0, firstCheckpointTurn: undefined, checkpointTurns: [] },
  { session: "long", window: undefined, times: [], summaryRequests: 0, checkpoints: 0, firstCheckpointTurn: undefined, checkpointTurns: [] },
]
let referenceHeap = 0
const started = performance.now()
for (let turn = 1; turn <= WARMUP_TURNS; turn++) {
  const result = await engine.turn("long-warm-up", "loop-2", `Warm-up turn ${turn}.`, CONTEXT_WINDOW)
  if (result.requestedAt.length !== 2) throw new Error(`warm-up turn ${turn} made ${result.requestedAt.length} main requests, not 2`)
  await raw.loop("loop-2")
}
if (WARMUP_TURNS > 0) console.log(`${WARMUP_TURNS} warm-up turns in a session of their own (${round((performance.now() - started) / 1000, 1)} s)`)
for (let turn = 1; turn <= TURNS; turn++) {
  for (const one of series) {
    const before = performance.now()
    const result = await engine.turn(one.session, "loop-2", `Turn ${turn}.`, one.window)
    one.times.push(performance.now() - before)
    if (result.requestedAt.length !== 2) throw new Error(`turn ${turn} of ${one.session} made ${result.requestedAt.length} main requests, not 2`)
    one.summaryRequests += result.summaryRequests
    one.checkpoints += result.checkpoints
    if (result.checkpoints > 0) {
      one.firstCheckpointTurn ??= turn
      one.checkpointTurns.push(turn)
    }
  }
  const rawStarted = performance.now()
  const rawSteps = await raw.loop("loop-2")
  rawTimes.push(performance.now() - rawStarted)
  if (rawSteps.length !== 2) throw new Error(`the raw loop made ${rawSteps.length} requests, not 2`)
  if (turn === REFERENCE) referenceHeap = heapMb()
  if (turn % 100 === 0) {
    console.log(
      `turn ${turn}: ` +
        series
          .map((one) => `${one.session} ${round(median(one.times.slice(-WINDOW)), 2)} ms per turn (median of the last ${WINDOW}), ${one.summaryRequests} summary requests, ${one.checkpoints} checkpoints`)
          .join("; "),
    )
  }
}
const finalHeap = heapMb()
raw.close()
await engine.engine.close()
await server.close()
fs.rmSync(directory, { recursive: true, force: true })
const entries: Record<string, Entry> = {
  "long-session.heapMB.vsTurn100": entry(finalHeap, "MB", referenceHeap, `heap used after a forced collection at turn ${TURNS} vs at turn ${REFERENCE} (both sessions, and the warm-up session, live in the engine)`),
}
/**
 * The compared spans of turns (1-based, inclusive): whole compaction cycles where the session has
 * them (the first beginning at or after turn 81, and the last), else turns 81–100 and the last 20.
 */
const spansOf = (one: Series) => {
  const cycles = one.checkpointTurns.slice(1).map((end, index) => ({ first: one.checkpointTurns[index]! + 1, last: end }))
  const reference = cycles.find((cycle) => cycle.first > REFERENCE - WINDOW)
  const end = cycles[cycles.length - 1]
  if (reference !== undefined && end !== undefined && end.first > reference.last) return { reference, end, cycles: true }
  return { reference: { first: REFERENCE - WINDOW + 1, last: REFERENCE }, end: { first: TURNS - WINDOW + 1, last: TURNS }, cycles: false }
}
const turnsOf = (one: Series, span: { readonly first: number; readonly last: number }) => one.times.slice(span.first - 1, span.last)

for (const one of series) {
  const spans = spansOf(one)
  const atReference = median(turnsOf(one, spans.reference))
  const atEnd = median(turnsOf(one, spans.end))
  const windowed = one.window !== undefined
  const prefix = windowed ? "long-session.windowed" : "long-session"
  const compaction = windowed
    ? `a declared window of ${one.window} tokens`
    : "no declared window: compaction only near the read limits, so every request carries the whole session"
  const checkpointNote = `${one.summaryRequests} summary requests${one.firstCheckpointTurn === undefined ? "" : `, the first checkpoint at turn ${one.firstCheckpointTurn}`}`
  const spanText = (span: { readonly first: number; readonly last: number }) => `turns ${span.first}–${span.last}`
  console.log(
    `long session (${compaction}): ${spanText(spans.reference)} ${round(atReference, 2)} ms, ${spanText(spans.end)} ${round(atEnd, 2)} ms` +
      ` (turns 81–100 ${round(median(one.times.slice(REFERENCE - WINDOW, REFERENCE)), 2)} ms, the last ${WINDOW} ${round(median(one.times.slice(-WINDOW)), 2)} ms);` +
      ` ${one.checkpoints} checkpoints, ${checkpointNote}`,
  )
  const compared = spans.cycles
    ? `over the last whole compaction cycle (${spanText(spans.end)}) vs over the first that begins at or after turn ${REFERENCE - WINDOW + 1} (${spanText(spans.reference)})`
    : `over the last ${WINDOW} of ${TURNS} turns vs over turns ${REFERENCE - WINDOW + 1}–${REFERENCE}`
  entries[`${prefix}.turnMs.vsTurn100`] = entry(atEnd, "ms", atReference, `median turn time (a 2-step tool loop) in one session ${compared}; ${compaction}`)
  // The same spans of the control: what the machine's drift alone made of them.
  const rawAtReference = median(rawTimes.slice(spans.reference.first - 1, spans.reference.last))
  const rawAtEnd = median(rawTimes.slice(spans.end.first - 1, spans.end.last))
  console.log(
    `long session (${compaction}): the raw loop over the same spans ${round(rawAtReference, 2)} ms and ${round(rawAtEnd, 2)} ms;` +
      ` the session's ratio with that drift divided out ${round((atEnd / atReference) * (rawAtReference / rawAtEnd), 3)}`,
  )
  entries[`${prefix}.rawLoop.turnMs.vsTurn100`] = entry(
    rawAtEnd,
    "ms",
    rawAtReference,
    `the control over the same spans as ${prefix}.turnMs.vsTurn100: the raw loop's 2-step loop (fetch + eventsource-parser + two FULL commits per step, nothing kept between loops), run after each round of turns`,
  )
  entries[`${prefix}.turnMs.vsTurn100.machineDriftRemoved`] = entry(
    atEnd * (rawAtReference / rawAtEnd),
    "ms",
    atReference,
    `${prefix}.turnMs.vsTurn100 with the control's drift over the same spans divided out: the end span's median turn time times the control's reference median over its end median`,
  )
  entries[`${prefix}.checkpoints`] = entry(one.checkpoints, "checkpoints", null, `context checkpoints recorded in the ${TURNS} turns (${compaction}; ${checkpointNote})`)
}
console.log(`long session: heap ${round(referenceHeap, 1)} → ${round(finalHeap, 1)} MB (${round((performance.now() - started) / 1000, 1)} s)`)
emit(entries)
