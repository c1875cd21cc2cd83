import { Lineage, type Event } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import { afterEach, describe, expect, it, vi } from "vitest"
import { timelineOf } from "../src/internal/inspect.ts"
import { RunRenderer } from "../src/internal/render.ts"

const render = (events: ReadonlyArray<Event.StoredEvent>) => {
  let out = ""
  let err = ""
  const renderer = new RunRenderer({ out: (text) => (out += text), err: (text) => (err += text) }, false, () => undefined)
  for (const stored of events) renderer.handle(stored)
  renderer.stop()
  return { out, err }
}

/** A step's text as the model streams it, then its completion. */
const answer = (run: History.Run, stepId: string, text: string) => {
  run.observe(stepId, { kind: "part_started", id: "text-0", textKind: "text" })
  run.observe(stepId, { kind: "part_delta", id: "text-0", text })
  run.complete(stepId, FactBuilders.textStep(text))
}

const checkpoint = (coveredThrough: number) => ({
  mode: { kind: "pre_turn" as const },
  coveredThrough,
  sourceDigest: FactBuilders.digestOf("source"),
  summary: { format: "sections_v1" as const, text: FactBuilders.VALID_SUMMARY },
  summaryStepId: "summary-step",
})

describe("what maka run shows of compaction", () => {
  it("announces a summary, hides its text, and names the checkpoint it records", () => {
    const history = new History.History()
    const run = history.open()
    const summary = run.request({ stepId: "summary-step", purpose: "summary" })
    answer(run, summary, FactBuilders.VALID_SUMMARY)
    run.checkpoint(checkpoint(1))
    const main = run.request()
    answer(run, main, "the answer")
    run.end()
    const shown = render(history.written.map((written) => written.stored))
    expect(shown.out).toBe("the answer\n")
    expect(shown.err).toBe("compacting the context…\ncontext compacted: history through #1 summarised (pre_turn)\n")
  })

  it("says so when a background summary is cancelled because the run ended first", () => {
    const history = new History.History()
    const run = history.open()
    const main = run.request()
    const summary = run.request({ purpose: "summary" })
    answer(run, main, "the answer")
    run.interrupt(summary, "cancelled")
    run.end()
    const shown = render(history.written.map((written) => written.stored))
    expect(shown.err).toBe("compacting the context…\ncompaction left to the next turn: this one ended before its summary\n")
  })

  it("says a summary request failed without calling compaction over: a smaller one may follow and be adopted", () => {
    const history = new History.History()
    const run = history.open()
    const refused = run.request({ purpose: "summary" })
    run.interrupt(refused, "failed")
    const slice = run.request({ stepId: "summary-step", purpose: "summary" })
    answer(run, slice, FactBuilders.VALID_SUMMARY)
    run.checkpoint(checkpoint(1))
    const main = run.request()
    answer(run, main, "the answer")
    run.end()
    const shown = render(history.written.map((written) => written.stored))
    expect(shown.err).toBe(
      "compacting the context…\nsummary request failed: the history stays as it was until a summary is adopted\n" +
        "compacting the context…\ncontext compacted: history through #1 summarised (pre_turn)\n",
    )
  })

  it("names the defect of a summary the engine refused, and says so when a good one was not recorded before the run ended", () => {
    const shown = (text: string, usage?: ReturnType<typeof FactBuilders.usage>) => {
      const history = new History.History()
      const run = history.open()
      const summary = run.request({ purpose: "summary" })
      run.observe(summary, { kind: "part_started", id: "text-0", textKind: "text" })
      run.complete(summary, FactBuilders.textStep(text, usage))
      const main = run.request()
      answer(run, main, "the answer")
      run.end()
      return render(history.written.map((written) => written.stored))
    }
    const refused = shown("not a summary")
    expect(refused.out).toBe("the answer\n")
    expect(refused.err).toBe(
      "compacting the context…\ncompaction not adopted: the model's summary was refused (malformed_summary_missing_section); the history stays as it was\n",
    )
    expect(shown(FactBuilders.VALID_SUMMARY, FactBuilders.usage(20_000, 10)).err).toContain("(malformed_summary_too_small_for_fold)")
    expect(shown(FactBuilders.VALID_SUMMARY).err).toBe("compacting the context…\ncompaction not adopted: no checkpoint was recorded before the run ended\n")
  })
})

describe("the progress of a long tool call", () => {
  afterEach(() => {
    vi.useRealTimers()
    vi.restoreAllMocks()
  })

  it("shows a retry line for each failed attempt but the step's last, which no retry follows", () => {
    let err = ""
    const failures = ["HTTP 503", "the streamed response failed"]
    let shown = 0
    const renderer = new RunRenderer({ out: () => undefined, err: (text) => (err += text) }, false, () => ({ reason: failures[shown++ % 2]! }), {
      baseMs: 1_000,
      maxMs: 4_000,
      maxAttempts: 4,
    })
    const history = new History.History()
    const run = history.open()
    for (let attempt = 0; attempt < 4; attempt++) renderer.handle(run.interrupt(run.request(), "retryable_failure"))
    expect(err).toBe("retrying in 1 s: HTTP 503\nretrying in 2 s: the streamed response failed\nretrying in 4 s: HTTP 503\n")
  })

  it("counts the call's time on the monotonic clock: a wall clock set forward an hour shows nothing early", () => {
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] })
    let monotonic = 1_000
    vi.spyOn(performance, "now").mockImplementation(() => monotonic)
    let wall = Date.UTC(2026, 11, 6)
    vi.spyOn(Date, "now").mockImplementation(() => wall)
    let err = ""
    const renderer = new RunRenderer({ out: () => undefined, err: (text) => (err += text) }, false, () => undefined)
    renderer.startProgress()
    const history = new History.History()
    const run = history.open()
    const step = run.request()
    run.complete(step, FactBuilders.toolCallStep([{ id: "call-1", name: "run_command", input: { command: "sleep 60" } }]))
    run.dispatch(step, "call-1")
    for (const written of history.written) renderer.handle(written.stored)
    expect(err).toBe('tool: run_command {"command":"sleep 60"}\n')
    // The wall clock jumps an hour ahead while a second passes.
    wall += 3_600_000
    monotonic += 1_000
    vi.advanceTimersByTime(1_000)
    expect(err).not.toContain("still running")
    // Five seconds on the monotonic clock: the first progress line, with the call's real time.
    monotonic += 4_000
    vi.advanceTimersByTime(4_000)
    expect(err).toContain("tool: run_command still running (5 s)\n")
    renderer.stop()
  })
})


describe("what maka inspect's timeline says of a step's tokens", () => {
  it("shows the cache reads and writes of its input and the reasoning of its output, when the provider told them", () => {
    const history = new History.History()
    const run = history.open()
    run.complete(run.request(), FactBuilders.textStep("cached", { inputTokens: 100, outputTokens: 20, cacheReadTokens: 40, cacheWriteTokens: 7, reasoningTokens: 9 }))
    run.complete(run.request(), FactBuilders.textStep("plain", { inputTokens: 120, outputTokens: 5 }))
    run.end()
    const lines: Array<string> = []
    const add = timelineOf(lines)
    for (const written of history.written) add(written.stored)
    const completed = lines.filter((line) => line.includes("completed"))
    expect(completed[0]).toMatch(/finish stop, tokens in 100 out 20, cache read 40, cache write 7, reasoning 9, text "cached"$/)
    expect(completed[1]).toMatch(/finish stop, tokens in 120 out 5, text "plain"$/)
  })
})

describe("what maka inspect's timeline says of a failed attempt", () => {
  it("marks a main attempt retried only when another request of its run follows it", () => {
    const history = new History.History()
    const run = history.open()
    const first = run.request()
    run.interrupt(first, "retryable_failure")
    const last = run.request()
    run.interrupt(last, "retryable_failure")
    run.end({ kind: "failed", class: "model_provider" })
    const lines: Array<string> = []
    const add = timelineOf(lines)
    for (const written of history.written) add(written.stored)
    const interrupted = lines.filter((line) => line.includes("interrupted"))
    expect(interrupted).toHaveLength(2)
    expect(interrupted[0]).toMatch(/step 1 interrupted: retryable_failure \(retried\)$/)
    expect(interrupted[1]).toMatch(/step 2 interrupted: retryable_failure$/)
  })

  it("marks a paused run's failed attempt retried when its handoff successor's first request sends the retry", () => {
    const history = new History.History()
    const paused = history.open()
    paused.interrupt(paused.request(), "retryable_failure")
    const pause = paused.pause()
    paused.end({ kind: "handoff_paused", pause })
    const successor = Lineage.successorOf(pause.intent, paused.invocation)
    const claim: Lineage.ContinuationClaim = {
      id: pause.intent.claimId,
      source: { invocation: paused.invocation, highWater: 4, digest: FactBuilders.digestOf("run-prefix") },
      base: { highWater: 0, digest: FactBuilders.digestOf("session-base") },
      replay: { ...pause.execution.replay },
    }
    const resumed = history.open({ input: { kind: "handoff", claim, pause }, turnId: successor.turnId, runId: successor.runId, invocationId: successor.invocationId })
    resumed.request()
    const lines: Array<string> = []
    const add = timelineOf(lines)
    for (const written of history.written) add(written.stored)
    expect(lines.find((line) => line.includes("interrupted"))).toMatch(/step 1 interrupted: retryable_failure \(retried\)$/)
  })

  it("gives no duration where the writer's clock went back between two events (informational times)", () => {
    const history = new History.History()
    const run = history.open()
    const step = run.request()
    run.complete(step, FactBuilders.toolCallStep([{ id: "call-1", name: "echo", input: { value: "x" } }]))
    run.succeed(run.dispatch(step, "call-1"), { format: "text", value: "x" })
    run.end({ kind: "completed" })
    // The clock stepped an hour back before the completion and before the settlement.
    const back = (kind: string) => (stored: Event.StoredEvent): Event.StoredEvent =>
      stored.event.fact.kind === kind ? { ...stored, event: { ...stored.event, recordedAt: stored.event.recordedAt - 3_600_000 } } : stored
    const lines: Array<string> = []
    const add = timelineOf(lines)
    for (const written of history.written) add(back("tool_settled")(back("model_completed")(written.stored)))
    expect(lines.find((line) => line.includes("step 1 completed"))).toMatch(/step 1 completed: finish /)
    expect(lines.find((line) => line.includes("tool echo"))).toBeDefined()
    expect(lines.some((line) => / in -\d+ ms/.test(line))).toBe(false)
    expect(lines.find((line) => line.includes("succeeded"))).toMatch(/tool echo succeeded$/)
  })
})
