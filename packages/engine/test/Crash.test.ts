/**
 * The engine crash test (issue 6): a child process runs the scripted tool loop of
 * `support/tool-loop.ts` and is killed with SIGKILL at a chosen point of its progress — after its
 * k-th durable commit (`engine.commit.<k>`), after the n-th `tool_dispatched` commit and before the
 * effect (`engine.after-dispatch.<n>`), or after the n-th effect and before its settlement
 * (`engine.before-settle.<n>`) — never at a wall-clock time. After each kill a new engine opens the
 * log (SQLite recovery runs) and the test checks: every effect ran at most once and every settled
 * effect exactly once, every invocation and request is sealed, the next turn runs without repeating
 * an effect, and the log passes its own validation (every stored event re-appended in order into a
 * fresh log is accepted and gives the same prefix digest).
 *
 * The child is bundled once with vite (a root dev dependency) under the `@maka/source` condition and
 * run as plain `node`: through `--import tsx` each child spends about 6 s resolving modules on this
 * Node 20 (its loader hooks run off-thread), which would make 30+ runs take minutes.
 *
 * `MAKA_CRASH_SEED` picks the order and, with `MAKA_CRASH_RUNS` below the number of points, the
 * sample; by default every point runs once (21 runs), plus one clean run.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import type { Event } from "@maka/facts"
import { LanguageModel } from "@maka/model"
import { FactBuilders, OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Effect, Redacted } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { bundleChild } from "./support/bundle.ts"
import { factsOf, reopen } from "./support/harness.ts"
import { assertSealed, assertValid, generator } from "./support/crash-anywhere.ts"
import { ALL_NOTES, CRASH_INVOCATION, noteCatalog, readEffects } from "./support/tool-loop.ts"

const here = path.dirname(fileURLToPath(import.meta.url))
const root = path.resolve(here, "../../..")
const SESSION = CRASH_INVOCATION.sessionId

/**
 * Commits a clean run makes at least (docs/engine.md §5.3, §5.4): 4 requests (each carrying the
 * settlements before it, the first the opening), 5 dispatches (the first of a step carrying its
 * completion, a later one the settlement before it), and the terminal (carrying the last completion).
 */
const MIN_COMMITS = 10
const DISPATCHES = ALL_NOTES.length

const allPoints: ReadonlyArray<string> = [
  ...Array.from({ length: MIN_COMMITS }, (_, index) => `engine.commit.${index + 1}`),
  ...Array.from({ length: DISPATCHES }, (_, index) => `engine.after-dispatch.${index + 1}`),
  ...Array.from({ length: DISPATCHES }, (_, index) => `engine.before-settle.${index + 1}`),
]

const SEED = Number(process.env["MAKA_CRASH_SEED"] ?? 6)
const RUNS = Math.min(Number(process.env["MAKA_CRASH_RUNS"] ?? allPoints.length), allPoints.length)

/** A seeded shuffle of every point, cut to `RUNS`; every hook kind stays in the plan. */
const plan = (): ReadonlyArray<string> => {
  const next = generator(SEED)
  const shuffled = [...allPoints]
  for (let index = shuffled.length - 1; index > 0; index--) {
    const other = Math.floor(next() * (index + 1))
    ;[shuffled[index], shuffled[other]] = [shuffled[other]!, shuffled[index]!]
  }
  const chosen = shuffled.slice(0, Math.max(RUNS, 3))
  let slot = chosen.length
  for (const kind of ["engine.commit.", "engine.after-dispatch.", "engine.before-settle."]) {
    if (!chosen.some((point) => point.startsWith(kind))) chosen[--slot] = shuffled.find((point) => point.startsWith(kind))!
  }
  return chosen
}
const points = plan()

interface ChildResult {
  readonly directory: string
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "maka-engine-crash-"))
let bundle = ""
const results = new Map<string, Promise<ChildResult>>()

/** Runs the bundled child in a fresh folder; never rejects (a spawn error reads as an exit). */
const runChild = (name: string, fault: string | undefined): Promise<ChildResult> => {
  const directory = path.join(scratch, name)
  fs.mkdirSync(path.join(directory, "workspace"), { recursive: true })
  const env: NodeJS.ProcessEnv = { ...process.env }
  delete env["MAKA_TEST_FAULT"]
  if (fault !== undefined) env["MAKA_TEST_FAULT"] = fault
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [bundle, directory], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")))
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")))
    const timer = setTimeout(() => child.kill("SIGTERM"), 60_000)
    child.on("error", (error) => {
      clearTimeout(timer)
      resolve({ directory, code: null, signal: null, stdout, stderr: `${stderr}${String(error)}` })
    })
    child.on("close", (code, signal) => {
      clearTimeout(timer)
      resolve({ directory, code, signal, stdout, stderr })
    })
  })
}

/** Starts the children `concurrency` at a time, in plan order; each test awaits its own. */
const schedule = (concurrency: number) => {
  const queue = [...points]
  const finish = new Map<string, (result: ChildResult) => void>()
  for (const point of points) results.set(point, new Promise((resolve) => finish.set(point, resolve)))
  const worker = async (): Promise<void> => {
    for (let point = queue.shift(); point !== undefined; point = queue.shift()) {
      finish.get(point)!(await runChild(point.replaceAll(".", "-"), point))
    }
  }
  for (let index = 0; index < concurrency; index++) void worker()
}

beforeAll(async () => {
  bundle = await bundleChild(path.join(here, "children/tool-loop.ts"), path.join(scratch, "bundle"))
  schedule(Math.max(1, Math.min(4, os.availableParallelism())))
}, 120_000)
afterAll(() => fs.rmSync(scratch, { recursive: true, force: true }))

// ---------------------------------------------------------------------------------------------
// Checks

const lineOf = (input: unknown): string => (input as { readonly line: string }).line

/** Each effect at most once, in order; every settled effect exactly once; the hook's own promise. */
const assertEffects = (point: string, events: ReadonlyArray<Event.StoredEvent>, lines: ReadonlyArray<string>) => {
  const dispatched = factsOf(events, "tool_dispatched")
  const settled = new Set(factsOf(events, "tool_settled").map((fact) => fact.operationId))
  const dispatchedLines = dispatched.map((fact) => lineOf(fact.input))
  const settledLines = dispatched.filter((fact) => settled.has(fact.operationId)).map((fact) => lineOf(fact.input))
  assert.deepStrictEqual(lines, ALL_NOTES.slice(0, lines.length), "effects ran once each, in order")
  assert.isAtMost(lines.length, dispatched.length)
  for (const line of lines) assert.include(dispatchedLines, line, `effect ${line} was dispatched first`)
  for (const line of settledLines) assert.strictEqual(lines.filter((item) => item === line).length, 1, `settled ${line} ran once`)
  const ordinal = Number(point.slice(point.lastIndexOf(".") + 1))
  const terminal = factsOf(events, "invocation_ended")[0]!
  if (point.startsWith("engine.after-dispatch.")) {
    assert.strictEqual(dispatched.length, ordinal)
    assert.strictEqual(lines.length, ordinal - 1, "killed after the dispatch commit, before the effect")
    assert.strictEqual(settled.size, ordinal - 1)
    assert.deepStrictEqual(terminal.outcome, { kind: "failed", class: "outcome_unknown" })
  } else if (point.startsWith("engine.before-settle.")) {
    assert.strictEqual(dispatched.length, ordinal)
    assert.strictEqual(lines.length, ordinal, "killed after the effect, before its settlement")
    assert.strictEqual(settled.size, ordinal - 1)
    assert.deepStrictEqual(terminal.outcome, { kind: "failed", class: "outcome_unknown" })
  } else {
    // The commit hook fires right after a commit returns: a dispatch's effect has not run yet.
    assert.strictEqual(lines.length, settled.size)
    const uncertain = dispatched.length > settled.size
    assert.deepStrictEqual(
      terminal.outcome,
      terminal.outcome.kind === "completed"
        ? { kind: "completed" }
        : { kind: "failed", class: uncertain ? "outcome_unknown" : "host_interrupted" },
    )
  }
}

/** Opens the killed child's log with a new engine and checks everything; then runs the next turn. */
const verify = (point: string, child: ChildResult) =>
  Effect.scoped(
    Effect.gen(function* () {
      const workspace = path.join(child.directory, "workspace")
      const engine = yield* reopen(path.join(child.directory, "events.sqlite"))
      assert.deepStrictEqual(yield* engine.log.unfinishedInvocations(100), [])
      assert.deepStrictEqual(yield* engine.recover, { sealed: [], count: 0, unsealed: [] })
      const events = yield* engine.log.events(SESSION)
      assertSealed(events)
      const lines = readEffects(workspace)
      assertEffects(point, events, lines)

      // The next turn: blocked for reconciliation after an unknown effect unless explicitly allowed;
      // either way no effect runs again.
      const server = yield* ScriptedServer.make({ script: [Respond.sse(OpenAiSse.response({ text: ["Checked."] }))] })
      const model = yield* LanguageModel.make({
        kind: "openai-compatible",
        baseUrl: `${server.url}/v1`,
        model: "test-model",
        apiKey: Redacted.make("sk-parent"),
      })
      const unknown = factsOf(events, "invocation_ended")[0]!.outcome
      const isUnknown = unknown.kind === "failed" && unknown.class === "outcome_unknown"
      const next = {
        invocation: { ...CRASH_INVOCATION, turnId: "turn-next", runId: "run-next", invocationId: "invocation-next" },
        model,
        configuration: FactBuilders.configuration({ cwd: workspace, model: FactBuilders.modelBinding({ model: "test-model" }) }),
        message: { text: "What state are the notes in?" },
        tools: noteCatalog(workspace),
      }
      if (isUnknown) {
        const refused = yield* Effect.flip(engine.start(next))
        assert.strictEqual(refused.reason._tag, "ReconciliationRequired")
      }
      const result = yield* engine.run({ ...next, allowPriorUnknown: isUnknown })
      assert.deepStrictEqual(result.outcome, { kind: "completed" })
      assert.deepStrictEqual(readEffects(workspace), lines)
      if (isUnknown) assert.include(server.requests()[0]!.body, "Prior execution was interrupted")
      const after = yield* engine.log.events(SESSION)
      assertSealed(after)
      yield* assertValid(engine.log, SESSION)
    }),
  )

// ---------------------------------------------------------------------------------------------

describe(`the engine killed with SIGKILL (seed ${SEED}, ${points.length} runs)`, () => {
  it.live("a clean run completes every note once, in at least the commits the plan kills at", () =>
    Effect.gen(function* () {
      const child = yield* Effect.promise(() => runChild("clean", undefined))
      assert.strictEqual(child.code, 0, child.stderr)
      const summary = JSON.parse(child.stdout.trim()) as { readonly outcome: unknown; readonly commits: number }
      assert.deepStrictEqual(summary.outcome, { kind: "completed" })
      assert.isAtLeast(summary.commits, MIN_COMMITS)
      assert.deepStrictEqual(readEffects(path.join(child.directory, "workspace")), ALL_NOTES)
      yield* verify("engine.commit.1000000", child)
    }),
  )

  for (const point of points) {
    it.live(`recovers a child killed at ${point}`, () =>
      Effect.gen(function* () {
        const child = yield* Effect.promise(() => results.get(point)!)
        assert.strictEqual(child.signal, "SIGKILL", `the child reached ${point}: ${child.stdout}${child.stderr}`)
        yield* verify(point, child)
        fs.rmSync(child.directory, { recursive: true, force: true })
      }),
    )
  }
})
