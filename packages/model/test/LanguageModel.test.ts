/** The adapters over real sockets: request encoding, stream normalisation, limits, the limiter, cancellation. */
import { assert, describe, it } from "@effect/vitest"
import type { Prompt } from "@maka/facts"
import { Effect, Fiber, Option, Redacted, Result, Stream } from "effect"
import { AnthropicSse, OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { LanguageModel, ProviderConfig, StepBuilder } from "@maka/model"
import { advanceUntilDone, API_KEY, anthropic, collect, failureOf, openAi, request, waitUntil } from "./support.ts"

const serve = (...responders: ReadonlyArray<Respond.Responder>) => ScriptedServer.make({ script: responders })

/** A short real pause that lets a wrong implementation misbehave; nothing is asserted on its length. */
const pause = Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 20)))

const stepOf = (stream: Stream.Stream<import("@maka/facts").Model.ModelEvent, import("@maka/model").ModelError.ModelError>) =>
  Effect.gen(function* () {
    const { events, error } = yield* collect(stream)
    assert.strictEqual(error, undefined, error?.message)
    const step = StepBuilder.fold("step-1", events)
    if (Result.isFailure(step)) return assert.fail(step.failure.message)
    return step.success
  })

const history: Prompt.Prompt = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Read a.txt" },
  {
    role: "assistant",
    parts: [
      { kind: "thinking", text: "I should read it." },
      { kind: "text", text: "Reading." },
      { kind: "tool_call", toolCallId: "call-1", toolName: "read_file", input: { path: "a.txt" }, providerExecuted: false },
    ],
  },
  { role: "tool", results: [{ toolCallId: "call-1", toolName: "read_file", output: { type: "json", value: { text: "hi", size: 2 } } }] },
  { role: "user", content: "Thanks" },
]

const tools: ReadonlyArray<Prompt.ToolDefinition> = [
  { name: "read_file", description: "Read a file", inputSchema: { type: "object", properties: { path: { type: "string" } } } },
]

describe("credentials", () => {
  it.effect("sends no credential header when the key is empty (a local server needs none)", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.sse(OpenAiSse.response({ text: ["a"] })), Respond.sse(AnthropicSse.response({ text: ["a"] })))
      const local = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "m", apiKey: Redacted.make("") })
      yield* stepOf(local.stream(request()))
      const anthropicLocal = yield* LanguageModel.make({ kind: "anthropic", baseUrl: server.url, model: "m", apiKey: Redacted.make("") })
      yield* stepOf(anthropicLocal.stream(request()))
      const [openAiRequest, anthropicRequest] = server.requests()
      assert.isUndefined(openAiRequest?.headers["authorization"])
      assert.isUndefined(anthropicRequest?.headers["x-api-key"])
      assert.strictEqual(anthropicRequest?.headers["anthropic-version"], "2023-06-01")
    }),
  )
})

describe("OpenAI-compatible adapter", () => {
  it.effect("encodes the request as canonical JSON: the same request gives the same bytes", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.sse(OpenAiSse.response({ text: ["a"] })), Respond.sse(OpenAiSse.response({ text: ["a"] })))
      const model = yield* openAi(server)
      const sent = request({ prompt: history, tools, providerOptions: { temperature: 0, model: "other", stream: false } })
      yield* stepOf(model.stream(sent))
      yield* stepOf(model.stream(structuredClone(sent)))
      const [first, second] = server.requests()
      assert.strictEqual(first?.body, second?.body)
      assert.strictEqual(first?.path, "/v1/chat/completions")
      assert.strictEqual(first?.headers["authorization"], `Bearer ${API_KEY}`)
      assert.strictEqual(
        first?.body,
        '{"max_tokens":256,"messages":[{"content":"You are terse.","role":"system"},{"content":"Read a.txt","role":"user"},' +
          '{"content":"Reading.","reasoning_content":"I should read it.","role":"assistant","tool_calls":[{"function":{"arguments":"{\\"path\\":\\"a.txt\\"}","name":"read_file"},"id":"call-1","type":"function"}]},' +
          '{"content":"{\\"size\\":2,\\"text\\":\\"hi\\"}","role":"tool","tool_call_id":"call-1"},{"content":"Thanks","role":"user"}],' +
          '"model":"test-model","stream":true,"stream_options":{"include_usage":true},"temperature":0,' +
          '"tools":[{"function":{"description":"Read a file","name":"read_file","parameters":{"properties":{"path":{"type":"string"}},"type":"object"}},"type":"function"}]}',
      )
    }),
  )

  it.effect("streams reasoning, text and tool calls assembled by index into one step", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.sse([
          OpenAiSse.role(),
          OpenAiSse.reasoning("Let me "),
          OpenAiSse.reasoning("look."),
          OpenAiSse.text("Checking "),
          OpenAiSse.text("both."),
          OpenAiSse.toolCall({ index: 1, id: "call-b", name: "grep", arguments: '{"q":' }),
          OpenAiSse.toolCall({ index: 0, id: "call-a", name: "read_file", arguments: "" }),
          OpenAiSse.toolCall({ index: 1, arguments: '"x"}' }),
          OpenAiSse.finish("tool_calls"),
          OpenAiSse.usage({ prompt_tokens: 30, completion_tokens: 12, prompt_tokens_details: { cached_tokens: 20 }, completion_tokens_details: { reasoning_tokens: 4 } }),
          OpenAiSse.done(),
        ]),
      )
      const model = yield* openAi(server)
      const step = yield* stepOf(model.stream(request()))
      assert.deepStrictEqual(step, {
        parts: [
          { kind: "text", textKind: "thinking", text: "Let me look." },
          { kind: "text", textKind: "text", text: "Checking both." },
          { kind: "tool_call", id: "call-a", name: "read_file", input: {}, providerExecuted: false },
          { kind: "tool_call", id: "call-b", name: "grep", input: { q: "x" }, providerExecuted: false },
        ],
        finishReason: "tool-calls",
        usage: { inputTokens: 30, outputTokens: 12, cacheReadTokens: 20, reasoningTokens: 4 },
        responseId: "chatcmpl-test",
        model: "test-model",
        timestamp: 1_767_225_600_000,
      })
    }),
  )

  it.effect("takes the metadata from the first chunk that names the response", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.sse([
          Respond.event({ id: "", object: "", created: 0, model: "", choices: [], prompt_filter_results: [{ prompt_index: 0 }] }),
          ...OpenAiSse.response({ id: "chatcmpl-azure", model: "gpt-4o", text: ["hi"] }),
        ]),
      )
      const { events } = yield* collect((yield* openAi(server)).stream(request()))
      assert.deepStrictEqual(events.filter((event) => event.kind === "response_metadata"), [
        { kind: "response_metadata", id: "chatcmpl-azure", model: "gpt-4o", timestamp: 1_767_225_600_000 },
      ])
    }),
  )

  it.effect("reads the choice the first one names: another choice's chunks are skipped, one without an index is read, an index other than 0 is read", () =>
    Effect.gen(function* () {
      const choice = (index: number, delta: Record<string, unknown>, finishReason: string | null = null) => ({ index, delta, finish_reason: finishReason })
      const chunk = (...choices: ReadonlyArray<ReturnType<typeof choice>>) => Respond.event({ id: "chatcmpl-n", model: "m", created: 1, choices })
      const server = yield* serve(
        Respond.sse([
          chunk(choice(0, { role: "assistant", content: "" }), choice(1, { role: "assistant", content: "" })),
          chunk(choice(1, { content: "other " })),
          chunk(choice(0, { content: "first " })),
          chunk(choice(1, { tool_calls: [{ index: 0, id: "c", type: "function", function: { name: "read_file", arguments: "{}" } }] })),
          chunk(choice(1, { content: "answer" }), choice(0, { content: "answer" })),
          // An element without an index, or with a null one, is read as the choice.
          Respond.event({ id: "chatcmpl-n", model: "m", created: 1, choices: [{ delta: { content: " without" } }] }),
          Respond.event({ id: "chatcmpl-n", model: "m", created: 1, choices: [{ index: null, delta: { content: " null" } }] }),
          chunk(choice(1, {}, "tool_calls")),
          chunk(choice(0, {}, "stop")),
          OpenAiSse.done(),
        ]),
        Respond.sse([
          chunk(choice(3, { role: "assistant", content: "" })),
          chunk(choice(3, { content: "numbered" })),
          chunk(choice(3, {}, "stop")),
          OpenAiSse.done(),
        ]),
      )
      const model = yield* openAi(server)
      const texts = (parts: ReadonlyArray<{ readonly kind: string }>) => parts.map((part) => ("text" in part ? part.text : part.kind))
      const several = yield* stepOf(model.stream(request()))
      assert.deepStrictEqual([texts(several.parts), several.finishReason], [["first answer without null"], "stop"])
      const numbered = yield* stepOf(model.stream(request()))
      assert.deepStrictEqual([texts(numbered.parts), numbered.finishReason], [["numbered"], "stop"])
    }),
  )

  it.effect("a malformed chunk is an adapter error", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.sse([OpenAiSse.role(), Respond.event("{not json"), OpenAiSse.done()]))
      const error = yield* failureOf((yield* openAi(server)).stream(request()))
      assert.strictEqual(error.reason._tag, "Adapter")
      assert.strictEqual(error.reason.message, "unsupported provider event: the data is not JSON")
    }),
  )

  it.effect("a chunk of an unknown shape is an unsupported provider event naming the field", () =>
    Effect.gen(function* () {
      const chunks: ReadonlyArray<unknown> = [
        { choices: "nope" },
        [1],
        // Read where the response is first named: here, without a role chunk before it.
        { id: "x", created: "1700000000", choices: [] },
        // Magistral's content blocks where a string is read.
        { choices: [{ index: 0, delta: { content: [{ type: "text", text: "hi" }] }, finish_reason: null }] },
        { choices: [{ index: 0, delta: { tool_calls: [{ index: "0", function: { name: "f" } }] }, finish_reason: null }] },
        { choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { name: "f", arguments: { a: 1 } } }] } }] },
        { choices: [{ index: 0, delta: {}, finish_reason: 7 }] },
      ]
      const server = yield* serve(
        ...chunks.map((chunk, index) => Respond.sse([...(index === 2 ? [] : [OpenAiSse.role()]), Respond.event(chunk), OpenAiSse.done()])),
      )
      const model = yield* openAi(server)
      const messages: Array<string> = []
      for (const _ of chunks) {
        const error = yield* failureOf(model.stream(request()))
        assert.strictEqual(error.reason._tag, "Adapter", error.message)
        messages.push(error.reason.message)
      }
      assert.deepStrictEqual(
        messages.map((message) => message.replace("unsupported provider event: ", "")),
        [
          "choices is not an array",
          "the data is not a JSON object",
          "created is not a count",
          "delta.content is not a string",
          "delta.tool_calls[].index is not a count",
          "delta.tool_calls[].function.arguments is not a string",
          "finish_reason is not a string",
        ],
      )
    }),
  )

  it.effect("a legacy function_call delta or a refusal is an adapter error, never an empty answer", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.sse([
          OpenAiSse.role(),
          Respond.event({ choices: [{ index: 0, delta: { function_call: { name: "read_file", arguments: "{}" } }, finish_reason: null }] }),
          Respond.event({ choices: [{ index: 0, delta: {}, finish_reason: "function_call" }] }),
          OpenAiSse.done(),
        ]),
        Respond.sse([
          OpenAiSse.role(),
          Respond.event({ choices: [{ index: 0, delta: { refusal: "I can't help with that." }, finish_reason: null }] }),
          Respond.event({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }),
          OpenAiSse.done(),
        ]),
        // Providers that send `refusal: null` (or "") beside every delta answer as usual.
        Respond.sse([
          OpenAiSse.role(),
          Respond.event({ choices: [{ index: 0, delta: { content: "fine", refusal: null, function_call: null }, finish_reason: null }] }),
          Respond.event({ choices: [{ index: 0, delta: { refusal: "" }, finish_reason: "stop" }] }),
          OpenAiSse.done(),
        ]),
      )
      const model = yield* openAi(server)
      const messages: Array<string> = []
      for (let index = 0; index < 2; index++) {
        const error = yield* failureOf(model.stream(request()))
        assert.strictEqual(error.reason._tag, "Adapter")
        messages.push(error.reason.message)
      }
      assert.deepStrictEqual(messages, ['unsupported provider event: delta "function_call"', "model did not complete: refusal"])
      const { events, error } = yield* collect(model.stream(request()))
      assert.strictEqual(error, undefined, error?.message)
      assert.deepStrictEqual(
        events.flatMap((event) => (event.kind === "part_delta" ? [event.text] : [])),
        ["fine"],
      )
    }),
  )

  it.effect("reads Together's eos as stop and Mistral's model_length as length", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.sse(OpenAiSse.response({ text: ["done"], finishReason: "eos" })),
        Respond.sse(OpenAiSse.response({ text: ["cut"], finishReason: "model_length" })),
      )
      const model = yield* openAi(server)
      const reasons: Array<string> = []
      for (let index = 0; index < 2; index++) {
        const { events, error } = yield* collect(model.stream(request()))
        assert.isUndefined(error)
        reasons.push(...events.flatMap((event) => (event.kind === "finished" ? [event.reason] : [])))
      }
      assert.deepStrictEqual(reasons, ["stop", "length"])
    }),
  )

  it.effect("takes the thinking of reasoning when reasoning_content beside it is empty", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.sse([
          OpenAiSse.role(),
          OpenAiSse.chunk({ reasoning_content: "", reasoning: "step one" }),
          OpenAiSse.text("answer"),
          OpenAiSse.finish("stop"),
          OpenAiSse.done(),
        ]),
      )
      const { events } = yield* collect((yield* openAi(server)).stream(request()))
      assert.deepStrictEqual(
        events.flatMap((event) => (event.kind === "part_delta" ? [event.text] : [])),
        ["step one", "answer"],
      )
    }),
  )

  it.effect("an unknown finish reason is an adapter error naming it", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.sse(OpenAiSse.response({ text: ["no"], finishReason: "content_filter" })))
      const error = yield* failureOf((yield* openAi(server)).stream(request()))
      assert.strictEqual(error.reason._tag, "Adapter")
      assert.strictEqual(error.reason.message, "model did not complete: content_filter")
    }),
  )

  it.effect("tool-call arguments that are not JSON, or not an object, are an adapter error", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "c", name: "read_file", arguments: ['{"path": "a.t'] }] })),
        Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "c", name: "read_file", arguments: ["[1,2]"] }] })),
      )
      const model = yield* openAi(server)
      const cut = yield* failureOf(model.stream(request()))
      const array = yield* failureOf(model.stream(request()))
      assert.strictEqual(cut.reason.message, "invalid tool call input")
      assert.strictEqual(array.reason.message, "invalid tool call input")
    }),
  )

  it.effect("parallel calls sent whole at one index, or without an index, are calls of their own; one call's fragments stay one", () =>
    Effect.gen(function* () {
      const whole = (id: string, text: string, withIndex: boolean) =>
        OpenAiSse.chunk({
          tool_calls: [{ ...(withIndex ? { index: 0 } : {}), id, type: "function", function: { name: "shout", arguments: `{"text":"${text}"}` } }],
        })
      const server = yield* serve(
        // Each call whole in its chunk, without an index (Gemini's OpenAI-compatible endpoint) or all at index 0.
        ...[false, true].map((withIndex) =>
          Respond.sse([OpenAiSse.role(), whole("call_a", "A", withIndex), whole("call_b", "B", withIndex), OpenAiSse.finish("tool_calls"), OpenAiSse.done()]),
        ),
        // Each call at index 0 as OpenAI streams one: id and name first, then its arguments (Ollama).
        Respond.sse([
          OpenAiSse.role(),
          OpenAiSse.toolCall({ index: 0, id: "call_a", name: "shout", arguments: "" }),
          OpenAiSse.toolCall({ index: 0, arguments: '{"text":"A"}' }),
          OpenAiSse.toolCall({ index: 0, id: "call_b", name: "shout", arguments: "" }),
          OpenAiSse.toolCall({ index: 0, arguments: '{"text":' }),
          OpenAiSse.toolCall({ index: 0, arguments: '"B"}' }),
          OpenAiSse.finish("tool_calls"),
          OpenAiSse.done(),
        ]),
        // One call whose every fragment carries a new id and the name, an empty one after its
        // arguments are whole included: still one call.
        Respond.sse([
          OpenAiSse.role(),
          OpenAiSse.toolCall({ index: 0, id: "x1", name: "shout", arguments: '{"text":' }),
          OpenAiSse.toolCall({ index: 0, id: "x2", name: "shout", arguments: '"C"}' }),
          OpenAiSse.toolCall({ index: 0, id: "x3", name: "shout", arguments: "" }),
          OpenAiSse.finish("tool_calls"),
          OpenAiSse.done(),
        ]),
      )
      const model = yield* openAi(server)
      const callsOf = (step: import("@maka/facts").Model.ModelStep) =>
        step.parts.flatMap((part) => (part.kind === "tool_call" ? [{ id: part.id, input: part.input }] : []))
      const split = [{ id: "call_a", input: { text: "A" } }, { id: "call_b", input: { text: "B" } }]
      assert.deepStrictEqual(callsOf(yield* stepOf(model.stream(request()))), split)
      assert.deepStrictEqual(callsOf(yield* stepOf(model.stream(request()))), split)
      assert.deepStrictEqual(callsOf(yield* stepOf(model.stream(request()))), split)
      assert.deepStrictEqual(callsOf(yield* stepOf(model.stream(request()))), [{ id: "x1", input: { text: "C" } }])
    }),
  )

  it.effect("tool-call arguments cut by the output limit are an adapter error that says so, on both providers", () =>
    Effect.gen(function* () {
      const cutMessage = "invalid tool call input: the output limit was reached inside the call (a higher maxOutputTokens lets it finish)"
      const openAiServer = yield* serve(
        Respond.sse(OpenAiSse.response({ text: ["Let me"], toolCalls: [{ id: "c", name: "write_file", arguments: ['{"text": "ab'] }], finishReason: "length" })),
      )
      const openAiCut = yield* failureOf((yield* openAi(openAiServer)).stream(request()))
      assert.strictEqual(openAiCut.reason._tag, "Adapter")
      assert.strictEqual(openAiCut.reason.message, cutMessage)
      const anthropicServer = yield* serve(
        ...["max_tokens", "tool_use"].map((stopReason) =>
          Respond.sse([
            AnthropicSse.messageStart(),
            ...AnthropicSse.textBlock(0, ["Let me"]),
            ...AnthropicSse.toolUseBlock(1, { id: "t", name: "write_file" }, ['{"text": "ab']),
            AnthropicSse.messageDelta(stopReason),
            AnthropicSse.messageStop(),
          ]),
        ),
      )
      const model = yield* anthropic(anthropicServer)
      const anthropicCut = yield* failureOf(model.stream(request()))
      assert.strictEqual(anthropicCut.reason._tag, "Adapter")
      assert.strictEqual(anthropicCut.reason.message, cutMessage)
      // Not cut by the limit: the arguments are only invalid.
      const invalid = yield* failureOf(model.stream(request()))
      assert.strictEqual(invalid.reason.message, "invalid tool call input")
      // A full context window is no output limit: a higher one would not help.
      const fullWindow = yield* serve(
        Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "c", name: "write_file", arguments: ['{"text": "ab'] }], finishReason: "model_context_window_exceeded" })),
      )
      assert.strictEqual((yield* failureOf((yield* openAi(fullWindow)).stream(request()))).reason.message, "invalid tool call input")
      // The stream ends, or an error event comes, after the bad block and before the stop reason:
      // the bad input is the failure still, as it was at the block's stop.
      const early = yield* serve(
        ...[[], [AnthropicSse.error("overloaded_error", "Overloaded")], [AnthropicSse.messageStop()]].map((after) =>
          Respond.sse([
            AnthropicSse.messageStart(),
            ...AnthropicSse.toolUseBlock(0, { id: "t", name: "write_file" }, ['{"text": "ab']),
            ...after,
          ]),
        ),
      )
      const earlyModel = yield* anthropic(early)
      for (const what of ["the end of the body", "an error event", "a stop without a stop reason"]) {
        const failure = yield* failureOf(earlyModel.stream(request()))
        assert.strictEqual(failure.reason._tag, "Adapter", what)
        assert.strictEqual(failure.reason.message, "invalid tool call input", what)
      }
    }),
  )

  it.effect("a finish reason followed by the end of the body finishes the step without [DONE]", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.sse(OpenAiSse.response({ text: ["ok"], done: false, usage: null })))
      const step = yield* stepOf((yield* openAi(server)).stream(request()))
      assert.strictEqual(step.finishReason, "stop")
      assert.deepStrictEqual(step.usage, {})
    }),
  )

  it.effect("joins a surrogate pair a provider split between two deltas; a half left at the part's end is given back", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.sse(OpenAiSse.response({ text: ["a\ud83d", "\ude00b\ud83d", "\ude01", "\ud83d"] })),
        Respond.sse(AnthropicSse.response({ text: ["\ud83d", "\ude00", "c\ud83d"] })),
      )
      const deltasOf = (events: ReadonlyArray<import("@maka/facts").Model.ModelEvent>) =>
        events.flatMap((event) => (event.kind === "part_delta" ? [event.text] : []))
      const openAiEvents = (yield* collect((yield* openAi(server)).stream(request()))).events
      assert.deepStrictEqual(deltasOf(openAiEvents), ["a", "\ud83d\ude00b", "\ud83d\ude01", "\ud83d"])
      const anthropicEvents = (yield* collect((yield* anthropic(server)).stream(request()))).events
      assert.deepStrictEqual(deltasOf(anthropicEvents), ["\ud83d\ude00", "c", "\ud83d"])
      // The half given back comes before its part's finish.
      for (const events of [openAiEvents, anthropicEvents]) {
        const finish = events.findIndex((event) => event.kind === "part_finished")
        assert.strictEqual(events[finish - 1]?.kind, "part_delta")
      }
    }),
  )

  it.effect("splits deltas over 8,192 UTF-16 units without splitting a surrogate pair", () =>
    Effect.gen(function* () {
      // 8,191 units, then a pair straddling the 8,192 boundary, then more.
      const text = "a".repeat(8191) + "😀" + "b".repeat(9000)
      const server = yield* serve(Respond.sse(OpenAiSse.response({ text: [text] })))
      const { events } = yield* collect((yield* openAi(server)).stream(request()))
      const deltas = events.flatMap((event) => (event.kind === "part_delta" ? [event.text] : []))
      assert.deepStrictEqual(deltas.map((delta) => delta.length), [8191, 8192, 810])
      assert.isTrue(deltas.every((delta) => delta.length <= 8192 && !/\p{Cs}/u.test(delta)))
      assert.strictEqual(deltas.join(""), text)
    }),
  )

  it.effect("uses the configured fetch, which never enters the route identity", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.sse(OpenAiSse.response({ text: ["via proxy"] })))
      const calls: Array<string> = []
      const config: ProviderConfig.ProviderConfig = {
        kind: "openai-compatible",
        baseUrl: `${server.url}/v1`,
        model: "test-model",
        apiKey: Redacted.make(API_KEY),
        headers: { "X-Org": "acme", "X-Secret": Redacted.make("hidden") },
        fetch: (input, init) => {
          calls.push(input)
          return fetch(input, init)
        },
      }
      const model = yield* LanguageModel.make(config)
      const step = yield* stepOf(model.stream(request()))
      assert.deepStrictEqual(calls, [`${server.url}/v1/chat/completions`])
      assert.deepStrictEqual(step.parts, [{ kind: "text", textKind: "text", text: "via proxy" }])
      const { fetch: _fetch, ...withoutFetch } = config
      assert.strictEqual(model.routeIdentity, ProviderConfig.routeIdentity(withoutFetch))
      const sent = server.requests()[0]
      assert.strictEqual(sent?.headers["x-org"], "acme")
      assert.strictEqual(sent?.headers["x-secret"], "hidden")
    }),
  )

  it.effect("refuses a configuration or options that are no object, or whose getter throws, as an invalid configuration", () =>
    Effect.gen(function* () {
      const config = { kind: "openai-compatible" as const, baseUrl: "http://127.0.0.1:8080/v1", model: "m", apiKey: Redacted.make(API_KEY) }
      const throwing = Object.defineProperty({ ...config }, "headers", { enumerable: true, get: () => { throw new Error("no headers") } })
      const cases: ReadonlyArray<readonly [Effect.Effect<unknown, import("@maka/model").ModelError.ModelError>, string]> = [
        [LanguageModel.make(null as unknown as ProviderConfig.ProviderConfig), "the provider configuration must be an object"],
        [LanguageModel.make(config, null as unknown as LanguageModel.MakeOptions), "the model's options must be an object"],
        [LanguageModel.make(throwing), "the provider configuration could not be read: no headers"],
      ]
      for (const [made, message] of cases) {
        const error = yield* Effect.flip(made)
        assert.deepStrictEqual([error.reason._tag, error.reason.message], ["Adapter", `invalid provider configuration: ${message}`])
      }
    }),
  )

  it.effect("refuses an idle timeout outside 1–300 s and an invalid base URL", () =>
    Effect.gen(function* () {
      const server = yield* serve()
      for (const idleTimeoutMs of [999, 300_001, 1.5]) {
        const error = yield* Effect.flip(openAi(server, { idleTimeoutMs }))
        assert.strictEqual(error.reason._tag, "Adapter")
      }
      const error = yield* Effect.flip(
        LanguageModel.make({ kind: "openai-compatible", baseUrl: "localhost:8080", model: "m", apiKey: Redacted.make(API_KEY) }),
      )
      assert.isTrue(error.reason.message.includes("baseUrl"))
      assert.isFalse(error.message.includes(API_KEY))
    }),
  )

  it.effect("refuses a request whose output limit is not a positive integer, before sending it", () =>
    Effect.gen(function* () {
      const server = yield* serve()
      const error = yield* failureOf((yield* openAi(server)).stream(request({ maxOutputTokens: 0 })))
      assert.strictEqual(error.reason._tag, "Adapter")
      assert.strictEqual(server.requests().length, 0)
    }),
  )
})

describe("Anthropic adapter", () => {
  it.effect("writes tool history as text in a request offering no tools, leaves out assistant text of only whitespace, and names a blank user message", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.sse(AnthropicSse.response({ text: ["ok"] })), Respond.sse(AnthropicSse.response({ text: ["ok"] })), Respond.sse(AnthropicSse.response({ text: ["ok"] })))
      const model = yield* anthropic(server)
      const history: Prompt.Prompt = [
        { role: "user", content: "Read a.txt" },
        {
          role: "assistant",
          parts: [
            { kind: "text", text: "\n\n" },
            { kind: "tool_call", toolCallId: "toolu_1", toolName: "read_file", input: { path: "a.txt" }, providerExecuted: false },
          ],
        },
        {
          role: "tool",
          results: [
            { toolCallId: "toolu_1", toolName: "read_file", output: { type: "text", value: "alpha" } },
          ],
        },
        { role: "assistant", parts: [{ kind: "text", text: " \n " }] },
        // A user message of only whitespace between two answers, recorded before it was refused at admission.
        { role: "user", content: " \t" },
        { role: "assistant", parts: [{ kind: "text", text: "Go on." }] },
        { role: "user", content: "Summarise." },
      ]
      // A summary's request: no tools.
      yield* stepOf(model.stream(request({ prompt: history, tools: [] })))
      const sent = server.requests()[0]!.json as Record<string, unknown>
      assert.isUndefined(sent["tools"])
      assert.deepStrictEqual(sent["messages"], [
        { role: "user", content: [{ type: "text", text: "Read a.txt" }] },
        { role: "assistant", content: [{ type: "text", text: '[tool call toolu_1: read_file {"path":"a.txt"}]' }] },
        {
          role: "user",
          content: [
            { type: "text", text: "[tool result toolu_1: read_file]\nalpha" },
            { type: "text", text: "(an empty message)" },
          ],
        },
        { role: "assistant", content: [{ type: "text", text: "Go on." }] },
        { role: "user", content: [{ type: "text", text: "Summarise." }] },
      ])
      // A blank first message keeps the conversation's first turn the user's.
      yield* stepOf(model.stream(request({ prompt: [{ role: "user", content: " " }, { role: "assistant", parts: [{ kind: "text", text: "Hi." }] }, { role: "user", content: "Go on." }], tools: [] })))
      assert.deepStrictEqual(
        (server.requests()[1]!.json as { readonly messages: ReadonlyArray<{ readonly role: string }> }).messages.map((message) => message.role),
        ["user", "assistant", "user"],
      )
      // With tools offered, the same history is tool_use and tool_result blocks.
      yield* stepOf(model.stream(request({ prompt: history, tools })))
      const withTools = server.requests()[2]!.json as { readonly messages: ReadonlyArray<{ readonly content: ReadonlyArray<{ readonly type: string }> }> }
      assert.deepStrictEqual(
        withTools.messages.flatMap((message) => message.content.map((block) => block.type)),
        ["text", "tool_use", "tool_result", "text", "text", "text"],
      )
    }),
  )

  it.effect("encodes system, merged user turns, signed thinking, tool use and tool results", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.sse(AnthropicSse.response({ text: ["ok"] })))
      const model = yield* anthropic(server)
      const signed: Prompt.Prompt = [
        { role: "system", content: "You are terse." },
        { role: "user", content: "Read a.txt" },
        {
          role: "assistant",
          parts: [
            { kind: "thinking", text: "Plan.", providerOptions: { anthropic: { signature: "sig-1" }, maka: { routeIdentity: model.routeIdentity } } },
            { kind: "thinking", text: "Unsigned, from elsewhere." },
            { kind: "tool_call", toolCallId: "toolu_1", toolName: "read_file", input: { path: "a.txt" }, providerExecuted: false },
          ],
        },
        { role: "tool", results: [{ toolCallId: "toolu_1", toolName: "read_file", output: { type: "error-text", value: "missing" } }] },
        { role: "user", content: "Try again" },
      ]
      yield* stepOf(model.stream(request({ prompt: signed, tools, providerOptions: { thinking: { type: "enabled", budget_tokens: 1024 } } })))
      const sent = server.requests()[0]
      assert.strictEqual(sent?.path, "/v1/messages")
      assert.strictEqual(sent?.headers["x-api-key"], API_KEY)
      assert.strictEqual(sent?.headers["anthropic-version"], "2023-06-01")
      assert.deepStrictEqual(sent?.json, {
        max_tokens: 256,
        messages: [
          { role: "user", content: [{ type: "text", text: "Read a.txt" }] },
          {
            role: "assistant",
            content: [
              { type: "thinking", thinking: "Plan.", signature: "sig-1" },
              { type: "tool_use", id: "toolu_1", name: "read_file", input: { path: "a.txt" } },
            ],
          },
          {
            role: "user",
            content: [
              { type: "tool_result", tool_use_id: "toolu_1", content: "missing", is_error: true },
              { type: "text", text: "Try again" },
            ],
          },
        ],
        model: "claude-test",
        stream: true,
        system: "You are terse.",
        thinking: { type: "enabled", budget_tokens: 1024 },
        tools: [{ name: "read_file", description: "Read a file", input_schema: { type: "object", properties: { path: { type: "string" } } } }],
      })
    }),
  )

  it.effect("leaves thinking out of a request continuing a tool loop whose last assistant message has none", () =>
    Effect.gen(function* () {
      const server = yield* serve(...[1, 2, 3].map(() => Respond.sse(AnthropicSse.response({ text: ["ok"] }))))
      const model = yield* anthropic(server)
      const thinkingOn = { thinking: { type: "enabled", budget_tokens: 1024 }, temperature: 1 }
      const call: Prompt.AssistantMessage["parts"][number] = { kind: "tool_call", toolCallId: "toolu_1", toolName: "read_file", input: { path: "a" }, providerExecuted: false }
      const signed: Prompt.AssistantMessage["parts"][number] = {
        kind: "thinking",
        text: "Plan.",
        providerOptions: { anthropic: { signature: "sig" }, maka: { routeIdentity: model.routeIdentity } },
      }
      const result: Prompt.PromptMessage = { role: "tool", results: [{ toolCallId: "toolu_1", toolName: "read_file", output: { type: "text", value: "a" } }] }
      const prompts: ReadonlyArray<Prompt.Prompt> = [
        // A loop from another route (its reasoning not sent here): thinking left out.
        [{ role: "user", content: "Go." }, { role: "assistant", parts: [{ kind: "thinking", text: "Elsewhere." }, call] }, result],
        // The loop's last message begins with this route's thinking: kept.
        [{ role: "user", content: "Go." }, { role: "assistant", parts: [signed, call] }, result],
        // A new turn after an answer without thinking: kept.
        [{ role: "user", content: "Go." }, { role: "assistant", parts: [{ kind: "text", text: "Done." }] }, { role: "user", content: "More." }],
      ]
      const sent: Array<unknown> = []
      for (const prompt of prompts) {
        const index = server.requests().length
        yield* stepOf(model.stream(request({ prompt, tools, providerOptions: thinkingOn })))
        const json = server.requests()[index]?.json as Record<string, unknown>
        sent.push([json["thinking"], json["temperature"]])
      }
      assert.deepStrictEqual(sent, [
        [undefined, 1],
        [{ type: "enabled", budget_tokens: 1024 }, 1],
        [{ type: "enabled", budget_tokens: 1024 }, 1],
      ])
    }),
  )

  it.effect("leaves the options' tool_choice out of a request without tools (a summary's), which the API refuses", () =>
    Effect.gen(function* () {
      const server = yield* serve(...[1, 2].map(() => Respond.sse(AnthropicSse.response({ text: ["ok"] }))))
      const model = yield* anthropic(server)
      const providerOptions = { tool_choice: { type: "auto" }, temperature: 0 }
      const choices: Array<unknown> = []
      for (const offered of [[], tools]) {
        const index = server.requests().length
        yield* stepOf(model.stream(request({ tools: offered, providerOptions })))
        const json = server.requests()[index]?.json as Record<string, unknown>
        choices.push([json["tool_choice"], json["temperature"]])
      }
      assert.deepStrictEqual(choices, [
        [undefined, 0],
        [{ type: "auto" }, 0],
      ])
    }),
  )

  it.effect("sends tool ids recorded on another route in the API's pattern, unique in the request", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.sse(AnthropicSse.response({ text: ["ok"] })))
      const model = yield* anthropic(server)
      const call = (toolCallId: string): Prompt.AssistantMessage["parts"][number] => ({
        kind: "tool_call",
        toolCallId,
        toolName: "read_file",
        input: { path: "a.txt" },
        providerExecuted: false,
      })
      const result = (toolCallId: string): Prompt.ToolMessage["results"][number] => ({ toolCallId, toolName: "read_file", output: { type: "text", value: "a" } })
      // Kimi's ids, an OpenAI-compatible server's made-up `call_0` in two steps, then a call whose
      // own id is the one made for the repeat.
      const history: Prompt.Prompt = [
        { role: "user", content: "Read." },
        { role: "assistant", parts: [call("functions.read_file:0"), call("call_0")] },
        { role: "tool", results: [result("functions.read_file:0"), result("call_0")] },
        { role: "assistant", parts: [call("call_0")] },
        { role: "tool", results: [result("call_0")] },
        { role: "assistant", parts: [call("call_0_2")] },
        { role: "tool", results: [result("call_0_2")] },
      ]
      yield* stepOf(model.stream(request({ prompt: history, tools })))
      const messages = (server.requests()[0]?.json as { messages: ReadonlyArray<{ content: ReadonlyArray<Record<string, unknown>> }> }).messages
      const sent = messages.slice(1).map((message) => message.content.map((block) => block["id"] ?? block["tool_use_id"]))
      assert.deepStrictEqual(sent, [
        ["functions_read_file_0", "call_0"],
        ["functions_read_file_0", "call_0"],
        ["call_0_2"],
        ["call_0_2"],
        ["call_0_2_2"],
        ["call_0_2_2"],
      ])
    }),
  )

  it.effect("usage counts are cumulative: a message_delta's lower count keeps the message_start's", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.sse(
          AnthropicSse.response({
            text: ["ok"],
            inputUsage: { input_tokens: 150000, cache_read_input_tokens: 20, output_tokens: 1 },
            outputUsage: { input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 7 },
          }),
        ),
      )
      const step = yield* stepOf((yield* anthropic(server)).stream(request()))
      assert.deepStrictEqual(step.usage, { inputTokens: 150020, outputTokens: 7, cacheReadTokens: 20 })
    }),
  )

  it.effect("keeps the thinking signature and redacted thinking in providerOptions stamped with the route", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.sse([
          AnthropicSse.messageStart({ usage: { input_tokens: 5, cache_read_input_tokens: 100, cache_creation_input_tokens: 7, output_tokens: 1 } }),
          ...AnthropicSse.thinkingBlock(0, ["Think", "ing."], "c2ln"),
          AnthropicSse.blockStart(1, { type: "redacted_thinking", data: "EmwKAhgB" }),
          AnthropicSse.blockStop(1),
          ...AnthropicSse.textBlock(2, ["Done."]),
          ...AnthropicSse.toolUseBlock(3, { id: "toolu_9", name: "grep" }, ['{"q"', ':"x"}']),
          AnthropicSse.messageDelta("tool_use", { output_tokens: 42 }),
          AnthropicSse.messageStop(),
        ]),
      )
      const model = yield* anthropic(server)
      const step = yield* stepOf(model.stream(request()))
      const maka = { routeIdentity: model.routeIdentity }
      assert.deepStrictEqual(step, {
        parts: [
          { kind: "text", textKind: "thinking", text: "Thinking.", providerOptions: { anthropic: { signature: "c2ln" }, maka } },
          { kind: "text", textKind: "thinking", text: "", providerOptions: { anthropic: { redactedData: "EmwKAhgB" }, maka } },
          { kind: "text", textKind: "text", text: "Done." },
          { kind: "tool_call", id: "toolu_9", name: "grep", input: { q: "x" }, providerExecuted: false },
        ],
        finishReason: "tool-calls",
        usage: { inputTokens: 112, outputTokens: 42, cacheReadTokens: 100, cacheWriteTokens: 7 },
        responseId: "msg_test",
        model: "claude-test",
      })
    }),
  )

  it.effect("a delta for a block of another kind, or not open, is an unsupported provider event saying so", () =>
    Effect.gen(function* () {
      const text = AnthropicSse.blockStart(0, { type: "text", text: "" })
      const streams = [
        [text, AnthropicSse.blockDelta(0, { type: "thinking_delta", thinking: "x" })],
        [AnthropicSse.blockStart(0, { type: "redacted_thinking", data: "r" }), AnthropicSse.blockDelta(0, { type: "thinking_delta", thinking: "x" })],
        [text, AnthropicSse.blockDelta(1, { type: "text_delta", text: "x" })],
        [text, AnthropicSse.blockStop(0), AnthropicSse.blockStop(0)],
        [text, text],
        [AnthropicSse.messageStart()],
        [AnthropicSse.blockStart(0, { type: "tool_use", id: "c", name: 5 })],
        [text, AnthropicSse.blockDelta(0, { type: "text_delta", text: ["x"] })],
      ]
      const server = yield* serve(...streams.map((events) => Respond.sse([AnthropicSse.messageStart(), ...events])))
      const model = yield* anthropic(server)
      const messages: Array<string> = []
      for (const _ of streams) {
        const error = yield* failureOf(model.stream(request()))
        assert.strictEqual(error.reason._tag, "Adapter")
        messages.push(error.reason.message.replace("unsupported provider event: ", ""))
      }
      assert.deepStrictEqual(messages, [
        "a thinking_delta for a text block",
        "a thinking_delta for a redacted_thinking block",
        "a delta for content block 1, which is not open",
        "a stop of content block 0, which is not open",
        "content block 0 started twice",
        "a second message_start",
        "content_block.name is not a string",
        "delta.text is not a string",
      ])
    }),
  )

  it.effect("an unknown event, content block or delta type is an unsupported provider event naming the type", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.sse([AnthropicSse.messageStart(), Respond.event({ type: "some_new_event" }, { event: "some_new_event" })]),
        Respond.sse([AnthropicSse.messageStart(), AnthropicSse.blockStart(0, { type: "server_tool_use", id: "s", name: "web_search" })]),
        Respond.sse([
          AnthropicSse.messageStart(),
          AnthropicSse.blockStart(0, { type: "text", text: "" }),
          AnthropicSse.blockDelta(0, { type: "citations_delta", citation: {} }),
        ]),
        // A type that is no plain name is not repeated.
        Respond.sse([AnthropicSse.messageStart(), Respond.event({ type: "a b\n" })]),
      )
      const model = yield* anthropic(server)
      const messages: Array<string> = []
      for (let index = 0; index < 4; index++) {
        const error = yield* failureOf(model.stream(request()))
        assert.strictEqual(error.reason._tag, "Adapter")
        messages.push(error.reason.message)
      }
      assert.deepStrictEqual(messages, [
        'unsupported provider event: event type "some_new_event"',
        'unsupported provider event: content block type "server_tool_use"',
        'unsupported provider event: delta type "citations_delta"',
        "unsupported provider event",
      ])
    }),
  )

  it.effect("an unknown stop reason is an adapter error", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.sse(AnthropicSse.response({ text: ["x"], stopReason: "refusal" })))
      const error = yield* failureOf((yield* anthropic(server)).stream(request()))
      assert.strictEqual(error.reason.message, "model did not complete: refusal")
    }),
  )
})

describe("concurrency and cancellation", () => {
  it.effect("holds at most `concurrency` requests in flight; a background reservation keeps a foreground slot", () =>
    Effect.gen(function* () {
      const gate = Respond.gate()
      const server = yield* ScriptedServer.make({
        script: [{ respond: Respond.hold(gate, Respond.sse(OpenAiSse.response({ text: ["ok"] }))), repeat: true }],
      })
      const model = yield* openAi(server, { concurrency: 3 })
      // A reservation with three free permits succeeds and leaves two.
      const reservation = yield* model.tryReserveBackground
      assert.isTrue(Option.isSome(reservation))
      const first = yield* Effect.forkChild(collect(model.stream(request())))
      yield* ScriptedServer.awaitRequest(server, 0)
      // One permit is free: a second reservation would take the last foreground slot, so it is refused.
      assert.isTrue(Option.isNone(yield* Effect.scoped(model.tryReserveBackground)))
      const second = yield* Effect.forkChild(collect(model.stream(request())))
      yield* ScriptedServer.awaitRequest(server, 1)
      // Every permit is held now: a third foreground stream waits without sending.
      const third = yield* Effect.forkChild(collect(model.stream(request())))
      const background = yield* Effect.forkChild(
        collect(model.stream(request(), { reservation: Option.getOrUndefined(reservation) })),
      )
      yield* ScriptedServer.awaitRequest(server, 2)
      // Give a wrongly admitted fourth request the chance to arrive (real time; never asserted on).
      yield* pause
      assert.strictEqual(server.requests().length, 3)
      gate.release()
      for (const fiber of [first, second, third, background]) {
        const { error } = yield* Fiber.join(fiber)
        assert.strictEqual(error, undefined)
      }
      assert.strictEqual(server.requests().length, 4)
    }),
  )

  it.effect("a background reservation runs its streams one after another", () =>
    Effect.gen(function* () {
      const gate = Respond.gate()
      const order: Array<string> = []
      const server = yield* ScriptedServer.make({
        script: [
          Respond.hold(gate, Respond.sse(OpenAiSse.response({ text: ["one"] }))),
          Respond.sse(OpenAiSse.response({ text: ["two"] })),
        ],
        onProgress: (progress) => {
          if (progress.type === "request") order.push(`request ${progress.request.index}`)
          if (progress.type === "response") order.push(`response ${progress.exchange.request.index}`)
        },
      })
      const model = yield* openAi(server, { concurrency: 4 })
      const reservation = Option.getOrUndefined(yield* model.tryReserveBackground)
      assert.isDefined(reservation)
      const first = yield* Effect.forkChild(collect(model.stream(request(), { reservation })))
      yield* ScriptedServer.awaitRequest(server, 0)
      const second = yield* Effect.forkChild(collect(model.stream(request(), { reservation })))
      yield* pause
      gate.release()
      yield* Fiber.join(first)
      assert.strictEqual((yield* Fiber.join(second)).error, undefined)
      yield* ScriptedServer.awaitExchange(server, 1)
      assert.deepStrictEqual(order, ["request 0", "response 0", "request 1", "response 1"])
    }),
  )

  it.effect("interrupting a stream that waits for a permit sends nothing", () =>
    Effect.gen(function* () {
      const gate = Respond.gate()
      const server = yield* serve(Respond.hold(gate, Respond.sse(OpenAiSse.response({ text: ["ok"] }))))
      const model = yield* openAi(server, { concurrency: 1 })
      const first = yield* Effect.forkChild(collect(model.stream(request())))
      yield* ScriptedServer.awaitRequest(server, 0)
      const waiting = yield* Effect.forkChild(collect(model.stream(request())))
      yield* Fiber.interrupt(waiting)
      gate.release()
      yield* Fiber.join(first)
      assert.strictEqual(server.requests().length, 1)
    }),
  )

  it.effect("cancelling while waiting for the response headers aborts the request", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.hang())
      const model = yield* openAi(server)
      const fiber = yield* Effect.forkChild(collect(model.stream(request())))
      yield* ScriptedServer.awaitRequest(server, 0)
      yield* Fiber.interrupt(fiber)
      assert.strictEqual((yield* ScriptedServer.awaitExchange(server, 0)).outcome, "client_closed")
    }),
  )

  it.effect("cancelling mid-stream aborts the socket and frees the permit", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.stallAfter([OpenAiSse.role(), OpenAiSse.text("partial")]),
        Respond.sse(OpenAiSse.response({ text: ["next"] })),
      )
      const model = yield* openAi(server, { concurrency: 1 })
      const seen: Array<string> = []
      const fiber = yield* Effect.forkChild(Stream.runForEach(model.stream(request()), (event) => Effect.sync(() => seen.push(event.kind))))
      yield* waitUntil(() => seen.includes("part_delta"))
      yield* Fiber.interrupt(fiber)
      assert.strictEqual((yield* ScriptedServer.awaitExchange(server, 0)).outcome, "client_closed")
      const next = yield* stepOf(model.stream(request()))
      assert.deepStrictEqual(next.parts, [{ kind: "text", textKind: "text", text: "next" }])
    }),
  )
})

describe("after the finish", () => {
  const afterFinish = (error: import("@maka/model").ModelError.ModelError | undefined) => {
    assert.isDefined(error)
    assert.strictEqual(error?.reason._tag, "Adapter")
    assert.strictEqual(error?.reason.message, "event after model finish")
  }

  it.effect("an OpenAI chunk after [DONE] is an adapter error, and no finished event is yielded", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        Respond.sse([...OpenAiSse.response({ text: ["ok"] }), OpenAiSse.text(" more")]),
        Respond.sse([Respond.raw(`data: [DONE]\n\ndata: {"choices":[]}\n\n`)].flatMap((done) => [...OpenAiSse.response({ text: ["ok"], done: false }), done])),
      )
      const model = yield* openAi(server)
      for (let index = 0; index < 2; index++) {
        const { events, error } = yield* collect(model.stream(request()))
        afterFinish(error)
        assert.isFalse(events.some((event) => event.kind === "finished"))
      }
    }),
  )

  it.effect("an Anthropic event after message_stop is an adapter error", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.sse([...AnthropicSse.response({ text: ["ok"] }), ...AnthropicSse.textBlock(1, ["late"])]))
      const { events, error } = yield* collect((yield* anthropic(server)).stream(request()))
      afterFinish(error)
      assert.isFalse(events.some((event) => event.kind === "finished"))
    }),
  )

  it.effect("a message that says nothing after the finish (a ping, a [DONE]) is no event: the step finishes", () =>
    Effect.gen(function* () {
      const trailers = [[AnthropicSse.ping()], [Respond.raw("data: [DONE]\n\n")], [AnthropicSse.ping(), Respond.raw("data: [DONE]\n\n"), AnthropicSse.ping()]]
      const server = yield* serve(
        ...trailers.map((after) => Respond.sse([...AnthropicSse.response({ text: ["ok"] }), ...after])),
        Respond.sse([...OpenAiSse.response({ text: ["ok"] }), Respond.raw("data: [DONE]\n\n")]),
      )
      const model = yield* anthropic(server)
      for (const after of trailers) {
        const step = yield* stepOf(model.stream(request()))
        assert.strictEqual(step.finishReason, "stop", JSON.stringify(after))
        assert.deepStrictEqual(step.parts, [{ kind: "text", textKind: "text", text: "ok" }])
      }
      assert.strictEqual((yield* stepOf((yield* openAi(server)).stream(request()))).finishReason, "stop")
    }),
  )

  it.effect("an Anthropic body that ends after the stop reason, without message_stop, finishes the step", () =>
    Effect.gen(function* () {
      const withoutStop = (options: AnthropicSse.ResponseOptions) => AnthropicSse.response(options).slice(0, -1)
      const server = yield* serve(
        Respond.sse(withoutStop({ text: ["all ", "of it"], inputUsage: { input_tokens: 150 } })),
        Respond.sse([...withoutStop({ toolUses: [{ id: "t", name: "read_file", json: ['{"path":', '"a"}'] }] }), Respond.raw("data: [DONE]\n\n")]),
        // A block still open at the end is a cut stream, as before.
        Respond.sse([AnthropicSse.messageStart(), AnthropicSse.blockStart(0, { type: "text", text: "" }), AnthropicSse.messageDelta("end_turn")]),
      )
      const model = yield* anthropic(server)
      const text = yield* stepOf(model.stream(request()))
      assert.deepStrictEqual([text.parts, text.finishReason, text.usage], [
        [{ kind: "text", textKind: "text", text: "all of it" }],
        "stop",
        { inputTokens: 150, outputTokens: 5 },
      ])
      const call = yield* stepOf(model.stream(request()))
      assert.deepStrictEqual([call.finishReason, call.parts.map((part) => part.kind)], ["tool-calls", ["tool_call"]])
      const open = yield* failureOf(model.stream(request()))
      assert.deepStrictEqual([open.reason._tag, open.message.includes("stream ended before message_stop")], ["Provider", true])
    }),
  )

  it.effect("keep-alive comments after the finish are allowed", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.sse([...OpenAiSse.response({ text: ["ok"] }), Respond.comment(), Respond.comment()]))
      const step = yield* stepOf((yield* openAi(server)).stream(request()))
      assert.strictEqual(step.finishReason, "stop")
    }),
  )

  it.effect("a body that breaks after the finish (a reset after [DONE]) completes the step with everything it said", () =>
    Effect.gen(function* () {
      const server = yield* serve(
        ...[0, 1, 2, 3].map((index) =>
          Respond.dropAfter(index < 2 ? OpenAiSse.response({ text: ["all ", "of it"] }) : AnthropicSse.response({ text: ["all ", "of it"] })),
        ),
      )
      for (const index of [0, 1, 2, 3]) {
        // The adapter's own client, then a host `fetch`, for each provider.
        const config = {
          ...(index < 2
            ? { kind: "openai-compatible" as const, baseUrl: `${server.url}/v1/`, model: "test-model" }
            : { kind: "anthropic" as const, baseUrl: server.url, model: "claude-test" }),
          apiKey: Redacted.make("sk-test"),
          ...(index % 2 === 1 ? { fetch: globalThis.fetch } : {}),
        }
        const step = yield* stepOf((yield* LanguageModel.make(config)).stream(request()))
        assert.strictEqual(step.finishReason, "stop", `response ${index}`)
        assert.deepStrictEqual(step.parts, [{ kind: "text", textKind: "text", text: "all of it" }], `response ${index}`)
        assert.strictEqual((yield* ScriptedServer.awaitExchange(server, index)).outcome, "dropped")
      }
    }),
  )

  it.effect("a body left open after the finish completes the step once the grace has passed", () =>
    Effect.gen(function* () {
      const server = yield* serve(Respond.stallAfter(OpenAiSse.response({ text: ["ok"] })))
      const fiber = yield* Effect.forkChild(collect((yield* openAi(server)).stream(request())))
      yield* advanceUntilDone(fiber, 500)
      const { events, error } = yield* Fiber.join(fiber)
      assert.strictEqual(error, undefined)
      assert.strictEqual(events.at(-1)?.kind, "finished")
      assert.strictEqual((yield* ScriptedServer.awaitExchange(server, 0)).outcome, "client_closed")
    }),
  )
})
