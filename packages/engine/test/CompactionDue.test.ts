/**
 * Automatic compaction is due at 80 % of either read limit whatever the window (docs/engine.md §5.12
 * "Due"): a session of 8,000 small events, with no declared window, is summarised before the next
 * turn's request (written with the testkit's history builder into a real SQLite log; the scripted
 * server on loopback), and `isDue` draws the line exactly at 80 % of each limit.
 */
import { assert, describe, it } from "@effect/vitest"
import { Limits } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import { ToolCatalog } from "@maka/tools"
import { Effect } from "effect"
import { answer, isSummaryRequest, mainEntry, summaryAnswer, summaryEntry, summaryText } from "./support/compaction.ts"
import { factsOf } from "./support/harness.ts"
import { isDue } from "../src/internal/runner.ts"
import type { Run } from "../src/internal/run-context.ts"
import { LiveContext } from "../src/internal/live-context.ts"
import { input, setup } from "./support/setup.ts"

/** `turns` sealed turns of four events each: opening, request, a short answer, terminal. */
const smallTurns = (turns: number) => {
  const history = new History.History({ sessionId: "session-1" })
  for (let turn = 0; turn < turns; turn++) {
    const run = history.open({ message: `Turn ${turn}.`, turnId: `old-turn-${turn}`, runId: `old-run-${turn}`, invocationId: `old-invocation-${turn}` })
    run.complete(run.request(), FactBuilders.textStep(`Answer ${turn}.`))
    run.end({ kind: "completed" })
  }
  return history.written.map((written) => written.write)
}

describe("automatic compaction by the read's event limit", () => {
  it.live("is due before the next request over 8,000 events, with no window declared", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          { script: [summaryEntry(summaryAnswer(summaryText("the old turns"))), mainEntry(answer("Next."))] },
          undefined,
          // No background slot: the summary runs, and is adopted, before the request.
          { concurrency: 1 },
        )
        const writes = smallTurns((Limits.MAX_HISTORY_EVENTS * 0.8) / 4)
        for (let start = 0; start < writes.length; start += 2_000) yield* context.log.appendBatch(writes.slice(start, start + 2_000))
        const result = yield* context.engine.run(input(context, "Go on.", ToolCatalog.make([])))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(context.server.requests().map(isSummaryRequest), [true, false])
        const events = yield* context.log.events("session-1", writes.length, 100)
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded").map((fact) => fact.checkpoint.mode.kind), ["pre_turn"])
      }),
    ),
  60_000)
})

describe("isDue", () => {
  /** A run whose live context (with what it carries) has `events` events of `bytes` bytes, no window declared. */
  const sized = (events: number, bytes: number) =>
    ({
      live: { size: () => ({ events, bytes }) },
      carry: [],
      settings: { configuration: {} },
      model: { routeIdentity: "route", model: "test-model" },
    }) as unknown as Run
  const source = { latestMain: undefined } as unknown as Parameters<typeof isDue>[1]
  const { maxEvents, maxBytes } = LiveContext.defaultLimits

  it("is due from 80 % of the event limit or of the byte limit, and not a unit below either", () => {
    assert.isFalse(isDue(sized(maxEvents * 0.8 - 1, Math.ceil(maxBytes * 0.8) - 1), source))
    assert.isTrue(isDue(sized(maxEvents * 0.8, 0), source))
    assert.isTrue(isDue(sized(0, Math.ceil(maxBytes * 0.8)), source))
  })
})
