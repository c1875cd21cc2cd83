/**
 * The cached live context equals a fresh read, limits included (docs/architecture.md §5): generated runs —
 * answers, tool steps with settled, failed and rejected calls, steering, of sizes on both sides of
 * the history limits — are appended write by write to a real SQLite log; after every write the
 * `LiveContext` snapshot and a fresh `readModelContext` with the same limits must agree: the same
 * context, or both `PrefixTooLarge`.
 */
import { assert, describe, it } from "@effect/vitest"
import { Canonical, Limits, type Configuration, type EventWrite } from "@maka/facts"
import { EventLog } from "@maka/event-log"
import * as LogTesting from "@maka/event-log/testing"
import { FactBuilders, History, OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Effect, Result, Schema } from "effect"
import * as fc from "fast-check"
import { isDeepStrictEqual } from "node:util"
import { LiveContext } from "../src/internal/live-context.ts"
import { factsOf } from "./support/harness.ts"
import { echoTool, input, setup } from "./support/setup.ts"
import { answer, isSummaryRequest, mainEntry, summaryAnswer, summaryAnswerSteps, summaryText, usage } from "./support/compaction.ts"

type Action =
  | { readonly kind: "answer"; readonly size: number }
  | { readonly kind: "tools"; readonly outputs: ReadonlyArray<{ readonly size: number; readonly how: "succeed" | "fail" | "reject" }> }
  | { readonly kind: "steer"; readonly size: number }

const size = fc.integer({ min: 0, max: 6_000 })
const action: fc.Arbitrary<Action> = fc.oneof(
  fc.record({ kind: fc.constant("answer" as const), size }),
  fc.record({
    kind: fc.constant("tools" as const),
    outputs: fc.array(fc.record({ size, how: fc.constantFrom("succeed" as const, "fail" as const, "reject" as const) }), {
      minLength: 1,
      maxLength: 3,
    }),
  }),
  fc.record({ kind: fc.constant("steer" as const), size }),
)

interface Scenario {
  /** Runs of the session before the live one, each a list of actions, sealed `completed`. */
  readonly prior: ReadonlyArray<ReadonlyArray<Action>>
  readonly live: ReadonlyArray<Action>
  readonly maxEvents: number
  readonly maxBytes: number
}

const scenario: fc.Arbitrary<Scenario> = fc.record({
  prior: fc.array(fc.array(action, { maxLength: 3 }), { maxLength: 2 }),
  live: fc.array(action, { minLength: 1, maxLength: 8 }),
  maxEvents: fc.integer({ min: 3, max: 60 }),
  maxBytes: fc.integer({ min: 2_000, max: 80_000 }),
})

/** Appends the facts of `action` to `run`. */
const play = (run: History.Run, action: Action, index: number) => {
  const text = (n: number) => "t".repeat(n)
  switch (action.kind) {
    case "answer": {
      const step = run.request()
      run.complete(step, FactBuilders.textStep(text(action.size)))
      return
    }
    case "steer":
      run.steer(`steer-${run.invocation.invocationId}-${index}`, text(action.size) || "s")
      return
    case "tools": {
      const step = run.request()
      const calls = action.outputs.map((_, position) => ({ id: `call-${position}`, name: "echo", input: { value: `${position}` } }))
      run.complete(step, FactBuilders.toolCallStep(calls))
      action.outputs.forEach((output, position) => {
        if (output.how === "reject") {
          run.reject(step, `call-${position}`, { kind: "unavailable" })
          return
        }
        const operation = run.dispatch(step, `call-${position}`)
        if (output.how === "fail") run.fail(operation, text(output.size) || "f")
        else run.succeed(operation, FactBuilders.textOutput(text(output.size)))
      })
    }
  }
}

const compare = (item: Scenario) =>
  Effect.scoped(
    Effect.gen(function* () {
      const { log } = yield* LogTesting.makeTemporary({ synchronous: "NORMAL" })
      const history = new History.History({ sessionId: "session-1" })
      let written = 0
      /** Appends what the history holds beyond the log, write by write, calling `after` after each. */
      const flush = (after: (sequence: number, write: EventWrite.EventWrite) => Effect.Effect<void> = () => Effect.void) =>
        Effect.gen(function* () {
          const writes: ReadonlyArray<EventWrite.EventWrite> = history.written.slice(written).map((item) => item.write)
          written = history.written.length
          for (const write of writes) yield* after(yield* log.append(write), write)
        })
      item.prior.forEach((actions, runIndex) => {
        const run = history.open({ turnId: `prior-turn-${runIndex}`, runId: `prior-run-${runIndex}`, invocationId: `prior-${runIndex}` })
        actions.forEach((action, index) => play(run, action, index))
        run.end()
      })
      const live = history.open({ turnId: "live-turn", runId: "live-run", invocationId: "live" })
      yield* flush()
      const limits = { maxEvents: item.maxEvents, maxBytes: item.maxBytes }
      const configuration: Configuration.InvocationConfiguration = FactBuilders.configuration()
      const fresh = () => Effect.result(log.readModelContext("session-1", { current: "live", ...limits }))
      const loaded = yield* Effect.result(LiveContext.load(log, "session-1", "live", configuration, false, limits))
      const first = yield* fresh()
      if (Result.isFailure(loaded)) {
        assert.isTrue(Result.isFailure(first), "the live context refused what a fresh read returns")
        return "refused"
      }
      const context = loaded.success
      let outcome: "fits" | "refused" = "fits"
      for (const [index, action] of item.live.entries()) {
        play(live, action, index)
        yield* flush((sequence, write) =>
          Effect.gen(function* () {
            context.apply({ sequence, event: write.event }, write.json)
            const cached = context.snapshot()
            const read = yield* fresh()
            if (Result.isFailure(read)) {
              assert.strictEqual(read.failure.reason._tag, "Rejected")
              assert.isTrue(Result.isFailure(cached), `the cached context fits where a fresh read is refused (${read.failure.message})`)
              if (Result.isFailure(cached)) assert.strictEqual(cached.failure.message, read.failure.message)
              outcome = "refused"
            } else {
              assert.isTrue(Result.isSuccess(cached), "the cached context is refused where a fresh read fits")
              if (Result.isSuccess(cached) && !isDeepStrictEqual(cached.success, read.success)) {
                assert.deepStrictEqual(cached.success, read.success, "the cached context differs")
              }
            }
          }),
        )
      }
      return outcome
    }),
  )

/** A model step calling `echo` `calls` times, each with the value `s<step>-c<call>`; with `input`, the prompt usage it reports. */
const echoStep = (step: number, calls: number, input?: number) =>
  Respond.sse(
    OpenAiSse.response({
      toolCalls: Array.from({ length: calls }, (_, call) => ({
        id: `s${step}-c${call}`,
        name: "echo",
        arguments: [JSON.stringify({ value: `s${step}-c${call}` })],
      })),
      ...(input === undefined ? {} : { usage: usage(input) }),
    }),
  )

describe("the live context's limits", () => {
  it.live(
    "equals a fresh read with the same limits after every write of generated runs, oversized ones included",
    () =>
      Effect.gen(function* () {
        const seen = { fits: 0, refused: 0 }
        const samples = fc.sample(scenario, { numRuns: 40, seed: 20_261_201 })
        for (const item of samples) seen[yield* compare(item)]++
        // Both sides of the limits were exercised.
        assert.isAbove(seen.fits, 5)
        assert.isAbove(seen.refused, 5)
      }),
    120_000,
  )

  const refusedSummary = Respond.json(400, Respond.openAiError("the summary was refused", { type: "invalid_request_error" }))
  const toolSummary = Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-s", name: "sink", arguments: [JSON.stringify({ value: "s" })] }] }))

  /**
   * A run whose steps pass the 8 MiB limit while every summary fails (with `summary`, in turn, the last repeated): it ends
   * `outcome` before it sends a request a fresh read refuses, after `summaries` summary requests.
   */
  const outgrowsFailing = (summary: ReadonlyArray<Respond.Responder>, outcome: string, summaries: number, says?: string) =>
    Effect.scoped(
      Effect.gen(function* () {
        // Each step calls `sink` nine times with 100,000 characters: about 1.8 MB of completion and
        // dispatches per step, so after five steps the history is over the 8 MiB a fresh read takes.
        const argument = JSON.stringify({ value: "v".repeat(100_000) })
        const calls = OpenAiSse.response({ toolCalls: Array.from({ length: 9 }, (_, index) => ({ id: `call-${index}`, name: "sink", arguments: [argument] })) })
        // The summary runs in the background while the step goes on: each main answer waits a little,
        // so the summary's request is on the wire before the run reaches the limit, however loaded the machine.
        const slowStep = Respond.sse([Respond.comment("thinking", { delayMs: 150 }), ...calls])
        const context = yield* setup({
          script: [
            ...summary.map((respond, index) => ({ match: isSummaryRequest, respond, repeat: index === summary.length - 1 })),
            { match: (request) => !isSummaryRequest(request), respond: slowStep, repeat: true },
          ],
        })
        const sink = Tool.make({
          name: "sink",
          description: "Takes a large input.",
          input: Schema.Struct({ value: Schema.String }),
          semantics: "parallel",
          execute: () => Effect.succeed(Tool.text("ok")),
        })
        const result = yield* context.engine.run(input(context, "Fill the context.", ToolCatalog.make([sink]), { maxSteps: 8 }))
        assert.strictEqual(result.outcome.kind === "failed" ? result.outcome.class : result.outcome.kind, outcome)
        // The refusal says why no summary brought the history back within the limits.
        if (says !== undefined) assert.include(result.outcome.kind === "failed" ? result.outcome.message : "", says)
        // Past 80 % of the byte limit a compaction was due, and the budget it spent is not renewed
        // before the limit is reached; past it, a fit pass tries again unless the summary answered
        // with tool content (docs/engine.md §5.12 "Fit passes").
        const sent = context.server.requests()
        assert.strictEqual(sent.filter(isSummaryRequest).length, summaries)
        assert.strictEqual(sent.filter((request) => !isSummaryRequest(request)).length, 5)
        for (const request of sent) assert.isBelow(request.body.length, Limits.MAX_HISTORY_BYTES)
        const fresh = yield* Effect.flip(context.log.readModelContext("session-1"))
        assert.strictEqual(fresh.reason._tag === "Rejected" ? fresh.reason.rejection._tag : fresh.reason._tag, "PrefixTooLarge")
      }),
    )

  it.live("a run whose history outgrows 8 MiB while its summaries fail ends event_store before it sends the request a fresh read refuses", () =>
    outgrowsFailing([refusedSummary], "event_store", 2, "the summary asked to fold it was not adopted (the session's summary requests say why)"),
  60_000)

  it.live("a run whose history outgrows 8 MiB after its summary answered with tool calls ends reconciliation_required, asking no other summary", () =>
    outgrowsFailing([toolSummary], "reconciliation_required", 1),
  60_000)

  it.live("a run whose fit pass's own summary answers with tool calls ends reconciliation_required", () =>
    outgrowsFailing([refusedSummary, toolSummary], "reconciliation_required", 2),
  60_000)

  it.live("a run whose turn outgrows 8 MiB goes on when its mid-turn compactions succeed", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const argument = JSON.stringify({ value: "v".repeat(100_000) })
        const step = Respond.sse(
          OpenAiSse.response({ toolCalls: Array.from({ length: 9 }, (_, index) => ({ id: `call-${index}`, name: "sink", arguments: [argument] })) }),
        )
        const context = yield* setup({
          script: [
            { match: isSummaryRequest, respond: summaryAnswer(summaryText("the sink was filled")), repeat: true },
            ...Array.from({ length: 8 }, () => mainEntry(step)),
            mainEntry(answer("Filled.")),
          ],
        })
        const sink = Tool.make({
          name: "sink",
          description: "Takes a large input.",
          input: Schema.Struct({ value: Schema.String }),
          semantics: "parallel",
          execute: () => Effect.succeed(Tool.text("ok")),
        })
        const result = yield* context.engine.run(input(context, "Fill the context.", ToolCatalog.make([sink]), { maxSteps: 10 }))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        const checkpoints = events.flatMap((stored) =>
          stored.event.fact.kind === "context_checkpoint_recorded" ? [stored.event.fact.checkpoint.mode.kind] : [],
        )
        // The turn wrote far more than a fresh read takes (8 steps of about 1.8 MB), folded mid-turn.
        assert.isAbove(events.reduce((sum, stored) => sum + JSON.stringify(stored.event).length, 0), Limits.MAX_HISTORY_BYTES)
        assert.isAtLeast(checkpoints.length, 1)
        assert.isTrue(checkpoints.every((mode) => mode === "mid_turn"))
        for (const request of context.server.requests()) assert.isBelow(request.body.length, Limits.MAX_HISTORY_BYTES)
        // The session stays readable: a fresh read fits the limits.
        yield* context.log.readModelContext("session-1")
      }),
    ),
  120_000)

  it.live("a step that jumps from under the due mark to past the read limits is compacted at the step boundary and the run goes on", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // Three steps of the widest batch, each result just under one page (not archived) of
        // three-byte characters: about 3 MB a step. Two steps stay under 80 % of the 8 MiB limit; the
        // third passes the limit at once, with no compaction due before it.
        const wide = (step: number) => echoStep(step, Limits.MAX_TOOL_CALLS_PER_STEP)
        const context = yield* setup({
          script: [
            { match: isSummaryRequest, respond: summaryAnswer(summaryText("the wide steps ran")), repeat: true },
            mainEntry(wide(1)),
            mainEntry(wide(2)),
            mainEntry(wide(3)),
            mainEntry(answer("Done.")),
            mainEntry(answer("Again.")),
          ],
        })
        const effects = { ran: [] as Array<string> }
        const tools = ToolCatalog.make([echoTool(effects, (value) => `${value} ${"中".repeat(7_480)}`)])
        const result = yield* context.engine.run(input(context, "Run the wide steps.", tools, { maxSteps: 8 }))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.strictEqual(new Set(effects.ran).size, 3 * Limits.MAX_TOOL_CALLS_PER_STEP)
        assert.strictEqual(effects.ran.length, 3 * Limits.MAX_TOOL_CALLS_PER_STEP)
        const events = yield* context.log.events("session-1", 0, 10_000)
        assert.deepStrictEqual(factsOf(events, "tool_result_archived"), [])
        // The history passed the read limit; one summary at the boundary after the third step folded
        // the first two, the third step's request and results kept whole after it.
        const bytes = events.reduce((sum, stored) => sum + Canonical.utf8Length(JSON.stringify(stored.event)), 0)
        assert.isAbove(bytes, Limits.MAX_HISTORY_BYTES)
        const checkpoints = factsOf(events, "context_checkpoint_recorded")
        assert.deepStrictEqual(checkpoints.map((fact) => fact.checkpoint.mode.kind), ["mid_turn"])
        const thirdRequest = events.filter((stored) => stored.event.fact.kind === "model_requested" && stored.event.fact.purpose === "main")[2]!
        assert.strictEqual(checkpoints[0]!.checkpoint.coveredThrough, thirdRequest.sequence - 1)
        assert.strictEqual(context.server.requests().filter(isSummaryRequest).length, 1)
        yield* context.log.readModelContext("session-1")
        // The next turn in the same process starts from the context the run kept.
        const next = yield* context.engine.run(input(context, "Once more.", tools))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
      }),
    ),
  120_000)

  it.live("a context the previous run kept past the read limits is folded pre_turn at the next run's first step", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The first run's last step (maxSteps) settles a third wide batch and ends step_limit with no
        // step boundary after it: its kept context is past the limit when the next run starts.
        const wide = (step: number) => echoStep(step, Limits.MAX_TOOL_CALLS_PER_STEP)
        const context = yield* setup({
          script: [
            { match: isSummaryRequest, respond: summaryAnswer(summaryText("three wide steps ran")), repeat: true },
            mainEntry(wide(1)),
            mainEntry(wide(2)),
            mainEntry(wide(3)),
            mainEntry(answer("Done.")),
          ],
        })
        const tools = ToolCatalog.make([echoTool({ ran: [] }, (value) => `${value} ${"中".repeat(7_480)}`)])
        const first = yield* context.engine.run(input(context, "Run the wide steps.", tools, { maxSteps: 3 }))
        assert.strictEqual(first.outcome.kind === "failed" && first.outcome.class, "step_limit")
        assert.deepStrictEqual(factsOf(yield* context.log.events("session-1", 0, 10_000), "context_checkpoint_recorded"), [])
        const next = yield* context.engine.run(input(context, "Go on.", tools))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1", 0, 10_000)
        const checkpoints = factsOf(events, "context_checkpoint_recorded")
        assert.deepStrictEqual(checkpoints.map((fact) => fact.checkpoint.mode.kind), ["pre_turn"])
        // It folds the first two steps; the third step's request and results stay whole after it.
        const thirdRequest = events.filter((stored) => stored.event.fact.kind === "model_requested" && stored.event.fact.purpose === "main")[2]!
        assert.strictEqual(checkpoints[0]!.checkpoint.coveredThrough, thirdRequest.sequence - 1)
        assert.strictEqual(context.server.requests().filter(isSummaryRequest).length, 1)
        yield* context.log.readModelContext("session-1")
      }),
    ),
  120_000)

  it.live("past the read limits at a step boundary, a summary running beside the run is adopted and the prune it held back paid before any other", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The first step reaches the declared window: its summary runs in the background, slowly,
        // while two more steps take the history past the read limit: a wide one of results just under
        // one page, then one of 32 results over a page, left unarchived while the summary runs. That
        // summary (of the first step) is waited for and adopted, the owed prune archives the large
        // results, and no other summary is asked.
        const step = (index: number, calls: number) => echoStep(index, calls, 5_000)
        const slowSummary = Respond.sse([Respond.comment("summarising", { delayMs: 4_000 }), ...summaryAnswerSteps(summaryText("the first step ran"))])
        const context = yield* setup({
          script: [
            { match: isSummaryRequest, respond: slowSummary, repeat: true },
            mainEntry(step(1, Limits.MAX_TOOL_CALLS_PER_STEP)),
            mainEntry(step(2, Limits.MAX_TOOL_CALLS_PER_STEP)),
            mainEntry(step(3, 32)),
            mainEntry(answer("Done.")),
          ],
        })
        const effects = { ran: [] as Array<string> }
        const output = (value: string) => (value.startsWith("s3-") ? `${value} ${"p".repeat(200_000)}` : `${value} ${"中".repeat(7_480)}`)
        const tools = ToolCatalog.make([echoTool(effects, output)])
        const windowed = { context: { providerId: "openai-compatible", declaredWindow: 1_000 } }
        const result = yield* context.engine.run(input(context, "Run the wide steps.", tools, { maxSteps: 8, ...windowed }))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.strictEqual(effects.ran.length, 2 * Limits.MAX_TOOL_CALLS_PER_STEP + 32)
        assert.strictEqual(context.server.requests().filter(isSummaryRequest).length, 1)
        const events = yield* context.log.events("session-1", 0, 10_000)
        const checkpoints = factsOf(events, "context_checkpoint_recorded")
        assert.deepStrictEqual(checkpoints.map((fact) => fact.checkpoint.mode.kind), ["mid_turn"])
        // It covers the first step (its source), not the second: the summary started beside the second step.
        const secondRequest = events.filter((stored) => stored.event.fact.kind === "model_requested" && stored.event.fact.purpose === "main")[1]!
        assert.isBelow(checkpoints[0]!.checkpoint.coveredThrough, secondRequest.sequence + 1)
        const archived = factsOf(events, "tool_result_archived").map((fact) => fact.placeholder.identity.toolCallId)
        assert.deepStrictEqual(archived, Array.from({ length: 32 }, (_, call) => `s3-c${call}`))
        yield* context.log.readModelContext("session-1")
      }),
    ),
  120_000)

  it.live("uses the read's own default limits (10,000 events, 8 MiB)", () =>
    Effect.sync(() => {
      assert.deepStrictEqual(LiveContext.defaultLimits, { maxEvents: Limits.MAX_HISTORY_EVENTS, maxBytes: Limits.MAX_HISTORY_BYTES })
      assert.deepStrictEqual(LiveContext.defaultLimits, { maxEvents: EventLog.defaults.maxEvents, maxBytes: EventLog.defaults.maxBytes })
    }))
})
