import { assert, describe, it } from "@effect/vitest"
import { Canonical, Prompts, type Prompt } from "@maka/facts"
import { OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Effect, Schema } from "effect"
import { factsOf, kinds, recording, reopen, wireMessages } from "./support/harness.ts"
import { catalog, input, setup, type Effects } from "./support/setup.ts"

describe("replay after reopening", () => {
  it.live("replays the settled result from the frozen projection in the next turn without running the tool again (scenario 11)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "echo", arguments: ['{"value":', '"hi"}'] }] })),
            Respond.sse(OpenAiSse.response({ text: ["The echo said hi."] })),
            Respond.sse(OpenAiSse.response({ text: ["Yes, it said hi."] })),
          ],
        })
        const effects: Effects = { ran: [] }
        const first = yield* context.engine.run(input(context, "Say hi through echo.", catalog(effects)))
        assert.deepStrictEqual(first.outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, ["hi"])
        const before = yield* context.log.events("session-1")
        const settled = factsOf(before, "tool_settled")[0]!
        assert.strictEqual(settled.outcome.kind, "succeeded")
        // What the model read in the first turn, straight after the effect.
        const inTurn = wireMessages(context.server, 1)
        yield* context.log.close

        const engine = yield* reopen(context.file)
        assert.strictEqual(Canonical.stringify(yield* engine.log.events("session-1")), Canonical.stringify(before))
        const spy = recording(context.model)
        const second = yield* engine.run(input(context, "Did it say hi?", catalog(effects), { model: spy.model }))
        assert.deepStrictEqual(second.outcome, { kind: "completed" })
        // The effect ran once, in the first turn only.
        assert.deepStrictEqual(effects.ran, ["hi"])
        const after = yield* engine.log.events("session-1")
        assert.deepStrictEqual(kinds(after.slice(before.length)), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "invocation_ended:completed",
        ])
        assert.strictEqual(factsOf(after, "tool_dispatched").length, 1)
        // The next turn carries the earlier call and its result from the frozen projection.
        const prompt = spy.requests[0]!.prompt
        assert.deepStrictEqual(
          prompt.map((message) => message.role),
          ["system", "user", "assistant", "tool", "assistant", "user"],
        )
        assert.deepStrictEqual(prompt[3], {
          role: "tool",
          results: [{ toolCallId: "call-1", toolName: "echo", output: { type: "text", value: "echo: hi" } }],
        })
        const projection = settled.outcome.kind === "succeeded" ? settled.outcome.projection : undefined
        assert.deepStrictEqual(projection, { kind: "text", text: "echo: hi" })
        // On the wire the replayed history is byte-identical to what the model read in the first turn.
        const replayed = wireMessages(context.server, 2)
        assert.deepStrictEqual(replayed.slice(0, inTurn.length), inTurn)
      }),
    ))

  it.live("replays a result too large to project as the projection failure text, also after reopening (scenario 17)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "dump", arguments: ['{"size":307200}'] }] })),
            Respond.sse(OpenAiSse.response({ text: ["Too big to read."] })),
            Respond.sse(OpenAiSse.response({ text: ["Still too big."] })),
          ],
        })
        let runs = 0
        const dump = Tool.make({
          name: "dump",
          description: "Returns `size` characters.",
          input: Schema.Struct({ size: Schema.Number }),
          semantics: "parallel",
          execute: ({ size }) =>
            Effect.sync(() => {
              runs++
              return Tool.text("x".repeat(size))
            }),
        })
        const tools = ToolCatalog.make([dump])
        const spy = recording(context.model)
        const first = yield* context.engine.run(input(context, "Dump it.", tools, { model: spy.model }))
        assert.deepStrictEqual(first.outcome, { kind: "completed" })
        const failureResult: Prompt.ToolMessage = {
          role: "tool",
          results: [{ toolCallId: "call-1", toolName: "dump", output: { type: "error-text", value: Prompts.PROJECTION_FAILURE_TEXT } }],
        }
        assert.deepStrictEqual(spy.requests[1]!.prompt[3], failureResult)
        const settled = (yield* context.log.events("session-1")).find((stored) => stored.event.fact.kind === "tool_settled")!
        const raw = yield* context.log.readToolResult("session-1", settled.event.id)
        assert.deepStrictEqual(raw, { toolName: "dump", raw: { format: "text", value: "x".repeat(307_200) } })
        yield* context.log.close
        const engine = yield* reopen(context.file)
        const second = yield* engine.run(input(context, "And now?", tools, { model: spy.model }))
        assert.deepStrictEqual(second.outcome, { kind: "completed" })
        assert.deepStrictEqual(spy.requests[2]!.prompt[3], failureResult)
        assert.deepStrictEqual(spy.requests[2]!.prompt.slice(0, 4), spy.requests[1]!.prompt.slice(0, 4))
        assert.strictEqual(runs, 1)
      }),
    ))
})
