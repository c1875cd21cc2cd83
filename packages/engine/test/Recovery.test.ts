import { assert, describe, it } from "@effect/vitest"
import { Archive, Canonical, Prompts, ToolCall } from "@maka/facts"
import { EventLog } from "@maka/event-log"
import * as LogTesting from "@maka/event-log/testing"
import { FactBuilders, History, OpenAiSse, Respond } from "@maka/testkit"
import { Context, Effect, Layer } from "effect"
import * as path from "node:path"
import { Ids } from "@maka/tools"
import * as Engine from "../src/Engine.ts"
import { createEngine } from "../src/Facade.ts"
import * as EngineError from "../src/EngineError.ts"
import * as Hints from "../src/Hints.ts"
import { compactionDue } from "../src/PromptBuilder.ts"
import { factsOf, kinds, recording, reopen } from "./support/harness.ts"
import { catalog, input, setup, type Effects } from "./support/setup.ts"

/** A crashed run the test builds by hand, on `session-1`, with ids that never meet `input()`'s. */
const crashed = () => {
  const history = new History.History()
  const run = history.open({ turnId: "crashed-turn", runId: "crashed-run", invocationId: "crashed-invocation" })
  return { history, run }
}

/** A crash with an open main request and an open summary request. */
const openRequests = () => {
  const { history, run } = crashed()
  const main = run.request()
  const summary = run.request({ purpose: "summary" })
  return { history, run, main, summary }
}

/** A crash between the dispatch of `call-1` and its settlement; `call-2` of the same step never dispatched. */
const unsettledDispatch = () => {
  const { history, run } = crashed()
  const step = run.request()
  run.complete(
    step,
    FactBuilders.toolCallStep([
      { id: "call-1", name: "echo", input: { value: "one" } },
      { id: "call-2", name: "echo", input: { value: "two" } },
    ]),
  )
  const operation = run.dispatch(step, "call-1")
  return { history, run, step, operation }
}

describe("Recovery", () => {
  it.live("interrupts open main and summary requests and seals host_interrupted; a second pass seals nothing (scenario 63)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [] })
        const { history, run, main, summary } = openRequests()
        yield* context.log.appendBatch(history.writes)
        const report = yield* context.engine.recover
        assert.deepStrictEqual(report, { sealed: [{ invocation: run.invocation, failureClass: "host_interrupted" }], count: 1, unsealed: [] })
        const events = yield* context.log.events("session-1")
        const written = events.slice(history.events.length).map((stored) => stored.event.fact)
        assert.deepStrictEqual(written, [
          { kind: "model_interrupted", stepId: main, status: "failed" },
          { kind: "model_interrupted", stepId: summary, status: "failed" },
          { kind: "invocation_ended", outcome: { kind: "failed", class: "host_interrupted" } },
        ])
        const again = yield* context.engine.recover
        assert.deepStrictEqual(again, { sealed: [], count: 0, unsealed: [] })
        assert.strictEqual((yield* context.log.events("session-1")).length, events.length)
        // The sealed opening's invocation id cannot be opened again.
        const reused = yield* Effect.flip(context.engine.start({ ...input(context, "again", catalog({ ran: [] })), invocation: run.invocation }))
        assert.strictEqual(reused.reason._tag, "Commit")
        assert.strictEqual((yield* context.log.events("session-1")).length, events.length)
      }),
    ))

  it.live("rejects a never-dispatched call cancelled and seals a dispatch without settlement outcome_unknown (scenarios 64, 65)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [] })
        const { history, run, step } = unsettledDispatch()
        yield* context.log.appendBatch(history.writes)
        const report = yield* context.engine.recover
        assert.deepStrictEqual(report.sealed, [{ invocation: run.invocation, failureClass: "outcome_unknown" }])
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(
          events.slice(history.events.length).map((stored) => stored.event.fact),
          [
            {
              kind: "tool_rejected",
              operationId: `${step}:call-2`,
              call: { toolCallId: "call-2", origin: { kind: "provider", stepId: step } },
              name: "echo",
              input: { value: "two" },
              reason: { kind: "cancelled" },
            },
            { kind: "invocation_ended", outcome: { kind: "failed", class: "outcome_unknown" } },
          ],
        )
        assert.deepStrictEqual(yield* context.engine.recover, { sealed: [], count: 0, unsealed: [] })
        // The next ordinary admission is reconciliation_required and writes nothing.
        const effects: Effects = { ran: [] }
        const refused = yield* Effect.flip(context.engine.start(input(context, "Carry on.", catalog(effects))))
        assert.strictEqual(refused.reason._tag, "ReconciliationRequired")
        // The message names the way out.
        assert.strictEqual(refused.message, EngineError.PRIOR_UNKNOWN_MESSAGE)
        assert.include(refused.message, "allowPriorUnknown")
        assert.strictEqual((yield* context.log.events("session-1")).length, events.length)
        assert.deepStrictEqual(context.server.requests(), [])
      }),
    ))

  it.live("lets an explicit new message proceed past an unknown effect with the exact notice (scenario 66, docs/engine.md §5.8)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [Respond.sse(OpenAiSse.response({ text: ["I will check the state first."] }))] })
        const { history, operation } = unsettledDispatch()
        yield* context.log.appendBatch(history.writes)
        yield* context.engine.recover
        const effects: Effects = { ran: [] }
        const spy = recording(context.model)
        const result = yield* context.engine.run(
          input(context, "Did the echo happen?", catalog(effects), { model: spy.model, allowPriorUnknown: true }),
        )
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, [])
        const request = spy.requests[0]!
        assert.deepStrictEqual(request.prompt[0], {
          role: "system",
          content: `${FactBuilders.SYSTEM_PROMPT}\n\n${Prompts.PRIOR_UNKNOWN_NOTICE_HEADER}\n- echo (operation ${operation})`,
        })
        const toolMessage = request.prompt.find((message) => message.role === "tool")
        assert.deepStrictEqual(toolMessage, {
          role: "tool",
          results: [
            { toolCallId: "call-1", toolName: "echo", output: { type: "error-text", value: Prompts.OUTCOME_UNKNOWN_TOOL_TEXT } },
            {
              toolCallId: "call-2",
              toolName: "echo",
              output: { type: "error-text", value: ToolCall.rejectionText({ kind: "cancelled" }) },
            },
          ],
        })
        assert.deepStrictEqual(
          request.prompt.map((message) => message.role),
          ["system", "user", "assistant", "tool", "user"],
        )
        // The wire request carries the same texts.
        const wire = context.server.requests()[0]!.json as { messages: ReadonlyArray<{ role: string; content?: string }> }
        assert.strictEqual(wire.messages[0]!.content, (request.prompt[0] as { content: string }).content)
        assert.strictEqual(wire.messages[3]!.content, Prompts.OUTCOME_UNKNOWN_TOOL_TEXT)
        // The run itself wrote no archive, no checkpoint and no dispatch.
        const events = yield* context.log.events("session-1")
        const own = events.slice(history.events.length + 2)
        assert.deepStrictEqual(kinds(own), ["invocation_opened", "model_requested", "model_completed", "invocation_ended:completed"])
        assert.strictEqual(factsOf(events, "tool_dispatched").length, 1)
      }),
    ))

  it.live("under allowPriorUnknown prunes no multi-page result and compacts past no due declared window (scenario 66, docs/engine.md §5.8)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [Respond.sse(OpenAiSse.response({ text: ["I will check the state first."] }))] })
        // The crashed run first settled a result of several pages, on the engine's own route with a
        // usage over the declared window below; then it crashed between a dispatch and its settlement.
        const { history, run } = crashed()
        const route = context.model.routeIdentity
        const big = "row\n".repeat(5_000)
        const first = run.request({ routeIdentity: route })
        run.complete(first, FactBuilders.toolCallStep([{ id: "call-0", name: "echo", input: { value: "big" } }], undefined, FactBuilders.usage(5_000, 8)))
        const settled = run.succeed(run.dispatch(first, "call-0"), FactBuilders.textOutput(big))
        const second = run.request({ routeIdentity: route })
        run.complete(
          second,
          FactBuilders.toolCallStep(
            [
              { id: "call-1", name: "echo", input: { value: "one" } },
              { id: "call-2", name: "echo", input: { value: "two" } },
            ],
            undefined,
            FactBuilders.usage(5_000, 8),
          ),
        )
        const operation = run.dispatch(second, "call-1")
        yield* context.log.appendBatch(history.writes)
        yield* context.engine.recover
        const windowed = { providerId: "openai-compatible", declaredWindow: 1_000 }
        // Neither rule is idle here: the result archives to a first page, and the window is due.
        const fact = settled.event.fact
        if (fact.kind !== "tool_settled" || fact.outcome.kind !== "succeeded") return assert.fail("a settled success")
        const placeholder = Archive.prepare(settled.event.id, "call-0", "echo", { kind: "projection", projection: fact.outcome.projection })
        assert.isDefined(placeholder?.page.next)
        const source = yield* context.log.readManualMessageContext("session-1")
        assert.isTrue(
          compactionDue({
            latestMain: source.latestMain,
            routeIdentity: route,
            connectionId: FactBuilders.modelBinding().connectionId,
            modelId: "test-model",
            context: windowed,
          }),
        )

        const effects: Effects = { ran: [] }
        const spy = recording(context.model)
        const result = yield* context.engine.run(
          input(context, "Did the echo happen?", catalog(effects), { model: spy.model, allowPriorUnknown: true, context: windowed }),
        )
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, [])
        // One request, the main one: no summary request, no archive, no checkpoint.
        assert.strictEqual(context.server.requests().length, 1)
        assert.strictEqual(spy.requests.length, 1)
        const events = yield* context.log.events("session-1")
        const own = events.slice(history.events.length + 2)
        assert.deepStrictEqual(kinds(own), ["invocation_opened", "model_requested", "model_completed", "invocation_ended:completed"])
        assert.deepStrictEqual(factsOf(events, "tool_result_archived"), [])
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded"), [])
        assert.deepStrictEqual(factsOf(events, "model_requested").map((request) => request.purpose), ["main", "main", "main"])
        // The result is sent whole, the unknown call with its notice.
        const request = spy.requests[0]!
        const results = request.prompt.flatMap((message) => (message.role === "tool" ? message.results : []))
        assert.deepStrictEqual(results.find((item) => item.toolCallId === "call-0")?.output, { type: "text", value: big })
        assert.deepStrictEqual(results.find((item) => item.toolCallId === "call-1")?.output, {
          type: "error-text",
          value: Prompts.OUTCOME_UNKNOWN_TOOL_TEXT,
        })
        assert.deepStrictEqual(request.prompt[0], {
          role: "system",
          content: `${FactBuilders.SYSTEM_PROMPT}\n\n${Prompts.PRIOR_UNKNOWN_NOTICE_HEADER}\n- echo (operation ${operation})`,
        })
        const wire = context.server.requests()[0]!.json as { messages: ReadonlyArray<{ role: string; content?: string; tool_call_id?: string }> }
        assert.strictEqual(wire.messages.find((message) => message.tool_call_id === "call-0")?.content, big)
      }),
    ))

  it.live("refuses a session with an unsealed run of another host with the exact unsealed-run reason, writing nothing", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [] })
        const { history } = openRequests()
        yield* context.log.appendBatch(history.writes)
        const refused = yield* Effect.flip(context.engine.start(input(context, "Carry on.", catalog({ ran: [] }))))
        assert.strictEqual(refused.reason._tag, "ReconciliationRequired")
        assert.strictEqual(refused.message, EngineError.UNSEALED_RUN_MESSAGE)
        // Under the prior-unknown policy as well: an unsealed run is never an unknown outcome.
        const explicit = yield* Effect.flip(
          context.engine.start(input(context, "Carry on.", catalog({ ran: [] }), { allowPriorUnknown: true })),
        )
        assert.strictEqual(explicit.message, EngineError.UNSEALED_RUN_MESSAGE)
        assert.strictEqual((yield* context.log.events("session-1")).length, history.events.length)
        assert.deepStrictEqual(context.server.requests(), [])
      }),
    ))

  it.live("a live run another engine's recovery sealed ends with a message saying so, and writes nothing after the seal", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const held = Respond.gate()
        const context = yield* setup({ script: [Respond.hold(held, Respond.sse(OpenAiSse.response({ text: ["late"] })))] })
        const other = yield* Engine.make({}).pipe(Effect.provideService(EventLog.EventLog, context.log), Effect.provide(Ids.layer))
        const running = yield* context.engine.start(input(context, "Answer.", catalog({ ran: [] })))
        yield* Effect.promise(() => context.server.request(0))
        const report = yield* other.recover
        assert.deepStrictEqual(report.sealed.map((item) => item.invocation), [running.invocation])
        const sealed = (yield* context.log.events("session-1")).length
        held.release()
        const ended = yield* Effect.flip(running.wait)
        assert.strictEqual(ended.reason._tag, "Commit", ended.message)
        assert.strictEqual(ended.message, `rejected: the invocation is sealed; ${Hints.SEALED_HINT}`)
        const events = yield* context.log.events("session-1")
        assert.strictEqual(events.length, sealed)
        assert.deepStrictEqual(kinds(events).slice(-1), ["invocation_ended:failed:host_interrupted"])
      }),
    ))

  it.live("createEngine tells what opening a SQLite log sealed; opened again, nothing", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const directory = yield* LogTesting.temporaryDirectory
        const file = path.join(directory, "events.sqlite")
        const { history } = openRequests()
        yield* Effect.scoped(
          Effect.gen(function* () {
            const log = Context.get(yield* Layer.build(EventLog.layerSqlite({ path: file })), EventLog.EventLog)
            yield* log.appendBatch(history.writes)
          }),
        )
        const reports: Array<unknown> = []
        for (let opening = 0; opening < 2; opening++) {
          const engine = yield* Effect.promise(() => createEngine({ database: file }))
          reports.push(engine.recoveredOnOpen)
          yield* Effect.promise(() => engine.close())
        }
        assert.deepStrictEqual(reports, [
          { sealed: [{ invocation: history.events[0]!.event.invocation, failureClass: "host_interrupted" }], count: 1, unsealed: [] },
          { sealed: [], count: 0, unsealed: [] },
        ])
      }),
    ))

  it.live("recovers on open when Engine.layer opens a SQLite log", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const directory = yield* LogTesting.temporaryDirectory
        const file = path.join(directory, "events.sqlite")
        const { history, main, summary } = openRequests()
        // A second session crashed mid-effect; both were written by a host that then went away.
        const other = new History.History({ sessionId: "session-2", firstId: 1_000 })
        const otherRun = other.open()
        const otherStep = otherRun.request()
        otherRun.complete(otherStep, FactBuilders.toolCallStep([{ id: "call-9", name: "echo", input: { value: "x" } }]))
        otherRun.dispatch(otherStep, "call-9")
        yield* Effect.scoped(
          Effect.gen(function* () {
            const log = Context.get(yield* Layer.build(EventLog.layerSqlite({ path: file })), EventLog.EventLog)
            yield* log.appendBatch(history.writes)
            yield* log.appendBatch(other.writes)
          }),
        )
        const engine = yield* reopen(file)
        assert.deepStrictEqual(yield* engine.log.unfinishedInvocations(100), [])
        // What opening sealed stays readable (`maka run` and `maka resume` say it on stderr).
        assert.deepStrictEqual(
          Engine.recoveredOnOpen(engine)?.sealed.map((item) => `${item.invocation.sessionId} ${item.failureClass}`).sort(),
          ["session-1 host_interrupted", "session-2 outcome_unknown"],
        )

        const events = yield* engine.log.events("session-1")
        assert.deepStrictEqual(kinds(events.slice(history.events.length)), [
          "model_interrupted:failed",
          "model_interrupted:failed",
          "invocation_ended:failed:host_interrupted",
        ])
        assert.deepStrictEqual(
          factsOf(events, "model_interrupted").map((fact) => fact.stepId),
          [main, summary],
        )
        const otherEvents = yield* engine.log.events("session-2")
        assert.deepStrictEqual(kinds(otherEvents.slice(other.events.length)), ["invocation_ended:failed:outcome_unknown"])
        // Opening again recovers nothing more, and the bytes stay as they were.
        const before = Canonical.stringify(events)
        assert.deepStrictEqual(yield* engine.recover, { sealed: [], count: 0, unsealed: [] })
        assert.strictEqual(Canonical.stringify(yield* engine.log.events("session-1")), before)
      }),
    ))
})
