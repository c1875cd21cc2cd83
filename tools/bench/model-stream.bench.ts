/**
 * Streaming through the model adapter (docs/architecture.md §12): a 1,000-delta OpenAI-compatible response from
 * the testkit server, read through `LanguageModel.stream` (normaliser, limits, replay tracking, the
 * limiter and the idle watchdog) against the same bytes read with bare `fetch` + `eventsource-parser`
 * (each event's JSON parsed, as any client must). Reports medians and the ratio adapter / baseline.
 */
import { Effect, Redacted, Stream } from "effect"
import { createParser } from "eventsource-parser"
import { LanguageModel } from "@maka/model"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { emit, entry, integer, median, round } from "./lib.ts"

const DELTAS = 1_000
const WARMUP = integer("MAKA_BENCH_STREAM_WARMUP", 30)
const ROUNDS = integer("MAKA_BENCH_STREAM_ROUNDS", 200)


const pieces = Array.from({ length: DELTAS }, (_, index) => `token${index} `)
const server = await ScriptedServer.start({
  script: [{ respond: Respond.sse(OpenAiSse.response({ text: pieces })), repeat: true }],
})
const url = `${server.url}/v1/chat/completions`
const body = JSON.stringify({ model: "bench", messages: [{ role: "user", content: "go" }], stream: true })

/** Bare fetch + eventsource-parser: the number of text deltas read. */
const baseline = async (): Promise<number> => {
  const response = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body })
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  let deltas = 0
  const parser = createParser({
    onEvent: (event) => {
      if (event.data === "[DONE]") return
      const chunk = JSON.parse(event.data)
      if (typeof chunk.choices?.[0]?.delta?.content === "string" && chunk.choices[0].delta.content !== "") deltas++
    },
  })
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    parser.feed(decoder.decode(value, { stream: true }))
  }
  return deltas
}

const model = await Effect.runPromise(
  LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "bench", apiKey: Redacted.make("sk-bench") }),
)
const request = { prompt: [{ role: "user" as const, content: "go" }], tools: [], providerOptions: {}, maxOutputTokens: 4096 }

/** The adapter: the number of `part_delta` events. */
const adapter = (): Promise<number> =>
  Effect.runPromise(
    Stream.runFold(model.stream(request), () => 0, (count, event) => (event.kind === "part_delta" ? count + 1 : count)),
  )

const time = async (run: () => Promise<number>): Promise<number> => {
  const start = performance.now()
  const deltas = await run()
  const elapsed = performance.now() - start
  if (deltas !== DELTAS) throw new Error(`expected ${DELTAS} deltas, read ${deltas}`)
  return elapsed
}

for (let index = 0; index < WARMUP; index++) {
  await time(baseline)
  await time(adapter)
}
const baselineTimes: Array<number> = []
const adapterTimes: Array<number> = []
for (let index = 0; index < ROUNDS; index++) {
  // Alternate the order so drift on a noisy machine hits both sides alike.
  if (index % 2 === 0) {
    baselineTimes.push(await time(baseline))
    adapterTimes.push(await time(adapter))
  } else {
    adapterTimes.push(await time(adapter))
    baselineTimes.push(await time(baseline))
  }
}
await server.close()

const baselineMs = median(baselineTimes)
const adapterMs = median(adapterTimes)
console.log(`baseline ${round(baselineMs)} ms, adapter ${round(adapterMs)} ms per ${DELTAS}-delta stream`)
emit({
  "model-stream.streamMs.vsBareFetch": entry(
    adapterMs,
    "ms",
    baselineMs,
    `a ${DELTAS}-delta answer read through LanguageModel.stream vs bare fetch + eventsource-parser + JSON.parse per event; medians of ${ROUNDS} interleaved rounds`,
  ),
})
