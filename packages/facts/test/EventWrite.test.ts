import { assert, describe, it } from "@effect/vitest"
import { Canonical, Codec, Digest, EventWrite, Identity, Limits, Prompts, ToolCall } from "@maka/facts"
import { FactBuilders } from "@maka/testkit"
import { Result } from "effect"

const success = (output: ToolCall.ToolOutput) =>
  EventWrite.toolSuccess({
    id: FactBuilders.eventId(9),
    recordedAt: 1,
    invocation: FactBuilders.invocation(),
    operationId: "step-1:call-1",
    output,
  })

const settledOf = (write: EventWrite.EventWrite) => {
  const fact = write.event.fact
  if (fact.kind !== "tool_settled" || fact.outcome.kind !== "succeeded") throw new Error("not a success")
  return fact.outcome
}

describe("EventWrite.toolSuccess", () => {
  it("stores the canonical JSON of the output apart and binds it by length and digest", () => {
    const output = FactBuilders.jsonOutput({ z: 1, a: ["é", 2] })
    const write = Result.getOrThrow(success(output))
    assert.strictEqual(write.rawPayload, '{"format":"json","value":{"a":["é",2],"z":1}}')
    const outcome = settledOf(write)
    assert.strictEqual(outcome.raw.bytes, Canonical.utf8Length(write.rawPayload!))
    assert.strictEqual(outcome.raw.digest, Digest.toolRaw(write.rawPayload!))
    assert.isTrue(EventWrite.payloadMatches(outcome.raw, write.rawPayload!))
    assert.isFalse(EventWrite.payloadMatches(outcome.raw, write.rawPayload!.replace("é", "e")))
    assert.strictEqual(write.json, Canonical.stringify(write.event))
  })

  it("freezes text output, and JSON output holding a string, as a text projection", () => {
    assert.deepStrictEqual(settledOf(Result.getOrThrow(success(FactBuilders.textOutput("hi")))).projection, {
      kind: "text",
      text: "hi",
    })
    assert.deepStrictEqual(settledOf(Result.getOrThrow(success(FactBuilders.jsonOutput("hi")))).projection, {
      kind: "text",
      text: "hi",
    })
    assert.deepStrictEqual(settledOf(Result.getOrThrow(success(FactBuilders.jsonOutput([1])))).projection, {
      kind: "json",
      value: [1],
    })
  })

  it("freezes a projection over 256 KiB as failure while the raw result stays whole", () => {
    const big = "x".repeat(300 * 1024)
    const write = Result.getOrThrow(success(FactBuilders.textOutput(big)))
    assert.deepStrictEqual(settledOf(write).projection, { kind: "failure" })
    assert.isTrue(write.rawPayload!.includes(big))
    assert.strictEqual(ToolCall.projectionFailureText, Prompts.PROJECTION_FAILURE_TEXT)
  })

  it("freezes JSON over 20,000 nodes or deeper than 32 as failure", () => {
    const wide = Array.from({ length: Limits.MAX_PROJECTION_NODES }, (_, index) => index)
    assert.deepStrictEqual(EventWrite.freezeProjection(FactBuilders.jsonOutput(wide)), { kind: "failure" })
    assert.strictEqual(EventWrite.freezeProjection(FactBuilders.jsonOutput(wide.slice(1))).kind, "json")
    const nest = (depth: number): Identity.Json => (depth === 1 ? 0 : [nest(depth - 1)])
    const deep = nest(Limits.MAX_PROJECTION_DEPTH + 1)
    assert.deepStrictEqual(EventWrite.freezeProjection(FactBuilders.jsonOutput(deep)), { kind: "failure" })
    const fits = nest(Limits.MAX_PROJECTION_DEPTH)
    assert.strictEqual(EventWrite.freezeProjection(FactBuilders.jsonOutput(fits)).kind, "json")
  })
})

describe("EventWrite.plain", () => {
  const requested = {
    id: FactBuilders.eventId(2),
    recordedAt: 0,
    invocation: FactBuilders.invocation(),
    fact: {
      kind: "model_requested" as const,
      stepId: "step-1",
      modelId: "test-model",
      purpose: "main" as const,
      sourceScope: { kind: "session" as const, id: "session-1" },
      sourceHighWater: 0,
      sourceDigest: FactBuilders.digestOf("source"),
      inputDigest: FactBuilders.digestOf("input"),
      routeIdentity: FactBuilders.digestOf("route"),
    },
  }

  it("accepts a well-formed request", () => {
    assert.isTrue(Result.isSuccess(EventWrite.plain(requested)))
  })

  it("runs the closed schemas, not only the fact rules", () => {
    const badDigest = EventWrite.plain({ ...requested, fact: { ...requested.fact, sourceDigest: "not-a-digest" } })
    assert.isTrue(Result.isFailure(badDigest) && badDigest.failure.rule === "decode")
    const badId = EventWrite.plain({ ...requested, id: "NOT-A-UUID" })
    assert.isTrue(Result.isFailure(badId) && badId.failure.rule === "decode")
    const extra = EventWrite.plain({ ...requested, fact: { ...requested.fact, extra: 1 } as typeof requested.fact })
    assert.isTrue(Result.isFailure(extra) && extra.failure.rule === "decode")
  })
})

describe("Codec.decodeEventJson", () => {
  it("refuses stored JSON over 1 MiB before parsing it", () => {
    const event = {
      id: FactBuilders.eventId(3),
      recordedAt: 0,
      invocation: FactBuilders.invocation(),
      fact: { kind: "model_completed", stepId: "step-1", output: FactBuilders.textStep("x".repeat(Limits.MAX_EVENT_BYTES)) },
    }
    const decoded = Codec.decodeEventJson(Canonical.stringify(event))
    assert.isTrue(Result.isFailure(decoded) && decoded.failure.rule === "event_too_large")
    const small = { ...event, fact: { ...event.fact, output: FactBuilders.textStep("x") } }
    assert.isTrue(Result.isSuccess(Codec.decodeEventJson(Canonical.stringify(small))))
  })
})
