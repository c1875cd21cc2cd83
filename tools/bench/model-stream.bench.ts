/**
 * Streaming through the model adapter alone (docs/architecture.md §12), against the fake
 * OpenAI-compatible server in its own process: `LanguageModel.stream` (normaliser, limits, replay
 * tracking, the limiter, the idle watchdog) against the same responses read with bare `fetch` +
 * `eventsource-parser` (each event's JSON parsed, as any client must), round-robin in one run. The
 * adapter's events are consumed a delivered array at a time (`Stream.runForEachArray`), as the engine
 * takes them (`Stream.toQueue` + `Queue.takeAll`), so a per-event effect of the consumer is not counted:
 *
 * - `unpaced`: a 1,000-delta answer written as fast as the server can;
 * - `paced1ms`: the same answer, one chunk per 1 ms; also the median delay from a delta's sending
 *   (stamped by the server) to its delivery, the bare read's being the transport's share;
 * - `toolLoop`: the ten short responses of a 10-step tool loop (nine `noop` calls, then a text answer).
 *
 * `MAKA_BENCH_PROFILE=<file>` (what `pnpm bench model-stream --profile` sets) runs only the adapter's
 * unpaced answer and tool loop under the CPU profiler instead, writes the `.cpuprofile` and prints
 * the top 15 self-time functions.
 */
import type { Prompt } from "@maka/facts"
import { Effect, Redacted, Stream } from "effect"
import { LanguageModel } from "@maka/model"
import { rawExchange, stampedDelays } from "./contenders.ts"
import { startFakeServer } from "./fake-server.ts"
import { cpuMs, emit, entry, type Entry, integer, median, profiled, round, topSelfTime } from "./lib.ts"

const DELTAS = 1_000
const STEPS = 10
const WARMUP = integer("MAKA_BENCH_STREAM_WARMUP", 20)
const ROUNDS = integer("MAKA_BENCH_STREAM_ROUNDS", 100)
const PACED_ROUNDS = integer("MAKA_BENCH_PACED_ROUNDS", 9)
const PROFILE = process.env["MAKA_BENCH_PROFILE"] ?? ""
const PROFILE_ROUNDS = integer("MAKA_BENCH_PROFILE_ROUNDS", 300)

const server = await startFakeServer()
const models = new Map<string, LanguageModel.LanguageModelShape>()
const modelOf = async (name: string): Promise<LanguageModel.LanguageModelShape> => {
  const known = models.get(name)
  if (known !== undefined) return known
  const made = await Effect.runPromise(
    LanguageModel.make({ kind: "openai-compatible", baseUrl: server.baseUrl, model: name, apiKey: Redacted.make("sk-bench") }),
  )
  models.set(name, made)
  return made
}

interface Timing {
  readonly totalMs: number
  /** CPU time of this process (user + system) over the run, in ms: less sensitive to a loaded machine. */
  readonly cpuMs: number
  /** Median over the deltas of (delivery − the server's send stamp), in ms; NaN without stamps. */
  readonly delayMs: number
}

// --- the 1,000-delta answer -------------------------------------------------------------------------

const answerRequest = (): Prompt.ModelRequest => ({
  prompt: [{ role: "user", content: "go" }],
  tools: [],
  providerOptions: {},
  maxOutputTokens: 4096,
})

const bareAnswer = async (model: string): Promise<Timing> => {
  const cpu = process.cpuUsage()
  const started = performance.now()
  const delays: Array<number> = []
  let deltas = 0
  const body = JSON.stringify({ model, messages: [{ role: "user", content: "go" }], stream: true })
  await rawExchange(`${server.baseUrl}/chat/completions`, body, (data) => {
    const content = (JSON.parse(data) as { choices?: Array<{ delta?: { content?: string } }> }).choices?.[0]?.delta?.content
    if (typeof content === "string") deltas += stampedDelays(content, process.hrtime.bigint(), delays)
  })
  if (deltas !== DELTAS) throw new Error(`the bare read saw ${deltas} deltas, not ${DELTAS}`)
  return { totalMs: performance.now() - started, cpuMs: cpuMs(cpu), delayMs: median(delays) }
}

const adapterAnswer = async (model: string): Promise<Timing> => {
  const language = await modelOf(model)
  const cpu = process.cpuUsage()
  const started = performance.now()
  const delays: Array<number> = []
  let deltas = 0
  await Effect.runPromise(
    Stream.runForEachArray(language.stream(answerRequest()), (events) =>
      Effect.sync(() => {
        const now = process.hrtime.bigint()
        for (const event of events) if (event.kind === "part_delta") deltas += stampedDelays(event.text, now, delays)
      }),
    ),
  )
  if (deltas !== DELTAS) throw new Error(`the adapter delivered ${deltas} deltas, not ${DELTAS}`)
  return { totalMs: performance.now() - started, cpuMs: cpuMs(cpu), delayMs: median(delays) }
}

// --- the 10-step tool loop --------------------------------------------------------------------------

const LOOP_MODEL = `loop-${STEPS}`

/** The prompt of step `step` (0-based): the user message, then `step` calls of `noop` with their results. */
const loopPrompt = (step: number): Prompt.Prompt => [
  { role: "user", content: "Call noop until told otherwise." },
  ...Array.from({ length: step }, (_, index): Prompt.Prompt => [
    {
      role: "assistant",
      parts: [{ kind: "tool_call", toolCallId: `call_1_${index}`, toolName: "noop", input: { step: index }, providerExecuted: false }],
    },
    { role: "tool", results: [{ toolCallId: `call_1_${index}`, toolName: "noop", output: { type: "text", value: "ok" } }] },
  ]).flat(),
]
const loopTools: ReadonlyArray<Prompt.ToolDefinition> = [
  { name: "noop", description: "Does nothing.", inputSchema: { type: "object", properties: { step: { type: "number" } } } },
]
const loopRequests = Array.from({ length: STEPS }, (_, step): Prompt.ModelRequest => ({
  prompt: loopPrompt(step),
  tools: loopTools,
  providerOptions: {},
  maxOutputTokens: 4096,
}))

/** The same conversation as OpenAI chat-completions messages, for the bare read. */
const loopBodies = Array.from({ length: STEPS }, (_, step) =>
  JSON.stringify({
    model: LOOP_MODEL,
    stream: true,
    tools: [{ type: "function", function: { name: "noop", description: "Does nothing.", parameters: loopTools[0]!.inputSchema } }],
    messages: [
      { role: "user", content: "Call noop until told otherwise." },
      ...Array.from({ length: step }, (_, index) => [
        { role: "assistant", content: null, tool_calls: [{ id: `call_1_${index}`, type: "function", function: { name: "noop", arguments: `{"step":${index}}` } }] },
        { role: "tool", tool_call_id: `call_1_${index}`, content: "ok" },
      ]).flat(),
    ],
  }),
)

const bareLoop = async (): Promise<Timing> => {
  const cpu = process.cpuUsage()
  const started = performance.now()
  let calls = 0
  for (const body of loopBodies) calls += (await rawExchange(`${server.baseUrl}/chat/completions`, body)).calls.length
  if (calls !== STEPS - 1) throw new Error(`the bare loop saw ${calls} calls, not ${STEPS - 1}`)
  return { totalMs: performance.now() - started, cpuMs: cpuMs(cpu), delayMs: Number.NaN }
}

const adapterLoop = async (): Promise<Timing> => {
  const language = await modelOf(LOOP_MODEL)
  const cpu = process.cpuUsage()
  const started = performance.now()
  let calls = 0
  for (const request of loopRequests) {
    await Effect.runPromise(
      Stream.runForEachArray(language.stream(request), (events) =>
        Effect.sync(() => {
          for (const event of events) if (event.kind === "tool_call") calls++
        }),
      ),
    )
  }
  if (calls !== STEPS - 1) throw new Error(`the adapter loop saw ${calls} calls, not ${STEPS - 1}`)
  return { totalMs: performance.now() - started, cpuMs: cpuMs(cpu), delayMs: Number.NaN }
}

// --- runs -------------------------------------------------------------------------------------------

if (PROFILE !== "") {
  for (let index = 0; index < WARMUP; index++) {
    await adapterAnswer(`text-${DELTAS}`)
    await adapterLoop()
  }
  const started = performance.now()
  const profile = await profiled(PROFILE, async () => {
    for (let index = 0; index < PROFILE_ROUNDS; index++) {
      await adapterAnswer(`text-${DELTAS}`)
      await adapterLoop()
    }
  })
  console.log(
    `profiled ${PROFILE_ROUNDS} × (a ${DELTAS}-delta answer + a ${STEPS}-step loop) through the adapter, ` +
      `${round((performance.now() - started) / PROFILE_ROUNDS)} ms per round under the profiler; wrote ${PROFILE}`,
  )
  for (const line of topSelfTime(profile)) console.log(line)
  await server.close()
  emit({})
  process.exit(0)
}

/** Round-robin: the order alternates each round, so drift on a noisy machine hits both sides alike. */
const compare = async (bare: () => Promise<Timing>, adapter: () => Promise<Timing>, warmup: number, rounds: number) => {
  const bareTimes: Array<Timing> = []
  const adapterTimes: Array<Timing> = []
  for (let index = -warmup; index < rounds; index++) {
    const bareFirst = index % 2 === 0
    const first = bareFirst ? await bare() : await adapter()
    const second = bareFirst ? await adapter() : await bare()
    if (index < 0) continue
    bareTimes.push(bareFirst ? first : second)
    adapterTimes.push(bareFirst ? second : first)
  }
  const summary = (times: ReadonlyArray<Timing>): Timing => ({
    totalMs: median(times.map((time) => time.totalMs)),
    cpuMs: median(times.map((time) => time.cpuMs)),
    delayMs: median(times.map((time) => time.delayMs)),
  })
  return { bare: summary(bareTimes), adapter: summary(adapterTimes) }
}

const entries: Record<string, Entry> = {}
const BASELINE = "bare fetch + eventsource-parser + JSON.parse per event, same server, same run, interleaved"

for (const [label, model, warmup, rounds] of [
  ["unpaced", `text-${DELTAS}`, WARMUP, ROUNDS],
  ["paced1ms", `text-${DELTAS}-paced-1`, 1, PACED_ROUNDS],
] as const) {
  const result = await compare(() => bareAnswer(model), () => adapterAnswer(model), warmup, rounds)
  console.log(
    `${DELTAS}-delta answer, ${label}: bare ${round(result.bare.totalMs, 2)} ms, adapter ${round(result.adapter.totalMs, 2)} ms ` +
      `(${round(result.adapter.totalMs / result.bare.totalMs)}×), CPU ${round(result.bare.cpuMs, 2)} → ${round(result.adapter.cpuMs, 2)} ms ` +
      `(${round(result.adapter.cpuMs / result.bare.cpuMs)}×); send→delivery ${round(result.bare.delayMs, 3)} → ${round(result.adapter.delayMs, 3)} ms`,
  )
  const how = label === "unpaced" ? "written as fast as the server can" : "one chunk per 1 ms"
  entries[`model-stream.${label}.totalMs`] = entry(
    result.adapter.totalMs,
    "ms",
    result.bare.totalMs,
    `a ${DELTAS}-delta answer (${how}) read through LanguageModel.stream vs ${BASELINE}; medians of ${rounds} rounds`,
  )
  entries[`model-stream.${label}.cpuMs`] = entry(
    result.adapter.cpuMs,
    "ms",
    result.bare.cpuMs,
    "CPU time of the reading process (user + system) for the same answer, adapter vs the bare read; medians",
  )
  entries[`model-stream.${label}.deliveryDelayMs`] = entry(
    result.adapter.delayMs,
    "ms",
    result.bare.delayMs,
    "median per delta of (delivery by the adapter's stream − the server's send stamp) vs the same for the bare read (the transport's share)",
  )
}

const loop = await compare(bareLoop, adapterLoop, WARMUP, ROUNDS)
console.log(
  `${STEPS}-step tool loop: bare ${round(loop.bare.totalMs, 2)} ms, adapter ${round(loop.adapter.totalMs, 2)} ms ` +
    `(${round(loop.adapter.totalMs / loop.bare.totalMs)}×), ${round(loop.adapter.totalMs / STEPS)} ms per step; ` +
    `CPU ${round(loop.bare.cpuMs, 2)} → ${round(loop.adapter.cpuMs, 2)} ms (${round(loop.adapter.cpuMs / loop.bare.cpuMs)}×)`,
)
entries["model-stream.toolLoop.cpuMsPerStep"] = entry(
  loop.adapter.cpuMs / STEPS,
  "ms",
  loop.bare.cpuMs / STEPS,
  "CPU time of the reading process per step of the same loop, adapter vs the bare read; medians",
)
entries["model-stream.toolLoop.msPerStep"] = entry(
  loop.adapter.totalMs / STEPS,
  "ms",
  loop.bare.totalMs / STEPS,
  `the ${STEPS} short responses of a ${STEPS}-step tool loop (nine noop calls, then a text answer) read through LanguageModel.stream vs ${BASELINE}; medians of ${ROUNDS} rounds`,
)

await server.close()
emit(entries)
