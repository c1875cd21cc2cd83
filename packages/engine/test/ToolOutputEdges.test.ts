/**
 * Tools written by a user with `Tool.make`, run through `createEngine` against a loopback model
 * server: an output the journal cannot even read settles as a known failure and the session goes
 * on (docs/tools.md §2.12), and a tool without arguments (`Schema.Struct({})`) is offered as the
 * closed empty object and called with `{}`.
 */
import type { Event } from "@maka/facts"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Effect, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, assert, describe, it } from "vitest"
import { createEngine, type MakaEngine, type StartOptions } from "../src/Facade.ts"

const cleanups: Array<() => Promise<void> | void> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

interface Context {
  readonly workspace: string
  readonly server: ScriptedServer.ScriptedServer
  readonly engine: MakaEngine
}

const setup = async (script: ReadonlyArray<Respond.Responder>): Promise<Context> => {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "maka-tool-output-"))
  cleanups.push(() => fs.rmSync(folder, { recursive: true, force: true }))
  const workspace = path.join(folder, "workspace")
  fs.mkdirSync(workspace)
  const server = await ScriptedServer.start({ script })
  cleanups.push(() => server.close())
  const engine = await createEngine({ database: path.join(folder, "events.sqlite"), engineOptions: { backoffBaseMs: 5, backoffMaxMs: 40 } })
  cleanups.push(() => engine.close())
  return { workspace, server, engine }
}

const options = (context: Context, tool: Tool.Tool, message: string): StartOptions => ({
  sessionId: "session-1",
  provider: { kind: "openai-compatible", baseUrl: `${context.server.url}/v1/`, model: "test-model", apiKey: "sk-test" },
  message,
  tools: ToolCatalog.make([tool]),
  workspace: context.workspace,
})

const settlements = (events: ReadonlyArray<Event.StoredEvent>) =>
  events.flatMap((stored) => (stored.event.fact.kind === "tool_settled" ? [stored.event.fact.outcome] : []))

const callThenAnswer = (name: string, argumentsText: string) => [
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name, arguments: [argumentsText] }] })),
  Respond.sse(OpenAiSse.response({ text: ["Done."] })),
]

describe("tool outputs through createEngine", () => {
  it("settles a circular output as a failure, completes the run, and the session takes the next start", async () => {
    const circular: { [key: string]: unknown } = { name: "loop" }
    circular["self"] = circular
    const loop = Tool.make({
      name: "loop",
      description: "Returns a value that refers to itself.",
      semantics: "parallel",
      input: Schema.Struct({ value: Schema.String }),
      execute: () => Effect.succeed(Tool.json(circular as never)),
    })
    const context = await setup([...callThenAnswer("loop", '{"value":"x"}'), Respond.sse(OpenAiSse.response({ text: ["Again."] }))])
    const first = await context.engine.start(options(context, loop, "Loop."))
    assert.deepStrictEqual((await first.wait()).outcome, { kind: "completed" })
    const message =
      "The tool completed, but its result could not be recorded: reading it as JSON threw an error (is it circular, nested too deeply, or does a getter or proxy in it throw?)"
    assert.deepStrictEqual(settlements(await context.engine.events("session-1")), [{ kind: "failed", message }])
    // The model read the failure in the next step of the same run.
    assert.include(context.server.requests()[1]!.body, "could not be recorded")
    const second = await context.engine.start(options(context, loop, "And now?"))
    assert.deepStrictEqual((await second.wait()).outcome, { kind: "completed" })
  })

  it("offers a tool without arguments as the closed empty object and runs it with {}", async () => {
    const seen: Array<unknown> = []
    const now = Tool.make({
      name: "now",
      description: "d",
      semantics: "parallel",
      input: Schema.Struct({}),
      execute: (input) => (seen.push(input), Effect.succeed(Tool.text("noon"))),
    })
    const context = await setup(callThenAnswer("now", "{}"))
    const run = await context.engine.start(options(context, now, "What time is it?"))
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    const request = context.server.requests()[0]!.json as {
      readonly tools: ReadonlyArray<{ readonly function: { readonly name: string; readonly parameters: unknown } }>
    }
    const offered = request.tools.find((tool) => tool.function.name === "now")
    assert.deepStrictEqual(offered?.function.parameters, { type: "object", properties: {}, additionalProperties: false })
    assert.deepStrictEqual(seen, [{}])
    const settled = settlements(await context.engine.events("session-1"))
    assert.strictEqual(settled.length, 1)
    assert.deepInclude(settled[0]!, { kind: "succeeded", projection: { kind: "text", text: "noon" } })
  })
})
