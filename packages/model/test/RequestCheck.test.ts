/**
 * The request check before anything is sent: closed shapes, the refusal named with its path. A
 * sealed message (`Canonical.seal`) is checked once and sent as itself; an unsealed one is checked
 * on every request, so a message changed after a first request is still refused. Sealed tools and
 * provider options are checked once as a pair; the output limit and the request's keys every time.
 */
import { assert, describe, it } from "@effect/vitest"
import { Canonical, type Prompt } from "@maka/facts"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Effect } from "effect"
import { collect, openAi, request } from "./support.ts"

const answer = () => Respond.sse(OpenAiSse.response({ text: ["ok"] }))

const refusal = (error: unknown): string => (error instanceof Error ? error.message : String(error))

describe("the request check", () => {
  it.effect("refuses a message that breaks its schema, sealed or not, naming the path", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const server = yield* ScriptedServer.make({ script: [] })
        const model = yield* openAi(server)
        const bad = { role: "user", content: "hi", extra: 1 } as unknown as Prompt.PromptMessage
        for (const message of [bad, Canonical.seal(bad)]) {
          const { error } = yield* collect(model.stream(request({ prompt: [{ role: "system", content: "s" }, message] })))
          assert.isDefined(error)
          assert.include(refusal(error), "invalid model request")
          assert.include(refusal(error), "prompt")
        }
        assert.strictEqual(server.requests().length, 0)
      }),
    ))

  it.effect("checks an unsealed message on every request, and the request's other fields always", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const server = yield* ScriptedServer.make({ script: [answer(), answer()] })
        const model = yield* openAi(server)
        const sealed = Canonical.seal<Prompt.PromptMessage>({ role: "user", content: "sealed" })
        const open: { role: "user"; content: unknown } = { role: "user", content: "open" }
        const first = yield* collect(model.stream(request({ prompt: [sealed, open as Prompt.PromptMessage] })))
        assert.isUndefined(first.error)
        open.content = 42
        const second = yield* collect(model.stream(request({ prompt: [sealed, open as Prompt.PromptMessage] })))
        assert.include(refusal(second.error), "invalid model request")
        const third = yield* collect(model.stream(request({ prompt: [sealed], maxOutputTokens: -1 })))
        assert.include(refusal(third.error), "invalid model request")
        const fourth = yield* collect(model.stream(request({ prompt: [sealed] })))
        assert.isUndefined(fourth.error)
        // Sent as itself: the body carries the sealed message's text.
        const bodies = server.requests().map((received) => JSON.parse(received.body) as { messages: ReadonlyArray<unknown> })
        assert.strictEqual(bodies.length, 2)
        assert.deepStrictEqual(bodies[1]!.messages, [{ role: "user", content: "sealed" }])
      }),
    ))

  it.effect("checks a sealed pair of tools and options once, and the output limit and keys on every request", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const server = yield* ScriptedServer.make({ script: [answer(), answer()] })
        const model = yield* openAi(server)
        const tools = Canonical.seal<ReadonlyArray<Prompt.ToolDefinition>>([
          { name: "look", description: "Looks.", inputSchema: { type: "object" } },
        ])
        const providerOptions = Canonical.seal({ temperature: 0 })
        const first = yield* collect(model.stream(request({ tools, providerOptions })))
        assert.isUndefined(first.error)
        for (const maxOutputTokens of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53, "5" as unknown as number]) {
          const limit = yield* collect(model.stream(request({ tools, providerOptions, maxOutputTokens })))
          assert.include(refusal(limit.error), "invalid model request", `maxOutputTokens ${String(maxOutputTokens)}`)
        }
        const extra = { ...request({ tools, providerOptions }), stray: 1 } as unknown as Prompt.ModelRequest
        assert.include(refusal((yield* collect(model.stream(extra))).error), "invalid model request")
        const again = yield* collect(model.stream(request({ tools, providerOptions })))
        assert.isUndefined(again.error)
        const bodies = server.requests().map((received) => JSON.parse(received.body) as { tools: ReadonlyArray<unknown>; temperature: number })
        assert.strictEqual(bodies.length, 2)
        assert.deepStrictEqual(bodies[1]!.tools, [{ type: "function", function: { name: "look", description: "Looks.", parameters: { type: "object" } } }])
        assert.strictEqual(bodies[1]!.temperature, 0)
      }),
    ))

  it.effect("refuses sealed tools that break their schema, and open ones changed after a first request", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const server = yield* ScriptedServer.make({ script: [answer()] })
        const model = yield* openAi(server)
        const providerOptions = Canonical.seal({})
        const badTools = Canonical.seal([{ name: "look", description: 7, inputSchema: { type: "object" } }]) as unknown as ReadonlyArray<Prompt.ToolDefinition>
        for (let attempt = 0; attempt < 2; attempt++) {
          assert.include(refusal((yield* collect(model.stream(request({ tools: badTools, providerOptions })))).error), "tools")
        }
        const open: Array<{ name: string; description: unknown; inputSchema: object }> = [
          { name: "look", description: "Looks.", inputSchema: { type: "object" } },
        ]
        const tools = open as unknown as ReadonlyArray<Prompt.ToolDefinition>
        assert.isUndefined((yield* collect(model.stream(request({ tools, providerOptions })))).error)
        open[0]!.description = 7
        assert.include(refusal((yield* collect(model.stream(request({ tools, providerOptions })))).error), "tools")
        assert.strictEqual(server.requests().length, 1)
      }),
    ))
})
