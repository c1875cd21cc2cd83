/**
 * An offline run of the engine end to end (root `pnpm example`): a real SQLite log in a temporary
 * folder, the testkit's scripted server as the model (a `list_files` call, a `read_file` call, then a
 * streamed answer), the read-only builtins over a temporary workspace. Prints the answer as it becomes
 * durable (`run.text()`), then every fact the run committed, and exits 0 when the run completed.
 */
import { createEngine, Facade } from "@maka/engine"
import type { Event } from "@maka/facts"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Builtins } from "@maka/tools"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const ANSWER = [
  "This workspace holds one file, ",
  "README.md. ",
  "It describes **Lantern**, ",
  "a tiny static-site generator ",
  "that turns a folder of Markdown ",
  "into HTML pages.",
]

/** The model's script: explore, read, answer. */
const script = [
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "list_files", arguments: ['{"path":', '"."}'] }] })),
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-2", name: "read_file", arguments: ['{"path":"README.md"}'] }] })),
  // A short pause before each chunk, so the answer streams as a real model's does.
  Respond.sse(Respond.withDelay(OpenAiSse.response({ text: ANSWER }), 40)),
]

/** One short line per fact. */
const describe = (stored: Event.StoredEvent): string => {
  const fact = stored.event.fact
  switch (fact.kind) {
    case "invocation_opened":
      return fact.input.kind === "message" ? JSON.stringify(fact.input.content.text) : fact.input.kind
    case "model_requested":
      return `${fact.purpose} step ${fact.stepId.slice(0, 8)}`
    case "model_observed":
      return fact.event.kind === "part_delta" ? `${fact.event.kind} ${JSON.stringify(fact.event.text)}` : fact.event.kind
    case "model_completed":
      return `finish ${fact.output.finishReason}`
    case "tool_dispatched":
    case "tool_rejected":
      return `${fact.name} ${fact.operationId.split(":").at(-1) ?? ""}`
    case "tool_settled":
      return `${fact.outcome.kind} ${fact.operationId.split(":").at(-1) ?? ""}`
    case "invocation_ended":
      return fact.outcome.kind
    default:
      return ""
  }
}

const folder = fs.mkdtempSync(path.join(os.tmpdir(), "maka-example-"))
const workspaceDirectory = path.join(folder, "workspace")
fs.mkdirSync(workspaceDirectory)
fs.writeFileSync(
  path.join(workspaceDirectory, "README.md"),
  "# Lantern\n\nA tiny static-site generator: it turns a folder of Markdown into HTML pages.\n",
)

const server = await ScriptedServer.start({ script })
const engine = await createEngine({ database: path.join(folder, "events.sqlite") })
let exitCode = 1
try {
  const workspace = await Facade.openWorkspace(workspaceDirectory)
  const sessionId = "example-session"
  const run = await engine.start({
    sessionId,
    provider: { kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "maka-offline" },
    message: "What is this project about?",
    tools: Builtins.read(workspace),
    workspace,
  })
  for await (const text of run.text()) process.stdout.write(text) // the answer, as it becomes durable
  const result = await run.wait()
  process.stdout.write(`\n\noutcome: ${result.outcome.kind}\n\nfacts committed:\n`)
  for (const stored of await engine.events(sessionId)) {
    process.stdout.write(`${String(stored.sequence).padStart(4)}  ${stored.event.fact.kind.padEnd(18)} ${describe(stored)}\n`)
  }
  exitCode = result.outcome.kind === "completed" ? 0 : 1
} finally {
  await engine.close()
  await server.close()
  fs.rmSync(folder, { recursive: true, force: true })
}
process.exitCode = exitCode
