/**
 * A step's timeline (`pnpm bench engine --timeline`): marks taken where a tool step passes on its
 * critical path, and the time between consecutive marks, per step. Where the CPU profile says which
 * functions run, the timeline says which waits and hand-offs a step is made of: each transaction's
 * `BEGIN` and its `COMMIT` (the flush is the time between a `COMMIT`'s start and its return), the
 * request's bytes handed to the socket, the answer's headers read, the tool's call, and the request
 * delivered by `run.events()`. Marks come from better-sqlite3's statements (every connection of the
 * process, the engine's log included), from Node's HTTP diagnostics channels and from the bench's own
 * hooks (`timelineMark`); nothing is marked outside `recordTimeline`.
 */
import * as diagnostics from "node:diagnostics_channel"
import { median, sqlitePrototypes } from "./lib.ts"

/** A mark: what happened, and `performance.now()` when it did. */
export type Mark = readonly [label: string, at: number]

/** The time between two kinds of consecutive marks. */
export interface Segment {
  readonly from: string
  readonly to: string
  /** How often a step passes from `from` to `to`. */
  readonly perStep: number
  readonly medianMs: number
  readonly p90Ms: number
  /** The time a step spends between the two marks, all its passages together. */
  readonly msPerStep: number
}

const quantile = (sorted: ReadonlyArray<number>, q: number): number =>
  sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!

/**
 * The segments of `marks` (in the order they were taken) over `steps` steps: every pair of consecutive
 * marks is one passage of its segment, so the segments' `msPerStep` add up to the marks' whole span
 * divided by `steps`. Most time per step first.
 */
export const segments = (marks: ReadonlyArray<Mark>, steps: number): Array<Segment> => {
  if (!Number.isInteger(steps) || steps <= 0) throw new RangeError(`steps must be a positive integer, got ${steps}`)
  const passages = new Map<string, { readonly from: string; readonly to: string; readonly times: Array<number> }>()
  for (let index = 1; index < marks.length; index++) {
    const [from, fromAt] = marks[index - 1]!
    const [to, toAt] = marks[index]!
    if (toAt < fromAt) throw new RangeError(`the marks are not in time order at ${index} (${from} → ${to})`)
    const key = `${from}\u0000${to}`
    const found = passages.get(key) ?? { from, to, times: [] }
    found.times.push(toAt - fromAt)
    passages.set(key, found)
  }
  return [...passages.values()]
    .map(({ from, to, times }): Segment => {
      const sorted = [...times].sort((left, right) => left - right)
      return {
        from,
        to,
        perStep: times.length / steps,
        medianMs: median(sorted),
        p90Ms: quantile(sorted, 0.9),
        msPerStep: times.reduce((sum, time) => sum + time, 0) / steps,
      }
    })
    .sort((left, right) => right.msPerStep - left.msPerStep)
}

/** The segments as the lines of a table, for the bench's output. */
export const formatSegments = (list: ReadonlyArray<Segment>): Array<string> => {
  const fixed = (value: number) => value.toFixed(3)
  const width = Math.max(7, ...list.map((segment) => `${segment.from} → ${segment.to}`.length))
  return [
    `${"segment".padEnd(width)}  per step  median ms  p90 ms  ms per step`,
    ...list.map(
      (segment) =>
        `${`${segment.from} → ${segment.to}`.padEnd(width)}  ${segment.perStep.toFixed(2).padStart(8)}  ${fixed(segment.medianMs).padStart(9)}  ${fixed(segment.p90Ms).padStart(6)}  ${fixed(segment.msPerStep).padStart(11)}`,
    ),
  ]
}

/** The marks being recorded, while `recordTimeline` runs. */
let recording: Array<Mark> | undefined

/** Marks `label` now, while a timeline is recorded; nothing otherwise. */
export const timelineMark = (label: string): void => {
  recording?.push([label, performance.now()])
}

/** The label of a statement the timeline marks: a transaction's start or end; `undefined` for the others. */
const transactionLabel = (source: string): string | undefined => {
  const text = source.trim().toUpperCase()
  if (text === "BEGIN IMMEDIATE") return "BEGIN IMMEDIATE"
  if (text === "BEGIN") return "BEGIN (read)"
  if (text === "COMMIT") return "COMMIT"
  return undefined
}

/**
 * Runs `body` and returns the marks taken meanwhile: every better-sqlite3 transaction's `BEGIN`, the
 * start and the return of its `COMMIT` (the prepared statements' `run`, wrapped on their shared
 * prototype and restored afterwards), each HTTP request's bytes handed to its socket
 * (`http.client.request.start`, published once the request is written) and each response's headers
 * (`http.client.response.finish`), and the bench's own `timelineMark` calls.
 */
export const recordTimeline = async (body: () => Promise<void>): Promise<Array<Mark>> => {
  if (recording !== undefined) throw new Error("a timeline is already being recorded")
  const statementPrototype = sqlitePrototypes().statement
  const marks: Array<Mark> = []
  const run = statementPrototype["run"]!
  statementPrototype["run"] = function (this: { readonly source: string }, ...args: Array<unknown>) {
    const label = transactionLabel(this.source)
    if (label === undefined) return run.apply(this, args)
    if (label !== "COMMIT") {
      marks.push([label, performance.now()])
      return run.apply(this, args)
    }
    marks.push(["COMMIT starts", performance.now()])
    try {
      return run.apply(this, args)
    } finally {
      marks.push(["COMMIT returns", performance.now()])
    }
  }
  const written = () => marks.push(["request written", performance.now()])
  const answered = () => marks.push(["response headers", performance.now()])
  diagnostics.subscribe("http.client.request.start", written)
  diagnostics.subscribe("http.client.response.finish", answered)
  recording = marks
  try {
    await body()
  } finally {
    recording = undefined
    diagnostics.unsubscribe("http.client.request.start", written)
    diagnostics.unsubscribe("http.client.response.finish", answered)
    statementPrototype["run"] = run
  }
  return marks
}
