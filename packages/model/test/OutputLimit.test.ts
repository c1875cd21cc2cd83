/** The output limit's body field (`outputLimitField`), read on the request the scripted server received. */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { LanguageModel, ProviderConfig } from "@maka/model"
import { API_KEY, collect, request } from "./support.ts"

/** The limit fields of the body the server received for a config built by `configure`. */
const sentLimit = (configure: (server: ScriptedServer.ScriptedServer) => ProviderConfig.ProviderConfig) =>
  Effect.gen(function* () {
    const server = yield* ScriptedServer.make({ script: [Respond.sse(OpenAiSse.response({ text: ["ok"] }))] })
    const model = yield* LanguageModel.make(configure(server))
    const { error } = yield* collect(model.stream(request({ maxOutputTokens: 321 })))
    assert.strictEqual(error, undefined)
    const body = server.requests()[0]?.json as Record<string, unknown>
    return { max_tokens: body["max_tokens"], max_completion_tokens: body["max_completion_tokens"] }
  })

const base = (server: ScriptedServer.ScriptedServer): ProviderConfig.ProviderConfig => ({
  kind: "openai-compatible",
  baseUrl: `${server.url}/v1`,
  model: "m",
  apiKey: Redacted.make(API_KEY),
})

/** Sends to the scripted server while the configured base URL names `api.openai.com`. */
const viaOpenAiHost = (server: ScriptedServer.ScriptedServer, outputLimitField?: ProviderConfig.OutputLimitField) => ({
  ...base(server),
  baseUrl: "https://api.openai.com/v1",
  ...(outputLimitField === undefined ? {} : { outputLimitField }),
  fetch: (input: string, init: RequestInit) => fetch(input.replace("https://api.openai.com", server.url), init),
})

describe("outputLimitField", () => {
  it.effect("sends max_tokens to a host other than api.openai.com by default", () =>
    Effect.gen(function* () {
      assert.deepStrictEqual(yield* sentLimit(base), { max_tokens: 321, max_completion_tokens: undefined })
    }),
  )

  it.effect("sends max_completion_tokens to api.openai.com by default", () =>
    Effect.gen(function* () {
      assert.deepStrictEqual(yield* sentLimit((server) => viaOpenAiHost(server)), {
        max_tokens: undefined,
        max_completion_tokens: 321,
      })
    }),
  )

  it.effect("sends the field set explicitly, whatever the host", () =>
    Effect.gen(function* () {
      assert.deepStrictEqual(yield* sentLimit((server) => ({ ...base(server), outputLimitField: "max_completion_tokens" })), {
        max_tokens: undefined,
        max_completion_tokens: 321,
      })
      assert.deepStrictEqual(yield* sentLimit((server) => viaOpenAiHost(server, "max_tokens")), {
        max_tokens: 321,
        max_completion_tokens: undefined,
      })
    }),
  )

  it.effect("keeps providerOptions from replacing or adding the other limit field", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({ script: [Respond.sse(OpenAiSse.response({ text: ["ok"] }))] })
      const model = yield* LanguageModel.make(base(server))
      yield* collect(model.stream(request({ maxOutputTokens: 5, providerOptions: { max_tokens: 99, temperature: 0 } })))
      const body = server.requests()[0]?.json as Record<string, unknown>
      assert.strictEqual(body["max_tokens"], 5)
      assert.strictEqual(body["temperature"], 0)
    }),
  )

  it("enters the route identity only when set explicitly", () => {
    const config = { kind: "openai-compatible", baseUrl: "https://api.openai.com/v1", model: "m" } as const
    const implicit = ProviderConfig.routeIdentity(config)
    assert.strictEqual(implicit, ProviderConfig.routeIdentity({ ...config, outputLimitField: undefined }))
    const explicit = ProviderConfig.routeIdentity({ ...config, outputLimitField: "max_completion_tokens" })
    assert.notStrictEqual(explicit, implicit)
    assert.notStrictEqual(explicit, ProviderConfig.routeIdentity({ ...config, outputLimitField: "max_tokens" }))
    assert.deepStrictEqual(ProviderConfig.routeShape({ ...config, outputLimitField: "max_tokens" }), {
      ...config,
      outputLimitField: "max_tokens",
    })
  })

  it("is refused for Anthropic and when it names another field", () => {
    const anthropic = ProviderConfig.validate({
      kind: "anthropic",
      baseUrl: "https://api.anthropic.com",
      model: "m",
      apiKey: Redacted.make(""),
      outputLimitField: "max_tokens",
    })
    assert.strictEqual(anthropic._tag, "Failure")
    const other = ProviderConfig.validate({
      kind: "openai-compatible",
      baseUrl: "https://api.openai.com/v1",
      model: "m",
      apiKey: Redacted.make(""),
      outputLimitField: "max_output_tokens" as ProviderConfig.OutputLimitField,
    })
    assert.strictEqual(other._tag, "Failure")
  })
})
