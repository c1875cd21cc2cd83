/**
 * An abandoned step names the effect it abandoned (docs/engine.md §5.14): after the cancellation
 * grace, a step whose calls were settled, rejected and one left running fails `outcome_unknown`
 * naming the running call's operation, never the settled or the rejected one. Real SQLite file, the
 * scripted server on loopback.
 */
import { assert, describe, it } from "@effect/vitest"
import { OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Deferred, Effect, Schema } from "effect"
import { factsOf } from "./support/harness.ts"
import { echoTool, input, setup, type Effects } from "./support/setup.ts"

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
        const running = yield* context.engine.start(input(context, "Run them.", ToolCatalog.make([echoTool(effects), stuck])))
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
          message: `the outcome of tool operation ${running3.operationId} is unknown`,
        })
      }),
    ))
})
