/**
 * The journal cases every `EventSink` must pass, written once: `journalSuite(name, makeSinkLayer)`
 * runs them against any sink layer that also provides `Committed` (a read of what was stored). Each
 * case first commits a valid preamble (opening, request, completed tool-call step) so a real event
 * log accepts the journal's facts; faults are injected by wrapping the sink with `withFaults`.
 */
import { assert, describe, it } from "@effect/vitest"
import { EventSink, Prompts, type Event, type Fact, type Identity } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import { Cancellation, Journal, Tool, ToolCatalog } from "@maka/tools"
import { RecordingSink, TestIds } from "@maka/tools/testing"
import { Context, Deferred, Effect, Fiber, Layer, Redacted, Schema } from "effect"

/** What a sink layer under test must also provide: the events it stored, in sequence order. */
export class Committed extends Context.Service<
  Committed,
  { readonly events: Effect.Effect<ReadonlyArray<Event.RuntimeEvent>, unknown> }
>()("@maka/tools/test/Committed") {}

export type MakeSinkLayer = () => Layer.Layer<EventSink.EventSink | Committed, unknown>

/** Side effects of the fixture tools, so a test can tell whether an effect ran. */
export interface Effects {
  readonly ran: Array<string>
}

const TextInput = Schema.Struct({ value: Schema.String })

/** The fixture catalog: every outcome a tool can have. */
/** Lets a test hold the `gate` tool mid-effect: it publishes its signal, then waits to be released. */
export interface Gate {
  readonly signal: Deferred.Deferred<AbortSignal>
  readonly release: Deferred.Deferred<void>
}

export const fixtureTools = (effects: Effects, gate?: Gate) =>
  ToolCatalog.make([
    Tool.make({
      name: "echo",
      description: "Returns its input.",
      input: TextInput,
      semantics: "parallel",
      execute: ({ value }) => Effect.sync(() => (effects.ran.push(`echo:${value}`), Tool.text(value))),
    }),
    Tool.make({
      name: "fails",
      description: "Always fails.",
      input: TextInput,
      semantics: "parallel",
      execute: ({ value }) => Effect.andThen(Effect.sync(() => effects.ran.push(`fails:${value}`)), Tool.fail("disk is full")),
    }),
    Tool.make({
      name: "dies",
      description: "Does half of its work, then dies.",
      input: TextInput,
      semantics: "parallel",
      execute: ({ value }) =>
        Effect.andThen(Effect.sync(() => effects.ran.push(`dies:${value}`)), Effect.die(new Error("crashed mid-way"))),
    }),
    Tool.make({
      name: "throws",
      description: "Throws an Error with its input as the message.",
      input: TextInput,
      semantics: "parallel",
      execute: ({ value }) => {
        effects.ran.push(`throws:${value}`)
        throw new Error(value)
      },
    }),
    Tool.make({
      name: "rejects",
      description: "Returns a Promise that rejects with a RangeError.",
      input: TextInput,
      semantics: "parallel",
      execute: ({ value }) => (effects.ran.push(`rejects:${value}`), Promise.reject(new RangeError(value))),
    }),
    Tool.make({
      name: "errs",
      description: "Fails its Effect with a plain value.",
      input: TextInput,
      semantics: "parallel",
      execute: ({ value }) => Effect.andThen(Effect.sync(() => effects.ran.push(`errs:${value}`)), Effect.fail(value)),
    }),
    Tool.make({
      name: "unknown",
      description: "Cannot say whether its effect happened.",
      input: TextInput,
      semantics: "parallel",
      execute: ({ value }) =>
        Effect.andThen(
          Effect.sync(() => effects.ran.push(`unknown:${value}`)),
          Effect.fail(new Tool.ToolOutcomeUnknown({ message: "connection lost" })),
        ),
    }),
    Tool.make({
      name: "exclusive",
      description: "Must be alone in its step.",
      input: TextInput,
      semantics: "exclusive_step",
      execute: ({ value }) => Effect.sync(() => (effects.ran.push(`exclusive:${value}`), Tool.text(value))),
    }),
    Tool.make({
      name: "finish",
      description: "Ends the turn.",
      input: TextInput,
      semantics: "finish_turn",
      execute: ({ value }) => Effect.sync(() => (effects.ran.push(`finish:${value}`), Tool.text(value))),
    }),
    Tool.make({
      name: "finish-fails",
      description: "Ends the turn, but fails.",
      input: TextInput,
      semantics: "finish_turn",
      execute: ({ value }) => Effect.andThen(Effect.sync(() => effects.ran.push(`finish-fails:${value}`)), Tool.fail("not done")),
    }),
    Tool.make({
      name: "gate",
      description: "Waits to be released, then reports whether its signal was aborted.",
      input: TextInput,
      semantics: "parallel",
      execute: ({ value }, { signal }) =>
        gate === undefined
          ? Tool.fail("no gate")
          : Effect.gen(function* () {
              effects.ran.push(`gate:${value}`)
              yield* Deferred.succeed(gate.signal, signal)
              yield* Deferred.await(gate.release)
              return Tool.text(`aborted: ${signal.aborted}`)
            }),
    }),
  ])

export interface Setup {
  readonly invocation: Identity.Invocation
  readonly requests: ReadonlyArray<Journal.CallRequest>
  readonly sink: EventSink.EventSinkShape
  /** The facts committed after the preamble, in order. */
  readonly facts: Effect.Effect<ReadonlyArray<Fact.Fact>, unknown>
}

/** Commits the preamble of one step calling `calls`, and wraps the sink with `faults` (counted from here). */
export const setup = (
  calls: ReadonlyArray<FactBuilders.CallSpec>,
  faults: ReadonlyArray<RecordingSink.Fault> = [],
): Effect.Effect<Setup, unknown, EventSink.EventSink | Committed> =>
  Effect.gen(function* () {
    const base = yield* EventSink.EventSink
    const committed = yield* Committed
    const history = new History.History()
    const run = history.open()
    const stepId = run.request()
    run.complete(stepId, FactBuilders.toolCallStep(calls))
    yield* base.commitBatch(history.writes)
    const preamble = history.writes.length
    const sink = yield* RecordingSink.withFaults(base, faults)
    return {
      invocation: run.invocation,
      requests: calls.map((call) => Journal.providerCall(stepId, { id: call.id, name: call.name, input: call.input ?? {} })),
      sink,
      facts: Effect.map(committed.events, (events) => events.slice(preamble).map((event) => event.fact)),
    }
  })

/** Runs `effect` with the set-up sink and deterministic ids. */
export const withSink =
  (context: Setup) =>
  <A, E>(effect: Effect.Effect<A, E, EventSink.EventSink | Journal.Requirements>): Effect.Effect<A, E> =>
    effect.pipe(Effect.provideService(EventSink.EventSink, context.sink), Effect.provide(TestIds.layer(1)))

export const kinds = (facts: ReadonlyArray<Fact.Fact>): ReadonlyArray<string> =>
  facts.map((fact) =>
    fact.kind === "tool_settled"
      ? `tool_settled:${fact.outcome.kind}`
      : fact.kind === "tool_rejected"
        ? `tool_rejected:${fact.reason.kind}`
        : fact.kind,
  )

export const journalSuite = (name: string, makeSinkLayer: MakeSinkLayer) =>
  describe(`Journal over ${name}`, () => {
    const call = (id: string, toolName: string, value = id) => ({ id, name: toolName, input: { value } })

    it.effect("commits tool_dispatched before the effect and tool_settled {succeeded} after it", () =>
      Effect.gen(function* () {
        const effects: Effects = { ran: [] }
        const context = yield* setup([call("call-1", "echo", "hello")])
        const result = yield* withSink(context)(Journal.runStep(context.invocation, fixtureTools(effects).capture(), context.requests))
        assert.deepStrictEqual(kinds(yield* context.facts), ["tool_dispatched", "tool_settled:succeeded"])
        assert.deepStrictEqual(effects.ran, ["echo:hello"])
        const settled = result.calls[0]!
        assert.strictEqual(settled._tag, "Settled")
        if (settled._tag === "Settled" && settled.outcome.kind === "succeeded") {
          assert.deepStrictEqual(settled.outcome.projection, { kind: "text", text: "hello" })
        }
        const [dispatched] = yield* context.facts
        assert.deepStrictEqual(dispatched, {
          kind: "tool_dispatched",
          operationId: context.requests[0]!.operationId,
          call: context.requests[0]!.call,
          name: "echo",
          input: { value: "hello" },
        })
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("commits tool_settled {failed} with the message of a ToolFailure", () =>
      Effect.gen(function* () {
        const context = yield* setup([call("call-1", "fails")])
        yield* withSink(context)(Journal.runStep(context.invocation, fixtureTools({ ran: [] }).capture(), context.requests))
        const facts = yield* context.facts
        assert.deepStrictEqual(kinds(facts), ["tool_dispatched", "tool_settled:failed"])
        assert.deepStrictEqual(facts[1], {
          kind: "tool_settled",
          operationId: context.requests[0]!.operationId,
          outcome: { kind: "failed", message: "disk is full" },
        })
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("rejects an unknown tool as unavailable and an exclusive call after another as a conflict", () =>
      Effect.gen(function* () {
        const effects: Effects = { ran: [] }
        const context = yield* setup([call("call-1", "echo"), call("call-2", "missing"), call("call-3", "exclusive")])
        const result = yield* withSink(context)(
          Journal.runStep(context.invocation, fixtureTools(effects).capture(), context.requests),
        )
        assert.deepStrictEqual(kinds(yield* context.facts), [
          "tool_dispatched",
          "tool_settled:succeeded",
          "tool_rejected:unavailable",
          "tool_rejected:exclusive_conflict",
        ])
        assert.deepStrictEqual(effects.ran, ["echo:call-1"])
        const texts = result.calls.flatMap((item) => (item._tag === "Rejected" ? [item.text] : []))
        assert.deepStrictEqual(texts, [Prompts.TOOL_REJECTION_TEXT.unavailable, Prompts.TOOL_REJECTION_TEXT.exclusive_conflict])
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("rejects schema-invalid input with a readable message and dispatches nothing", () =>
      Effect.gen(function* () {
        const effects: Effects = { ran: [] }
        const context = yield* setup([{ id: "call-1", name: "echo", input: { value: 42, extra: true } }])
        const result = yield* withSink(context)(
          Journal.runStep(context.invocation, fixtureTools(effects).capture(), context.requests),
        )
        const facts = yield* context.facts
        assert.deepStrictEqual(kinds(facts), ["tool_rejected:invalid_input"])
        assert.deepStrictEqual(effects.ran, [])
        const rejected = result.calls[0]!
        assert.strictEqual(rejected._tag, "Rejected")
        if (rejected._tag === "Rejected") {
          assert.include(rejected.text, 'Invalid input for tool "echo"')
          assert.include(rejected.text, 'Expected string')
          assert.include(rejected.text, 'at ["value"]')
          assert.include(rejected.text, 'at ["extra"]')
        }
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("settles a thrown Error, a rejection, an Effect failure and a defect as failed with the error's message", () =>
      Effect.gen(function* () {
        const effects: Effects = { ran: [] }
        const context = yield* setup([
          call("call-1", "throws", "x"),
          call("call-2", "rejects", "out of range"),
          call("call-3", "errs", "a plain error"),
          call("call-4", "dies"),
          call("call-5", "throws", ""),
          call("call-6", "echo"),
        ])
        const result = yield* withSink(context)(
          Journal.runStep(context.invocation, fixtureTools(effects).capture(), context.requests),
        )
        const facts = yield* context.facts
        assert.deepStrictEqual(
          facts.flatMap((fact) =>
            fact.kind === "tool_settled" ? [fact.outcome.kind === "failed" ? fact.outcome.message : fact.outcome.kind] : [],
          ),
          ["x", "out of range", "a plain error", "crashed mid-way", "tool failed", "succeeded"],
        )
        assert.isFalse(result.uncertain)
        assert.deepStrictEqual(effects.ran, ["throws:x", "rejects:out of range", "errs:a plain error", "dies:call-4", "throws:", "echo:call-6"])
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("leaves a ToolOutcomeUnknown dispatched and unsettled, and stops the step", () =>
      Effect.gen(function* () {
        const effects: Effects = { ran: [] }
        const context = yield* setup([call("call-1", "unknown"), call("call-2", "echo")])
        const result = yield* withSink(context)(
          Journal.runStep(context.invocation, fixtureTools(effects).capture(), context.requests),
        )
        assert.deepStrictEqual(kinds(yield* context.facts), ["tool_dispatched", "tool_rejected:cancelled"])
        assert.deepStrictEqual(effects.ran, ["unknown:call-1"])
        assert.isTrue(result.uncertain)
        assert.deepInclude(result.calls[0]!, { _tag: "OutcomeUnknown", cause: "outcome_unknown", message: "connection lost" })
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("cuts a failure message to 2,048 UTF-16 units without splitting a surrogate pair", () =>
      Effect.gen(function* () {
        // 2,047 units, then an emoji (a surrogate pair) across the boundary, then more.
        const long = "a".repeat(2_047) + "\u{1F600}" + "b".repeat(5_000)
        const exact = "c".repeat(2_048)
        const context = yield* setup([call("call-1", "throws", long), call("call-2", "throws", exact), call("call-3", "throws", exact + "d")])
        yield* withSink(context)(Journal.runStep(context.invocation, fixtureTools({ ran: [] }).capture(), context.requests))
        const messages = (yield* context.facts).flatMap((fact) =>
          fact.kind === "tool_settled" && fact.outcome.kind === "failed" ? [fact.outcome.message] : [],
        )
        assert.deepStrictEqual(messages, ["a".repeat(2_047), exact, exact])
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("scrubs the host's secrets from a failure message in every form they can take", () =>
      Effect.gen(function* () {
        const key = "sk-test/secret+key=1\n"
        const forms = [key, key.trim(), encodeURIComponent(key.trim()), JSON.stringify(key).slice(1, -1)]
        const context = yield* setup(forms.map((form, index) => call(`call-${index + 1}`, "throws", `request failed with ${form} sent`)))
        yield* withSink(context)(
          Journal.runStep(context.invocation, fixtureTools({ ran: [] }).capture(), context.requests, {
            secrets: [Redacted.make(key)],
          }),
        )
        const messages = (yield* context.facts).flatMap((fact) =>
          fact.kind === "tool_settled" && fact.outcome.kind === "failed" ? [fact.outcome.message] : [],
        )
        assert.strictEqual(messages.length, forms.length)
        for (const message of messages) {
          assert.match(message, /^request failed with \[redacted\]\s* sent$/)
          assert.notInclude(message, "secret")
        }
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("scrubs the host's secrets from a success's output: a text, each string and key of a JSON value", () =>
      Effect.gen(function* () {
        const key = "u0001-secret"
        const show = Tool.make({
          name: "show",
          description: "Returns its input inside a JSON value, or in a text.",
          input: TextInput,
          semantics: "parallel",
          execute: ({ value }) =>
            Effect.succeed(
              value === "text"
                ? Tool.text(`export KEY=${key}`)
                : value === "escape"
                  ? // Canonical JSON writes U+0001 as an escape the key's text runs into: it cannot be taken out.
                    Tool.json({ v: `\u0001-secret` })
                  : Tool.json({ note: `key=${key}`, [key]: [key, 1] }),
            ),
        })
        const context = yield* setup([call("call-1", "show", "json"), call("call-2", "show", "text"), call("call-3", "show", "escape")])
        yield* withSink(context)(
          Journal.runStep(context.invocation, ToolCatalog.make([show]).capture(), context.requests, { secrets: [Redacted.make(key)] }),
        )
        const outputs = (yield* context.facts).flatMap((fact) =>
          fact.kind === "tool_settled" && fact.outcome.kind === "succeeded" ? [fact.outcome.projection] : [],
        )
        assert.deepStrictEqual(outputs, [
          { kind: "json", value: { "[redacted]": ["[redacted]", 1], note: "key=[redacted]" } },
          { kind: "text", text: "export KEY=[redacted]" },
          { kind: "text", text: "[redacted]" },
        ])
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("scrubs what a cut left of a secret, and leaves its vendor's prefix in ordinary text", () =>
      Effect.gen(function* () {
        const key = "sk-proj-Xq3v9LmZ2bT7wRk4Yp1sN8dF6gH0jK5cV2xQ9aE3"
        const outputs: Record<string, string> = {
          // A tool that kept the head of its output, cut inside the key.
          head: `aaaa${key.slice(0, 24)}\n[truncated: 24 more bytes]`,
          // A page that begins inside the key.
          tail: `${key.slice(-20)} and the rest`,
          // Code that names the vendor's prefix, a piece of its start shorter than 16 characters and
          // one of its end shorter than 8, stay.
          short: `key.startsWith("sk-proj-") ${key.slice(0, 15)} ${key.slice(-7)}`,
          // A piece of its end of 8 characters does not.
          end: `ends ${key.slice(-8)}.`,
        }
        const show = Tool.make({
          name: "show",
          description: "Returns a text chosen by its input.",
          input: TextInput,
          semantics: "parallel",
          execute: ({ value }) => Effect.succeed(Tool.text(outputs[value]!)),
        })
        const context = yield* setup([
          call("call-1", "show", "head"),
          call("call-2", "show", "tail"),
          call("call-3", "show", "short"),
          call("call-4", "show", "end"),
        ])
        yield* withSink(context)(
          Journal.runStep(context.invocation, ToolCatalog.make([show]).capture(), context.requests, { secrets: [Redacted.make(key)] }),
        )
        const settled = (yield* context.facts).flatMap((fact) =>
          fact.kind === "tool_settled" && fact.outcome.kind === "succeeded" ? [fact.outcome.projection] : [],
        )
        assert.deepStrictEqual(settled, [
          { kind: "text", text: "aaaa[redacted]\n[truncated: 24 more bytes]" },
          { kind: "text", text: "[redacted] and the rest" },
          { kind: "text", text: outputs["short"]! },
          { kind: "text", text: "ends [redacted]." },
        ])
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("reports a call whose settle commit failed as OutcomeUnknown, never settled", () =>
      Effect.gen(function* () {
        const effects: Effects = { ran: [] }
        // Commit 1 is the dispatch, commit 2 the settlement.
        const context = yield* setup([call("call-1", "echo"), call("call-2", "echo")], [{ commit: 2, kind: "rejected" }])
        const result = yield* withSink(context)(
          Journal.runStep(context.invocation, fixtureTools(effects).capture(), context.requests),
        )
        assert.deepStrictEqual(kinds(yield* context.facts), ["tool_dispatched", "tool_rejected:cancelled"])
        assert.deepStrictEqual(effects.ran, ["echo:call-1"])
        assert.isTrue(result.uncertain)
        assert.deepStrictEqual(
          result.calls.map((item) => item._tag),
          ["OutcomeUnknown", "Rejected"],
        )
        assert.deepInclude(result.calls[0]!, {
          _tag: "OutcomeUnknown",
          cause: "settle_commit",
          message: "tool_settled commit rejected: injected rejection",
        })
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("scrubs the secrets from a failed settle commit's message", () =>
      Effect.gen(function* () {
        const effects: Effects = { ran: [] }
        const key = "sk-settle-commit-secret-0123456789"
        const context = yield* setup([call("call-1", "echo")], [{ commit: 2, kind: "rejected", reason: `store said ${key}` }])
        const result = yield* withSink(context)(
          Journal.runStep(context.invocation, fixtureTools(effects).capture(), context.requests, { secrets: [Redacted.make(key)] }),
        )
        assert.deepInclude(result.calls[0]!, {
          _tag: "OutcomeUnknown",
          cause: "settle_commit",
          message: "tool_settled commit rejected: store said [redacted]",
        })
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("never starts the effect when the dispatch commit fails", () =>
      Effect.gen(function* () {
        const effects: Effects = { ran: [] }
        const context = yield* setup([call("call-1", "echo")], [{ commit: 1, kind: "outcome_unknown" }])
        const error = yield* Effect.flip(
          withSink(context)(Journal.runStep(context.invocation, fixtureTools(effects).capture(), context.requests)),
        )
        assert.strictEqual(error.reason._tag, "CommitFailed")
        if (error.reason._tag === "CommitFailed") {
          assert.strictEqual(error.reason.fact, "tool_dispatched")
          assert.strictEqual(error.reason.error.kind, "outcome_unknown")
        }
        assert.deepStrictEqual(effects.ran, [])
        assert.deepStrictEqual(yield* context.facts, [])
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("lets a dispatched effect finish on cancellation and rejects the call not yet dispatched", () =>
      Effect.gen(function* () {
        const effects: Effects = { ran: [] }
        const gate: Gate = { signal: yield* Deferred.make<AbortSignal>(), release: yield* Deferred.make<void>() }
        const controller = yield* Cancellation.make
        const context = yield* setup([call("call-1", "gate"), call("call-2", "echo")])
        const fiber = yield* Effect.forkChild(
          withSink(context)(
            Journal.runStep(context.invocation, fixtureTools(effects, gate).capture(), context.requests, {
              cancellation: controller.cancellation,
            }),
          ),
        )
        const signal = yield* Deferred.await(gate.signal)
        yield* controller.cancel
        // The running effect's signal is aborted (a tool may honour it); this one finishes anyway.
        yield* Cancellation.fromSignal(signal).requested
        yield* Deferred.succeed(gate.release, undefined)
        const result = yield* Fiber.join(fiber)
        const facts = yield* context.facts
        assert.deepStrictEqual(kinds(facts), ["tool_dispatched", "tool_settled:succeeded", "tool_rejected:cancelled"])
        assert.deepStrictEqual(effects.ran, ["gate:call-1"])
        assert.isTrue(result.cancelled)
        const settled = facts[1]!
        if (settled.kind === "tool_settled" && settled.outcome.kind === "succeeded") {
          assert.deepStrictEqual(settled.outcome.projection, { kind: "text", text: "aborted: true" })
        }
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("settles `cancelled before effect` when cancellation came before the effect started", () =>
      Effect.gen(function* () {
        const effects: Effects = { ran: [] }
        const controller = yield* Cancellation.make
        yield* controller.cancel
        const context = yield* setup([call("call-1", "echo")])
        const preparation = yield* Journal.prepare(fixtureTools(effects).capture(), context.requests[0]!)
        assert.strictEqual(preparation._tag, "Prepared")
        if (preparation._tag !== "Prepared") return
        const result = yield* withSink(context)(
          Journal.invoke(context.invocation, preparation, { cancellation: controller.cancellation }),
        )
        assert.deepStrictEqual(kinds(yield* context.facts), ["tool_dispatched", "tool_settled:failed"])
        assert.deepStrictEqual(effects.ran, [])
        assert.strictEqual(result._tag, "Settled")
        if (result._tag === "Settled") {
          assert.deepStrictEqual(result.outcome, { kind: "failed", message: Prompts.CANCELLED_BEFORE_EFFECT })
        }
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("marks the turn finished when a finish_turn call settles successfully", () =>
      Effect.gen(function* () {
        const context = yield* setup([call("call-1", "finish")])
        const result = yield* withSink(context)(
          Journal.runStep(context.invocation, fixtureTools({ ran: [] }).capture(), context.requests),
        )
        assert.isTrue(result.finishTurn)
        assert.deepStrictEqual(kinds(yield* context.facts), ["tool_dispatched", "tool_settled:succeeded"])
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("does not finish the turn for a finish_turn call that failed", () =>
      Effect.gen(function* () {
        const effects: Effects = { ran: [] }
        const context = yield* setup([call("call-1", "finish-fails")])
        const result = yield* withSink(context)(Journal.runStep(context.invocation, fixtureTools(effects).capture(), context.requests))
        assert.isFalse(result.finishTurn)
        assert.deepStrictEqual(effects.ran, ["finish-fails:call-1"])
        assert.deepStrictEqual(kinds(yield* context.facts), ["tool_dispatched", "tool_settled:failed"])
      }).pipe(Effect.provide(makeSinkLayer())),
    )

    it.effect("does not finish the turn for a step without a finish_turn call", () =>
      Effect.gen(function* () {
        const context = yield* setup([call("call-1", "echo")])
        const result = yield* withSink(context)(Journal.runStep(context.invocation, fixtureTools({ ran: [] }).capture(), context.requests))
        assert.isFalse(result.finishTurn)
      }).pipe(Effect.provide(makeSinkLayer())),
    )
  })
