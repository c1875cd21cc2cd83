/** The pure classification helpers: Retry-After parsing and the free-text overflow patterns with their vetoes. */
import { assert, describe, it } from "@effect/vitest"
import { ErrorClassification } from "@maka/model"

const headers = (values: Record<string, string>): ErrorClassification.HeaderReader => ({
  get: (name) => values[name] ?? null,
})

const NOW = Date.parse("2026-03-01T12:00:00Z")

describe("parseRetryAfter", () => {
  it("reads seconds, fractional seconds rounded up, and milliseconds first", () => {
    assert.strictEqual(ErrorClassification.parseRetryAfter(headers({ "retry-after": "2" }), NOW), 2000)
    assert.strictEqual(ErrorClassification.parseRetryAfter(headers({ "retry-after": "0.0015" }), NOW), 2)
    assert.strictEqual(ErrorClassification.parseRetryAfter(headers({ "retry-after-ms": "20", "retry-after": "9" }), NOW), 20)
  })

  it("falls back to retry-after when retry-after-ms is unusable", () => {
    assert.strictEqual(ErrorClassification.parseRetryAfter(headers({ "retry-after-ms": "-5", "retry-after": "1" }), NOW), 1000)
    assert.strictEqual(ErrorClassification.parseRetryAfter(headers({ "retry-after-ms": "soon", "retry-after": "1" }), NOW), 1000)
  })

  it("reads an HTTP date as the delay from now", () => {
    assert.strictEqual(ErrorClassification.parseRetryAfter(headers({ "retry-after": "Sun, 01 Mar 2026 12:00:30 GMT" }), NOW), 30_000)
  })

  it("ignores zero, past dates, garbage and delays beyond 2^31-1 ms", () => {
    for (const value of ["0", "Sun, 01 Mar 2026 11:59:00 GMT", "later", "-3", "", "3000000"]) {
      assert.strictEqual(ErrorClassification.parseRetryAfter(headers({ "retry-after": value }), NOW), undefined, value)
    }
    assert.strictEqual(ErrorClassification.parseRetryAfter(headers({ "retry-after-ms": "2147483648" }), NOW), undefined)
    assert.strictEqual(ErrorClassification.parseRetryAfter(headers({ "retry-after-ms": "2147483647" }), NOW), 2147483647)
    assert.strictEqual(ErrorClassification.parseRetryAfter(headers({}), NOW), undefined)
  })
})

describe("isOverflowText", () => {
  const overflows: ReadonlyArray<readonly [string, string]> = [
    ["OpenAI", "This model's maximum context length is 128000 tokens. However, your messages resulted in 129000 tokens."],
    ["Anthropic", "prompt is too long: 201000 tokens > 200000 maximum"],
    ["DeepSeek", "This model's maximum context length is 65536 tokens. However, you requested 70000 tokens."],
    ["Gemini (OpenAI-compatible)", "The input token count (1200000) exceeds the maximum number of tokens allowed; token limit exceeded."],
    ["vLLM", "This model's maximum context length is 4096 tokens. However, you requested 4500 tokens in the messages."],
    ["Ollama", "context length exceeded"],
    ["llama.cpp", "request (4476 tokens) exceeds the available context size (4096 tokens)"],
    ["OpenRouter", "This endpoint's maximum context length is 32768 tokens. However, you requested about 40000 tokens."],
    ["OpenAI Responses", "Your input exceeds the context window of this model. Please adjust your input and try again."],
    ["Mistral", "Prompt contains 40000 tokens, too many tokens for model"],
  ]
  for (const [provider, message] of overflows) {
    it(`reads ${provider}'s overflow message as an overflow`, () => {
      assert.isTrue(ErrorClassification.isOverflowText(message))
    })
  }

  const vetoed: ReadonlyArray<readonly [string, string]> = [
    ["a rate limit", "Rate limit reached for requests: maximum context length is irrelevant here"],
    ["too many requests", "Too many requests: prompt is too long for this tier"],
    ["a quota", "You exceeded your quota: input token limit exceeded"],
    ["an output limit", "max_tokens: too many tokens requested for the output"],
    ["a completion limit", "the completion would contain too many tokens"],
  ]
  for (const [veto, message] of vetoed) {
    it(`does not read ${veto} as an overflow`, () => {
      assert.isFalse(ErrorClassification.isOverflowText(message))
    })
  }

  it("does not read an unrelated 400 as an overflow", () => {
    assert.isFalse(ErrorClassification.isOverflowText("Invalid value for 'temperature': must be at most 2"))
    assert.isFalse(ErrorClassification.isOverflowText("too many tokens"))
  })
})

describe("classify", () => {
  const base = { nowMs: NOW, replaySafe: true, observedOutput: false }

  it("treats an in-stream error with a numeric HTTP code as that status", () => {
    const error = ErrorClassification.classify({ ...base, payload: { error: { code: 429, message: "Provider returned error" } } })
    assert.strictEqual(error.reason._tag === "Provider" && error.reason.reason, "rate_limit")
  })

  it("reads a string error (TGI, LiteLLM) and a validation list (FastAPI, Mistral) as the provider's message", () => {
    const messageOf = (evidence: Partial<ErrorClassification.Evidence>) => ErrorClassification.classify({ ...base, ...evidence }).message
    assert.include(messageOf({ status: 422, body: JSON.stringify({ error: "Input validation error: inputs too long", error_type: "validation" }) }), "Input validation error: inputs too long")
    assert.include(messageOf({ payload: { error: "litellm.APIConnectionError: upstream closed" } }), "litellm.APIConnectionError: upstream closed")
    assert.include(
      messageOf({ status: 422, body: JSON.stringify({ detail: [{ loc: ["body", "temperature"], msg: "Input should be less than or equal to 2" }] }) }),
      "Input should be less than or equal to 2 at body.temperature",
    )
    assert.include(
      messageOf({ status: 422, body: JSON.stringify({ message: { detail: [{ loc: ["body", "foo"], msg: "Extra inputs are not permitted" }] }, type: "invalid_request_error" }) }),
      "Extra inputs are not permitted at body.foo",
    )
    // An in-stream string error that says the context is full is an overflow, as its object form is.
    const overflow = ErrorClassification.classify({ ...base, payload: { error: "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens." } })
    assert.strictEqual(overflow.reason._tag, "ContextOverflow")
  })

  it("reads Anthropic's input and max_tokens past the window as an overflow, unless max_tokens alone fills it", () => {
    const reasonOf = (message: string) => {
      const body = JSON.stringify({ type: "error", error: { type: "invalid_request_error", message } })
      const error = ErrorClassification.classify({ ...base, status: 400, body })
      return error.reason._tag === "Provider" ? error.reason.reason : error.reason._tag
    }
    const text = (input: number, output: number, window: number) =>
      `input length and \`max_tokens\` exceed context limit: ${input} + ${output} > ${window}, decrease input length or \`max_tokens\` and try again`
    assert.strictEqual(reasonOf(text(188240, 21333, 200000)), "ContextOverflow")
    assert.strictEqual(reasonOf(text(1000, 200000, 200000)), "rejected")
    assert.strictEqual(reasonOf(text(1000, 2000, 200000)), "rejected")
  })

  it("matches codes case-insensitively with - and _ alike", () => {
    const error = ErrorClassification.classify({ ...base, payload: { error: { status: "RESOURCE_EXHAUSTED", message: "busy" } } })
    assert.strictEqual(error.reason._tag === "Provider" && error.reason.reason, "provider_unavailable")
  })

  it("reads Anthropic's in-stream error types as the status they stand for", () => {
    const reasonOf = (type: string) => {
      const error = ErrorClassification.classify({ ...base, payload: { type: "error", error: { type, message: "x" } } })
      return error.reason._tag === "Provider" ? error.reason.reason : error.reason._tag
    }
    assert.strictEqual(reasonOf("rate_limit_error"), "rate_limit")
    assert.strictEqual(reasonOf("authentication_error"), "auth")
    assert.strictEqual(reasonOf("invalid_request_error"), "rejected")
    assert.strictEqual(reasonOf("overloaded_error"), "provider_unavailable")
    assert.strictEqual(reasonOf("api_error"), "provider_unavailable")
  })

  it("names the nested error's code in the message, not the envelope's type", () => {
    const anthropic = ErrorClassification.classify({ ...base, status: 529, body: JSON.stringify({ type: "error", error: { type: "overloaded_error", message: "Overloaded" } }) })
    assert.strictEqual(anthropic.message, "Provider: HTTP 529 overloaded_error: Overloaded")
    const inStream = ErrorClassification.classify({ ...base, payload: { type: "error", error: { type: "overloaded_error", message: "Overloaded" } } })
    assert.strictEqual(inStream.message, "Provider: provider error overloaded_error: Overloaded")
    const openAi = ErrorClassification.classify({ ...base, status: 429, body: JSON.stringify({ error: { type: "rate_limit_error", code: "rate_limit_exceeded", message: "slow" } }) })
    assert.strictEqual(openAi.message, "Provider: HTTP 429 rate_limit_exceeded: slow")
  })

  it("says the status once: a numeric code the status repeats, or an in-stream code standing for one, and no colon after nothing", () => {
    // An in-stream error (a 200's body) whose code is the status it stands for: classified by it,
    // summarised as what it is.
    const inStream = ErrorClassification.classify({ ...base, payload: { error: { code: 429, message: "slow down" } } })
    assert.strictEqual(inStream.message, "Provider: provider error 429: slow down")
    assert.isTrue(inStream.reason._tag === "Provider" && inStream.reason.reason === "rate_limit" && inStream.reason.status === 429)
    // The same status as a string of its digits stands for it too.
    const asText = ErrorClassification.classify({ ...base, payload: { error: { code: "429", message: "slow down" } } })
    assert.isTrue(asText.reason._tag === "Provider" && asText.reason.reason === "rate_limit" && asText.reason.status === 429)
    const repeated = ErrorClassification.classify({ ...base, status: 400, body: JSON.stringify({ error: { code: 400, message: "bad" } }) })
    assert.strictEqual(repeated.message, "Provider: HTTP 400: bad")
    assert.strictEqual(ErrorClassification.classify({ ...base, status: 503, body: "" }).message, "Provider: HTTP 503")
    assert.strictEqual(ErrorClassification.classify({ ...base, status: 502, body: "  \n " }).message, "Provider: HTTP 502")
  })

  it("keeps a prose overflow in a Gemini array body", () => {
    const body = JSON.stringify([{ error: { code: 400, message: "The input token count exceeds the limit: token limit exceeded", status: "INVALID_ARGUMENT" } }])
    assert.strictEqual(ErrorClassification.classify({ ...base, status: 400, body }).reason._tag, "ContextOverflow")
  })

  it("cuts the message to 4 KiB and never includes a secret", () => {
    const error = ErrorClassification.classify({ ...base, status: 400, body: `secret-key-value ${"é".repeat(5000)}`, secrets: ["secret-key-value"] })
    const message = error.reason._tag === "Provider" ? error.reason.message : ""
    assert.isAtMost(Buffer.byteLength(message, "utf8"), 4096)
    assert.isFalse(message.includes("secret-key-value"))
  })

  it("a non-transient reason is never replay-safe", () => {
    const error = ErrorClassification.classify({ ...base, status: 400, body: "bad" })
    assert.isFalse(error.reason._tag === "Provider" && error.reason.replaySafe)
  })
})
