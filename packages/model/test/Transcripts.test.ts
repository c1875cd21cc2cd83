/**
 * Recorded wire transcripts (written from each provider's documented streaming format), replayed byte
 * for byte by the scripted server and normalised into the expected `ModelStep`. Each `NAME.sse` has a
 * `NAME.step.json` beside it; `$ROUTE` stands for the model's route identity.
 */
import { assert, describe, it } from "@effect/vitest"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { Effect, Redacted, Result } from "effect"
import { Respond, ScriptedServer } from "@maka/testkit"
import { LanguageModel, StepBuilder } from "@maka/model"
import { collect, request } from "./support.ts"

const directory = join(import.meta.dirname, "transcripts")
const names = readdirSync(directory)
  .filter((file) => file.endsWith(".sse"))
  .map((file) => file.slice(0, -".sse".length))
  .sort()

const PROVIDER_URL = { "openai-compatible": "https://api.provider.example/v1", anthropic: "https://api.anthropic.com" } as const

describe("recorded transcripts", () => {
  it("cover OpenAI, DeepSeek reasoning, OpenRouter reasoning, vLLM, Ollama and Anthropic", () => {
    assert.deepStrictEqual(names, ["anthropic", "deepseek-reasoning", "ollama", "openai", "openrouter-reasoning", "vllm"])
  })

  for (const name of names) {
    it.effect(`normalises ${name} into its expected step`, () =>
      Effect.gen(function* () {
        const wire = readFileSync(join(directory, `${name}.sse`), "utf8")
        const expected: { readonly kind: "openai-compatible" | "anthropic"; readonly step: unknown } = JSON.parse(
          readFileSync(join(directory, `${name}.step.json`), "utf8"),
        )
        // Written in small uneven pieces so events straddle reads.
        const pieces = wire.match(/[\s\S]{1,97}/g) ?? []
        const server = yield* ScriptedServer.make({ script: [Respond.sse(pieces.map((piece) => Respond.raw(piece)))] })
        const baseUrl = PROVIDER_URL[expected.kind]
        const model = yield* LanguageModel.make({
          kind: expected.kind,
          baseUrl,
          model: "transcript",
          apiKey: Redacted.make("sk-transcript"),
          // The route stays the provider's; the bytes come from the local server.
          fetch: (input, init) => fetch(input.replace(baseUrl, server.url), init),
        })
        const { events, error } = yield* collect(model.stream(request()))
        assert.strictEqual(error, undefined, error?.message)
        const step = StepBuilder.fold("step-1", events)
        if (Result.isFailure(step)) return assert.fail(step.failure.message)
        const wanted = JSON.parse(JSON.stringify(expected.step).replaceAll("$ROUTE", model.routeIdentity))
        assert.deepStrictEqual(step.success, wanted)
      }),
    )
  }
})
