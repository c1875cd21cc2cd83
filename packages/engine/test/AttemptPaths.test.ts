/**
 * The attempt's less travelled paths (docs/engine.md §5.4, §5.6), on `TestClock` with a model whose
 * stream is written here: the optional `observationDelayMs` wait that lets text deltas share one
 * commit, a stream that dies with a defect, and a cancellation that lands during a retry's backoff.
 */
import { assert, describe, it } from "@effect/vitest"
import type { Model } from "@maka/facts"
import * as LogTesting from "@maka/event-log/testing"
import { ModelError } from "@maka/model"
import * as FakeModel from "@maka/model/testing"
import { FactBuilders } from "@maka/testkit"
import { Ids, ToolCatalog } from "@maka/tools"
import { Effect, Fiber, Stream } from "effect"
import { TestClock } from "effect/testing"
import * as Engine from "../src/Engine.ts"
import { factsOf, kinds } from "./support/harness.ts"

/** A step of a written stream: an event now, several at once (one chunk), or a pause of `ms` on the clock. */
type Beat = Model.ModelEvent | ReadonlyArray<Model.ModelEvent> | { readonly pauseMs: number }

/** A model (the fake's identity and limiter) whose only answer plays `beats`, then `end`. */
const writtenModel = (beats: ReadonlyArray<Beat>, end: Stream.Stream<Model.ModelEvent, ModelError.ModelError> = Stream.empty) => {
  const fake = FakeModel.make([])
  const played = Stream.fromIterable(beats).pipe(
    Stream.mapEffect((beat) =>
      Array.isArray(beat)
        ? Effect.succeed(beat as ReadonlyArray<Model.ModelEvent>)
        : "pauseMs" in beat
          ? Effect.as(Effect.sleep(beat.pauseMs), [])
          : Effect.succeed([beat as Model.ModelEvent]),
    ),
    Stream.flattenIterable,
  )
  return { ...fake, stream: () => Stream.concat(played, end) }
}

const startRun = (model: ReturnType<typeof writtenModel> | FakeModel.FakeLanguageModel, options: Partial<Engine.EngineOptions>) =>
  Effect.gen(function* () {
    const { log } = yield* LogTesting.makeTemporary()
    const engine = yield* Engine.make(options).pipe(Effect.provideService(LogTesting.EventLog.EventLog, log), Effect.provide(Ids.layer))
    const invocation = FactBuilders.invocation()
    const running = yield* engine.start({
      invocation,
      model,
      configuration: FactBuilders.configuration({ model: FactBuilders.modelBinding({ model: model.model }) }),
      message: { text: "Answer." },
      tools: ToolCatalog.make([]),
    })
    const events = log.events(invocation.sessionId)
    return { running, events }
  })

/** Lets every ready fiber run after moving the clock by `millis`. */
const settle = (millis: number) =>
  Effect.gen(function* () {
    yield* TestClock.adjust(millis)
    for (let round = 0; round < 50; round++) yield* Effect.yieldNow
  })

const observedTexts = (events: Parameters<typeof factsOf>[0]) =>
  factsOf(events, "model_observed").map((fact) => (fact.event.kind === "part_delta" ? fact.event.text : `<${fact.event.kind}>`))

const started: Model.ModelEvent = { kind: "part_started", id: "t", textKind: "text" }
const delta = (text: string): Model.ModelEvent => ({ kind: "part_delta", id: "t", text })
const answerEnd: ReadonlyArray<Beat> = [
  { pauseMs: 500 },
  delta("c"),
  { kind: "part_finished", id: "t" },
  { kind: "finished", reason: "stop", usage: { inputTokens: 1, outputTokens: 3 } },
]

/** Runs `beats` to the end on the clock and returns the texts of the observations, in order. */
const observe = (beats: ReadonlyArray<Beat>, observationDelayMs: number) =>
  Effect.gen(function* () {
    const { running, events } = yield* startRun(writtenModel(beats), { observationDelayMs })
    const waiting = yield* Effect.forkChild(running.wait)
    for (let tick = 0; tick < 20; tick++) yield* settle(50)
    const result = yield* Fiber.join(waiting)
    assert.deepStrictEqual(result.outcome, { kind: "completed" })
    return observedTexts(yield* events)
  })

describe("observationDelayMs", () => {
  it.effect("with a wait, a delta arriving within it shares the first commit; without, the first commit goes at once", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const beats: ReadonlyArray<Beat> = [started, delta("a"), { pauseMs: 10 }, delta("b"), ...answerEnd]
        const waited = yield* observe(beats, 50)
        assert.deepStrictEqual(waited.slice(0, 2), ["<part_started>", "ab"])
        const immediate = yield* observe(beats, 0)
        assert.deepStrictEqual(immediate.slice(0, 2), ["<part_started>", "a"])
        assert.strictEqual(immediate.join(""), "<part_started>abc<part_finished><finished>")
      }),
    ))

  it.effect("waits only while everything taken is streaming text", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const metadata: Model.ModelEvent = { kind: "response_metadata", id: "r1" }
        const texts = yield* observe([[metadata, started, delta("a")], { pauseMs: 10 }, delta("b"), ...answerEnd], 50)
        assert.deepStrictEqual(texts.slice(0, 3), ["<response_metadata>", "<part_started>", "a"])
      }),
    ))
})

describe("a stream that dies", () => {
  it.effect("records the interruption failed and ends the run on an adapter error naming the defect", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const model = writtenModel([started, delta("a")], Stream.die(new Error("decoder exploded")))
        const { running, events } = yield* startRun(model, { backoffBaseMs: 5 })
        const result = yield* running.wait
        assert.strictEqual(result.outcome.kind, "failed")
        const stored = yield* events
        const interrupted = factsOf(stored, "model_interrupted")
        assert.deepStrictEqual(interrupted.map((fact) => fact.status), ["failed"])
        assert.strictEqual(factsOf(stored, "model_requested").length, 1, "a defect is never retried")
        const ended = factsOf(stored, "invocation_ended")[0]!
        assert.strictEqual(ended.outcome.kind, "failed")
        if (ended.outcome.kind === "failed") assert.include(ended.outcome.message, "model stream failed: Error: decoder exploded")
      }),
    ))
})

describe("cancellation during a retry's backoff", () => {
  it.effect("ends the run cancelled at once, without another attempt", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const busy = ModelError.provider({ reason: "provider_unavailable", message: "busy", status: 503, replaySafe: true, retryAfterMs: 60_000 })
        const model = FakeModel.make([FakeModel.failure(busy), FakeModel.textResponse("never")])
        const { running, events } = yield* startRun(model, {})
        yield* settle(0)
        assert.strictEqual(model.requests().length, 1)
        yield* settle(1_000)
        yield* running.cancel
        yield* settle(0)
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome.kind, "cancelled")
        assert.strictEqual(model.requests().length, 1)
        const stored = yield* events
        assert.deepStrictEqual(
          kinds(stored).filter((kind) => kind.startsWith("model_")),
          ["model_requested", "model_interrupted:retryable_failure"],
        )
      }),
    ))
})

/**
 * Deeper than a fact's decoder can walk on any stack a test runs with (its limit is the stack, which
 * differs between a forked process and a worker thread).
 */
const DEEPER_THAN_ANY_STACK = 200_000

const nested = (depth: number): Model.ToolCallPart["input"] => {
  let deep: Record<string, unknown> = { leaf: true }
  for (let level = 0; level < depth; level++) deep = { next: deep }
  return deep as Model.ToolCallPart["input"]
}

describe("an output no fact may hold", () => {
  it.effect("a streamed tool call no observation may hold fails the step as an adapter failure before the finish", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const call: Model.ModelEvent = { kind: "tool_call", id: "call-1", name: "missing", input: nested(DEEPER_THAN_ANY_STACK), providerExecuted: false }
        const finished: Model.ModelEvent = { kind: "finished", reason: "tool-calls", usage: { inputTokens: 1, outputTokens: 1 } }
        const { running, events } = yield* startRun(writtenModel([started, delta("a"), call, { pauseMs: 100 }, finished]), {})
        const waiting = yield* Effect.forkChild(running.wait)
        for (let tick = 0; tick < 5; tick++) yield* settle(50)
        const result = yield* Fiber.join(waiting)
        assert.strictEqual(result.outcome.kind, "failed")
        const stored = yield* events
        assert.deepStrictEqual(factsOf(stored, "model_interrupted").map((fact) => fact.status), ["failed"])
        assert.isFalse(observedTexts(stored).includes("<tool_call>"), "the call is never observed")
        const ended = factsOf(stored, "invocation_ended")[0]!
        if (ended.outcome.kind === "failed") assert.include(ended.outcome.message, "model output is not a valid fact: decode")
        else assert.fail(`expected a failed terminal, got ${ended.outcome.kind}`)
      }),
    ))

  it.effect("interrupts the step as an adapter failure, and the session takes the next run", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const model = FakeModel.make([
          FakeModel.toolCallResponse([{ id: "call-1", name: "missing", input: nested(DEEPER_THAN_ANY_STACK) }]),
          FakeModel.textResponse("fine"),
        ])
        const { log } = yield* LogTesting.makeTemporary()
        const engine = yield* Engine.make({}).pipe(Effect.provideService(LogTesting.EventLog.EventLog, log), Effect.provide(Ids.layer))
        const invocation = FactBuilders.invocation()
        const configuration = FactBuilders.configuration({ model: FactBuilders.modelBinding({ model: model.model }) })
        const first = yield* engine.run({ invocation, model, configuration, message: { text: "Go." }, tools: ToolCatalog.make([]) })
        assert.strictEqual(first.outcome.kind, "failed")
        const stored = yield* log.events(invocation.sessionId)
        assert.deepStrictEqual(factsOf(stored, "model_interrupted").map((fact) => fact.status), ["failed"])
        assert.strictEqual(factsOf(stored, "model_completed").length, 0)
        const ended = factsOf(stored, "invocation_ended")[0]!
        if (ended.outcome.kind === "failed") assert.include(ended.outcome.message, "model output is not a valid fact: decode")
        else assert.fail(`expected a failed terminal, got ${ended.outcome.kind}`)
        const next = FactBuilders.invocation({ turnId: "turn-2", runId: "run-2", invocationId: "invocation-2" })
        const second = yield* engine.run({ invocation: next, model, configuration, message: { text: "Again." }, tools: ToolCatalog.make([]) })
        assert.deepStrictEqual(second.outcome, { kind: "completed" })
      }),
    ))
})
