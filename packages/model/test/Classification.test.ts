/** One test per row of the classification table (docs/model.md §4.5), over real sockets. */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Stream } from "effect"
import { TestClock } from "effect/testing"
import { AnthropicSse, OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { advanceUntilDone, API_KEY, anthropic, collect, failureOf, openAi, providerReason, request, waitUntil } from "./support.ts"

const serve = (...responders: ReadonlyArray<Respond.Responder>) => ScriptedServer.make({ script: responders })

/** The error of one request against a server answering `responder`. */
const errorOf = (responder: Respond.Responder) =>
  Effect.gen(function* () {
    const server = yield* serve(responder)
    const model = yield* openAi(server)
    return yield* failureOf(model.stream(request()))
  })

const anthropicErrorOf = (responder: Respond.Responder) =>
  Effect.gen(function* () {
    const server = yield* serve(responder)
    const model = yield* anthropic(server)
    return yield* failureOf(model.stream(request()))
  })

describe("classification, rule 1: the engine's own abort and local limits", () => {
  it.effect("interrupting a stream aborts the socket, and the server sees the connection close", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.stallAfter([OpenAiSse.role(), OpenAiSse.text("partial")]))
      const model = yield* openAi(server)
      const seen: Array<string> = []
      const fiber = yield* Effect.forkChild(
        Stream.runForEach(model.stream(request()), (event) => Effect.sync(() => seen.push(event.kind))),
      )
      // Wait until the client has read both chunks of the stalled stream.
      yield* waitUntil(() => seen.includes("part_delta"))
      yield* Fiber.interrupt(fiber)
      const exchange = yield* ScriptedServer.awaitExchange(server, 0)
      assert.strictEqual(exchange.outcome, "client_closed")
      assert.deepStrictEqual(seen, ["response_metadata", "part_started", "part_delta"])
    }),
  )

  it.effect("an event over 8 MiB is an adapter error", () =>
    Effect.gen(function* () {
      // Just over the limit, and well over it with more of the body in the same read (what the
      // parser would have been fed after its limit).
      for (const size of [8 * 1024 * 1024 + 1, 9 * 1024 * 1024]) {
        const error = yield* errorOf(Respond.sse([OpenAiSse.text("x".repeat(size)), OpenAiSse.text("more"), OpenAiSse.done()]))
        assert.strictEqual(error.reason._tag, "Adapter")
        assert.strictEqual(error.reason.message, "provider event exceeds 8 MiB", `${size}`)
        assert.isFalse(error.isRetryable)
      }
    }),
  )
})

describe("classification, rule 2: structured overflow codes outrank the status", () => {
  it.effect("400 context_length_exceeded is a context overflow", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(
        Respond.json(
          400,
          Respond.openAiError("This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.", {
            code: "context_length_exceeded",
          }),
        ),
      )
      assert.strictEqual(error.reason._tag, "ContextOverflow")
      assert.isFalse(error.reason._tag === "ContextOverflow" && error.reason.observedOutput)
    }),
  )

  it.effect("llama-server's 400 exceed_context_size_error is a context overflow, by its type and by its text", () =>
    Effect.gen(function* () {
      const message = "request (4476 tokens) exceeds the available context size (4096 tokens)"
      const body = { error: { code: 400, message, type: "exceed_context_size_error", n_prompt_tokens: 4476, n_ctx: 4096 } }
      const overflow = yield* errorOf(Respond.json(400, body))
      assert.strictEqual(overflow.reason._tag, "ContextOverflow")
      // What the provider said stays in the message, as for every other provider failure.
      assert.strictEqual(
        overflow.reason.message,
        `model context window exceeded (HTTP 400: ${message})`,
      )
      const typeOnly = { error: { code: 400, message: "request too big", type: "exceed_context_size_error" } }
      assert.strictEqual((yield* errorOf(Respond.json(400, typeOnly))).reason._tag, "ContextOverflow")
    }),
  )

  it.effect("a 503 from a proxy wrapping model_context_window_exceeded is a context overflow", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(Respond.json(503, { error: { message: "upstream failed", type: "model_context_window_exceeded" } }))
      assert.strictEqual(error.reason._tag, "ContextOverflow")
    }),
  )

  it.effect("a 503 carrying the code context_length_exceeded is a context overflow, not a retryable outage (scenario 30)", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(Respond.json(503, Respond.openAiError("upstream failed", { code: "context_length_exceeded" })))
      assert.strictEqual(error.reason._tag, "ContextOverflow")
      assert.isFalse(error.reason._tag === "ContextOverflow" && error.reason.observedOutput)
    }),
  )

  it.effect("request_too_large on the body's own type is a context overflow", () =>
    Effect.gen(function* () {
      const error = yield* anthropicErrorOf(Respond.json(400, { type: "request_too_large", message: "Request exceeds the maximum allowed number of bytes." }))
      assert.strictEqual(error.reason._tag, "ContextOverflow")
    }),
  )

  it.effect("an in-stream overflow error after text reports the observed output", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.sse([OpenAiSse.role(), OpenAiSse.text("Sure"), OpenAiSse.error("too long", { code: "context_length_exceeded" })]),
      )
      const model = yield* openAi(server)
      const { events, error } = yield* collect(model.stream(request()))
      assert.strictEqual(events.filter((event) => event.kind === "part_delta").length, 1)
      assert.strictEqual(error?.reason._tag, "ContextOverflow")
      assert.isTrue(error?.reason._tag === "ContextOverflow" && error.reason.observedOutput)
    }),
  )
})

describe("classification, rule 3: 413", () => {
  it.effect("413 is a context overflow whatever the body says", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(Respond.json(413, "Payload Too Large"))
      assert.strictEqual(error.reason._tag, "ContextOverflow")
    }),
  )
})

describe("classification, rule 4: Anthropic prompt is too long", () => {
  it.effect("a 400 invalid_request_error 'prompt is too long: N tokens > M maximum' is a context overflow", () =>
    Effect.gen(function* () {
      const error = yield* anthropicErrorOf(
        Respond.json(400, Respond.anthropicError("invalid_request_error", "prompt is too long: 210452 tokens > 200000 maximum")),
      )
      assert.strictEqual(error.reason._tag, "ContextOverflow")
    }),
  )
})

describe("classification, rule 5: free-text overflow with vetoes", () => {
  it.effect("a 400 in prose only (vLLM) is a context overflow", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(
        Respond.json(400, {
          object: "error",
          message: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion).",
          type: "BadRequestError",
          param: null,
          code: 400,
        }),
      )
      assert.strictEqual(error.reason._tag, "ContextOverflow")
    }),
  )

  it.effect("a 429 that mentions the maximum context length is a rate limit", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(
        Respond.json(429, Respond.openAiError("Rate limit reached. This model's maximum context length is 8192 tokens.", { type: "tokens" })),
      )
      assert.strictEqual(providerReason(error).reason, "rate_limit")
    }),
  )

  it.effect("a 400 about too many output tokens is rejected, not an overflow", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(
        Respond.json(400, Respond.openAiError("max_tokens is too large: the completion requests too many tokens for this model")),
      )
      const reason = providerReason(error)
      assert.strictEqual(reason.reason, "rejected")
      assert.isFalse(reason.replaySafe)
    }),
  )

  it.effect("a 400 overflow phrase next to 'quota' is vetoed", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(Respond.json(400, Respond.openAiError("Input has too many tokens for your quota tier")))
      assert.strictEqual(providerReason(error).reason, "rejected")
    }),
  )

  it.effect("prose overflow with a 500 status is not an overflow", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(Respond.json(500, Respond.openAiError("context length exceeded", { type: "server_error" })))
      assert.strictEqual(providerReason(error).reason, "provider_unavailable")
    }),
  )
})

describe("classification, rule 6: 429", () => {
  it.effect("429 with Retry-After in seconds is a replay-safe rate limit with the delay", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(Respond.json(429, Respond.openAiError("Rate limit reached", { type: "requests" }), { "retry-after": "1.5" }))
      const reason = providerReason(error)
      assert.strictEqual(reason.reason, "rate_limit")
      assert.strictEqual(reason.status, 429)
      assert.strictEqual(reason.retryAfterMs, 1500)
      assert.isTrue(reason.replaySafe)
      assert.isTrue(error.isRetryable)
    }),
  )

  it.effect("429 without Retry-After leaves the delay to backoff", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(Respond.json(429, Respond.openAiError("Too many requests")))
      const reason = providerReason(error)
      assert.strictEqual(reason.reason, "rate_limit")
      assert.strictEqual(reason.retryAfterMs, undefined)
      assert.isTrue(error.isRetryable)
    }),
  )

  it.effect("retry-after-ms wins over retry-after", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(
        Respond.json(429, Respond.openAiError("slow down"), { "retry-after-ms": "250.2", "retry-after": "30" }),
      )
      assert.strictEqual(providerReason(error).retryAfterMs, 251)
    }),
  )

  it.effect("Retry-After as an HTTP date is the delay from now", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(Date.parse("2026-01-01T00:00:00Z"))
      const error = yield* errorOf(
        Respond.json(429, Respond.openAiError("slow down"), { "retry-after": "Thu, 01 Jan 2026 00:00:07 GMT" }),
      )
      assert.strictEqual(providerReason(error).retryAfterMs, 7000)
    }),
  )

  it.effect("an unusable Retry-After is ignored", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(Respond.json(429, Respond.openAiError("slow down"), { "retry-after": "soon" }))
      assert.strictEqual(providerReason(error).retryAfterMs, undefined)
    }),
  )

  it.effect("429 insufficient_quota is rejected and never retried", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(
        Respond.json(429, Respond.openAiError("You exceeded your current quota", { type: "insufficient_quota", code: "insufficient_quota" })),
      )
      const reason = providerReason(error)
      assert.strictEqual(reason.reason, "rejected")
      assert.isFalse(error.isRetryable)
    }),
  )
})

describe("classification, rule 7: authentication", () => {
  it.effect("401 is auth, never replay-safe, and never shows the key", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(Respond.json(401, Respond.openAiError(`Incorrect API key provided: ${API_KEY}.`, { code: "invalid_api_key" })))
      const reason = providerReason(error)
      assert.strictEqual(reason.reason, "auth")
      assert.isFalse(reason.replaySafe)
      assert.isFalse(reason.message.includes(API_KEY))
      assert.isTrue(reason.message.includes("[redacted]"))
      assert.isFalse(JSON.stringify(error).includes(API_KEY))
    }),
  )

  it.effect("403 is auth", () =>
    Effect.gen(function* () {
      const error = yield* anthropicErrorOf(Respond.json(403, Respond.anthropicError("permission_error", "not allowed")))
      assert.strictEqual(providerReason(error).reason, "auth")
    }),
  )
})

describe("classification, rule 8: unavailable", () => {
  it.effect("500 is provider_unavailable and retryable", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(Respond.json(500, Respond.openAiError("The server had an error", { type: "server_error" })))
      const reason = providerReason(error)
      assert.strictEqual(reason.reason, "provider_unavailable")
      assert.strictEqual(reason.status, 500)
      assert.isTrue(error.isRetryable)
    }),
  )

  it.effect("503 with Retry-After carries the delay", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(Respond.json(503, "Service Unavailable", { "retry-after": "3" }))
      const reason = providerReason(error)
      assert.strictEqual(reason.reason, "provider_unavailable")
      assert.strictEqual(reason.retryAfterMs, 3000)
    }),
  )

  it.effect("408 is provider_unavailable", () =>
    Effect.gen(function* () {
      assert.strictEqual(providerReason(yield* errorOf(Respond.json(408, "timeout"))).reason, "provider_unavailable")
    }),
  )

  it.effect("Anthropic's in-stream overloaded_error is provider_unavailable", () =>
    Effect.gen(function* () {
      const error = yield* anthropicErrorOf(
        Respond.sse([AnthropicSse.messageStart(), AnthropicSse.ping(), AnthropicSse.error("overloaded_error", "Overloaded")]),
      )
      const reason = providerReason(error)
      assert.strictEqual(reason.reason, "provider_unavailable")
      assert.isTrue(reason.replaySafe)
    }),
  )

  it.effect("a quota in a stream or in a 200 JSON body is rejected, not retried as transient (rule 6's types)", () =>
    Effect.gen(function* () {
      const quota = { error: { type: "insufficient_quota", message: "You exceeded your current quota" } }
      const inStream = yield* errorOf(Respond.sse([Respond.event(quota)]))
      assert.strictEqual(providerReason(inStream).reason, "rejected")
      const inJson = yield* errorOf(Respond.json(200, quota))
      assert.strictEqual(providerReason(inJson).reason, "rejected")
      const anthropic = yield* anthropicErrorOf(Respond.sse([AnthropicSse.messageStart(), AnthropicSse.error("FreeUsageLimitError", "Free usage exceeded")]))
      assert.strictEqual(providerReason(anthropic).reason, "rejected")
    }),
  )

  it.effect("an error event a proxy sent without its type in the data is classified by its SSE name", () =>
    Effect.gen(function* () {
      const untyped = Respond.event({ error: { type: "overloaded_error", message: "Overloaded" } }, { event: "error" })
      const reason = providerReason(yield* anthropicErrorOf(Respond.sse([AnthropicSse.messageStart(), untyped])))
      assert.strictEqual(reason.reason, "provider_unavailable")
      assert.include(reason.message, "Overloaded")
    }),
  )
})

describe("classification, rule 9: other 4xx", () => {
  it.effect("a plain 400 is rejected", () =>
    Effect.gen(function* () {
      const error = yield* errorOf(Respond.json(400, Respond.openAiError("Invalid value for 'temperature'")))
      const reason = providerReason(error)
      assert.strictEqual(reason.reason, "rejected")
      assert.strictEqual(reason.status, 400)
      assert.isTrue(reason.message.startsWith("HTTP 400 invalid_request_error: Invalid value"))
    }),
  )

  it.effect("402 and 409 are rejected", () =>
    Effect.gen(function* () {
      assert.strictEqual(providerReason(yield* errorOf(Respond.json(402, { error: { message: "Payment required" } }))).reason, "rejected")
      assert.strictEqual(providerReason(yield* errorOf(Respond.json(409, { error: { message: "Conflict" } }))).reason, "rejected")
    }),
  )
})

describe("classification, rule 10: transport failures", () => {
  it.effect("a refused connection is network", () =>
    Effect.gen(function* () {
      const server = yield* Effect.promise(() => ScriptedServer.start())
      yield* Effect.promise(() => server.close())
      const model = yield* openAi(server)
      const reason = providerReason(yield* failureOf(model.stream(request())))
      assert.strictEqual(reason.reason, "network")
      assert.isTrue(reason.replaySafe)
    }),
  )

  it.effect("a socket dropped before any response byte is network", () =>
    Effect.gen(function* () {
      const reason = providerReason(yield* errorOf(Respond.drop()))
      assert.strictEqual(reason.reason, "network")
      assert.strictEqual(reason.status, undefined)
    }),
  )
})

describe("classification, rule 11: truncated streams and replay safety", () => {
  it.effect("a stream dropped before any text is stream_truncated and replay-safe", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.dropAfter([OpenAiSse.role()]))
      const model = yield* openAi(server)
      const { events, error } = yield* collect(model.stream(request()))
      assert.deepStrictEqual(events.map((event) => event.kind), ["response_metadata"])
      const reason = providerReason(error!)
      assert.strictEqual(reason.reason, "stream_truncated")
      assert.isTrue(reason.replaySafe)
      assert.isTrue(error!.isRetryable)
    }),
  )

  it.effect("a stream dropped after text is stream_truncated and still replay-safe: text keeps it", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.dropAfter([OpenAiSse.role(), OpenAiSse.reasoning("plan"), OpenAiSse.text("Hel")]))
      const model = yield* openAi(server)
      const { events, error } = yield* collect(model.stream(request()))
      assert.includeMembers(events.map((event) => event.kind), ["part_delta"])
      const reason = providerReason(error!)
      assert.strictEqual(reason.reason, "stream_truncated")
      assert.isTrue(reason.replaySafe)
    }),
  )

  it.effect("a stream dropped after text and part of a tool call is stream_truncated and replay-safe (scenario 23)", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.dropAfter([OpenAiSse.role(), OpenAiSse.text("partial answer"), OpenAiSse.toolCall({ index: 0, id: "c", name: "echo", arguments: '{"val' })]),
      )
      const model = yield* openAi(server)
      const { events, error } = yield* collect(model.stream(request()))
      assert.includeMembers(events.map((event) => event.kind), ["part_delta"])
      // The partial call is never reported as a call.
      assert.isFalse(events.some((event) => event.kind === "finished" || event.kind === "tool_call"))
      const reason = providerReason(error!)
      assert.strictEqual(reason.reason, "stream_truncated")
      assert.isTrue(reason.replaySafe)
      assert.isTrue(error!.isRetryable)
    }),
  )

  it.effect("a stream dropped after a signed thinking block is not replay-safe", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.dropAfter([AnthropicSse.messageStart(), ...AnthropicSse.thinkingBlock(0, ["plan"], "sig-1"), ...AnthropicSse.textBlock(1, ["Hel"]).slice(0, 2)]),
      )
      const model = yield* anthropic(server)
      const { events, error } = yield* collect(model.stream(request()))
      assert.isTrue(events.some((event) => event.kind === "part_finished" && event.providerOptions !== undefined))
      const reason = providerReason(error!)
      assert.strictEqual(reason.reason, "stream_truncated")
      assert.isFalse(reason.replaySafe)
      assert.isFalse(error!.isRetryable)
    }),
  )

  it.effect("a body that ends cleanly without a finish reason is stream_truncated", () =>
    Effect.gen(function* () {
      const reason = providerReason(yield* errorOf(Respond.sse([OpenAiSse.role(), OpenAiSse.text("Hi")])))
      assert.strictEqual(reason.reason, "stream_truncated")
      assert.strictEqual(reason.status, 200)
    }),
  )

  it.effect("[DONE] without a finish reason is stream_truncated", () =>
    Effect.gen(function* () {
      const reason = providerReason(yield* errorOf(Respond.sse([OpenAiSse.role(), OpenAiSse.text("Hi"), OpenAiSse.done()])))
      assert.strictEqual(reason.reason, "stream_truncated")
    }),
  )

  it.effect("an Anthropic stream that ends before message_stop is stream_truncated", () =>
    Effect.gen(function* () {
      const reason = providerReason(yield* anthropicErrorOf(Respond.sse([AnthropicSse.messageStart(), ...AnthropicSse.textBlock(0, ["Hi"])])))
      assert.strictEqual(reason.reason, "stream_truncated")
    }),
  )
})

describe("idle timeout", () => {
  it.effect("a stream that stalls after its first chunks times out, and the server sees the abort", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.stallAfter([OpenAiSse.role(), OpenAiSse.text("Hel")]))
      const model = yield* openAi(server, { idleTimeoutMs: 1000 })
      const seen: Array<string> = []
      const fiber = yield* Effect.forkChild(
        failureOf(Stream.tap(model.stream(request()), (event) => Effect.sync(() => seen.push(event.kind)))),
      )
      yield* waitUntil(() => seen.includes("part_delta"))
      yield* advanceUntilDone(fiber, 1000)
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error.reason._tag, "TimedOut")
      assert.isFalse(error.isRetryable)
      assert.strictEqual((yield* ScriptedServer.awaitExchange(server, 0)).outcome, "client_closed")
    }),
  )

  it.effect("waiting for the first byte counts too: a hanging server times out", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.hang())
      const model = yield* openAi(server, { idleTimeoutMs: 1000 })
      const fiber = yield* Effect.forkChild(failureOf(model.stream(request())))
      yield* ScriptedServer.awaitRequest(server, 0)
      yield* advanceUntilDone(fiber, 1000)
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error.reason._tag, "TimedOut")
      assert.isFalse(error.isRetryable)
    }),
  )

  it.effect("a response within the idle timeout is not cut short", () =>
    Effect.gen(function* () {
      const gate = Respond.gate()
      const server = yield* serve(Respond.hold(gate, Respond.sse(OpenAiSse.response({ text: ["ok"] }))))
      const model = yield* openAi(server, { idleTimeoutMs: 1000 })
      const fiber = yield* Effect.forkChild(collect(model.stream(request())))
      yield* ScriptedServer.awaitRequest(server, 0)
      yield* TestClock.adjust(999)
      gate.release()
      const { error, events } = yield* Fiber.join(fiber)
      assert.strictEqual(error, undefined)
      assert.strictEqual(events[events.length - 1]?.kind, "finished")
    }),
  )
})
