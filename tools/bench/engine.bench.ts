/**
 * The engine (DESIGN.md §12), through the Promise facade on a SQLite file with `synchronous=FULL`:
 * (a) a 50-step tool loop, the engine's time per step above the testkit server's own handling time
 * (request received → response ended, from its progress reports); (b) a 1,000-delta streamed answer
 * through the engine (every delta durable as `model_observed` before the caller sees it, read to the
 * terminal through `run.events()`) against the same bytes read with bare `fetch` + `eventsource-parser`,
 * unpaced (the server writes as fast as it can) and paced (1 ms between chunks, still faster than a
 * real model). Every figure is a median; ratios are against a baseline measured in the same run.
 */
import { Effect, Schema } from "effect"
import { createParser } from "eventsource-parser"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { createEngine, type Facade } from "@maka/engine"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"

const STEPS = 50
const LOOP_WARMUP = 2
const LOOP_ROUNDS = Number(process.env["MAKA_BENCH_LOOP_ROUNDS"] ?? 10)
const DELTAS = 1_000
const STREAM_WARMUP = 5
const STREAM_ROUNDS = Number(process.env["MAKA_BENCH_STREAM_ROUNDS"] ?? 30)
const PACED_ROUNDS = Number(process.env["MAKA_BENCH_PACED_ROUNDS"] ?? 6)
const PACE_MS = 1

const median = (values: ReadonlyArray<number>): number => {
  const sorted = [...values].sort((left, right) => left - right)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? (sorted[middle] ?? 0) : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2
}
const round3 = (value: number): number => Math.round(value * 1000) / 1000

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "maka-bench-engine-"))
const workspace = path.join(directory, "workspace")
fs.mkdirSync(workspace)

/** The server's own handling time: from a request's arrival to the end of its response. */
let serverMs = 0
const arrivals = new Map<number, number>()
const server = await ScriptedServer.start({
  onProgress: (progress) => {
    if (progress.type === "request") arrivals.set(progress.request.index, performance.now())
    if (progress.type === "response") serverMs += performance.now() - (arrivals.get(progress.exchange.request.index) ?? performance.now())
  },
})
const engine = await createEngine({ database: path.join(directory, "events.sqlite"), synchronous: "FULL" })

const noop = Tool.make({
  name: "noop",
  description: "Does nothing.",
  input: Schema.Struct({ step: Schema.Number }),
  semantics: "parallel",
  execute: () => Effect.succeed(Tool.text("ok")),
})
const tools = ToolCatalog.make([noop])

let sessions = 0
const start = (message: string, withTools: boolean): Promise<Facade.Run> =>
  engine.start({
    sessionId: `bench-${++sessions}`,
    provider: { kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "bench" },
    message,
    workspace,
    maxSteps: STEPS,
    ...(withTools ? { tools } : {}),
  })

// (a) The tool loop: 49 steps that call `noop`, then a text answer.
interface LoopRound {
  readonly wallMs: number
  readonly serverMs: number
  readonly events: number
}

const loopRound = async (): Promise<LoopRound> => {
  const first = server.requests().length
  for (let step = 0; step < STEPS - 1; step++) {
    server.push(Respond.sse(OpenAiSse.response({ toolCalls: [{ id: `call-${step}`, name: "noop", arguments: [`{"step":${step}}`] }] })))
  }
  server.push(Respond.sse(OpenAiSse.response({ text: ["done"] })))
  const serverBefore = serverMs
  const started = performance.now()
  const run = await start("Call noop until told otherwise.", true)
  const result = await run.wait()
  const wallMs = performance.now() - started
  await server.exchange(first + STEPS - 1)
  if (result.outcome.kind !== "completed") throw new Error(`tool loop ended ${JSON.stringify(result.outcome)}`)
  if (server.requests().length !== first + STEPS) throw new Error(`expected ${STEPS} requests`)
  const events = await engine.events(run.invocation.sessionId)
  return { wallMs, serverMs: serverMs - serverBefore, events: events.length }
}

for (let round = 0; round < LOOP_WARMUP; round++) await loopRound()
const loops: Array<LoopRound> = []
for (let round = 0; round < LOOP_ROUNDS; round++) loops.push(await loopRound())
const loopWallMs = median(loops.map((loop) => loop.wallMs))
const loopServerMs = median(loops.map((loop) => loop.serverMs))
const overheadPerStepMs = median(loops.map((loop) => (loop.wallMs - loop.serverMs) / STEPS))
console.log(
  `tool loop: ${round3(loopWallMs)} ms wall, ${round3(loopServerMs)} ms in the server, ${round3(overheadPerStepMs)} ms engine time per step`,
)

// (b) Streaming: the same 1,000-delta response through the engine and through bare fetch.
const pieces = Array.from({ length: DELTAS }, (_, index) => `token${index} `)
const expectedText = pieces.join("")
const answer = OpenAiSse.response({ text: pieces })
const paced = Respond.withDelay(answer, PACE_MS)
const body = JSON.stringify({ model: "bench", messages: [{ role: "user", content: "go" }], stream: true })

interface Timing {
  /** From the call to the first text delta the reader sees. */
  readonly firstMs: number
  /** From the first text delta to the last one: streaming itself. */
  readonly streamMs: number
  /** From the call to the end (for the engine, the durable terminal). */
  readonly totalMs: number
}

/** Bare fetch + eventsource-parser + JSON.parse per event. */
const baseline = async (): Promise<Timing> => {
  const started = performance.now()
  let first = 0
  let last = 0
  let deltas = 0
  const response = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  })
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  const parser = createParser({
    onEvent: (event) => {
      if (event.data === "[DONE]") return
      const chunk = JSON.parse(event.data)
      if (typeof chunk.choices?.[0]?.delta?.content === "string" && chunk.choices[0].delta.content !== "") {
        deltas++
        last = performance.now()
        if (first === 0) first = last
      }
    },
  })
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    parser.feed(decoder.decode(value, { stream: true }))
  }
  if (deltas !== DELTAS) throw new Error(`expected ${DELTAS} deltas, read ${deltas}`)
  return { firstMs: first - started, streamMs: last - first, totalMs: performance.now() - started }
}

/** Through the engine: start, read every committed event to the terminal, check the text. */
let observations = 0
const throughEngine = async (): Promise<Timing> => {
  const started = performance.now()
  let first = 0
  let last = 0
  let text = ""
  const run = await start("Answer at length.", false)
  for await (const stored of run.events()) {
    const fact = stored.event.fact
    if (fact.kind !== "model_observed") continue
    observations++
    if (fact.event.kind !== "part_delta") continue
    text += fact.event.text
    last = performance.now()
    if (first === 0) first = last
  }
  const result = await run.wait()
  const totalMs = performance.now() - started
  if (result.outcome.kind !== "completed") throw new Error(`stream ended ${JSON.stringify(result.outcome)}`)
  if (text !== expectedText) throw new Error("the streamed text differs from the response")
  return { firstMs: first - started, streamMs: last - first, totalMs }
}

const summary = (timings: ReadonlyArray<Timing>) => ({
  firstDeltaMs: round3(median(timings.map((timing) => timing.firstMs))),
  streamMs: round3(median(timings.map((timing) => timing.streamMs))),
  totalMs: round3(median(timings.map((timing) => timing.totalMs))),
})

const compare = async (steps: ReadonlyArray<Respond.SseStep>, warmup: number, rounds: number) => {
  const baselineTimes: Array<Timing> = []
  const engineTimes: Array<Timing> = []
  observations = 0
  for (let round = 0; round < warmup + rounds; round++) {
    server.push(Respond.sse(steps), Respond.sse(steps))
    // Alternate the order so drift on a noisy machine hits both sides alike.
    const baselineFirst = round % 2 === 0
    const firstTiming = baselineFirst ? await baseline() : await throughEngine()
    const secondTiming = baselineFirst ? await throughEngine() : await baseline()
    if (round < warmup) continue
    baselineTimes.push(baselineFirst ? firstTiming : secondTiming)
    engineTimes.push(baselineFirst ? secondTiming : firstTiming)
  }
  const bare = summary(baselineTimes)
  const through = summary(engineTimes)
  return {
    rounds,
    baseline: bare,
    engine: through,
    /** The whole exchange (admission, request, stream, completion, terminal) against a bare read. */
    totalRatio: round3(through.totalMs / bare.totalMs),
    /** First to last delta: what streaming itself costs once the answer flows. */
    streamRatio: round3(through.streamMs / bare.streamMs),
    overheadPerDeltaUs: round3(((through.streamMs - bare.streamMs) * 1000) / DELTAS),
    observationsPerStream: round3(observations / (warmup + rounds)),
  }
}

const report = (name: string, result: Awaited<ReturnType<typeof compare>>) =>
  console.log(
    `${name}: total ${result.baseline.totalMs} → ${result.engine.totalMs} ms (×${result.totalRatio}), ` +
      `first→last delta ${result.baseline.streamMs} → ${result.engine.streamMs} ms (×${result.streamRatio}), ` +
      `${result.observationsPerStream} observations per stream`,
  )
const unpaced = await compare(answer, STREAM_WARMUP, STREAM_ROUNDS)
report("stream, unpaced", unpaced)
const pacedResult = await compare(paced, 1, PACED_ROUNDS)
report(`stream, paced ${PACE_MS} ms`, pacedResult)

await engine.close()
await server.close()
fs.rmSync(directory, { recursive: true, force: true })

console.log(
  JSON.stringify({
    engine: {
      durability: "SQLite WAL, synchronous=FULL, model_observed committed before it is shown",
      toolLoop: {
        steps: STEPS,
        rounds: LOOP_ROUNDS,
        wallMedianMs: round3(loopWallMs),
        serverMedianMs: round3(loopServerMs),
        overheadPerStepMs: round3(overheadPerStepMs),
        ratio: round3(loopWallMs / loopServerMs),
        eventsPerStep: round3(median(loops.map((loop) => loop.events)) / STEPS),
      },
      stream: {
        deltas: DELTAS,
        baseline: "fetch + eventsource-parser + JSON.parse per event",
        unpaced,
        paced: { paceMs: PACE_MS, ...pacedResult },
      },
      node: process.version,
    },
  }),
)
