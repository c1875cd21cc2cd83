/**
 * The OpenAI-compatible body written from per-message fragments (a live run sends the same message
 * objects step after step) has exactly the bytes of the whole body written at once, whether the
 * message objects are reused or fresh, and whatever the provider options hold.
 */
import { assert, describe, it } from "@effect/vitest"
import { Canonical, type Prompt } from "@maka/facts"
import * as fc from "fast-check"
import { openAiBody, openAiBodyParts } from "../src/internal/openai-request.ts"

const text = fc.string({ maxLength: 12 })

const message: fc.Arbitrary<Prompt.PromptMessage> = fc.oneof(
  fc.record({ role: fc.constantFrom("system" as const, "user" as const), content: text }),
  fc.record({
    role: fc.constant("assistant" as const),
    parts: fc.array(
      fc.oneof(
        fc.record({ kind: fc.constant("text" as const), text }),
        fc.record({ kind: fc.constant("thinking" as const), text }),
        fc.record({
          kind: fc.constant("tool_call" as const),
          toolCallId: text,
          toolName: text,
          input: fc.dictionary(text, fc.jsonValue({ maxDepth: 2 })),
          providerExecuted: fc.boolean(),
        }),
      ),
      { maxLength: 4 },
    ),
  }),
  fc.record({
    role: fc.constant("tool" as const),
    results: fc.array(
      fc.record({
        toolCallId: text,
        toolName: text,
        output: fc.oneof(
          fc.record({ type: fc.constant("text" as const), value: text }),
          fc.record({ type: fc.constant("error-text" as const), value: text }),
          fc.record({ type: fc.constant("json" as const), value: fc.jsonValue({ maxDepth: 2 }) }),
        ),
      }),
      { maxLength: 3 },
    ),
  }),
) as fc.Arbitrary<Prompt.PromptMessage>

const tool: fc.Arbitrary<Prompt.ToolDefinition> = fc.record({
  name: text,
  description: text,
  inputSchema: fc.dictionary(text, fc.jsonValue({ maxDepth: 2 })),
}) as fc.Arbitrary<Prompt.ToolDefinition>

/** The body as it was written before fragments: one canonical write of the whole object. */
const wholeBody = (model: string, request: Prompt.ModelRequest, prompt: Prompt.Prompt): unknown => ({
  ...Object.fromEntries(
    Object.entries(request.providerOptions).filter(
      ([key]) => key !== "tools" && (request.tools.length > 0 || (key !== "tool_choice" && key !== "parallel_tool_calls")),
    ),
  ),
  model,
  messages: JSON.parse(openAiBody(model, request, prompt, "max_tokens")).messages,
  max_tokens: request.maxOutputTokens,
  stream: true,
  // The options' own stream_options replace the adapter's (docs/model.md §4.1); null leaves it out.
  ...(request.providerOptions["stream_options"] === null
    ? {}
    : { stream_options: request.providerOptions["stream_options"] ?? { include_usage: true } }),
  ...(request.tools.length === 0
    ? {}
    : {
        tools: request.tools.map((definition) => ({
          type: "function",
          function: { name: definition.name, description: definition.description, parameters: definition.inputSchema },
        })),
      }),
})

const requestOf = (
  prompt: Prompt.Prompt,
  providerOptions: Record<string, unknown>,
  tools: ReadonlyArray<Prompt.ToolDefinition> = [],
): Prompt.ModelRequest => ({ prompt, tools, providerOptions, maxOutputTokens: 1_000 }) as unknown as Prompt.ModelRequest

describe("the OpenAI-compatible body's stream_options", () => {
  it("is the adapter's include_usage unless providerOptions give their own, and left out when they give null", () => {
    const prompt: Prompt.Prompt = [{ role: "user", content: "hi" }]
    const bodyWith = (options: Record<string, unknown>) => JSON.parse(openAiBody("m", requestOf(prompt, options), prompt, "max_tokens")) as Record<string, unknown>
    assert.deepStrictEqual(bodyWith({})["stream_options"], { include_usage: true })
    assert.deepStrictEqual(bodyWith({ stream_options: { include_usage: false } })["stream_options"], { include_usage: false })
    assert.isFalse("stream_options" in bodyWith({ stream_options: null }))
    // The fields the options never replace, nor add: tools, when the request offers none.
    const body = bodyWith({ model: "x", messages: [], stream: false, max_tokens: 1, stream_options: null, tools: [{ type: "function" }] })
    assert.deepStrictEqual([body["model"], body["stream"], body["max_tokens"], body["tools"]], ["m", true, 1_000, undefined])
  })

  it("leaves the options' tool_choice and parallel_tool_calls out of a request without tools, which OpenAI refuses", () => {
    const prompt: Prompt.Prompt = [{ role: "user", content: "hi" }]
    const options = { tool_choice: "auto", parallel_tool_calls: false, temperature: 0 }
    const definition = { name: "read_file", description: "Reads.", inputSchema: { type: "object" } } as unknown as Prompt.ToolDefinition
    const fieldsOf = (tools: ReadonlyArray<Prompt.ToolDefinition>) => {
      const body = JSON.parse(openAiBody("m", requestOf(prompt, options, tools), prompt, "max_tokens")) as Record<string, unknown>
      return [body["tool_choice"], body["parallel_tool_calls"], body["temperature"]]
    }
    assert.deepStrictEqual(fieldsOf([]), [undefined, undefined, 0])
    assert.deepStrictEqual(fieldsOf([definition]), ["auto", false, 0])
  })
})

describe("the OpenAI-compatible body from message fragments", () => {
  it("equals the body written whole, with reused and with fresh message objects", () => {
    fc.assert(
      fc.property(fc.array(message, { maxLength: 8 }), fc.dictionary(text, fc.jsonValue({ maxDepth: 2 })), (prompt, options) => {
        const request = requestOf(prompt, options)
        const first = openAiBody("m", request, prompt, "max_tokens")
        // Reused objects (the fragments cached), then structurally equal fresh ones.
        assert.strictEqual(openAiBody("m", request, prompt, "max_tokens"), first)
        const fresh = JSON.parse(JSON.stringify(prompt)) as Prompt.Prompt
        assert.strictEqual(openAiBody("m", requestOf(fresh, options), fresh, "max_tokens"), first)
        // Every message appears, in order: the fragments of each message alone make up the array.
        const alone = prompt.map((item) => JSON.parse(openAiBody("m", requestOf([item], {}), [item], "max_tokens")).messages)
        assert.strictEqual(Canonical.stringify(JSON.parse(first).messages), Canonical.stringify(alone.flat()))
        assert.strictEqual(first, Canonical.stringify(wholeBody("m", request, prompt)))
      }),
      { numRuns: 300 },
    )
  })

  it("equals the body written whole with tools, a sealed list written once and an open one every time", () => {
    fc.assert(
      fc.property(fc.array(message, { maxLength: 4 }), fc.array(tool, { minLength: 1, maxLength: 4 }), (prompt, tools) => {
        const sealed = Canonical.seal(tools)
        const expected = Canonical.stringify(wholeBody("m", requestOf(prompt, {}, tools), prompt))
        assert.strictEqual(openAiBody("m", requestOf(prompt, {}, sealed), prompt, "max_tokens"), expected)
        assert.strictEqual(openAiBody("m", requestOf(prompt, {}, sealed), prompt, "max_tokens"), expected)
        const open = tools.map((definition) => ({ ...definition }))
        assert.strictEqual(openAiBody("m", requestOf(prompt, {}, open), prompt, "max_tokens"), expected)
        // A list that is not sealed may change between requests: its next body says what it holds now.
        open[0] = { ...open[0]!, description: `${open[0]!.description}!` }
        const changed = JSON.parse(openAiBody("m", requestOf(prompt, {}, open), prompt, "max_tokens"))
        assert.strictEqual(changed.tools[0].function.description, open[0].description)
      }),
      { numRuns: 200 },
    )
  })

  it("writes the body whole when a provider option holds the tools' slot text", () => {
    const prompt: Prompt.Prompt = [{ role: "user", content: "hi" }]
    const tools = Canonical.seal([{ name: "t", description: "d", inputSchema: { type: "object" } }])
    const request = requestOf(prompt, { a: "\u0000maka.tools\u0000" }, tools)
    const body = JSON.parse(openAiBody("m", request, prompt, "max_tokens"))
    assert.deepStrictEqual(body.tools, [{ type: "function", function: { name: "t", description: "d", parameters: { type: "object" } } }])
    assert.deepStrictEqual(body.messages, [{ role: "user", content: "hi" }])
    assert.strictEqual(body.a, "\u0000maka.tools\u0000")
  })

  it("writes the body whole when a provider option holds the messages' slot text", () => {
    const prompt: Prompt.Prompt = [{ role: "user", content: "hi" }]
    const request = requestOf(prompt, { a: "\u0000maka.messages\u0000" })
    const body = JSON.parse(openAiBody("m", request, prompt, "max_tokens"))
    assert.deepStrictEqual(body.messages, [{ role: "user", content: "hi" }])
    assert.strictEqual(body.a, "\u0000maka.messages\u0000")
  })

  it("sends the same bytes in parts over a run's prompts: extended, repeated, cut back, diverged and interleaved", () => {
    /** What a step does to its session's prompt. */
    const move = fc.oneof(
      fc.record({ kind: fc.constant("extend" as const), messages: fc.array(message, { minLength: 1, maxLength: 3 }) }),
      fc.record({ kind: fc.constant("repeat" as const) }),
      fc.record({ kind: fc.constant("cut" as const), keep: fc.nat() }),
      fc.record({ kind: fc.constant("diverge" as const), keep: fc.nat(), messages: fc.array(message, { maxLength: 3 }) }),
      // Another message at one place before the last: the same length and the same last object.
      fc.record({ kind: fc.constant("replace" as const), at: fc.nat(), message }),
    )
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.nat({ max: 2 }), move), { maxLength: 24 }),
        fc.array(tool, { maxLength: 2 }),
        fc.dictionary(text, fc.jsonValue({ maxDepth: 2 })),
        (moves, tools, options) => {
          const sealed = Canonical.seal(tools)
          const prompts: Array<Array<Prompt.PromptMessage>> = [[], [], []]
          const sent: Array<{ readonly view: ReadonlyArray<Uint8Array>; readonly text: string }> = []
          for (const [session, step] of moves) {
            const before = prompts[session]!
            const prompt =
              step.kind === "extend"
                ? [...before, ...step.messages]
                : step.kind === "repeat"
                  ? before
                  : step.kind === "cut"
                    ? before.slice(0, step.keep % (before.length + 1))
                    : step.kind === "replace"
                      ? before.map((item, index) => (before.length > 1 && index === step.at % (before.length - 1) ? step.message : item))
                      : [...before.slice(0, step.keep % (before.length + 1)), ...step.messages]
            prompts[session] = prompt
            const request = requestOf(prompt, options, sealed)
            const text = openAiBody("m", request, prompt, "max_tokens")
            const parts = openAiBodyParts("m", request, prompt, "max_tokens")
            const bytes = Buffer.concat(parts.parts)
            assert.strictEqual(parts.byteLength, bytes.length)
            assert.strictEqual(bytes.toString("utf8"), text)
            sent.push({ view: parts.parts, text })
          }
          // A body handed to an earlier request keeps its bytes while later ones extend the same buffer.
          for (const { view, text } of sent) assert.strictEqual(Buffer.concat(view).toString("utf8"), text)
        },
      ),
      { numRuns: 300 },
    )
  })

  it("sends the body whole in one part when a provider option holds a slot's text", () => {
    const prompt: Prompt.Prompt = [{ role: "user", content: "hi" }]
    const request = requestOf(prompt, { a: "\u0000maka.messages\u0000" })
    const parts = openAiBodyParts("m", request, prompt, "max_tokens")
    assert.strictEqual(parts.parts.length, 1)
    assert.strictEqual(Buffer.concat(parts.parts).toString("utf8"), openAiBody("m", request, prompt, "max_tokens"))
  })
})
