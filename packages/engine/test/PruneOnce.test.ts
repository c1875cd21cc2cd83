/**
 * Prune after a tool batch (docs/engine.md §5.11): a batch that settled a result over one page is
 * pruned once, at once, and the debt is paid: the next batch, whose results are small, prunes
 * nothing. Real SQLite file, the scripted server on loopback; the log is wrapped to count its pages
 * of prune candidates.
 */
import { assert, describe, it } from "@effect/vitest"
import { OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Effect, Schema } from "effect"
import { answer, mainEntry } from "./support/compaction.ts"
import { factsOf } from "./support/harness.ts"
import { countingLog } from "./support/reads.ts"
import { input, setup } from "./support/setup.ts"

const text = (name: string, result: string) =>
  Tool.make({
    name,
    description: `Returns ${name} text.`,
    input: Schema.Struct({ value: Schema.String }),
    semantics: "parallel",
    execute: () => Effect.succeed(Tool.text(result)),
  })

const call = (id: string, name: string) =>
  mainEntry(Respond.sse(OpenAiSse.response({ toolCalls: [{ id, name, arguments: ['{"value":"v"}'] }] })))

describe("prune after a tool batch", () => {
  it.live("archives a large result once, and a later batch of small results prunes nothing", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const reads = countingLog()
        const context = yield* setup({ script: [call("call-l", "large"), call("call-s", "small"), mainEntry(answer("Done."))] }, undefined, {}, { wrapLog: reads.wrap })
        const tools = ToolCatalog.make([text("large", `LARGE ${"l".repeat(20_000)} TAIL-OF-LARGE`), text("small", "small")])
        const result = yield* context.engine.run(input(context, "Read both.", tools, { maxSteps: 5 }))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const archives = factsOf(yield* context.log.events("session-1"), "tool_result_archived")
        assert.deepStrictEqual(archives.map((archive) => archive.placeholder.identity.toolCallId), ["call-l"])
        assert.strictEqual(reads.counts.prune, 1)
        // The requests after the archive carry its placeholder, not the result.
        assert.notInclude(context.server.requests()[2]!.body, "TAIL-OF-LARGE")
      }),
    ))
})
