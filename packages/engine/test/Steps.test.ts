import { assert, describe, it } from "@effect/vitest"
import { ToolCall } from "@maka/facts"
import { OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Effect, Schema } from "effect"
import { factsOf, kinds, recording, wireMessages } from "./support/harness.ts"
import { catalog, echoTool, input, setup, type Effects } from "./support/setup.ts"

const calls = (...items: ReadonlyArray<{ readonly id: string; readonly name: string; readonly input: string }>) =>
  Respond.sse(OpenAiSse.response({ toolCalls: items.map((item) => ({ id: item.id, name: item.name, arguments: [item.input] })) }))

const answer = (text: string) => Respond.sse(OpenAiSse.response({ text: [text] }))

const recordingTool = (effects: Effects, name: string, semantics: Tool.Semantics) =>
  Tool.make({
    name,
    description: `The ${semantics} tool ${name}.`,
    input: Schema.Struct({ note: Schema.String }),
    semantics,
    execute: () =>
      Effect.sync(() => {
        effects.ran.push(name)
        return Tool.text(`${name} done`)
      }),
  })

describe("the step loop", () => {
  it.live("rejects schema-invalid input with its decode message, shown to the model as error-text (scenario 16)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [calls({ id: "call-1", name: "echo", input: '{"value":5}' }), answer("The input was wrong.")],
        })
        const effects: Effects = { ran: [] }
        const spy = recording(context.model)
        const result = yield* context.engine.run(input(context, "Echo five.", catalog(effects), { model: spy.model }))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_rejected:invalid_input",
          "model_requested",
          "model_completed",
          "invocation_ended:completed",
        ])
        const rejection = factsOf(events, "tool_rejected")[0]!
        assert.strictEqual(rejection.reason.kind, "invalid_input")
        const message = rejection.reason.kind === "invalid_input" ? rejection.reason.message : ""
        assert.isTrue(message.startsWith('Invalid input for tool "echo": '))
        assert.include(message, "value")
        assert.deepStrictEqual(effects.ran, [])
        assert.deepStrictEqual(factsOf(events, "tool_dispatched"), [])
        // The model reads the decode message as an error result of the call.
        const tool = spy.requests[1]!.prompt.find((item) => item.role === "tool")
        assert.deepStrictEqual(tool, {
          role: "tool",
          results: [{ toolCallId: "call-1", toolName: "echo", output: { type: "error-text", value: message } }],
        })
        const wire = wireMessages(context.server, 1).find((item) => item.role === "tool")
        assert.strictEqual(wire?.content, message)
      }),
    ))

  it.live("rejects a parallel call after an exclusive_step call as exclusive_conflict and runs the first (scenario 15)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            calls({ id: "call-1", name: "migrate", input: '{"note":"n"}' }, { id: "call-2", name: "echo", input: '{"value":"after"}' }),
            answer("Migrated."),
          ],
        })
        const effects: Effects = { ran: [] }
        const tools = ToolCatalog.make([recordingTool(effects, "migrate", "exclusive_step"), echoTool(effects)])
        const spy = recording(context.model)
        const result = yield* context.engine.run(input(context, "Migrate.", tools, { model: spy.model }))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_settled:succeeded",
          "tool_rejected:exclusive_conflict",
          "model_requested",
          "model_completed",
          "invocation_ended:completed",
        ])
        assert.deepStrictEqual(effects.ran, ["migrate"])
        assert.deepStrictEqual(
          factsOf(events, "tool_dispatched").map((fact) => fact.name),
          ["migrate"],
        )
        assert.deepStrictEqual(spy.requests[1]!.prompt.find((item) => item.role === "tool"), {
          role: "tool",
          results: [
            { toolCallId: "call-1", toolName: "migrate", output: { type: "text", value: "migrate done" } },
            {
              toolCallId: "call-2",
              toolName: "echo",
              output: { type: "error-text", value: ToolCall.rejectionText({ kind: "exclusive_conflict" }) },
            },
          ],
        })
      }),
    ))

  it.live("completes after a finish_turn tool settles, with no further model request (scenario 20)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [calls({ id: "call-1", name: "finish", input: '{"note":"n"}' }), answer("never sent")] })
        const effects: Effects = { ran: [] }
        const tools = ToolCatalog.make([recordingTool(effects, "finish", "finish_turn"), echoTool(effects)])
        const result = yield* context.engine.run(input(context, "Finish.", tools))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(kinds(yield* context.log.events("session-1")), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_settled:succeeded",
          "invocation_ended:completed",
        ])
        assert.deepStrictEqual(effects.ran, ["finish"])
        assert.strictEqual(context.server.requests().length, 1)
      }),
    ))

  it.live("keeps going after a finish_turn call that failed, asking the model again", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [calls({ id: "call-1", name: "finish", input: '{"note":"n"}' }), answer("Could not finish.")] })
        const failing = Tool.make({
          name: "finish",
          description: "Fails to finish.",
          input: Schema.Struct({ note: Schema.String }),
          semantics: "finish_turn",
          execute: () => Tool.fail("not yet"),
        })
        const result = yield* context.engine.run(input(context, "Finish.", ToolCatalog.make([failing])))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.strictEqual(context.server.requests().length, 2)
        assert.deepStrictEqual(kinds(yield* context.log.events("session-1")).slice(3, 5), ["tool_dispatched", "tool_settled:failed"])
      }),
    ))
})
