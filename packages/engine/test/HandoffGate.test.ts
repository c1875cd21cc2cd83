/**
 * The handoff gate through the engine's API (docs/engine.md §5.10, SEMANTICS scenario 61): a failed
 * preflight returns the gate to `running` and the run goes on; cancellation before the commit seals
 * no pause; a run that ends first resolves its handoff with nothing; a reservation while one is
 * pending, or after the seal or the end, is `Busy`; a successor keeps the logical Run's root and can
 * be handed off again; handing off every live run pauses those it can and cancels the others; the
 * Promise facade resolves `null` where the engine resolves nothing. Real SQLite files and the scripted
 * server on loopback.
 */
import { assert, describe, it } from "@effect/vitest"
import { EventLogError } from "@maka/event-log"
import { FactBuilders, History, OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Deferred, Effect, Exit, Fiber, Option, Schema, Stream } from "effect"
import * as LogTesting from "@maka/event-log/testing"
import * as fs from "node:fs"
import * as path from "node:path"
import type { Lineage } from "@maka/facts"
import * as Agent from "../src/Agent.ts"
import type * as EngineError from "../src/EngineError.ts"
import type * as Engine from "../src/Engine.ts"
import * as Handoff from "../src/internal/handoff.ts"
import { createEngine } from "../src/Facade.ts"
import { answer, echoCall, isSummaryRequest, mainEntry, stalledSummary, summaryAnswer, summaryEntry, summaryText } from "./support/compaction.ts"
import { factsOf, kinds } from "./support/harness.ts"

/** A value as a host without types may pass it. */
const untyped = <A>(value: unknown): A => value as A
import { echoTool, input, setup, type Effects, type Setup } from "./support/setup.ts"

/** `echo`, plus `slow`, which waits (uninterruptibly) until the test opens the release it is handed. */
const tools = (effects: Effects, releases: Array<Deferred.Deferred<void>>) =>
  ToolCatalog.make([
    echoTool(effects),
    Tool.make({
      name: "slow",
      description: "Waits for a release.",
      input: Schema.Struct({ value: Schema.String }),
      semantics: "parallel",
      execute: ({ value }) =>
        Effect.gen(function* () {
          const release = releases.shift()
          // A dispatched effect finishes even when the run is cancelled meanwhile.
          if (release !== undefined) yield* Effect.uninterruptible(Deferred.await(release))
          effects.ran.push(`slow:${value}`)
          return Tool.text(`slow: ${value}`)
        }),
    }),
  ])

/** A tool's definition but its name, for catalogs that differ from a pause's. */
const extraDefinition = {
  description: "Another tool.",
  input: Schema.Struct({ value: Schema.String }),
  semantics: "parallel" as const,
  execute: () => Effect.succeed(Tool.text("extra")),
}

const slowCall = (id: string, value: string) =>
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id, name: "slow", arguments: [JSON.stringify({ value })] }] }))

/** How many `handoff_paused` terminals the session holds. */
const pauses = (context: Setup) =>
  Effect.map(context.log.events("session-1"), (events) => kinds(events).filter((kind) => kind === "invocation_ended:handoff_paused").length)

/** Waits until the run has dispatched its `n`-th call (its effect is running). */
const dispatched = (running: Engine.RunningInvocation, n = 1) =>
  running.events.pipe(
    Stream.filter((stored) => stored.event.fact.kind === "tool_dispatched"),
    Stream.take(n),
    Stream.runDrain,
  )

/** Requests a handoff and gives the reservation time to land before the caller goes on. */
const requestHandoff = (running: Engine.RunningInvocation) =>
  Effect.gen(function* () {
    const fiber = yield* Effect.forkChild(running.handoff)
    yield* Effect.sleep("20 millis")
    return fiber
  })

/** A run whose first step calls the slow tool (held at `release`), with a handoff requested while it runs. */
const slowRunHandingOff = Effect.gen(function* () {
  const context = yield* setup({ script: [mainEntry(slowCall("call-1", "a"))] })
  const effects: Effects = { ran: [] }
  const release = yield* Deferred.make<void>()
  const running = yield* context.engine.start(input(context, "Run slow.", tools(effects, [release]), { maxSteps: 4 }))
  yield* Effect.promise(() => context.server.exchange(0))
  const requested = yield* requestHandoff(running)
  return { context, effects, release, running, requested }
})

/**
 * A run through the Promise facade (its own log and workspace) whose first step calls the slow tool,
 * held at `release`, its first request answered when it is returned; `answerText` is the next reply.
 */
const slowFacadeRun = (answerText: string) =>
  Effect.gen(function* () {
    const server = yield* ScriptedServer.make({ script: [slowCall("call-1", "a"), answer(answerText)] })
    const directory = yield* LogTesting.temporaryDirectory
    const workspace = path.join(directory, "workspace")
    fs.mkdirSync(workspace)
    const engine = yield* Effect.promise(() => createEngine({ database: path.join(directory, "events.sqlite") }))
    const effects: Effects = { ran: [] }
    const release = yield* Deferred.make<void>()
    const provider = { kind: "openai-compatible" as const, baseUrl: `${server.url}/v1`, model: "test-model", apiKey: "sk-facade" }
    const run = yield* Effect.promise(() =>
      engine.start({ sessionId: "session-1", provider, workspace, tools: [...tools(effects, [release]).tools], maxSteps: 4, message: "Run slow." }),
    )
    yield* Effect.promise(() => server.exchange(0))
    return { directory, provider, engine, run, effects, release }
  })

describe("the handoff gate", () => {
  it.live("a failed preflight (a run under allowPriorUnknown) resolves the handoff undefined; the gate is running again and the run goes on", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [mainEntry(slowCall("call-1", "a")), mainEntry(slowCall("call-2", "b")), mainEntry(answer("Done."))],
        })
        // An earlier run left an effect whose outcome is unknown.
        const history = new History.History()
        const crashed = history.open({ turnId: "crashed-turn", runId: "crashed-run", invocationId: "crashed-invocation" })
        const step = crashed.request()
        crashed.complete(step, FactBuilders.toolCallStep([{ id: "call-0", name: "echo", input: { value: "zero" } }]))
        crashed.dispatch(step, "call-0")
        yield* context.log.appendBatch(history.writes)
        const report = yield* context.engine.recover
        assert.deepStrictEqual(report.sealed.map((item) => item.failureClass), ["outcome_unknown"])

        const effects: Effects = { ran: [] }
        const first = yield* Deferred.make<void>()
        const second = yield* Deferred.make<void>()
        const running = yield* context.engine.start(
          input(context, "Run slow twice.", tools(effects, [first, second]), { allowPriorUnknown: true, maxSteps: 5 }),
        )
        yield* Effect.promise(() => context.server.exchange(0))
        const requested = yield* requestHandoff(running)
        yield* Deferred.succeed(first, undefined)
        assert.isUndefined(yield* Fiber.join(requested))
        // Back to `running`: a new reservation is accepted (not `Busy`), and fails its preflight the same way.
        yield* Effect.promise(() => context.server.exchange(1))
        const again = yield* requestHandoff(running)
        yield* Deferred.succeed(second, undefined)
        assert.isUndefined(yield* Fiber.join(again))
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, ["slow:a", "slow:b"])
        assert.strictEqual(context.server.requests().length, 3)
        assert.strictEqual(yield* pauses(context), 0)
        assert.deepStrictEqual(yield* context.log.pendingHandoffs(), [])
      }),
    ),
  )

  it.live("cancellation before the commit seals no pause: the handoff resolves undefined and the run ends cancelled", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(slowCall("call-1", "a")), mainEntry(answer("Free."))] })
        const effects: Effects = { ran: [] }
        const release = yield* Deferred.make<void>()
        const catalog = tools(effects, [release])
        const running = yield* context.engine.start(input(context, "Run slow.", catalog, { maxSteps: 4 }))
        yield* dispatched(running)
        const requested = yield* requestHandoff(running)
        yield* running.cancel
        yield* Deferred.succeed(release, undefined)
        assert.isUndefined(yield* Fiber.join(requested))
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        // The dispatched effect finished and settled; no request followed; nothing reserves the session.
        assert.deepStrictEqual(effects.ran, ["slow:a"])
        assert.strictEqual(context.server.requests().length, 1)
        assert.strictEqual(yield* pauses(context), 0)
        assert.deepStrictEqual(yield* context.log.pendingHandoffs(), [])
        const next = yield* context.engine.run(input(context, "Next.", ToolCatalog.make([])))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
      }),
    ),
  )

  it.live("a run that ends first resolves the handoff undefined, and its closed gate refuses a new reservation (Busy)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const held = Respond.gate()
        const context = yield* setup({ script: [mainEntry(Respond.hold(held, answer("Done.")))] })
        const running = yield* context.engine.start(input(context, "Answer.", tools({ ran: [] }, [])))
        yield* Effect.promise(() => context.server.request(0))
        const requested = yield* requestHandoff(running)
        held.release()
        assert.isUndefined(yield* Fiber.join(requested))
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const late = yield* Effect.flip(running.handoff)
        assert.strictEqual(late.reason._tag, "Busy")
        assert.strictEqual(yield* pauses(context), 0)
        assert.deepStrictEqual(kinds(yield* context.log.events("session-1")).slice(-1), ["invocation_ended:completed"])
      }),
    ),
  )

  it.live("handing off every live run reports a run that completed on its own first as ended, with its terminal", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const held = Respond.gate()
        const context = yield* setup({ script: [mainEntry(Respond.hold(held, answer("Done.")))] })
        const running = yield* context.engine.start(input(context, "Answer.", tools({ ran: [] }, [])))
        yield* Effect.promise(() => context.server.request(0))
        const closing = yield* Effect.forkChild(context.engine.handOffAll)
        yield* Effect.sleep("20 millis")
        held.release()
        const closed = yield* Fiber.join(closing)
        assert.deepStrictEqual(closed, [{ invocation: running.invocation, outcome: "ended", terminal: { kind: "completed" } }])
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "completed" })
        assert.strictEqual(yield* pauses(context), 0)
      }),
    ),
  )

  it.live("handing off every live run asks again for a run whose earlier request its caller dropped: the run pauses", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { context, effects, release, running, requested } = yield* slowRunHandingOff
        // The host's shutdown joins that request; then its caller stops waiting, which drops it.
        const closing = yield* Effect.forkChild(context.engine.handOffAll)
        yield* Effect.sleep("20 millis")
        yield* Fiber.interrupt(requested)
        yield* Deferred.succeed(release, undefined)
        const closed = yield* Fiber.join(closing)
        assert.deepStrictEqual(closed.map((item) => item.outcome), ["paused"])
        assert.strictEqual((yield* running.wait).outcome.kind, "handoff_paused")
        assert.strictEqual(yield* pauses(context), 1)
        assert.deepStrictEqual(effects.ran, ["slow:a"])
      }),
    ),
  )

  it.live("a second reservation while one is pending is Busy, and so is one after the seal", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { context, effects, release, running, requested } = yield* slowRunHandingOff
        const second = yield* Effect.flip(running.handoff)
        assert.strictEqual(second.reason._tag, "Busy")
        yield* Deferred.succeed(release, undefined)
        const pause = yield* Fiber.join(requested)
        assert.isDefined(pause)
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "handoff_paused", pause: pause! })
        const afterSeal = yield* Effect.flip(running.handoff)
        assert.strictEqual(afterSeal.reason._tag, "Busy")
        // Exactly one pause, the first reservation's.
        assert.strictEqual(yield* pauses(context), 1)
        const pending = yield* context.log.pendingHandoffs()
        assert.strictEqual(pending.length, 1)
        assert.strictEqual(pending[0]!.pause.intent.handoffId, pause!.intent.handoffId)
      }),
    ),
  )

  it.live("a successor keeps the logical Run's root, can be handed off again with fewer steps, and each effect runs once", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            mainEntry(slowCall("call-1", "a")),
            mainEntry(slowCall("call-2", "b")),
            mainEntry(echoCall("call-3", "c")),
            mainEntry(answer("Done.")),
          ],
        })
        const effects: Effects = { ran: [] }
        const first = yield* Deferred.make<void>()
        const second = yield* Deferred.make<void>()
        const catalog = tools(effects, [first, second])
        const running = yield* context.engine.start(input(context, "Run slow twice, then echo.", catalog, { maxSteps: 8 }))
        yield* Effect.promise(() => context.server.exchange(0))
        const requested = yield* requestHandoff(running)
        yield* Deferred.succeed(first, undefined)
        const pause = (yield* Fiber.join(requested))!
        assert.strictEqual(pause.remainingSteps, 7)
        const successor = yield* context.engine.resume({ paused: running.invocation, pause, model: context.model, tools: catalog })
        yield* Effect.promise(() => context.server.exchange(1))
        const again = yield* requestHandoff(successor)
        yield* Deferred.succeed(second, undefined)
        const repause = (yield* Fiber.join(again))!
        assert.strictEqual(repause.intent.rootRunId, running.invocation.runId)
        assert.strictEqual(repause.remainingSteps, 6)
        assert.isAtMost(repause.remainingSteps, pause.remainingSteps)
        const third = yield* context.engine.resume({ paused: successor.invocation, pause: repause, model: context.model, tools: catalog })
        assert.strictEqual(third.invocation.turnId, running.invocation.turnId)
        assert.deepStrictEqual((yield* third.wait).outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, ["slow:a", "slow:b", "c"])
        const events = yield* context.log.events("session-1")
        const openings = factsOf(events, "invocation_opened").map((fact) => fact.input.kind)
        assert.deepStrictEqual(openings, ["message", "handoff", "handoff"])
        assert.strictEqual(yield* pauses(context), 2)
        assert.deepStrictEqual(yield* context.log.pendingHandoffs(), [])
      }),
    ),
  )

  it.live("steering queued with a handoff is committed before the pause and replayed once by the successor", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(slowCall("call-1", "a")), mainEntry(answer("Done."))] })
        const effects: Effects = { ran: [] }
        const release = yield* Deferred.make<void>()
        const catalog = tools(effects, [release])
        const running = yield* context.engine.start(input(context, "Run slow.", catalog, { maxSteps: 4 }))
        yield* Effect.promise(() => context.server.exchange(0))
        yield* running.steer("Also mind the tests.")
        const requested = yield* requestHandoff(running)
        yield* Deferred.succeed(release, undefined)
        const pause = (yield* Fiber.join(requested))!
        assert.isDefined(pause)
        const paused = (yield* context.log.events("session-1")).filter(
          (stored) => stored.event.invocation.invocationId === running.invocation.invocationId,
        )
        assert.deepStrictEqual(kinds(paused).slice(-3), ["tool_settled:succeeded", "message_steered", "invocation_ended:handoff_paused"])
        const successor = yield* context.engine.resume({ paused: running.invocation, pause, model: context.model, tools: catalog })
        assert.deepStrictEqual((yield* successor.wait).outcome, { kind: "completed" })
        const replay = context.server.requests()[1]!.body
        assert.strictEqual(replay.split("Also mind the tests.").length - 1, 1)
        assert.strictEqual(factsOf(yield* context.log.events("session-1"), "message_steered").length, 1)
        assert.deepStrictEqual(effects.ran, ["slow:a"])
      }),
    ),
  )

  it.live("a handoff drains a background summary still running: no checkpoint, its text never shown, its request interrupted, the pause carries the budget its accepted step renewed (scenario 42)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            mainEntry(answer("Noted.", 5_000)),
            stalledSummary("SECRET-SUMMARY-TEXT"),
            mainEntry(slowCall("call-1", "a")),
            mainEntry(answer("Done.")),
          ],
        })
        const windowed = { context: { providerId: "openai-compatible", declaredWindow: 1_000 } }
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "Note this.", ToolCatalog.make([]), windowed))
        const release = yield* Deferred.make<void>()
        const catalog = tools(effects, [release])
        const running = yield* context.engine.start(input(context, "Run slow.", catalog, { maxSteps: 4, ...windowed }))
        const shown = yield* Effect.forkChild(Stream.runCollect(running.events))
        // The summary runs beside the main request, which calls `slow`; its text is durable (observed).
        yield* Effect.promise(() => context.server.request(2))
        for (;;) {
          const observed = factsOf(yield* context.log.events("session-1"), "model_observed")
          if (observed.some((fact) => JSON.stringify(fact).includes("SECRET-SUMMARY-TEXT"))) break
          yield* Effect.sleep("5 millis")
        }
        assert.isTrue(context.server.requests().slice(1, 3).some(isSummaryRequest))
        const mainIndex = context.server.requests().findIndex((request, index) => index > 0 && !isSummaryRequest(request))
        yield* Effect.promise(() => context.server.exchange(mainIndex))
        const requested = yield* requestHandoff(running)
        yield* Deferred.succeed(release, undefined)
        const pause = (yield* Fiber.join(requested))!
        assert.isDefined(pause)
        // The proactive attempt spent the budget, and the main step accepted beside it renewed it.
        assert.strictEqual(pause.execution.compaction, "available")
        const events = yield* context.log.events("session-1")
        const own = events.filter((stored) => stored.event.invocation.invocationId === running.invocation.invocationId)
        const summaryStep = factsOf(own, "model_requested").find((fact) => fact.purpose === "summary")!
        assert.deepStrictEqual(
          factsOf(own, "model_interrupted").filter((fact) => fact.stepId === summaryStep.stepId).map((fact) => fact.status),
          ["cancelled"],
        )
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded"), [])
        assert.deepStrictEqual(yield* context.log.unfinishedInvocations(100), [])
        const text = yield* Stream.runCollect(Agent.text(Stream.fromIterable(yield* Fiber.join(shown))))
        assert.notInclude(text.join(""), "SECRET-SUMMARY-TEXT")
        // The last main usage is under the window now: the successor sends the replay without another summary.
        const successor = yield* context.engine.resume({ paused: running.invocation, pause, model: context.model, tools: catalog })
        assert.deepStrictEqual((yield* successor.wait).outcome, { kind: "completed" })
        assert.strictEqual(context.server.requests().filter(isSummaryRequest).length, 1)
        const ownSuccessor = (yield* context.log.events("session-1")).filter(
          (stored) => stored.event.invocation.invocationId === successor.invocation.invocationId,
        )
        assert.strictEqual(factsOf(ownSuccessor, "model_requested")[0]!.inputDigest, pause.execution.replay.digest)
        assert.deepStrictEqual(effects.ran, ["slow:a"])
      }),
    ),
  )

  it.live("handing off every live run pauses each that can be paused and cancels one whose preflight fails", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            ScriptedServer.whenBodyIncludes("Run X.", slowCall("call-x", "x")),
            ScriptedServer.whenBodyIncludes("Run Y.", slowCall("call-y", "y")),
            ScriptedServer.whenBodyIncludes("Run Y.", Respond.hang()),
          ],
        })
        // Session 2 holds an effect whose outcome is unknown: its run goes on under allowPriorUnknown.
        const history = new History.History({ sessionId: "session-2" })
        const crashed = history.open({ turnId: "crashed-turn", runId: "crashed-run", invocationId: "crashed-invocation" })
        const step = crashed.request()
        crashed.complete(step, FactBuilders.toolCallStep([{ id: "call-0", name: "echo", input: { value: "zero" } }]))
        crashed.dispatch(step, "call-0")
        yield* context.log.appendBatch(history.writes)
        yield* context.engine.recover
        const effects: Effects = { ran: [] }
        const releaseX = yield* Deferred.make<void>()
        const releaseY = yield* Deferred.make<void>()
        const x = yield* context.engine.start(input(context, "Run X.", tools(effects, [releaseX]), { maxSteps: 4 }))
        const y = yield* context.engine.start(
          input(context, "Run Y.", tools(effects, [releaseY]), {
            maxSteps: 4,
            allowPriorUnknown: true,
            invocation: FactBuilders.invocation({ sessionId: "session-2", turnId: "turn-y", runId: "run-y", invocationId: "invocation-y" }),
          }),
        )
        yield* dispatched(x)
        yield* dispatched(y)
        const closing = yield* Effect.forkChild(context.engine.handOffAll)
        yield* Effect.sleep("20 millis")
        yield* Deferred.succeed(releaseX, undefined)
        yield* Deferred.succeed(releaseY, undefined)
        const closed = yield* Fiber.join(closing)
        const byInvocation = new Map(closed.map((item) => [item.invocation.invocationId, item]))
        assert.strictEqual(closed.length, 2)
        assert.strictEqual(byInvocation.get(x.invocation.invocationId)?.outcome, "paused")
        assert.strictEqual(byInvocation.get(y.invocation.invocationId)?.outcome, "cancelled")
        const pause = byInvocation.get(x.invocation.invocationId)!.pause!
        assert.deepStrictEqual((yield* x.wait).outcome, { kind: "handoff_paused", pause })
        assert.deepStrictEqual((yield* y.wait).outcome, { kind: "cancelled", source: "runtime_cancellation" })
        assert.deepStrictEqual(effects.ran, ["slow:x", "slow:y"])
        const pending = yield* context.log.pendingHandoffs()
        assert.deepStrictEqual(pending.map((item) => item.sessionId), ["session-1"])
        assert.deepStrictEqual(context.engine.liveInvocations(), [])
      }),
    ),
  )

  it.live("a store dry run that refuses the pause is a failed preflight: no pause is sealed and the run goes on to complete", () =>
    Effect.scoped(
      Effect.gen(function* () {
        let refusals = 0
        const context = yield* setup(
          { script: [mainEntry(slowCall("call-1", "a")), mainEntry(answer("Done."))] },
          undefined,
          {},
          {
            wrapLog: (log) => ({
              ...log,
              checkHandoff: () => Effect.sync(() => void refusals++).pipe(Effect.andThen(Effect.fail(EventLogError.invalidTransition("refused by the test")))),
            }),
          },
        )
        const effects: Effects = { ran: [] }
        const release = yield* Deferred.make<void>()
        const running = yield* context.engine.start(input(context, "Run slow.", tools(effects, [release]), { maxSteps: 4 }))
        yield* dispatched(running)
        const requested = yield* requestHandoff(running)
        yield* Deferred.succeed(release, undefined)
        assert.isUndefined(yield* Fiber.join(requested))
        assert.strictEqual(refusals, 1)
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "completed" })
        assert.strictEqual(context.server.requests().length, 2)
        assert.strictEqual(yield* pauses(context), 0)
        assert.deepStrictEqual(effects.ran, ["slow:a"])
      }),
    ),
  )

  it.live("through the Promise facade, run.handoff() resolves null when the run ends first and the sealed pause otherwise", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const held = Respond.gate()
        const server = yield* ScriptedServer.make({
          script: [Respond.hold(held, answer("Done.")), slowCall("call-1", "a"), answer("Resumed.")],
        })
        const directory = yield* LogTesting.temporaryDirectory
        const workspace = path.join(directory, "workspace")
        fs.mkdirSync(workspace)
        const engine = yield* Effect.acquireRelease(
          Effect.promise(() => createEngine({ database: path.join(directory, "events.sqlite"), engineOptions: { backoffBaseMs: 5, backoffMaxMs: 40 } })),
          (opened) => Effect.promise(() => opened.close()),
        )
        const effects: Effects = { ran: [] }
        const release = yield* Deferred.make<void>()
        const slow = [...tools(effects, [release]).tools]
        const provider = { kind: "openai-compatible" as const, baseUrl: `${server.url}/v1`, model: "test-model", apiKey: "sk-facade" }
        const options = { sessionId: "session-1", provider, workspace, tools: slow, maxSteps: 4 }

        const first = yield* Effect.promise(() => engine.start({ ...options, message: "Answer." }))
        yield* Effect.promise(() => server.request(0))
        const ended = first.handoff()
        yield* Effect.sleep("20 millis")
        held.release()
        assert.isNull(yield* Effect.promise(() => ended))
        assert.deepStrictEqual((yield* Effect.promise(() => first.wait())).outcome, { kind: "completed" })
        // Asked again once the run has ended, the facade resolves null too (the engine's gate is closed: Busy).
        assert.isNull(yield* Effect.promise(() => first.handoff()))

        const second = yield* Effect.promise(() => engine.start({ ...options, message: "Run slow." }))
        yield* Effect.promise(() => server.exchange(1))
        const requested = second.handoff()
        // A second call while the first is pending (a shutdown handler firing twice) shares it.
        const again = second.handoff()
        yield* Effect.sleep("20 millis")
        yield* Deferred.succeed(release, undefined)
        const pause = yield* Effect.promise(() => requested)
        assert.isNotNull(pause)
        assert.strictEqual(yield* Effect.promise(() => again), pause)
        assert.deepStrictEqual((yield* Effect.promise(() => second.wait())).outcome, { kind: "handoff_paused", pause: pause! })
        assert.isNull(yield* Effect.promise(() => second.handoff()))
        type Resolvers = Parameters<typeof engine.resumePending>[0]
        // A resolver that throws, or hands over tools no catalog takes, skips the pause with what it
        // said (no Internal failure): the pause stays pending for the next call.
        const skipped = yield* Effect.forEach(
          [
            { provider: () => { throw new Error("no such route here") }, tools: () => slow },
            { provider: () => provider, tools: () => { throw "catalog store offline" } },
            { provider: () => provider, tools: () => [...slow, ...slow] },
            // A misspelt key would resume the run sending no API key at all.
            { provider: () => ({ ...provider, apikey: "sk-facade" }), tools: () => slow },
            // What a resolver returns that no pause can use: a Promise, a null; an Error whose message is a Symbol.
            { provider: untyped<Resolvers["provider"]>(() => Promise.resolve(provider)), tools: () => slow },
            { provider: untyped<Resolvers["provider"]>(() => null), tools: () => slow },
            { provider: () => provider, tools: untyped<Resolvers["tools"]>(() => Promise.resolve(slow)) },
            { provider: () => provider, tools: untyped<Resolvers["tools"]>(() => null) },
            { provider: () => { throw Object.assign(new Error(), { message: Symbol("odd") }) }, tools: () => slow },
            // A catalog other than the pause's: a tool left out, one added, one of the same name redefined.
            { provider: () => provider, tools: () => slow.filter((tool) => tool.name !== "slow") },
            { provider: () => provider, tools: () => [...slow, Tool.make({ ...extraDefinition, name: "extra" })] },
            { provider: () => provider, tools: () => [...slow.filter((tool) => tool.name !== "slow"), Tool.make({ ...extraDefinition, name: "slow" })] },
            // A host tool under the engine's own tool's name: the resume's refusal, not a rejection of the call.
            { provider: () => provider, tools: () => [...slow, Tool.make({ ...extraDefinition, name: "read_tool_result" })] },
            // No tools at all: the engine's own tool is no change of the host's.
            { provider: () => provider, tools: () => [] },
            // Resolvers of a class, called as its methods (their `this` the host's object).
            new (class {
              readonly asked: Array<string> = []
              provider() {
                this.asked.push("provider")
                return provider
              }
              tools() {
                this.asked.push("tools")
                return []
              }
            })(),
          ],
          (resolvers) => Effect.promise(() => engine.resumePending(resolvers)),
        )
        const reasons = skipped.map((reports) => reports.map((report) => ("skipped" in report ? report.skipped : "started")))
        assert.deepStrictEqual(reasons.slice(0, 3), [
          ["the provider resolver threw: no such route here"],
          ["the tools resolver threw: catalog store offline"],
          [`the tools resolver threw: invalid tool definition: tool name ${slow[0]!.name} appears twice in one catalog`],
        ])
        assert.lengthOf(reasons[3]!, 1)
        assert.include(reasons[3]![0], "provider has no key 'apikey'")
        assert.deepStrictEqual(reasons.slice(4), [
          ["the provider resolver returned a Promise; resolvers answer synchronously (read what they need before resumePending)"],
          ["the provider resolver returned null, not provider options or undefined"],
          ["the tools resolver returned a Promise; resolvers answer synchronously (read what they need before resumePending)"],
          ["the tools resolver returned null, not a list of tools or undefined"],
          ["the provider resolver threw: Symbol(odd)"],
          ["handoff execution settings changed: the tool catalog differs from the pause's: without slow"],
          ["handoff execution settings changed: the tool catalog differs from the pause's: with extra added"],
          [
            "handoff execution settings changed: the tool catalog differs from the pause's: a tool of the same name has another definition (description or input schema)",
          ],
          ["the tool name read_tool_result is reserved: the engine adds its own tool under it"],
          ["handoff execution settings changed: the tool catalog differs from the pause's: without echo, slow"],
          ["handoff execution settings changed: the tool catalog differs from the pause's: without echo, slow"],
        ])
        // Each resolver is told which paused run it serves: its session and its configuration.
        const asked: Array<string> = []
        const reports = yield* Effect.promise(() =>
          engine.resumePending({
            provider: (_route, _binding, paused) => {
              asked.push(`provider ${paused.sessionId} ${paused.invocation.invocationId} ${paused.configuration.cwd}`)
              return provider
            },
            tools: (_names, _digest, paused) => {
              asked.push(`tools ${paused.sessionId} ${paused.invocation.invocationId} ${paused.configuration.cwd}`)
              return slow
            },
          }),
        )
        assert.deepStrictEqual(asked, [
          `provider session-1 ${second.invocation.invocationId} ${fs.realpathSync(workspace)}`,
          `tools session-1 ${second.invocation.invocationId} ${fs.realpathSync(workspace)}`,
        ])
        assert.strictEqual(reports.length, 1)
        const report = reports[0]!
        if (!("started" in report)) return assert.fail(report.skipped)
        assert.deepStrictEqual((yield* Effect.promise(() => report.started.wait())).outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, ["slow:a"])
      }),
    ),
  )

  it.live("close({handoff: true}) after a run.handoff() still pending pauses the run once: both get the same pause", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { engine, run, effects, release } = yield* slowFacadeRun("Resumed.")
        // The host asks for a handoff, then its shutdown closes the engine with handoff while the tool runs.
        const requested = run.handoff()
        const closing = engine.close({ handoff: true })
        yield* Effect.sleep("20 millis")
        yield* Deferred.succeed(release, undefined)
        const closed = yield* Effect.promise(() => closing)
        const pause = yield* Effect.promise(() => requested)
        assert.isNotNull(pause)
        assert.deepStrictEqual(closed, [{ invocation: run.invocation, outcome: "paused", pause: pause! }])
        assert.deepStrictEqual((yield* Effect.promise(() => run.wait())).outcome, { kind: "handoff_paused", pause: pause! })
        assert.deepStrictEqual(effects.ran, ["slow:a"])
      }),
    ),
  )

  it.live("a run.handoff() after close({handoff: true}) began joins its pause; a steer then rides the pause, not refused as a closed engine", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { directory, engine, run, effects, release } = yield* slowFacadeRun("Resumed.")
        // The shutdown closes the engine with handoff while the tool runs; a handler then asks the run too.
        const closing = engine.close({ handoff: true })
        yield* Effect.sleep("20 millis")
        const requested = run.handoff()
        yield* Effect.promise(() => run.steer("One more thing."))
        yield* Deferred.succeed(release, undefined)
        const closed = yield* Effect.promise(() => closing)
        const pause = yield* Effect.promise(() => requested)
        assert.isNotNull(pause)
        assert.deepStrictEqual(closed, [{ invocation: run.invocation, outcome: "paused", pause: pause! }])
        assert.deepStrictEqual(effects.ran, ["slow:a"])
        // Once the engine is closed, a call on the run is the closed engine's refusal.
        const after = yield* Effect.flip(Effect.tryPromise({ try: () => run.handoff(), catch: (error) => error as EngineError.EngineError }))
        assert.strictEqual(after.reason._tag, "Internal")
        // The steering was committed before the pause.
        const reopened = yield* Effect.promise(() => createEngine({ database: path.join(directory, "events.sqlite") }))
        const facts = (yield* Effect.promise(() => reopened.events("session-1"))).map((stored) => stored.event.fact)
        yield* Effect.promise(() => reopened.close())
        const steeredAt = facts.findIndex((fact) => fact.kind === "message_steered" && fact.message.content.text === "One more thing.")
        assert.isAbove(steeredAt, -1)
        assert.isBelow(steeredAt, facts.findIndex((fact) => fact.kind === "invocation_ended"))
      }),
    ),
  )

  it.live("a run.handoff() during a plain close takes no pause: it resolves null and the run ends cancelled", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { engine, run, effects, release } = yield* slowFacadeRun("Done.")
        const closing = engine.close({ handoff: false })
        const requested = run.handoff()
        yield* Deferred.succeed(release, undefined)
        assert.isNull(yield* Effect.promise(() => requested))
        assert.deepStrictEqual((yield* Effect.promise(() => closing)).map((item) => item.outcome), ["cancelled"])
        assert.strictEqual((yield* Effect.promise(() => run.wait())).outcome.kind, "cancelled")
        assert.isAtMost(effects.ran.length, 1)
      }),
    ),
  )

  it.live("close({handoff: true}) cancels at once a run that can never pause (no workspace): no later effect, no later request", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const held = Respond.gate()
        const server = yield* ScriptedServer.make({ script: [Respond.hold(held, slowCall("call-1", "a")), answer("Done.")] })
        const directory = yield* LogTesting.temporaryDirectory
        const engine = yield* Effect.promise(() => createEngine({ database: path.join(directory, "events.sqlite") }))
        const effects: Effects = { ran: [] }
        const provider = { kind: "openai-compatible" as const, baseUrl: `${server.url}/v1`, model: "test-model", apiKey: "sk-facade" }
        const run = yield* Effect.promise(() =>
          engine.start({ sessionId: "session-1", provider, tools: [...tools(effects, []).tools], maxSteps: 4, message: "Run slow." }),
        )
        yield* Effect.promise(() => server.request(0))
        const closing = engine.close({ handoff: true })
        // The model's answer (a tool call) arrives only after the close began.
        yield* Effect.sleep("20 millis")
        held.release()
        const closed = yield* Effect.promise(() => closing)
        assert.deepStrictEqual(closed.map((item) => item.outcome), ["cancelled"])
        assert.strictEqual((yield* Effect.promise(() => run.wait())).outcome.kind, "cancelled")
        assert.deepStrictEqual(effects.ran, [])
        assert.strictEqual(server.requests().length, 1)
      }),
    ),
  )

  it.live("run.handoff() of a run that can never pause (no workspace) resolves null at once, not at its step boundary", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const held = Respond.gate()
        const server = yield* ScriptedServer.make({ script: [Respond.hold(held, answer("Done."))] })
        const directory = yield* LogTesting.temporaryDirectory
        const engine = yield* Effect.acquireRelease(
          Effect.promise(() => createEngine({ database: path.join(directory, "events.sqlite") })),
          (opened) => Effect.promise(() => opened.close()),
        )
        const provider = { kind: "openai-compatible" as const, baseUrl: `${server.url}/v1`, model: "test-model", apiKey: "sk-facade" }
        const run = yield* Effect.promise(() => engine.start({ sessionId: "session-1", provider, maxSteps: 4, message: "Answer." }))
        yield* Effect.promise(() => server.request(0))
        // The model's answer is held: the run is in the middle of its step while the handoff is asked.
        assert.isNull(yield* Effect.promise(() => run.handoff()))
        held.release()
        assert.deepStrictEqual((yield* Effect.promise(() => run.wait())).outcome, { kind: "completed" })
      }),
    ),
  )

  it.live("close({handoff: true}) cancels a run that reaches no step boundary within handoffWaitMs (a model stream that sends nothing)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const server = yield* ScriptedServer.make({ script: [Respond.hang(), answer("Never sent.")] })
        const directory = yield* LogTesting.temporaryDirectory
        const workspace = path.join(directory, "workspace")
        fs.mkdirSync(workspace)
        const engine = yield* Effect.promise(() =>
          createEngine({ database: path.join(directory, "events.sqlite"), engineOptions: { handoffWaitMs: 100 } }),
        )
        const provider = { kind: "openai-compatible" as const, baseUrl: `${server.url}/v1`, model: "test-model", apiKey: "sk-facade" }
        const run = yield* Effect.promise(() => engine.start({ sessionId: "session-1", provider, workspace, maxSteps: 4, message: "Answer." }))
        yield* Effect.promise(() => server.request(0))
        // Without the bound the close would wait for a boundary the stream never reaches.
        const closed = yield* Effect.promise(() => engine.close({ handoff: true }))
        assert.deepStrictEqual(closed.map((item) => item.outcome), ["cancelled"])
        assert.strictEqual((yield* Effect.promise(() => run.wait())).outcome.kind, "cancelled")
        // Nothing is reserved: another engine over the log finds no pause to resume.
        const reopened = yield* Effect.promise(() => createEngine({ database: path.join(directory, "events.sqlite") }))
        assert.deepStrictEqual(yield* Effect.promise(() => reopened.resumePending({ provider: () => provider, tools: () => [] })), [])
        yield* Effect.promise(() => reopened.close())
      }),
    ),
  )

  it.live("a host's run.cancel() during close({handoff: true}) cancels the run instead of leaving it paused", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { directory, provider, engine, run, effects, release } = yield* slowFacadeRun("Done.")
        const closing = engine.close({ handoff: true })
        yield* Effect.sleep("20 millis")
        yield* Effect.promise(() => run.cancel())
        yield* Deferred.succeed(release, undefined)
        const closed = yield* Effect.promise(() => closing)
        assert.deepStrictEqual(closed.map((item) => item.outcome), ["cancelled"])
        assert.strictEqual((yield* Effect.promise(() => run.wait())).outcome.kind, "cancelled")
        // Nothing is reserved: another engine over the log finds no pause to resume.
        const reopened = yield* Effect.promise(() => createEngine({ database: path.join(directory, "events.sqlite") }))
        const reports = yield* Effect.promise(() => reopened.resumePending({ provider: () => provider, tools: () => [] }))
        assert.deepStrictEqual(reports, [])
        yield* Effect.promise(() => reopened.close())
        assert.deepStrictEqual(effects.ran, ["slow:a"])
      }),
    ),
  )

  it.live("the logical run's step budget holds across a handoff: the successor ends step_limit after the remaining steps", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [mainEntry(slowCall("call-1", "a")), mainEntry(echoCall("call-2", "b")), mainEntry(echoCall("call-3", "c"))],
        })
        const effects: Effects = { ran: [] }
        const release = yield* Deferred.make<void>()
        const catalog = tools(effects, [release])
        const running = yield* context.engine.start(input(context, "Keep calling tools.", catalog, { maxSteps: 3 }))
        yield* dispatched(running)
        const requested = yield* requestHandoff(running)
        yield* Deferred.succeed(release, undefined)
        const pause = (yield* Fiber.join(requested))!
        assert.strictEqual(pause.remainingSteps, 2)
        const successor = yield* context.engine.resume({ paused: running.invocation, pause, model: context.model, tools: catalog })
        const result = yield* successor.wait
        assert.deepStrictEqual(result.outcome.kind === "failed" ? result.outcome.class : result.outcome.kind, "step_limit")
        // Three main requests in all, one per step of the logical run.
        assert.strictEqual(context.server.requests().length, 3)
        assert.deepStrictEqual(effects.ran, ["slow:a", "b", "c"])
      }),
    ),
  )

  it.live("steering accepted while a handoff's preflight runs reaches the successor, and steering after the seal is refused", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const inCheck = yield* Deferred.make<void>()
        const letCheck = yield* Deferred.make<void>()
        const context = yield* setup(
          { script: [mainEntry(slowCall("call-1", "a")), mainEntry(answer("Done."))] },
          undefined,
          {},
          {
            // The store's dry run waits until the test has steered.
            wrapLog: (log) => ({
              ...log,
              checkHandoff: (invocation, pause) =>
                Deferred.succeed(inCheck, undefined).pipe(Effect.andThen(Deferred.await(letCheck)), Effect.andThen(log.checkHandoff(invocation, pause))),
            }),
          },
        )
        const effects: Effects = { ran: [] }
        const release = yield* Deferred.make<void>()
        const catalog = tools(effects, [release])
        const running = yield* context.engine.start(input(context, "Run slow.", catalog, { maxSteps: 4 }))
        yield* dispatched(running)
        const requested = yield* requestHandoff(running)
        yield* Deferred.succeed(release, undefined)
        yield* Deferred.await(inCheck)
        const steered = yield* Effect.exit(running.steer("Steered during the preflight."))
        yield* Deferred.succeed(letCheck, undefined)
        const pause = yield* Fiber.join(requested)
        yield* running.wait
        if (pause !== undefined) {
          const successor = yield* context.engine.resume({ paused: running.invocation, pause, model: context.model, tools: catalog })
          yield* successor.wait
        }
        // An accepted steering message is delivered exactly once, to the paused run or to its successor.
        if (Exit.isSuccess(steered)) {
          assert.strictEqual(factsOf(yield* context.log.events("session-1"), "message_steered").length, 1)
          assert.isTrue(context.server.requests().some((request) => request.body.includes("Steered during the preflight.")))
        }
        // A sealed run takes no more steering.
        const late = yield* Effect.flip(running.steer("After the seal."))
        assert.strictEqual(late.reason._tag, "Busy")
      }),
    ),
  )
})

describe("the handoff gate's transitions (scenario 61)", () => {
  const intent = (rootRunId = "run-root"): Lineage.HandoffIntent => ({
    handoffId: "handoff-1",
    hostEpoch: "host-1",
    rootRunId,
    successorRunId: "run-successor",
    successorInvocationId: "invocation-successor",
    claimId: "claim-1",
  })

  it.effect("a stale hold cannot commit: after its release and a new reservation, neither before nor after the new intent is held", () =>
    Effect.gen(function* () {
      const gate = new Handoff.HandoffGate("run-root")
      const first = yield* gate.reserve(intent())
      const stale = gate.hold()!
      // The preflight failed: back to running, and the first reservation learns nothing was sealed.
      yield* gate.release
      assert.strictEqual(gate.current, "running")
      assert.isUndefined(yield* Deferred.await(first))
      yield* gate.reserve({ ...intent(), handoffId: "handoff-2" })
      assert.strictEqual(gate.current, "requested")
      // What held the first intent cannot commit the second, whether or not it is held yet.
      assert.isFalse(gate.commit(stale))
      assert.strictEqual(gate.current, "requested")
      const fresh = gate.hold()!
      assert.strictEqual(fresh.handoffId, "handoff-2")
      assert.isFalse(gate.commit(stale))
      assert.strictEqual(gate.current, "held")
      assert.isTrue(gate.commit(fresh))
      assert.isFalse(gate.commit(fresh))
    }),
  )

  it.effect("a deferred hold keeps its reservation for the next boundary: nothing resolved, held and committed there", () =>
    Effect.gen(function* () {
      const gate = new Handoff.HandoffGate("run-root")
      const waiting = yield* gate.reserve(intent())
      assert.isDefined(gate.hold())
      // Steering came during the preflight: the run goes on, the reservation waits.
      gate.defer()
      assert.strictEqual(gate.current, "requested")
      yield* gate.release
      assert.isTrue(Option.isNone(yield* Deferred.poll(waiting)))
      yield* gate.requested
      const held = gate.hold()
      assert.deepStrictEqual(held, intent())
      assert.isTrue(gate.commit(held!))
    }),
  )

  it.effect("a closed gate resolves a waiting reservation with nothing, and refuses a commit and a new reservation", () =>
    Effect.gen(function* () {
      const gate = new Handoff.HandoffGate("run-root")
      const waiting = yield* gate.reserve(intent())
      const held = gate.hold()!
      yield* gate.close
      assert.isUndefined(yield* Deferred.await(waiting))
      assert.isFalse(gate.commit(held))
      const refused = yield* Effect.flip(gate.reserve(intent()))
      assert.strictEqual(refused.reason._tag, "Busy")
      assert.isTrue(Handoff.refusedAsEnded(refused.message))
    }),
  )

  it.effect("a reservation refused while a handoff is requested, held, committing or sealed says it is taken; one after the run closed does not", () =>
    Effect.gen(function* () {
      const gate = new Handoff.HandoffGate("run-root")
      const refusal = Effect.map(Effect.flip(gate.reserve(intent())), (error) => error.message)
      yield* gate.reserve(intent())
      const requested = yield* refusal
      const holding = gate.hold()!
      const held = yield* refusal
      assert.isTrue(gate.commit(holding))
      const committed = yield* refusal
      yield* gate.sealed({ intent: intent() } as unknown as Lineage.HandoffPause)
      const sealed = yield* refusal
      for (const message of [requested, held, committed, sealed]) assert.isTrue(Handoff.refusedAsTaken(message), message)
      const closedGate = new Handoff.HandoffGate("run-root")
      yield* closedGate.close
      const closed = (yield* Effect.flip(closedGate.reserve(intent()))).message
      assert.isFalse(Handoff.refusedAsTaken(closed))
      assert.isTrue(Handoff.refusedAsEnded(closed))
    }),
  )

  it.effect("a reservation for another logical Run is refused", () =>
    Effect.gen(function* () {
      const gate = new Handoff.HandoffGate("run-root")
      const refused = yield* Effect.flip(gate.reserve(intent("run-other")))
      assert.strictEqual(refused.reason._tag, "InvalidInput")
      assert.strictEqual(gate.current, "running")
    }),
  )
})
