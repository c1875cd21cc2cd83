/**
 * `pnpm bench [name…] [--profile | --timeline]`: runs the benchmark files `tools/bench/*.bench.ts` (all of them, or
 * those named, e.g. `pnpm bench engine`), each in its own Node process. The packages are built first,
 * every file from its source (`tsc -b --force`, not turbo, whose cache hands back whatever `dist` it
 * stored for the same sources, an edited one too), and the benches import the built `dist`, the code
 * an installed package runs: the sources through `tsx` are a different program (esbuild's
 * `keepNames` wraps every named function, closures created per call included, in a `name` property
 * definition: 76 of them per step of the tool loop), which took 1.04–1.08× the built engine's time per
 * step, alternated in one process (2026-12-04). Each prints `{"entries": {...}, "environment":
 * {...}}` on its last stdout line; the entries (name → {value, unit, baseline, ratio, note}) are merged
 * by name into `bench/results.json`, and `BENCHMARKS.md` at the repository root is rewritten from it.
 * Every figure that has a baseline was measured against it in the same run (docs/architecture.md §12).
 *
 * `--profile` runs the named benches in profile mode instead (`engine`, `model-stream` and `scale` have one): the bench writes
 * `bench/profiles/<name>-<time>.cpuprofile` (open it in Chrome DevTools or VS Code) and prints the 15
 * functions with the most self time. `--timeline` runs the named benches in timeline mode (`engine` has
 * one): the bench prints the segments between the marks a step of the tool loop passes (`timeline.ts`).
 * Profile and timeline runs record no figures. `--report` only rewrites
 * `BENCHMARKS.md` from the stored results.
 */
import { spawn, spawnSync } from "node:child_process"
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import { dirname, join, relative, resolve } from "node:path"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import type { Entry } from "./lib.ts"

const benchDirectory = dirname(fileURLToPath(import.meta.url))
const root = resolve(benchDirectory, "../..")
const resultsFile = join(root, "bench", "results.json")
const reportFile = join(root, "BENCHMARKS.md")

const available = readdirSync(benchDirectory)
  .filter((file) => file.endsWith(".bench.ts"))
  .map((file) => file.slice(0, -".bench.ts".length))
  .sort()
const args = process.argv.slice(2)
const FLAGS = ["--profile", "--timeline", "--report"]
const profile = args.includes("--profile")
const timeline = args.includes("--timeline")
/** A run that diagnoses rather than measures: it records no figures. */
const diagnostic = profile || timeline
const reportOnly = args.includes("--report")
const requested = args.filter((arg) => !FLAGS.includes(arg))
const unknown = requested.filter((name) => !available.includes(name))
if (unknown.length > 0 || args.some((arg) => arg.startsWith("--") && !FLAGS.includes(arg)) || (profile && timeline)) {
  console.error(`usage: pnpm bench [name…] [--profile | --timeline] | pnpm bench --report  (benches: ${available.join(", ")})`)
  process.exit(2)
}
const selected = requested.length > 0 ? requested : available

interface Results {
  entries: Record<string, Entry>
  environment: Record<string, unknown>
}

const isEntry = (value: unknown): value is Entry =>
  typeof value === "object" && value !== null && typeof (value as Entry).value === "number" && typeof (value as Entry).unit === "string"

/** The stored results; keys in an older layout (not entries) are dropped, since no current bench writes them. */
const readResults = (): Results => {
  const results: Results = { entries: {}, environment: {} }
  if (!existsSync(resultsFile)) return results
  const parsed = JSON.parse(readFileSync(resultsFile, "utf8")) as Record<string, unknown>
  for (const [name, value] of Object.entries(parsed)) {
    if (name === "environment" && typeof value === "object" && value !== null) results.environment = { ...(value as Record<string, unknown>) }
    else if (isEntry(value)) results.entries[name] = value
  }
  return results
}

const writeResults = (results: Results): void => {
  const sorted = Object.fromEntries(Object.entries(results.entries).sort(([left], [right]) => left.localeCompare(right)))
  mkdirSync(dirname(resultsFile), { recursive: true })
  writeFileSync(resultsFile, `${JSON.stringify({ ...sorted, environment: results.environment }, null, 2)}\n`)
}

const SKIPPED = "skipped"

const format = (value: number | null): string => {
  if (value === null) return ""
  if (Math.abs(value) >= 10_000) return Math.round(value).toLocaleString("en-US")
  if (Math.abs(value) >= 100) return value.toFixed(0)
  if (Math.abs(value) >= 10) return value.toFixed(1)
  return value.toFixed(2)
}

const PREAMBLE = `# Benchmarks

Written by \`pnpm bench\` (\`tools/bench/run.ts\`) from \`bench/results.json\`; rerun it to refresh. Each
bench runs in its own Node process against the built packages (\`pnpm bench\` builds them first, with
\`tsc -b --force\`), the code an installed package runs, not the sources through \`tsx\` (whose
\`keepNames\` names every closure as it is created: 1.04–1.08× the built engine's step); the fake
OpenAI-compatible server runs in a process of its own, so its work is never counted in the measured
process's time or CPU. In the
\`engine\` bench the Agents SDK and LangGraph run in a process of their own too (\`tools/bench/peers.ts\`),
driven round-robin with maka and the floor: their \`AsyncLocalStorage\` turns on Node's promise hooks for
the whole process (200,000 awaits took 68 ms after one loop of the SDK, 11 ms before it), which maka's
and the floor's steps would otherwise pay beside them.

How to read it:
- **value** is maka's figure; **baseline** is the figure it is compared with, measured in the same run
  on the same machine (interleaved, round-robin, so load drifts hit both); **ratio** is value / baseline.
  Absolute times move with the machine's load (see the load average per bench below); ratios move much
  less, and they are what docs/architecture.md §12 and the acceptance criteria are stated in.
- Times are medians over trials (\`MAKA_BENCH_TRIALS\`, default 5, 15 for the tool loop of \`engine\`, whose trials spread more, after \`MAKA_BENCH_WARMUP\` = 2 warm-up
  trials; the tool loops of \`engine\` and \`postgres\` after \`MAKA_BENCH_LOOP_WARMUP\` = 90 and 40, since every contender, and the
  fake server, kept getting faster over its first hundreds of loops: measured after 2 warm-up trials the
  loop read 4.68 ms per step for maka against 3.53 for the Agents SDK and 1.92 for the floor, after 60
  3.27, 2.04 and 1.05, and with 40 maka's first rotation still got faster while it was timed); per-step figures divide a trial's time by its steps. A step is one model request of the
  10-step tool loop (nine \`noop\` calls, then the answer \`done\`), with the tool call that follows it.
- A figure whose unit is **skipped** was not measured in the last run; its note says why (the
  PostgreSQL figures when no server is configured). Each bench's figures replace all of its earlier
  ones, so every row below comes from the last run of its bench, with its baseline from that same run.
- CPU is \`process.cpuUsage()\` over a trial (user + system, every thread of the process).
- Commits and bytes per step come from an accounting pass that is not timed: a read transaction held
  from its start keeps the WAL from being recycled, and the bench then reads the WAL itself: the WAL
  index header gives the last frame, each frame header its page and whether it ends a commit. Bytes are
  frames × (page size + 24), i.e. what the commits append to the WAL (checkpoints later copy each
  distinct page once more into the database file). Pages are attributed to tables and indexes with
  SQLite's \`dbstat\`.
- The durable floor is the least a durable engine must do per step: the raw stream (\`fetch\` +
  \`eventsource-parser\`) plus two \`synchronous=FULL\` commits with raw better-sqlite3 (before the request:
  the previous settles and the request; before the tool runs: the observations, the completion and the
  dispatch).
- The OpenAI Agents SDK runs the same loop (chat completions API, streaming, the same \`noop\` tool)
  against the same server and persists nothing.
- Two rotations of the loop: maka, maka at \`NORMAL\` and the floor first, alone (the figures against
  the floor and at \`NORMAL\`), then every contender with the peers (the figures against the peers;
  \`engine.loop.withPeers.msPerStep.vsFloor\` is maka against the floor in that rotation). The peers run
  in a process of their own, so in their rotation every contender runs after its process sat idle,
  which slows it on this machine whatever ran meanwhile (the floor's three loops: 1.14 ms a step back
  to back, 1.45 after an 80-ms sleep, 1.42 after an Agents SDK turn): the floor's step took 2.02 and
  2.12 ms in the rotation with them, 1.61 and 1.70 without them. Each rotation is timed after 90
  untimed trials, 270 loops of each contender.
- maka at \`synchronous=NORMAL\` (\`engine.loop.normal.*\`, \`engine.loop.msPerStep.vsNormal\`): the same
  engine over a file of its own, round-robin with the others. In WAL mode a commit at \`NORMAL\` writes
  its frames without flushing them, so this loop is the engine's own work and the WAL's writes, and its
  ratio to the \`FULL\` loop is what the flushes of the commits cost per step. Both engines run the same
  code, so the warm-up trials warm it twice as often as a single engine's.
- LangGraph (\`engine.loop.*.vsLangGraph\`, \`engine.loop.langGraph.*\`) runs the same loop as a graph of a
  model node (LangChain's \`ChatOpenAI\` with \`noop\` bound, its tokens streamed with
  \`streamMode: "messages"\`) and a tool node (\`ToolNode\`), against the same server, checkpointed after
  every super-step by its SQLite checkpointer (\`SqliteSaver\` over better-sqlite3, WAL, set to
  \`synchronous=FULL\` like maka, \`durability: "sync"\`: each checkpoint is written before the next
  super-step starts). Its commits and WAL bytes per step are read by the same WAL meter as maka's. Each
  checkpoint holds the whole graph state, so its bytes per step grow with the thread's length; maka
  appends only the step's events (\`engine.longLoop.*\`: the WAL bytes per step of one 40-step loop,
  against the other contender and against the same contender's 10-step figure). \`langGraph.msPerStep.vsUncheckpointed\` compares it with the same
  graph without a checkpointer: what its durability costs it.
- PostgreSQL (\`postgres.*\`): the same loop through \`createEngine({databaseUrl})\` on the server of
  \`MAKA_BENCH_DATABASE_URL\` (else \`MAKA_TEST_DATABASE_URL\`; with neither, the figures are skipped), in
  a fresh schema dropped at the end, against maka on SQLite, the PostgreSQL floor (the raw stream plus
  two durable writes per step with a raw \`pg\` client, each a single autocommitted \`INSERT … unnest\`:
  one round trip, one commit) and the SQLite floor, round-robin. Commits and statements are counted
  at the \`pg\` client (a commit is the \`COMMIT\` of a transaction that wrote, or an autocommitted
  write); the server's WAL bytes are not measured, since its WAL is shared with every other client of
  the server. The server's CPU is not in the CPU figures.
- Context reads (\`event-log.readModelContextMs.*\`): the engine's read and the raw read alternate round
  by round, each size timed over at least 15 rounds and 10,000 events read, after untimed rounds of
  at least 20,000 events read (so both run compiled code when they are timed).
- Delivery delay: the server stamps each delta with its send time (\`process.hrtime\`, a clock shared by
  every process); the reader takes its delivery time; the bare read's delay is the transport's share,
  and maka's minus it is what maka adds between a delta's arrival and its delivery.
- The stream's durable floor (\`engine.stream.unpaced.*.vsFloor\`, \`floorMs.vsBare\`): the bare read of the
  same answer with the two \`synchronous=FULL\` commits a durable engine cannot skip (raw better-sqlite3:
  the request before it is sent, the answer's text and completion after the stream), round-robin with
  the bare read and maka. Its ratio to the bare read is what those two commits cost on this disk: the
  least any durable engine pays, against which the bound of the unpaced answer can be judged. The
  same answer also runs through the Agents SDK (one agent without tools, streamed, in the peers'
  process, round-robin with the others; \`engine.stream.unpaced.agentsSdk.*\`): what a runtime that
  keeps nothing adds to the bare read. An accounting pass counts the commits of five unpaced answers
  (\`engine.stream.unpaced.commitsPerAnswer.vsFloor\`).
- History series: after 100 turns on an engine and a file of their own (\`MAKA_BENCH_HISTORY_WARMUP\`),
  each followed by one loop of the raw loop, so the smallest size is not timed while either side's
  code is still compiling, one session per size is grown to 100, 1,000, 10,000 and 100,000 events by
  running real turns (\`build-50\`: 50 parallel tool calls then an answer), never by writing rows; one
  untimed 10-step turn per session, then rounds of 10-step turns are measured, one turn of each
  size per round, round-robin (so the machine's drift falls on every size alike), each size
  following every other equally often (a first step pays for the work before it), and the raw loop
  replays the very request bodies maka sent (kept by the fake server as they arrived; their bytes
  encoded before it is timed, as maka sends its cached messages' bytes) with its two commits per step,
  over \`node:http\` with a keep-alive agent (the transport maka's model client is built on), and so does
  the same loop over \`fetch\` (\`aboveRawFetchMsPerStep\`), which spends more on large requests. CPU time
  per step (\`process.cpuUsage\` over maka's turn and over the replay) adds up where wall time
  overlaps (maka's work beside the server's reading of a large request): \`aboveRawCpuMsPerStep\`. Both
  figures above the raw loop are differences; from 10,000 events the requests are hundreds of KB and
  the raw loop's own time grows faster than maka's. No window is declared there, so from 8,000 events (80 % of the read limit) automatic compaction folds
  the history; summary requests are not steps and are not replayed. maka's turns and the replays
  alternate, so each one's first step comes right after the other's work: the raw loop's own first
  step against its steady ones (\`raw.firstStepMs.vsSteady\`) shows what that costs a loop with no turn
  to open, beside maka's first step of a turn against its steady step.
- Scale series (\`scale\`): one session per size (100, 1,000, 10,000 events; 100,000 with
  \`MAKA_BENCH_SCALE_LARGE=1\`, about 5 minutes to build and 7 in all on 2 cores), grown the same way
  under a wider window (\`MAKA_BENCH_SCALE_BUILD_WINDOW\`, default 50,000 tokens), every measured run
  declaring a context window (\`context.declaredWindow\`, \`MAKA_BENCH_SCALE_WINDOW\` tokens, default
  1,500; the fake server counts a request's tokens as its body bytes / 4 and answers summary requests
  with a valid \`sections_v1\` summary), so automatic compaction keeps every context bounded
  (\`requestKB\` shows it). 10-step turns
  are timed round-robin over the sizes; each figure is a ratio to the same figure at 100 events: a
  steady step (between consecutive main \`model_requested\`), the first step of a new turn, a whole turn
  per step (background summaries included), from an accounting pass over 3 more turns per size the WAL
  bytes per main step (checkpoints included), and the memory of a live run: a fresh process per size
  opens the same database and runs 3 turns of that session alone, sampling the heap used (after a
  forced GC) and the RSS at each main request (\`heapMB\`, \`rssMB\`; most of either is the loaded code,
  which the 100-event reference carries too; \`liveHeapMB\` leaves it out: the heap during the run minus
  the heap of the same freshly opened engine before it). Flat (±20 %) means nothing a step does or keeps grows
  with the history behind it.
- Long session (\`long-session\`): two sessions of one engine take 1,000 turns each, round-robin (a
  2-step tool loop per turn): \`windowed\` declares a context window (\`MAKA_BENCH_LONG_WINDOW\`, default
  4,000 tokens), so automatic compaction keeps its requests bounded, and its turn time at the end
  against turn 100 is the flat target, compared over whole compaction cycles (the median over the
  last cycle against the first that begins at or after turn 81: a request grows from one checkpoint
  to the next, so 20 turns, under half a cycle, measured where they fell in it); the other declares none, so each of its requests carries the
  whole session and grows with it: its ratio shows what an unbounded context costs, not a target.
  After each round of turns the raw loop runs the same 2-step loop, keeping nothing: its drift over the
  same spans of turns is the machine's (\`rawLoop.turnMs.vsTurn100\`), which
  \`windowed.turnMs.vsTurn100.machineDriftRemoved\` divides out of the session's.
  Both start after 300 turns of a third session (\`MAKA_BENCH_LONG_WARMUP\`), so turn 100 is timed with
  the engine's per-turn code compiled as at turn 1,000 (without them the windowed turns fell by a
  third over the run with the same work in every cycle).
- Layout (\`layout.*\`): files built with raw better-sqlite3 holding the log's columns and the indexes
  every event meets, as the log stores them (a rowid table) or clustered by \`(session_id, sequence)\`
  (\`WITHOUT ROWID\`), each with 1,024-byte pages (the log's) and 4,096; every file holds the same
  events (\`MAKA_BENCH_LAYOUT_SESSIONS\` sessions, default 10, of \`MAKA_BENCH_LAYOUT_EVENTS\` events,
  default 10,000, whose steps alternate). Reading one session in sequence order (round-robin over the
  files, a different session each round) and step-like commits at \`synchronous=FULL\` (the request's
  four events, then the step's other three; each COMMIT's time and the WAL frames it appends): the
  read a new process pays once per session against the commits every step pays.
- Concurrency: 20 and 200 sessions running the tool loop at once on one engine, against as many
  Agents SDK loops and floor loops at once; throughput in steps per second (higher is better, so a
  ratio below 1 means maka is slower).

\`pnpm bench\` runs every bench in turn and prints its progress (\`[k/n] bench <name>\`, the elapsed time) and
each bench's own progress lines. Run one bench with \`pnpm bench <name>\` (${available.join(", ")}); profile with
\`pnpm bench engine --profile\` (or \`model-stream\`, \`scale\`; writes \`bench/profiles/*.cpuprofile\`,
prints the top 15 self-time functions and the time per package); see where a step of the tool loop waits with
\`pnpm bench engine --timeline\` (the time between the marks a step passes: its transactions' \`BEGIN\` and \`COMMIT\`,
the request written, the answer's headers, the tool's call); rewrite this file from the stored results with
\`pnpm bench --report\`. Knobs (environment): \`MAKA_BENCH_TRIALS\`, \`MAKA_BENCH_WARMUP\`, \`MAKA_BENCH_LOOP_WARMUP\`,
\`MAKA_BENCH_LOOPS\` (tool loops per contender per trial, default 3), \`MAKA_BENCH_PG_LOOPS\` (the same on
PostgreSQL, default 3), \`MAKA_BENCH_DATABASE_URL\`, \`MAKA_BENCH_CONCURRENCY\` (default 20,200),
\`MAKA_BENCH_CONCURRENCY_TRIALS\` (default 3), \`MAKA_BENCH_CONCURRENCY_WARMUP\` (default 10),
\`MAKA_BENCH_STREAM_ROUNDS\`, \`MAKA_BENCH_STREAM_WARMUP\` (default 20),
\`MAKA_BENCH_PACED_ROUNDS\`, \`MAKA_BENCH_HISTORY_SIZES\` (default 100,1000,10000),
\`MAKA_BENCH_HISTORY_TURNS\` (default 15), \`MAKA_BENCH_HISTORY_LARGE=0\` (leaves out the 100,000-event size, about a minute to build),
\`MAKA_BENCH_APPENDS\`, \`MAKA_BENCH_APPEND_WARMUP\` (untimed blocks of 200 appends, default 10),
\`MAKA_BENCH_LONG_TURNS\` (default 1,000), \`MAKA_BENCH_LONG_WINDOW\` (default 4,000), \`MAKA_BENCH_SCALE_SIZES\`,
\`MAKA_BENCH_SCALE_TURNS\` (default 11), \`MAKA_BENCH_SCALE_ACCOUNT_TURNS\` (default 3),
\`MAKA_BENCH_SCALE_MEMORY_TURNS\` (default 3),
\`MAKA_BENCH_SCALE_WINDOW\` (default 1,500 tokens), \`MAKA_BENCH_SCALE_BUILD_WINDOW\` (default 50,000),
\`MAKA_BENCH_SCALE_LARGE=1\` (adds 100,000 events), \`MAKA_BENCH_LAYOUT_SESSIONS\` (default 10),
\`MAKA_BENCH_LAYOUT_EVENTS\` (default 10,000), \`MAKA_BENCH_TIMELINE_LOOPS\` and \`MAKA_BENCH_TIMELINE_WARMUP\` (the loops
a timeline records and the untimed ones before it, default 40 each).
`

/** The targets of docs/architecture.md §12 and the hot-path acceptance, checked against the stored figures. */
interface Target {
  readonly label: string
  /** An entry name, or a pattern matching several (each is checked). */
  readonly entry: string | RegExp
  readonly on: "ratio" | "value"
  readonly min?: number
  readonly max: number
}

const TARGETS: ReadonlyArray<Target> = [
  { label: "tool loop vs the OpenAI Agents SDK, time per step (aim 0.8×)", entry: "engine.loop.msPerStep.vsAgentsSdk", on: "ratio", max: 1.0 },
  { label: "tool loop vs the durable floor, time per step", entry: "engine.loop.msPerStep.vsFloor", on: "ratio", max: 1.5 },
  { label: "commits per tool step", entry: "engine.loop.commitsPerStep.vsFloor", on: "value", max: 2 },
  { label: "WAL bytes per step vs the floor", entry: "engine.loop.walBytesPerStep.vsFloor", on: "ratio", max: 2 },
  { label: "1,000-delta answer, unpaced, vs bare fetch", entry: "engine.stream.unpaced.totalMs", on: "ratio", max: 1.15 },
  {
    label: "1,000-delta answer, unpaced: its durable floor (the two FULL commits no durable engine skips) vs bare fetch, whether the bound above is within reach on this disk",
    entry: "engine.stream.unpaced.floorMs.vsBare",
    on: "ratio",
    max: 1.15,
  },
  {
    label: "1,000-delta answer, unpaced: the OpenAI Agents SDK (keeps nothing) vs bare fetch, against the same bound for comparison",
    entry: "engine.stream.unpaced.agentsSdk.totalMs.vsBare",
    on: "ratio",
    max: 1.15,
  },
  { label: "1,000-delta answer, paced 1 ms, vs bare fetch", entry: "engine.stream.paced1ms.totalMs", on: "ratio", max: 1.05 },
  { label: "paced: median delay from a delta's arrival to its delivery (ms)", entry: "engine.stream.paced1ms.arrivalToDeliveryMs", on: "value", max: 2 },
  { label: "history: time per step above the raw loop, vs the smallest size (flat ±20 %)", entry: /^history\.\d+\.aboveRawMsPerStep\.vsSmallest$/, on: "ratio", min: 0.8, max: 1.2 },
  { label: "history: first step of a new turn vs a steady step", entry: /^history\.\d+\.firstStepMs\.vsSteady$/, on: "ratio", max: 2 },
  { label: "history: rows a freshly created engine reads before its first request vs the session's events (read once)", entry: /^history\.\d+\.reopenedRowsRead\.vsEvents$/, on: "ratio", max: 1.1 },
  { label: "scale, compaction on: a steady step vs at 100 events (flat ±20 %)", entry: /^scale\.\d+\.steadyStepMs\.vs\d+$/, on: "ratio", min: 0.8, max: 1.2 },
  { label: "scale, compaction on: the first step of a new turn vs at 100 events (flat ±20 %)", entry: /^scale\.\d+\.firstStepMs\.vs\d+$/, on: "ratio", min: 0.8, max: 1.2 },
  { label: "scale, compaction on: a whole turn per step, summaries and adoptions included, vs at 100 events (flat ±20 %)", entry: /^scale\.\d+\.turnMsPerStep\.vs\d+$/, on: "ratio", min: 0.8, max: 1.2 },
  { label: "scale, compaction on: WAL bytes per step vs at 100 events (flat ±20 %)", entry: /^scale\.\d+\.walBytesPerStep\.vs\d+$/, on: "ratio", min: 0.8, max: 1.2 },
  { label: "scale, compaction on: heap a live run holds (above the idle engine's) vs at 100 events (flat ±20 %)", entry: /^scale\.\d+\.liveHeapMB\.vs\d+$/, on: "ratio", min: 0.8, max: 1.2 },
  { label: "long session, declared window: turn time at the last turn vs turn 100 (flat ±20 %)", entry: "long-session.windowed.turnMs.vsTurn100", on: "ratio", min: 0.8, max: 1.2 },
  { label: "the same with the machine's drift over those turns (the raw loop's, run beside them) divided out", entry: "long-session.windowed.turnMs.vsTurn100.machineDriftRemoved", on: "ratio", min: 0.8, max: 1.2 },
  { label: "long session: heap at the last turn vs turn 100 (flat ±20 %)", entry: "long-session.heapMB.vsTurn100", on: "ratio", min: 0.8, max: 1.2 },
  { label: "append vs a raw better-sqlite3 insert of the same row", entry: "event-log.appendUs.vsRawInsert", on: "ratio", max: 1.5 },
  { label: "readModelContext vs a raw select + JSON.parse", entry: /^event-log\.readModelContextMs\.\d+\.vsRawSelect$/, on: "ratio", max: 2 },
  { label: "model adapter alone, 1,000-delta answer unpaced, vs bare fetch (its share of the engine's bound)", entry: "model-stream.unpaced.totalMs", on: "ratio", max: 1.05 },
]

const targetLines = (results: Results): Array<string> => {
  const lines = ["## Targets\n", "| target | figure | measured | bound | met |", "|---|---|---:|---:|---|"]
  for (const target of TARGETS) {
    const names = Object.keys(results.entries).filter((name) => (typeof target.entry === "string" ? name === target.entry : target.entry.test(name)))
    const bound = target.min === undefined ? `≤ ${target.max}` : `${target.min}–${target.max}`
    const suffix = target.on === "ratio" ? "×" : ""
    if (names.length === 0) lines.push(`| ${target.label} | \`${String(target.entry)}\` | not measured | ${bound}${suffix} | |`)
    for (const name of names.sort((left, right) => left.localeCompare(right, "en", { numeric: true }))) {
      const figure = results.entries[name]!
      if (figure.unit === SKIPPED) {
        lines.push(`| ${target.label} | \`${name}\` | skipped | ${bound}${suffix} | |`)
        continue
      }
      const measured = target.on === "ratio" ? figure.ratio : figure.value
      if (measured === null) {
        lines.push(`| ${target.label} | \`${name}\` | ${format(figure.value)} ${figure.unit} | (reference) | |`)
        continue
      }
      const met = measured <= target.max && (target.min === undefined || measured >= target.min)
      // Three decimals near a bound, so that 1.055 against ≤ 1.05 does not read as 1.05.
      const shown = Math.abs(measured) < 10 ? measured.toFixed(3) : format(measured)
      lines.push(`| ${target.label} | \`${name}\` | ${shown}${suffix} | ${bound}${suffix} | ${met ? "yes" : "**no**"} |`)
    }
  }
  lines.push("")
  return lines
}

const writeReport = (results: Results): void => {
  const groups = new Map<string, Array<[string, Entry]>>()
  for (const [name, value] of Object.entries(results.entries).sort(([left], [right]) => left.localeCompare(right, "en", { numeric: true }))) {
    const group = name.split(".")[0] ?? name
    groups.set(group, [...(groups.get(group) ?? []), [name, value]])
  }
  const sections: Array<string> = [PREAMBLE]
  const whole = results.environment["run"] as
    | { at?: string; seconds?: number; loadAverageBefore?: Array<number>; loadAverageAfter?: Array<number>; benches?: Array<string>; node?: string; cpus?: number }
    | undefined
  if (whole !== undefined) {
    sections.push(
      `The last full \`pnpm bench\` (${(whole.benches ?? []).join(", ")}) ended ${whole.at ?? "?"} on Node ${whole.node ?? "?"}, ${whole.cpus ?? "?"} CPUs, ` +
        `and took **${whole.seconds ?? "?"} s** of wall time; load average ${(whole.loadAverageBefore ?? []).join(" / ")} before it and ` +
        `${(whole.loadAverageAfter ?? []).join(" / ")} after it (1 / 5 / 15 min; the machine is shared, so absolute times carry that load).\n`,
    )
  }
  sections.push(...targetLines(results))
  for (const [group, rows] of groups) {
    const environment = results.environment[group] as
      | { node?: string; loadAverage?: Array<number>; at?: string; cpus?: number; seconds?: number }
      | undefined
    sections.push(`## ${group}\n`)
    if (environment !== undefined) {
      sections.push(
        `Measured ${environment.at ?? "?"} on Node ${environment.node ?? "?"}, ${environment.cpus ?? "?"} CPUs, load average ${(environment.loadAverage ?? []).join(" / ")} (1 / 5 / 15 min) at the end of the bench` +
          `${environment.seconds === undefined ? "" : `, which took ${environment.seconds} s`}.\n`,
      )
    }
    sections.push("| figure | value | unit | baseline | ratio | what |", "|---|---:|---|---:|---:|---|")
    let previousNote: string | undefined
    for (const [name, value] of rows) {
      // A note repeated by the next rows (a family of figures) is printed once.
      const note = value.note === previousNote ? "〃" : (value.note ?? "").replaceAll("|", "\\|")
      previousNote = value.note
      const shown = value.unit === SKIPPED ? "—" : format(value.value)
      sections.push(
        `| \`${name.slice(group.length + 1)}\` | ${shown} | ${value.unit} | ${format(value.baseline)} | ${value.ratio === null ? "" : `${value.ratio.toFixed(2)}×`} | ${note} |`,
      )
    }
    sections.push("")
  }
  writeFileSync(reportFile, `${sections.join("\n").trimEnd()}\n`)
}

if (reportOnly) {
  writeReport(readResults())
  console.log(`rewrote ${relative(root, reportFile)} from ${relative(root, resultsFile)}`)
  process.exit(0)
}

let failed = false
const runStarted = performance.now()
const loadBefore = loadavg().map((load) => Math.round(load * 100) / 100)
const clock = (since: number): string => {
  const seconds = Math.round((performance.now() - since) / 1000)
  return `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, "0")}`
}
console.log("pnpm bench: building the packages from their sources (tsc -b --force) …")
const built = spawnSync("pnpm", ["exec", "tsc", "-b", "--force"], { cwd: root, stdio: ["ignore", "inherit", "inherit"] })
if (built.status !== 0) {
  console.error(`pnpm bench: the build failed (exit ${built.status ?? built.signal}); nothing was measured`)
  process.exit(1)
}
console.log(`pnpm bench: ${selected.length} bench${selected.length === 1 ? "" : "es"} (${selected.join(", ")}); load average ${loadBefore.join(" / ")}`)
for (const [index, name] of selected.entries()) {
  console.log(`[${index + 1}/${selected.length}] bench ${name}${profile ? " (profile)" : timeline ? " (timeline)" : ""} … (${clock(runStarted)} elapsed)`)
  const env: NodeJS.ProcessEnv = { ...process.env }
  if (profile) {
    const file = join(root, "bench", "profiles", `${name}-${new Date().toISOString().replaceAll(":", "-")}.cpuprofile`)
    env["MAKA_BENCH_PROFILE"] = file
  }
  if (timeline) env["MAKA_BENCH_TIMELINE"] = "1"
  // The bench's output is shown as it comes; its last line is the result object.
  const benchStarted = performance.now()
  const outcome = await new Promise<{ readonly status: number | null; readonly signal: string | null; readonly last: string }>((done) => {
    const child = spawn(process.execPath, ["--expose-gc", "--import", "tsx", join(benchDirectory, `${name}.bench.ts`)], {
      cwd: root,
      env,
      stdio: ["ignore", "pipe", "inherit"],
    })
    let last = ""
    createInterface({ input: child.stdout }).on("line", (line) => {
      if (last !== "") console.log(`  ${last}`)
      last = line
    })
    child.on("close", (status, signal) => done({ status, signal, last }))
  })
  const last = outcome.last
  console.log(`[${index + 1}/${selected.length}] bench ${name} ${outcome.status === 0 ? "done" : "failed"} in ${clock(benchStarted)} (${clock(runStarted)} elapsed)`)
  if (outcome.status !== 0) {
    if (last !== "") console.log(`  ${last}`)
    console.error(`bench ${name} failed (exit ${outcome.status ?? outcome.signal})`)
    failed = true
    continue
  }
  let printed: { entries?: Record<string, unknown>; environment?: unknown }
  try {
    printed = JSON.parse(last) as typeof printed
  } catch {
    printed = {}
  }
  const entries = Object.entries(printed.entries ?? {})
  if (printed.entries === undefined || entries.some(([, value]) => !isEntry(value))) {
    console.error(`bench ${name} printed no result object`)
    failed = true
    continue
  }
  if (diagnostic || entries.length === 0) continue
  const results = readResults()
  // The bench's figures replace all of its earlier ones, so none of them outlives the run that measured it.
  for (const key of Object.keys(results.entries)) if (key.startsWith(`${name}.`)) delete results.entries[key]
  for (const [key, value] of entries) results.entries[key] = value as Entry
  results.environment[name] = { ...(printed.environment as object), seconds: Math.round((performance.now() - benchStarted) / 1000) }
  writeResults(results)
  writeReport(results)
  for (const [key, value] of entries) {
    const compared = value as Entry
    if (compared.unit === SKIPPED) console.log(`  ${key}: skipped`)
    else console.log(`  ${key}: ${format(compared.value)} ${compared.unit}${compared.baseline === null ? "" : ` vs ${format(compared.baseline)} (${compared.ratio}×)`}`)
  }
}
const runSeconds = Math.round((performance.now() - runStarted) / 1000)
const loadAfter = loadavg().map((load) => Math.round(load * 100) / 100)
// A whole run (every bench, none failed) is recorded with its wall time and the machine's load around it.
if (!diagnostic && !failed && requested.length === 0) {
  const results = readResults()
  results.environment["run"] = {
    benches: selected,
    seconds: runSeconds,
    loadAverageBefore: loadBefore,
    loadAverageAfter: loadAfter,
    node: process.version,
    cpus: cpus().length,
    at: new Date().toISOString(),
  }
  writeResults(results)
  writeReport(results)
}
console.log(`pnpm bench: ${selected.length} bench${selected.length === 1 ? "" : "es"} in ${clock(runStarted)} (${runSeconds} s); load average now ${loadAfter.join(" / ")}`)
if (!diagnostic) console.log(`results in ${relative(root, resultsFile)} and ${relative(root, reportFile)}`)
process.exit(failed ? 1 : 0)
