/**
 * Micro-benchmarks of the facts on an engine step's hot path: canonical JSON of typical events,
 * checked writes and their verification at the store, the request digest of a growing history, and
 * the decoding of stored rows. Run with
 * `node --conditions=@maka/source --import tsx packages/facts/test/hot-path.bench.ts` (CPU µs per operation, the least and the median of 7 rounds).
 */
import { Canonical, Codec, Digest, EventWrite, type Prompt } from "@maka/facts"
import { FactBuilders } from "@maka/testkit"
import { Result } from "effect"

const invocation = FactBuilders.invocation()

const completed = {
  id: FactBuilders.eventId(1),
  recordedAt: 1_700_000_000_000,
  invocation,
  fact: {
    kind: "model_completed" as const,
    stepId: "step-7",
    output: FactBuilders.toolCallStep(
      [
        { id: "call-1", name: "read_file", input: { path: "src/index.ts", range: { start: 1, end: 120 } } },
        { id: "call-2", name: "grep", input: { pattern: "export const", paths: ["src", "test"], caseSensitive: false } },
      ],
      "I will read the entry point and search for the exports before changing anything. ".repeat(3),
    ),
  },
}

const settledOutput = FactBuilders.jsonOutput({
  path: "src/index.ts",
  lines: Array.from({ length: 40 }, (_, index) => `line ${index}: export const value${index} = ${index} // é 世界`),
  truncated: false,
})

const message = (index: number): Prompt.PromptMessage => {
  switch (index % 3) {
    case 0:
      return { role: "user", content: `Please look at file number ${index} and tell me what it does. é 世界` }
    case 1:
      return {
        role: "assistant",
        parts: [
          { kind: "text", text: `Reading file ${index}.` },
          { kind: "tool_call", toolCallId: `call-${index}`, toolName: "read_file", input: { path: `src/file-${index}.ts` }, providerExecuted: false },
        ],
      }
    default:
      return {
        role: "tool",
        results: [
          {
            toolCallId: `call-${index - 1}`,
            toolName: "read_file",
            output: { type: "json", value: { path: `src/file-${index}.ts`, text: "export const x = 1\n".repeat(20) } },
          },
        ],
      }
  }
}

const tools: ReadonlyArray<Prompt.ToolDefinition> = ["read_file", "grep", "write_file", "run"].map((name) => ({
  name,
  description: `The ${name} tool.`,
  inputSchema: { type: "object", properties: { path: { type: "string" }, text: { type: "string" } }, required: ["path"] },
}))

const request = (messages: ReadonlyArray<Prompt.PromptMessage>) => ({
  prompt: [{ role: "system" as const, content: "You are a careful assistant." }, ...messages],
  tools,
  providerOptions: { openai: { store: false } },
  maxOutputTokens: 8_000,
})

const fresh = (count: number) => Array.from({ length: count }, (_, index) => message(index))
// `seal` is looked up so the same file also measures sources from before it existed.
const sealed = (Canonical as { readonly seal?: <A>(value: A) => A }).seal ?? (<A>(value: A): A => value)
const reused = fresh(100).map((item) => sealed(item))

const completedWrite = Result.getOrThrow(EventWrite.plain(completed))
const settledWrite = Result.getOrThrow(
  EventWrite.toolSuccess({ id: FactBuilders.eventId(2), recordedAt: 1, invocation, operationId: "step-7:call-1", output: settledOutput }),
)
const handBuilt = { event: JSON.parse(completedWrite.json) as typeof completedWrite.event, json: completedWrite.json }
const settledEvent: unknown = JSON.parse(settledWrite.json)

const cases: ReadonlyArray<readonly [string, () => unknown]> = [
  ["Canonical.stringify(model_completed event)", () => Canonical.stringify(completed)],
  ["Canonical.stringify(tool_settled event)", () => Canonical.stringify(settledEvent)],
  ["EventWrite.plain(model_completed)", () => EventWrite.plain(completed)],
  ["EventWrite.toolSuccess(40-line JSON output)", () =>
    EventWrite.toolSuccess({ id: FactBuilders.eventId(2), recordedAt: 1, invocation, operationId: "step-7:call-1", output: settledOutput })],
  ["EventWrite.verify(constructed write)", () => EventWrite.verify(completedWrite)],
  ["EventWrite.verify(hand-built write)", () => EventWrite.verify(handBuilt)],
  ["Codec.decodeEventJson(model_completed row)", () => Codec.decodeEventJson(completedWrite.json)],
  ["Digest.modelInput(100 messages, fresh objects)", () => Digest.modelInput(request(fresh(100)))],
  ["Digest.modelInput(100 messages, reused sealed objects)", () => Digest.modelInput(request(reused))],
  ["Digest.LogPrefixHash.update(model_completed row)", (() => {
    const hash = Digest.LogPrefixHash.start({ kind: "session", id: "s" })
    let sequence = 0
    return () => hash.update((sequence += 1), completedWrite.json)
  })()],
]

const measure = (run: () => unknown): number => {
  let iterations = 1
  for (;;) {
    const started = process.cpuUsage()
    for (let index = 0; index < iterations; index += 1) run()
    const used = process.cpuUsage(started)
    const elapsed = (used.user + used.system) / 1000
    if (elapsed > 100) return (elapsed * 1000) / iterations
    iterations *= 2
  }
}

const only = process.argv[2]
for (const [name, run] of cases) {
  if (only !== undefined && !name.includes(only)) continue
  const rounds = Array.from({ length: 7 }, () => measure(run)).sort((left, right) => left - right)
  console.log(`${rounds[0]!.toFixed(2).padStart(9)} ${rounds[3]!.toFixed(2).padStart(9)} µs  ${name}`)
}
