/**
 * Edges of the step loop (docs/engine.md §5.4, §5.11): a run cancelled during its last allowed step
 * ends `cancelled`, not at the step limit; and a run under the prior-unknown policy archives no
 * large result after its tool batches (pruning is left to the next ordinary run) and makes no
 * automatic summary. Real SQLite file, the scripted server on loopback.
 */
import { assert, describe, it } from "@effect/vitest"
import { OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Deferred, Effect, Schema } from "effect"
import { answer, isSummaryRequest, mainEntry, summaryAnswer, summaryEntry, summaryText } from "./support/compaction.ts"
import { factsOf, kinds, slowTool } from "./support/harness.ts"
import { input, setup } from "./support/setup.ts"

/** A tool whose every call ends with its outcome unknown. */
const unsureTool = Tool.make({
  name: "unsure",
  description: "Cannot tell whether it acted.",
  input: Schema.Struct({ value: Schema.String }),
  semantics: "parallel",
  execute: () => Effect.fail(new Tool.ToolOutcomeUnknown({ message: "the remote side went silent" })),
})

const call = (id: string, name: string) =>
  mainEntry(Respond.sse(OpenAiSse.response({ toolCalls: [{ id, name, arguments: ['{"value":"v"}'] }] })))

describe("the step loop's edges", () => {
  it.live("a run cancelled while its last allowed step's tool runs ends cancelled, not at the step limit", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [call("call-1", "slow")] })
        const started = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const slow = slowTool(started, release)
        const running = yield* context.engine.start(input(context, "Run slow.", ToolCatalog.make([slow]), { maxSteps: 1 }))
        yield* Deferred.await(started)
        yield* running.cancel
        yield* Deferred.succeed(release, undefined)
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        assert.strictEqual(kinds(yield* context.log.events("session-1")).at(-1), "invocation_ended:cancelled")
      }),
    ))

  it.live("a run under the prior-unknown policy archives no large result after its tool batch", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [call("call-u", "unsure"), call("call-b", "big"), mainEntry(answer("Read it."))] })
        const catalog = ToolCatalog.make([
          unsureTool,
          Tool.make({
            name: "big",
            description: "Returns a result of several pages.",
            input: Schema.Struct({ value: Schema.String }),
            semantics: "parallel",
            execute: () => Effect.succeed(Tool.text(`START ${"r".repeat(30_000)} END`)),
          }),
        ])
        const first = yield* context.engine.run(input(context, "Try it.", catalog))
        assert.strictEqual(first.outcome.kind === "failed" ? first.outcome.class : first.outcome.kind, "outcome_unknown")
        const second = yield* context.engine.run(input(context, "Go on.", catalog, { allowPriorUnknown: true }))
        assert.deepStrictEqual(second.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        assert.strictEqual(factsOf(events, "tool_settled").length, 1)
        assert.deepStrictEqual(factsOf(events, "tool_result_archived"), [])
      }),
    ))

  it.live("a run under the prior-unknown policy makes no automatic summary, even when one is due", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const unsureCall = mainEntry(
          Respond.sse(
            OpenAiSse.response({
              toolCalls: [{ id: "call-u", name: "unsure", arguments: ['{"value":"v"}'] }],
              usage: { prompt_tokens: 5_000, completion_tokens: 5, total_tokens: 5_005 },
            }),
          ),
        )
        const context = yield* setup({
          script: [unsureCall, summaryEntry(summaryAnswer(summaryText("never adopted"))), mainEntry(answer("Noted.", 5_000))],
        })
        const catalog = ToolCatalog.make([unsureTool])
        const windowed = { context: { providerId: "openai-compatible", declaredWindow: 1_000 } }
        const first = yield* context.engine.run(input(context, "Try it.", catalog, windowed))
        assert.strictEqual(first.outcome.kind === "failed" ? first.outcome.class : first.outcome.kind, "outcome_unknown")
        const second = yield* context.engine.run(input(context, "Go on.", catalog, { allowPriorUnknown: true, ...windowed }))
        assert.deepStrictEqual(second.outcome, { kind: "completed" })
        assert.deepStrictEqual(context.server.requests().map(isSummaryRequest), [false, false])
      }),
    ))
})
