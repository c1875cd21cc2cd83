import { assert, describe, it } from "@effect/vitest"
import { Canonical, Codec, EventWrite, type Event, type Fact, Limits, Outcome, Validation } from "@maka/facts"
import { FactBuilders } from "@maka/testkit"
import { Result } from "effect"
import * as fc from "fast-check"

/** Any UTF-16 unit, lone surrogates and NUL included. */
const unit = fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code))
/** Units biased towards the interesting ones: surrogate halves, NUL, ASCII. */
const trickyUnit = fc.oneof(
  unit,
  fc.constantFrom("\ud800", "\udbff", "\udc00", "\udfff", "\u0000", "a", "é", "😀"),
)
const utf16 = (maxLength: number) => fc.string({ unit: trickyUnit, maxLength })
/** Short strings, and now and then very long ones around the limits. */
const anyText = fc.oneof(
  { weight: 6, arbitrary: utf16(40) },
  { weight: 1, arbitrary: utf16(600) },
  { weight: 1, arbitrary: fc.tuple(utf16(4), fc.integer({ min: 500, max: 70_000 })).map(([seed, length]) => seed.repeat(Math.ceil(length / Math.max(1, seed.length))).slice(0, length)) },
)

const isWellFormed = (text: string): boolean => !/\p{Cs}/u.test(text)
const survivesUtf8 = (text: string): boolean => Buffer.from(text, "utf8").toString("utf8") === text

const event = (overrides: Partial<Event.RuntimeEvent["invocation"]>, fact: Fact.Fact): Event.RuntimeEvent => ({
  id: FactBuilders.eventId(1),
  recordedAt: 1,
  invocation: FactBuilders.invocation(overrides),
  fact,
})

const opening = (text: string): Fact.Fact => ({
  kind: "invocation_opened",
  input: { kind: "message", content: FactBuilders.message(text) },
  configuration: FactBuilders.configuration(),
})

/** What every admitted write must satisfy: it decodes to itself and each stored string survives UTF-8. */
const assertStorable = (write: EventWrite.EventWrite) => {
  assert.strictEqual(write.json, Canonical.stringify(write.event))
  assert.isTrue(survivesUtf8(write.json))
  const decoded = Result.getOrThrow(Codec.decodeEventJson(write.json))
  assert.deepStrictEqual(decoded, write.event)
  for (const id of Object.values(write.event.invocation)) assert.isTrue(survivesUtf8(id) && !id.includes("\u0000"))
}

describe("well-formed text in EventWrite.plain", () => {
  it("admits a session id exactly when it is 1–512 well-formed units without NUL, and stores it unchanged", () => {
    fc.assert(
      fc.property(anyText, (sessionId) => {
        const built = EventWrite.plain(event({ sessionId }, opening("hello")))
        const expected = sessionId.length >= 1 && sessionId.length <= Limits.MAX_ID_UTF16 && isWellFormed(sessionId) && !sessionId.includes("\u0000")
        assert.strictEqual(Result.isSuccess(built), expected, JSON.stringify(sessionId.slice(0, 40)))
        if (Result.isSuccess(built)) assertStorable(built.success)
      }),
      { numRuns: 400 },
    )
  })

  it("admits every id of the invocation and a step id only when well-formed and without NUL", () => {
    fc.assert(
      fc.property(fc.constantFrom("turnId", "runId", "invocationId", "stepId"), utf16(40), (field, value) => {
        const fact: Fact.Fact =
          field === "stepId" ? { kind: "model_interrupted", stepId: value, status: "failed" } : opening("hi")
        const built = EventWrite.plain(event(field === "stepId" ? {} : { [field]: value }, fact))
        const expected = value.length >= 1 && isWellFormed(value) && !value.includes("\u0000")
        assert.strictEqual(Result.isSuccess(built), expected)
        if (Result.isFailure(built)) {
          assert.include(["decode", "text_ill_formed", "id_has_nul"], built.failure.rule)
        } else {
          assertStorable(built.success)
        }
      }),
      { numRuns: 400 },
    )
  })

  it("admits message text with NUL but never with a lone surrogate, within 64 KiB", () => {
    fc.assert(
      fc.property(anyText, (text) => {
        const built = EventWrite.plain(event({}, opening(text)))
        const expected = isWellFormed(text) && Canonical.utf8Length(text) <= Limits.MAX_MESSAGE_TEXT_BYTES
        assert.strictEqual(Result.isSuccess(built), expected)
        if (Result.isSuccess(built)) assertStorable(built.success)
      }),
      { numRuns: 300 },
    )
  })

  it("refuses a lone surrogate anywhere in an event, object keys and tool input included", () => {
    const dispatch = (input: Record<string, string>, name = "read_file"): Fact.Fact => ({
      kind: "tool_dispatched",
      operationId: "standalone-1",
      call: { toolCallId: "call-1", origin: { kind: "standalone" } },
      name,
      input,
    })
    const refused = (fact: Fact.Fact) => {
      const built = EventWrite.plain(event({}, fact))
      return Result.isFailure(built) ? built.failure.rule : "admitted"
    }
    assert.strictEqual(refused(dispatch({ path: "a\u0000b" })), "admitted")
    assert.strictEqual(refused(dispatch({ path: "😀" })), "admitted")
    assert.strictEqual(refused(dispatch({ path: "\ud83d" })), "text_ill_formed")
    assert.strictEqual(refused(dispatch({ ["k\udc00"]: "v" })), "text_ill_formed")
    assert.strictEqual(refused(dispatch({}, "read\u0000file")), "id_has_nul")
    assert.strictEqual(refused(dispatch({}, "read\udfff")), "text_ill_formed")
    const failed: Fact.Fact = { kind: "tool_settled", operationId: "op-1", outcome: { kind: "failed", message: "cut \ud83d" } }
    assert.strictEqual(refused(failed), "text_ill_formed")
    const built = EventWrite.plain(event({}, dispatch({ path: "\ud83d" })))
    assert.isTrue(Result.isFailure(built) && built.failure.message.includes("fact.input.path"))
  })

  it("refuses a model output whose tool call id or name holds NUL: the dispatch or rejection made of it could not be written", () => {
    const completed = (id: string, name: string): Fact.Fact => ({
      kind: "model_completed",
      stepId: "step-1",
      output: {
        parts: [
          { kind: "text", textKind: "text", text: "a\u0000b" },
          { kind: "tool_call", id, name, input: { path: "a\u0000b" }, providerExecuted: false },
        ],
        finishReason: "tool-calls",
        usage: {},
      },
    })
    const observed = (id: string, name: string): Fact.Fact => ({
      kind: "model_observed",
      stepId: "step-1",
      event: { kind: "tool_call", id, name, input: {}, providerExecuted: true },
    })
    const refused = (fact: Fact.Fact) => {
      const built = EventWrite.plain(event({}, fact))
      return Result.isFailure(built) ? built.failure.message : "admitted"
    }
    assert.strictEqual(refused(completed("call-1", "read_file")), "admitted")
    assert.include(refused(completed("call-1", "read\u0000file")), "fact.output.parts.1.name contains NUL")
    assert.include(refused(completed("call\u00001", "read_file")), "fact.output.parts.1.id contains NUL")
    assert.strictEqual(refused(observed("call-1", "web_search")), "admitted")
    assert.include(refused(observed("call-1", "web\u0000search")), "fact.event.name contains NUL")
    assert.include(refused(observed("call\u00001", "web_search")), "fact.event.id contains NUL")
  })

  it("refuses a tool success whose output holds a lone surrogate", () => {
    const built = EventWrite.toolSuccess({
      id: FactBuilders.eventId(2),
      recordedAt: 1,
      invocation: FactBuilders.invocation(),
      operationId: "op-1",
      output: FactBuilders.textOutput("half an emoji \ud83d"),
    })
    assert.isTrue(Result.isFailure(built) && built.failure.rule === "text_ill_formed")
  })

  it("repairs text it did not produce the way UTF-8 would, keeping well-formed text unchanged", () => {
    fc.assert(
      fc.property(utf16(60), (text) => {
        const repaired = Validation.toWellFormedText(text)
        assert.isTrue(isWellFormed(repaired))
        assert.strictEqual(repaired.length, text.length)
        assert.strictEqual(repaired, Buffer.from(text, "utf8").toString("utf8"))
        if (isWellFormed(text)) assert.strictEqual(repaired, text)
      }),
      { numRuns: 300 },
    )
  })

  it("exports the checks for admission: ids, invocations and any value", () => {
    assert.isTrue(Result.isSuccess(Validation.invocationIds(FactBuilders.invocation())))
    assert.isTrue(Result.isFailure(Validation.invocationIds(FactBuilders.invocation({ runId: "\ud800x" }))))
    assert.isTrue(Result.isFailure(Validation.storedId("a\u0000", "id")))
    assert.isTrue(Result.isSuccess(Validation.wellFormed({ text: "a\u0000 😀" })))
    assert.isTrue(Result.isFailure(Validation.wellFormed(["ok", { nested: "\udc00" }])))
  })
})

describe("admission's decode of an opening", () => {
  it("refuses ill-formed text and NUL ids in the fact and the invocation, as EventWrite.plain does", () => {
    fc.assert(
      fc.property(fc.constantFrom("sessionId", "runId", "text"), utf16(20).filter((value) => value.length > 0), (field, value) => {
        const invocation = FactBuilders.invocation(field === "text" ? {} : { [field]: value })
        const fact = opening(field === "text" ? value : "hello")
        const decoded = Codec.decodeFact(fact, invocation)
        const written = EventWrite.plain({ id: FactBuilders.eventId(5), recordedAt: 1, invocation, fact })
        assert.strictEqual(Result.isSuccess(decoded), Result.isSuccess(written))
      }),
      { numRuns: 300 },
    )
    const refused = Codec.decodeFact(opening("hi"), FactBuilders.invocation({ sessionId: "\ud800x" }))
    assert.isTrue(Result.isFailure(refused) && refused.failure.rule === "text_ill_formed")
  })
})

describe("EventWrite.verify", () => {
  it("accepts what plain and toolSuccess build and refuses json that is not the event's", () => {
    const write = Result.getOrThrow(EventWrite.plain(event({}, opening("hello"))))
    assert.isTrue(Result.isSuccess(EventWrite.verify(write)))
    const success = Result.getOrThrow(
      EventWrite.toolSuccess({ id: FactBuilders.eventId(3), recordedAt: 1, invocation: FactBuilders.invocation(), operationId: "op", output: FactBuilders.textOutput("x") }),
    )
    assert.isTrue(Result.isSuccess(EventWrite.verify(success)))
    const other = Result.getOrThrow(EventWrite.plain(event({ sessionId: "session-2" }, opening("hello"))))
    const forged = EventWrite.verify({ event: write.event, json: other.json })
    assert.isTrue(Result.isFailure(forged) && forged.failure.rule === "write_not_canonical")
    const swapped = EventWrite.verify({ event: other.event, json: write.json })
    assert.isTrue(Result.isFailure(swapped) && swapped.failure.rule === "write_not_canonical")
    const invalid = EventWrite.verify({ event: { ...write.event, invocation: { ...write.event.invocation, runId: "\ud800" } }, json: write.json })
    assert.isTrue(Result.isFailure(invalid) && invalid.failure.rule === "text_ill_formed")
  })
})

describe("the failure message of a failed outcome", () => {
  const ended = (message: string) =>
    EventWrite.plain(event({}, { kind: "invocation_ended", outcome: { kind: "failed", class: "tool_execution", message } }))

  it("holds at most 2,048 UTF-16 units", () => {
    assert.strictEqual(Limits.MAX_FAILURE_MESSAGE, 2_048)
    assert.isTrue(Result.isSuccess(ended("x".repeat(2_048))))
    assert.isTrue(Result.isFailure(ended("x".repeat(2_049))))
  })

  it("is cut to 2,048 units without splitting a surrogate pair, and the cut always stores", () => {
    assert.strictEqual(Outcome.cutFailureMessage("x".repeat(5_000)), "x".repeat(2_048))
    const pairAtTheEdge = `${"x".repeat(2_047)}😀tail`
    assert.strictEqual(Outcome.cutFailureMessage(pairAtTheEdge), "x".repeat(2_047))
    assert.strictEqual(Outcome.cutFailureMessage("short"), "short")
    fc.assert(
      fc.property(fc.string({ unit: fc.constantFrom("x", "😀", "é"), maxLength: 3_000 }), (text) => {
        const cut = Outcome.cutFailureMessage(text)
        assert.isTrue(text.startsWith(cut) && cut.length <= 2_048 && cut.length >= Math.min(text.length, 2_047))
        assert.isTrue(Result.isSuccess(ended(cut)))
      }),
      { numRuns: 100 },
    )
  })
})
