import { assert, describe, it } from "@effect/vitest"
import { FactBuilders, OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Deferred, Effect, Schema, Stream } from "effect"
import { getEventListeners } from "node:events"
import { factsOf, kinds, wireMessages } from "./support/harness.ts"
import { catalog, echoTool, input, setup, type Effects } from "./support/setup.ts"

/** A `slow` tool whose effect signals `started`, waits for `release`, then records itself. */
const slowTool = (effects: Effects, started: Deferred.Deferred<void>, release: Deferred.Deferred<void>) =>
  Tool.make({
    name: "slow",
    description: "Waits until released.",
    input: Schema.Struct({ value: Schema.String }),
    semantics: "parallel",
    execute: ({ value }) =>
      Effect.gen(function* () {
        yield* Deferred.succeed(started, undefined)
        yield* Deferred.await(release)
        effects.ran.push(`slow:${value}`)
        return Tool.text(`slow: ${value}`)
      }),
  })

describe("Cancellation", () => {
  it.live("lets the dispatched effect finish, rejects the undispatched call, and seals cancelled in that order (docs/engine.md §5.14, scenario 62)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            Respond.sse(
              OpenAiSse.response({
                toolCalls: [
                  { id: "call-1", name: "slow", arguments: ['{"value":"first"}'] },
                  { id: "call-2", name: "echo", arguments: ['{"value":"second"}'] },
                ],
              }),
            ),
          ],
        })
        const effects: Effects = { ran: [] }
        const started = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const tools = ToolCatalog.make([slowTool(effects, started, release), echoTool(effects)])
        const running = yield* context.engine.start(input(context, "Run both.", tools))
        yield* Deferred.await(started)
        yield* running.cancel
        // Admission stays held until the terminal is durable: a new run on the session is Busy.
        const busy = yield* Effect.flip(context.engine.start(input(context, "Another.", tools)))
        assert.strictEqual(busy.reason._tag, "Busy")
        assert.deepStrictEqual(effects.ran, [])
        yield* Deferred.succeed(release, undefined)
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_settled:succeeded",
          "tool_rejected:cancelled",
          "invocation_ended:cancelled",
        ])
        const stepId = factsOf(events, "model_completed")[0]!.stepId
        assert.deepStrictEqual(
          factsOf(events, "tool_dispatched").map((fact) => fact.operationId),
          [`${stepId}:call-1`],
        )
        assert.deepStrictEqual(
          factsOf(events, "tool_settled").map((fact) => [fact.operationId, fact.outcome.kind]),
          [[`${stepId}:call-1`, "succeeded"]],
        )
        assert.deepStrictEqual(
          factsOf(events, "tool_rejected").map((fact) => [fact.operationId, fact.reason.kind]),
          [[`${stepId}:call-2`, "cancelled"]],
        )
        // The second call's effect never ran, and the model was not asked again.
        assert.deepStrictEqual(effects.ran, ["slow:first"])
        assert.strictEqual(context.server.requests().length, 1)
        // The stream a caller watches shows the same facts and ends after the terminal.
        const streamed = yield* Stream.runCollect(running.events)
        assert.deepStrictEqual(kinds(streamed), kinds(events))
        // After the terminal the session is free again, and the next turn reads the rejection.
        context.server.push(Respond.sse(OpenAiSse.response({ text: ["ok"] })))
        const next = yield* context.engine.run(input(context, "What happened?", tools))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
        const tool = wireMessages(context.server, 1).filter((message) => message.role === "tool")
        assert.deepStrictEqual(
          tool.map((message) => [message.tool_call_id, message.content]),
          [
            ["call-1", "slow: first"],
            ["call-2", "tool cancelled before dispatch; tool was not executed"],
          ],
        )
      }),
    ))
})

/** A `stuck` tool whose effect signals `started`, then never ends and ignores its AbortSignal. */
const stuckTool = (started: Deferred.Deferred<void>) =>
  Tool.make({
    name: "stuck",
    description: "Never returns.",
    input: Schema.Struct({ value: Schema.String }),
    semantics: "parallel",
    execute: () => Effect.andThen(Deferred.succeed(started, undefined), Effect.never),
  })

const stuckScript = () => [
  Respond.sse(
    OpenAiSse.response({
      toolCalls: [
        { id: "call-1", name: "stuck", arguments: ['{"value":"first"}'] },
        { id: "call-2", name: "echo", arguments: ['{"value":"second"}'] },
      ],
    }),
  ),
]

describe("a tool that ignores its AbortSignal", () => {
  const graceMs = 300

  it.live("cancel() seals the run within cancelGraceMs and records the effect's outcome as unknown", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: stuckScript() }, { backoffBaseMs: 5, backoffMaxMs: 40, cancelGraceMs: graceMs })
        const effects: Effects = { ran: [] }
        const started = yield* Deferred.make<void>()
        const running = yield* context.engine.start(input(context, "Run both.", ToolCatalog.make([stuckTool(started), echoTool(effects)])))
        yield* Deferred.await(started)
        const cancelledAt = Date.now()
        yield* running.cancel
        const result = yield* Effect.timeoutOrElse(running.wait, {
          duration: graceMs + 4_000,
          orElse: () => Effect.die(new Error("the run was not sealed within its bound")),
        })
        assert.isBelow(Date.now() - cancelledAt, graceMs + 4_000)
        assert.isAtLeast(Date.now() - cancelledAt, graceMs - 50)
        assert.strictEqual(result.outcome.kind === "failed" ? result.outcome.class : result.outcome.kind, "outcome_unknown")
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_rejected:cancelled",
          "invocation_ended:failed:outcome_unknown",
        ])
        // The terminal names the abandoned effect's operation.
        const dispatched = events.map((stored) => stored.event.fact).find((fact) => fact.kind === "tool_dispatched")
        assert.strictEqual(
          result.outcome.kind === "failed" ? result.outcome.message : undefined,
          `the outcome of tool operation ${dispatched?.kind === "tool_dispatched" ? dispatched.operationId : "?"} is unknown: its tool ran on past cancelGraceMs (${graceMs} ms) after the run was cancelled, and was abandoned`,
        )
        assert.deepStrictEqual(effects.ran, [])
        // The session says how to go on.
        const refused = yield* Effect.flip(context.engine.start(input(context, "Next.", catalog(effects))))
        assert.strictEqual(refused.reason._tag, "ReconciliationRequired")
        assert.include(refused.message, "allowPriorUnknown")
      }),
    ))

  it.live("close() finishes within cancelGraceMs and leaves the run sealed outcome_unknown", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: stuckScript() }, { backoffBaseMs: 5, backoffMaxMs: 40, cancelGraceMs: graceMs })
        const started = yield* Deferred.make<void>()
        const running = yield* context.engine.start(
          input(context, "Run both.", ToolCatalog.make([stuckTool(started), echoTool({ ran: [] })])),
        )
        yield* Deferred.await(started)
        const closingAt = Date.now()
        yield* Effect.timeoutOrElse(context.engine.close, {
          duration: graceMs + 4_000,
          orElse: () => Effect.die(new Error("close() did not finish within its bound")),
        })
        assert.isBelow(Date.now() - closingAt, graceMs + 4_000)
        const result = yield* running.wait
        assert.strictEqual(result.outcome.kind === "failed" ? result.outcome.class : result.outcome.kind, "outcome_unknown")
        assert.deepStrictEqual(yield* context.log.unfinishedInvocations(10), [])
      }),
    ))
})

describe("the caller's signal", () => {
  it.live("cancels a running run when it aborts, and no listener is left on it once a run ends", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [Respond.sse(OpenAiSse.response({ text: ["ok"] })), Respond.hang()] })
        const kept = new AbortController()
        const done = yield* context.engine.run(input(context, "Answer.", catalog({ ran: [] }), { signal: kept.signal }))
        assert.deepStrictEqual(done.outcome, { kind: "completed" })
        assert.strictEqual(getEventListeners(kept.signal, "abort").length, 0)
        // A run on a hanging request is cancelled by the signal, and its listener goes with it.
        const aborting = new AbortController()
        const running = yield* context.engine.start(input(context, "Hang.", catalog({ ran: [] }), { signal: aborting.signal }))
        yield* Effect.promise(() => context.server.request(1))
        aborting.abort()
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        assert.strictEqual(getEventListeners(aborting.signal, "abort").length, 0)
      }),
    ))
})

describe("cancellation while a request waits for the model's permit", () => {
  it.live("ends the waiting run cancelled with nothing sent, and leaves the permit to the next run", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const held = Respond.gate()
        const answer = (text: string) => Respond.sse(OpenAiSse.response({ text: [text] }))
        // One permit: the first run's request holds it until its answer is let through.
        const context = yield* setup({ script: [Respond.hold(held, answer("first")), answer("third")] }, undefined, { concurrency: 1 })
        const other = (n: number) => FactBuilders.invocation({ sessionId: "session-2", turnId: `turn-w${n}`, runId: `run-w${n}`, invocationId: `invocation-w${n}` })
        const first = yield* context.engine.start(input(context, "First.", ToolCatalog.make([])))
        const waiting = yield* context.engine.start(input(context, "Second.", ToolCatalog.make([]), { invocation: other(1) }))
        // The second run's request is durable; its stream waits for the permit.
        while (!kinds(yield* context.log.events("session-2")).includes("model_requested")) yield* Effect.sleep("5 millis")
        yield* Effect.sleep("20 millis")
        yield* waiting.cancel
        assert.deepStrictEqual((yield* waiting.wait).outcome, { kind: "cancelled", source: "runtime_cancellation" })
        assert.include(kinds(yield* context.log.events("session-2")), "model_interrupted:cancelled")
        assert.strictEqual(context.server.requests().length, 1)
        held.release()
        assert.deepStrictEqual((yield* first.wait).outcome, { kind: "completed" })
        // The cancelled wait took no permit with it: the next run gets the only one.
        const third = yield* context.engine.run(input(context, "Third.", ToolCatalog.make([]), { invocation: other(2) }))
        assert.deepStrictEqual(third.outcome, { kind: "completed" })
        assert.strictEqual(context.server.requests().length, 2)
      }),
    ))
})

describe("cancellation before admission", () => {
  it.live("writes nothing when the signal aborts before the opening is durable", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [Respond.hang()] })
        const controller = new AbortController()
        controller.abort()
        const refused = yield* Effect.flip(
          context.engine.start(input(context, "x", ToolCatalog.make([]), { signal: controller.signal })),
        )
        assert.strictEqual(refused.reason._tag, "Cancelled")
        assert.deepStrictEqual(yield* context.engine.log.events("session-1"), [])
        assert.strictEqual(context.server.requests().length, 0)
        // The run ended before it began: it is not left among the live ones.
        assert.deepStrictEqual(context.engine.liveInvocations(), [])
      }),
    ))
})
