/**
 * A provider that echoes the host's secrets into its answer never gets them yielded
 * (docs/model.md §4.3): not in a text or reasoning delta, whole or split across deltas, nor in a
 * tool call's input.
 */
import { assert, describe, it } from "@effect/vitest"
import type { Model } from "@maka/facts"
import { LanguageModel, StepBuilder } from "@maka/model"
import { AnthropicSse, OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Effect, Redacted, Result } from "effect"
import { anthropic, API_KEY, collect, openAi, request } from "./support.ts"

/** Every way of cutting `text` in two. */
const cuts = (text: string): ReadonlyArray<readonly [string, string]> =>
  Array.from({ length: text.length + 1 }, (_, index) => [text.slice(0, index), text.slice(index)] as const)

const yielded = (events: ReadonlyArray<Model.ModelEvent>): string =>
  events.flatMap((event) => (event.kind === "part_delta" ? [event.text] : [])).join("")

const stepOf = (events: ReadonlyArray<Model.ModelEvent>): Model.ModelStep => {
  const step = StepBuilder.fold("step-1", events)
  if (Result.isFailure(step)) return assert.fail(step.failure.message)
  return step.success
}

const textOf = (step: Model.ModelStep, textKind: Model.TextKind = "text"): string =>
  step.parts.flatMap((part) => (part.kind === "text" && part.textKind === textKind ? [part.text] : [])).join("")

/** No delta, and no two deltas of a part put together, show any of the key. */
const assertNoKey = (events: ReadonlyArray<Model.ModelEvent>) => {
  for (const event of events) if (event.kind === "part_delta") assert.notInclude(event.text, API_KEY)
  assert.notInclude(yielded(events), API_KEY)
  assert.notInclude(JSON.stringify(events), API_KEY)
}

describe("secrets in answers", () => {
  it.effect("replaces the key in an OpenAI answer however its deltas cut it, and keeps the rest of the text", () =>
    Effect.gen(function* () {
      const answer = `Your key is ${API_KEY}, keep it.`
      const splits = cuts(answer)
      const server = yield* ScriptedServer.make({
        script: splits.map(([first, second]) => Respond.sse(OpenAiSse.response({ text: [first, second] }))),
      })
      const model = yield* openAi(server)
      for (const [first, second] of splits) {
        const { events, error } = yield* collect(model.stream(request()))
        assert.strictEqual(error, undefined, `${first}|${second}`)
        assertNoKey(events)
        assert.strictEqual(textOf(stepOf(events)), "Your key is [redacted], keep it.", `${first}|${second}`)
      }
    }),
  )

  it.effect("replaces the key that runs from one part into the next, however the parts cut it", () =>
    Effect.gen(function* () {
      const splits = cuts(API_KEY)
      const server = yield* ScriptedServer.make({
        script: [
          ...splits.map(([first, second]) =>
            Respond.sse(OpenAiSse.response({ reasoning: [`think ${first}`], text: [second.slice(0, 3), `${second.slice(3)} ok`] })),
          ),
          // The start of the key at a part's end that the next part does not go on with.
          Respond.sse(OpenAiSse.response({ reasoning: [`think ${API_KEY.slice(0, 8)}`], text: ["elsewhere"] })),
        ],
      })
      const model = yield* openAi(server)
      for (const [first, second] of splits) {
        const { events, error } = yield* collect(model.stream(request()))
        assert.strictEqual(error, undefined, `${first}|${second}`)
        assertNoKey(events)
        const step = stepOf(events)
        const thinking = textOf(step, "thinking")
        const text = textOf(step)
        assert.strictEqual(`${thinking}|${text}`, first === "" ? "think |[redacted] ok" : "think [redacted]| ok", `${first}|${second}`)
      }
      const other = stepOf((yield* collect(model.stream(request()))).events)
      assert.strictEqual(`${textOf(other, "thinking")}|${textOf(other)}`, `think ${API_KEY.slice(0, 8)}|elsewhere`)
    }),
  )

  it.effect("replaces the key sent one character per delta, and in reasoning", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [Respond.sse(OpenAiSse.response({ reasoning: [...`think ${API_KEY}`], text: [...`say ${API_KEY}!`] }))],
      })
      const { events, error } = yield* collect((yield* openAi(server)).stream(request()))
      assert.strictEqual(error, undefined)
      assertNoKey(events)
      const step = stepOf(events)
      assert.strictEqual(textOf(step), "say [redacted]!")
      assert.strictEqual(textOf(step, "thinking"), "think [redacted]")
    }),
  )

  it.effect("yields a held-back start of the key that the key does not follow, in full and in order", () =>
    Effect.gen(function* () {
      const start = API_KEY.slice(0, 6)
      const server = yield* ScriptedServer.make({
        script: [
          Respond.sse(OpenAiSse.response({ text: [`a ${start}`, "b", ` ${start}`] })),
          Respond.sse(OpenAiSse.response({ text: [`ends ${API_KEY.slice(0, -1)}`] })),
        ],
      })
      const model = yield* openAi(server)
      const first = yield* collect(model.stream(request()))
      assert.strictEqual(yielded(first.events), `a ${start}b ${start}`)
      assert.strictEqual(textOf(stepOf(first.events)), `a ${start}b ${start}`)
      // All but the last character of the key, then the end: nothing was a secret, all of it shows.
      const second = yield* collect(model.stream(request()))
      assert.strictEqual(textOf(stepOf(second.events)), `ends ${API_KEY.slice(0, -1)}`)
    }),
  )

  it.effect("replaces the key in a tool call's input, and in an Anthropic answer", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [
          Respond.sse(
            OpenAiSse.response({
              toolCalls: [{ id: "call-1", name: "save", arguments: ['{"note":"the key is ', API_KEY.slice(0, 5), `${API_KEY.slice(5)}","n":[1,{"k":"${API_KEY}"}]}`] }],
            }),
          ),
          Respond.sse(
            AnthropicSse.response({
              thinking: { chunks: [`I see ${API_KEY.slice(0, 9)}`, API_KEY.slice(9)], signature: "sig" },
              text: ["Here: ", API_KEY, "."],
              toolUses: [{ id: "toolu_1", name: "save", json: [`{"note":"${API_KEY.slice(0, 3)}`, `${API_KEY.slice(3)}"}`] }],
            }),
          ),
        ],
      })
      const openAiEvents = (yield* collect((yield* openAi(server)).stream(request()))).events
      assertNoKey(openAiEvents)
      const call = stepOf(openAiEvents).parts.find((part) => part.kind === "tool_call")
      assert.deepStrictEqual(call?.kind === "tool_call" ? call.input : undefined, { note: "the key is [redacted]", n: [1, { k: "[redacted]" }] })
      const anthropicEvents = (yield* collect((yield* anthropic(server)).stream(request()))).events
      assertNoKey(anthropicEvents)
      const step = stepOf(anthropicEvents)
      assert.strictEqual(textOf(step), "Here: [redacted].")
      assert.strictEqual(textOf(step, "thinking"), "I see [redacted]")
      const use = step.parts.find((part) => part.kind === "tool_call")
      assert.deepStrictEqual(use?.kind === "tool_call" ? use.input : undefined, { note: "[redacted]" })
    }),
  )

  it.effect("replaces the key in a tool call's id (by `redacted`, which every provider takes in an id) and in a signature", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [
          Respond.sse(OpenAiSse.response({ toolCalls: [{ id: `call_${API_KEY}`, name: "save", arguments: ["{}"] }] })),
          Respond.sse(
            AnthropicSse.response({
              thinking: { chunks: ["Hmm."], signature: `sig-${API_KEY}` },
              toolUses: [{ id: `toolu_${API_KEY}`, name: "save", json: ["{}"] }],
            }),
          ),
        ],
      })
      const openAiEvents = (yield* collect((yield* openAi(server)).stream(request()))).events
      assertNoKey(openAiEvents)
      const call = stepOf(openAiEvents).parts.find((part) => part.kind === "tool_call")
      assert.strictEqual(call?.kind === "tool_call" ? call.id : undefined, "call_redacted")
      const anthropicEvents = (yield* collect((yield* anthropic(server)).stream(request()))).events
      assertNoKey(anthropicEvents)
      const step = stepOf(anthropicEvents)
      const use = step.parts.find((part) => part.kind === "tool_call")
      assert.strictEqual(use?.kind === "tool_call" ? use.id : undefined, "toolu_redacted")
      assert.include(JSON.stringify(step), "sig-[redacted]")
    }),
  )

  it.effect("leaves an answer as it is when the model has no key", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [Respond.sse(OpenAiSse.response({ text: ["Your key is ", API_KEY.slice(0, 7), API_KEY.slice(7)] }))],
      })
      const model = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1/`, model: "m", apiKey: Redacted.make("") })
      const { events } = yield* collect(model.stream(request()))
      assert.deepStrictEqual(
        events.flatMap((event) => (event.kind === "part_delta" ? [event.text] : [])),
        ["Your key is ", API_KEY.slice(0, 7), API_KEY.slice(7)],
      )
    }),
  )
})
