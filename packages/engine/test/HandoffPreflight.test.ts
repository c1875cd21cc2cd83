/**
 * The handoff preflight's own failures (docs/engine.md §5.10): a run cancelled while its preflight
 * runs does not pause (the handoff resolves `undefined` and the run seals `cancelled`), and a commit
 * the preflight makes that the store refuses is the run's failure (`failed {event_commit}`), not a
 * preflight that failed and lets the step proceed. Real SQLite file, the scripted server on loopback;
 * the log is wrapped so that one call answers as named.
 */
import { assert, describe, it } from "@effect/vitest"
import { EventLogError, type EventLog } from "@maka/event-log"
import { OpenAiSse, Respond } from "@maka/testkit"
import { ToolCatalog } from "@maka/tools"
import { Deferred, Effect, Fiber } from "effect"
import { answer, mainEntry } from "./support/compaction.ts"
import { kinds, slowTool } from "./support/harness.ts"
import { input, setup } from "./support/setup.ts"


const slowCall = mainEntry(Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "slow", arguments: ['{"value":"a"}'] }] })))

/** Starts a run whose first step calls `slow`, requests a handoff while it runs, then releases it. */
const handoffWhileToolRuns = (context: Effect.Success<ReturnType<typeof setup>>, signal?: AbortSignal) =>
  Effect.gen(function* () {
    const started = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    const tools = ToolCatalog.make([slowTool(started, release)])
    const running = yield* context.engine.start(input(context, "Run slow.", tools, { maxSteps: 4, ...(signal === undefined ? {} : { signal }) }))
    yield* Deferred.await(started)
    const requested = yield* Effect.forkChild(running.handoff)
    yield* Effect.sleep("20 millis")
    yield* Deferred.succeed(release, undefined)
    const pause = yield* Fiber.join(requested)
    const result = yield* running.wait
    return { pause, result }
  })

describe("the handoff preflight", () => {
  it.live("does not pause a run cancelled while the preflight runs: the handoff is undefined and the run seals cancelled (scenario 61)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const controller = new AbortController()
        const context = yield* setup({ script: [slowCall, mainEntry(answer("never sent"))] }, undefined, {}, {
          // The store's dry run of the pause is where the signal aborts.
          wrapLog: (log): EventLog.EventLogShape => ({
            ...log,
            checkHandoff: (invocation, pause) =>
              Effect.andThen(Effect.andThen(Effect.sync(() => controller.abort()), Effect.sleep("20 millis")), log.checkHandoff(invocation, pause)),
          }),
        })
        const { pause, result } = yield* handoffWhileToolRuns(context, controller.signal)
        assert.isUndefined(pause)
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        assert.strictEqual(kinds(yield* context.log.events("session-1")).at(-1), "invocation_ended:cancelled")
        assert.deepStrictEqual(yield* context.log.pendingHandoffs(), [])
      }),
    ))

  it.live("fails the run event_commit when the store refuses the commit of what the run carries", () =>
    Effect.scoped(
      Effect.gen(function* () {
        let refused = false
        const context = yield* setup({ script: [slowCall, mainEntry(answer("never sent"))] }, undefined, {}, {
          // The preflight commits the step's settlement on its own: that batch is refused once.
          wrapLog: (log): EventLog.EventLogShape => ({
            ...log,
            appendBatch: (writes, complete) =>
              !refused && writes.length === 1 && writes[0]!.event.fact.kind === "tool_settled"
                ? Effect.sync(() => {
                    refused = true
                  }).pipe(Effect.andThen(Effect.fail(EventLogError.invalidTransition("the store refuses this batch (injected)"))))
                : log.appendBatch(writes, complete),
          }),
        })
        const { pause, result } = yield* handoffWhileToolRuns(context)
        assert.isTrue(refused)
        assert.isUndefined(pause)
        assert.strictEqual(result.outcome.kind === "failed" ? result.outcome.class : result.outcome.kind, "event_commit")
        assert.strictEqual(context.server.requests().length, 1)
      }),
    ))
})
