/**
 * Slices (docs/engine.md §5.12 "Slices"): a session whose history outgrew the model's window before
 * it was compacted, so that the summary request itself is refused as too long, is compacted slice by
 * slice: the history through the highest clean cut holding at most half the bytes of the refused
 * source, then the rest from that checkpoint. Overflow recovery at a run's first step adopts every
 * slice and sends the step again; a standalone compaction records one slice, the next one the rest.
 * A run whose own steps outgrew the window slices `mid_turn`, each cut covering its opening, after
 * slicing `pre_turn` the history before it when that alone is over the slice's limit. Real SQLite
 * files, the scripted server on loopback refusing every request over a byte limit as a context
 * overflow.
 */
import { assert, describe, it } from "@effect/vitest"
import type { Event, Fact } from "@maka/facts"
import { FactBuilders, type ScriptedServer } from "@maka/testkit"
import { Effect } from "effect"
import type * as Engine from "../src/Engine.ts"
import { MAX_RAISES, MAX_SLICES, raising } from "../src/internal/runner.ts"
import { answer, echoCall, isSummaryRequest, mainEntry, overflow, summaryAnswer, summaryText } from "./support/compaction.ts"
import { expectFrozenSources, factsOf } from "./support/harness.ts"
import { catalog, input, setup, type Setup } from "./support/setup.ts"

/** Each step of the first run adds about 6 KB: the call's value, then its echo. */
const VALUE = "v".repeat(3_000)
const STEPS = 4
/** The window, in request bytes, from the second run on: the first run's history no longer fits. */
const LIMIT = 16_000

const history = (limit: { bytes: number }): ReadonlyArray<ScriptedServer.ScriptEntry> => [
  // Any request over the limit, a summary's too, is refused as the model's window would refuse it.
  { match: (request) => request.body.length > limit.bytes, respond: overflow(), repeat: true },
  { match: isSummaryRequest, respond: summaryAnswer(summaryText("slice")), repeat: true },
  ...Array.from({ length: STEPS }, (_, index) => mainEntry(echoCall(`call-${index}`, `${index}${VALUE}`))),
  mainEntry(answer("Done.")),
]

let compactions = 0
const compactInput = (context: Setup): Engine.CompactInput => {
  compactions++
  return {
    invocation: FactBuilders.invocation({
      turnId: `slice-turn-${compactions}`,
      runId: `slice-run-${compactions}`,
      invocationId: `slice-invocation-${compactions}`,
    }),
    model: context.model,
    configuration: FactBuilders.configuration({ cwd: context.workspace, model: FactBuilders.modelBinding({ model: "test-model" }) }),
  }
}

/** `events` without the summary requests. */
const mainRequestsOf = (events: ReadonlyArray<Event.StoredEvent>) =>
  events.filter((stored) => stored.event.fact.kind !== "model_requested" || stored.event.fact.purpose === "main")

/** The checkpoints of `events`, with their events' ids. */
const checkpointsOf = (events: ReadonlyArray<Event.StoredEvent>) =>
  events.flatMap((stored) => {
    const fact: Fact.Fact = stored.event.fact
    return fact.kind === "context_checkpoint_recorded" ? [{ id: stored.event.id, sequence: stored.sequence, checkpoint: fact.checkpoint }] : []
  })

/** The sequence of the last event before the opening of `invocationId`: a `pre_turn` or standalone fence. */
const fenceOf = (events: ReadonlyArray<Event.StoredEvent>, invocationId: string) => {
  const opening = events.find((stored) => stored.event.invocation.invocationId === invocationId)!
  return events.filter((stored) => stored.sequence < opening.sequence).at(-1)!.sequence
}

describe("a summary too long for the model", () => {
  it.live("is made over slices at the overflow of a run's first step, which then goes on", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const limit = { bytes: Number.MAX_SAFE_INTEGER }
        const context = yield* setup({ script: [...history(limit), mainEntry(answer("Recovered."))] })
        const tools = catalog({ ran: [] })
        const first = yield* context.engine.run(input(context, "Echo four long values.", tools, { maxSteps: 8 }))
        assert.deepStrictEqual(first.outcome, { kind: "completed" })
        limit.bytes = LIMIT
        const before = context.server.requests().length
        const second = input(context, "Go on.", tools, { maxSteps: 4 })
        const result = yield* context.engine.run(second)
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const sent = context.server.requests().slice(before)
        const summaries = sent.filter(isSummaryRequest)
        // The first summary, of the whole history, was refused; every slice after it fitted.
        assert.isAbove(summaries[0]!.body.length, LIMIT)
        assert.isAtLeast(summaries.length, 3)
        for (const summary of summaries.slice(1)) assert.isAtMost(summary.body.length, LIMIT)
        const events = yield* context.log.events("session-1")
        const own = checkpointsOf(events.filter((stored) => stored.event.invocation.invocationId === second.invocation.invocationId))
        assert.deepStrictEqual(own.map((entry) => entry.checkpoint.mode.kind), Array.from(own, () => "pre_turn"))
        assert.isAtLeast(own.length, 2)
        // Each slice updates the one before and covers more; the last covers everything before the run.
        for (let index = 1; index < own.length; index++) {
          assert.strictEqual(own[index]!.checkpoint.previousCheckpointId, own[index - 1]!.id)
          assert.isAbove(own[index]!.checkpoint.coveredThrough, own[index - 1]!.checkpoint.coveredThrough)
        }
        assert.strictEqual(own.at(-1)!.checkpoint.coveredThrough, fenceOf(events, second.invocation.invocationId))
        // The step was sent again over the last checkpoint, and fitted.
        const last = sent.at(-1)!
        assert.isFalse(isSummaryRequest(last))
        assert.isAtMost(last.body.length, LIMIT)
        assert.include(last.body, "slice")
        assert.strictEqual(factsOf(events, "model_interrupted").length, 1 + 1)
        // Every main request's source re-reads from the log as it was sent, over the slices'
        // checkpoints. (A later slice's summary source had its own run's checkpoint, written above
        // its fence, as baseline: a frozen read leaves every fact above its high water out.)
        assert.isAbove(yield* expectFrozenSources(context.log, mainRequestsOf(yield* context.log.events("session-1"))), 0)
      }),
    ))

  it.live("is made over a slice by a standalone compaction; the next one covers the rest", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const limit = { bytes: Number.MAX_SAFE_INTEGER }
        const context = yield* setup({ script: history(limit) })
        const first = yield* context.engine.run(input(context, "Echo four long values.", catalog({ ran: [] }), { maxSteps: 8 }))
        assert.deepStrictEqual(first.outcome, { kind: "completed" })
        limit.bytes = LIMIT
        const before = context.server.requests().length
        const compact = compactInput(context)
        const sliced = yield* context.engine.compact(compact)
        let events = yield* context.log.events("session-1")
        const [slice] = checkpointsOf(events)
        assert.deepStrictEqual(sliced.outcome, { kind: "context_compact_finished", outcome: { kind: "compacted", checkpointId: slice!.id } })
        const fence = fenceOf(events, compact.invocation.invocationId)
        assert.isBelow(slice!.checkpoint.coveredThrough, fence)
        const summaries = context.server.requests().slice(before).filter(isSummaryRequest)
        assert.deepStrictEqual(
          summaries.map((summary) => summary.body.length > LIMIT),
          [true, ...Array.from(summaries.slice(1), () => false)],
        )
        const next = compactInput(context)
        const rest = yield* context.engine.compact(next)
        events = yield* context.log.events("session-1")
        const [, whole] = checkpointsOf(events)
        assert.deepStrictEqual(rest.outcome, { kind: "context_compact_finished", outcome: { kind: "compacted", checkpointId: whole!.id } })
        assert.strictEqual(whole!.checkpoint.previousCheckpointId, slice!.id)
        // Through the second compaction's fence: the first compaction's own events are no history.
        assert.strictEqual(whole!.checkpoint.coveredThrough, fenceOf(events, next.invocation.invocationId))
        // Every main request's source re-reads from the log as it was sent, over the slices'
        // checkpoints. (A later slice's summary source had its own run's checkpoint, written above
        // its fence, as baseline: a frozen read leaves every fact above its high water out.)
        assert.isAbove(yield* expectFrozenSources(context.log, mainRequestsOf(yield* context.log.events("session-1"))), 0)
      }),
    ))

  it.live("is made over mid_turn slices when the run's own steps outgrew the window, and the run goes on", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const limit = { bytes: LIMIT }
        const context = yield* setup({ script: history(limit) })
        const effects = { ran: [] as Array<string> }
        const run = input(context, "Echo four long values.", catalog(effects), { maxSteps: 12 })
        const result = yield* context.engine.run(run)
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        // Every call ran once, whatever was summarised meanwhile.
        assert.deepStrictEqual(effects.ran, Array.from({ length: STEPS }, (_, index) => `${index}${VALUE}`))
        const summaries = context.server.requests().filter(isSummaryRequest)
        assert.isAbove(summaries[0]!.body.length, LIMIT)
        assert.isAtMost(summaries[1]!.body.length, LIMIT)
        const events = yield* context.log.events("session-1")
        const checkpoints = checkpointsOf(events)
        assert.isAtLeast(checkpoints.length, 1)
        const opening = events.find((stored) => stored.event.fact.kind === "invocation_opened")!
        for (const { checkpoint } of checkpoints) {
          assert.deepStrictEqual(checkpoint.mode, { kind: "mid_turn", anchorEventId: opening.event.id })
          assert.isAtLeast(checkpoint.coveredThrough, opening.sequence)
        }
        // Every main request's source re-reads from the log as it was sent, over the slices'
        // checkpoints. (A later slice's summary source had its own run's checkpoint, written above
        // its fence, as baseline: a frozen read leaves every fact above its high water out.)
        assert.isAbove(yield* expectFrozenSources(context.log, mainRequestsOf(yield* context.log.events("session-1"))), 0)
      }),
    ))

  it.live("slices the history before the run pre_turn first when it alone is over a mid_turn slice's limit", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const limit = { bytes: Number.MAX_SAFE_INTEGER }
        const context = yield* setup({ script: [...history(limit), mainEntry(echoCall("call-next", `n${VALUE}`)), mainEntry(answer("Recovered."))] })
        const tools = catalog({ ran: [] })
        const first = yield* context.engine.run(input(context, "Echo four long values.", tools, { maxSteps: 8 }))
        assert.deepStrictEqual(first.outcome, { kind: "completed" })
        // The second run's first request fits; after its step the next one does not.
        const before = context.server.requests().length
        limit.bytes = context.server.requests()[before - 1]!.body.length + 600
        const second = input(context, "One more call.", tools, { maxSteps: 6 })
        const result = yield* context.engine.run(second)
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        const own = checkpointsOf(events.filter((stored) => stored.event.invocation.invocationId === second.invocation.invocationId))
        const modes = own.map((entry) => entry.checkpoint.mode.kind)
        // The history before the run in pre_turn slices, then the run's own from there.
        assert.strictEqual(modes[0], "pre_turn")
        assert.strictEqual(modes.at(-1), "mid_turn")
        assert.deepStrictEqual(modes, [...modes.filter((mode) => mode === "pre_turn"), ...modes.filter((mode) => mode === "mid_turn")])
        const lastPreTurn = own.filter((entry) => entry.checkpoint.mode.kind === "pre_turn").at(-1)!
        assert.strictEqual(lastPreTurn.checkpoint.coveredThrough, fenceOf(events, second.invocation.invocationId))
        for (let index = 1; index < own.length; index++) assert.strictEqual(own[index]!.checkpoint.previousCheckpointId, own[index - 1]!.id)
        const sent = context.server.requests().slice(before)
        assert.isFalse(isSummaryRequest(sent.at(-1)!))
        assert.isAtMost(sent.at(-1)!.body.length, limit.bytes)
        // Every main request's source re-reads from the log as it was sent, over the slices'
        // checkpoints. (A later slice's summary source had its own run's checkpoint, written above
        // its fence, as baseline: a frozen read leaves every fact above its high water out.)
        assert.isAbove(yield* expectFrozenSources(context.log, mainRequestsOf(yield* context.log.events("session-1"))), 0)
      }),
    ))

  it.live("slices at the overflow a background summary the provider refused as too long, and the session's runs go on", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const limit = { bytes: Number.MAX_SAFE_INTEGER }
        const context = yield* setup({
          script: [
            { match: (request) => request.body.length > limit.bytes, respond: overflow(), repeat: true },
            { match: isSummaryRequest, respond: summaryAnswer(summaryText("slice")), repeat: true },
            ...Array.from({ length: STEPS }, (_, index) => mainEntry(echoCall(`call-${index}`, `${index}${VALUE}`))),
            // The answer reports a prompt over the declared window: the next run's summary is due.
            mainEntry(answer("Done.", 5_000)),
            mainEntry(answer("Recovered.")),
            mainEntry(answer("Recovered again.")),
          ],
        })
        const tools = catalog({ ran: [] })
        const windowed = { context: { providerId: "openai-compatible", declaredWindow: 1_000 } }
        const first = yield* context.engine.run(input(context, "Echo four long values.", tools, { maxSteps: 8, ...windowed }))
        assert.deepStrictEqual(first.outcome, { kind: "completed" })
        limit.bytes = LIMIT
        const before = context.server.requests().length
        for (const message of ["Go on.", "And again."]) {
          const result = yield* context.engine.run(input(context, message, tools, { maxSteps: 4, ...windowed }))
          assert.deepStrictEqual(result.outcome, { kind: "completed" }, message)
        }
        const summaries = context.server.requests().slice(before).filter(isSummaryRequest)
        assert.isAbove(summaries[0]!.body.length, LIMIT)
        for (const summary of summaries.slice(1)) assert.isAtMost(summary.body.length, LIMIT)
        assert.isAtLeast(checkpointsOf(yield* context.log.events("session-1")).length, 2)
        // Every main request's source re-reads from the log as it was sent, over the slices'
        // checkpoints. (A later slice's summary source had its own run's checkpoint, written above
        // its fence, as baseline: a frozen read leaves every fact above its high water out.)
        assert.isAbove(yield* expectFrozenSources(context.log, mainRequestsOf(yield* context.log.events("session-1"))), 0)
      }),
    ))

  it.live("never slices pre_turn past a checkpoint of the run: each request keeps the run's opening", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const limit = { bytes: Number.MAX_SAFE_INTEGER, narrowAt: Number.MAX_SAFE_INTEGER }
        // From the request numbered `narrowAt` on, the window is its size and 5,000 bytes more.
        const overLimit = (request: ScriptedServer.RecordedRequest) => {
          if (request.index === limit.narrowAt) limit.bytes = request.body.length + 5_000
          return request.body.length > limit.bytes
        }
        const context = yield* setup({
          script: [
            { match: overLimit, respond: overflow(), repeat: true },
            { match: isSummaryRequest, respond: summaryAnswer(summaryText("slice")), repeat: true },
            mainEntry(answer(`First answer ${"h".repeat(1_500)}`)),
            mainEntry(echoCall("call-small", "small")),
            mainEntry(echoCall("call-large", "b".repeat(6_000))),
            mainEntry(answer("Done.")),
          ],
        })
        const tools = catalog({ ran: [] })
        yield* context.engine.run(input(context, "First run.", tools))
        const base = context.server.requests().length
        const second = input(context, "OPENING-MARKER", tools, { maxSteps: 8 })
        // The window narrows at the run's second request: the step after the large result
        // overflows, and so does the summary of the run's history.
        limit.narrowAt = base + 1
        yield* context.engine.run(second)
        const sent = context.server.requests().slice(base)
        for (const request of sent.filter((request) => !isSummaryRequest(request))) assert.include(request.body, "OPENING-MARKER")
        const events = yield* context.log.events("session-1")
        const own = checkpointsOf(events.filter((stored) => stored.event.invocation.invocationId === second.invocation.invocationId))
        assert.isAtLeast(own.length, 1)
        // No checkpoint covers less than the one before it.
        const all = checkpointsOf(events)
        for (let index = 1; index < all.length; index++) {
          assert.isAtLeast(all[index]!.checkpoint.coveredThrough, all[index - 1]!.checkpoint.coveredThrough)
        }
        // Every main request's source re-reads from the log as it was sent, over the slices'
        // checkpoints. (A later slice's summary source had its own run's checkpoint, written above
        // its fence, as baseline: a frozen read leaves every fact above its high water out.)
        assert.isAbove(yield* expectFrozenSources(context.log, mainRequestsOf(yield* context.log.events("session-1"))), 0)
      }),
    ))

  it.live("after a background summary the provider refused, makes the next one in slices at once, not another over the same history", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const limit = { bytes: Number.MAX_SAFE_INTEGER }
        const context = yield* setup({
          script: [
            // Only summary requests are over the provider's window; the main requests fit.
            { match: (request) => isSummaryRequest(request) && request.body.length > limit.bytes, respond: overflow(), repeat: true },
            { match: isSummaryRequest, respond: summaryAnswer(summaryText("slice")), repeat: true },
            ...Array.from({ length: STEPS }, (_, index) => mainEntry(echoCall(`call-${index}`, `${index}${VALUE}`))),
            mainEntry(answer("Done.", 5_000)),
            // Every step reports a prompt over the declared window: a summary is due at each.
            ...Array.from({ length: STEPS }, (_, index) => mainEntry(echoCall(`more-${index}`, `m${index}`, 5_000))),
            mainEntry(answer("Done again.", 5_000)),
          ],
        })
        const tools = catalog({ ran: [] })
        const windowed = { context: { providerId: "openai-compatible", declaredWindow: 1_000 } }
        yield* context.engine.run(input(context, "Echo four long values.", tools, { maxSteps: 8, ...windowed }))
        limit.bytes = LIMIT
        const before = context.server.requests().length
        const second = input(context, "Go on.", tools, { maxSteps: 8, ...windowed })
        const result = yield* context.engine.run(second)
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const summaries = context.server.requests().slice(before).filter(isSummaryRequest)
        // The background summary over the whole history was refused; every one after it was a slice.
        assert.deepStrictEqual(
          summaries.map((summary) => summary.body.length > LIMIT),
          [true, ...Array.from(summaries.slice(1), () => false)],
        )
        const events = yield* context.log.events("session-1")
        assert.isAtLeast(checkpointsOf(events.filter((stored) => stored.event.invocation.invocationId === second.invocation.invocationId)).length, 1)
        assert.isAbove(yield* expectFrozenSources(context.log, mainRequestsOf(events)), 0)
      }),
    ))

  it.live("never asks a slice's summary when its request is one refused already (events the prompt does not show)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const refuse = { main: false, all: false }
        const context = yield* setup({
          script: [
            { match: (request) => refuse.all || (refuse.main && !isSummaryRequest(request)), respond: overflow(), repeat: true },
            { match: isSummaryRequest, respond: summaryAnswer(summaryText("slice")), repeat: true },
            ...["One.", "Two.", "Three."].map((text) => mainEntry(answer(text))),
          ],
        })
        const tools = catalog({ ran: [] })
        for (const message of ["First turn.", "Second turn.", "Third turn."]) {
          assert.deepStrictEqual((yield* context.engine.run(input(context, message, tools))).outcome, { kind: "completed" })
        }
        // A run whose steps the provider refuses: its requests, interrupted, are events no prompt shows.
        refuse.main = true
        const overflowed = yield* context.engine.run(input(context, "Overflow me.", tools, { maxSteps: 2 }))
        assert.strictEqual(overflowed.outcome.kind, "failed")
        refuse.all = true
        const before = context.server.requests().length
        const last = yield* context.engine.run(input(context, "Once more.", tools, { maxSteps: 2 }))
        assert.strictEqual(last.outcome.kind, "failed")
        const summaries = context.server.requests().slice(before).filter(isSummaryRequest)
        assert.isAtLeast(summaries.length, 1)
        const asked = summaries.map((request) => request.body)
        assert.deepStrictEqual(asked, [...new Set(asked)], "a summary request was sent again after its refusal")
      }),
    ))

  it.live("raises a slice's limit toward the smallest source refused when no clean cut fits the halved one", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const limit = { bytes: Number.MAX_SAFE_INTEGER }
        // Three short steps, then three longer ones: once the short ones are summarised, half of the
        // refused slice holds none of the longer steps, while the longer ones fit the window.
        const sizes = [1_000, 1_000, 1_000, 2_600, 2_600, 2_600]
        const context = yield* setup({
          script: [
            { match: (request) => request.body.length > limit.bytes, respond: overflow(), repeat: true },
            { match: isSummaryRequest, respond: summaryAnswer(summaryText("slice")), repeat: true },
            ...sizes.map((size, index) => mainEntry(echoCall(`call-${index}`, String(index).repeat(size)))),
            mainEntry(answer("Done.")),
            mainEntry(answer("Recovered.")),
          ],
        })
        const tools = catalog({ ran: [] })
        yield* context.engine.run(input(context, "Echo six values.", tools, { maxSteps: 10 }))
        limit.bytes = 7_000
        const before = context.server.requests().length
        const result = yield* context.engine.run(input(context, "Go on.", tools, { maxSteps: 4 }))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const summaries = context.server.requests().slice(before).filter(isSummaryRequest)
        // The whole history and its first slice were refused; then slices of half that, then larger.
        assert.deepStrictEqual(summaries.slice(0, 2).map((summary) => summary.body.length > limit.bytes), [true, true])
        const accepted = summaries.slice(2).map((summary) => summary.body.length)
        for (const length of accepted) assert.isAtMost(length, limit.bytes)
        assert.isAbove(Math.max(...accepted), summaries[1]!.body.length / 2)
        assert.isAbove(yield* expectFrozenSources(context.log, mainRequestsOf(yield* context.log.events("session-1"))), 0)
      }),
    ))
  it.live("raises the limit of a run's second recovery, whose halved slice holds nothing past the run's own checkpoint", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // A model whose summaries fit less than its main requests, and long summaries: at the run's
        // second overflow, half the refused source is less than its own checkpoint's summary.
        const SUMMARY_LIMIT = 3_500
        const MAIN_LIMIT = 6_000
        const context = yield* setup({
          script: [
            { match: (request) => request.body.length > (isSummaryRequest(request) ? SUMMARY_LIMIT : MAIN_LIMIT), respond: overflow(), repeat: true },
            { match: isSummaryRequest, respond: summaryAnswer(summaryText(`slice ${"s".repeat(800)}`)), repeat: true },
            ...Array.from({ length: 24 }, (_, index) => mainEntry(echoCall(`call-${index}`, `${index}${"v".repeat(300)}`))),
            mainEntry(answer("Done.")),
          ],
        })
        const effects = { ran: [] as Array<string> }
        const result = yield* context.engine.run(input(context, "Echo the values.", catalog(effects), { maxSteps: 40 }))
        const sent = context.server.requests().map((request) => `${isSummaryRequest(request) ? "S" : "M"}${request.body.length}`)
        // It used to give up at the second recovery, after its first two summaries were refused.
        assert.deepStrictEqual(result.outcome, { kind: "completed" }, sent.join(" "))
        assert.lengthOf(effects.ran, 24)
      }),
    ))

  it.live("raises a standalone slice's limit when no clean cut fits the halved one", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const limit = { bytes: Number.MAX_SAFE_INTEGER }
        // One long step, then two short ones: once the opening message is summarised, half of the
        // refused history holds no step, while the long step alone fits the window.
        const long = "0".repeat(2_600)
        const context = yield* setup({
          script: [
            { match: (request) => request.body.length > limit.bytes || (limit.bytes < 1e9 && request.body.includes("call-1") && request.body.includes(long.slice(0, 100))), respond: overflow(), repeat: true },
            { match: isSummaryRequest, respond: summaryAnswer(summaryText("slice")), repeat: true },
            mainEntry(echoCall("call-0", long)),
            mainEntry(echoCall("call-1", "1".repeat(600))),
            mainEntry(echoCall("call-2", "2".repeat(600))),
            mainEntry(answer("Done.")),
          ],
        })
        yield* context.engine.run(input(context, "Echo three values.", catalog({ ran: [] }), { maxSteps: 6 }))
        limit.bytes = 7_000
        // The first slice is the opening message alone: a clean cut always follows it.
        const first = yield* context.engine.compact(compactInput(context))
        assert.strictEqual(first.outcome.kind, "context_compact_finished")
        const before = context.server.requests().length
        const second = yield* context.engine.compact(compactInput(context))
        const events = yield* context.log.events("session-1")
        const [opening, slice] = checkpointsOf(events)
        assert.deepStrictEqual(second.outcome, { kind: "context_compact_finished", outcome: { kind: "compacted", checkpointId: slice!.id } })
        assert.strictEqual(slice!.checkpoint.previousCheckpointId, opening!.id)
        const summaries = context.server.requests().slice(before).filter(isSummaryRequest)
        // The rest of the history and its half were refused; half of that held no step, so the limit
        // rose, and the slice of the long step fitted.
        assert.deepStrictEqual(summaries.map((summary) => summary.body.length > limit.bytes), [true, true, false])
        assert.include(summaries.at(-1)!.body, long)
        assert.notInclude(summaries.at(-1)!.body, "1".repeat(600))
      }),
    ))
  it.live("makes at most MAX_SLICES summaries in one compaction; the next run goes on from them", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const limit = { bytes: Number.MAX_SAFE_INTEGER }
        // Forty short steps: a slice that fits the window holds two or three of them.
        const steps = 40
        const context = yield* setup({
          script: [
            { match: (request) => request.body.length > limit.bytes, respond: overflow(), repeat: true },
            { match: isSummaryRequest, respond: summaryAnswer(summaryText("slice")), repeat: true },
            ...Array.from({ length: steps }, (_, index) => mainEntry(echoCall(`call-${index}`, String(index % 10).repeat(500)))),
            mainEntry(answer("Done.")),
            mainEntry(answer("Recovered.")),
          ],
        })
        const tools = catalog({ ran: [] })
        yield* context.engine.run(input(context, "Echo forty values.", tools, { maxSteps: steps + 2 }))
        limit.bytes = 4_000
        let before = context.server.requests().length
        const stopped = yield* context.engine.run(input(context, "Go on.", tools, { maxSteps: 4 }))
        // Sixteen summaries (docs/engine.md §5.12 "Slices"), then the step sent again, still too long.
        assert.strictEqual(context.server.requests().slice(before).filter(isSummaryRequest).length, MAX_SLICES)
        assert.strictEqual(stopped.outcome.kind === "failed" && stopped.outcome.class, "context_overflow")
        const adopted = checkpointsOf(yield* context.log.events("session-1"))
        assert.isAtLeast(adopted.length, MAX_SLICES - 5)
        before = context.server.requests().length
        const next = yield* context.engine.run(input(context, "Go on again.", tools, { maxSteps: 4 }))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        const all = checkpointsOf(events)
        assert.isAbove(all.length, adopted.length)
        for (let index = 1; index < all.length; index++) assert.strictEqual(all[index]!.checkpoint.previousCheckpointId, all[index - 1]!.id)
        assert.isAtMost(context.server.requests().slice(before).filter(isSummaryRequest).at(-1)!.body.length, limit.bytes)
        assert.isAbove(yield* expectFrozenSources(context.log, mainRequestsOf(events)), 0)
      }),
    ))
})

describe("a slice's limit raised toward the smallest source refused", () => {
  /** `raising` over a slice that fits from `fitsAt` bytes on; the limits it was tried at. */
  const raise = (maxBytes: number, smallestRefused: number | undefined, fitsAt: number) =>
    Effect.gen(function* () {
      const tried: Array<number> = []
      const result = yield* raising((limit) => Effect.sync(() => (tried.push(limit), limit >= fitsAt ? "slice" : ("too_large" as const))), maxBytes, smallestRefused)
      return { ...result, tried }
    })

  it.effect("rises halfway each time and stops at the first limit that fits", () =>
    Effect.gen(function* () {
      const { next, maxBytes, tried } = yield* raise(1_000, 2_000, 1_700)
      assert.deepStrictEqual(tried, [1_000, 1_500, 1_750])
      assert.deepStrictEqual([next, maxBytes], ["slice", 1_750])
    }),
  )

  it.effect(`rises at most ${MAX_RAISES} times, however far the smallest refused source lies`, () =>
    Effect.gen(function* () {
      const { next, tried } = yield* raise(1_000, 1_000 + 2 ** 30, Number.MAX_SAFE_INTEGER)
      assert.strictEqual(next, "too_large")
      assert.strictEqual(tried.length, 1 + MAX_RAISES)
    }),
  )

  it.effect("never rises without a refused source, nor past one byte below it", () =>
    Effect.gen(function* () {
      assert.deepStrictEqual((yield* raise(1_000, undefined, 5_000)).tried, [1_000])
      assert.deepStrictEqual((yield* raise(1_000, 1_003, 5_000)).tried, [1_000, 1_001, 1_002])
    }),
  )
})
