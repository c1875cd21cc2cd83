/**
 * The program a new user writes after installing the packed tarballs (tools/consumer-test/run.mjs
 * copies it into a project outside the repository, type checks it under strict NodeNext and runs
 * it). One turn through `createEngine` against the testkit's scripted server: the model calls two
 * tools in one step (one with a zod input, one that throws an `Error`), reads both outcomes in its
 * next request and answers; the run sets `maxOutputTokens` and the answer is read through
 * `run.text()`. Prints one line per check and exits 1 when any fails.
 *
 * It is `.mts` so that the repository's own type check (tsconfig.test.json, which takes the `.ts`
 * files under tools) leaves it out: it imports zod, which only the consumer project installs.
 *
 * To add a case: a tool to `tools`, the model's turn to `script`, a run option to `start`, and
 * what must hold to `checks`.
 */
import { createEngine } from "@maka/engine"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Tool, ToolCatalog, Workspace } from "@maka/tools"
import { Effect, Schema } from "effect"
import { z } from "zod"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

// ---- Declarations ------------------------------------------------------------------------------

// A library built on maka emits declarations (the project's tsconfig sets `declaration`): this
// inferred type names the tools' error type, which a declaration can only reach through a path the
// package exports (TS2742/TS2883 otherwise). Built, never run.
export const openWorkspace = Workspace.open(".")

// ---- Tools -------------------------------------------------------------------------------------

const forecast = Tool.make({
  name: "forecast",
  description: "Tomorrow's weather in a city.",
  semantics: "parallel",
  input: Schema.Struct({ city: Schema.String }),
  execute: ({ city }) => Effect.succeed(Tool.text(`${city.toUpperCase()}: sunny, 21 °C`)),
})

// The same kind of tool written with zod, as a team that already uses zod writes it.
const tides = Tool.make({
  name: "tides",
  description: "Tomorrow's high tides in a harbour.",
  semantics: "parallel",
  input: z.strictObject({ harbour: z.string().min(1), count: z.number().int().min(1).max(4).default(2) }),
  execute: async ({ harbour, count }) => Tool.text(`${harbour}: ${count} high tides, 06:12 and 18:40`),
})

// A tool that fails the way every TypeScript function fails: it throws.
const STATION_ERROR = "the wind station at Cabo da Roca is offline"
const wind = Tool.make({
  name: "wind",
  description: "Tomorrow's wind at a coastal station.",
  semantics: "parallel",
  input: z.strictObject({ station: z.string() }),
  execute: async (): Promise<never> => {
    throw new Error(STATION_ERROR)
  },
})

const tools = [forecast, tides, wind]

// ---- The model's turn --------------------------------------------------------------------------

const ANSWER = ["Tomorrow in Lisbon: ", "sunny, 21 °C, ", "high tides at 06:12 and 18:40."]
const MAX_OUTPUT_TOKENS = 777

const script = [
  Respond.sse(
    OpenAiSse.response({
      toolCalls: [
        { id: "call-1", name: "forecast", arguments: ['{"city":', '"Lisbon"}'] },
        { id: "call-2", name: "tides", arguments: ['{"harbour":"Cascais"}'] },
        { id: "call-3", name: "wind", arguments: ['{"station":"Cabo da Roca"}'] },
      ],
    }),
  ),
  Respond.sse(OpenAiSse.response({ text: ANSWER })),
]

// ---- The run -----------------------------------------------------------------------------------

const folder = fs.mkdtempSync(path.join(os.tmpdir(), "maka-consumer-"))
const workspace = path.join(folder, "workspace")
fs.mkdirSync(workspace)

const checks: Array<readonly [name: string, passed: boolean, detail?: string]> = []
const check = (name: string, passed: boolean, detail?: unknown): void => {
  checks.push(detail === undefined || passed ? [name, passed] : [name, passed, JSON.stringify(detail)])
}

const server = await ScriptedServer.start({ script })
const engine = await createEngine({ database: path.join(folder, "events.sqlite") })
try {
  const run = await engine.start({
    sessionId: "consumer-session",
    provider: { kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "scripted" },
    message: "What is the weather in Lisbon tomorrow?",
    tools,
    workspace,
    maxOutputTokens: MAX_OUTPUT_TOKENS,
  })

  const readText = async (): Promise<Array<string>> => {
    const deltas: Array<string> = []
    for await (const delta of run.text()) deltas.push(delta)
    return deltas
  }
  const readKinds = async (): Promise<Array<string>> => {
    const kinds: Array<string> = []
    for await (const { event } of run.events()) kinds.push(event.fact.kind)
    return kinds
  }
  const [deltas, kinds] = await Promise.all([readText(), readKinds()])
  const streamed = deltas.join("")
  const { outcome } = await run.wait()
  const stored = await engine.events("consumer-session")
  const facts = stored.map(({ event }) => event.fact)

  // ---- Checks ----------------------------------------------------------------------------------

  check("the run completes", outcome.kind === "completed", outcome)
  check("events() ends with the terminal fact", kinds.at(-1) === "invocation_ended", kinds)
  const dispatched = (name: string) =>
    facts.find((fact) => fact.kind === "tool_dispatched" && fact.name === name)
  const settledOf = (name: string) => {
    const operation = dispatched(name)
    return operation?.kind === "tool_dispatched"
      ? facts.find((fact) => fact.kind === "tool_settled" && fact.operationId === operation.operationId)
      : undefined
  }
  const forecastCall = dispatched("forecast")
  check(
    "the Effect Schema tool is dispatched with the decoded input",
    forecastCall?.kind === "tool_dispatched" && JSON.stringify(forecastCall.input) === JSON.stringify({ city: "Lisbon" }),
    forecastCall,
  )
  const forecastSettled = settledOf("forecast")
  check(
    "the Effect Schema tool settles successfully",
    forecastSettled?.kind === "tool_settled" && forecastSettled.outcome.kind === "succeeded",
    forecastSettled,
  )
  const tidesSettled = settledOf("tides")
  check(
    "the zod tool settles successfully",
    tidesSettled?.kind === "tool_settled" && tidesSettled.outcome.kind === "succeeded",
    tidesSettled,
  )
  const windSettled = settledOf("wind")
  check(
    "the thrown Error settles as a failure with its message",
    windSettled?.kind === "tool_settled" && windSettled.outcome.kind === "failed" &&
      windSettled.outcome.message === STATION_ERROR,
    windSettled,
  )

  const first = server.requests()[0]
  const firstJson = JSON.stringify(first?.json ?? null)
  check(
    "the first request advertises each tool's JSON Schema (the zod one derived from zod)",
    firstJson.includes('"forecast"') && firstJson.includes('"city"') && firstJson.includes('"tides"') &&
      firstJson.includes('"harbour"') && firstJson.includes('"wind"') && firstJson.includes('"station"'),
    firstJson.slice(0, 600),
  )
  const limits = (request: typeof first) => {
    const body = request?.json
    if (typeof body !== "object" || body === null) return undefined
    const record = body as Record<string, unknown>
    return { max_tokens: record["max_tokens"], max_completion_tokens: record["max_completion_tokens"] }
  }
  check(
    "every request carries maxOutputTokens as the output limit field (max_tokens on a local server)",
    server.requests().length > 0 &&
      server.requests().every((request) => {
        const limit = limits(request)
        return limit?.max_tokens === MAX_OUTPUT_TOKENS && limit.max_completion_tokens === undefined
      }),
    server.requests().map(limits),
  )
  const second = server.requests()[1]?.body ?? ""
  check("the second request carries the Effect Schema tool's result", second.includes("LISBON: sunny, 21 °C"), second.slice(0, 600))
  check("the second request carries the zod tool's result (its default applied)", second.includes("Cascais: 2 high tides"), second.slice(0, 600))
  check("the model reads the thrown error's message in the second request", second.includes(STATION_ERROR), second.slice(0, 600))
  check("run.text() streams the answer's text", streamed === ANSWER.join(""), deltas)
  check("the model was called exactly twice", server.requests().length === 2, server.requests().length)
} catch (error) {
  check("the run starts and ends without throwing", false, error instanceof Error ? `${error.name}: ${error.message}` : error)
} finally {
  await engine.close()
  await server.close()
  fs.rmSync(folder, { recursive: true, force: true })
}

// The types are real: a wrong option does not compile (an `any` would make this directive unused).
// @ts-expect-error sessionId is a string
void (() => engine.start({ sessionId: 1 }))

for (const [name, passed, detail] of checks) {
  console.log(`${passed ? "ok    " : "FAILED"}  ${name}${detail === undefined ? "" : `: ${detail}`}`)
}
process.exitCode = checks.every(([, passed]) => passed) ? 0 : 1
