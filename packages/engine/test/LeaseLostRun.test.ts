/**
 * A run whose writer's lease is lost while a tool runs (its lease keeper ended): the settlement's
 * commit is refused `WriterBusy` (`lost`), and the run's failure says to open the log again, not that
 * another engine holds it (docs/log-format.md §3.1). Real SQLite file, a real keeper process killed.
 */
import { assert, describe, it } from "@effect/vitest"
import { Tool, ToolCatalog } from "@maka/tools"
import { Effect, Exit, Schema } from "effect"
import { keeperProcessId } from "@maka/event-log/testing"
import * as Hints from "../src/Hints.ts"
import { answer, mainEntry } from "./support/compaction.ts"
import { input, setup } from "./support/setup.ts"
import { OpenAiSse, Respond } from "@maka/testkit"

/** Kills this process's lease keeper and waits until its end is seen. */
const loseLease = Effect.promise(async () => {
  const keeper = keeperProcessId()
  if (keeper === undefined) throw new Error("no lease keeper")
  process.kill(keeper, "SIGKILL")
  for (let waited = 0; keeperProcessId() !== undefined && waited < 5_000; waited += 20) {
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
})

describe("a run whose lease is lost while its tool runs", () => {
  it.live("fails with the lost lease and the way out", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "lose", arguments: ["{}"] }] })),
            mainEntry(answer("Never sent.")),
          ],
        })
        const tools = ToolCatalog.make([
          Tool.make({
            name: "lose",
            description: "Ends the writer's lease keeper.",
            semantics: "parallel",
            input: Schema.Struct({}),
            execute: () => Effect.as(loseLease, Tool.text("done")),
          }),
        ])
        const exit = yield* Effect.exit(context.engine.run(input(context, "Go.", tools)))
        assert.isTrue(Exit.isFailure(exit))
        const error = Exit.isFailure(exit) ? exit.cause.reasons.find((reason) => reason._tag === "Fail")?.error : undefined
        assert.strictEqual(error?.reason._tag, "Commit")
        assert.include(error?.message, "this process lost the writer's lease of the log")
        assert.include(error?.message, Hints.WRITER_LOST_HINT)
        // The answer after the tool was never asked for.
        assert.strictEqual(context.server.requests().length, 1)
      }),
    ))
})
