/**
 * What the handoff preflight reads and archives (docs/engine.md §5.10, docs/engine.md §5.11): a
 * run under the prior-unknown policy never pauses (the handoff resolves `undefined` and the run goes
 * on); a preflight with nothing owed neither prunes nor reads the context again; one that owes the
 * prune of a result settled while a summary was pending archives it, reads the context again once
 * (the model read, not the manual one), and leaves its successor nothing to prune. Real SQLite
 * files, the scripted server on loopback; the log is wrapped to count its reads.
 */
import { assert, describe, it } from "@effect/vitest"
import type { EventLog } from "@maka/event-log"
import { OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Deferred, Effect, Fiber, Schema } from "effect"
import type * as Engine from "../src/Engine.ts"
import { answer, isSummaryRequest, mainEntry, summaryAnswer, summaryEntry, summaryText } from "./support/compaction.ts"
import { factsOf, kinds } from "./support/harness.ts"
import { countingLog } from "./support/reads.ts"
import { input, setup } from "./support/setup.ts"

/** A tool that signals `started`, waits for `release`, then returns `text`. */
const waitingTool = (name: string, text: string, started: Deferred.Deferred<void>, release: Deferred.Deferred<void>) =>
  Tool.make({
    name,
    description: "Waits until released.",
    input: Schema.Struct({ value: Schema.String }),
    semantics: "parallel",
    execute: () => Effect.andThen(Deferred.succeed(started, undefined), Effect.as(Deferred.await(release), Tool.text(text))),
  })

/** A tool whose every call ends with its outcome unknown. */
const unsureTool = Tool.make({
  name: "unsure",
  description: "Cannot tell whether it acted.",
  input: Schema.Struct({ value: Schema.String }),
  semantics: "parallel",
  execute: () => Effect.fail(new Tool.ToolOutcomeUnknown({ message: "the remote side went silent" })),
})

const call = (id: string, name: string) =>
  mainEntry(Respond.sse(OpenAiSse.response({ toolCalls: [{ id, name, arguments: ['{"value":"v"}'] }] })))

const windowed = { context: { providerId: "openai-compatible", declaredWindow: 1_000 } }

/** Requests a handoff of `running` while its tool waits, then releases the tool; returns the pause. */
const handoffWhileToolWaits = (
  running: Engine.RunningInvocation,
  started: Deferred.Deferred<void>,
  release: Deferred.Deferred<void>,
) =>
  Effect.gen(function* () {
    yield* Deferred.await(started)
    const requested = yield* Effect.forkChild(running.handoff)
    yield* Effect.sleep("20 millis")
    yield* Deferred.succeed(release, undefined)
    return yield* Fiber.join(requested)
  })

describe("the handoff boundary under the prior-unknown policy", () => {
  it.live("never pauses: the handoff resolves undefined and the run answers", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // Each batch the engine commits, by its facts' kinds, and each dry run of a pause.
        const batches: Array<ReadonlyArray<string>> = []
        let checks = 0
        const context = yield* setup({ script: [call("call-u", "unsure"), call("call-w", "wait"), mainEntry(answer("Done."))] }, undefined, {}, {
          wrapLog: (log): EventLog.EventLogShape => ({
            ...log,
            appendBatch: (writes, complete) => {
              batches.push([...writes.map((write) => write.event.fact.kind), ...(complete === undefined ? [] : ["model_requested"])])
              return log.appendBatch(writes, complete)
            },
            checkHandoff: (invocation, pause) => {
              checks++
              return log.checkHandoff(invocation, pause)
            },
          }),
        })
        const started = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const tools = ToolCatalog.make([unsureTool, waitingTool("wait", "waited", started, release)])
        const first = yield* context.engine.run(input(context, "Try it.", tools))
        assert.strictEqual(first.outcome.kind === "failed" ? first.outcome.class : first.outcome.kind, "outcome_unknown")
        const running = yield* context.engine.start(input(context, "Go on.", tools, { allowPriorUnknown: true, maxSteps: 4 }))
        const pause = yield* handoffWhileToolWaits(running, started, release)
        assert.isUndefined(pause)
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "completed" })
        assert.strictEqual(context.server.requests().length, 3)
        assert.deepStrictEqual(yield* context.log.pendingHandoffs(), [])
        // No preflight ran: the call's settlement rode the next request, and no pause was dry-run.
        assert.deepStrictEqual(
          batches.filter((kinds) => kinds.includes("tool_settled")),
          [["tool_settled", "model_requested"]],
        )
        assert.strictEqual(checks, 0)
      }),
    ))
})

describe("the handoff preflight's reads", () => {
  it.live("with no prune owed and a context still current, neither prunes nor reads the context again", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const reads = countingLog()
        const context = yield* setup({ script: [call("call-w", "wait")] }, undefined, {}, { wrapLog: reads.wrap })
        const started = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const tools = ToolCatalog.make([waitingTool("wait", "waited", started, release)])
        const running = yield* context.engine.start(input(context, "Wait.", tools, { maxSteps: 4 }))
        const pause = yield* handoffWhileToolWaits(running, started, release)
        assert.isDefined(pause)
        assert.strictEqual(kinds(yield* context.log.events("session-1")).at(-1), "invocation_ended:handoff_paused")
        assert.deepStrictEqual(reads.counts, { model: 1, manual: 0, compaction: 0, prune: 0 })
      }),
    ))

  it.live("archives a result owed while a summary was pending, reads the context again once, and leaves the successor nothing to prune", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const reads = countingLog()
        const gate = Respond.gate()
        const context = yield* setup(
          {
            script: [
              mainEntry(answer("Noted.", 5_000)),
              summaryEntry(Respond.hold(gate, summaryAnswer(summaryText("never adopted")))),
              call("call-b", "big"),
              mainEntry(answer("Read it.")),
            ],
          },
          undefined,
          {},
          { wrapLog: reads.wrap },
        )
        const started = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const tools = ToolCatalog.make([waitingTool("big", `START ${"r".repeat(30_000)} END`, started, release)])
        yield* context.engine.run(input(context, "Note this.", tools, windowed))
        assert.deepStrictEqual(reads.counts, { model: 1, manual: 0, compaction: 0, prune: 0 })
        // The due summary is held in the background while the step's call settles a result of several pages.
        const running = yield* context.engine.start(input(context, "Go on.", tools, { maxSteps: 4, ...windowed }))
        const pause = yield* handoffWhileToolWaits(running, started, release)
        assert.isDefined(pause)
        const own = (yield* context.log.events("session-1")).filter(
          (stored) => stored.event.invocation.invocationId === running.invocation.invocationId,
        )
        assert.strictEqual(factsOf(own, "tool_result_archived").length, 1)
        assert.deepStrictEqual(factsOf(own, "context_checkpoint_recorded"), [])
        assert.strictEqual(kinds(own).at(-1), "invocation_ended:handoff_paused")
        // The archive made the context stale: it was read again once, by the model read.
        assert.deepStrictEqual(reads.counts, { model: 2, manual: 0, compaction: 0, prune: 1 })

        const successor = yield* context.engine.resume({ paused: running.invocation, pause: pause!, model: context.model, tools })
        assert.deepStrictEqual((yield* successor.wait).outcome, { kind: "completed" })
        assert.strictEqual(reads.counts.prune, 1, "the successor's opening owes no prune")
        const ownSuccessor = (yield* context.log.events("session-1")).filter(
          (stored) => stored.event.invocation.invocationId === successor.invocation.invocationId,
        )
        assert.strictEqual(factsOf(ownSuccessor, "model_requested")[0]!.inputDigest, pause!.execution.replay.digest)
        assert.deepStrictEqual(context.server.requests().map(isSummaryRequest).filter((summary) => summary), [true])
        gate.release()
      }),
    ))
})
