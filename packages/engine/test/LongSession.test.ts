/**
 * A session never dies of its own length (docs/engine.md §5.12 "Due"): with no declared window, a
 * scripted tool-loop session goes on past the 10,000-event read limit because compaction is due at
 * 80 % of it. Without that rule this session fails at about turn 1,250, and every turn after it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { answer, echoCall, isSummaryRequest, summaryAnswer, summaryText, wire } from "./support/compaction.ts"
import { factsOf } from "./support/harness.ts"
import { catalog, input, setup, type Effects } from "./support/setup.ts"

const TURNS = 3_000

describe("a long session", () => {
  it.live(
    `completes ${TURNS} tool-loop turns with no declared window, compacting before the read limit`,
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const context = yield* setup({
            script: [
              { match: isSummaryRequest, respond: summaryAnswer(summaryText("the long session so far")), repeat: true },
              {
                match: (request) => !isSummaryRequest(request) && wire(request).messages.at(-1)?.role === "tool",
                respond: answer("Echoed."),
                repeat: true,
              },
              { match: (request) => !isSummaryRequest(request), respond: echoCall("call-1", "step"), repeat: true },
            ],
          })
          const effects: Effects = { ran: [] }
          const tools = catalog(effects)
          const times: Array<number> = []
          for (let turn = 0; turn < TURNS; turn++) {
            const started = performance.now()
            const result = yield* context.engine.run(input(context, `Turn ${turn}: echo once.`, tools))
            times.push(performance.now() - started)
            if (result.outcome.kind !== "completed") assert.fail(`turn ${turn} ended ${JSON.stringify(result.outcome)}`)
          }
          assert.strictEqual(effects.ran.length, TURNS)
          const events = yield* context.log.events("session-1", 0, 1_000_000)
          const checkpoints = factsOf(events, "context_checkpoint_recorded")
          // 8 materialised events a turn: compaction is due every ~1,000 turns.
          assert.isAtLeast(checkpoints.length, 2)
          assert.isTrue(checkpoints.every((fact) => fact.checkpoint.mode.kind === "pre_turn"))
          const series = Array.from({ length: TURNS / 250 }, (_, index) => {
            const slice = times.slice(index * 250, (index + 1) * 250).sort((a, b) => a - b)
            return `${(index + 1) * 250}:${slice[125]!.toFixed(1)}`
          })
          console.log(`long session: ${checkpoints.length} checkpoints; median turn ms per 250 turns ${series.join(" ")}`)
        }),
      ),
    600_000,
  )
})
