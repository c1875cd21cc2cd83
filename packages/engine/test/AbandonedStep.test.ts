/**
 * An abandoned step names the effect it abandoned (docs/engine.md §5.14): after the cancellation
 * grace, a step whose calls were settled, rejected and one left running fails `outcome_unknown`
 * naming the running call's operation, never the settled or the rejected one. A step abandoned with
 * nothing dispatched fails `cancelled`, and what its journal does afterwards never reaches the log:
 * no dispatch lands and no effect starts once the run is sealing. Real SQLite file, the scripted
 * server on loopback.
 */
import { assert, describe, it } from "@effect/vitest"
import { OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Deferred, Effect, Schema } from "effect"
import * as LogTesting from "@maka/event-log/testing"
import { factsOf } from "./support/harness.ts"
import { echoTool, input as runInput, setup, type Effects } from "./support/setup.ts"

/**
 * A log whose seal (its first `invocationRecovery`) says it started, then waits for `resumed` and
 * 150 ms more: what the abandoned journal does meanwhile would reach the log before the seal reads it.
 */
const stalledSeal = (resumed: Deferred.Deferred<void>) =>
  Effect.map(Deferred.make<void>(), (sealing) => {
    let reads = 0
    const wrapLog = (log: LogTesting.EventLog.EventLogShape): LogTesting.EventLog.EventLogShape => ({
      ...log,
      invocationRecovery: (invocation, maxEvents, maxBytes) =>
        Effect.andThen(
          reads++ > 0
            ? Effect.void
            : Effect.andThen(Deferred.succeed(sealing, undefined), Effect.andThen(Deferred.await(resumed), Effect.sleep(150))),
          log.invocationRecovery(invocation, maxEvents, maxBytes),
        ),
    })
    return { sealing, wrapLog }
  })

/**
 * A run's set-up for abandonment: the model calls `name` with `args` and then answers, a grace of
 * 100 ms, and a log whose seal waits for `resumed` (`stalledSeal`).
 */
/** What the terminal of a run whose tool was abandoned after the grace says of it. */
const abandoned = (graceMs: number) => `its tool ran on past cancelGraceMs (${graceMs} ms) after the run was cancelled, and was abandoned`

const abandonable = (name: string, args: string, resumed: Deferred.Deferred<void>) =>
  Effect.gen(function* () {
    const { sealing, wrapLog } = yield* stalledSeal(resumed)
    const context = yield* setup(
      {
        script: [
          Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name, arguments: [args] }] })),
          Respond.sse(OpenAiSse.response({ text: ["Fine."] })),
        ],
      },
      { backoffBaseMs: 5, backoffMaxMs: 40, cancelGraceMs: 100 },
      {},
      { wrapLog },
    )
    return { context, sealing }
  })

describe("a step abandoned after the cancellation grace", () => {
  it.live("names the operation still running, after a settled and a rejected call of the same step", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          {
            script: [
              Respond.sse(
                OpenAiSse.response({
                  toolCalls: [
                    { id: "call-1", name: "echo", arguments: ['{"value":"first"}'] },
                    { id: "call-2", name: "missing", arguments: ['{"value":"second"}'] },
                    { id: "call-3", name: "stuck", arguments: ['{"value":"third"}'] },
                  ],
                }),
              ),
            ],
          },
          { backoffBaseMs: 5, backoffMaxMs: 40, cancelGraceMs: 200 },
        )
        const effects: Effects = { ran: [] }
        const started = yield* Deferred.make<void>()
        const stuck = Tool.make({
          name: "stuck",
          description: "Never returns.",
          input: Schema.Struct({ value: Schema.String }),
          semantics: "parallel",
          execute: () => Effect.andThen(Deferred.succeed(started, undefined), Effect.never),
        })
        const running = yield* context.engine.start(runInput(context, "Run them.", ToolCatalog.make([echoTool(effects), stuck])))
        yield* Deferred.await(started)
        yield* running.cancel
        const result = yield* running.wait
        const events = yield* context.log.events("session-1")
        const dispatched = factsOf(events, "tool_dispatched")
        const operationOf = (toolCallId: string) => dispatched.find((fact) => fact.call.toolCallId === toolCallId)?.operationId
        assert.deepStrictEqual(factsOf(events, "tool_settled").map((fact) => fact.operationId), [operationOf("call-1")])
        assert.deepStrictEqual(factsOf(events, "tool_rejected").map((fact) => fact.call.toolCallId), ["call-2"])
        const running3 = dispatched.find((fact) => fact.call.toolCallId === "call-3")!
        assert.deepStrictEqual(result.outcome, {
          kind: "failed",
          class: "outcome_unknown",
          message: `the outcome of tool operation ${running3.operationId} is unknown: ${abandoned(200)}`,
        })
      }),
    ))

  it.live("with nothing dispatched fails cancelled, and a call whose input is decoded after the grace never runs", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The call's input is checked by an asynchronous validator (a Standard Schema whose `validate`
        // answers with a Promise) that answers only once the run is sealing: the journal, abandoned
        // before any dispatch, then asks to dispatch the call.
        const validating = yield* Deferred.make<void>()
        const validated = yield* Deferred.make<void>()
        const { context, sealing } = yield* abandonable("checked", '{"note":"n"}', validated)
        const ran: Array<string> = []
        const input = {
          "~standard": {
            version: 1,
            vendor: "test",
            validate: (value: unknown) => {
              Effect.runSync(Deferred.succeed(validating, undefined))
              return Effect.runPromise(
                Effect.as(Effect.andThen(Deferred.await(sealing), Deferred.succeed(validated, undefined)), { value }),
              )
            },
            jsonSchema: {
              input: () => ({ type: "object", properties: { note: { type: "string" } }, required: ["note"] }),
              output: () => ({ type: "object", properties: { note: { type: "string" } }, required: ["note"] }),
            },
          },
        } as unknown as Tool.StandardInput<{ readonly note: string }>
        const checked = Tool.make({
          name: "checked",
          description: "Checks its input remotely.",
          input,
          semantics: "parallel",
          execute: ({ note }) => {
            ran.push(note)
            return Effect.succeed(Tool.text("ran"))
          },
        })
        const tools = ToolCatalog.make([checked])
        const running = yield* context.engine.start(runInput(context, "Check it.", tools))
        yield* Deferred.await(validating)
        yield* running.cancel
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        // The validator answered while the run was sealing; its call was never dispatched nor run.
        assert.isTrue(yield* Deferred.isDone(validated))
        yield* Effect.sleep(50)
        assert.deepStrictEqual(ran, [])
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(factsOf(events, "tool_dispatched"), [])
        assert.deepStrictEqual(
          factsOf(events, "tool_rejected").map((fact) => [fact.call.toolCallId, fact.reason.kind]),
          [["call-1", "cancelled"]],
        )
        // The session goes on.
        const next = yield* context.engine.start(runInput(context, "Again.", tools))
        assert.deepStrictEqual((yield* next.wait).outcome, { kind: "completed" })
      }),
    ))

  it.live("drops the settlement of a tool that ends after the grace, while the run is sealing", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const started = yield* Deferred.make<void>()
        const returned = yield* Deferred.make<void>()
        const { context, sealing } = yield* abandonable("late", '{"value":"v"}', returned)
        // Ignores its AbortSignal and answers once the run is sealing.
        const late = Tool.make({
          name: "late",
          description: "Answers late.",
          input: Schema.Struct({ value: Schema.String }),
          semantics: "parallel",
          execute: () =>
            Effect.andThen(
              Deferred.succeed(started, undefined),
              Effect.andThen(Deferred.await(sealing), Effect.as(Deferred.succeed(returned, undefined), Tool.text("late"))),
            ),
        })
        const tools = ToolCatalog.make([late])
        const running = yield* context.engine.start(runInput(context, "Run it.", tools))
        yield* Deferred.await(started)
        yield* running.cancel
        const result = yield* running.wait
        assert.isTrue(yield* Deferred.isDone(returned))
        const events = yield* context.log.events("session-1")
        const [dispatched] = factsOf(events, "tool_dispatched")
        assert.deepStrictEqual(result.outcome, {
          kind: "failed",
          class: "outcome_unknown",
          message: `the outcome of tool operation ${dispatched!.operationId} is unknown: ${abandoned(100)}`,
        })
        // Its effect is recorded as unknown, never as settled, and the session needs allowPriorUnknown.
        assert.deepStrictEqual(factsOf(events, "tool_settled"), [])
        assert.strictEqual(events.at(-1)!.event.fact.kind, "invocation_ended")
        const next = yield* context.engine.start(runInput(context, "Again.", tools, { allowPriorUnknown: true }))
        assert.deepStrictEqual((yield* next.wait).outcome, { kind: "completed" })
      }),
    ))
})
