/**
 * Cancellation at the runner's own checks (docs/engine.md §5.3 steps 1–2,
 * docs/engine.md §5.12 "Standalone", docs/engine.md §5.14): a caller's signal that aborts while the
 * safety preflight reads the store ends a message run, or a standalone compaction, `Cancelled` with
 * nothing written, and the session then takes the next run; one that aborts after a standalone
 * compaction's summary completed seals it `cancelled` with no checkpoint. Real SQLite file, the
 * scripted server on loopback; the log is wrapped so that the store call named aborts the signal.
 */
import { assert, describe, it } from "@effect/vitest"
import type { EventLog } from "@maka/event-log"
import { FactBuilders, Respond } from "@maka/testkit"
import { ToolCatalog } from "@maka/tools"
import { Effect, Fiber } from "effect"
import { answer, mainEntry, overflow, summaryAnswer, summaryEntry, summaryText } from "./support/compaction.ts"
import { factsOf, kinds } from "./support/harness.ts"
import { input, setup } from "./support/setup.ts"

/** An engine whose history gate aborts `controller` (while armed), then answers after a while. */
const abortingGate = (controller: { current: AbortController | undefined }) =>
  setup({ script: [mainEntry(answer("Hello."))] }, { backoffBaseMs: 5, backoffMaxMs: 40 }, {}, {
    wrapLog: (log): EventLog.EventLogShape => ({
      ...log,
      checkHistorySafety: (sessionId, options) =>
        Effect.andThen(
          Effect.sync(() => controller.current?.abort()),
          Effect.andThen(Effect.sleep("20 millis"), log.checkHistorySafety(sessionId, options)),
        ),
    }),
  })

describe("a signal that aborted before the run started", () => {
  it.live("ends a message run and a standalone compaction Cancelled before the preflight reads the store", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const reads: Array<string> = []
        const context = yield* setup({ script: [] }, { backoffBaseMs: 5, backoffMaxMs: 40 }, {}, {
          wrapLog: (log): EventLog.EventLogShape => ({
            ...log,
            hasPendingHandoff: (sessionId) => Effect.andThen(Effect.sync(() => reads.push("hasPendingHandoff")), log.hasPendingHandoff(sessionId)),
            checkHistorySafety: (sessionId, options) =>
              Effect.andThen(Effect.sync(() => reads.push("checkHistorySafety")), log.checkHistorySafety(sessionId, options)),
          }),
        })
        const controller = new AbortController()
        controller.abort()
        const run = yield* Effect.flip(context.engine.start(input(context, "Hello.", ToolCatalog.make([]), { signal: controller.signal })))
        const compact = yield* Effect.flip(
          context.engine.compact({
            invocation: FactBuilders.invocation({ turnId: "compact-turn", runId: "compact-run", invocationId: "compact-invocation" }),
            model: context.model,
            configuration: FactBuilders.configuration({ cwd: context.workspace, model: FactBuilders.modelBinding({ model: "test-model" }) }),
            signal: controller.signal,
          }),
        )
        assert.deepStrictEqual([run.reason._tag, compact.reason._tag], ["Cancelled", "Cancelled"])
        assert.deepStrictEqual(reads, [])
        assert.deepStrictEqual(yield* context.log.events("session-1"), [])
      }),
    ))
})

describe("a signal that aborts during the safety preflight", () => {
  it.live("ends a message run Cancelled with nothing written, and the session takes the next run", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const armed: { current: AbortController | undefined } = { current: new AbortController() }
        const context = yield* abortingGate(armed)
        const tools = ToolCatalog.make([])
        const refused = yield* Effect.flip(context.engine.start(input(context, "Hello.", tools, { signal: armed.current!.signal })))
        assert.strictEqual(refused.reason._tag, "Cancelled")
        assert.deepStrictEqual(yield* context.log.events("session-1"), [])
        assert.strictEqual(context.server.requests().length, 0)
        armed.current = undefined
        assert.deepStrictEqual((yield* context.engine.run(input(context, "Hello.", tools))).outcome, { kind: "completed" })
      }),
    ))

  it.live("ends a standalone compaction Cancelled with nothing written", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const armed: { current: AbortController | undefined } = { current: undefined }
        const context = yield* abortingGate(armed)
        yield* context.engine.run(input(context, "Hello.", ToolCatalog.make([])))
        const written = (yield* context.log.events("session-1")).length
        armed.current = new AbortController()
        const refused = yield* Effect.flip(
          context.engine.compact({
            invocation: FactBuilders.invocation({ turnId: "compact-turn", runId: "compact-run", invocationId: "compact-invocation" }),
            model: context.model,
            configuration: FactBuilders.configuration({ cwd: context.workspace, model: FactBuilders.modelBinding({ model: "test-model" }) }),
            signal: armed.current.signal,
          }),
        )
        assert.strictEqual(refused.reason._tag, "Cancelled")
        assert.strictEqual((yield* context.log.events("session-1")).length, written)
        assert.strictEqual(context.server.requests().length, 1)
      }),
    ))
})

describe("a signal that aborts after a standalone compaction's summary completed", () => {
  it.live("seals the compaction cancelled, with no checkpoint", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const armed: { current: AbortController | undefined } = { current: undefined }
        const context = yield* setup(
          { script: [mainEntry(answer("Hello.")), summaryEntry(summaryAnswer(summaryText("greeting")))] },
          { backoffBaseMs: 5, backoffMaxMs: 40 },
          {},
          {
            // The summary's completion commits, then the signal aborts.
            wrapLog: (log): EventLog.EventLogShape => ({
              ...log,
              appendBatch: (writes, complete) =>
                Effect.tap(log.appendBatch(writes, complete), () =>
                  writes.some((write) => write.event.fact.kind === "model_completed")
                    ? Effect.andThen(Effect.sync(() => armed.current?.abort()), Effect.sleep("20 millis"))
                    : Effect.void,
                ),
            }),
          },
        )
        yield* context.engine.run(input(context, "Hello.", ToolCatalog.make([])))
        armed.current = new AbortController()
        const invocation = FactBuilders.invocation({ turnId: "compact-turn", runId: "compact-run", invocationId: "compact-invocation" })
        const result = yield* context.engine.compact({
          invocation,
          model: context.model,
          configuration: FactBuilders.configuration({ cwd: context.workspace, model: FactBuilders.modelBinding({ model: "test-model" }) }),
          signal: armed.current.signal,
        })
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        const events = yield* context.log.events("session-1")
        const own = events.filter((stored) => stored.event.invocation.invocationId === invocation.invocationId)
        assert.deepStrictEqual(kinds(own), ["invocation_opened", "model_requested", "model_completed", "invocation_ended:cancelled"])
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded"), [])
      }),
    ))
})

describe("a signal that aborts while an overflow recovery's summary streams", () => {
  it.live("seals the run cancelled, not failed by the overflow it was recovering from", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          { script: [mainEntry(answer("The code is 4417.")), mainEntry(overflow()), summaryEntry(Respond.hang())] },
          undefined,
          { concurrency: 1 },
        )
        const tools = ToolCatalog.make([])
        yield* context.engine.run(input(context, "The code is 4417.", tools))
        const controller = new AbortController()
        const running = yield* Effect.forkChild(context.engine.run(input(context, "Go on.", tools, { signal: controller.signal })))
        yield* Effect.promise(() => context.server.request(2))
        controller.abort()
        const result = yield* Fiber.join(running)
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded"), [])
        assert.strictEqual(kinds(events).at(-1), "invocation_ended:cancelled")
      }),
    ))
})

describe("a signal that aborts after the run's last answer", () => {
  it.live("seals the completed run cancelled (docs/engine.md §5.3 step 7)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const armed: { current: AbortController | undefined } = { current: undefined }
        const context = yield* setup({ script: [mainEntry(answer("Hello."))] }, { backoffBaseMs: 5, backoffMaxMs: 40 }, {}, {
          // The epilogue's gate (the one that excludes the run itself) aborts the signal.
          wrapLog: (log): EventLog.EventLogShape => ({
            ...log,
            checkHistorySafety: (sessionId, options) =>
              Effect.andThen(
                options?.current === undefined
                  ? Effect.void
                  : Effect.andThen(Effect.sync(() => armed.current?.abort()), Effect.sleep("20 millis")),
                log.checkHistorySafety(sessionId, options),
              ),
          }),
        })
        armed.current = new AbortController()
        const result = yield* context.engine.run(input(context, "Hello.", ToolCatalog.make([]), { signal: armed.current.signal }))
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events), ["invocation_opened", "model_requested", "model_completed", "invocation_ended:cancelled"])
      }),
    ))
})
