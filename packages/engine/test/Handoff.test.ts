/**
 * Handoff scenarios of docs/engine.md §5.10 (SEMANTICS scenarios 56–61): the pause sealed at a
 * settled step boundary, the reservation it holds on the session, the successor's admission with
 * identical settings, and its replay of settled facts without re-running an effect. Real SQLite
 * files and the scripted server on loopback.
 */
import { assert, describe, it } from "@effect/vitest"
import { Canonical, Digest, type EventWrite, type Lineage } from "@maka/facts"
import { FactBuilders, OpenAiSse, Respond } from "@maka/testkit"
import { Ids, Tool, ToolCatalog } from "@maka/tools"
import { EventLog, EventLogError } from "@maka/event-log"
import { Deferred, Effect, Exit, Fiber, Schema } from "effect"
import * as EngineError from "../src/EngineError.ts"
import * as Engine from "../src/Engine.ts"
import { answer, echoCall, mainEntry } from "./support/compaction.ts"
import { drainedSummaryFaulted } from "./support/faults.ts"
import { factsOf, kinds, reopen } from "./support/harness.ts"
import { echoTool, input, setup, type Effects, type Setup } from "./support/setup.ts"

/** An `echo` tool plus a `slow` tool that waits until `release` completes. */
const tools = (effects: Effects, release: Deferred.Deferred<void>) =>
  ToolCatalog.make([
    echoTool(effects),
    Tool.make({
      name: "slow",
      description: "Waits for a release.",
      input: Schema.Struct({ value: Schema.String }),
      semantics: "parallel",
      execute: ({ value }) =>
        Effect.map(Deferred.await(release), () => {
          effects.ran.push(`slow:${value}`)
          return Tool.text(`slow: ${value}`)
        }),
    }),
  ])

/** One call of `slow`. */
const slowCall = (id: string, value: string) =>
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id, name: "slow", arguments: [JSON.stringify({ value })] }] }))

/** Requests a handoff once `arrived` resolves (while `slow` runs), then releases `slow`: the pause and the run's result. */
const handOffWhileSlowRuns = (running: Engine.RunningInvocation, release: Deferred.Deferred<void>, arrived: Effect.Effect<unknown>) =>
  Effect.gen(function* () {
    yield* arrived
    const requested = yield* Effect.forkChild(running.handoff)
    yield* Effect.sleep("20 millis")
    yield* Deferred.succeed(release, undefined)
    const pause = yield* Fiber.join(requested)
    const result = yield* running.wait
    return { pause, result }
  })

/** Starts a run whose first step calls `slow`, requests a handoff while it runs, then releases it. */
const pauseWhileToolRuns = (context: Setup, effects: Effects, overrides: Partial<Engine.StartInput> = {}) =>
  Effect.gen(function* () {
    const release = yield* Deferred.make<void>()
    const catalog = tools(effects, release)
    const running = yield* context.engine.start(input(context, "Run slow, then echo.", catalog, { maxSteps: 6, ...overrides }))
    const { pause, result } = yield* handOffWhileSlowRuns(running, release, Effect.promise(() => context.server.exchange(0)))
    return { running, pause, result, catalog }
  })

/** Whether a batch opens a handoff successor. */
const isHandoffOpening = (writes: ReadonlyArray<EventWrite.EventWrite>): boolean => {
  const fact = writes[0]?.event.fact
  return fact?.kind === "invocation_opened" && fact.input.kind === "handoff"
}

/**
 * A run paused on `slow`, its engine, and a second engine over the same log. What
 * `before(when, race)` arms runs once just before the first engine's next append `when` selects,
 * after every check that engine made: the other engine acts in between (the race two hosts of a
 * shared log can run).
 */
const racingSetup = () =>
  Effect.gen(function* () {
    let armed: { readonly when: (writes: ReadonlyArray<EventWrite.EventWrite>) => boolean; readonly race: Effect.Effect<void> } | undefined
    const context = yield* setup({ script: [mainEntry(slowCall("call-1", "a")), mainEntry(answer("Done."))] }, undefined, {}, {
      wrapLog: (log) => ({
        ...log,
        appendBatch: (writes, complete) => {
          const now = armed
          if (now === undefined || !now.when(writes)) return log.appendBatch(writes, complete)
          armed = undefined
          return Effect.andThen(now.race, log.appendBatch(writes, complete))
        },
      }),
    })
    const other = yield* Engine.make({}).pipe(Effect.provideService(EventLog.EventLog, context.log), Effect.provide(Ids.layer))
    const effects: Effects = { ran: [] }
    const { running, pause, catalog } = yield* pauseWhileToolRuns(context, effects)
    return {
      context,
      other,
      effects,
      running,
      pause,
      catalog,
      before: (when: (writes: ReadonlyArray<EventWrite.EventWrite>) => boolean, race: Effect.Effect<void>) => void (armed = { when, race }),
      armed: () => armed !== undefined,
    }
  })

describe("handoff", () => {
  it.live("holds until the running tool settles, then seals handoff_paused and reserves the session (scenario 56)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(slowCall("call-1", "a")), mainEntry(echoCall("call-2", "b")), mainEntry(answer("Done."))] })
        const effects: Effects = { ran: [] }
        const { running, pause, result } = yield* pauseWhileToolRuns(context, effects)
        assert.isDefined(pause)
        assert.deepStrictEqual(result.outcome, { kind: "handoff_paused", pause: pause! })
        assert.strictEqual(pause!.remainingSteps, 5)
        assert.notProperty(pause!.execution, "replayBase")
        assert.strictEqual(pause!.intent.rootRunId, running.invocation.runId)
        assert.deepStrictEqual(effects.ran, ["slow:a"])
        // No request follows the pause.
        assert.strictEqual(context.server.requests().length, 1)
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_settled:succeeded",
          "invocation_ended:handoff_paused",
        ])
        // Any other opening on the session is refused while the pause waits for its successor.
        const other = yield* Effect.flip(context.engine.run(input(context, "Something else.", ToolCatalog.make([]))))
        assert.strictEqual(other.reason._tag, "Busy")
        assert.strictEqual(other.message, EngineError.SESSION_RESERVED_MESSAGE)
        // So is a continuation, already by its check, which writes nothing.
        const continuation = yield* Effect.flip(
          context.engine.checkContinuation({
            source: running.invocation,
            invocation: FactBuilders.invocation({ turnId: "turn-c", runId: "run-c", invocationId: "invocation-c" }),
            model: context.model,
            configuration: FactBuilders.configuration({ cwd: context.workspace, model: FactBuilders.modelBinding({ model: "test-model" }) }),
            tools: ToolCatalog.make([]),
          }),
        )
        assert.deepStrictEqual(continuation.reason, { _tag: "Busy", message: EngineError.SESSION_RESERVED_MESSAGE })
        assert.strictEqual((yield* context.log.events("session-1")).length, events.length)
      }),
    ),
  )

  it.live("a pause the log refuses or fails to write: the handoff resolves with no pause, and the session's next run goes on", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const failures: ReadonlyArray<EventLogError.EventLogError> = [
          EventLogError.make({ _tag: "Database", message: "disk I/O error (injected)" }),
          EventLogError.rejected({ _tag: "InvalidTransition", reason: "refused by the test's store" }),
          EventLogError.make({ _tag: "OutcomeUnknown", message: "the connection dropped during COMMIT (injected)" }),
        ]
        for (const failure of failures) {
          let refused = 0
          const context = yield* setup(
            { script: [mainEntry(slowCall("call-1", "a")), mainEntry(answer("Done."))] },
            undefined,
            {},
            {
              // The pause's commit fails once; the log accepts every other write.
              wrapLog: (log): EventLog.EventLogShape => {
                const appendBatch: EventLog.EventLogShape["appendBatch"] = (writes, complete) => {
                  const pause = writes.some(
                    (write) => write.event.fact.kind === "invocation_ended" && write.event.fact.outcome.kind === "handoff_paused",
                  )
                  if (!pause || refused++ > 0) return log.appendBatch(writes, complete)
                  return failure.reason._tag === "OutcomeUnknown"
                    ? Effect.andThen(log.appendBatch(writes, complete), Effect.fail(failure))
                    : Effect.fail(failure)
                }
                return { ...log, appendBatch, append: (write) => Effect.map(appendBatch([write]), (sequences) => sequences[0]!) }
              },
            },
          )
          const effects: Effects = { ran: [] }
          const release = yield* Deferred.make<void>()
          const running = yield* context.engine.start(input(context, "Run slow.", tools(effects, release), { maxSteps: 6 }))
          yield* Effect.promise(() => context.server.exchange(0))
          const requested = yield* Effect.forkChild(running.handoff)
          yield* Effect.sleep("20 millis")
          yield* Deferred.succeed(release, undefined)
          // Whoever waits for the pause learns that none was sealed (docs/engine.md §5.10), and the run fails.
          const pause = yield* Fiber.join(requested).pipe(Effect.timeout("5 seconds"))
          assert.isUndefined(pause, failure.message)
          const ended = yield* Effect.flip(running.wait)
          assert.strictEqual(ended.reason._tag, "Commit", failure.message)
          assert.strictEqual(refused, 1)
          assert.deepStrictEqual(effects.ran, ["slow:a"])
          // A pause that landed all the same reserves the session for its successor: the host abandons it.
          const landed = failure.reason._tag === "OutcomeUnknown"
          if (landed) {
            const refused = yield* Effect.flip(context.engine.run(input(context, "Next.", ToolCatalog.make([]))))
            assert.strictEqual(refused.message, EngineError.SESSION_RESERVED_MESSAGE)
            yield* context.engine.abandonHandoff("session-1")
          }
          // Otherwise the engine seals the run at the session's next start; either way that run goes on.
          const next = yield* context.engine.run(input(context, "Next.", ToolCatalog.make([])))
          assert.deepStrictEqual(next.outcome, { kind: "completed" }, failure.message)
          const terminals = factsOf(yield* context.log.events("session-1"), "invocation_ended")
          assert.deepStrictEqual(
            terminals.map((fact) => fact.outcome.kind),
            landed ? ["handoff_paused", "cancelled", "completed"] : ["failed", "completed"],
            failure.message,
          )
        }
      }),
    ),
  )

  it.live("dropping a reservation before its boundary writes nothing and the same run completes (scenario 57)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(slowCall("call-1", "a")), mainEntry(answer("Done."))] })
        const effects: Effects = { ran: [] }
        const release = yield* Deferred.make<void>()
        const running = yield* context.engine.start(input(context, "Run slow.", tools(effects, release)))
        yield* Effect.promise(() => context.server.exchange(0))
        // The reservation lands before forkChild returns (it is synchronous up to its wait).
        const requested = yield* Effect.forkChild(running.handoff, { startImmediately: true })
        // It did land: the gate is `requested`, so a second reservation is refused Busy at once
        // (docs/engine.md §5.10) rather than waiting for a boundary.
        const second = yield* Effect.forkChild(Effect.flip(running.handoff), { startImmediately: true })
        const refused = second.pollUnsafe()
        assert.isDefined(refused, "a second handoff waited: the first reservation had not landed")
        assert.isTrue(refused !== undefined && Exit.isSuccess(refused))
        if (refused !== undefined && Exit.isSuccess(refused)) {
          assert.strictEqual(refused.value.reason._tag, "Busy")
          assert.strictEqual(refused.value.message, "the run's handoff gate is requested")
        }
        yield* Fiber.interrupt(requested)
        yield* Deferred.succeed(release, undefined)
        const result = yield* running.wait
        // Nothing of the reservation was written: the facts are a plain two-step run, no pause.
        assert.deepStrictEqual(kinds(yield* context.log.events("session-1")), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_settled:succeeded",
          "model_requested",
          "model_completed",
          "invocation_ended:completed",
        ])
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.strictEqual(context.server.requests().length, 2)
        assert.deepStrictEqual(effects.ran, ["slow:a"])
      }),
    ),
  )

  it.live("dropping a reservation while its preflight runs (held, before the commit) writes nothing and the same run completes (scenario 57)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The preflight's store check waits: the gate is held while the caller goes away.
        const inCheck = yield* Deferred.make<void>()
        const letCheck = yield* Deferred.make<void>()
        const context = yield* setup({ script: [mainEntry(slowCall("call-1", "a")), mainEntry(answer("Done."))] }, undefined, {}, {
          wrapLog: (log): EventLog.EventLogShape => ({
            ...log,
            checkHandoff: (invocation, pause) =>
              Effect.andThen(Effect.andThen(Deferred.succeed(inCheck, undefined), Deferred.await(letCheck)), log.checkHandoff(invocation, pause)),
          }),
        })
        const effects: Effects = { ran: [] }
        const release = yield* Deferred.make<void>()
        const running = yield* context.engine.start(input(context, "Run slow.", tools(effects, release)))
        yield* Effect.promise(() => context.server.exchange(0))
        const requested = yield* Effect.forkChild(running.handoff, { startImmediately: true })
        yield* Deferred.succeed(release, undefined)
        yield* Deferred.await(inCheck)
        yield* Fiber.interrupt(requested)
        yield* Deferred.succeed(letCheck, undefined)
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(kinds(yield* context.log.events("session-1")), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_settled:succeeded",
          "model_requested",
          "model_completed",
          "invocation_ended:completed",
        ])
        assert.deepStrictEqual(yield* context.log.pendingHandoffs(), [])
        assert.deepStrictEqual(effects.ran, ["slow:a"])
      }),
    ),
  )

  it.live("a sealed pause survives reopening: recovery seals nothing and pendingHandoffs lists it (scenario 58)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(slowCall("call-1", "a"))] })
        const { running, pause } = yield* pauseWhileToolRuns(context, { ran: [] })
        yield* context.log.close
        const reopened = yield* reopen(context.file)
        const report = yield* reopened.recover
        assert.strictEqual(report.sealed.length, 0)
        const pending = yield* reopened.log.pendingHandoffs()
        assert.strictEqual(pending.length, 1)
        assert.deepStrictEqual(pending[0]!.invocation, running.invocation)
        assert.isTrue(Canonical.equal(pending[0]!.pause, pause))
      }),
    ),
  )

  it.live("refuses a successor with any changed setting and writes nothing (scenario 59)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(slowCall("call-1", "a"))] })
        const effects: Effects = { ran: [] }
        const { running, pause, catalog } = yield* pauseWhileToolRuns(context, effects)
        const before = (yield* context.log.events("session-1")).length
        const base: Engine.ResumeInput = { paused: running.invocation, pause: pause!, model: context.model, tools: catalog }
        const changes: ReadonlyArray<[string, Engine.ResumeInput]> = [
          ["output limit", { ...base, mainOutputLimit: 1_234 }],
          ["options", { ...base, providerOptions: { temperature: 0.5 } }],
          ["model", { ...base, model: { ...context.model, routeIdentity: Digest.sha256Hex("another route") } }],
          [
            "cwd",
            {
              ...base,
              configuration: FactBuilders.configuration({ cwd: `${context.workspace}/elsewhere`, model: FactBuilders.modelBinding({ model: "test-model" }) }),
            },
          ],
          ["catalog", { ...base, tools: ToolCatalog.make([echoTool(effects)]) }],
        ]
        for (const [what, change] of changes) {
          const refusal = yield* Effect.flip(context.engine.resume(change))
          assert.strictEqual(refusal.reason._tag, "ReconciliationRequired", what)
        }
        assert.strictEqual((yield* context.log.events("session-1")).length, before)
      }),
    ),
  )

  it.live("the correct successor replays settled facts only, its first request is the pause's replay, and it completes (scenario 60)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(slowCall("call-1", "a")), mainEntry(echoCall("call-2", "b")), mainEntry(answer("Done."))] })
        const effects: Effects = { ran: [] }
        const { running, pause, catalog } = yield* pauseWhileToolRuns(context, effects)
        const successor = yield* context.engine.resume({ paused: running.invocation, pause: pause!, model: context.model, tools: catalog })
        assert.strictEqual(successor.invocation.invocationId, pause!.intent.successorInvocationId)
        assert.strictEqual(successor.invocation.turnId, running.invocation.turnId)
        const result = yield* successor.wait
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        // Each effect ran once: the settled `slow` call was replayed, never re-run.
        assert.deepStrictEqual(effects.ran, ["slow:a", "b"])
        const events = yield* context.log.events("session-1")
        const own = events.filter((stored) => stored.event.invocation.invocationId === successor.invocation.invocationId)
        const opening = own[0]!.event.fact
        assert.strictEqual(opening.kind === "invocation_opened" ? opening.input.kind : "", "handoff")
        const requests = factsOf(own, "model_requested")
        assert.strictEqual(requests[0]!.inputDigest, pause!.execution.replay.digest)
        // The replayed request holds the settled result of the paused run.
        assert.include(context.server.requests()[1]!.body, "slow: a")
        const latest = yield* context.log.latestMainContext("session-1")
        assert.strictEqual(latest.kind === "selected" ? latest.sequence : 0, own.find((stored) => stored.event.fact.kind === "model_completed" && stored.event.fact.stepId === requests[requests.length - 1]!.stepId)!.sequence)
        // The session is free again.
        context.server.push(mainEntry(answer("Free.")))
        const next = yield* context.engine.run(input(context, "Next.", ToolCatalog.make([])))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
      }),
    ),
  )

  it.live("a continuation hands off: its pause carries the continuation's base, and the successor replays the lineage only", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            mainEntry(echoCall("call-1", "alpha")),
            mainEntry(answer("Unrelated.")),
            mainEntry(slowCall("call-2", "s")),
            mainEntry(answer("Done.")),
          ],
        })
        const effects: Effects = { ran: [] }
        const release = yield* Deferred.make<void>()
        const catalog = tools(effects, release)
        // The source ends at its step budget after its tool step; another run follows it.
        const source = yield* context.engine.run(input(context, "Echo alpha.", catalog, { maxSteps: 1 }))
        assert.strictEqual(source.outcome.kind === "failed" ? source.outcome.class : source.outcome.kind, "step_limit")
        yield* context.engine.run(input(context, "UNRELATED-LATER-RUN", catalog))
        const continued = input(context, "", catalog, { maxSteps: 6 })
        const { message: _message, ...continuation } = continued
        const running = yield* context.engine.continueRun({ ...continuation, source: source.invocation })
        const { pause, result } = yield* handOffWhileSlowRuns(running, release, Effect.promise(() => context.server.exchange(2)))
        assert.isDefined(pause, "the continuation was not handed off")
        assert.deepStrictEqual(result.outcome, { kind: "handoff_paused", pause: pause! })
        const events = yield* context.log.events("session-1")
        const opening = events.find((stored) => stored.event.invocation.invocationId === running.invocation.invocationId)!.event.fact
        if (opening.kind !== "invocation_opened" || opening.input.kind !== "continuation") return assert.fail("a continuation opening")
        assert.strictEqual(pause!.execution.replayBase, opening.input.claim.base.highWater)
        const successor = yield* context.engine.resume({ paused: running.invocation, pause: pause!, model: context.model, tools: catalog })
        assert.deepStrictEqual((yield* successor.wait).outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, ["alpha", "slow:s"])
        const own = (yield* context.log.events("session-1")).filter(
          (stored) => stored.event.invocation.invocationId === successor.invocation.invocationId,
        )
        const request = factsOf(own, "model_requested")[0]!
        assert.strictEqual(request.inputDigest, pause!.execution.replay.digest)
        assert.strictEqual(request.sourceScope.kind, "lineage")
        assert.strictEqual(request.effectiveSourceDigest, Digest.effectiveSource(request.sourceDigest, []))
        const body = context.server.requests()[3]!.body
        assert.include(body, "echo: alpha")
        assert.include(body, "slow: s")
        assert.notInclude(body, "UNRELATED-LATER-RUN")
      }),
    ),
  )

  it.live("a drained summary's commit that carried the step's settlement with an unknown outcome pauses nothing: the run fails event_commit", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The drain's commit, which carries the settlement of `slow`, lands; its caller is told the outcome is unknown.
        const { context, faults } = yield* drainedSummaryFaulted("unknown-landed", [slowCall("call-2", "b"), answer("Done.")])
        const effects: Effects = { ran: [] }
        const release = yield* Deferred.make<void>()
        const catalog = tools(effects, release)
        const running = yield* context.engine.start(
          input(context, "Echo, then run slow.", catalog, {
            maxSteps: 6,
            context: { providerId: "provider-1", modelContextWindow: 20_000, declaredWindow: 6_000 },
          }),
        )
        // Once the second main request and the background summary's are both out.
        const { pause, result } = yield* handOffWhileSlowRuns(running, release, Effect.promise(() => context.server.request(2)))
        assert.isTrue(faults.fired(), faults.labels.join(" "))
        assert.isUndefined(pause, "a pause sealed over a commit whose outcome was unknown")
        assert.strictEqual(result.outcome.kind === "failed" ? result.outcome.class : result.outcome.kind, "event_commit")
        assert.deepStrictEqual(effects.ran, ["a", "slow:b"])
        // The settlement landed: the seal read it, and the session goes on.
        const events = yield* context.log.events("session-1")
        assert.strictEqual(factsOf(events, "tool_settled").length, 2)
        const next = yield* context.engine.run(input(context, "Next.", ToolCatalog.make([])))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
      }),
    ),
  )

  it.live("abandoning a pause seals its successor cancelled without a model and frees the session", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(slowCall("call-1", "a")), mainEntry(answer("Free."))] })
        const { pause } = yield* pauseWhileToolRuns(context, { ran: [] })
        const successor = yield* context.engine.abandonHandoff("session-1")
        assert.strictEqual(successor.invocationId, pause!.intent.successorInvocationId)
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events).slice(-2), ["invocation_opened", "invocation_ended:cancelled"])
        const ended = events[events.length - 1]!.event.fact
        assert.deepStrictEqual(ended.kind === "invocation_ended" ? ended.outcome : undefined, { kind: "cancelled", source: "handoff_abandoned" })
        assert.strictEqual(context.server.requests().length, 1)
        assert.deepStrictEqual(yield* context.log.pendingHandoffs(), [])
        // Abandoned already: a second abandon is Busy (taken), writing nothing; a session that never
        // paused is the caller's mistake.
        const written = events.length
        const again = yield* Effect.flip(context.engine.abandonHandoff("session-1"))
        assert.strictEqual(again.reason._tag, "Busy", again.message)
        assert.strictEqual(again.message, EngineError.busy(EngineError.HANDOFF_TAKEN_MESSAGE).message)
        assert.strictEqual((yield* context.log.events("session-1")).length, written)
        const never = yield* Effect.flip(context.engine.abandonHandoff("session-never"))
        assert.strictEqual(never.reason._tag, "InvalidInput", never.message)
        assert.include(never.message, "session session-never holds no sealed handoff")
        for (const notAnId of [undefined, null, 7]) {
          const refused = yield* Effect.flip(context.engine.abandonHandoff(notAnId as unknown as string))
          assert.deepStrictEqual(refused.reason, { _tag: "InvalidInput", message: "sessionId must be a string" })
        }
        const next = yield* context.engine.run(input(context, "Next.", ToolCatalog.make([])))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
      }),
    ),
  )

  it.live("a pause another caller took first: a second successor or abandon is Busy, never a reconciliation, and writes nothing", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const racing = yield* racingSetup()
        const { context, other, effects, running, pause, catalog } = racing
        const written = () => Effect.map(context.log.events("session-1"), (events) => events.length)
        const taken = EngineError.busy(EngineError.HANDOFF_TAKEN_MESSAGE).message
        const resumeHere = Effect.flip(context.engine.resume({ paused: running.invocation, pause: pause!, model: context.model, tools: catalog }))

        // The other engine abandons the pause between this engine's checks and its opening.
        racing.before((writes) => isHandoffOpening(writes), Effect.asVoid(Effect.orDie(other.abandonHandoff("session-1"))))
        const lost = yield* resumeHere
        assert.strictEqual(lost.reason._tag, "Busy", lost.message)
        assert.strictEqual(lost.message, taken)
        assert.isFalse(racing.armed())
        const afterRace = yield* written()
        // Asked again once the pause is gone: Busy as well (the claim's checks meet the successor).
        const again = yield* resumeHere
        assert.strictEqual(again.reason._tag, "Busy", again.message)
        assert.strictEqual(again.message, taken)
        assert.strictEqual(yield* written(), afterRace)
        assert.deepStrictEqual(effects.ran, ["slow:a"])
      }),
    ),
  )

  it.live("a successor while another engine's successor of the same pause is live is Busy, not an unsealed-run reconciliation", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const held = Respond.gate()
        const context = yield* setup({ script: [mainEntry(slowCall("call-1", "a")), Respond.hold(held, answer("Done."))] })
        const other = yield* Engine.make({}).pipe(Effect.provideService(EventLog.EventLog, context.log), Effect.provide(Ids.layer))
        const effects: Effects = { ran: [] }
        const { running, pause, catalog } = yield* pauseWhileToolRuns(context, effects)
        const live = yield* other.resume({ paused: running.invocation, pause: pause!, model: context.model, tools: catalog })
        yield* Effect.promise(() => context.server.request(1))
        const written = (yield* context.log.events("session-1")).length
        const refused = yield* Effect.flip(context.engine.resume({ paused: running.invocation, pause: pause!, model: context.model, tools: catalog }))
        assert.strictEqual(refused.reason._tag, "Busy", refused.message)
        assert.strictEqual(refused.message, EngineError.busy(EngineError.HANDOFF_TAKEN_MESSAGE).message)
        // An abandon of the pause the live successor took: Busy as well, never "holds no sealed handoff".
        const abandon = yield* Effect.flip(context.engine.abandonHandoff("session-1"))
        assert.strictEqual(abandon.reason._tag, "Busy", abandon.message)
        assert.strictEqual(abandon.message, EngineError.busy(EngineError.HANDOFF_TAKEN_MESSAGE).message)
        assert.strictEqual((yield* context.log.events("session-1")).length, written)
        held.release()
        assert.deepStrictEqual((yield* live.wait).outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, ["slow:a"])
      }),
    ),
  )

  it.live("an abandon that loses the race to another host's successor is Busy and writes nothing", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const racing = yield* racingSetup()
        const { context, other, effects, running, pause, catalog } = racing
        racing.before(
          () => true,
          Effect.flatMap(Effect.orDie(other.resume({ paused: running.invocation, pause: pause!, model: context.model, tools: catalog })), (successor) =>
            Effect.asVoid(Effect.orDie(successor.wait)),
          ),
        )
        const lost = yield* Effect.flip(context.engine.abandonHandoff("session-1"))
        assert.strictEqual(lost.reason._tag, "Busy", lost.message)
        assert.strictEqual(lost.message, EngineError.busy(EngineError.HANDOFF_TAKEN_MESSAGE).message)
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events).slice(-1), ["invocation_ended:completed"])
        // A successor of the same pause after that one completed: its claim no longer holds, Busy too.
        const late = yield* Effect.flip(context.engine.resume({ paused: running.invocation, pause: pause!, model: context.model, tools: catalog }))
        assert.strictEqual(late.reason._tag, "Busy", late.message)
        assert.strictEqual(late.message, EngineError.busy(EngineError.HANDOFF_TAKEN_MESSAGE).message)
        assert.strictEqual((yield* context.log.events("session-1")).length, events.length)
        assert.deepStrictEqual(effects.ran, ["slow:a"])
      }),
    ),
  )

  // docs/engine.md §5.10: a step whose attempts fail replay-safely has no completion yet, so a
  // handoff requested while it waits to retry is taken before the retry, not after the last one.
  it.live.each(["while the failing attempt waits for its answer", "during the backoff"] as const)(
    "a handoff requested %s pauses before the retry; the successor sends the retry",
    (when) =>
      Effect.scoped(
        Effect.gen(function* () {
          const answered = Respond.gate()
          const overloaded = mainEntry(Respond.hold(answered, Respond.json(503, Respond.openAiError("overloaded"))))
          // A backoff of a minute: the test ends in time only if the pause cuts it short.
          const context = yield* setup({ script: [overloaded, mainEntry(answer("Done."))] }, { backoffBaseMs: 60_000, backoffMaxMs: 60_000 })
          const catalog = ToolCatalog.make([echoTool({ ran: [] })])
          const running = yield* context.engine.start(input(context, "Answer once the provider is back.", catalog, { maxSteps: 4 }))
          yield* Effect.promise(() => context.server.request(0))
          let requested: Fiber.Fiber<Lineage.HandoffPause | undefined, EngineError.EngineError> | undefined
          if (when === "while the failing attempt waits for its answer") requested = yield* Effect.forkChild(running.handoff, { startImmediately: true })
          answered.release()
          if (requested === undefined) {
            // The failed attempt is closed before the backoff begins.
            while (factsOf(yield* context.log.events("session-1"), "model_interrupted").length === 0) yield* Effect.sleep("5 millis")
            requested = yield* Effect.forkChild(running.handoff, { startImmediately: true })
          }
          const pause = yield* Fiber.join(requested)
          const result = yield* running.wait
          assert.isDefined(pause)
          assert.deepStrictEqual(result.outcome, { kind: "handoff_paused", pause: pause! })
          // The step was not consumed: its failed attempt is closed, and no retry was sent.
          assert.strictEqual(pause!.remainingSteps, 4)
          assert.strictEqual(context.server.requests().length, 1)
          const events = yield* context.log.events("session-1")
          assert.deepStrictEqual(kinds(events), [
            "invocation_opened",
            "model_requested",
            "model_interrupted:retryable_failure",
            "invocation_ended:handoff_paused",
          ])
          const [first] = factsOf(events, "model_requested")
          // The successor's first request is the retry: the same input as the failed attempt's.
          assert.strictEqual(pause!.execution.replay.digest, first!.inputDigest)
          const successor = yield* context.engine.resume({ paused: running.invocation, pause: pause!, model: context.model, tools: catalog })
          assert.deepStrictEqual((yield* successor.wait).outcome, { kind: "completed" })
          const after = factsOf(yield* context.log.events("session-1"), "model_requested")
          assert.strictEqual(after.length, 2)
          assert.strictEqual(after[1]!.inputDigest, first!.inputDigest)
          assert.strictEqual(context.server.requests()[1]!.body, context.server.requests()[0]!.body)
        }),
      ),
  )

  it.live("a handoff at a retry that steering keeps from pausing lets the backoff run out, and pauses at the next step boundary with the steering", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const overloaded = mainEntry(Respond.json(503, Respond.openAiError("overloaded")))
        const context = yield* setup(
          { script: [overloaded, mainEntry(answer("First.")), mainEntry(answer("Steered."))] },
          { backoffBaseMs: 400, backoffMaxMs: 400 },
        )
        const catalog = ToolCatalog.make([])
        const running = yield* context.engine.start(input(context, "Answer.", catalog, { maxSteps: 4 }))
        yield* Effect.promise(() => context.server.exchange(0))
        // Steering queued before the handoff: the preflight at the retry does not pause without it,
        // and the reservation waits for the next step boundary (docs/engine.md §5.10).
        yield* running.steer("Also this.")
        const pause = yield* running.handoff
        assert.isDefined(pause)
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "handoff_paused", pause: pause! })
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_interrupted:retryable_failure",
          "model_requested",
          "model_completed",
          "message_steered",
          "invocation_ended:handoff_paused",
        ])
        // The retry sent the frozen request again, after the backoff ran out.
        const requested = factsOf(events, "model_requested")
        assert.strictEqual(requested[1]!.inputDigest, requested[0]!.inputDigest)
        assert.strictEqual(context.server.requests()[1]!.body, context.server.requests()[0]!.body)
        // The successor's first request carries the steering, durable before the pause.
        const successor = yield* context.engine.resume({ paused: running.invocation, pause: pause!, model: context.model, tools: catalog })
        assert.deepStrictEqual((yield* successor.wait).outcome, { kind: "completed" })
        assert.strictEqual(context.server.requests().length, 3)
        assert.include(context.server.requests()[2]!.body, "Also this.")
      }),
    ),
  )

  it.live("a host that hands off every run during a provider outage pauses the run waiting to retry at once", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const overloaded = mainEntry(Respond.json(503, Respond.openAiError("overloaded")))
        // A backoff of a minute: the test ends in time only if the pause cuts it short.
        const context = yield* setup({ script: [overloaded] }, { backoffBaseMs: 60_000, backoffMaxMs: 60_000 })
        const running = yield* context.engine.start(input(context, "Answer.", ToolCatalog.make([]), { maxSteps: 3 }))
        while (factsOf(yield* context.log.events("session-1"), "model_interrupted").length === 0) yield* Effect.sleep("5 millis")
        const closed = yield* context.engine.handOffAll
        assert.strictEqual(closed.length, 1)
        assert.strictEqual(closed[0]!.outcome, "paused")
        const result = yield* running.wait
        assert.strictEqual(result.outcome.kind, "handoff_paused")
        assert.strictEqual(result.outcome.kind === "handoff_paused" ? result.outcome.pause.remainingSteps : undefined, 3)
        assert.strictEqual(context.server.requests().length, 1)
      }),
    ),
  )
})
