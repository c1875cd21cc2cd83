import { assert, describe, it } from "@effect/vitest"
import { OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Deferred, Effect, Schema, Stream } from "effect"
import { factsOf, kinds, wireMessages } from "./support/harness.ts"
import { echoTool, input, setup, type Effects } from "./support/setup.ts"

/** A `slow` tool whose effect signals `started`, waits for `release`, then records itself. */
const slowTool = (effects: Effects, started: Deferred.Deferred<void>, release: Deferred.Deferred<void>) =>
  Tool.make({
    name: "slow",
    description: "Waits until released.",
    input: Schema.Struct({ value: Schema.String }),
    semantics: "parallel",
    execute: ({ value }) =>
      Effect.gen(function* () {
        yield* Deferred.succeed(started, undefined)
        yield* Deferred.await(release)
        effects.ran.push(`slow:${value}`)
        return Tool.text(`slow: ${value}`)
      }),
  })

describe("Cancellation", () => {
  it.live("lets the dispatched effect finish, rejects the undispatched call, and seals cancelled in that order (§5.14, scenario 62)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            Respond.sse(
              OpenAiSse.response({
                toolCalls: [
                  { id: "call-1", name: "slow", arguments: ['{"value":"first"}'] },
                  { id: "call-2", name: "echo", arguments: ['{"value":"second"}'] },
                ],
              }),
            ),
          ],
        })
        const effects: Effects = { ran: [] }
        const started = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const tools = ToolCatalog.make([slowTool(effects, started, release), echoTool(effects)])
        const running = yield* context.engine.start(input(context, "Run both.", tools))
        yield* Deferred.await(started)
        yield* running.cancel
        // Admission stays held until the terminal is durable: a new run on the session is Busy.
        const busy = yield* Effect.flip(context.engine.start(input(context, "Another.", tools)))
        assert.strictEqual(busy.reason._tag, "Busy")
        assert.deepStrictEqual(effects.ran, [])
        yield* Deferred.succeed(release, undefined)
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_settled:succeeded",
          "tool_rejected:cancelled",
          "invocation_ended:cancelled",
        ])
        const stepId = factsOf(events, "model_completed")[0]!.stepId
        assert.deepStrictEqual(
          factsOf(events, "tool_dispatched").map((fact) => fact.operationId),
          [`${stepId}:call-1`],
        )
        assert.deepStrictEqual(
          factsOf(events, "tool_settled").map((fact) => [fact.operationId, fact.outcome.kind]),
          [[`${stepId}:call-1`, "succeeded"]],
        )
        assert.deepStrictEqual(
          factsOf(events, "tool_rejected").map((fact) => [fact.operationId, fact.reason.kind]),
          [[`${stepId}:call-2`, "cancelled"]],
        )
        // The second call's effect never ran, and the model was not asked again.
        assert.deepStrictEqual(effects.ran, ["slow:first"])
        assert.strictEqual(context.server.requests().length, 1)
        // The stream a caller watches shows the same facts and ends after the terminal.
        const streamed = yield* Stream.runCollect(running.events)
        assert.deepStrictEqual(kinds(streamed), kinds(events))
        // After the terminal the session is free again, and the next turn reads the rejection.
        context.server.push(Respond.sse(OpenAiSse.response({ text: ["ok"] })))
        const next = yield* context.engine.run(input(context, "What happened?", tools))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
        const tool = wireMessages(context.server, 1).filter((message) => message.role === "tool")
        assert.deepStrictEqual(
          tool.map((message) => [message.tool_call_id, message.content]),
          [
            ["call-1", "slow: first"],
            ["call-2", "tool cancelled before dispatch; tool was not executed"],
          ],
        )
      }),
    ))
})

describe("cancellation before admission", () => {
  it.live("writes nothing when the signal aborts before the opening is durable", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [Respond.hang()] })
        const controller = new AbortController()
        controller.abort()
        const refused = yield* Effect.flip(
          context.engine.start(input(context, "x", ToolCatalog.make([]), { signal: controller.signal })),
        )
        assert.strictEqual(refused.reason._tag, "Cancelled")
        assert.deepStrictEqual(yield* context.engine.log.events("session-1"), [])
        assert.strictEqual(context.server.requests().length, 0)
      }),
    ))
})
