import { assert, describe, it } from "@effect/vitest"
import { Canonical, EventSink, EventWrite, type Identity, type ToolCall } from "@maka/facts"
import { FactBuilders } from "@maka/testkit"
import { Cancellation, Journal, Tool, ToolCatalog } from "@maka/tools"
import { RecordingSink, TestIds } from "@maka/tools/testing"
import { Cause, Context, Deferred, Effect, Exit, Fiber, Layer, Redacted, Schema } from "effect"
import { TestClock } from "effect/testing"
import { z } from "zod"
import { Committed, journalSuite, kinds, setup, withSink } from "./journal-suite.ts"

const recordingLayer = (): Layer.Layer<EventSink.EventSink | Committed> =>
  Layer.effectContext(
    Effect.map(RecordingSink.make(), (recording) =>
      Context.make(EventSink.EventSink, recording.sink).pipe(Context.add(Committed, { events: recording.events })),
    ),
  )

journalSuite("the in-memory recording sink", recordingLayer)

const Input = Schema.Struct({ value: Schema.String })

const single = (execute: (value: string, context: Tool.ToolContext) => Tool.Execution) =>
  ToolCatalog.make([
    Tool.make({ name: "probe", description: "A probe.", input: Input, semantics: "parallel", execute: ({ value }, context) => execute(value, context) }),
  ]).capture()

const runProbe = (execute: (value: string, context: Tool.ToolContext) => Tool.Execution) =>
  Effect.gen(function* () {
    const context = yield* setup([{ id: "call-1", name: "probe", input: { value: "x" } }])
    const result = yield* withSink(context)(Journal.runStep(context.invocation, single(execute), context.requests))
    return { result: result.calls[0]!, facts: yield* context.facts }
  }).pipe(Effect.provide(recordingLayer()))

const nested = (depth: number): Identity.Json => (depth === 0 ? "leaf" : [nested(depth - 1)])

describe("Journal.invoke", () => {
  it.effect("settles a Promise tool's result and a rejection with ToolFailure as a known failure", () =>
    Effect.gen(function* () {
      const resolved = yield* runProbe((value) => Promise.resolve(Tool.text(value.toUpperCase())))
      assert.deepStrictEqual(kinds(resolved.facts), ["tool_dispatched", "tool_settled:succeeded"])
      const rejected = yield* runProbe(() => Promise.reject(new Tool.ToolFailure({ message: "no such thing" })))
      assert.deepStrictEqual(rejected.facts[1], {
        kind: "tool_settled",
        operationId: "invocation-1-step-1:call-1",
        outcome: { kind: "failed", message: "no such thing" },
      })
      const thrown = yield* runProbe(() => {
        throw new Tool.ToolFailure({ message: "thrown before any promise" })
      })
      assert.deepStrictEqual(kinds(thrown.facts), ["tool_dispatched", "tool_settled:failed"])
    }),
  )

  it.effect("leaves ToolOutcomeUnknown unsettled and settles another error or an invalid output as failed", () =>
    Effect.gen(function* () {
      const unknown = yield* runProbe(() => Promise.reject(new Tool.ToolOutcomeUnknown({ message: "connection lost" })))
      assert.deepStrictEqual(kinds(unknown.facts), ["tool_dispatched"])
      assert.deepInclude(unknown.result, { _tag: "OutcomeUnknown", cause: "outcome_unknown", message: "connection lost" })
      const other = yield* runProbe(() => Promise.reject(new RangeError("out of range")))
      assert.deepStrictEqual(other.facts[1], {
        kind: "tool_settled",
        operationId: "invocation-1-step-1:call-1",
        outcome: { kind: "failed", message: "out of range" },
      })
      const typed = yield* runProbe(() => Effect.fail({ code: 7 }))
      assert.deepInclude(typed.result, { _tag: "Settled", outcome: { kind: "failed", message: '{"code":7}' } })
      const invalid = yield* runProbe(() => Promise.resolve({ format: "text", value: 3 } as unknown as ToolCall.ToolOutput))
      assert.deepStrictEqual(kinds(invalid.facts), ["tool_dispatched", "tool_settled:failed"])
      const settled = invalid.facts[1]!
      if (settled.kind === "tool_settled" && settled.outcome.kind === "failed") {
        assert.match(settled.outcome.message, /^tool returned an invalid output: /)
      } else assert.fail("expected a failed settlement")
      const neither = yield* runProbe(() => 42 as unknown as Tool.Execution)
      assert.deepInclude(neither.result, {
        _tag: "Settled",
        outcome: { kind: "failed", message: "execute returned neither an Effect nor a Promise" },
      })
    }),
  )

  it.effect("settles a text output as the schema decodes it: exactly its two own keys, a string value", () =>
    Effect.gen(function* () {
      const outcomeOf = (output: unknown) =>
        Effect.map(runProbe(() => Effect.succeed(output as ToolCall.ToolOutput)), ({ facts }) => {
          const settled = facts[1]!
          if (settled.kind !== "tool_settled") return assert.fail("expected a settlement")
          return settled.outcome.kind === "succeeded" ? settled.outcome.projection : settled.outcome.message
        })
      assert.deepStrictEqual(yield* outcomeOf({ format: "text", value: "ok" }), { kind: "text", text: "ok" })
      assert.deepStrictEqual(yield* outcomeOf({ value: "ok", format: "text" }), { kind: "text", text: "ok" })
      // Accepted by the schema too: an inherited format, a class instance, a null prototype.
      assert.deepStrictEqual(yield* outcomeOf(Object.assign(Object.create({ format: "text" }), { value: "up" })), { kind: "text", text: "up" })
      assert.deepStrictEqual(
        yield* outcomeOf(Object.assign(Object.create(null), { format: "text", value: "bare" })),
        { kind: "text", text: "bare" },
      )
      for (const refused of [
        { format: "text", value: "ok", extra: 1 },
        { format: "text", value: "ok", extra: undefined },
        { format: "text", value: "ok", [Symbol("s")]: 1 },
        { format: "text", value: 3 },
        { format: "texts", value: "ok" },
        { format: "text" },
        ["text", "ok"],
      ]) {
        const outcome = yield* outcomeOf(refused)
        assert.isString(outcome)
        assert.match(outcome as string, /^tool returned an invalid output: /)
      }
    }),
  )

  it.effect("refuses a JSON output holding an object that is not plain data (a Date, a Map, a Buffer, a class) instead of storing {}", () =>
    Effect.gen(function* () {
      const outcomeOf = (value: unknown) =>
        Effect.map(runProbe(() => Effect.succeed(Tool.json(value as Identity.Json))), ({ facts }) => {
          const settled = facts[1]!
          if (settled.kind !== "tool_settled") return assert.fail("expected a settlement")
          return settled.outcome.kind === "succeeded" ? settled.outcome.projection : settled.outcome.message
        })
      class Row {
        readonly id = 7
        get label() {
          return "seven"
        }
      }
      const refused: ReadonlyArray<readonly [unknown, string]> = [
        [{ rows: [{ id: 1, at: new Date(0) }] }, 'got an instance of Date\n  at ["value"]["rows"][0]["at"]'],
        [new Date(0), 'got an instance of Date\n  at ["value"]'],
        [{ tags: new Set(["a"]) }, 'got an instance of Set\n  at ["value"]["tags"]'],
        [[new Map([["a", 1]])], 'got an instance of Map\n  at ["value"][0]'],
        [{ body: Buffer.from("xy") }, 'got an instance of Buffer\n  at ["value"]["body"]'],
        [{ row: new Row() }, 'got an instance of Row\n  at ["value"]["row"]'],
        [{ bare: Object.create({ inherited: 1 }) }, 'got an object whose prototype is not Object.prototype\n  at ["value"]["bare"]'],
        [{ rows: Object.assign([1, 2], { total: 2 }) }, 'got an array with a property that is not an item ("total")\n  at ["value"]["rows"]'],
        [[[0], Object.assign([], { [Symbol.for("s")]: 1 })], 'got an array with a property that is not an item (Symbol(s))\n  at ["value"][1]'],
      ]
      for (const [value, message] of refused) {
        assert.strictEqual(yield* outcomeOf(value), `tool returned an invalid output: Expected Json (plain objects and arrays), ${message}`)
      }
      // Plain data is stored as given: nested plain objects, arrays, a null prototype.
      const plain = { rows: [{ id: 1, at: "1970-01-01T00:00:00.000Z", tags: ["a"] }], bare: Object.assign(Object.create(null), { k: null }) }
      assert.deepStrictEqual(yield* outcomeOf(plain), {
        kind: "json",
        value: { rows: [{ id: 1, at: "1970-01-01T00:00:00.000Z", tags: ["a"] }], bare: { k: null } },
      })
    }),
  )

  it.effect("settles an output too deep to record as a failure that says the tool completed", () =>
    Effect.gen(function* () {
      const { facts } = yield* runProbe(() => Effect.succeed(Tool.json(nested(70))))
      const settled = facts[1]!
      assert.strictEqual(settled.kind, "tool_settled")
      if (settled.kind === "tool_settled" && settled.outcome.kind === "failed") {
        assert.match(settled.outcome.message, /^The tool completed, but its result could not be recorded: /)
      } else assert.fail("expected a failed settlement")
    }),
  )

  it.effect("settles an output whose check throws as a failure that says the tool completed, never echoing the error", () =>
    Effect.gen(function* () {
      const circular: { [key: string]: unknown } = { name: "loop" }
      circular["self"] = circular
      let deep: Identity.Json = "leaf"
      for (let level = 0; level < 10_000; level++) deep = { next: deep }
      const getter = Object.defineProperty({}, "token", {
        enumerable: true,
        get() {
          throw new Error("sk-secret from a getter")
        },
      })
      const ownKeysTrap = new Proxy({}, {
        ownKeys() {
          throw new Error("sk-secret from a trap")
        },
      })
      const outputs: ReadonlyArray<unknown> = [
        Tool.json(circular as Identity.Json),
        Tool.json(deep),
        Tool.json(getter),
        Tool.json(ownKeysTrap),
        { format: "json", value: circular },
        // The output itself: its keys or its format cannot be read.
        new Proxy({ format: "text", value: "ok" }, { ownKeys: () => { throw new Error("sk-secret") } }),
        Object.defineProperty({ value: "ok" }, "format", { enumerable: true, get: () => { throw new Error("sk-secret") } }),
      ]
      for (const output of outputs) {
        const { result, facts } = yield* runProbe(() => Effect.succeed(output as ToolCall.ToolOutput))
        assert.deepStrictEqual(kinds(facts), ["tool_dispatched", "tool_settled:failed"])
        const message = Journal.unrecordableOutputMessage(
          "reading it as JSON threw an error (is it circular, nested too deeply, or does a getter or proxy in it throw?)",
        )
        assert.deepInclude(result, { _tag: "Settled", outcome: { kind: "failed", message } })
      }
    }),
  )

  it.effect("settles an error that throws while it is read, or whose message is not a string, as a known failure", () =>
    Effect.gen(function* () {
      const unreadable = new Error("hidden")
      Object.defineProperty(unreadable, "message", {
        get() {
          throw new Error("sk-secret from a getter")
        },
      })
      const trapped = new Proxy({}, {
        has() {
          throw new Error("sk-secret from a trap")
        },
      })
      for (const error of [unreadable, trapped]) {
        const thrown = yield* runProbe(() => {
          throw error
        })
        assert.deepInclude(thrown.result, {
          _tag: "Settled",
          outcome: { kind: "failed", message: "tool failed with an error that could not be read" },
        })
        const failedWith = yield* runProbe(() => Effect.fail(error))
        assert.deepStrictEqual(kinds(failedWith.facts), ["tool_dispatched", "tool_settled:failed"])
      }
      // A message getter that answers something other than a string: the error is described instead.
      const numbered = new RangeError("hidden")
      Object.defineProperty(numbered, "message", { get: () => 42 })
      const described = yield* runProbe(() => Promise.reject(numbered))
      assert.deepInclude(described.result, { _tag: "Settled", outcome: { kind: "failed", message: "RangeError" } })
      const unknown = yield* runProbe(() => Effect.fail({ _tag: "ToolOutcomeUnknown", get message() { return 42 } }))
      assert.deepInclude(unknown.result, { _tag: "OutcomeUnknown", cause: "outcome_unknown", message: "" })
    }),
  )

  it.effect("settles a text output with lone surrogates with U+FFFD in their place, in its raw payload too", () =>
    Effect.gen(function* () {
      // A cut inside a surrogate pair, and a lone low surrogate.
      const cut = "\u{1F600}\u{1F600}\u{1F600}".slice(0, 5)
      const { result, facts } = yield* runProbe(() => Effect.succeed(Tool.text(`${cut} \udc00`)))
      const expected = "\u{1F600}\u{1F600}\ufffd \ufffd"
      const settled = facts[1]!
      if (settled.kind !== "tool_settled" || settled.outcome.kind !== "succeeded") return assert.fail("expected a success")
      assert.deepStrictEqual(settled.outcome.projection, { kind: "text", text: expected })
      assert.isTrue(EventWrite.payloadMatches(settled.outcome.raw, Canonical.stringify(Tool.text(expected))))
      assert.deepInclude(result, { _tag: "Settled", outcome: settled.outcome })
      // So is each string and key of a JSON output, at any depth; a `__proto__` key stays a key.
      const json = yield* runProbe(() =>
        Effect.succeed(Tool.json(JSON.parse(`{"text": ${JSON.stringify(cut)}, "rows": [{"\\udc00": 1}, ${JSON.stringify(cut)}], "__proto__": {"n": 2}}`))),
      )
      const stored = json.facts[1]!
      if (stored.kind !== "tool_settled" || stored.outcome.kind !== "succeeded") return assert.fail("expected a success")
      const repaired = JSON.parse(`{"text": "${"\u{1F600}\u{1F600}\ufffd"}", "rows": [{"\ufffd": 1}, "${"\u{1F600}\u{1F600}\ufffd"}"], "__proto__": {"n": 2}}`)
      assert.isTrue(EventWrite.payloadMatches(stored.outcome.raw, Canonical.stringify(Tool.json(repaired))))
      assert.deepStrictEqual(Object.keys(JSON.parse(Canonical.stringify(Tool.json(repaired))).value), ["__proto__", "rows", "text"])
      // A top-level JSON string too.
      const string = yield* runProbe(() => Effect.succeed(Tool.json(cut)))
      assert.deepStrictEqual(kinds(string.facts), ["tool_dispatched", "tool_settled:succeeded"])
      // Two keys that differ only in their lone surrogates would become one, a value lost: not stored.
      const merged = yield* runProbe(() => Effect.succeed(Tool.json(JSON.parse(`{"rows": [{"a\\ud800": 1, "a\\udc00": 2}]}`))))
      assert.deepStrictEqual(kinds(merged.facts), ["tool_dispatched", "tool_settled:failed"])
    }),
  )

  it.effect("cuts a huge ToolFailure message to 2,048 UTF-16 units", () =>
    Effect.gen(function* () {
      const { facts } = yield* runProbe(() => Tool.fail("x".repeat(200_000)))
      const settled = facts[1]!
      if (settled.kind === "tool_settled" && settled.outcome.kind === "failed") {
        assert.strictEqual(settled.outcome.message, "x".repeat(2_048))
      } else assert.fail("expected a failed settlement")
    }),
  )

  it.effect("settles a thrown message with lone surrogates with U+FFFD in their place, and scrubs secrets after that", () =>
    Effect.gen(function* () {
      const { facts } = yield* runProbe(() => {
        throw new Error("bad \ud800 text \udc00")
      })
      assert.deepStrictEqual(facts[1], {
        kind: "tool_settled",
        operationId: "invocation-1-step-1:call-1",
        outcome: { kind: "failed", message: "bad \ufffd text \ufffd" },
      })
      assert.strictEqual(Journal.failureMessage("key \ud800sk-1 \ud83d\ude00", [Redacted.make("sk-1")]), "key \ufffd[redacted] \ud83d\ude00")
    }),
  )

  it.effect("takes event ids from Ids and times from the Clock", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(1_767_225_600_123)
      const recording = yield* RecordingSink.make()
      const request = Journal.standaloneCall({ operationId: "op-1", toolCallId: "host-1", name: "probe", input: { value: "v" } })
      const preparation = yield* Journal.prepare(single((value) => Effect.succeed(Tool.text(value))), request)
      if (preparation._tag !== "Prepared") return assert.fail("expected a prepared call")
      const result = yield* Journal.invoke(FactBuilders.invocation(), preparation).pipe(
        Effect.provideService(EventSink.EventSink, recording.sink),
        Effect.provide(TestIds.layer(7)),
      )
      assert.strictEqual(result._tag, "Settled")
      const events = yield* recording.events
      assert.deepStrictEqual(
        events.map((event) => [event.id, event.recordedAt]),
        [
          [TestIds.id(7), 1_767_225_600_123],
          [TestIds.id(8), 1_767_225_600_123],
        ],
      )
      const records = yield* recording.records
      assert.strictEqual(records[1]!.write.rawPayload, '{"format":"text","value":"v"}')
    }),
  )

  it.effect("treats interruption of the caller as cancellation: the effect finishes and settles", () =>
    Effect.gen(function* () {
      const running = yield* Deferred.make<AbortSignal>()
      const release = yield* Deferred.make<void>()
      const context = yield* setup([
        { id: "call-1", name: "probe", input: { value: "x" } },
        { id: "call-2", name: "probe", input: { value: "y" } },
      ])
      const captured = single((_value, { signal }) =>
        Effect.gen(function* () {
          yield* Deferred.succeed(running, signal)
          yield* Deferred.await(release)
          return Tool.text(`aborted: ${signal.aborted}`)
        }),
      )
      const fiber = yield* Effect.forkChild(withSink(context)(Journal.runStep(context.invocation, captured, context.requests)))
      const signal = yield* Deferred.await(running)
      const interrupting = yield* Effect.forkChild(Fiber.interrupt(fiber))
      // The interruption reaches the running effect as an aborted signal; the effect still finishes.
      yield* Cancellation.fromSignal(signal).requested
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(interrupting)
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause))
      const facts = yield* context.facts
      assert.deepStrictEqual(kinds(facts), ["tool_dispatched", "tool_settled:succeeded", "tool_rejected:cancelled"])
      const settled = facts[1]!
      if (settled.kind === "tool_settled" && settled.outcome.kind === "succeeded") {
        assert.deepStrictEqual(settled.outcome.projection, { kind: "text", text: "aborted: true" })
      }
    }).pipe(Effect.provide(recordingLayer())),
  )
})

describe("Journal with a Standard Schema tool", () => {
  it.effect("rejects invalid input as invalid_input with the schema's readable reason, and runs valid input", () =>
    Effect.gen(function* () {
      const ran: Array<string> = []
      const captured = ToolCatalog.from([
        Tool.make({
          name: "probe",
          description: "A probe.",
          input: z.object({ value: z.string().min(2) }),
          semantics: "parallel",
          execute: ({ value }) => (ran.push(value), Promise.resolve(Tool.text(value))),
        }),
      ]).capture()
      const context = yield* setup([
        { id: "call-1", name: "probe", input: { value: "x" } },
        { id: "call-2", name: "probe", input: { value: "ok" } },
      ])
      const result = yield* withSink(context)(Journal.runStep(context.invocation, captured, context.requests))
      const facts = yield* context.facts
      assert.deepStrictEqual(kinds(facts), ["tool_rejected:invalid_input", "tool_dispatched", "tool_settled:succeeded"])
      assert.deepStrictEqual(ran, ["ok"])
      const rejected = result.calls[0]!
      if (rejected._tag !== "Rejected") return assert.fail("expected a rejection")
      assert.strictEqual(
        rejected.text,
        'Invalid input for tool "probe": Too small: expected string to have >=2 characters\n  at ["value"]',
      )
    }).pipe(Effect.provide(recordingLayer())),
  )
})

describe("Journal.reject", () => {
  it.effect("commits tool_rejected and returns the text the model reads", () =>
    Effect.gen(function* () {
      const context = yield* setup([{ id: "call-1", name: "probe", input: { value: "x" } }])
      const rejected = yield* withSink(context)(
        Journal.reject(context.invocation, context.requests[0]!, { kind: "preparation_failed", message: "output was cut" }),
      )
      assert.strictEqual(rejected.text, "output was cut")
      assert.deepStrictEqual(kinds(yield* context.facts), ["tool_rejected:preparation_failed"])
    }).pipe(Effect.provide(recordingLayer())),
  )

  it.effect("fails with CommitFailed when the rejection cannot be committed", () =>
    Effect.gen(function* () {
      const context = yield* setup([{ id: "call-1", name: "probe", input: { value: "x" } }], [{ commit: 1, kind: "rejected" }])
      const error = yield* Effect.flip(
        withSink(context)(Journal.reject(context.invocation, context.requests[0]!, { kind: "cancelled" })),
      )
      assert.strictEqual(error.reason._tag, "CommitFailed")
      if (error.reason._tag === "CommitFailed") assert.strictEqual(error.reason.fact, "tool_rejected")
      assert.isFalse(error.isRetryable)
    }).pipe(Effect.provide(recordingLayer())),
  )
})
