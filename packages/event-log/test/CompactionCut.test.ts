/**
 * The fitted compaction cut as a pure decision: over random session rows and limits it picks
 * exactly the highest clean cut above the coverage whose anchor and tail fit, the one a search of
 * every candidate finds.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { highestFittingCut, type CutLimits, type CutRow } from "../src/internal/compaction-cut.ts"

/** Every candidate checked on its own: what the cut must be. */
const oracle = (rows: ReadonlyArray<CutRow>, limits: CutLimits): number | undefined => {
  let best: number | undefined
  for (const candidate of rows) {
    if (!candidate.isCleanCut || candidate.sequence <= limits.after || candidate.sequence > limits.through) continue
    const tail = rows.filter((row) => row.sequence <= candidate.sequence && row.tailBytes !== undefined)
    const events = limits.anchorEvents + tail.length
    const bytes = limits.anchorBytes + tail.reduce((total, row) => total + (row.tailBytes ?? 0), 0)
    if (events <= limits.maxEvents && bytes <= limits.maxBytes) best = candidate.sequence
  }
  return best
}

const rowsArbitrary = fc
  .array(fc.record({ gap: fc.integer({ min: 1, max: 3 }), isCleanCut: fc.boolean(), tailBytes: fc.option(fc.integer({ min: 1, max: 50 }), { nil: undefined }) }), {
    maxLength: 60,
  })
  .map((specs) => {
    let sequence = 0
    return specs.map((spec): CutRow => {
      sequence += spec.gap
      return { sequence, isCleanCut: spec.isCleanCut, tailBytes: spec.tailBytes }
    })
  })

describe("highestFittingCut", () => {
  it("picks the highest clean cut above the coverage whose anchor and tail fit, as a search of every candidate does", () => {
    fc.assert(
      fc.property(
        rowsArbitrary,
        fc.record({
          after: fc.integer({ min: 0, max: 60 }),
          through: fc.integer({ min: 0, max: 200 }),
          anchor: fc.boolean(),
          anchorBytes: fc.integer({ min: 0, max: 80 }),
          maxEvents: fc.integer({ min: 0, max: 40 }),
          maxBytes: fc.integer({ min: 0, max: 1_500 }),
        }),
        (rows, options) => {
          const limits: CutLimits = {
            after: options.after,
            through: options.through,
            anchorEvents: options.anchor ? 1 : 0,
            anchorBytes: options.anchor ? options.anchorBytes : 0,
            maxEvents: options.maxEvents,
            maxBytes: options.maxBytes,
          }
          expect(highestFittingCut(rows, limits)).toBe(oracle(rows, limits))
        },
      ),
      { numRuns: 500 },
    )
  })

  it("finds no cut when the anchor alone breaks a limit", () => {
    const rows: ReadonlyArray<CutRow> = [
      { sequence: 1, isCleanCut: true, tailBytes: undefined },
      { sequence: 2, isCleanCut: true, tailBytes: 10 },
    ]
    const limits = { after: 0, through: 2, anchorEvents: 1, anchorBytes: 100, maxEvents: 10, maxBytes: 99 }
    expect(highestFittingCut(rows, limits)).toBeUndefined()
    expect(highestFittingCut(rows, { ...limits, maxBytes: 110 })).toBe(2)
  })
})
