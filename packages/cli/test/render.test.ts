import type { Event } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import { describe, expect, it } from "vitest"
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

  it("says so when a summary finished but no checkpoint was recorded before the run ended", () => {
    const history = new History.History()
    const run = history.open()
    const summary = run.request({ purpose: "summary" })
    answer(run, summary, "not a summary")
    const main = run.request()
    answer(run, main, "the answer")
    run.end()
    const shown = render(history.written.map((written) => written.stored))
    expect(shown.out).toBe("the answer\n")
    expect(shown.err).toBe("compacting the context…\ncompaction not adopted: no checkpoint was recorded before the run ended\n")
  })
})
