/**
 * The step loop's automatic compaction and its budget (docs/engine.md §5.4 steps 7 and 11,
 * docs/engine.md §5.12): no summary is made when none is due; a due one builds its source from the
 * context the engine kept (docs/architecture.md §12) and goes on without a summary when the source
 * holds no conversation; a summary made in the foreground that meets a model error adopts nothing,
 * while a refused commit of its request fails the run; and an overflow whose pending summary is not
 * adopted makes a summary now when a completed step renewed the budget. Real SQLite files, the
 * scripted server on loopback; the log is wrapped to count its reads or to refuse one commit.
 */
import { assert, describe, it } from "@effect/vitest"
import { FactBuilders, History, OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Effect, Schema } from "effect"
import {
  answer,
  echoCall,
  isSummaryRequest,
  mainEntry,
  overflow,
  summaryAnswer,
  summaryEntry,
  summaryText,
} from "./support/compaction.ts"
import { faulty, type Faulty } from "./support/faults.ts"
import { factsOf } from "./support/harness.ts"
import { countingLog } from "./support/reads.ts"
import { catalog, input, setup } from "./support/setup.ts"

const windowed = { context: { providerId: "openai-compatible", declaredWindow: 1_000 } }

/**
 * A session whose last run was compacted `mid_turn` before its first main step, then sent 4,000 main
 * requests that all failed: the tail after the checkpoint holds 8,001 events (with the anchor, 80 %
 * of the read's event limit: compaction is due) and no message, steering or completion.
 */
const tailWithoutConversation = () => {
  const history = new History.History({ sessionId: "session-1" })
  const run = history.open({ message: "Retry until it answers.", turnId: "old-turn", runId: "old-run", invocationId: "old-invocation" })
  const summary = run.request({ purpose: "summary", stepId: "old-summary" })
  const request = history.events[history.events.length - 1]!.event.fact
  if (request.kind !== "model_requested") throw new Error("expected the summary request")
  run.complete(summary, FactBuilders.textStep(FactBuilders.VALID_SUMMARY))
  run.checkpoint({
    mode: { kind: "mid_turn", anchorEventId: run.opening.event.id },
    coveredThrough: request.sourceHighWater,
    sourceDigest: request.sourceDigest,
    summary: { format: "sections_v1", text: FactBuilders.VALID_SUMMARY },
    summaryStepId: summary,
  })
  // Each request carries the summary request's prefix digest with its own high water, which the log
  // takes as it is: `request()` would digest the whole prefix for each one (quadratic time).
  for (let attempt = 0; attempt < 4_000; attempt++) {
    const stepId = `old-main-${attempt}`
    history.append(run.invocation, { ...request, stepId, purpose: "main", sourceHighWater: history.highWater })
    run.interrupt(stepId, "retryable_failure")
  }
  run.end({ kind: "failed", class: "model_provider" })
  return history.writes
}

const classOf = (outcome: { readonly kind: string; readonly class?: string }) => (outcome.kind === "failed" ? outcome.class : outcome.kind)

const modelError = () => Respond.json(400, Respond.openAiError("the summary request is malformed"))

describe("automatic compaction in the step loop", () => {
  it.live("makes no summary when none is due, and reads no compaction source", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const reads = countingLog()
        const context = yield* setup(
          { script: [mainEntry(answer("Hello.")), mainEntry(answer("Again.")), summaryEntry(summaryAnswer(summaryText("never due")))] },
          undefined,
          // No background slot: a summary would be made, and sent, before the request.
          { concurrency: 1 },
          { wrapLog: reads.wrap },
        )
        const tools = ToolCatalog.make([])
        assert.deepStrictEqual((yield* context.engine.run(input(context, "Hi.", tools))).outcome, { kind: "completed" })
        assert.deepStrictEqual((yield* context.engine.run(input(context, "Again.", tools))).outcome, { kind: "completed" })
        assert.deepStrictEqual(context.server.requests().map(isSummaryRequest), [false, false])
        assert.strictEqual(reads.counts.compaction, 0)
      }),
    ))

  it.live("builds a due summary's source from the kept context: the store's compaction read is not asked", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const reads = countingLog()
        const context = yield* setup(
          { script: [mainEntry(answer("Noted.", 5_000)), summaryEntry(summaryAnswer(summaryText("noted"))), mainEntry(answer("Done."))] },
          undefined,
          { concurrency: 1 },
          { wrapLog: reads.wrap },
        )
        const tools = ToolCatalog.make([])
        yield* context.engine.run(input(context, "Note this.", tools, windowed))
        const result = yield* context.engine.run(input(context, "Next.", tools, windowed))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(context.server.requests().map(isSummaryRequest), [false, true, false])
        assert.deepStrictEqual(
          factsOf(yield* context.log.events("session-1"), "context_checkpoint_recorded").map((fact) => fact.checkpoint.mode.kind),
          ["pre_turn"],
        )
        assert.strictEqual(reads.counts.compaction, 0)
      }),
    ))

  it.live("goes on to the request when a due compaction finds no conversation to summarise", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const reads = countingLog()
        // No background slot: a captured source would be summarised, in the foreground, before the request.
        const context = yield* setup({ script: [mainEntry(answer("Next."))] }, undefined, { concurrency: 1 }, { wrapLog: reads.wrap })
        const writes = tailWithoutConversation()
        for (let start = 0; start < writes.length; start += 2_000) yield* context.log.appendBatch(writes.slice(start, start + 2_000))
        const result = yield* context.engine.run(input(context, "Go on.", ToolCatalog.make([])))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        // The run read the session before its opening (the opening rides a later commit,
        // docs/engine.md §5.3), so its `pre_turn` source is built from that read, not read again; it
        // finds nothing.
        assert.strictEqual(reads.counts.compaction, 0, "the compaction source was built from the run's context")
        assert.deepStrictEqual(context.server.requests().map(isSummaryRequest), [false])
      }),
    ),
  60_000)
})

describe("a summary made in the foreground", () => {
  it.live("fails the run event_commit when the store refuses its request's commit, sending nothing more", () =>
    Effect.scoped(
      Effect.gen(function* () {
        let fault: Faulty | undefined
        const context = yield* setup(
          { script: [mainEntry(answer("Noted.", 5_000)), summaryEntry(summaryAnswer(summaryText("noted"))), mainEntry(answer("never sent"))] },
          undefined,
          { concurrency: 1 },
          {
            // The second request commit is the summary's.
            wrapLog: (log) => {
              fault = faulty(log, "model_requested#2", "refuse")
              return fault.log
            },
          },
        )
        const tools = ToolCatalog.make([])
        yield* context.engine.run(input(context, "Note this.", tools, windowed))
        const result = yield* context.engine.run(input(context, "Next.", tools, windowed))
        assert.isTrue(fault!.fired())
        assert.strictEqual(classOf(result.outcome), "event_commit")
        assert.deepStrictEqual(context.server.requests().map(isSummaryRequest), [false])
      }),
    ))

  it.live("adopts nothing when an overflow recovery's summary meets a model error: the run fails context_overflow", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [mainEntry(answer("The code is 4417.")), mainEntry(overflow()), summaryEntry(modelError()), mainEntry(answer("never sent"))],
        })
        const tools = ToolCatalog.make([])
        yield* context.engine.run(input(context, "The code is 4417.", tools))
        const result = yield* context.engine.run(input(context, "Go on.", tools, { maxSteps: 4 }))
        assert.strictEqual(classOf(result.outcome), "context_overflow")
        assert.deepStrictEqual(context.server.requests().map(isSummaryRequest), [false, false, true])
        assert.deepStrictEqual(factsOf(yield* context.log.events("session-1"), "context_checkpoint_recorded"), [])
      }),
    ))
})

describe("overflow recovery after a pending summary that is not adopted", () => {
  it.live("makes a summary now when a completed step renewed the budget, adopts it, and goes on", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const reads = countingLog()
        const gate = Respond.gate()
        const context = yield* setup(
          {
            script: [
              mainEntry(answer("Noted.", 5_000)),
              summaryEntry(Respond.hold(gate, modelError())),
              mainEntry(echoCall("call-1", "a")),
              mainEntry(overflow()),
              summaryEntry(summaryAnswer(summaryText("recovered"))),
              mainEntry(answer("Recovered.")),
            ],
          },
          undefined,
          {},
          { wrapLog: reads.wrap },
        )
        const tools = catalog({ ran: [] })
        yield* context.engine.run(input(context, "Note this.", tools, windowed))
        const running = yield* context.engine.start(input(context, "Go on.", tools, { maxSteps: 4, ...windowed }))
        // The proactive summary is held while the first step's call completes (renewing the budget)
        // and the next request overflows; then it fails.
        yield* Effect.promise(() => context.server.request(3))
        gate.release()
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const sent = context.server.requests().map(isSummaryRequest)
        assert.deepStrictEqual([sent[0], [sent[1], sent[2]].sort(), ...sent.slice(3)], [false, [false, true], false, true, false])
        const own = (yield* context.log.events("session-1")).filter(
          (stored) => stored.event.invocation.invocationId === running.invocation.invocationId,
        )
        assert.deepStrictEqual(factsOf(own, "context_checkpoint_recorded").map((fact) => fact.checkpoint.mode.kind), ["mid_turn"])
        // Both sources were built from the context the run holds.
        assert.strictEqual(reads.counts.compaction, 0)
      }),
    ))

  it.live("pays the prune a batch owed while the summary ran before the summary it makes now", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const gate = Respond.gate()
        const context = yield* setup({
          script: [
            mainEntry(answer("Noted.", 5_000)),
            summaryEntry(Respond.hold(gate, modelError())),
            mainEntry(Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "large", arguments: ["{}"] }] }))),
            mainEntry(overflow()),
            summaryEntry(summaryAnswer(summaryText("recovered"))),
            mainEntry(answer("Recovered.")),
          ],
        })
        const tools = ToolCatalog.make([
          Tool.make({
            name: "large",
            description: "Returns a long text.",
            semantics: "parallel",
            input: Schema.Struct({}),
            execute: () => Effect.succeed(Tool.text(`LARGE ${"l".repeat(20_000)} TAIL-OF-LARGE`)),
          }),
        ])
        yield* context.engine.run(input(context, "Note this.", tools, windowed))
        const running = yield* context.engine.start(input(context, "Go on.", tools, { maxSteps: 4, ...windowed }))
        // The call's result, over one page, settles while the summary is held: its prune is owed.
        yield* Effect.promise(() => context.server.request(3))
        gate.release()
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const requests = context.server.requests()
        const summaries = requests.filter(isSummaryRequest)
        assert.strictEqual(summaries.length, 2)
        // The overflowing request still carried the result whole; the summary made now does not.
        assert.include(requests[3]!.body, "TAIL-OF-LARGE")
        assert.notInclude(summaries[1]!.body, "TAIL-OF-LARGE")
        const facts = (yield* context.log.events("session-1")).map((stored) => stored.event.fact)
        const archived = facts.findIndex((fact) => fact.kind === "tool_result_archived")
        const lastSummary = facts.findLastIndex((fact) => fact.kind === "model_requested" && fact.purpose === "summary")
        assert.isAbove(archived, -1)
        assert.isBelow(archived, lastSummary)
      }),
    ))
})
