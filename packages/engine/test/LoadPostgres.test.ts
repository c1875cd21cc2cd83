/**
 * Load on one PostgreSQL log (docs/engine.md §5.10): two engines, each with its own event-log layer
 * and connection pool on one fresh schema, drive MAKA_LOAD_SESSIONS sessions (default 50) at once,
 * each turn MAKA_LOAD_STEPS tool steps (default 3) and an answer, against the scripted server on
 * loopback. Sessions start on A or B; some are handed off mid-run to the other engine (`resume`, or
 * `resumePending` from one engine or from both at once), some start on both engines at once (one is
 * refused and writes nothing), most take a second turn on the other engine, and every session then
 * takes one more ordinary turn. Afterwards: every terminal is the expected one, every settled call's
 * effect ran exactly once, every acknowledged write is stored and nothing else is, no run is left
 * unsealed or paused, and the whole log re-appended into a fresh one is accepted with the same
 * digests. The figures (duration, sessions, steps, handoffs) are printed.
 *
 * The long setting: MAKA_LOAD_SESSIONS=500 MAKA_LOAD_STEPS=10 pnpm exec vitest run --project engine
 * test/LoadPostgres.test.ts (the timeout grows with the setting). Run once on a 2-core machine under
 * a load average of 10 (PostgreSQL 15 on the same machine): 1,400 turns, 200 handoffs (50 resumed by
 * both engines at once), 100 simultaneous starts (each refused `Busy`), 14,000 effects and 111,000
 * events in 19.7 min, 22.6 min with the checks, 1.5 GB resident; the default setting takes 25–45 s there.
 *
 * Runs when MAKA_TEST_DATABASE_URL names a server; skipped with a printed reason otherwise, except
 * under CI (CI=true), where a missing server fails the test.
 */
import { assert, describe, it } from "@effect/vitest"
import { EventLog } from "@maka/event-log"
import type { Event, Outcome } from "@maka/facts"
import * as LogTesting from "@maka/event-log/testing"
import { LanguageModel } from "@maka/model"
import { FactBuilders, ScriptedServer } from "@maka/testkit"
import { Ids } from "@maka/tools"
import { Deferred, Effect, Fiber, Redacted } from "effect"
import * as Engine from "../src/Engine.ts"
import { factsOf } from "./support/harness.ts"
import { acknowledging, makeWork, messageOf, operationKey, reappend, turnScript, type Acknowledged, type Work } from "./support/load.ts"
import { databaseUrl, sharedPostgresLog } from "./support/setup.ts"

const inCi = process.env["CI"] === "true" || process.env["CI"] === "1"

const setting = (name: string, fallback: number): number => {
  const value = Number(process.env[name] ?? fallback)
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer`)
  return value
}
const SESSIONS = setting("MAKA_LOAD_SESSIONS", 50)
const STEPS = setting("MAKA_LOAD_STEPS", 3)
const MAX_STEPS = STEPS + 2

const options = { backoffBaseMs: 5, backoffMaxMs: 40 }

/** What a session does, by its index. */
type Plan = "plain" | "handoff" | "pending" | "race" | "single"
const PLANS: ReadonlyArray<Plan> = ["plain", "handoff", "pending", "race", "single"]
const planOf = (index: number): Plan => PLANS[index % PLANS.length]!
/** A share of the `pending` sessions are resumed by both engines at once. */
const isResumedByBoth = (index: number): boolean => index % (2 * PLANS.length) === PLANS.indexOf("pending")

interface Host {
  readonly name: "A" | "B"
  readonly engine: Engine.EngineShape
  readonly model: LanguageModel.LanguageModelShape
  readonly acknowledged: Acknowledged
}

let schemas = 0
const freshSchema = () => `engine_load_${process.pid}_${Date.now().toString(36)}_${++schemas}`


/** An engine on its own log of `schema`, whose acknowledged writes are recorded. */
const host = (name: Host["name"], url: string, schema: string, server: ScriptedServer.ScriptedServer) =>
  Effect.gen(function* () {
    const acknowledged: Acknowledged = new Map()
    const log = acknowledging(yield* sharedPostgresLog(url, schema), acknowledged)
    const engine = yield* Engine.make(options).pipe(Effect.provideService(EventLog.EventLog, log), Effect.provide(Ids.layer))
    const model = yield* LanguageModel.make({
      kind: "openai-compatible",
      baseUrl: `${server.url}/v1`,
      model: "test-model",
      apiKey: Redacted.make("sk-test-secret"),
    })
    return { name, engine, model, acknowledged } satisfies Host
  })

interface Figures {
  handoffs: number
  resumedByBoth: number
  races: number
  refusals: Map<string, number>
}

/** One session's expected terminals and the invocations that must have written nothing. */
interface Expected {
  readonly sessionId: string
  readonly terminals: Array<Outcome.InvocationOutcome["kind"]>
  readonly refused: Array<string>
  readonly turns: Array<string>
}

const scenario = (url: string) =>
  Effect.gen(function* () {
    const started = Date.now()
    const schema = freshSchema()
    const server = yield* ScriptedServer.make()
    const workspace = yield* LogTesting.temporaryDirectory
    const a = yield* host("A", url, schema, server)
    const b = yield* host("B", url, schema, server)
    const other = (of: Host): Host => (of === a ? b : a)
    const work: Work = makeWork()
    const configuration = FactBuilders.configuration({ cwd: workspace, model: FactBuilders.modelBinding({ model: "test-model" }) })
    const figures: Figures = { handoffs: 0, resumedByBoth: 0, races: 0, refusals: new Map() }

    const startInput = (on: Host, sessionId: string, turn: string, suffix = ""): Engine.StartInput => {
      const id = `${sessionId}-${turn}${suffix}`
      return {
        invocation: FactBuilders.invocation({ sessionId, turnId: id, runId: id, invocationId: id }),
        model: on.model,
        configuration,
        message: { text: messageOf(sessionId, turn) },
        tools: work.catalog,
        maxSteps: MAX_STEPS,
      }
    }

    /** An ordinary turn on `on`, which completes. */
    const turn = (on: Host, expected: Expected, name: string) =>
      Effect.gen(function* () {
        server.push(...turnScript(expected.sessionId, name, STEPS))
        expected.turns.push(name)
        const running = yield* on.engine.start(startInput(on, expected.sessionId, name))
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "completed" }, `${expected.sessionId} ${name} on ${on.name}`)
        expected.terminals.push("completed")
      })

    /** Resolvers that serve only `sessionId`'s pause, from `on`. */
    const servingOnly = (on: Host, sessionId: string): Engine.ResumeResolvers => ({
      provider: (_route, _binding, paused) => Effect.succeed(paused.sessionId === sessionId ? on.model : undefined),
      tools: (_names, _digest, paused) => (paused.sessionId === sessionId ? work.catalog : undefined),
    })

    /** The successors `reports` started for `sessionId`. */
    const startedFor = (reports: ReadonlyArray<Engine.ResumeReport>, sessionId: string) =>
      reports.flatMap((report) => (report.sessionId === sessionId && "started" in report ? [report.started] : []))

    /** A first turn on `home`, handed off while its first tool runs, and completed by its successor; the successor's engine. */
    const handedOff = (home: Host, expected: Expected, index: number) =>
      Effect.gen(function* () {
        const sessionId = expected.sessionId
        server.push(...turnScript(sessionId, "first", STEPS))
        expected.turns.push("first")
        const gate = yield* work.hold(operationKey(sessionId, "first", 0))
        const running = yield* home.engine.start(startInput(home, sessionId, "first"))
        yield* Deferred.await(gate.entered)
        // Started at once, the request reserves the pause before the fork returns (it suspends only to await it).
        const requested = yield* Effect.forkChild(running.handoff, { startImmediately: true })
        yield* Deferred.succeed(gate.release, undefined)
        const pause = yield* Fiber.join(requested)
        assert.isDefined(pause, `${sessionId}: the handoff was taken`)
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "handoff_paused", pause: pause! })
        assert.strictEqual(pause!.remainingSteps, MAX_STEPS - 1)
        expected.terminals.push("handoff_paused")
        figures.handoffs++
        const away = other(home)
        let successor: Engine.RunningInvocation
        let resumedOn = away
        if (planOf(index) === "handoff") {
          successor = yield* away.engine.resume({ paused: running.invocation, pause: pause!, model: away.model, tools: work.catalog })
        } else if (isResumedByBoth(index)) {
          figures.resumedByBoth++
          const [fromA, fromB] = yield* Effect.all(
            [a.engine.resumePending(servingOnly(a, sessionId)), b.engine.resumePending(servingOnly(b, sessionId))],
            { concurrency: "unbounded" },
          )
          const successors = [...startedFor(fromA, sessionId), ...startedFor(fromB, sessionId)]
          assert.strictEqual(successors.length, 1, `${sessionId}: one successor of the pause both engines resumed`)
          successor = successors[0]!
          resumedOn = startedFor(fromA, sessionId).length === 1 ? a : b
        } else {
          const successors = startedFor(yield* away.engine.resumePending(servingOnly(away, sessionId)), sessionId)
          assert.strictEqual(successors.length, 1, `${sessionId}: resumePending started its successor`)
          successor = successors[0]!
        }
        assert.strictEqual(successor.invocation.invocationId, pause!.intent.successorInvocationId)
        assert.deepStrictEqual((yield* successor.wait).outcome, { kind: "completed" }, `${sessionId}: the successor completes`)
        expected.terminals.push("completed")
        return resumedOn
      })

    /** A first turn started on both engines at once: one is admitted and completes, the other is refused. */
    const raced = (expected: Expected) =>
      Effect.gen(function* () {
        const sessionId = expected.sessionId
        server.push(...turnScript(sessionId, "first", STEPS))
        expected.turns.push("first")
        // The admitted run waits in its first tool until both starts have answered.
        const gate = yield* work.hold(operationKey(sessionId, "first", 0))
        const [onA, onB] = yield* Effect.all(
          [Effect.result(a.engine.start(startInput(a, sessionId, "first", "-a"))), Effect.result(b.engine.start(startInput(b, sessionId, "first", "-b")))],
          { concurrency: "unbounded" },
        )
        yield* Deferred.succeed(gate.release, undefined)
        figures.races++
        const admitted = [onA, onB].flatMap((result) => (result._tag === "Success" ? [result.success] : []))
        const refusals = [onA, onB].flatMap((result) => (result._tag === "Failure" ? [result.failure] : []))
        assert.strictEqual(admitted.length, 1, `${sessionId}: one of two simultaneous starts is admitted (${refusals.map((error) => error.message)})`)
        assert.strictEqual(refusals.length, 1)
        const refusal = refusals[0]!
        // The log refuses the second opening (`Busy`); a start that reads the winner's opening first
        // finds another host's unsealed run and asks for reconciliation, writing nothing either way.
        assert.include(["Busy", "ReconciliationRequired"], refusal.reason._tag, `${sessionId}: ${refusal.message}`)
        const label = `${refusal.reason._tag}: ${refusal.message}`
        figures.refusals.set(label, (figures.refusals.get(label) ?? 0) + 1)
        const winner = admitted[0]!
        expected.refused.push(winner.invocation.invocationId === `${sessionId}-first-a` ? `${sessionId}-first-b` : `${sessionId}-first-a`)
        assert.deepStrictEqual((yield* winner.wait).outcome, { kind: "completed" })
        expected.terminals.push("completed")
        return winner.invocation.invocationId.endsWith("-a") ? a : b
      })

    const drive = (index: number) =>
      Effect.gen(function* () {
        const expected: Expected = { sessionId: `load-${index}`, terminals: [], refused: [], turns: [] }
        const home = index % 2 === 0 ? a : b
        switch (planOf(index)) {
          case "plain":
            yield* turn(home, expected, "first")
            yield* turn(other(home), expected, "second")
            break
          case "single":
            yield* turn(home, expected, "first")
            break
          case "handoff":
          case "pending": {
            const resumedOn = yield* handedOff(home, expected, index)
            yield* turn(other(resumedOn), expected, "second")
            break
          }
          case "race": {
            const winner = yield* raced(expected)
            yield* turn(other(winner), expected, "second")
            break
          }
        }
        return expected
      })

    const sessions = yield* Effect.forEach(Array.from({ length: SESSIONS }, (_, index) => index), drive, { concurrency: "unbounded" })
    // No session is stuck: each admits one more ordinary message run, all at once, on the engine it did not start on.
    yield* Effect.forEach(sessions, (expected, index) => turn(index % 2 === 0 ? b : a, expected, "final"), { concurrency: "unbounded", discard: true })
    const driven = Date.now() - started

    // Everything is read back through a third connection pool.
    const log = yield* sharedPostgresLog(url, schema)
    assert.deepStrictEqual(yield* log.unfinishedInvocations(100), [])
    assert.deepStrictEqual(yield* log.pendingHandoffs(), [])
    const all: Array<Event.StoredEvent> = []
    let settledCalls = 0
    for (const expected of sessions) {
      const sessionId = expected.sessionId
      const events = yield* log.events(sessionId)
      all.push(...events)
      assert.deepStrictEqual(
        factsOf(events, "invocation_ended").map((fact) => fact.outcome.kind),
        expected.terminals,
        `${sessionId}: terminals`,
      )
      for (const refused of expected.refused) {
        assert.deepStrictEqual(events.filter((stored) => stored.event.invocation.invocationId === refused), [], `${sessionId}: the refused start wrote nothing`)
      }
      // Each invocation is opened first, sealed last, once each, with every request completed and every call settled once.
      const byInvocation = new Map<string, Array<Event.StoredEvent>>()
      for (const stored of events) {
        const own = byInvocation.get(stored.event.invocation.invocationId) ?? []
        own.push(stored)
        byInvocation.set(stored.event.invocation.invocationId, own)
      }
      assert.strictEqual(byInvocation.size, expected.terminals.length, `${sessionId}: invocations`)
      for (const [invocationId, own] of byInvocation) {
        assert.strictEqual(own[0]!.event.fact.kind, "invocation_opened", invocationId)
        assert.strictEqual(own[own.length - 1]!.event.fact.kind, "invocation_ended", invocationId)
        assert.strictEqual(factsOf(own, "invocation_opened").length, 1, invocationId)
        assert.strictEqual(factsOf(own, "invocation_ended").length, 1, invocationId)
        assert.strictEqual(factsOf(own, "tool_rejected").length, 0, invocationId)
        assert.strictEqual(factsOf(own, "model_interrupted").length, 0, invocationId)
        assert.strictEqual(factsOf(own, "model_requested").length, factsOf(own, "model_completed").length, invocationId)
      }
      // Each settled call matches exactly one effect of its operation, and each dispatched call settled once.
      const dispatched = new Map(factsOf(events, "tool_dispatched").map((fact) => [fact.operationId, fact] as const))
      const settled = factsOf(events, "tool_settled")
      assert.strictEqual(new Set(settled.map((fact) => fact.operationId)).size, settled.length, `${sessionId}: one settlement per operation`)
      assert.strictEqual(settled.length, dispatched.size, `${sessionId}: every dispatched call settled`)
      for (const fact of settled) {
        assert.strictEqual(fact.outcome.kind, "succeeded")
        const call = dispatched.get(fact.operationId)
        assert.isDefined(call, `${sessionId}: ${fact.operationId} was dispatched`)
        const key = (call!.input as { readonly key: string }).key
        assert.strictEqual(work.effects.get(key), 1, `${sessionId}: the effect of ${key} ran once`)
      }
      settledCalls += settled.length
      // Every turn took all its steps: one effect per step.
      assert.deepStrictEqual(
        [...dispatched.values()].map((fact) => (fact.input as { readonly key: string }).key).sort(),
        expected.turns.flatMap((name) => Array.from({ length: STEPS }, (_, step) => operationKey(sessionId, name, step))).sort(),
      )
      // The log reads the session's context and finds its history safe.
      const context = yield* log.readModelContext(sessionId)
      assert.isDefined(context)
      yield* log.checkHistorySafety(sessionId)
    }
    // No effect ran without a settlement: the effects are exactly the settled calls.
    assert.strictEqual(work.effects.size, settledCalls)
    assert.strictEqual([...work.effects.values()].reduce((sum, count) => sum + count, 0), settledCalls)

    // Every write either engine's store acknowledged is stored under its sequence, and nothing else is.
    all.sort((left, right) => left.sequence - right.sequence)
    const acknowledged = new Map(a.acknowledged)
    for (const [sequence, id] of b.acknowledged) {
      assert.isTrue(!acknowledged.has(sequence) || acknowledged.get(sequence) === id, `sequence ${sequence} acknowledged to both engines for different events`)
      acknowledged.set(sequence, id)
    }
    assert.deepStrictEqual(
      all.map((stored) => [stored.sequence, stored.event.id]),
      [...acknowledged].sort(([left], [right]) => left - right),
    )

    // Every model request was scripted and answered, each once.
    const turns = sessions.reduce((sum, expected) => sum + expected.turns.length, 0)
    assert.strictEqual(server.requests().length, turns * (STEPS + 1))
    assert.isTrue(server.exchanges().every((exchange) => exchange.matched && exchange.status === 200))

    // The whole log, re-appended in order into a fresh one, is accepted with the same sequences and digests.
    const { fresh, sequences, filled } = yield* reappend(log, all)
    assert.deepStrictEqual(sequences, all.map((stored) => stored.sequence))
    for (const expected of sessions) {
      const original = yield* log.prefix({ kind: "session", id: expected.sessionId })
      const copy = yield* fresh.prefix({ kind: "session", id: expected.sessionId })
      assert.strictEqual(copy.digest, original.digest, expected.sessionId)
    }

    const refusals = [...figures.refusals].map(([label, count]) => `${count}× ${label}`).join("; ")
    process.stdout.write(
      `load: ${SESSIONS} sessions × ${STEPS} steps on two engines in ${driven} ms (${Date.now() - started} ms with the checks): ` +
        `${turns} turns, ${figures.handoffs} handoffs (${figures.resumedByBoth} resumed by both engines at once), ` +
        `${figures.races} simultaneous starts (${refusals}), ${settledCalls} effects, ${all.length} events, ${filled} sequences never committed\n`,
    )
  })

describe("load on one PostgreSQL log", () => {
  it.live.skipIf(databaseUrl === undefined && !inCi)(
    `two engines drive ${SESSIONS} sessions × ${STEPS} steps at once with handoffs between them: nothing lost, nothing doubled, no session stuck`,
    () =>
      databaseUrl === undefined
        ? Effect.sync(() => assert.fail("MAKA_TEST_DATABASE_URL is unset: under CI the load suite needs the PostgreSQL server"))
        : Effect.scoped(scenario(databaseUrl)),
    Math.max(120_000, SESSIONS * STEPS * 400),
  )
})

if (databaseUrl === undefined) {
  process.stdout.write(
    inCi
      ? "note: MAKA_TEST_DATABASE_URL is unset under CI; LoadPostgres.test.ts fails\n"
      : "note: MAKA_TEST_DATABASE_URL is unset; LoadPostgres.test.ts does not run here\n",
  )
}
