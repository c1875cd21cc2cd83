/**
 * The compaction budget travels with a handoff (docs/engine.md §5.12 "Budget",
 * docs/engine.md §5.10): a run whose overflow recovery adopted a summary, and so spent its step,
 * pauses at the next boundary with `execution.compaction` = `reshaped`; the successor sends the
 * pause's replay, with no other summary. So does a run that adopted its proactive background summary
 * at a step boundary. Real SQLite file, the scripted server on loopback.
 */
import { assert, describe, it } from "@effect/vitest"
import { Respond } from "@maka/testkit"
import { ToolCatalog } from "@maka/tools"
import { Effect, Fiber } from "effect"
import { answer, echoCall, isSummaryRequest, mainEntry, overflow, summaryAnswer, summaryEntry, summaryText } from "./support/compaction.ts"
import { factsOf, kinds } from "./support/harness.ts"
import { catalog, input, setup, type Effects, type Setup } from "./support/setup.ts"
import type * as Engine from "../src/Engine.ts"

/** Requests a handoff of `running`, then lets the held response through: the pause it seals. */
const pauseOnRelease = (running: Engine.RunningInvocation, gate: Respond.Gate) =>
  Effect.gen(function* () {
    const requested = yield* Effect.forkChild(running.handoff)
    yield* Effect.sleep("20 millis")
    gate.release()
    const pause = yield* Fiber.join(requested)
    assert.isDefined(pause)
    return pause
  })

/** The session's events of one invocation. */
const ownEvents = (context: Setup, invocation: Engine.RunningInvocation["invocation"]) =>
  Effect.map(context.log.events("session-1"), (events) =>
    events.filter((stored) => stored.event.invocation.invocationId === invocation.invocationId),
  )

describe("the compaction budget across a handoff", () => {
  it.live("is reshaped in the pause after an overflow recovery, and the successor sends the replay without another summary", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const gate = Respond.gate()
        const context = yield* setup(
          {
            script: [
              mainEntry(answer("The code is 4417.")),
              mainEntry(overflow()),
              summaryEntry(Respond.hold(gate, summaryAnswer(summaryText("code noted")))),
              mainEntry(answer("Recovered.")),
            ],
          },
          undefined,
          { concurrency: 1 },
        )
        const tools = ToolCatalog.make([])
        yield* context.engine.run(input(context, "The code is 4417.", tools))
        const running = yield* context.engine.start(input(context, "Go on.", tools, { maxSteps: 4 }))
        // The summary of the overflow recovery is held while the handoff is requested.
        yield* Effect.promise(() => context.server.request(2))
        assert.isTrue(isSummaryRequest(context.server.requests()[2]!))
        const pause = yield* pauseOnRelease(running, gate)
        assert.strictEqual(pause.execution.compaction, "reshaped")
        assert.strictEqual(pause.remainingSteps, 3)
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "handoff_paused", pause: pause })
        const own = yield* ownEvents(context, running.invocation)
        assert.deepStrictEqual(kinds(own), [
          "invocation_opened",
          "model_requested",
          "model_interrupted:failed",
          "model_requested",
          "model_completed",
          "context_checkpoint_recorded",
          "invocation_ended:handoff_paused",
        ])

        const successor = yield* context.engine.resume({ paused: running.invocation, pause, model: context.model, tools })
        assert.deepStrictEqual((yield* successor.wait).outcome, { kind: "completed" })
        assert.strictEqual(context.server.requests().filter(isSummaryRequest).length, 1)
        const ownSuccessor = yield* ownEvents(context, successor.invocation)
        assert.strictEqual(factsOf(ownSuccessor, "model_requested")[0]!.inputDigest, pause.execution.replay.digest)
      }),
    ))

  it.live("is reshaped in the pause after an overflow recovery adopted the summary running in the background", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const gate = Respond.gate()
        const context = yield* setup({
          script: [
            mainEntry(answer("Noted.", 5_000)),
            summaryEntry(Respond.hold(gate, summaryAnswer(summaryText("noted")))),
            mainEntry(overflow()),
            mainEntry(answer("Recovered.")),
          ],
        })
        const tools = ToolCatalog.make([])
        const windowed = { context: { providerId: "openai-compatible", declaredWindow: 1_000 } }
        yield* context.engine.run(input(context, "Note this.", tools, windowed))
        const running = yield* context.engine.start(input(context, "Go on.", tools, { maxSteps: 4, ...windowed }))
        // The proactive summary runs beside the main request, which overflows; the recovery waits for it.
        yield* Effect.promise(() => context.server.request(2))
        assert.deepStrictEqual(context.server.requests().slice(1).map(isSummaryRequest).sort(), [false, true])
        const pause = yield* pauseOnRelease(running, gate)
        assert.strictEqual(pause.execution.compaction, "reshaped")
        const own = yield* ownEvents(context, running.invocation)
        assert.strictEqual(factsOf(own, "context_checkpoint_recorded").length, 1)
        assert.strictEqual(kinds(own).at(-1), "invocation_ended:handoff_paused")
        const successor = yield* context.engine.resume({ paused: running.invocation, pause, model: context.model, tools })
        assert.deepStrictEqual((yield* successor.wait).outcome, { kind: "completed" })
        assert.strictEqual(context.server.requests().filter(isSummaryRequest).length, 1)
      }),
    ))

  it.live("is reshaped in the pause taken at a retry of the step whose boundary adopted the background summary", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const first = Respond.gate()
        const second = Respond.gate()
        const context = yield* setup(
          {
            script: [
              mainEntry(answer("Noted.", 5_000)),
              summaryEntry(summaryAnswer(summaryText("noted"))),
              mainEntry(Respond.hold(first, echoCall("call-1", "one"))),
              mainEntry(Respond.hold(second, Respond.json(503, Respond.openAiError("overloaded")))),
              mainEntry(answer("Done.")),
            ],
          },
          { backoffBaseMs: 400, backoffMaxMs: 400 },
        )
        const effects: Effects = { ran: [] }
        const tools = catalog(effects)
        const windowed = { context: { providerId: "openai-compatible", declaredWindow: 1_000 } }
        yield* context.engine.run(input(context, "Note this.", tools, windowed))
        const running = yield* context.engine.start(input(context, "Go on.", tools, { maxSteps: 5, ...windowed }))
        // The proactive summary runs beside the first step's request and finishes while it is held.
        yield* Effect.promise(() => context.server.exchange(2))
        assert.isTrue(context.server.requests().slice(1, 3).some(isSummaryRequest))
        first.release()
        // The second step's boundary adopted it; that step's request fails retryably, and the handoff
        // is taken before its retry, with no accepted step since the adoption.
        yield* Effect.promise(() => context.server.request(3))
        const own = () => ownEvents(context, running.invocation)
        assert.strictEqual(factsOf(yield* own(), "context_checkpoint_recorded").length, 1)
        const pause = yield* pauseOnRelease(running, second)
        assert.strictEqual(pause.execution.compaction, "reshaped")
        assert.deepStrictEqual(effects.ran, ["one"])
        assert.strictEqual(kinds(yield* own()).at(-1), "invocation_ended:handoff_paused")
        const successor = yield* context.engine.resume({ paused: running.invocation, pause, model: context.model, tools })
        assert.deepStrictEqual((yield* successor.wait).outcome, { kind: "completed" })
        assert.strictEqual(context.server.requests().filter(isSummaryRequest).length, 1)
      }),
    ))

  it.live("is reshaped in the pause taken at a retry of a step that adopted a foreground summary (the last one was drained)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const held = Respond.gate()
        const failing = Respond.gate()
        const context = yield* setup(
          {
            script: [
              mainEntry(answer("Noted.", 5_000)),
              summaryEntry(Respond.hold(held, summaryAnswer(summaryText("never")))),
              mainEntry(answer("Fine.", 5_000)),
              summaryEntry(summaryAnswer(summaryText("noted"))),
              mainEntry(Respond.hold(failing, Respond.json(503, Respond.openAiError("overloaded")))),
              mainEntry(answer("Done.")),
            ],
          },
          { backoffBaseMs: 400, backoffMaxMs: 400 },
        )
        const tools = ToolCatalog.make([])
        const windowed = { context: { providerId: "openai-compatible", declaredWindow: 1_000 } }
        yield* context.engine.run(input(context, "Note this.", tools, windowed))
        // This run ends while its proactive summary is held: the summary is drained.
        yield* context.engine.run(input(context, "And this.", tools, windowed))
        const running = yield* context.engine.start(input(context, "Go on.", tools, { maxSteps: 4, ...windowed }))
        // After a drained summary the next one runs in the foreground, is adopted, and the request fails retryably.
        yield* Effect.promise(() => context.server.request(4))
        const own = () => ownEvents(context, running.invocation)
        assert.deepStrictEqual(kinds(yield* own()).slice(0, 5), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "context_checkpoint_recorded",
          "model_requested",
        ])
        const pause = yield* pauseOnRelease(running, failing)
        assert.strictEqual(pause.execution.compaction, "reshaped")
        const successor = yield* context.engine.resume({ paused: running.invocation, pause, model: context.model, tools })
        assert.deepStrictEqual((yield* successor.wait).outcome, { kind: "completed" })
        held.release()
      }),
    ))
})
