import { assert, describe, it } from "@effect/vitest"
import type { Model } from "@maka/facts"
import { Result } from "effect"
import { StepBuilder } from "@maka/model"

const finished: Model.ModelEvent = { kind: "finished", reason: "stop", usage: { inputTokens: 1 } }

const failureMessage = (result: Result.Result<unknown, { readonly reason: { readonly message: string } }>): string =>
  Result.isFailure(result) ? result.failure.reason.message : "succeeded"

describe("StepBuilder", () => {
  it("keeps parts in order of first appearance and deep-merges providerOptions", () => {
    const step = StepBuilder.fold("step-1", [
      { kind: "response_metadata", id: "resp-1", model: "m", timestamp: 5 },
      { kind: "part_started", id: "t", textKind: "thinking", providerOptions: { anthropic: { a: 1 } } },
      { kind: "part_started", id: "x", textKind: "text" },
      { kind: "part_delta", id: "x", text: "He" },
      { kind: "part_delta", id: "t", text: "hm" },
      { kind: "part_delta", id: "x", text: "llo" },
      { kind: "part_finished", id: "t", providerOptions: { anthropic: { signature: "s" } } },
      { kind: "tool_call", id: "c", name: "read", input: { p: 1 }, providerExecuted: false },
      { kind: "part_finished", id: "x" },
      finished,
    ])
    assert.deepStrictEqual(Result.getOrUndefined(step), {
      parts: [
        { kind: "text", textKind: "thinking", text: "hm", providerOptions: { anthropic: { a: 1, signature: "s" } } },
        { kind: "text", textKind: "text", text: "Hello" },
        { kind: "tool_call", id: "c", name: "read", input: { p: 1 }, providerExecuted: false },
      ],
      finishReason: "stop",
      usage: { inputTokens: 1 },
      responseId: "resp-1",
      model: "m",
      timestamp: 5,
    })
  })

  it("refuses an event after finished", () => {
    assert.strictEqual(failureMessage(StepBuilder.fold("s", [finished, { kind: "response_metadata" }])), "event after model finish")
  })

  it("refuses a duplicate part id and a delta for a part that is not open", () => {
    const started: Model.ModelEvent = { kind: "part_started", id: "a", textKind: "text" }
    assert.strictEqual(failureMessage(StepBuilder.fold("s", [started, started])), "unsupported provider event")
    assert.strictEqual(
      failureMessage(StepBuilder.fold("s", [started, { kind: "part_finished", id: "a" }, { kind: "part_delta", id: "a", text: "x" }])),
      "unsupported provider event",
    )
    assert.strictEqual(failureMessage(StepBuilder.fold("s", [{ kind: "part_delta", id: "b", text: "x" }])), "unsupported provider event")
    const call: Model.ModelEvent = { kind: "tool_call", id: "c", name: "read", input: {}, providerExecuted: false }
    assert.strictEqual(
      failureMessage(StepBuilder.fold("s", [call, { ...call, name: "write" }])),
      "unsupported provider event: two tool calls of one output share an id",
    )
  })

  it("refuses finished while a part is open, and finish() without finished", () => {
    assert.strictEqual(
      failureMessage(StepBuilder.fold("s", [{ kind: "part_started", id: "a", textKind: "text" }, finished])),
      "model stream finished with an open part",
    )
    assert.strictEqual(failureMessage(StepBuilder.fold("s", [{ kind: "part_started", id: "a", textKind: "text" }, { kind: "part_finished", id: "a" }])), "model stream ended without finish")
    const builder = StepBuilder.forStep("s")
    assert.isFalse(builder.isFinished)
    assert.strictEqual(builder.stepId, "s")
  })
})
