import { assert, describe, it } from "@effect/vitest"
import type { Event } from "@maka/facts"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Builtins } from "@maka/tools"
import { TestIds } from "@maka/tools/testing"
import { Effect, Exit, Fiber, Layer, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Agent from "../src/Agent.ts"
import * as Engine from "../src/Engine.ts"

const folder = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "maka-agent-"))),
  (directory) => Effect.sync(() => fs.rmSync(directory, { recursive: true, force: true })),
)

const server = (script: ReadonlyArray<Respond.Responder>) =>
  Effect.acquireRelease(
    Effect.promise(() => ScriptedServer.start({ script })),
    (started) => Effect.promise(() => started.close()),
  )

const provider = (started: ScriptedServer.ScriptedServer): Agent.ProviderOptions => ({
  kind: "openai-compatible",
  baseUrl: `${started.url}/v1`,
  model: "test-model",
})

const kinds = (events: ReadonlyArray<Event.StoredEvent>) =>
  events.filter((stored) => stored.event.fact.kind !== "model_observed").map((stored) => stored.event.fact.kind)

const listThenAnswer = [
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "list_files", arguments: ['{"path":"."}'] }] })),
  Respond.sse(OpenAiSse.response({ reasoning: ["Only one file."], text: ["A README ", "and nothing else."] })),
]

describe("Agent", () => {
  it.live("runs a tool loop from plain options, with its events, its text and its result", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const directory = yield* folder
        fs.writeFileSync(path.join(directory, "README.md"), "# Demo\n")
        const root = fs.realpathSync(directory)
        const started = yield* server(listThenAnswer)
        const layer = Agent.layer({ database: path.join(directory, "events.sqlite") })
        const outcome = yield* Effect.gen(function* () {
          const run = yield* Agent.start({
            sessionId: "session-1",
            provider: provider(started),
            message: "What is here?",
            tools: Builtins.read({ root }),
            workspace: directory,
          })
          const [events, text] = yield* Effect.all([Stream.runCollect(run.events), Stream.runCollect(run.text)], {
            concurrency: 2,
          })
          const result = yield* run.wait
          assert.deepStrictEqual(kinds(events), [
            "invocation_opened",
            "model_requested",
            "model_completed",
            "tool_dispatched",
            "tool_settled",
            "model_requested",
            "model_completed",
            "invocation_ended",
          ])
          assert.strictEqual(text.join(""), "A README and nothing else.")
          assert.deepStrictEqual(result.invocation, run.invocation)
          return result.outcome
        }).pipe(Effect.provide(layer))
        assert.deepStrictEqual(outcome, { kind: "completed" })
        assert.isTrue(fs.existsSync(path.join(root, ".maka-workspace.json")))
      }),
    ),
  )

  it.live("takes the run's ids from the Ids service in context", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const directory = yield* folder
        const started = yield* server([Respond.sse(OpenAiSse.response({ text: ["Hi."] }))])
        const result = yield* Agent.run({ sessionId: "session-1", provider: provider(started), message: "Hello" }).pipe(
          Effect.provide(TestIds.layer(100)),
          Effect.provide(Agent.layer({ database: path.join(directory, "events.sqlite") })),
        )
        assert.deepStrictEqual(result.invocation, {
          sessionId: "session-1",
          turnId: TestIds.id(100),
          runId: TestIds.id(101),
          invocationId: TestIds.id(102),
        })
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
      }),
    ),
  )

  it.live("cancels a run whose caller stops waiting, and frees the session when the interruption ends", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const directory = yield* folder
        const started = yield* server([Respond.hang(), Respond.sse(OpenAiSse.response({ text: ["Hi."] }))])
        const options = { sessionId: "session-1", provider: provider(started), message: "Hello" }
        const [first, second, events] = yield* Effect.gen(function* () {
          const fiber = yield* Effect.forkChild(Agent.run(options))
          yield* Effect.promise(() => started.request(0))
          yield* Fiber.interrupt(fiber)
          const first = yield* Fiber.await(fiber)
          const second = yield* Agent.run(options)
          const engine = yield* Engine.Engine
          return [first, second, yield* engine.log.events("session-1")] as const
        }).pipe(Effect.provide(Agent.layer({ database: path.join(directory, "events.sqlite") })))
        assert.isTrue(Exit.hasInterrupts(first))
        assert.deepStrictEqual(second.outcome, { kind: "completed" })
        const ended = events.filter((stored) => stored.event.fact.kind === "invocation_ended").map((stored) => stored.event.fact)
        assert.deepStrictEqual(
          ended.map((fact) => (fact.kind === "invocation_ended" ? fact.outcome.kind : fact.kind)),
          ["cancelled", "completed"],
        )
      }),
    ),
  )

  it.effect("derives the defaults of a run from plain options", () =>
    Effect.gen(function* () {
      const input = yield* Agent.startInput({
        sessionId: "session-1",
        provider: { kind: "anthropic", baseUrl: "https://api.anthropic.com/", model: "claude-sonnet-4-5", apiKey: "sk-x" },
        message: "Hello",
        tools: [],
      }).pipe(Effect.provide(TestIds.layer(1)))
      assert.deepStrictEqual(input.invocation, {
        sessionId: "session-1",
        turnId: TestIds.id(1),
        runId: TestIds.id(2),
        invocationId: TestIds.id(3),
      })
      assert.deepStrictEqual(input.configuration, {
        cwd: process.cwd(),
        model: { connectionId: "anthropic:https://api.anthropic.com", connectionSlug: "anthropic", model: "claude-sonnet-4-5" },
        toolMode: "direct",
      })
      assert.deepStrictEqual(input.message, { text: "Hello" })
      assert.deepStrictEqual(input.tools.names, [])
      assert.strictEqual(input.maxSteps, 32)
      assert.strictEqual(input.mainOutputLimit, 8_000)
      assert.strictEqual(input.allowPriorUnknown, false)
      assert.deepStrictEqual(input.context, { providerId: "anthropic" })
      assert.isFalse("providerOptions" in input)
    }),
  )

  it.live("refuses a second engine on one SQLite file as Store {WriterBusy}, and a missing or doubled log as InvalidInput", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const directory = yield* folder
        const database = path.join(directory, "events.sqlite")
        yield* Layer.build(Agent.layer({ database }))
        const second = yield* Effect.exit(Layer.build(Agent.layer({ database })))
        const failure = Exit.isFailure(second) ? Exit.findErrorOption(second) : undefined
        const reason = failure?._tag === "Some" ? failure.value.reason : undefined
        assert.strictEqual(reason?._tag === "Store" ? reason.storeReason : undefined, "WriterBusy")
        for (const options of [{}, { database, databaseUrl: "postgres://127.0.0.1:1/none" }]) {
          const refused = yield* Effect.exit(Layer.build(Agent.layer(options)))
          const error = Exit.isFailure(refused) ? Exit.findErrorOption(refused) : undefined
          assert.strictEqual(error?._tag === "Some" ? error.value.reason._tag : undefined, "InvalidInput")
        }
      }),
    ),
  )
})
