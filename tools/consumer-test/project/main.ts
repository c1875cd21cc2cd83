/**
 * The program a new user writes after installing the packed tarballs (tools/consumer-test/run.mjs
 * copies it into a project outside the repository, type checks it under strict NodeNext and runs
 * it). One turn through `createEngine` against the testkit's scripted server: the model calls a
 * tool, reads its result and answers. Prints one line per check and exits 1 when any fails.
 *
 * To add a case: a tool to `tools`, the model's turn to `script`, a run option to `start`, and
 * what must hold to `checks`.
 */
import { createEngine } from "@maka/engine"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Effect, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

// ---- Tools -------------------------------------------------------------------------------------

const forecast = Tool.make({
  name: "forecast",
  description: "Tomorrow's weather in a city.",
  semantics: "parallel",
  input: Schema.Struct({ city: Schema.String }),
  execute: ({ city }) => Effect.succeed(Tool.text(`${city.toUpperCase()}: sunny, 21 °C`)),
})

const tools = [forecast]

// ---- The model's turn --------------------------------------------------------------------------

const ANSWER = ["Tomorrow in Lisbon: ", "sunny, 21 °C."]

const script = [
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "forecast", arguments: ['{"city":', '"Lisbon"}'] }] })),
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
    tools: ToolCatalog.make(tools),
    workspace,
  })

  const textParts = new Set<string>()
  let streamed = ""
  const kinds: Array<string> = []
  for await (const { event } of run.events()) {
    const fact = event.fact
    kinds.push(fact.kind)
    if (fact.kind !== "model_observed") continue
    if (fact.event.kind === "part_started" && fact.event.textKind === "text") textParts.add(`${fact.stepId}/${fact.event.id}`)
    if (fact.event.kind === "part_delta" && textParts.has(`${fact.stepId}/${fact.event.id}`)) streamed += fact.event.text
  }
  const { outcome } = await run.wait()
  const stored = await engine.events("consumer-session")
  const facts = stored.map(({ event }) => event.fact)

  // ---- Checks ----------------------------------------------------------------------------------

  check("the run completes", outcome.kind === "completed", outcome)
  check("events() ends with the terminal fact", kinds.at(-1) === "invocation_ended", kinds)
  const dispatched = facts.find((fact) => fact.kind === "tool_dispatched")
  check(
    "the tool is dispatched with the decoded input",
    dispatched?.kind === "tool_dispatched" && dispatched.name === "forecast" &&
      JSON.stringify(dispatched.input) === JSON.stringify({ city: "Lisbon" }),
    dispatched,
  )
  const settled = facts.find((fact) => fact.kind === "tool_settled")
  check("the tool settles successfully", settled?.kind === "tool_settled" && settled.outcome.kind === "succeeded", settled)
  const advertised = JSON.stringify(server.requests()[0]?.json ?? null)
  check("the first request advertises the tool's JSON Schema", advertised.includes('"forecast"') && advertised.includes('"city"'))
  const second = server.requests()[1]?.body ?? ""
  check("the second request carries the tool's result", second.includes("LISBON: sunny, 21 °C"), second.slice(0, 400))
  check("the answer streams as durable text", streamed === ANSWER.join(""), streamed)
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
