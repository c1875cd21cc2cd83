/**
 * Group commit of a step's observations (docs/architecture.md §12): the first observation commits at
 * once; what reaches the socket while a commit holds the thread goes into the next commit, so a fast
 * stream batches itself while every delta is still durable before it is shown. Real SQLite file, the
 * scripted server on loopback; the log is wrapped to count the commits that carry observations.
 */
import { assert, describe, it } from "@effect/vitest"
import type { EventLog } from "@maka/event-log"
import { OpenAiSse, Respond } from "@maka/testkit"
import { ToolCatalog } from "@maka/tools"
import { Effect } from "effect"
import { factsOf } from "./support/harness.ts"
import { input, setup } from "./support/setup.ts"

const DELTAS = 600

/** Counts the commits that carry at least one `model_observed`. */
const observationCommits = () => {
  const counts = { commits: 0 }
  const wrap = (log: EventLog.EventLogShape): EventLog.EventLogShape => ({
    ...log,
    appendBatch: (writes, complete) => {
      if (writes.some((write) => write.event.fact.kind === "model_observed")) counts.commits++
      return log.appendBatch(writes, complete)
    },
  })
  return { counts, wrap }
}

describe("group commit of observations", () => {
  it.live("a burst of deltas that arrives during the first commit rides a few commits, every delta kept in order", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const pieces = Array.from({ length: DELTAS }, (_, index) => `d${index} `)
        const steps = OpenAiSse.response({ text: pieces })
        // The role and the first delta come alone; the rest follows in one burst while that commits.
        const paced = steps.map((step, index) => (index === 2 ? { ...step, delayMs: 30 } : step))
        const spy = observationCommits()
        const context = yield* setup({ script: [Respond.sse(paced)] }, undefined, {}, { wrapLog: spy.wrap })
        const result = yield* context.engine.run(input(context, "Answer at length.", ToolCatalog.make([])))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const observed = factsOf(yield* context.log.events("session-1"), "model_observed")
        const text = observed.map((fact) => (fact.event.kind === "part_delta" ? fact.event.text : "")).join("")
        assert.strictEqual(text, pieces.join(""))
        // The first commit carries what came before the burst; the burst needs a few more (without reading what arrived during a commit, it takes eight)
        // (the last of its events ride the completion's commit).
        assert.isAtLeast(spy.counts.commits, 1)
        assert.isAtMost(spy.counts.commits, 4)
      }),
    ))
})
