import { assert, describe, it } from "@effect/vitest"
import { Canonical, Prompts } from "@maka/facts"
import { ModelError } from "@maka/model"
import * as FakeModel from "@maka/model/testing"
import { OpenAiSse, Respond } from "@maka/testkit"
import { Effect, Stream } from "effect"
import { TestClock } from "effect/testing"
import { factsOf, kinds, reopen } from "./support/harness.ts"
import { catalog, input, setup, type Effects } from "./support/setup.ts"

/** A real-time pause that lets sockets and the log make progress between clock steps. */
const settle = Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, 5)))

describe("model streams", () => {
  it.effect("fails model_timeout when no byte arrives for the idle timeout, unchanged after reopening (scenario 26)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          { script: [Respond.stallAfter([OpenAiSse.role(), OpenAiSse.text("Let me think")])] },
          undefined,
          { idleTimeoutMs: 1_000 },
        )
        const running = yield* context.engine.start(input(context, "Answer slowly.", catalog({ ran: [] })))
        yield* Effect.promise(() => context.server.request(0))
        // The idle timer reads Effect's Clock: step the test clock until the run ends.
        const result = yield* Effect.raceFirst(running.wait, Effect.forever(Effect.andThen(TestClock.adjust(250), settle)))
        assert.deepStrictEqual(result.outcome, {
          kind: "failed",
          class: "model_timeout",
          message: Prompts.MODEL_IDLE_TIMEOUT_MESSAGE,
        })
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_interrupted:timed_out",
          "invocation_ended:failed:model_timeout",
        ])
        assert.strictEqual(context.server.requests().length, 1)
        const exchange = yield* Effect.promise(() => context.server.exchange(0))
        assert.strictEqual(exchange.outcome, "client_closed")
        // Reopen the file with a new engine: recovery finds nothing and the facts read back the same.
        yield* context.log.close
        const reopened = yield* reopen(context.file)
        const again = yield* reopened.log.events("session-1")
        assert.strictEqual(Canonical.stringify(again), Canonical.stringify(events))
        assert.deepStrictEqual(factsOf(again, "invocation_ended")[0]!.outcome, result.outcome)
        assert.deepStrictEqual(yield* reopened.recover, { sealed: [], count: 0, unsealed: [] })
      }),
    ))

  it.live("interrupts a stream cancelled after partial text, keeping the text only as observation (scenario 27)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [Respond.stallAfter([OpenAiSse.role(), OpenAiSse.text("partial thought")])] })
        const tools = catalog({ ran: [] })
        const running = yield* context.engine.start(input(context, "Think aloud.", tools))
        // Wait until the partial text is durable (and so shown), then cancel.
        yield* running.events.pipe(
          Stream.takeUntil((stored) => stored.event.fact.kind === "model_observed" && stored.event.fact.event.kind === "part_delta"),
          Stream.runDrain,
        )
        yield* running.cancel
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_interrupted:cancelled",
          "invocation_ended:cancelled",
        ])
        const holding = events.filter((stored) => JSON.stringify(stored.event).includes("partial thought"))
        assert.isTrue(holding.length > 0)
        assert.isTrue(holding.every((stored) => stored.event.fact.kind === "model_observed"))
        const exchange = yield* Effect.promise(() => context.server.exchange(0))
        assert.strictEqual(exchange.outcome, "client_closed")
        // The next turn never replays the interrupted text.
        context.server.push(Respond.sse(OpenAiSse.response({ text: ["A fresh answer."] })))
        const next = yield* context.engine.run(input(context, "Try again.", tools))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
        const body = context.server.requests()[1]!.body
        assert.isTrue(body.includes("Think aloud."))
        assert.isFalse(body.includes("partial thought"))
      }),
    ))

  it.live("fails model_adapter on tool-call arguments that are not JSON and dispatches nothing (scenario 29)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "echo", arguments: ['{"value":', '"cut'] }] }))],
        })
        const effects: Effects = { ran: [] }
        const result = yield* context.engine.run(input(context, "Echo.", catalog(effects)))
        assert.strictEqual(result.outcome.kind, "failed")
        assert.strictEqual(result.outcome.kind === "failed" && result.outcome.class, "model_adapter")
        assert.include(result.outcome.kind === "failed" ? result.outcome.message : "", ModelError.AdapterMessage.invalidToolInput)
        assert.deepStrictEqual(kinds(yield* context.log.events("session-1")), [
          "invocation_opened",
          "model_requested",
          "model_interrupted:failed",
          "invocation_ended:failed:model_adapter",
        ])
        assert.deepStrictEqual(effects.ran, [])
        assert.strictEqual(context.server.requests().length, 1)
      }),
    ))

  it.live("fails model_adapter on an event after finished and dispatches nothing (scenario 29)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The socket adapters drop bytes after a finish, so an adapter that emits past it is faked.
        const context = yield* setup({ script: [] })
        const call = FakeModel.toolCallResponse([{ id: "call-1", name: "echo", input: { value: "x" } }])
        const model = FakeModel.make(
          [{ events: [...call.events, { kind: "part_started", id: "text-9", textKind: "text" }] }],
          { model: "test-model" },
        )
        const effects: Effects = { ran: [] }
        const result = yield* context.engine.run(input(context, "Echo.", catalog(effects), { model }))
        assert.deepStrictEqual(result.outcome, {
          kind: "failed",
          class: "model_adapter",
          message: ModelError.adapter(ModelError.AdapterMessage.eventAfterFinish).message,
        })
        assert.deepStrictEqual(kinds(yield* context.log.events("session-1")), [
          "invocation_opened",
          "model_requested",
          "model_interrupted:failed",
          "invocation_ended:failed:model_adapter",
        ])
        assert.deepStrictEqual(effects.ran, [])
        assert.strictEqual(model.requests().length, 1)
      }),
    ))
})
