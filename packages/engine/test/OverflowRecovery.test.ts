/**
 * Overflow recovery with a summary pending (docs/engine.md §5.4 step 11,
 * docs/engine.md §5.12 "Budget"): when the background summary that spent the step's budget is not
 * adopted, the overflow is not recovered (no budget is left to make another summary): the run fails
 * `context_overflow` without asking the model again. Real SQLite file, the scripted server on
 * loopback.
 */
import { assert, describe, it } from "@effect/vitest"
import { Respond } from "@maka/testkit"
import { ToolCatalog } from "@maka/tools"
import { Effect } from "effect"
import { answer, isSummaryRequest, mainEntry, overflow, summaryEntry } from "./support/compaction.ts"
import { factsOf } from "./support/harness.ts"
import { input, setup } from "./support/setup.ts"

describe("overflow recovery with a background summary pending", () => {
  it.live("fails context_overflow when the pending summary is not adopted, asking the model nothing more", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            mainEntry(answer("Noted.", 5_000)),
            summaryEntry(Respond.json(400, Respond.openAiError("the summary request is malformed"))),
            mainEntry(overflow()),
            mainEntry(answer("never sent")),
          ],
        })
        const tools = ToolCatalog.make([])
        const windowed = { context: { providerId: "openai-compatible", declaredWindow: 1_000 } }
        yield* context.engine.run(input(context, "Note this.", tools, windowed))
        const result = yield* context.engine.run(input(context, "Go on.", tools, { maxSteps: 4, ...windowed }))
        assert.strictEqual(result.outcome.kind === "failed" ? result.outcome.class : result.outcome.kind, "context_overflow")
        const sent = context.server.requests()
        assert.strictEqual(sent.filter(isSummaryRequest).length, 1)
        assert.strictEqual(sent.filter((request) => !isSummaryRequest(request)).length, 2)
        assert.deepStrictEqual(factsOf(yield* context.log.events("session-1"), "context_checkpoint_recorded"), [])
      }),
    ))
})
