/**
 * Rejections through `createEngine` against a loopback model server: a validator's message that
 * quotes the provider key or a `Redacted` header value is stored and read with each scrubbed, and a
 * decode message of megabytes is cut, so its `tool_rejected` commits and the run completes.
 */
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Tool } from "@maka/tools"
import { Effect, Redacted, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, assert, describe, it } from "vitest"
import { createEngine, type MakaEngine } from "../src/Facade.ts"

const API_KEY = "sk-rejection-secret-5c3a"
const TOKEN = "tok-rejection-header-8e1f"

const cleanups: Array<() => Promise<void> | void> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

const setup = async (script: ReadonlyArray<Respond.Responder>) => {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "maka-rejection-"))
  cleanups.push(() => fs.rmSync(folder, { recursive: true, force: true }))
  const server = await ScriptedServer.start({ script })
  cleanups.push(() => server.close())
  const engine: MakaEngine = await createEngine({ database: path.join(folder, "events.sqlite") })
  cleanups.push(() => engine.close())
  return { folder, server, engine }
}

/** The scripted server as the provider, with the key and a Redacted header value to keep out of everything. */
const provider = (server: ScriptedServer.ScriptedServer) => ({
  kind: "openai-compatible" as const,
  baseUrl: `${server.url}/v1/`,
  model: "test-model",
  apiKey: API_KEY,
  headers: { "x-token": Redacted.make(TOKEN) },
})

/** Closes the engine, then finds neither secret in any byte of the log's files. */
const assertNoSecretInFiles = async (context: { readonly folder: string; readonly engine: MakaEngine }) => {
  await context.engine.close()
  for (const file of fs.readdirSync(context.folder)) {
    const bytes = fs.readFileSync(path.join(context.folder, file)).toString("latin1")
    assert.notInclude(bytes, API_KEY, file)
    assert.notInclude(bytes, TOKEN, file)
  }
}

/** A Standard Schema (with Standard JSON Schema) whose validation is `validate`. */
const standard = (validate: (value: unknown) => unknown): Tool.StandardInput =>
  ({
    "~standard": {
      version: 1,
      vendor: "test",
      validate,
      jsonSchema: { input: () => ({ type: "object" }), output: () => ({ type: "object" }) },
    },
  }) as unknown as Tool.StandardInput

const toolOf = (name: string, input: Tool.InputSchema) =>
  Tool.make({ name, description: name, semantics: "parallel", input, execute: () => Effect.succeed(Tool.text("ran")) })

const callsThenAnswer = (calls: ReadonlyArray<{ readonly id: string; readonly name: string; readonly arguments: string }>) => [
  Respond.sse(OpenAiSse.response({ toolCalls: calls.map((call) => ({ ...call, arguments: [call.arguments] })) })),
  Respond.sse(OpenAiSse.response({ text: ["Done."] })),
]

const rejections = async (engine: MakaEngine) =>
  (await engine.events("session-1")).flatMap((stored) =>
    stored.event.fact.kind === "tool_rejected" ? [stored.event.fact.reason] : [],
  )

describe("tool rejections through createEngine", () => {
  it("scrubs the provider key and a Redacted header value from invalid_input and preparation_failed", async () => {
    const lookup = toolOf(
      "lookup",
      standard(() => {
        throw new Error(`GET https://api.example.com/v1/accounts?key=${API_KEY} -> 404`)
      }),
    )
    const project = toolOf("project", standard(() => ({ issues: [{ message: `token ${TOKEN} has no access`, path: ["project"] }] })))
    const context = await setup(
      callsThenAnswer([
        { id: "call-1", name: "lookup", arguments: '{"account":"bob"}' },
        { id: "call-2", name: "project", arguments: '{"project":"p"}' },
      ]),
    )
    const run = await context.engine.start({
      sessionId: "session-1",
      provider: provider(context.server),
      message: "Look it up.",
      tools: [lookup, project],
    })
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    assert.deepStrictEqual(await rejections(context.engine), [
      {
        kind: "preparation_failed",
        message: 'Tool "lookup" could not prepare its input: Error: GET https://api.example.com/v1/accounts?key=[redacted] -> 404',
      },
      { kind: "invalid_input", message: 'Invalid input for tool "project": token [redacted] has no access\n  at ["project"]' },
    ])
    const stored = JSON.stringify(await context.engine.events("session-1"))
    assert.notInclude(stored, API_KEY)
    assert.notInclude(stored, TOKEN)
    // The model read the scrubbed messages in the next request.
    const next = context.server.requests()[1]!.body
    assert.include(next, "[redacted]")
    assert.notInclude(next, API_KEY)
    assert.notInclude(next, TOKEN)
    await assertNoSecretInFiles(context)
  })

  it("stores no key a provider echoes into its answer or a tool call, and never sends it back", async () => {
    const echo = toolOf("echo", Schema.Struct({ note: Schema.String }))
    const context = await setup([
      Respond.sse(
        OpenAiSse.response({
          text: ["Using sk-rej", `ection-secret-5c3a and ${TOKEN.slice(0, 4)}`, TOKEN.slice(4)],
          toolCalls: [{ id: "call-1", name: "echo", arguments: ['{"note":"', API_KEY, '"}'] }],
        }),
      ),
      Respond.sse(OpenAiSse.response({ text: [`Done with ${API_KEY.slice(0, 10)}`, API_KEY.slice(10)] })),
    ])
    const run = await context.engine.start({
      sessionId: "session-1",
      provider: provider(context.server),
      message: "Go.",
      tools: [echo],
    })
    let shown = ""
    for await (const text of run.text()) shown += text
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    assert.strictEqual(shown, "Using [redacted] and [redacted]Done with [redacted]")
    const stored = JSON.stringify(await context.engine.events("session-1"))
    assert.include(stored, '"note":"[redacted]"')
    assert.notInclude(stored, API_KEY)
    assert.notInclude(stored, TOKEN)
    const next = context.server.requests()[1]!.body
    assert.notInclude(next, API_KEY)
    assert.notInclude(next, TOKEN)
    await assertNoSecretInFiles(context)
  })

  it("cuts a decode message of megabytes to 2,048 units and completes the run", async () => {
    const items = toolOf("items", Schema.Struct({ items: Schema.Array(Schema.String) }))
    const argumentsText = JSON.stringify({ items: Array.from({ length: 60_000 }, () => 1) })
    const context = await setup(callsThenAnswer([{ id: "call-1", name: "items", arguments: argumentsText }]))
    const run = await context.engine.start({
      sessionId: "session-1",
      provider: { kind: "openai-compatible", baseUrl: `${context.server.url}/v1/`, model: "test-model", apiKey: API_KEY },
      message: "Tag them.",
      tools: [items],
    })
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    const [rejection] = await rejections(context.engine)
    assert.strictEqual(rejection?.kind, "invalid_input")
    const message = rejection?.kind === "invalid_input" ? rejection.message : ""
    assert.strictEqual(message.length, 2_048)
    assert.isTrue(message.startsWith('Invalid input for tool "items": Expected string\n  at ["items"][0]\n'))
  })
})
