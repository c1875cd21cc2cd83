/**
 * Optional options forwarded as `undefined` (a test helper passing its own optional arguments on)
 * type-check under `exactOptionalPropertyTypes` and build what leaving them out builds. The type half
 * is checked by `pnpm check`.
 */
import { assert, describe, it } from "@effect/vitest"
import { AnthropicSse, History, OpenAiSse, Respond } from "@maka/testkit"

interface Forwarded {
  readonly event?: string | undefined
  readonly delayMs?: number | undefined
  readonly status?: number | undefined
  readonly firstId?: number | undefined
  readonly firstSequence?: number | undefined
  readonly id?: string | undefined
}

const none: Forwarded = {}

describe("options given as undefined", () => {
  it("count as absent", () => {
    const o = none
    assert.deepStrictEqual(Respond.event({}, { event: o.event, delayMs: o.delayMs }), Respond.event({}))
    assert.deepStrictEqual(Respond.comment("x", { delayMs: o.delayMs }), Respond.comment("x"))
    assert.deepStrictEqual(Respond.raw("x", { delayMs: o.delayMs }), Respond.raw("x"))
    assert.deepStrictEqual(Respond.sse([], { status: o.status, headers: undefined, end: undefined }), Respond.sse([]))
    assert.deepStrictEqual(Respond.dropAfter([], { status: o.status }), Respond.dropAfter([]))
    assert.deepStrictEqual(Respond.stallAfter([], { status: o.status }), Respond.stallAfter([]))
    assert.deepStrictEqual(Respond.json(200, {}, {}, { delayMs: o.delayMs }), Respond.json(200, {}))
    assert.deepStrictEqual(
      OpenAiSse.toolCall({ index: 0, id: o.id, name: undefined, arguments: undefined }),
      OpenAiSse.toolCall({ index: 0 }),
    )
    assert.deepStrictEqual(
      OpenAiSse.response({ id: o.id, model: undefined, reasoningField: undefined, usage: undefined, done: undefined }),
      OpenAiSse.response(),
    )
    assert.deepStrictEqual(AnthropicSse.messageStart({ id: o.id, model: undefined, usage: undefined }), AnthropicSse.messageStart())
    assert.deepStrictEqual(AnthropicSse.response({ id: o.id, thinking: undefined, stopReason: undefined }), AnthropicSse.response())
    const forwarded = History.smallRun({ firstId: o.firstId, firstSequence: o.firstSequence, sessionId: undefined })
    assert.deepStrictEqual(forwarded.writes, History.smallRun().writes)
  })

  it("Respond.json takes a delay", () => {
    const responder = Respond.json(503, "down", { "retry-after": "1" }, { delayMs: 25 })
    assert.deepStrictEqual(responder, { kind: "json", status: 503, headers: { "retry-after": "1" }, body: "down", delayMs: 25 })
  })
})
