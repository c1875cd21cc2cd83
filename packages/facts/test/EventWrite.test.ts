import { assert, describe, it } from "@effect/vitest"
import { Canonical, Codec, Digest, type Event, EventWrite, Identity, Limits, Prompts, ToolCall, Validation } from "@maka/facts"
import { FactBuilders } from "@maka/testkit"
import { Result } from "effect"
import * as fc from "fast-check"
import * as Reference from "../src/internal/canonical-reference.ts"

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

  it("freezes a string output's projection as freezeProjection does, to the byte at the 256 KiB bound", () => {
    // The text projection's canonical JSON around a string is `{"kind":"text","text":…}`: strings
    // near the bound, in ASCII and with characters written escaped or in several bytes, against
    // freezeProjection, and the string whose projection is exactly the bound and one byte over it.
    const projectionBytes = (text: string) => Canonical.utf8Length(Canonical.stringify({ kind: "text", text }))
    for (const piece of ["x", '"', "\n", "é", "\u0001", "😀"]) {
      const pieceBytes = projectionBytes(piece) - projectionBytes("")
      const fill = Math.floor((Limits.MAX_PROJECTION_BYTES - projectionBytes("")) / pieceBytes)
      const base = piece.repeat(fill)
      for (const text of [base, base.slice(0, -piece.length), base + piece, `${base.slice(0, -piece.length)}x`]) {
        for (const output of [FactBuilders.textOutput(text), FactBuilders.jsonOutput(text)]) {
          const projection = settledOf(Result.getOrThrow(success(output))).projection
          assert.deepStrictEqual(projection, EventWrite.freezeProjection(output), `${JSON.stringify(piece)} × ${text.length}`)
        }
      }
      // One of the sizes reaches the bound exactly, and one byte over it fails.
      const atBound = base + "x".repeat(Limits.MAX_PROJECTION_BYTES - projectionBytes(base))
      assert.strictEqual(projectionBytes(atBound), Limits.MAX_PROJECTION_BYTES)
      assert.strictEqual(settledOf(Result.getOrThrow(success(FactBuilders.textOutput(atBound)))).projection.kind, "text")
      assert.strictEqual(settledOf(Result.getOrThrow(success(FactBuilders.textOutput(`${atBound}x`)))).projection.kind, "failure")
      assert.strictEqual(settledOf(Result.getOrThrow(success(FactBuilders.jsonOutput(`${atBound}x`)))).projection.kind, "failure")
    }
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

describe("EventWrite checks each event once", () => {
  const event = (text: string) => ({
    id: FactBuilders.eventId(4),
    recordedAt: 7,
    invocation: FactBuilders.invocation(),
    fact: { kind: "model_completed" as const, stepId: "step-1", output: FactBuilders.textStep(text) },
  })
  const deeplyFrozen = (value: unknown): boolean =>
    typeof value !== "object" || value === null || (Object.isFrozen(value) && Object.values(value).every(deeplyFrozen))

  it("freezes a constructed write and its event, and leaves the caller's event its own", () => {
    const original = event("hello")
    const write = Result.getOrThrow(EventWrite.plain(original))
    assert.isTrue(Object.isFrozen(write))
    assert.isTrue(deeplyFrozen(write.event))
    assert.deepStrictEqual(write.event, original)
    // The bytes kept for the frozen event are its canonical JSON, as the reference writer writes it.
    assert.strictEqual(Reference.stringify(write.event), write.json)
    assert.strictEqual(Canonical.stringify(write.event), write.json)
    assert.isFalse(Object.isFrozen(original))
    assert.isFalse(Object.isFrozen(original.fact.output.parts))
    const objects = (value: unknown, found: Set<unknown>): Set<unknown> => {
      if (typeof value === "object" && value !== null) {
        found.add(value)
        for (const child of Object.values(value)) objects(child, found)
      }
      return found
    }
    const callers = objects(original, new Set())
    assert.isTrue([...objects(write.event, new Set())].every((object) => !callers.has(object)))
    const success = Result.getOrThrow(
      EventWrite.toolSuccess({ id: FactBuilders.eventId(5), recordedAt: 1, invocation: FactBuilders.invocation(), operationId: "op", output: FactBuilders.jsonOutput({ list: [1] }) }),
    )
    assert.isTrue(Object.isFrozen(success) && deeplyFrozen(success.event))
  })

  it("cannot have a constructed write's event changed after its checks", () => {
    const write = Result.getOrThrow(EventWrite.plain(event("hello")))
    const parts = write.event.fact.kind === "model_completed" ? write.event.fact.output.parts : []
    assert.throws(() => {
      ;(write.event as { recordedAt: number }).recordedAt = -1
    }, TypeError)
    assert.throws(() => {
      ;(parts[0] as { text: string }).text = "\ud800 not what was checked"
    }, TypeError)
    assert.throws(() => {
      ;(write as { json: string }).json = "{}"
    }, TypeError)
    assert.strictEqual(write.json, Canonical.stringify(write.event))
    assert.isTrue(Result.isSuccess(EventWrite.verify(write)))
  })

  it("checks in full a write that was not constructed, even one copied from a constructed write", () => {
    const write = Result.getOrThrow(EventWrite.plain(event("hello")))
    assert.isTrue(Result.isSuccess(EventWrite.verify({ ...write })))
    const changed = EventWrite.verify({ ...write, event: { ...write.event, recordedAt: 8 } })
    assert.isTrue(Result.isFailure(changed) && changed.failure.rule === "write_not_canonical")
    const mismatched = EventWrite.verify({ event: write.event, json: write.json.replace("hello", "hullo") })
    assert.isTrue(Result.isFailure(mismatched) && mismatched.failure.rule === "write_not_canonical")
    const ill = EventWrite.verify({ event: event("half \ud83d"), json: write.json })
    assert.isTrue(Result.isFailure(ill) && ill.failure.rule === "text_ill_formed")
  })

  /** The checks as they ran before the canonical writer noted well-formedness: decode, text rules, encode. */
  const reference = (candidate: unknown): Result.Result<string, unknown> =>
    Result.flatMap(Codec.decodeEvent(candidate as Event.RuntimeEvent), (decoded) =>
      Result.flatMap(Validation.wellFormedEvent(decoded), () => Codec.encodeEventChecked(candidate as Event.RuntimeEvent)),
    )
  const outcomeOf = (result: Result.Result<string, unknown>) =>
    Result.isSuccess(result) ? { json: result.success } : { failure: String((result.failure as { rule: string }).rule) + ": " + String((result.failure as Error).message) }

  const unit = fc.oneof(
    fc.constantFrom("a", "é", "😀", "\ud800", "\udfff", "\u0000", '"', "\\"),
    fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)),
  )
  const tricky = fc.string({ unit, minLength: 1, maxLength: 6 })

  it("refuses and admits exactly as the full text rules do, ids, names, keys and values alike", () => {
    fc.assert(
      fc.property(
        fc.record({ sessionId: tricky, runId: tricky }),
        tricky,
        tricky,
        fc.dictionary(tricky, fc.oneof(tricky, fc.array(tricky, { maxLength: 3 })), { maxKeys: 3 }),
        (ids, name, toolCallId, input) => {
          const candidate = {
            id: FactBuilders.eventId(6),
            recordedAt: 1,
            invocation: FactBuilders.invocation(ids),
            fact: { kind: "tool_dispatched" as const, operationId: "standalone-1", call: { toolCallId, origin: { kind: "standalone" as const } }, name, input },
          }
          const built = EventWrite.plain(candidate)
          assert.deepStrictEqual(outcomeOf(Result.map(built, (write) => write.json)), outcomeOf(reference(candidate)))
          if (Result.isSuccess(built)) {
            assert.isTrue(Result.isSuccess(EventWrite.verify({ ...built.success })))
            assert.strictEqual(Reference.stringify(built.success.event), built.success.json)
          }
        },
      ),
      { numRuns: 600 },
    )
  })
})
