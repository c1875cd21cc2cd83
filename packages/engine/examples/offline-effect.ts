/**
 * The offline run of `offline.ts` through the Effect API (`Agent`): the same plain options, the log
 * and the engine from `Agent.layer`, the answer from `run.text`, the result from `run.wait`. Exits 0
 * when the run completed.
 */
import { Agent } from "@maka/engine"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Builtins, Workspace } from "@maka/tools"
import { Effect, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const script = [
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "read_file", arguments: ['{"path":"README.md"}'] }] })),
  Respond.sse(OpenAiSse.response({ reasoning: ["The README says it."], text: ["Lantern turns Markdown ", "into HTML pages."] })),
]

const folder = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "maka-example-"))),
  (directory) => Effect.sync(() => fs.rmSync(directory, { recursive: true, force: true })),
)
const server = Effect.acquireRelease(
  Effect.promise(() => ScriptedServer.start({ script })),
  (started) => Effect.promise(() => started.close()),
)

const program = Effect.gen(function* () {
  const directory = yield* folder
  fs.writeFileSync(path.join(directory, "README.md"), "# Lantern\n\nIt turns a folder of Markdown into HTML pages.\n")
  const { url } = yield* server
  const result = yield* Effect.gen(function* () {
    const workspace = yield* Workspace.open(directory)
    const run = yield* Agent.start({
      sessionId: "example-session",
      provider: { kind: "openai-compatible", baseUrl: `${url}/v1`, model: "maka-offline" },
      message: "What is this project about?",
      tools: Builtins.read(workspace),
      workspace,
    })
    yield* Stream.runForEach(run.text, (text) => Effect.sync(() => process.stdout.write(text)))
    return yield* run.wait
  }).pipe(Effect.provide(Agent.layer({ database: path.join(directory, "events.sqlite") })))
  process.stdout.write(`\n\noutcome: ${result.outcome.kind}\n`)
  return result.outcome.kind === "completed" ? 0 : 1
})

process.exitCode = await Effect.runPromise(Effect.scoped(program))
