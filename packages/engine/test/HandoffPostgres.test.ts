/**
 * Handoff between two engines live at the same time on one PostgreSQL log (docs/engine.md §5.10,
 * docs/architecture.md §8): engine A is handed off while a tool runs, engine B finds the pause with
 * `resumePending` and completes the run, each effect ran once, and the session is usable; then a run
 * of B goes back to A. Building B with `Engine.layer` does not recover on PostgreSQL: A's live run
 * stays unsealed and goes on. Runs when MAKA_TEST_DATABASE_URL names a server, and is skipped with a
 * printed reason otherwise.
 */
import { assert, describe, it } from "@effect/vitest"
import { EventLog } from "@maka/event-log"
import { LanguageModel } from "@maka/model"
import { History, OpenAiSse, Respond } from "@maka/testkit"
import { Ids, Tool, ToolCatalog } from "@maka/tools"
import { Context, Deferred, Effect, Fiber, Layer, Redacted, Schema } from "effect"
import * as Engine from "../src/Engine.ts"
import * as EngineError from "../src/EngineError.ts"
import { answer, echoCall, mainEntry } from "./support/compaction.ts"
import { factsOf, kinds } from "./support/harness.ts"
import { databaseUrl, echoTool, input, setup, sharedPostgresLog, type Effects, type Setup } from "./support/setup.ts"

let schemas = 0
/** A fresh schema name; every log opened on it shares it. */
const freshSchema = () => `engine_handoff_${process.pid}_${Date.now().toString(36)}_${++schemas}`


/** `echo`, plus `slow`, which waits until the test opens the next release of its list. */
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
          if (release !== undefined) yield* Deferred.await(release)
          effects.ran.push(`slow:${value}`)
          return Tool.text(`slow: ${value}`)
        }),
    }),
  ])

const slowCall = (id: string, value: string) =>
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id, name: "slow", arguments: [JSON.stringify({ value })] }] }))

/** Requests a handoff of `running` while its `slow` call waits, then lets the call finish; the sealed pause. */
const handOffDuringTool = (running: Engine.RunningInvocation, release: Deferred.Deferred<void>) =>
  Effect.gen(function* () {
    const requested = yield* Effect.forkChild(running.handoff)
    yield* Effect.sleep("20 millis")
    yield* Deferred.succeed(release, undefined)
    const pause = yield* Fiber.join(requested)
    assert.isDefined(pause)
    assert.deepStrictEqual((yield* running.wait).outcome, { kind: "handoff_paused", pause: pause! })
    return pause!
  })

/** Resolvers that serve only `model`'s route and only the catalog whose digest the pause recorded. */
const resolvers = (model: LanguageModel.LanguageModelShape, catalog: ToolCatalog.ToolCatalog, seen: Array<ReadonlyArray<string>>): Engine.ResumeResolvers => ({
  provider: (routeIdentity) => Effect.succeed(routeIdentity === model.routeIdentity ? model : undefined),
  tools: (names) => {
    seen.push(names)
    return catalog
  },
})

const options = { backoffBaseMs: 5, backoffMaxMs: 40 }

describe("handoff between two engines on one PostgreSQL log", () => {
  it.live.skipIf(databaseUrl === undefined)(
    "A is handed off mid-run, B resumes and completes it, then a run of B goes back to A; B's opening recovers nothing",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const url = databaseUrl!
          const schema = freshSchema()
          const a: Setup = yield* setup(
            {
              script: [
                mainEntry(slowCall("call-1", "a")),
                mainEntry(echoCall("call-2", "b")),
                mainEntry(answer("Done.")),
                mainEntry(answer("Free.")),
                mainEntry(slowCall("call-3", "c")),
                mainEntry(answer("Back.")),
              ],
            },
            options,
            {},
            { openLog: sharedPostgresLog(url, schema) },
          )
          const effects: Effects = { ran: [] }
          const releasesA: Array<Deferred.Deferred<void>> = []
          const releasesB: Array<Deferred.Deferred<void>> = []
          const catalogA = tools(effects, releasesA)
          const catalogB = tools(effects, releasesB)

          // A's run is live, its `slow` call waiting.
          const releaseA = yield* Deferred.make<void>()
          releasesA.push(releaseA)
          const first = yield* a.engine.start(input(a, "Run slow, then echo.", catalogA, { maxSteps: 6 }))
          yield* Effect.promise(() => a.server.exchange(0))

          // B opens the same schema through `Engine.layer`: on PostgreSQL it does not recover.
          const logB = yield* sharedPostgresLog(url, schema)
          assert.strictEqual(logB.dialect, "postgres")
          const engineB = Context.get(
            yield* Layer.build(Engine.layer(options).pipe(Layer.provide(Layer.mergeAll(Layer.succeed(EventLog.EventLog, logB), Ids.layer)))),
            Engine.Engine,
          )
          const modelB = yield* LanguageModel.make({
            kind: "openai-compatible",
            baseUrl: `${a.server.url}/v1`,
            model: "test-model",
            apiKey: Redacted.make("sk-test-secret"),
          })
          assert.strictEqual(modelB.routeIdentity, a.model.routeIdentity)
          const unfinished = yield* logB.unfinishedInvocations(100)
          assert.deepStrictEqual(unfinished, [first.invocation])
          // B sees A's live run as unsealed history: reconciliation, never session_busy, nothing written.
          // (A's own run keeps committing meanwhile: count only what B's refused run would have written.)
          const meanwhile = input(a, "Meanwhile.", catalogB, { model: modelB })
          const refused = yield* Effect.flip(engineB.start(meanwhile))
          assert.strictEqual(refused.reason._tag, "ReconciliationRequired")
          assert.strictEqual(refused.message, EngineError.UNSEALED_RUN_MESSAGE)
          const written = (yield* logB.events("session-1")).filter(
            (stored) => stored.event.invocation.invocationId === meanwhile.invocation.invocationId,
          )
          assert.deepStrictEqual(written, [])

          // A is handed off while the tool runs; the pause is sealed by A's engine.
          const pause = yield* handOffDuringTool(first, releaseA)
          assert.strictEqual(pause.remainingSteps, 5)
          assert.deepStrictEqual(yield* logB.unfinishedInvocations(100), [])

          // A host that cannot serve the route skips the pause with a reason and writes nothing; the
          // session stays reserved for the successor.
          const unserved = yield* engineB.resumePending({ provider: () => Effect.succeed(undefined), tools: () => catalogB })
          assert.strictEqual(unserved.length, 1)
          assert.isTrue("skipped" in unserved[0]!)
          assert.strictEqual((yield* logB.pendingHandoffs()).length, 1)
          const reserved = yield* Effect.flip(engineB.start(input(a, "Meanwhile.", catalogB, { model: modelB })))
          assert.strictEqual(reserved.reason._tag, "Busy")
          assert.strictEqual(reserved.message, EngineError.SESSION_RESERVED_MESSAGE)

          // B finds it and completes it.
          const seen: Array<ReadonlyArray<string>> = []
          const reports = yield* engineB.resumePending(resolvers(modelB, catalogB, seen))
          assert.strictEqual(reports.length, 1)
          const report = reports[0]!
          assert.isTrue("started" in report, JSON.stringify(report))
          const successor = "started" in report ? report.started : undefined
          assert.strictEqual(successor!.invocation.invocationId, pause.intent.successorInvocationId)
          assert.deepStrictEqual(seen, [pause.execution.tools.names])
          assert.deepStrictEqual((yield* successor!.wait).outcome, { kind: "completed" })
          assert.deepStrictEqual(effects.ran, ["slow:a", "b"])
          assert.deepStrictEqual(yield* a.log.pendingHandoffs(), [])

          // The session is usable afterwards, from either engine: A runs the next message.
          const next = yield* a.engine.run(input(a, "Next.", catalogA))
          assert.deepStrictEqual(next.outcome, { kind: "completed" })

          // B's run goes back to A.
          const releaseB = yield* Deferred.make<void>()
          releasesB.push(releaseB)
          const second = yield* engineB.start(input(a, "Run slow once more.", catalogB, { model: modelB, maxSteps: 4 }))
          yield* Effect.promise(() => a.server.exchange(4))
          const back = yield* handOffDuringTool(second, releaseB)
          assert.strictEqual(back.remainingSteps, 3)
          // Each engine names its own host generation in the intents it seals.
          assert.notStrictEqual(back.intent.hostEpoch, pause.intent.hostEpoch)
          const again = yield* a.engine.resumePending(resolvers(a.model, catalogA, []))
          assert.strictEqual(again.length, 1)
          const returned = again[0]!
          assert.isTrue("started" in returned, JSON.stringify(returned))
          assert.deepStrictEqual((yield* ("started" in returned ? returned.started.wait : Effect.die("skipped"))).outcome, { kind: "completed" })
          assert.deepStrictEqual(effects.ran, ["slow:a", "b", "slow:c"])
          assert.strictEqual(a.server.requests().length, 6)

          // Every run is sealed once, on one log both engines wrote.
          const events = yield* logB.events("session-1")
          assert.deepStrictEqual(
            factsOf(events, "invocation_opened").map((fact) => fact.input.kind),
            ["message", "handoff", "message", "message", "handoff"],
          )
          assert.deepStrictEqual(
            kinds(events).filter((kind) => kind.startsWith("invocation_ended")),
            [
              "invocation_ended:handoff_paused",
              "invocation_ended:completed",
              "invocation_ended:completed",
              "invocation_ended:handoff_paused",
              "invocation_ended:completed",
            ],
          )
          // Each call was dispatched once across both engines.
          assert.deepStrictEqual(
            factsOf(events, "tool_dispatched").map((fact) => fact.name),
            ["slow", "echo", "slow"],
          )
          assert.deepStrictEqual(yield* a.log.unfinishedInvocations(100), [])
          assert.deepStrictEqual(yield* logB.pendingHandoffs(), [])
        }),
      ),
    60_000,
  )

  it.live.skipIf(databaseUrl === undefined)(
    "when both engines resume the same pause at once, one successor opens and the other writes nothing",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const url = databaseUrl!
          const schema = freshSchema()
          const a = yield* setup(
            { script: [mainEntry(slowCall("call-1", "a")), mainEntry(echoCall("call-2", "b")), mainEntry(answer("Done."))] },
            options,
            {},
            { openLog: sharedPostgresLog(url, schema) },
          )
          const logB = yield* sharedPostgresLog(url, schema)
          const engineB = yield* Engine.make(options).pipe(Effect.provideService(EventLog.EventLog, logB), Effect.provide(Ids.layer))
          const modelB = yield* LanguageModel.make({
            kind: "openai-compatible",
            baseUrl: `${a.server.url}/v1`,
            model: "test-model",
            apiKey: Redacted.make("sk-test-secret"),
          })
          const effects: Effects = { ran: [] }
          const release = yield* Deferred.make<void>()
          const catalogA = tools(effects, [release])
          const catalogB = tools(effects, [])
          const first = yield* a.engine.start(input(a, "Run slow, then echo.", catalogA, { maxSteps: 6 }))
          yield* Effect.promise(() => a.server.exchange(0))
          const pause = yield* handOffDuringTool(first, release)
          const [fromA, fromB] = yield* Effect.all(
            [a.engine.resumePending(resolvers(a.model, catalogA, [])), engineB.resumePending(resolvers(modelB, catalogB, []))],
            { concurrency: "unbounded" },
          )
          const reports = [...fromA, ...fromB]
          const started = reports.flatMap((report) => ("started" in report ? [report.started] : []))
          const skipped = reports.flatMap((report) => ("skipped" in report ? [report.skipped] : []))
          // Exactly one successor runs; the loser either found no pause or was refused without writing.
          assert.strictEqual(started.length, 1, JSON.stringify(skipped))
          assert.isAtMost(skipped.length, 1)
          assert.strictEqual(started[0]!.invocation.invocationId, pause.intent.successorInvocationId)
          assert.deepStrictEqual((yield* started[0]!.wait).outcome, { kind: "completed" })
          assert.deepStrictEqual(effects.ran, ["slow:a", "b"])
          const events = yield* logB.events("session-1")
          assert.deepStrictEqual(
            factsOf(events, "invocation_opened").map((fact) => fact.input.kind),
            ["message", "handoff"],
          )
          assert.deepStrictEqual(yield* logB.unfinishedInvocations(100), [])
          assert.deepStrictEqual(yield* logB.pendingHandoffs(), [])
          assert.strictEqual(a.server.requests().length, 3)
        }),
      ),
    60_000,
  )

  it.live.skipIf(databaseUrl === undefined)(
    "recovery on the shared log runs only when asked: a pause survives an explicit recover, and a crashed run is sealed only then",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const url = databaseUrl!
          const schema = freshSchema()
          const a = yield* setup({ script: [mainEntry(slowCall("call-1", "a"))] }, options, {}, { openLog: sharedPostgresLog(url, schema) })
          const effects: Effects = { ran: [] }
          const release = yield* Deferred.make<void>()
          const first = yield* a.engine.start(input(a, "Run slow.", tools(effects, [release]), { maxSteps: 3 }))
          yield* Effect.promise(() => a.server.exchange(0))
          const pause = yield* handOffDuringTool(first, release)

          // A run a crashed host opened and left unsealed, on another session.
          const history = new History.History({ sessionId: "session-2" })
          const crashed = history.open({ turnId: "turn-x", runId: "run-x", invocationId: "invocation-x" })
          crashed.request()
          yield* a.log.appendBatch(history.writes)
          const logB = yield* sharedPostgresLog(url, schema)
          const engineB = Context.get(
            yield* Layer.build(Engine.layer(options).pipe(Layer.provide(Layer.mergeAll(Layer.succeed(EventLog.EventLog, logB), Ids.layer)))),
            Engine.Engine,
          )
          // Building B recovered nothing: the pause is pending and the crashed run unsealed.
          assert.strictEqual((yield* logB.pendingHandoffs()).length, 1)
          assert.deepStrictEqual(yield* logB.unfinishedInvocations(100), [crashed.invocation])
          // An explicit recover, with no other engine live, seals the crashed run and leaves the sealed pause alone.
          const report = yield* engineB.recover
          assert.deepStrictEqual(report.sealed, [{ invocation: crashed.invocation, failureClass: "host_interrupted" }])
          const pending = yield* logB.pendingHandoffs()
          assert.strictEqual(pending.length, 1)
          assert.strictEqual(pending[0]!.pause.intent.claimId, pause.intent.claimId)
          assert.deepStrictEqual(effects.ran, ["slow:a"])
        }),
      ),
    60_000,
  )
})

if (databaseUrl === undefined) {
  process.stdout.write("note: MAKA_TEST_DATABASE_URL is unset; HandoffPostgres.test.ts does not run here\n")
}
