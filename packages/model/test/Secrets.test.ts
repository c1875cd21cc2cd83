/** Credentials never reach an error message; an idle timeout while reading an error body stays `timed_out`. */
import { assert, describe, it } from "@effect/vitest"
import * as http from "node:http"
import { Effect, Fiber, Redacted, Result } from "effect"
import { AnthropicSse, OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { LanguageModel, ModelDefaults, ProviderConfig, StepBuilder } from "@maka/model"
import { advanceUntilDone, collect, failureOf, providerReason, request } from "./support.ts"

describe("secrets in errors", () => {
  it.effect("scrubs a Redacted header value echoed by the provider", () =>
    Effect.gen(function* () {
      const token = "tok-SECRET-123456"
      const server = yield* ScriptedServer.make({
        script: [Respond.json(401, { error: { message: `bad token ${token}` } })],
      })
      const model = yield* LanguageModel.make({
        kind: "openai-compatible",
        baseUrl: `${server.url}/v1`,
        model: "m",
        apiKey: Redacted.make(""),
        headers: { "x-auth": Redacted.make(token) },
      })
      const error = yield* failureOf(model.stream(request()))
      assert.isFalse(error.message.includes(token))
      assert.isTrue(error.message.includes("[redacted]"))
    }),
  )

  it.effect("scrubs the token of a Redacted authorization value (Bearer TOKEN) echoed without its scheme, in errors and in answers", () =>
    Effect.gen(function* () {
      const token = "tok-ZZZZ9999YYYY8888XXXX"
      const server = yield* ScriptedServer.make({
        script: [
          Respond.json(401, { error: { message: `Incorrect API key provided: ${token}.` } }),
          Respond.sse(OpenAiSse.response({ text: ["your token is tok-ZZZZ9999", "YYYY8888XXXX, keep it"] })),
        ],
      })
      const model = yield* LanguageModel.make({
        kind: "openai-compatible",
        baseUrl: `${server.url}/v1`,
        model: "m",
        apiKey: Redacted.make(""),
        headers: { Authorization: Redacted.make(`Bearer ${token}`) },
      })
      const error = yield* failureOf(model.stream(request()))
      assert.strictEqual(error.reason._tag === "Provider" ? error.reason.message.includes(token) : true, false)
      // A credential without a digit is a secret as any is.
      const letters = "abcdefghijklmnopQRSTUVWXyzabcdEF"
      const plain = yield* ScriptedServer.make({ script: [Respond.json(401, { error: { message: `credential ${letters} was refused` } })] })
      const basic = yield* LanguageModel.make({
        kind: "openai-compatible",
        baseUrl: `${plain.url}/v1`,
        model: "m",
        apiKey: Redacted.make(""),
        headers: { Authorization: Redacted.make(`Basic ${letters}`) },
      })
      assert.include((yield* failureOf(basic.stream(request()))).message, "credential [redacted] was refused")
      // A placeholder after the scheme (a header built from an unset variable) is no secret: text keeps it.
      const unset = yield* ScriptedServer.make({ script: [Respond.json(400, { error: { message: "value undefined is not allowed" } })] })
      const blank = yield* LanguageModel.make({
        kind: "openai-compatible",
        baseUrl: `${unset.url}/v1`,
        model: "m",
        apiKey: Redacted.make(""),
        headers: { Authorization: Redacted.make("Bearer undefined") },
      })
      assert.include((yield* failureOf(blank.stream(request()))).message, "value undefined is not allowed")
      assert.include(error.message, "Incorrect API key provided: [redacted].")
      const { events } = yield* collect(model.stream(request()))
      const text = events.flatMap((event) => (event.kind === "part_delta" ? [event.text] : [])).join("")
      assert.strictEqual(text, "your token is [redacted], keep it")
    }),
  )

  it.effect("treats a credential header given as plain text (authorization, x-api-key) as a secret, which replaces the key's header", () =>
    Effect.gen(function* () {
      const token = "PLAIN-HEADER-TOKEN-123456"
      for (const [name, kind] of [["Authorization", "openai-compatible"], ["X-Api-Key", "anthropic"]] as const) {
        const server = yield* ScriptedServer.make({ script: [Respond.json(401, { error: { message: `bad credential ${token}` } })] })
        const model = yield* LanguageModel.make({
          kind,
          baseUrl: kind === "anthropic" ? server.url : `${server.url}/v1`,
          model: "m",
          apiKey: Redacted.make("sk-unsent-key-0000"),
          headers: { [name]: name === "Authorization" ? `Bearer ${token}` : token },
        })
        const error = yield* failureOf(model.stream(request()))
        assert.notInclude(error.message, token, name)
        assert.include(error.message, "bad credential [redacted]", name)
        assert.deepStrictEqual(
          (model.secrets ?? []).map((secret) => Redacted.value(secret)),
          ["sk-unsent-key-0000", name === "Authorization" ? `Bearer ${token}` : token],
        )
      }
    }),
  )

  it.effect("scrubs a key that a long provider message would cut in half", () =>
    Effect.gen(function* () {
      const key = "sk-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
      const server = yield* ScriptedServer.make({
        script: [Respond.json(401, { error: { message: `${"x".repeat(990)} ${key}` } })],
      })
      const model = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make(key) })
      const error = yield* failureOf(model.stream(request()))
      assert.isFalse(error.message.includes("sk-ABCDEF"))
    }),
  )

  it.effect("leaves no start of a key that the error body's size limit cut in half", () =>
    Effect.gen(function* () {
      const key = "sk-SECRETKEY-abcdef0123456789"
      // The body is read up to its limit: the cut falls 20 characters into the key.
      const padding = " ".repeat(ModelDefaults.ModelDefaults.maxErrorBodyBytes - 20)
      const server = yield* ScriptedServer.make({
        script: [Respond.json(400, `${padding}${key} trailing`, { "content-type": "text/plain" })],
      })
      const model = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make(key) })
      const error = yield* failureOf(model.stream(request()))
      assert.isFalse(error.message.includes("sk-SE"), error.message)
      assert.include(error.message, "HTTP 400: [redacted]")
      assert.notInclude(error.message, "trailing")
    }),
  )

  it.effect("never follows a redirect: the key and the prompt reach no other address, and the 3xx is a rejection", () =>
    Effect.gen(function* () {
      const listen = (handler: http.RequestListener) =>
        Effect.acquireRelease(
          Effect.promise(
            () =>
              new Promise<http.Server>((resolve) => {
                const server = http.createServer(handler)
                server.listen(0, "127.0.0.1", () => resolve(server))
              }),
          ),
          (server) => Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve()))),
        )
      const urlOf = (server: http.Server) => `http://127.0.0.1:${(server.address() as { port: number }).port}`
      const elsewhere: Array<string> = []
      const other = yield* listen((incoming, response) => {
        elsewhere.push(JSON.stringify(incoming.headers))
        response.writeHead(200, { "content-type": "text/event-stream" }).end("data: [DONE]\n\n")
      })
      let status = 307
      let asked = 0
      const redirecting = yield* listen((incoming, response) => {
        asked++
        incoming.resume()
        response.writeHead(status, { location: `${urlOf(other)}/v1/messages` }).end()
      })
      const key = "sk-REDIRECT-0123456789"
      for (const kind of ["anthropic", "openai-compatible"] as const) {
        for (const hostFetch of [globalThis.fetch, undefined]) {
          for (const code of [301, 302, 307, 308]) {
            status = code
            const before = asked
            const model = yield* LanguageModel.make({
              kind,
              baseUrl: kind === "anthropic" ? urlOf(redirecting) : `${urlOf(redirecting)}/v1`,
              model: "m",
              apiKey: Redacted.make(key),
              ...(hostFetch === undefined ? {} : { fetch: hostFetch }),
            })
            const reason = providerReason(yield* failureOf(model.stream(request())))
            const label = `${kind} ${hostFetch === undefined ? "own client" : "host fetch"} ${code}`
            assert.strictEqual(reason.reason, "rejected", label)
            assert.strictEqual(reason.status, code, label)
            assert.include(reason.message, "redirect, which is not followed", label)
            assert.strictEqual(asked - before, 1, label)
          }
        }
      }
      assert.deepStrictEqual(elsewhere, [])
    }),
  )

  it("refuses a base URL that carries credentials", () => {
    const checked = ProviderConfig.validate({
      kind: "openai-compatible",
      baseUrl: "http://user:hunter2@127.0.0.1:9/v1",
      model: "m",
      apiKey: Redacted.make(""),
    })
    assert.isTrue(Result.isFailure(checked))
    assert.isFalse(Result.isFailure(checked) && checked.failure.includes("hunter2"))
  })

  it("refuses a base URL on a port fetch never connects to, unless the configuration brings its own fetch", () => {
    const base = { kind: "openai-compatible", model: "m", apiKey: Redacted.make("") } as const
    const refused = ProviderConfig.validate({ ...base, baseUrl: "http://127.0.0.1:6000/v1" })
    assert.isTrue(Result.isFailure(refused) && refused.failure.includes("port 6000"))
    assert.isTrue(Result.isSuccess(ProviderConfig.validate({ ...base, baseUrl: "http://127.0.0.1:6000/v1", fetch: globalThis.fetch })))
    assert.isTrue(Result.isSuccess(ProviderConfig.validate({ ...base, baseUrl: "http://127.0.0.1:6001/v1" })))
    assert.isTrue(Result.isFailure(ProviderConfig.validate({ ...base, baseUrl: "https://example.invalid:10080" })))
  })

  it("lists exactly the ports this Node's fetch refuses before connecting", async () => {
    const refusedBy = async (port: number) => {
      try {
        await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(2_000) })
        return false
      } catch (error) {
        return String((error as { readonly cause?: { readonly message?: unknown } }).cause?.message) === "bad port"
      }
    }
    for (const port of ProviderConfig.FETCH_BAD_PORTS) assert.isTrue(await refusedBy(port), `port ${port}`)
    // Neighbours of the list are not refused for being bad (nothing listens there: a refused connection).
    for (const port of [2, 8, 5062, 6001, 10081]) assert.isFalse(await refusedBy(port), `port ${port}`)
  })

  it("refuses a key or header value no HTTP header can carry, without showing it", () => {
    const base = { kind: "openai-compatible", baseUrl: "http://127.0.0.1:8080/v1", model: "m" } as const
    const controls = ["sk-\u0001hunter2", "sk-hunter2\u007f", "sk-\u001bhunter2"]
    for (const bad of ["sk-\nhunter2", "sk-hunter2\r\nX-Other: 1", "sk-\u0000hunter2", "sk-hunter2\u2028", "sk-hunter2🙂", ...controls]) {
      const key = ProviderConfig.validate({ ...base, apiKey: Redacted.make(bad) })
      assert.isTrue(Result.isFailure(key), JSON.stringify(bad))
      if (Result.isFailure(key)) {
        assert.strictEqual(key.failure, `apiKey ${ProviderConfig.NOT_A_HEADER_VALUE}`)
      }
      const header = ProviderConfig.validate({ ...base, apiKey: Redacted.make(""), headers: { "x-token": Redacted.make(bad) } })
      assert.isTrue(Result.isFailure(header) && header.failure === `header x-token ${ProviderConfig.NOT_A_HEADER_VALUE}`, JSON.stringify(bad))
      assert.isTrue(Result.isFailure(ProviderConfig.validate({ ...base, apiKey: Redacted.make(""), headers: { "x-plain": bad } })))
    }
    // Latin-1, and line breaks at the ends (fetch trims them), pass as fetch sends them.
    for (const good of ["sk-ABCdef_0123-xyz", "clé", "a b\tc", "sk-hunter2\n", "\r\n sk-hunter2 \t"]) {
      assert.isTrue(Result.isSuccess(ProviderConfig.validate({ ...base, apiKey: Redacted.make(good) })), good)
    }
  })
})

describe("idle timeout while reading an error body", () => {
  it.effect("is timed_out, not a provider error classified from half a body", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [
          Respond.sse([Respond.raw('{"error":{"message":"over')], {
            status: 503,
            headers: { "content-type": "application/json" },
            end: "stall",
          }),
        ],
      })
      const model = yield* LanguageModel.make(
        { kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make("") },
        { idleTimeoutMs: 1000 },
      )
      const fiber = yield* Effect.forkChild(failureOf(model.stream(request())))
      yield* ScriptedServer.awaitRequest(server, 0)
      yield* advanceUntilDone(fiber, 1000)
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error.reason._tag, "TimedOut")
    }),
  )
})

describe("StepBuilder", () => {
  it("refuses an unknown finish reason", () => {
    const folded = StepBuilder.fold("s", [
      // An adapter never emits this; a hand-written LanguageModel might.
      JSON.parse('{"kind":"finished","reason":"content_filter","usage":{}}'),
    ])
    assert.isTrue(Result.isFailure(folded))
  })
})

describe("observed output", () => {
  it.effect("counts buffered tool-call fragments before an overflow error", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [
          Respond.sse([
            Respond.event({ id: "c", choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "c1", function: { name: "f", arguments: '{"a"' } }] } }] }),
            Respond.event({ error: { message: "too long", code: "context_length_exceeded" } }),
          ]),
        ],
      })
      const model = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make("") })
      const error = yield* failureOf(model.stream(request()))
      assert.strictEqual(error.reason._tag, "ContextOverflow")
      assert.isTrue(error.reason._tag === "ContextOverflow" && error.reason.observedOutput)
    }),
  )
})

describe("secrets in the form actually sent", () => {
  // Characters that JSON-escaping and URL-encoding change; the trailing newline is what a key read
  // from a file carries, and what Node trims from the header value it sends.
  const KEY = 'sk-Test/Key+Value="x\\y"-0123456789'
  const forms = [KEY, JSON.stringify(KEY).slice(1, -1), encodeURIComponent(KEY)]

  it.effect("scrubs the key as sent (trimmed), JSON-escaped and URL-encoded from every error message", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [
          // The server echoes the authorization header it received, in each encoding.
          { respond: Respond.json(401, `invalid key ${KEY}`, { "content-type": "text/plain" }) },
          { respond: Respond.json(401, `{"error":{"message":"bad","detail":"${JSON.stringify(KEY).slice(1, -1)}"}}`) },
          { respond: Respond.json(401, `{"error":{"message":"invalid key ${JSON.stringify(KEY).slice(1, -1)}"}}`) },
          { respond: Respond.json(403, `denied for ${encodeURIComponent(KEY)}`, { "content-type": "text/plain" }) },
          { respond: Respond.sse([Respond.event({ error: { message: `key ${KEY} revoked`, type: "auth" } })]) },
        ],
      })
      const model = yield* LanguageModel.make({
        kind: "openai-compatible",
        baseUrl: `${server.url}/v1`,
        model: "m",
        apiKey: Redacted.make(`${KEY}\n`),
      })
      for (let index = 0; index < 5; index++) {
        const error = yield* failureOf(model.stream(request()))
        for (const form of forms) assert.notInclude(error.message, form, `response ${index}`)
        assert.notInclude(error.message, "Key+Value", `response ${index}`)
        assert.notInclude(error.message, "Key%2BValue", `response ${index}`)
      }
      // The key was sent trimmed, as Node sends header values.
      assert.strictEqual(server.requests()[0]?.headers["authorization"], `Bearer ${KEY}`)
    }),
  )

  it("refuses a base URL ending in a blank: fetch trims it, the route identity would keep it", () => {
    for (const blank of [" ", "\t", "\r\n"]) {
      const checked = ProviderConfig.validate({ kind: "openai-compatible", baseUrl: `https://example.com/v1${blank}`, model: "m", apiKey: Redacted.make("") })
      assert.deepStrictEqual(checked, Result.fail("baseUrl must not end with a space, tab or line break"))
    }
  })

  it("refuses a base URL with any query string or fragment, without echoing it", () => {
    for (const suffix of ["?key=abc123secret", "?api_key=abc123secret", "?token=abc123secret", "?api-version=2024-01-01", "#abc123secret"]) {
      const checked = ProviderConfig.validate({
        kind: "openai-compatible",
        baseUrl: `https://example.com/v1${suffix}`,
        model: "m",
        apiKey: Redacted.make(""),
      })
      assert.isTrue(Result.isFailure(checked), suffix)
      assert.isFalse(Result.isFailure(checked) && checked.failure.includes("abc123secret"), suffix)
    }
  })
})

describe("provider tool-call ids", () => {
  const long = "c".repeat(513)

  it.effect("an OpenAI tool-call id over 512 UTF-16 units is an adapter error", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [Respond.sse(OpenAiSse.response({ toolCalls: [{ id: long, name: "f", arguments: ["{}"] }] }))],
      })
      const model = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make("") })
      const error = yield* failureOf(model.stream(request()))
      assert.strictEqual(error.reason._tag, "Adapter")
      assert.strictEqual(error.reason.message, "invalid tool call id")
    }),
  )

  it.effect("an Anthropic tool-use id over 512 UTF-16 units, or not well-formed, is an adapter error", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [
          Respond.sse(AnthropicSse.response({ toolUses: [{ id: long, name: "f", json: ["{}"] }] })),
          Respond.sse(AnthropicSse.response({ toolUses: [{ id: "toolu_\ud800", name: "f", json: ["{}"] }] })),
        ],
      })
      const model = yield* LanguageModel.make({ kind: "anthropic", baseUrl: server.url, model: "m", apiKey: Redacted.make("") })
      for (let index = 0; index < 2; index++) {
        const error = yield* failureOf(model.stream(request()))
        assert.strictEqual(error.reason._tag, "Adapter")
        assert.strictEqual(error.reason.message, "invalid tool call id")
      }
    }),
  )
})

describe("provider tool-call names", () => {
  const unstorable = ["ec\u0000ho", "", "f\ud800", "n".repeat(513)]

  it.effect("a tool-call name no fact can hold (NUL, empty, a lone surrogate, over 512 units) is an adapter error, on both routes", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [
          ...unstorable.map((name) =>
            Respond.sse([OpenAiSse.role(), OpenAiSse.toolCall({ index: 0, id: "call_a", name, arguments: "{}" }), OpenAiSse.finish("tool_calls"), OpenAiSse.done()]),
          ),
          ...unstorable.map((name) => Respond.sse(AnthropicSse.response({ toolUses: [{ id: "toolu_a", name, json: ["{}"] }] }))),
          // At the end of a body without [DONE] too.
          Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call_a", name: "a\u0000b", arguments: ["{}"] }], done: false })),
        ],
      })
      const openAi = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make("") })
      const anthropic = yield* LanguageModel.make({ kind: "anthropic", baseUrl: server.url, model: "m", apiKey: Redacted.make("") })
      const messages: Array<string> = []
      for (const model of [openAi, anthropic]) {
        for (const _ of unstorable) messages.push((yield* failureOf(model.stream(request()))).reason.message)
      }
      messages.push((yield* failureOf(openAi.stream(request()))).reason.message)
      // OpenAI reads an empty name as a name not yet sent: its call has none.
      assert.deepStrictEqual(messages, [
        "invalid tool call name",
        "invalid tool call: missing name",
        "invalid tool call name",
        "invalid tool call name",
        ...unstorable.map(() => "invalid tool call name"),
        "invalid tool call name",
      ])
    }),
  )

  it.effect("a name of 512 units, or one the catalog lacks, is recorded for the engine to reject", () =>
    Effect.gen(function* () {
      const name = "n".repeat(512)
      const server = yield* ScriptedServer.make({
        script: [Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call_a", name, arguments: ["{}"] }] }))],
      })
      const model = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make("") })
      const { events, error } = yield* collect(model.stream(request()))
      assert.isUndefined(error)
      const built = StepBuilder.fold("step-1", events)
      assert.deepStrictEqual(
        Result.isSuccess(built) ? built.success.parts.map((part) => (part.kind === "tool_call" ? part.name : part.kind)) : built,
        [name],
      )
    }),
  )
})

describe("tool-call ids the adapter gives", () => {
  it.effect("a call sent without an id gets call_{index}, or call_{index}_{n} when another call holds that", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [
          Respond.sse([
            OpenAiSse.role(),
            OpenAiSse.toolCall({ index: 0, id: "call_1", name: "f", arguments: "{}" }),
            OpenAiSse.toolCall({ index: 1, name: "g", arguments: "{}" }),
            OpenAiSse.toolCall({ index: 2, name: "h", arguments: "{}" }),
            OpenAiSse.toolCall({ index: 3, id: "call_2_1", name: "i", arguments: "{}" }),
            OpenAiSse.finish("tool_calls"),
            OpenAiSse.done(),
          ]),
        ],
      })
      const model = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make("") })
      const { events, error } = yield* collect(model.stream(request()))
      assert.isUndefined(error)
      assert.deepStrictEqual(
        events.flatMap((event) => (event.kind === "tool_call" ? [`${event.name}:${event.id}`] : [])),
        ["f:call_1", "g:call_1_1", "h:call_2", "i:call_2_1"],
      )
    }),
  )
})

describe("provider tool-call ids at the end of the body", () => {
  it.effect("an over-long id in a stream that ends without [DONE] is an adapter error", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "c".repeat(513), name: "f", arguments: ["{}"] }], done: false }))],
      })
      const model = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make("") })
      const error = yield* failureOf(model.stream(request()))
      assert.strictEqual(error.reason.message, "invalid tool call id")
    }),
  )
})

describe("secrets in adapter errors", () => {
  it.effect("scrubs the key from an adapter message that quotes provider text", () =>
    Effect.gen(function* () {
      const key = "sk-quoted-0123456789"
      const server = yield* ScriptedServer.make({
        script: [Respond.sse(OpenAiSse.response({ text: ["x"], finishReason: `stopped by ${key}` }))],
      })
      const model = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make(key) })
      const error = yield* failureOf(model.stream(request()))
      assert.strictEqual(error.reason._tag, "Adapter")
      assert.strictEqual(error.reason.message, "model did not complete: stopped by [redacted]")
    }),
  )
})
