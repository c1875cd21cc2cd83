/**
 * The seal's batch (docs/engine.md §5.4, durability points): a run that completes carries its last
 * settlement into the terminal's commit, so a `finish_turn` call's `tool_settled` and the
 * `invocation_ended` land in one transaction; only a run that did not complete makes what it carries
 * durable on its own before it reads its state. Real SQLite file, the scripted server on loopback;
 * the log is wrapped to record each batch it is asked to commit.
 */
import { assert, describe, it } from "@effect/vitest"
import type { EventLog } from "@maka/event-log"
import { OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Effect, Schema } from "effect"
import { input, setup } from "./support/setup.ts"

describe("the seal of a completed run", () => {
  it.live("commits a finish_turn call's settlement with the terminal, in one batch", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const batches: Array<ReadonlyArray<string>> = []
        const context = yield* setup(
          { script: [Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "finish", arguments: ['{"note":"n"}'] }] }))] },
          undefined,
          {},
          {
            wrapLog: (log): EventLog.EventLogShape => ({
              ...log,
              appendBatch: (writes, complete) => {
                batches.push(writes.map((write) => write.event.fact.kind))
                return log.appendBatch(writes, complete)
              },
            }),
          },
        )
        const finish = Tool.make({
          name: "finish",
          description: "Ends the turn.",
          input: Schema.Struct({ note: Schema.String }),
          semantics: "finish_turn",
          execute: () => Effect.succeed(Tool.text("finished")),
        })
        const result = yield* context.engine.run(input(context, "Finish.", ToolCatalog.make([finish])))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(batches.at(-1), ["tool_settled", "invocation_ended"])
        assert.strictEqual(batches.filter((batch) => batch.includes("tool_settled")).length, 1)
      }),
    ))
})
