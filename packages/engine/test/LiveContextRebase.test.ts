/**
 * An adopted checkpoint rebuilds the live context from memory (docs/engine.md §5.12,
 * docs/architecture.md §12): a session whose next turn is compacted before its request sends that request without reading
 * its context from the log again, and the request starts from the summary. Real SQLite file, the
 * scripted server on loopback; the log is wrapped to count the context reads.
 */
import { assert, describe, it } from "@effect/vitest"
import type { EventLog } from "@maka/event-log"
import { Prompts } from "@maka/facts"
import { ToolCatalog } from "@maka/tools"
import { Effect } from "effect"
import { answer, contentText, isSummaryRequest, mainEntry, summaryAnswer, summaryEntry, summaryText, wire } from "./support/compaction.ts"
import { factsOf } from "./support/harness.ts"
import { input, setup } from "./support/setup.ts"

describe("a checkpoint adopted before a request", () => {
  it.live("rebuilds the live context from memory: the request after it reads nothing from the log", () =>
    Effect.scoped(
      Effect.gen(function* () {
        let reads = 0
        const context = yield* setup(
          { script: [mainEntry(answer("Noted.", 5_000)), summaryEntry(summaryAnswer(summaryText("noted"))), mainEntry(answer("Done."))] },
          undefined,
          // No background slot: the summary is made and adopted before the request.
          { concurrency: 1 },
          {
            wrapLog: (log): EventLog.EventLogShape => ({
              ...log,
              readModelContextWithHash: (sessionId, request) => {
                reads++
                return log.readModelContextWithHash(sessionId, request)
              },
            }),
          },
        )
        const windowed = { context: { providerId: "openai-compatible", declaredWindow: 1_000 } }
        yield* context.engine.run(input(context, "Note this.", ToolCatalog.make([]), windowed))
        assert.strictEqual(reads, 1)
        const result = yield* context.engine.run(input(context, "Next.", ToolCatalog.make([]), windowed))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.strictEqual(reads, 1, "the kept context carried the turn and the checkpoint rebuilt it")
        const sent = context.server.requests()
        assert.deepStrictEqual(sent.map(isSummaryRequest), [false, true, false])
        const messages = wire(sent[2]!).messages
        assert.strictEqual(contentText(messages[1]!.content), `${Prompts.CONTINUATION_SUMMARY_PREFIX}${summaryText("noted")}`)
        assert.strictEqual(contentText(messages.at(-1)!.content), "Next.")
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded").map((fact) => fact.checkpoint.mode.kind), ["pre_turn"])
      }),
    ))
})
