/**
 * Where a fitted compaction source may end (docs/log-format.md §3.7): the highest clean cut above
 * the baseline's coverage whose materialised context fits the limits. A pure decision over the
 * session's rows; the context read supplies what each row costs.
 */

/** One session row as the cut sees it, in sequence order. */
export interface CutRow {
  readonly sequence: number
  /** Whether the next session row opens an invocation or requests a main step. */
  readonly isCleanCut: boolean
  /** The bytes the row adds to the tail, or `undefined` when it is not in the tail. */
  readonly tailBytes: number | undefined
}

export interface CutLimits {
  /** The baseline's coverage: a cut lies strictly above it. */
  readonly after: number
  /** The unlowered fence: a cut lies at or below it. */
  readonly through: number
  /** What the baseline's anchor already costs (0 or 1 event, and its bytes). */
  readonly anchorEvents: number
  readonly anchorBytes: number
  readonly maxEvents: number
  readonly maxBytes: number
}

/**
 * The highest clean cut `c` with `after < c ≤ through` whose anchor and tail through `c` fit, or
 * `undefined`. The tail only grows with `c`, so the walk stops at the first row that breaks a limit.
 */
export const highestFittingCut = (rows: Iterable<CutRow>, limits: CutLimits): number | undefined => {
  let events = limits.anchorEvents
  let bytes = limits.anchorBytes
  let cut: number | undefined
  for (const row of rows) {
    if (row.sequence > limits.through) break
    if (row.tailBytes !== undefined) {
      events += 1
      bytes += row.tailBytes
    }
    if (events > limits.maxEvents || bytes > limits.maxBytes) break
    if (row.sequence > limits.after && row.isCleanCut) cut = row.sequence
  }
  return cut
}
