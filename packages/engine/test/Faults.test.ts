/**
 * No failure wedges a session (docs/engine.md §5.3, scenarios 18 and 19): a commit of the scripted
 * three-step tool loop is refused, made uncertain (landed or lost), or starts an outage, at every
 * commit point in turn; afterwards the same engine admits the next run (after `outcome_unknown`, one
 * with `allowPriorUnknown`), no effect ran twice, and `recover()` twice writes nothing the second time.
 */
import { assert, describe, it } from "@effect/vitest"
import { Limits, type Event } from "@maka/facts"
import { EventLog, EventLogError } from "@maka/event-log"
import * as LogTesting from "@maka/event-log/testing"
import { LanguageModel, ModelError } from "@maka/model"
import { Ids, Tool, ToolCatalog } from "@maka/tools"
import { History, OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Cause, Context, Effect, Exit, Layer, Redacted, Schema, type Scope, Stream } from "effect"
import * as path from "node:path"
import * as Engine from "../src/Engine.ts"
import * as EngineError from "../src/EngineError.ts"
import { kinds } from "./support/harness.ts"
import { faulty, toolLoop, type FaultMode, type Faulty } from "./support/faults.ts"
import { catalog, databaseUrl, echoTool, input, postgresLog, setup, type Effects, type Setup } from "./support/setup.ts"

const isUnknownTerminal = (stored: Event.StoredEvent) =>
  stored.event.fact.kind === "invocation_ended" &&
  stored.event.fact.outcome.kind === "failed" &&
  stored.event.fact.outcome.class === "outcome_unknown"

interface Faulted {
  readonly context: Setup
  readonly faults: Faulty
  readonly effects: Effects
}

/** An engine over a SQLite log (or `openLog`'s) whose commit `target` fails as `mode`. */
const faultedSetup = (target: string | undefined, mode: FaultMode, openLog?: Effect.Effect<Setup["log"], unknown, Scope.Scope>) =>
  Effect.gen(function* () {
    let faults: Faulty | undefined
    const context = yield* setup({ script: toolLoop }, { backoffBaseMs: 5, backoffMaxMs: 40 }, {}, {
      wrapLog: (log) => {
        faults = faulty(log, target, mode)
        return faults.log
      },
      ...(openLog === undefined ? {} : { openLog }),
    })
    return { context, faults: faults!, effects: { ran: [] } } satisfies Faulted
  })

/** The tool loop run to its end on a disk that fills up at its terminal: the run ends, its terminal unwritten. */
const terminalOutage = Effect.gen(function* () {
  const faulted = yield* faultedSetup("invocation_ended#1", "outage")
  const { wait } = yield* runLoop(faulted)
  assert.isTrue(Exit.isFailure(wait))
  assert.deepStrictEqual(faulted.effects.ran, ["a", "b", "c"])
  return faulted
})

/** Runs the tool loop; the start may fail (a faulted opening), the run may fail to seal. */
const runLoop = ({ context, effects }: Faulted) =>
  Effect.map(Effect.exit(context.engine.run(input(context, "Loop.", catalog(effects)))), (wait) => ({ wait }))

/**
 * The session is usable again: the next ordinary message completes, or, when the failed run is
 * sealed `outcome_unknown`, is refused naming `allowPriorUnknown` and an explicit one completes.
 * Recovery then has nothing left to seal, and a second pass writes nothing.
 */
const admitsNext = ({ context, faults, effects }: Faulted, log: EventLog.EventLogShape) =>
  Effect.gen(function* () {
    faults.heal()
    const next = yield* Effect.exit(context.engine.run(input(context, "Next.", catalog(effects))))
    const afterNext = yield* log.events("session-1")
    if (Exit.isSuccess(next)) {
      assert.deepStrictEqual(next.value.outcome, { kind: "completed" })
    } else {
      const error = yield* Effect.flip(Effect.suspend(() => next))
      assert.strictEqual(error.reason._tag, "ReconciliationRequired", `${error.message}`)
      assert.include(error.message, "allowPriorUnknown")
      assert.isTrue(afterNext.some(isUnknownTerminal), `refused without an outcome_unknown seal: ${error.message}`)
      const explicit = yield* context.engine.run(
        input(context, "Did it happen?", catalog(effects), { allowPriorUnknown: true }),
      )
      assert.deepStrictEqual(explicit.outcome, { kind: "completed" })
    }
    assert.deepStrictEqual(yield* log.unfinishedInvocations(100), [])
    yield* context.engine.recover
    const before = yield* log.events("session-1")
    assert.deepStrictEqual(yield* context.engine.recover, { sealed: [], count: 0, unsealed: [] })
    assert.strictEqual((yield* log.events("session-1")).length, before.length)
    // No effect ran twice.
    assert.deepStrictEqual(effects.ran.filter((value, index) => effects.ran.indexOf(value) !== index), [])
  })

/** The commit labels of a clean run of the loop. */
const cleanLabels = Effect.scoped(
  Effect.gen(function* () {
    const faulted = yield* faultedSetup(undefined, "refuse")
    const { wait } = yield* runLoop(faulted)
    assert.isTrue(Exit.isSuccess(wait))
    assert.deepStrictEqual(faulted.effects.ran, ["a", "b", "c"])
    return faulted.faults.labels.filter((label) => label !== "model_observed@later")
  }),
)

describe("refused and uncertain commits leave a usable session", () => {
  it.live("a completion lost with its first dispatch interrupts its request, seals event_commit, and the session goes on", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The completion rides its step's first dispatch (docs/engine.md §5.4); the commit is lost.
        const faulted = yield* faultedSetup("tool_dispatched#1", "unknown-lost")
        const { wait } = yield* runLoop(faulted)
        assert.isTrue(faulted.faults.fired())
        assert.isTrue(Exit.isSuccess(wait) && wait.value.outcome.kind === "failed" && wait.value.outcome.class === "event_commit")
        const events = yield* faulted.context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_interrupted:failed",
          "invocation_ended:failed:event_commit",
        ])
        yield* admitsNext(faulted, faulted.context.log)
      }),
    ))

  it.live("a refused tool_dispatched commit runs no effect, rejects the call cancelled, and seals event_commit (scenario 18)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The refused batch carries the step's completion: it is committed on its own, the dispatch not.
        const faulted = yield* faultedSetup("tool_dispatched#2", "refuse")
        const { wait } = yield* runLoop(faulted)
        assert.isTrue(Exit.isSuccess(wait) && wait.value.outcome.kind === "failed" && wait.value.outcome.class === "event_commit")
        assert.deepStrictEqual(faulted.effects.ran, ["a"])
        const events = yield* faulted.context.log.events("session-1")
        assert.deepStrictEqual(kinds(events).slice(-5), [
          "model_requested",
          "model_completed",
          "tool_rejected:cancelled",
          "tool_rejected:cancelled",
          "invocation_ended:failed:event_commit",
        ])
        yield* admitsNext(faulted, faulted.context.log)
      }),
    ))

  it.live("a refused request commits the settlement that rode it on its own, and seals event_commit (docs/engine.md §5.4)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The second request carries the first step's settlement; the store refuses the batch.
        const faulted = yield* faultedSetup("model_requested#2", "refuse")
        const { wait } = yield* runLoop(faulted)
        assert.isTrue(faulted.faults.fired())
        assert.isTrue(Exit.isSuccess(wait) && wait.value.outcome.kind === "failed" && wait.value.outcome.class === "event_commit")
        assert.deepStrictEqual(faulted.effects.ran, ["a"])
        const events = yield* faulted.context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_settled:succeeded",
          "invocation_ended:failed:event_commit",
        ])
        // The settlement was committed on its own, right after the refusal: before the terminal's batch.
        const labels = faulted.faults.labels.filter((label) => !label.startsWith("model_observed"))
        assert.deepStrictEqual(labels.slice(-3), ["model_requested#2", "tool_settled#1", "invocation_ended#1"])
        yield* admitsNext(faulted, faulted.context.log)
      }),
    ))

  it.live("a dispatch that landed while its commit was reported uncertain seals outcome_unknown", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const faulted = yield* faultedSetup("tool_dispatched#2", "unknown-landed")
        const { wait } = yield* runLoop(faulted)
        assert.isTrue(Exit.isSuccess(wait) && wait.value.outcome.kind === "failed" && wait.value.outcome.class === "outcome_unknown")
        assert.deepStrictEqual(faulted.effects.ran, ["a"])
        const events = yield* faulted.context.log.events("session-1")
        assert.deepStrictEqual(kinds(events).slice(-4), [
          "model_completed",
          "tool_dispatched",
          "tool_rejected:cancelled",
          "invocation_ended:failed:outcome_unknown",
        ])
        yield* admitsNext(faulted, faulted.context.log)
      }),
    ))

  it.live("a refused tool_rejected commit rejects the step's remaining calls cancelled before the seal", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The refused batch carries the completion: it is committed on its own, the rejection not.
        const faulted = yield* faultedSetup("tool_rejected#1", "refuse")
        const { context, effects } = faulted
        // `nope` is no tool of the catalog: its `unavailable` rejection is the refused commit.
        const model = yield* scriptedModel(
          OpenAiSse.response({
            toolCalls: [
              { id: "call-n", name: "nope", arguments: ["{}"] },
              { id: "call-x", name: "echo", arguments: ['{"value":"x"}'] },
            ],
          }),
        )
        const result = yield* context.engine.run(input(context, "Loop.", catalog(effects), { model }))
        assert.isTrue(faulted.faults.fired())
        assert.isTrue(result.outcome.kind === "failed" && result.outcome.class === "event_commit")
        assert.deepStrictEqual(effects.ran, [])
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_rejected:cancelled",
          "tool_rejected:cancelled",
          "invocation_ended:failed:event_commit",
        ])
        yield* admitsNext(faulted, context.log)
      }),
    ))

  it.live("a refused length batch interrupts its request and the session goes on", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // A `length` completion commits at once with the rejections of its calls.
        const faulted = yield* faultedSetup("tool_rejected#1", "refuse")
        const { context, effects } = faulted
        const result = yield* context.engine.run(input(context, "Loop.", catalog(effects), {
            model: yield* scriptedModel(
              OpenAiSse.response({ toolCalls: [{ id: "call-x", name: "echo", arguments: ['{"value":"x"}'] }], finishReason: "length" }),
            ),
          }))
        assert.isTrue(result.outcome.kind === "failed" && result.outcome.class === "event_commit")
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_interrupted:failed",
          "invocation_ended:failed:event_commit",
        ])
        assert.deepStrictEqual(effects.ran, [])
        yield* admitsNext(faulted, context.log)
      }),
    ))
})

describe("unknown outcomes and unwritten terminals", () => {
  it.live("a settle whose commit is lost rejects the step's later calls and seals outcome_unknown (scenario 19)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // `b`'s settlement rides the dispatch of the step's next call; that commit is lost.
        const faulted = yield* faultedSetup("tool_dispatched#3", "unknown-lost")
        const { wait } = yield* runLoop(faulted)
        assert.isTrue(Exit.isSuccess(wait) && wait.value.outcome.kind === "failed" && wait.value.outcome.class === "outcome_unknown")
        assert.deepStrictEqual(faulted.effects.ran, ["a", "b"])
        const events = yield* faulted.context.log.events("session-1")
        assert.deepStrictEqual(kinds(events).slice(-4), [
          "model_completed",
          "tool_dispatched",
          "tool_rejected:cancelled",
          "invocation_ended:failed:outcome_unknown",
        ])
        const refused = yield* Effect.flip(faulted.context.engine.start(input(faulted.context, "Next.", catalog(faulted.effects))))
        assert.strictEqual(refused.message, EngineError.PRIOR_UNKNOWN_MESSAGE)
        yield* admitsNext(faulted, faulted.context.log)
      }),
    ))

  it.live("a tool that cannot tell its outcome ends the loop with outcome_unknown (scenario 19, engine level)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const faulted = yield* faultedSetup(undefined, "refuse")
        const { context, effects } = faulted
        const unsure = Tool.make({
          name: "unsure",
          description: "Cannot tell whether it acted.",
          input: Schema.Struct({ value: Schema.String }),
          semantics: "parallel",
          execute: () => Effect.fail(new Tool.ToolOutcomeUnknown({ message: "the remote side went silent" })),
        })
        const model = yield* scriptedModel(
          OpenAiSse.response({
            toolCalls: [
              { id: "call-u", name: "unsure", arguments: ['{"value":"u"}'] },
              { id: "call-x", name: "echo", arguments: ['{"value":"x"}'] },
            ],
          }),
        )
        const result = yield* context.engine.run(
          input(context, "Loop.", ToolCatalog.make([unsure, echoTool(effects)]), { model }),
        )
        assert.strictEqual(result.outcome.kind === "failed" ? result.outcome.class : result.outcome.kind, "outcome_unknown")
        assert.deepStrictEqual(effects.ran, [])
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_rejected:cancelled",
          "invocation_ended:failed:outcome_unknown",
        ])
        assert.strictEqual(context.server.requests().length, 0)
        yield* admitsNext(faulted, context.log)
      }),
    ))

  it.live("a terminal lost with its connection is written at once by a second commit, and the run's wait reports it", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The terminal's commit is lost (nothing written, outcome unknown); the next commit goes through.
        const faulted = yield* faultedSetup("invocation_ended#1", "unknown-lost")
        const running = yield* faulted.context.engine.start(input(faulted.context, "Loop.", catalog(faulted.effects)))
        const seen = yield* Stream.runCollect(running.events)
        const wait = yield* Effect.exit(running.wait)
        assert.isTrue(faulted.faults.fired())
        // The caller is told the terminal the log holds, not that none could be written; the run's
        // events end with it too.
        const sealedLater = { kind: "failed", class: "event_commit", message: EngineError.SEALED_LATER_MESSAGE } as const
        assert.deepStrictEqual(Exit.isSuccess(wait) ? wait.value.outcome : String(wait), sealedLater)
        assert.deepStrictEqual(Array.from(seen).at(-1)?.event.fact, { kind: "invocation_ended", outcome: sealedLater })
        const { context } = faulted
        // Sealed already: no next start, no recover() needed, nothing left unfinished.
        assert.deepStrictEqual(yield* context.log.unfinishedInvocations(10), [])
        const terminals = (yield* context.log.events("session-1")).flatMap((stored) =>
          stored.event.fact.kind === "invocation_ended" ? [stored.event.fact.outcome] : [],
        )
        assert.deepStrictEqual(terminals, [{ kind: "failed", class: "event_commit", message: EngineError.SEALED_LATER_MESSAGE }])
        yield* admitsNext(faulted, context.log)
      }),
    ))

  it.live("a terminal the full disk refuses is sealed by the same engine once space is back, naming no other host", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const faulted = yield* terminalOutage
        const { context, effects } = faulted
        assert.strictEqual((yield* context.log.unfinishedInvocations(10)).length, 1)
        // Still full: the next start says what happened, and writes nothing.
        const before = (yield* context.log.events("session-1")).length
        const refused = yield* Effect.flip(context.engine.start(input(context, "Next.", catalog(effects))))
        assert.strictEqual(refused.reason._tag, "ReconciliationRequired")
        assert.strictEqual(refused.message, EngineError.UNWRITTEN_TERMINAL_MESSAGE)
        assert.notInclude(refused.message, "another host")
        assert.strictEqual((yield* context.log.events("session-1")).length, before)
        // Space is back: the next start seals the run and proceeds, without a recover() call.
        faulted.faults.heal()
        const next = yield* context.engine.run(input(context, "Next.", catalog(effects)))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        const terminals = events.flatMap((stored) => (stored.event.fact.kind === "invocation_ended" ? [stored.event.fact.outcome] : []))
        assert.deepStrictEqual(terminals, [
          { kind: "failed", class: "event_commit", message: EngineError.SEALED_LATER_MESSAGE },
          { kind: "completed" },
        ])
        assert.deepStrictEqual(yield* context.engine.recover, { sealed: [], count: 0, unsealed: [] })
      }),
    ))

  it.live("a first commit of unknown outcome, which carried the opening: the opening is replayed, and the run sealed at once", () =>
    Effect.gen(function* () {
      const expected = {
        "unknown-landed": ["invocation_opened", "model_requested", "model_interrupted:failed", "invocation_ended:failed:event_commit"],
        "unknown-lost": ["invocation_opened", "invocation_ended:failed:event_commit"],
      } as const
      for (const mode of ["unknown-landed", "unknown-lost"] as const) {
        yield* Effect.scoped(
          Effect.gen(function* () {
            const faulted = yield* faultedSetup("model_requested#1", mode)
            const { wait } = yield* runLoop(faulted)
            // Admitted (the opening landed, or lands now) and sealed from what landed: nothing is left open.
            assert.isTrue(Exit.isSuccess(wait), `${mode}: ${String(wait)}`)
            if (Exit.isSuccess(wait)) assert.strictEqual(wait.value.outcome.kind === "failed" ? wait.value.outcome.class : "", "event_commit")
            assert.deepStrictEqual(kinds(yield* faulted.context.log.events("session-1")), [...expected[mode]], mode)
            assert.deepStrictEqual(yield* faulted.context.log.unfinishedInvocations(10), [])
          }),
        )
      }
    }))

  it.live("a continuation checked before the engine wrote its run's owed terminal is told so; continueRun writes it first", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const faulted = yield* terminalOutage
        const { context, effects } = faulted
        const events = yield* context.log.events("session-1")
        const source = events[0]!.event.invocation
        const continuation: Engine.ContinueInput = {
          source,
          invocation: { sessionId: "session-1", turnId: "continued-turn", runId: "continued-run", invocationId: "continued-invocation" },
          model: context.model,
          configuration: (events[0]!.event.fact as { configuration: Engine.ContinueInput["configuration"] }).configuration,
          tools: catalog(effects),
        }
        // The check writes nothing, and says the terminal is this engine's to write, not another host's.
        faulted.faults.heal()
        const checked = yield* Effect.flip(context.engine.checkContinuation(continuation))
        assert.strictEqual(checked.reason._tag, "ReconciliationRequired")
        assert.strictEqual(checked.message, EngineError.UNWRITTEN_TERMINAL_CHECK_MESSAGE)
        assert.notInclude(checked.message, "another host")
        assert.strictEqual((yield* context.log.events("session-1")).length, events.length)
        // continueRun writes the owed terminal, then claims the sealed run's boundary: its answer rode
        // the terminal's commit and was never written, so the run ends with its tool results.
        const running = yield* context.engine.continueRun(continuation)
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "completed" })
        const after = yield* context.log.events("session-1")
        const terminal = after.findIndex((stored) => stored.event.fact.kind === "invocation_ended")
        assert.deepStrictEqual(after[terminal]!.event.fact, {
          kind: "invocation_ended",
          outcome: { kind: "failed", class: "event_commit", message: EngineError.SEALED_LATER_MESSAGE },
        })
        const opening = after[terminal + 1]!.event
        assert.strictEqual(opening.invocation.invocationId, "continued-invocation")
        assert.strictEqual(opening.fact.kind === "invocation_opened" ? opening.fact.input.kind : undefined, "continuation")
        assert.deepStrictEqual(effects.ran, ["a", "b", "c"])
      }),
    ))

  it.live("recovery reports an invocation it cannot seal and seals the others; Engine.layer still opens the log", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const directory = yield* LogTesting.temporaryDirectory
        const file = path.join(directory, "events.sqlite")
        const bad = new History.History({ sessionId: "session-bad", firstId: 1 })
        const badRun = bad.open({ turnId: "bad-turn", runId: "bad-run", invocationId: "bad-invocation" })
        badRun.request()
        const good = new History.History({ sessionId: "session-good", firstId: 1_000 })
        const goodRun = good.open({ turnId: "good-turn", runId: "good-run", invocationId: "good-invocation" })
        goodRun.request()
        const raw = Context.get(yield* Layer.build(EventLog.layerSqlite({ path: file })), EventLog.EventLog)
        yield* raw.appendBatch(bad.writes)
        yield* raw.appendBatch(good.writes)
        // Every write of session-bad is refused, as a store refuses an invocation it cannot take.
        const refusing: EventLog.EventLogShape = {
          ...raw,
          appendBatch: (writes, complete) =>
            writes.some((write) => write.event.invocation.sessionId === "session-bad")
              ? Effect.fail(EventLogError.invalidTransition("this invocation cannot be sealed (injected)"))
              : raw.appendBatch(writes, complete),
        }
        const engine = Context.get(
          yield* Layer.build(
            Engine.layer().pipe(Layer.provide(Layer.mergeAll(Layer.succeed(EventLog.EventLog, refusing), Ids.layer))),
          ),
          Engine.Engine,
        )
        assert.deepStrictEqual(yield* raw.unfinishedInvocations(10), [badRun.invocation])
        const report = yield* engine.recover
        assert.deepStrictEqual(report.sealed, [])
        assert.deepStrictEqual(
          report.unsealed.map((item) => item.invocation),
          [badRun.invocation],
        )
        assert.include(report.unsealed[0]!.message, "cannot be sealed")
        assert.deepStrictEqual(
          kinds(yield* raw.events("session-good")).slice(-2),
          ["model_interrupted:failed", "invocation_ended:failed:host_interrupted"],
        )
      }),
    ))
})

describe("a model output over the event limit", () => {
  // 17 × 64 KiB of text: every observation fits an event, the completion (over 1 MiB) does not. One
  // tool call's input of 33 × 64 KiB: its own observation is over the limit too.
  const piece = "x".repeat(64 * 1024)
  const quoted = `"${"y".repeat(64 * 1024)}"`
  it.live.each([
    { output: "a long text", response: OpenAiSse.response({ text: Array.from({ length: 17 }, () => piece) }) },
    {
      output: "one tool call's input",
      response: OpenAiSse.response({
        toolCalls: [{ id: "call-1", name: "list_files", arguments: ['{"items":[', ...Array.from({ length: 33 }, (_, index) => (index === 0 ? quoted : `,${quoted}`)), "]}"] }],
      }),
    },
  ])("$output: interrupts its request failed and seals model_adapter with the event-limit message, nothing dispatched; the session goes on", ({ response }) =>
    Effect.scoped(
      Effect.gen(function* () {
        const faulted = yield* faultedSetup(undefined, "refuse")
        const { context, effects } = faulted
        const model = yield* scriptedModel(response)
        const result = yield* context.engine.run(input(context, "Say a lot.", catalog(effects), { model }))
        assert.deepStrictEqual(result.outcome, {
          kind: "failed",
          class: "model_adapter",
          message: ModelError.adapter("model output exceeds event limit").message,
        })
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_interrupted:failed",
          "invocation_ended:failed:model_adapter",
        ])
        assert.deepStrictEqual(effects.ran, [])
        yield* admitsNext(faulted, context.log)
      }),
    ))
})

describe("a model step wider than a step may run", () => {
  it.live("interrupts its request failed and seals model_adapter, nothing dispatched; the session goes on", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const faulted = yield* faultedSetup(undefined, "refuse")
        const { context, effects } = faulted
        const calls = Array.from({ length: Limits.MAX_TOOL_CALLS_PER_STEP + 1 }, (_, index) => ({ id: `call-${index}`, name: "list_files", arguments: ["{}"] }))
        const model = yield* scriptedModel(OpenAiSse.response({ toolCalls: calls }))
        const result = yield* context.engine.run(input(context, "Look everywhere.", catalog(effects), { model }))
        assert.deepStrictEqual(result.outcome, {
          kind: "failed",
          class: "model_adapter",
          message: ModelError.adapter(`model output has ${Limits.MAX_TOOL_CALLS_PER_STEP + 1} tool calls; a step runs at most ${Limits.MAX_TOOL_CALLS_PER_STEP}`).message,
        })
        assert.deepStrictEqual(kinds(yield* context.log.events("session-1")), [
          "invocation_opened",
          "model_requested",
          "model_interrupted:failed",
          "invocation_ended:failed:model_adapter",
        ])
        assert.deepStrictEqual(effects.ran, [])
        yield* admitsNext(faulted, context.log)
      }),
    ))
})

/** A model on its own scripted server that answers its first request with `response`. */
const scriptedModel = (response: ReturnType<typeof OpenAiSse.response>) =>
  Effect.gen(function* () {
    const server = yield* ScriptedServer.make({ script: [Respond.sse(response)] })
    return yield* LanguageModel.make({
      kind: "openai-compatible",
      baseUrl: `${server.url}/v1`,
      model: "test-model",
      apiKey: Redacted.make("sk-test-secret"),
    })
  })

const MODES: ReadonlyArray<FaultMode> = ["refuse", "unknown-landed", "unknown-lost", "outage"]

/** Every commit point of the loop, in every fault mode, on the log `openLog` opens (SQLite when absent). */
const everyCommitPoint = (openLog?: Effect.Effect<Setup["log"], unknown, Scope.Scope>) =>
  Effect.gen(function* () {
    const labels = yield* cleanLabels
    // Two commits per tool step (docs/engine.md §5.4): the request with the settlements before it (the
    // first with the opening, docs/engine.md §5.3), and the completion with the first dispatch; a later
    // dispatch of the step carries the settlement before it.
    assert.deepStrictEqual(
      labels.filter((label) => !label.startsWith("model_observed")),
      [
        "model_requested#1",
        "tool_dispatched#1",
        "model_requested#2",
        "tool_dispatched#2",
        "tool_dispatched#3",
        "model_requested#3",
        "invocation_ended#1",
      ],
    )
    for (const label of labels) {
      for (const mode of MODES) {
        yield* Effect.scoped(
          Effect.gen(function* () {
            const faulted = yield* faultedSetup(label, mode, openLog)
            const { wait } = yield* runLoop(faulted)
            assert.isTrue(faulted.faults.fired(), `${label} ${mode} never fired: ${faulted.faults.labels.join(" ")} ${String(wait)}`)
            // A sealed run names the store failure (or the unknown outcome it left): never a bug; and
            // success only where the terminal's own commit landed though its outcome was unknown. What
            // the run reports is the terminal the log holds.
            if (Exit.isSuccess(wait)) {
              const outcome = wait.value.outcome
              const ending = outcome.kind === "failed" ? outcome.class : outcome.kind
              const landed = label === "invocation_ended#1" && mode === "unknown-landed"
              assert.include(landed ? ["completed"] : ["event_commit", "outcome_unknown"], ending, `${label} ${mode}`)
              const logged = (yield* faulted.context.log.events("session-1")).flatMap((stored) =>
                stored.event.fact.kind === "invocation_ended" && stored.event.invocation.invocationId === wait.value.invocation.invocationId
                  ? [stored.event.fact.outcome]
                  : [],
              )
              assert.deepStrictEqual(logged, [outcome], `${label} ${mode}`)
            } else {
              // A run whose terminal could not be written fails with the store's error, as it is.
              const error = Cause.squash(wait.cause)
              assert.instanceOf(error, EngineError.EngineError, `${label} ${mode}: ${String(error)}`)
              assert.include(["Commit", "Store"], (error as EngineError.EngineError).reason._tag, `${label} ${mode}`)
              assert.include(error.message, "(injected)", `${label} ${mode}`)
            }
            yield* admitsNext(faulted, faulted.context.log)
          }),
        ).pipe(Effect.tapCause(() => Effect.sync(() => console.error(`failed at ${label} ${mode}`))))
      }
    }
  })

describe("an observation commit that fails", () => {
  // A paced answer: its first observation commits on its own (group commit), before the completion.
  it.live.each(["refuse", "unknown-lost", "unknown-landed"] as const)(
    "(%s) interrupts its request, seals event_commit, and the session goes on",
    (mode) =>
      Effect.scoped(
        Effect.gen(function* () {
          let faults: Faulty | undefined
          const context = yield* setup(
            {
              script: [
                Respond.sse(Respond.withDelay(OpenAiSse.response({ text: ["One ", "two ", "three ", "four."] }), 30)),
                Respond.sse(OpenAiSse.response({ text: ["Next done."] })),
              ],
            },
            { backoffBaseMs: 5, backoffMaxMs: 40 },
            {},
            {
              wrapLog: (log) => {
                faults = faulty(log, "model_observed@1", mode)
                return faults.log
              },
            },
          )
          const effects: Effects = { ran: [] }
          const result = yield* context.engine.run(input(context, "Count.", catalog(effects)))
          assert.isTrue(faults!.fired(), faults!.labels.join(" "))
          assert.deepStrictEqual(result.outcome.kind === "failed" && result.outcome.class, "event_commit")
          const events = yield* context.log.events("session-1")
          assert.deepStrictEqual(
            kinds(events).filter((kind) => kind !== "model_observed"),
            ["invocation_opened", "model_requested", "model_interrupted:failed", "invocation_ended:failed:event_commit"],
          )
          faults!.heal()
          const next = yield* context.engine.run(input(context, "Next.", catalog(effects)))
          assert.deepStrictEqual(next.outcome, { kind: "completed" })
        }),
      ),
  )
})

describe("every commit point of the three-step tool loop", () => {
  it.live("SQLite: refused, uncertain or out of space at each commit, the same engine admits the next run", () => everyCommitPoint(), 180_000)

  it.live.skipIf(databaseUrl === undefined)(
    "PostgreSQL: refused, uncertain or out of space at each commit, the same engine admits the next run",
    () => everyCommitPoint(postgresLog(databaseUrl!)),
    300_000,
  )
})

if (databaseUrl === undefined) {
  process.stdout.write("note: MAKA_TEST_DATABASE_URL is unset; the PostgreSQL case of Faults.test.ts does not run here\n")
}
