/**
 * The epilogue's history check (docs/engine.md §5.4): after the last step, a run checks the
 * session's history with itself as `current`. A refusal by the history rules (`InvalidTransition`)
 * fails the run `reconciliation_required` with the store's reason; any other store failure fails it
 * `event_store`, never the other way round. The log is the real SQLite log, wrapped so that the
 * epilogue's check (the one naming a current invocation) answers as a store would.
 */
import { assert, describe, it } from "@effect/vitest"
import { EventLogError, type EventLog } from "@maka/event-log"
import { Effect } from "effect"
import { toolLoop } from "./support/faults.ts"
import { catalog, input, setup } from "./support/setup.ts"

type Shape = EventLog.EventLogShape

/** An engine whose log fails the history check that names a current invocation with `error`. */
const failingEpilogue = (error: EventLogError.EventLogError, asked: Array<string>) =>
  setup({ script: toolLoop }, { backoffBaseMs: 5, backoffMaxMs: 40 }, {}, {
    wrapLog: (log): Shape => ({
      ...log,
      checkHistorySafety: (sessionId, options) => {
        if (options?.current === undefined) return log.checkHistorySafety(sessionId, options)
        asked.push(options.current)
        return Effect.fail(error)
      },
    }),
  })

describe("the epilogue's history check", () => {
  for (const [name, error, expected] of [
    ["a refusal by the history rules", EventLogError.invalidTransition("an unsettled call (injected)"), "reconciliation_required"],
    ["a database error", EventLogError.make({ _tag: "Database", message: "disk I/O error (injected)" }), "event_store"],
  ] as const) {
    it.live(`fails the run by its meaning: ${name} is ${expected}`, () =>
      Effect.scoped(
        Effect.gen(function* () {
          const asked: Array<string> = []
          const context = yield* failingEpilogue(error, asked)
          const ran: Array<string> = []
          const runInput = input(context, "Loop.", catalog({ ran }))
          const result = yield* context.engine.run(runInput)
          // The run did its work, then failed at the check that names it.
          assert.deepStrictEqual(ran, ["a", "b", "c"])
          assert.deepStrictEqual(asked, [runInput.invocation.invocationId])
          assert.strictEqual(result.outcome.kind, "failed")
          if (result.outcome.kind === "failed") {
            assert.strictEqual(result.outcome.class, expected)
            assert.include(result.outcome.message ?? "", "(injected)")
          }
          const events = yield* context.log.events("session-1")
          const terminal = events.at(-1)?.event.fact
          assert.deepStrictEqual(terminal?.kind === "invocation_ended" ? terminal.outcome : undefined, result.outcome)
        }),
      ))
  }
})
