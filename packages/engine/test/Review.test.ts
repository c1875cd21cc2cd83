import { assert, describe, it } from "@effect/vitest"
import type { Event } from "@maka/facts"
import * as LogTesting from "@maka/event-log/testing"
import { EventLogError } from "@maka/event-log"
import * as FakeModel from "@maka/model/testing"
import { Respond, OpenAiSse } from "@maka/testkit"
import { Ids, ToolCatalog } from "@maka/tools"
import { Effect, Stream } from "effect"
import * as Engine from "../src/Engine.ts"
import { catalog, input, setup } from "./support/setup.ts"

const kinds = (events: ReadonlyArray<Event.StoredEvent>) =>
  events.filter((stored) => stored.event.fact.kind !== "model_observed").map((stored) => {
    const fact = stored.event.fact
    if (fact.kind === "tool_rejected") return `tool_rejected:${fact.reason.kind}`
    if (fact.kind === "invocation_ended") return `invocation_ended:${fact.outcome.kind}`
    return fact.kind
  })

describe("edge cases of cancellation and commit failures", () => {
  it.live("rejects the calls of a step completed after cancellation, so the session stays usable", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [Respond.sse(OpenAiSse.response({ text: ["next turn"] }))] })
        const fake = FakeModel.make([FakeModel.toolCallResponse([{ id: "call-1", name: "echo", input: { value: "x" } }])], {
          model: "test-model",
        })
        // The stream stays open after `finished`, so cancellation lands between completion and the tools
        // (the events that came with the finish ride the completion's commit, so none is shown yet).
        const lingering = { ...fake, stream: (request: Parameters<typeof fake.stream>[0]) => Stream.concat(fake.stream(request), Stream.never) }
        const effects = { ran: [] as Array<string> }
        const running = yield* context.engine.start(input(context, "Call echo.", catalog(effects), { model: lingering }))
        yield* Stream.runDrain(running.events.pipe(Stream.takeUntil((stored) => stored.event.fact.kind === "model_requested")))
        yield* Effect.sleep("50 millis")
        yield* running.cancel
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        assert.deepStrictEqual(effects.ran, [])
        assert.deepStrictEqual(kinds(yield* context.engine.log.events("session-1")), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_rejected:cancelled",
          "invocation_ended:cancelled",
        ])
        const next = yield* context.engine.run(input(context, "Go on.", catalog(effects)))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
      }),
    ))

  it.live("ends events() when the terminal cannot be appended, and wait() reports the commit failure", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const wrapLog = (log: LogTesting.EventLog.EventLogShape): LogTesting.EventLog.EventLogShape => ({
          ...log,
          appendBatch: (writes, complete) =>
            writes.some((write) => write.event.fact.kind === "invocation_ended")
              ? Effect.fail(EventLogError.make({ _tag: "OutcomeUnknown", message: "disk went away" }))
              : log.appendBatch(writes, complete),
        })
        const context = yield* setup({ script: [Respond.sse(OpenAiSse.response({ text: ["hi"] }))] }, undefined, undefined, { wrapLog })
        const running = yield* context.engine.start(input(context, "Say hi.", ToolCatalog.make([])))
        const streamed = yield* Stream.runCollect(running.events)
        // The completion rides the terminal's commit (docs/engine.md §5.4): what was shown is what is durable.
        const durable = yield* context.engine.log.events("session-1")
        assert.strictEqual(streamed[streamed.length - 1]!.sequence, durable[durable.length - 1]!.sequence)
        assert.strictEqual(streamed[streamed.length - 1]!.event.fact.kind, "model_requested")
        const failure = yield* Effect.flip(running.wait)
        assert.strictEqual(failure.reason._tag, "Commit")
      }),
    ))
})

describe("closing the engine's scope", () => {
  it.live("cancels and seals live runs before the log closes", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [Respond.hang()] })
        const running = yield* Effect.scoped(
          Effect.gen(function* () {
            const engine = yield* Engine.make().pipe(
              Effect.provideService(LogTesting.EventLog.EventLog, context.log),
              Effect.provide(Ids.layer),
            )
            const started = yield* engine.start(input(context, "Wait.", ToolCatalog.make([])))
            yield* Effect.promise(() => context.server.request(0))
            return started
          }),
        )
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        const events = yield* context.log.events("session-1")
        assert.strictEqual(events[events.length - 1]!.event.fact.kind, "invocation_ended")
      }),
    ))
})
