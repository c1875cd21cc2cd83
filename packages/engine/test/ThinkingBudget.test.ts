/**
 * The main request's output cap reserves an Anthropic thinking budget (docs/engine.md §5.5): under a
 * model context window, what the window has left after the last main request's usage and the output
 * reserve is also left for the `budget_tokens` of `providerOptions.thinking`, when that is a positive
 * safe integer inside an object, and only on an Anthropic route. Real SQLite file, the scripted
 * server on loopback; the cap is read from the wire request (`max_tokens`).
 */
import { assert, describe, it } from "@effect/vitest"
import type { Identity } from "@maka/facts"
import { Limits } from "@maka/facts"
import { LanguageModel } from "@maka/model"
import { AnthropicSse, FactBuilders, OpenAiSse, Respond } from "@maka/testkit"
import { ToolCatalog } from "@maka/tools"
import { Effect, Redacted } from "effect"
import { echoTool, input, setup, type Effects } from "./support/setup.ts"

const WINDOW = 40_000
const LIMIT = 30_000
const INPUT_TOKENS = 1_000
const OUTPUT_TOKENS = 100
/** The window left after the first step's usage and the output reserve. */
const LEFT = WINDOW - INPUT_TOKENS - OUTPUT_TOKENS - Limits.OUTPUT_RESERVE

const anthropicStep = () => [
  Respond.sse(
    AnthropicSse.response({
      toolUses: [{ id: "call-1", name: "echo", json: ['{"value":"a"}'] }],
      inputUsage: { input_tokens: INPUT_TOKENS, output_tokens: 1 },
      outputUsage: { output_tokens: OUTPUT_TOKENS },
    }),
  ),
  Respond.sse(AnthropicSse.response({ text: ["Done."] })),
]

const openAiStep = () => [
  Respond.sse(
    OpenAiSse.response({
      toolCalls: [{ id: "call-1", name: "echo", arguments: ['{"value":"a"}'] }],
      usage: { prompt_tokens: INPUT_TOKENS, completion_tokens: OUTPUT_TOKENS, total_tokens: INPUT_TOKENS + OUTPUT_TOKENS },
    }),
  ),
  Respond.sse(OpenAiSse.response({ text: ["Done."] })),
]

/** The thinking options tried, and the budget the cap must reserve for each (0: none). */
const CASES: ReadonlyArray<{ readonly thinking: Identity.Json; readonly reserved: number }> = [
  { thinking: { type: "enabled", budget_tokens: 4_000 }, reserved: 4_000 },
  { thinking: { type: "enabled", budget_tokens: 1 }, reserved: 1 },
  { thinking: { type: "enabled", budget_tokens: 0 }, reserved: 0 },
  { thinking: { type: "enabled", budget_tokens: -4_000 }, reserved: 0 },
  { thinking: { type: "enabled", budget_tokens: 2_000.5 }, reserved: 0 },
  { thinking: { type: "enabled", budget_tokens: 2 ** 60 }, reserved: 0 },
  { thinking: { type: "enabled", budget_tokens: "4000" }, reserved: 0 },
  { thinking: { type: "enabled" }, reserved: 0 },
  { thinking: null, reserved: 0 },
  { thinking: [4_000], reserved: 0 },
  { thinking: "enabled", reserved: 0 },
]

const maxTokens = (body: unknown, field: string): unknown => (body as Record<string, unknown>)[field]

describe("the main request's output cap", () => {
  it.live("reserves a valid Anthropic thinking budget within the model context window, and nothing for any other value", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: CASES.flatMap(anthropicStep) })
        const model = yield* LanguageModel.make({
          kind: "anthropic",
          baseUrl: context.server.url,
          model: "test-model",
          apiKey: Redacted.make("sk-test-secret"),
        })
        const effects: Effects = { ran: [] }
        for (const [index, { thinking, reserved }] of CASES.entries()) {
          const result = yield* context.engine.run(
            input(context, "Echo a.", ToolCatalog.make([echoTool(effects)]), {
              model,
              providerOptions: { thinking },
              mainOutputLimit: LIMIT,
              context: { providerId: "anthropic", modelContextWindow: WINDOW },
            }),
          )
          assert.deepStrictEqual(result.outcome, { kind: "completed" }, JSON.stringify(thinking))
          const second = context.server.requests()[2 * index + 1]!.json
          assert.strictEqual(maxTokens(second, "max_tokens"), Math.min(LEFT - reserved, LIMIT), JSON.stringify(thinking))
        }
      }),
    ))

  it.live("reserves nothing for the same thinking option on another route", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: openAiStep() })
        const effects: Effects = { ran: [] }
        const result = yield* context.engine.run(
          input(context, "Echo a.", ToolCatalog.make([echoTool(effects)]), {
            providerOptions: { thinking: { type: "enabled", budget_tokens: 4_000 } },
            mainOutputLimit: LIMIT,
            context: { providerId: "openai-compatible", modelContextWindow: WINDOW },
          }),
        )
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const second = context.server.requests()[1]!.json as Record<string, unknown>
        assert.strictEqual(second["max_tokens"] ?? second["max_completion_tokens"], Math.min(LEFT, LIMIT))
      }),
    ))

  it.live("caps the output by the last main usage also when the configuration binds no model", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: openAiStep() })
        const effects: Effects = { ran: [] }
        const result = yield* context.engine.run(
          input(context, "Echo a.", ToolCatalog.make([echoTool(effects)]), {
            configuration: (({ model: _bound, ...unbound }) => unbound)(FactBuilders.configuration({ cwd: context.workspace })),
            mainOutputLimit: LIMIT,
            context: { providerId: "openai-compatible", modelContextWindow: WINDOW },
          }),
        )
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const second = context.server.requests()[1]!.json as Record<string, unknown>
        assert.strictEqual(second["max_tokens"] ?? second["max_completion_tokens"], Math.min(LEFT, LIMIT))
      }),
    ))
})
