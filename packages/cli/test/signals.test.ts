/**
 * How `maka run` tells a refused handoff from a run that ended first (docs/cli.md §10.1 "Signals"):
 * by a main request recorded after the SIGTERM, not one shown after it (the request of the step in
 * flight when the signal came may be shown just after it).
 */
import type { Event } from "@maka/facts"
import { History } from "@maka/testkit"
import { describe, expect, it } from "vitest"
import { stepWatch } from "../src/internal/signals.ts"

/** A run's opening and its first main request, recorded at `at` and `at + 1`. */
const requests = (at: number) => {
  const history = new History.History({ startTime: at })
  const run = history.open()
  run.request()
  return { events: history.writes.map((write) => write.event) }
}

const settledWithin = async (promise: Promise<void>, ms = 20): Promise<boolean> =>
  Promise.race([promise.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => resolve(false), ms))])

describe("stepWatch", () => {
  it("resolves at a main request recorded after the time, never at one recorded before it shown later", async () => {
    const watch = stepWatch()
    const { events } = requests(1_000)
    const opened = events.map((event, index) => ({ sequence: index + 1, event }) as Event.StoredEvent)
    const recordedAt = opened.map((stored) => stored.event.recordedAt)
    // Asked for between the opening and the main request's recording.
    const after = watch.after(recordedAt[1]! - 1)
    const before = watch.after(recordedAt[1]!)
    for (const stored of opened) watch.observe(stored)
    expect(await settledWithin(after)).toBe(true)
    // The same request, recorded at the time asked about, is not after it.
    expect(await settledWithin(before)).toBe(false)
    // Asked for once a later request was already shown: resolved at once.
    expect(await settledWithin(watch.after(recordedAt[1]! - 5))).toBe(true)
  })
})
