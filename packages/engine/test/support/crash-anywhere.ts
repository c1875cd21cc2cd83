/**
 * The crash-anywhere suite's shared parts, read by its child process and its parent: the scripted
 * scenarios (a tool loop, compaction, a handoff, a continuation) with what a clean run of each does,
 * the kill points and how a child is told about one, the journal of commits a child keeps, a seeded
 * generator, and the checks of a recovered log (every invocation sealed, the log re-appendable).
 */
import { assert } from "@effect/vitest"
import { Canonical, Digest, EventWrite, Model, type Event } from "@maka/facts"
import * as LogTesting from "@maka/event-log/testing"
import { FactBuilders, OpenAiSse, Respond, type ScriptedServer } from "@maka/testkit"
import { Effect, Result } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { mainEntry, summaryEntry, summaryAnswer, summaryText, usage } from "./compaction.ts"
import { FAULT_VARIABLE } from "../../src/internal/fault.ts"
import { factsOf } from "./harness.ts"
import { notes, toolLoopScript, ALL_NOTES } from "./tool-loop.ts"

export const SESSION = "session-anywhere"

/** An invocation of the scenario session named `name` (its own turn and run). */
export const invocation = (name: string) =>
  FactBuilders.invocation({ sessionId: SESSION, turnId: `turn-${name}`, runId: `run-${name}`, invocationId: `invocation-${name}` })

export const configuration = (workspace: string) =>
  FactBuilders.configuration({ cwd: workspace, model: FactBuilders.modelBinding({ model: "test-model" }) })

/** A small declared window: a main step that reports 5,000 prompt tokens makes compaction due. */
export const WINDOWED = { providerId: "openai-compatible", declaredWindow: 1_000 }

/** One response noting `lines`, reporting `input` prompt tokens. */
const noting = (lines: ReadonlyArray<string>, input = 10) =>
  Respond.sse(OpenAiSse.response({ toolCalls: notes(...lines), usage: usage(input) }))

const answering = (text: string, input = 10) => Respond.sse(OpenAiSse.response({ text: [text], usage: usage(input) }))

export type ScenarioName = "tool-loop" | "compaction" | "handoff" | "continuation"

export interface Scenario {
  readonly name: ScenarioName
  /** What the model server answers, main and summary requests routed apart. */
  readonly script: ReadonlyArray<ScriptedServer.ScriptEntry>
  /** The effects of a clean run, in order (each a unique line). */
  readonly lines: ReadonlyArray<string>
  /**
   * The commits of a clean run that carry more than observations: every one is reached by any run. A
   * message run's opening rides its first request's commit; a successor's and a continuation's, and
   * one before a `pre_turn` summary, take their own.
   */
  readonly commits: number
}

/**
 * - `tool-loop`: one message run of four steps and five notes (`support/tool-loop.ts`).
 * - `compaction`: on a 1,000-token window with one model permit (every summary in the foreground), a
 *   run notes `k1` and takes a `mid_turn` summary before its answer; the next run takes a `pre_turn`
 *   summary, notes `k2` and answers; then a standalone `compact` commits its checkpoint with its terminal.
 * - `handoff`: the note `h1` requests a handoff while it runs; the run seals `handoff_paused` at its
 *   next step and the same child resumes the successor, which notes `h2` and answers.
 * - `continuation`: a one-step run notes `c1` and ends at its step limit; a continuation of it
 *   notes `c2` and answers.
 */
export const scenarios: ReadonlyArray<Scenario> = [
  { name: "tool-loop", script: toolLoopScript.map(mainEntry), lines: ALL_NOTES, commits: 10 },
  {
    name: "compaction",
    script: [
      mainEntry(noting(["k1"], 5_000)),
      summaryEntry(summaryAnswer(summaryText("k1 noted"))),
      mainEntry(answering("Noted k1.", 5_000)),
      summaryEntry(summaryAnswer(summaryText("k1 answered"))),
      mainEntry(noting(["k2"])),
      mainEntry(answering("Noted k2.")),
      summaryEntry(summaryAnswer(summaryText("k2 answered"))),
    ],
    lines: ["k1", "k2"],
    commits: 20,
  },
  {
    name: "handoff",
    script: [mainEntry(noting(["h1"])), mainEntry(noting(["h2"])), mainEntry(answering("Noted both."))],
    lines: ["h1", "h2"],
    commits: 9,
  },
  {
    name: "continuation",
    script: [mainEntry(noting(["c1"])), mainEntry(noting(["c2"])), mainEntry(answering("Noted both."))],
    lines: ["c1", "c2"],
    commits: 9,
  },
]

export const scenario = (name: string): Scenario => {
  const found = scenarios.find((item) => item.name === name)
  if (found === undefined) throw new Error(`no scenario ${name}`)
  return found
}

// ---------------------------------------------------------------------------------------------
// Kill points

/**
 * Where a child dies. The engine's own points count in the child process: after its k-th durable
 * commit (`engine.commit`), after the n-th `tool_dispatched` commit and before the effect
 * (`engine.after-dispatch`), after the n-th effect and before its settlement is recorded
 * (`engine.before-settle`). The event log's points fire inside the transaction of the k-th commit:
 * after its first row is inserted (`append.after-insert`), or after its rules passed and before it
 * commits (`append.before-commit`); the child arms them once its (k − 1)-th commit returned.
 */
export type PointKind =
  | "engine.commit"
  | "engine.after-dispatch"
  | "engine.before-settle"
  | "append.after-insert"
  | "append.before-commit"

export const POINT_KINDS: ReadonlyArray<PointKind> = [
  "engine.commit",
  "engine.after-dispatch",
  "engine.before-settle",
  "append.after-insert",
  "append.before-commit",
]

export interface Point {
  readonly kind: PointKind
  /** The commit (k) or the dispatch (n) it names, from 1. */
  readonly ordinal: number
}

export const pointName = (point: Point): string =>
  point.kind.startsWith("engine.") ? `${point.kind}.${point.ordinal}` : `${point.kind} of commit ${point.ordinal}`

/** Arms an event-log point at a commit: `<k>:<point>` (the child sets MAKA_TEST_FAULT after commit k − 1). */
export const ARM_VARIABLE = "MAKA_CRASH_ARM"

/** The environment a child needs to die at `point`. */
export const faultEnvironment = (point: Point): Readonly<Record<string, string>> =>
  point.kind.startsWith("engine.")
    ? { [FAULT_VARIABLE]: `${point.kind}.${point.ordinal}` }
    : { [ARM_VARIABLE]: `${point.ordinal}:${point.kind}` }

/** mulberry32: a small seedable generator, so a failing plan replays from its seed. */
export const generator = (seed: number) => {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let value = Math.imul(state ^ (state >>> 15), 1 | state)
    value = (value + Math.imul(value ^ (value >>> 7), 61 | value)) ^ value
    return ((value ^ (value >>> 14)) >>> 0) / 4_294_967_296
  }
}

// ---------------------------------------------------------------------------------------------
// The commit journal

/** The file in a child's folder where it records each commit as soon as the commit returns. */
export const JOURNAL_FILE = "committed.jsonl"

/** One committed event: its sequence, id, kind, the SHA-256 of its stored JSON and of its raw tool result. */
export interface Recorded {
  readonly sequence: number
  readonly id: string
  readonly kind: string
  readonly digest: string
  readonly raw?: string
}

/** The journal line of one commit of `writes` at `sequences`. */
export const journalLine = (writes: ReadonlyArray<EventWrite.EventWrite>, sequences: ReadonlyArray<number>): string =>
  `${JSON.stringify(
    writes.map(
      (write, index): Recorded => ({
        sequence: sequences[index]!,
        id: write.event.id,
        kind: write.event.fact.kind,
        digest: Digest.sha256Hex(write.json),
        ...(write.rawPayload === undefined ? {} : { raw: Digest.sha256Hex(write.rawPayload) }),
      }),
    ),
  )}\n`

/** The commits a child recorded, in order (none when it recorded nothing). */
export const readJournal = (directory: string): ReadonlyArray<ReadonlyArray<Recorded>> => {
  const file = path.join(directory, JOURNAL_FILE)
  if (!fs.existsSync(file)) return []
  return fs
    .readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line) as ReadonlyArray<Recorded>)
}

/** The SHA-256 of a stored event's JSON, as the journal records it. */
export const storedDigest = (stored: Event.StoredEvent): string => Digest.sha256Hex(Canonical.stringify(stored.event))

// ---------------------------------------------------------------------------------------------
// Checks of a recovered log

const invocationOf = (stored: Event.StoredEvent) => stored.event.invocation.invocationId

/**
 * Every invocation ends once, last; every request (main or summary) ends once; every local call of a
 * completed main step is dispatched or rejected once; a dispatch settles at most once, and one left
 * unsettled belongs to an invocation sealed `outcome_unknown`.
 */
export const assertSealed = (events: ReadonlyArray<Event.StoredEvent>) => {
  for (const opening of events.filter((stored) => stored.event.fact.kind === "invocation_opened")) {
    const own = events.filter((stored) => invocationOf(stored) === invocationOf(opening))
    const terminals = own.filter((stored) => stored.event.fact.kind === "invocation_ended")
    assert.strictEqual(terminals.length, 1, `invocation ${invocationOf(opening)} has one terminal`)
    assert.strictEqual(own[own.length - 1], terminals[0], `the terminal is the last event of ${invocationOf(opening)}`)
  }
  for (const request of factsOf(events, "model_requested")) {
    const ends = events.filter((stored) => {
      const fact = stored.event.fact
      return (fact.kind === "model_completed" || fact.kind === "model_interrupted") && fact.stepId === request.stepId
    })
    assert.strictEqual(ends.length, 1, `request ${request.stepId} (${request.purpose}) ends once`)
  }
  for (const completed of factsOf(events, "model_completed")) {
    for (const call of Model.localToolCalls(completed.output)) {
      const operationId = `${completed.stepId}:${call.id}`
      const closing = events.filter((stored) => {
        const fact = stored.event.fact
        return (fact.kind === "tool_dispatched" || fact.kind === "tool_rejected") && fact.operationId === operationId
      })
      assert.strictEqual(closing.length, 1, `call ${operationId} is dispatched or rejected once`)
    }
  }
  for (const dispatched of events) {
    const fact = dispatched.event.fact
    if (fact.kind !== "tool_dispatched") continue
    const settlements = factsOf(events, "tool_settled").filter((settled) => settled.operationId === fact.operationId)
    assert.isAtMost(settlements.length, 1, `operation ${fact.operationId} settles at most once`)
    if (settlements.length > 0) continue
    const terminal = factsOf(
      events.filter((stored) => invocationOf(stored) === invocationOf(dispatched)),
      "invocation_ended",
    )[0]!
    assert.deepStrictEqual(terminal.outcome, { kind: "failed", class: "outcome_unknown" }, `unsettled ${fact.operationId}`)
  }
}

/**
 * The log passes its own validation: every stored event of `session`, re-appended in order into a
 * fresh log (tool successes with their raw results), is accepted and gives the same sequences,
 * prefix digest and high water.
 */
export const assertValid = (log: LogTesting.EventLog.EventLogShape, session: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      const stored = yield* log.prefix({ kind: "session", id: session })
      const writes = yield* Effect.forEach(stored.events, (item) =>
        Effect.gen(function* () {
          const fact = item.event.fact
          if (fact.kind !== "tool_settled" || fact.outcome.kind !== "succeeded") return Result.getOrThrow(EventWrite.plain(item.event))
          const raw = yield* log.readToolResult(session, item.event.id)
          return Result.getOrThrow(
            EventWrite.toolSuccess({
              id: item.event.id,
              recordedAt: item.event.recordedAt,
              invocation: item.event.invocation,
              operationId: fact.operationId,
              output: raw.raw,
            }),
          )
        }),
      )
      const { log: fresh } = yield* LogTesting.makeTemporary({ synchronous: "NORMAL" })
      assert.deepStrictEqual(yield* fresh.appendBatch(writes), stored.events.map((item) => item.sequence))
      const copy = yield* fresh.prefix({ kind: "session", id: session })
      assert.strictEqual(copy.digest, stored.digest)
      assert.strictEqual(copy.highWater, stored.highWater)
    }),
  )
