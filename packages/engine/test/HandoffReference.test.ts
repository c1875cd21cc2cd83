/**
 * The reference scenario of handoff (issue 12, SEMANTICS scenario 60, docs/engine.md §5.10, §5.12):
 * "handoff preserves conversation replay and compacts before its physical anchor". A prior run on
 * another route answers with thinking; a run on the main route reaches the declared window and is
 * handed off while its tool runs; the successor's first request is exactly the pause's replay (the
 * prior thinking and the settled result included) while a pre_turn summary of the sealed prefix runs
 * beside it; the provider overflows, the successor adopts the summary (a checkpoint covering
 * everything before its own opening), re-sends a 429-refused request byte for byte, completes, and
 * the session's latest main context is its own completion. Real SQLite file, scripted server on loopback.
 */
import { assert, describe, it } from "@effect/vitest"
import { Prompts } from "@maka/facts"
import { LanguageModel } from "@maka/model"
import { FactBuilders, OpenAiSse, Respond } from "@maka/testkit"
import { EventLog } from "@maka/event-log"
import { Ids, Tool, ToolCatalog } from "@maka/tools"
import * as Engine from "../src/Engine.ts"
import { Deferred, Effect, Fiber, Redacted, Schema, Stream } from "effect"
import {
  answer,
  contentText,
  echoCall,
  isSummaryRequest,
  mainEntry,
  overflow,
  summaryAnswer,
  summaryEntry,
  summaryText,
  usage,
  wire,
} from "./support/compaction.ts"
import { factsOf, kinds } from "./support/harness.ts"
import { echoTool, input, setup, type Effects } from "./support/setup.ts"

const THINKING = ["The user wants ", "the code kept."]
const WINDOW = { providerId: "openai-compatible", declaredWindow: 1_000 }

/** A `slow` tool that waits for `release`. */
const slowCatalog = (effects: Effects, release: Deferred.Deferred<void>) =>
  ToolCatalog.make([
    Tool.make({
      name: "slow",
      description: "Waits for a release.",
      input: Schema.Struct({ value: Schema.String }),
      semantics: "parallel",
      execute: ({ value }) =>
        Effect.map(Deferred.await(release), () => {
          effects.ran.push(value)
          return Tool.text(`slow: ${value}`)
        }),
    }),
  ])

describe("handoff reference scenario", () => {
  it.live("handoff preserves conversation replay and compacts before its physical anchor", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The summary is still running when the main request overflows: it is let through only then.
        const summaryHeld = Respond.gate()
        const context = yield* setup(
          {
            script: [
              // The prior run, on another route, thinks before it answers.
              mainEntry(Respond.sse(OpenAiSse.response({ reasoning: THINKING, text: ["The code is 4417."], usage: usage(40) }))),
              // The handed-off run's first step reaches the declared window and calls `slow`.
              mainEntry(
                Respond.sse(
                  OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "slow", arguments: ['{"value":"a"}'] }], usage: usage(5_000) }),
                ),
              ),
              // The successor's replay overflows; the summary of the sealed prefix runs beside it.
              mainEntry(overflow()),
              summaryEntry(Respond.hold(summaryHeld, summaryAnswer(summaryText("code 4417 kept")))),
              mainEntry(Respond.json(429, { error: { message: "slow down", type: "rate_limit" } }, { "retry-after-ms": "5" })),
              mainEntry(answer("Done.")),
            ],
          },
          undefined,
          { concurrency: 2 },
        )
        const effects: Effects = { ran: [] }

        // The prior run on another model (another route).
        const other = yield* LanguageModel.make({
          kind: "openai-compatible",
          baseUrl: `${context.server.url}/v1`,
          model: "other-model",
          apiKey: Redacted.make("sk-test-secret"),
        })
        assert.notStrictEqual(other.routeIdentity, context.model.routeIdentity)
        const prior = yield* context.engine.run(
          input(context, "Keep the code 4417.", ToolCatalog.make([]), {
            model: other,
            configuration: FactBuilders.configuration({ cwd: context.workspace, model: FactBuilders.modelBinding({ model: "other-model" }) }),
          }),
        )
        assert.deepStrictEqual(prior.outcome, { kind: "completed" })

        // The run on the main route, handed off while its tool runs.
        const release = yield* Deferred.make<void>()
        const catalog = slowCatalog(effects, release)
        const running = yield* context.engine.start(input(context, "Run slow on a.", catalog, { maxSteps: 6, context: WINDOW }))
        yield* Effect.promise(() => context.server.exchange(1))
        const requested = yield* Effect.forkChild(running.handoff)
        yield* Effect.sleep("20 millis")
        yield* Deferred.succeed(release, undefined)
        const pause = (yield* Fiber.join(requested))!
        assert.isDefined(pause)
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "handoff_paused", pause })
        assert.deepStrictEqual(pause.execution.context, WINDOW)
        assert.strictEqual(pause.execution.compaction, "available")
        assert.strictEqual(context.server.requests().length, 2)

        // The successor on the same route and catalog.
        const successor = yield* context.engine.resume({ paused: running.invocation, pause, model: context.model, tools: catalog })
        const releaser = yield* Effect.forkChild(
          Effect.gen(function* () {
            while (!context.server.exchanges().some((exchange) => exchange.status === 400)) yield* Effect.sleep("5 millis")
            assert.isFalse(context.server.exchanges().some((exchange) => isSummaryRequest(exchange.request)))
            summaryHeld.release()
          }),
        )
        const result = yield* successor.wait
        yield* Fiber.join(releaser)
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, ["a"])

        const requests = context.server.requests()
        const main = requests.filter((request) => !isSummaryRequest(request))
        const summaries = requests.filter(isSummaryRequest)
        assert.strictEqual(summaries.length, 1)
        assert.strictEqual(main.length, 5)
        const [, pausedFirst, replay, compacted, retried] = main

        // The replay: the paused run's first request, then its settled step; the prior thinking goes
        // to this OpenAI-compatible route as it went before the handoff.
        const pausedMessages = wire(pausedFirst!).messages
        const replayMessages = wire(replay!).messages
        assert.deepStrictEqual(replayMessages.slice(0, pausedMessages.length), pausedMessages)
        assert.deepStrictEqual(
          replayMessages.slice(pausedMessages.length).map((message) => message.role),
          ["assistant", "tool"],
        )
        assert.include(pausedFirst!.body, THINKING.join(""))
        assert.include(replay!.body, THINKING.join(""))
        assert.include(replay!.body, "slow: a")

        const events = yield* context.log.events("session-1")
        const own = events.filter((stored) => stored.event.invocation.invocationId === successor.invocation.invocationId)
        assert.deepStrictEqual(kinds(own), [
          "invocation_opened",
          "model_requested",
          "model_requested",
          "model_interrupted:failed",
          "model_completed",
          "context_checkpoint_recorded",
          "model_requested",
          "model_interrupted:retryable_failure",
          "model_requested",
          "model_completed",
          "invocation_ended:completed",
        ])
        const requested_ = factsOf(own, "model_requested")
        const mainRequests = requested_.filter((fact) => fact.purpose === "main")
        // The successor's first main request is exactly the pause's replay.
        assert.strictEqual(mainRequests[0]!.inputDigest, pause.execution.replay.digest)

        // The checkpoint covers the sealed prefix, up to the paused run's terminal, before the
        // successor's own opening (its physical anchor), as a pre_turn summary.
        const checkpoint = factsOf(own, "context_checkpoint_recorded")[0]!.checkpoint
        assert.deepStrictEqual(checkpoint.mode, { kind: "pre_turn" })
        const pausedTerminal = events.find(
          (stored) => stored.event.invocation.invocationId === running.invocation.invocationId && stored.event.fact.kind === "invocation_ended",
        )!
        assert.strictEqual(checkpoint.coveredThrough, pausedTerminal.sequence)
        assert.strictEqual(checkpoint.coveredThrough, own[0]!.sequence - 1)
        // The summary saw the prior conversation and the settled step.
        assert.include(summaries[0]!.body, "Keep the code 4417.")
        assert.include(summaries[0]!.body, "slow: a")

        // After adoption the main request starts from the summary: the covered history is gone.
        const after = wire(compacted!).messages
        // The handoff opening carries no message: the logical turn's request and its settled step live
        // on only in the summary, so the compacted prompt is the system prompt and the summary.
        assert.deepStrictEqual(after.map((message) => message.role), ["system", "user"])
        assert.notInclude(compacted!.body, "slow: a")
        assert.strictEqual(after[0]!.role, "system")
        assert.strictEqual(contentText(after[1]!.content), `${Prompts.CONTINUATION_SUMMARY_PREFIX}${summaryText("code 4417 kept")}`)
        assert.notInclude(compacted!.body, THINKING.join(""))
        assert.notInclude(compacted!.body, "Keep the code 4417.")
        // The 429 re-sent the frozen request byte for byte, under the same digest.
        assert.strictEqual(retried!.body, compacted!.body)
        assert.strictEqual(mainRequests[1]!.inputDigest, mainRequests[2]!.inputDigest)
        assert.notStrictEqual(mainRequests[1]!.inputDigest, pause.execution.replay.digest)

        // The session's latest main context is the successor's own completion.
        const latest = yield* context.log.latestMainContext("session-1")
        const finalCompletion = own.find(
          (stored) => stored.event.fact.kind === "model_completed" && stored.event.fact.stepId === mainRequests[2]!.stepId,
        )!
        assert.strictEqual(latest.kind, "selected")
        assert.strictEqual(latest.kind === "selected" ? latest.sequence : 0, finalCompletion.sequence)
        assert.deepStrictEqual(yield* context.log.pendingHandoffs(), [])
      }),
    ),
  )

  it.live("a successor in another engine keeps a mid_turn checkpoint's anchor: the opening is re-sent after the summary and the replay is unchanged", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          {
            script: [
              mainEntry(echoCall("call-1", "alpha", 5_000)),
              summaryEntry(summaryAnswer(summaryText("alpha echoed"))),
              mainEntry(Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-2", name: "slow", arguments: ['{"value":"a"}'] }] }))),
              mainEntry(answer("Done.")),
            ],
          },
          undefined,
          { concurrency: 1 },
        )
        const effects: Effects = { ran: [] }
        const release = yield* Deferred.make<void>()
        const catalog = ToolCatalog.make([echoTool(effects), ...slowCatalog(effects, release).tools])
        const running = yield* context.engine.start(input(context, "Echo alpha, then run slow.", catalog, { maxSteps: 6, context: WINDOW }))
        // The second step starts from a mid_turn checkpoint, then calls `slow`; the run is handed off meanwhile.
        yield* running.events.pipe(
          Stream.filter((stored) => stored.event.fact.kind === "tool_dispatched"),
          Stream.take(2),
          Stream.runDrain,
        )
        const requested = yield* Effect.forkChild(running.handoff)
        yield* Effect.sleep("20 millis")
        yield* Deferred.succeed(release, undefined)
        const pause = (yield* Fiber.join(requested))!
        assert.isDefined(pause)
        const paused = yield* context.log.events("session-1")
        const checkpoint = factsOf(paused, "context_checkpoint_recorded")[0]!.checkpoint
        assert.deepStrictEqual(checkpoint.mode, { kind: "mid_turn", anchorEventId: paused[0]!.event.id })

        // Another engine on the same log, with nothing kept from the paused run, resumes it.
        const other = yield* Engine.make({ backoffBaseMs: 5, backoffMaxMs: 40 }).pipe(
          Effect.provideService(EventLog.EventLog, context.log),
          Effect.provide(Ids.layer),
        )
        const successor = yield* other.resume({ paused: running.invocation, pause, model: context.model, tools: catalog })
        assert.deepStrictEqual((yield* successor.wait).outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, ["alpha", "a"])
        const own = (yield* context.log.events("session-1")).filter(
          (stored) => stored.event.invocation.invocationId === successor.invocation.invocationId,
        )
        assert.strictEqual(factsOf(own, "model_requested")[0]!.inputDigest, pause.execution.replay.digest)
        const replay = wire(context.server.requests()[3]!).messages
        assert.deepStrictEqual(
          replay.map((message) => message.role),
          ["system", "user", "user", "assistant", "tool"],
        )
        assert.strictEqual(contentText(replay[1]!.content), `${Prompts.CONTINUATION_SUMMARY_PREFIX}${summaryText("alpha echoed")}`)
        assert.strictEqual(contentText(replay[2]!.content), "Echo alpha, then run slow.")
        assert.strictEqual(contentText(replay[4]!.content), "slow: a")
      }),
    ),
  )

  it.live("a successor in another engine sends the pause's replay first, even when the paused step's large result was left unpruned", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const never = Respond.gate()
        const context = yield* setup({
          script: [
            mainEntry(answer("Noted.", 5_000)),
            summaryEntry(Respond.hold(never, summaryAnswer(summaryText("never adopted")))),
            mainEntry(Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "big", arguments: ['{"value":"a"}'] }] }))),
            mainEntry(answer("Done.")),
          ],
        })
        const release = yield* Deferred.make<void>()
        const big = ToolCatalog.make([
          Tool.make({
            name: "big",
            description: "Returns a large result once released.",
            input: Schema.Struct({ value: Schema.String }),
            semantics: "parallel",
            execute: ({ value }) => Effect.as(Deferred.await(release), Tool.text(`${value}:${"x".repeat(20_000)}`)),
          }),
        ])
        yield* context.engine.run(input(context, "Note this.", ToolCatalog.make([]), { context: WINDOW }))
        // A summary runs beside the step that calls `big`, so its large result is not pruned after the batch.
        const running = yield* context.engine.start(input(context, "Call big.", big, { maxSteps: 4, context: WINDOW }))
        yield* running.events.pipe(
          Stream.filter((stored) => stored.event.fact.kind === "tool_dispatched"),
          Stream.take(1),
          Stream.runDrain,
        )
        const requested = yield* Effect.forkChild(running.handoff)
        yield* Effect.sleep("20 millis")
        yield* Deferred.succeed(release, undefined)
        const pause = (yield* Fiber.join(requested))!
        assert.isDefined(pause)
        // Another engine on the same log (no context kept from the paused run) resumes it.
        const other = yield* Engine.make({ backoffBaseMs: 5, backoffMaxMs: 40 }).pipe(
          Effect.provideService(EventLog.EventLog, context.log),
          Effect.provide(Ids.layer),
        )
        const successor = yield* other.resume({ paused: running.invocation, pause, model: context.model, tools: big })
        assert.deepStrictEqual((yield* successor.wait).outcome, { kind: "completed" })
        const own = (yield* context.log.events("session-1")).filter(
          (stored) => stored.event.invocation.invocationId === successor.invocation.invocationId,
        )
        assert.strictEqual(factsOf(own, "model_requested")[0]!.inputDigest, pause.execution.replay.digest)
      }),
    ),
  )
})
