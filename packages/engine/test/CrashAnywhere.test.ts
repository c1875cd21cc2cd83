/**
 * The crash-anywhere suite: child processes run scripted runs of four kinds (a tool loop; compaction
 * with a `mid_turn`, a `pre_turn` and a standalone checkpoint on a small declared window; a handoff
 * whose successor the same child resumes, or the next engine when the child dies or stops with the
 * pause sealed; a continuation of a run that hit its step limit; see `support/crash-anywhere.ts`)
 * and are killed with SIGKILL at points chosen by their progress, never
 * by the clock: after the k-th commit, after the n-th dispatch or before the n-th settlement, or
 * inside the k-th commit's transaction (the event log's hooks). Each child journals every commit as
 * soon as it returns. After each kill the test checks the log as the child left it (exactly the
 * journaled events, byte for byte), opens it with a new engine (SQLite recovery runs), and checks:
 * every journaled event is still there unchanged; every invocation and request is sealed; no effect
 * ran twice, every effect was dispatched first and every settled one ran once; a sealed pause's
 * successor resumes and completes; the session admits an ordinary message (or, after
 * `outcome_unknown`, refuses it and admits one with `allowPriorUnknown`), which completes without
 * repeating an effect; and the log passes its own validation (every event re-appended into a fresh
 * log gives the same sequences and digest).
 *
 * Settings: `MAKA_CRASH_TRIALS` (default 50, the CI setting, one to two minutes on a loaded two-core
 * machine; the long setting is 500, which took seven to ten minutes there) and `MAKA_CRASH_SEED`
 * (default 14). A trial draws its scenario and kind of
 * point in turn from a seeded shuffle of every pair, and the commit or dispatch from the seed; a
 * failing trial prints the seed, the number of trials and its own number, and `MAKA_CRASH_SEED=<seed>
 * MAKA_CRASH_TRIALS=<trials> MAKA_CRASH_TRIAL=<n> pnpm exec vitest run --project engine
 * test/CrashAnywhere.test.ts` replays it alone. The last test reports how the trials found their
 * sessions (a pause resumed, an invocation sealed `host_interrupted` or `outcome_unknown`, nothing
 * to recover) and, at 50 trials or more, requires both sealed classes. The child is bundled once with vite
 * (`support/bundle.ts`) so that each spawn starts as plain `node`.
 */
import { afterAll, assert, beforeAll, beforeEach, describe, it } from "@effect/vitest"
import { Canonical, Digest, type Event } from "@maka/facts"
import { EventLog } from "@maka/event-log"
import { LanguageModel } from "@maka/model"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Context, Effect, Layer, Redacted, Schedule } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { bundleChild, root } from "./support/bundle.ts"
import { FAULT_VARIABLE } from "../src/internal/fault.ts"
import {
  ARM_VARIABLE,
  assertSealed,
  assertValid,
  configuration,
  faultEnvironment,
  generator,
  invocation,
  POINT_KINDS,
  pointName,
  readJournal,
  scenario,
  scenarios,
  SESSION,
  storedDigest,
  type Point,
  type Recorded,
  type Scenario,
} from "./support/crash-anywhere.ts"
import { factsOf, reopen } from "./support/harness.ts"
import { noteCatalog, readEffects } from "./support/tool-loop.ts"

const here = path.dirname(fileURLToPath(import.meta.url))
const TRIALS = Number(process.env["MAKA_CRASH_TRIALS"] ?? 50)
const SEED = Number(process.env["MAKA_CRASH_SEED"] ?? 14)
const CONCURRENCY = Math.max(1, Math.min(3, os.availableParallelism()))

interface Trial {
  readonly name: string
  readonly scenario: Scenario
  /** `undefined` for a clean run. */
  readonly point: Point | undefined
  /** The child stops once its handoff pause is sealed, leaving the successor to the next engine. */
  readonly leave?: boolean
}

/**
 * Every (scenario, kind) pair in a seeded order, repeated until `TRIALS`. The ordinal is drawn
 * within what a clean run reaches, each repetition of a pair from its own slice of that range.
 */
const plan = (): ReadonlyArray<Trial> => {
  const next = generator(SEED)
  const pairs = scenarios.flatMap((item) => POINT_KINDS.map((kind) => ({ scenario: item, kind })))
  for (let index = pairs.length - 1; index > 0; index--) {
    const other = Math.floor(next() * (index + 1))
    ;[pairs[index], pairs[other]] = [pairs[other]!, pairs[index]!]
  }
  return Array.from({ length: TRIALS }, (_, index) => {
    const { scenario, kind } = pairs[index % pairs.length]!
    const range = kind === "engine.after-dispatch" || kind === "engine.before-settle" ? scenario.lines.length : scenario.commits
    const repetitions = Math.ceil((TRIALS - (index % pairs.length)) / pairs.length)
    const slice = Math.floor(index / pairs.length)
    const point: Point = { kind, ordinal: 1 + Math.floor(((slice + next()) / repetitions) * range) }
    return { name: `trial ${index + 1}: ${scenario.name} killed at ${pointName(point)}`, scenario, point }
  })
}
/** One clean run of each scenario, and a handoff whose child stops once the pause is sealed. */
const cleanRuns: ReadonlyArray<Trial> = [
  ...scenarios.map((scenario) => ({
    name: `a clean ${scenario.name} run makes every effect once, in the commits its trials draw from`,
    scenario,
    point: undefined,
  })),
  {
    name: "a handoff left at its sealed pause is resumed by the next engine, which completes it",
    scenario: scenario("handoff"),
    point: undefined,
    leave: true,
  },
]
/** `MAKA_CRASH_TRIAL=<n>` runs trial n of the plan alone (with the clean runs), to replay it. */
const only = process.env["MAKA_CRASH_TRIAL"]
const trials = plan().filter((trial) => only === undefined || trial.name.startsWith(`trial ${only}:`))

interface ChildResult {
  readonly directory: string
  readonly server: ScriptedServer.ScriptedServer
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "maka-engine-crash-anywhere-"))
let bundle = ""
const results = new Map<string, Promise<ChildResult>>()
const servers = new Set<ScriptedServer.ScriptedServer>()

/** Runs the bundled child in a fresh folder against its own scripted server, kept open for the check. */
const runChild = async (index: number, trial: Trial): Promise<ChildResult> => {
  const directory = path.join(scratch, `child-${index}`)
  fs.mkdirSync(path.join(directory, "workspace"), { recursive: true })
  const server = await ScriptedServer.start({ script: trial.scenario.script })
  servers.add(server)
  const env: NodeJS.ProcessEnv = { ...process.env, ...(trial.point === undefined ? {} : faultEnvironment(trial.point)) }
  if (trial.point === undefined || !trial.point.kind.startsWith("engine.")) delete env[FAULT_VARIABLE]
  if (trial.point === undefined || trial.point.kind.startsWith("engine.")) delete env[ARM_VARIABLE]
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [bundle, directory, `${server.url}/v1`, trial.scenario.name, ...(trial.leave === true ? ["leave"] : [])], {
      cwd: root,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")))
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")))
    const timer = setTimeout(() => child.kill("SIGTERM"), 60_000)
    child.on("error", (error) => {
      clearTimeout(timer)
      resolve({ directory, server, code: null, signal: null, stdout, stderr: `${stderr}${String(error)}` })
    })
    child.on("close", (code, signal) => {
      clearTimeout(timer)
      resolve({ directory, server, code, signal, stdout, stderr })
    })
  })
}

/** Starts the children `CONCURRENCY` at a time, in order; each test awaits its own. */
const schedule = (all: ReadonlyArray<Trial>) => {
  const queue = all.map((trial, index) => ({ trial, index }))
  const finish = new Map<string, (result: ChildResult) => void>()
  for (const trial of all) results.set(trial.name, new Promise((resolve) => finish.set(trial.name, resolve)))
  const worker = async (): Promise<void> => {
    for (let item = queue.shift(); item !== undefined; item = queue.shift()) {
      finish.get(item.trial.name)!(await runChild(item.index, item.trial))
    }
  }
  for (let index = 0; index < CONCURRENCY; index++) void worker()
}

beforeAll(async () => {
  bundle = await bundleChild(path.join(here, "children/crash-anywhere.ts"), path.join(scratch, "bundle"))
  schedule([...cleanRuns, ...trials])
}, 120_000)
afterAll(async () => {
  await Promise.all([...servers].map((server) => server.close()))
  fs.rmSync(scratch, { recursive: true, force: true })
})
beforeEach(({ task, onTestFailed }) =>
  onTestFailed(() => {
    const trial = /^trial (\d+):/.exec(task.name)?.[1]
    process.stderr.write(`replay: MAKA_CRASH_SEED=${SEED} MAKA_CRASH_TRIALS=${TRIALS}${trial === undefined ? "" : ` MAKA_CRASH_TRIAL=${trial}`}\n`)
  }),
)

// ---------------------------------------------------------------------------------------------
// Checks

const lineOf = (input: unknown): string => (input as { readonly line: string }).line

/** The log holds each journaled event at its sequence, with the same id and stored JSON. */
const assertJournaled = (events: ReadonlyArray<Event.StoredEvent>, recorded: ReadonlyArray<Recorded>) => {
  const bySequence = new Map(events.map((stored) => [stored.sequence, stored]))
  for (const item of recorded) {
    const stored = bySequence.get(item.sequence)
    assert.isDefined(stored, `committed ${item.kind} at ${item.sequence} is in the log`)
    assert.strictEqual(stored!.event.id, item.id, `the event at ${item.sequence} is the committed one`)
    assert.strictEqual(storedDigest(stored!), item.digest, `the event at ${item.sequence} is stored unchanged`)
  }
}

/**
 * The log exactly as the killed child left it, read without an engine (no recovery). The child's
 * lock keeper may outlive it by a moment on a loaded machine (it exits when it sees its pipe close):
 * a busy writer lease is waited for, as a host restarting after a crash would.
 */
const readUnrecovered = (file: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      const context = yield* Layer.build(EventLog.layerSqlite({ path: file }))
      return yield* Context.get(context, EventLog.EventLog).events(SESSION)
    }),
  ).pipe(Effect.retry({ while: (error) => error.reason._tag === "WriterBusy", schedule: Schedule.spaced("100 millis"), times: 50 }))

/**
 * No effect ran twice; each ran after its dispatch; each settled one ran exactly once; an effect
 * dispatched but not run is not settled. At an engine point, the counts the point names.
 */
const assertEffects = (trial: Trial, events: ReadonlyArray<Event.StoredEvent>, lines: ReadonlyArray<string>, commits: number) => {
  assert.strictEqual(new Set(lines).size, lines.length, `no effect ran twice: ${lines.join(",")}`)
  const dispatched = factsOf(events, "tool_dispatched")
  const dispatchedLines = dispatched.map((fact) => lineOf(fact.input))
  assert.strictEqual(new Set(dispatchedLines).size, dispatchedLines.length, `no call dispatched twice: ${dispatchedLines.join(",")}`)
  const settled = new Set(factsOf(events, "tool_settled").map((fact) => fact.operationId))
  for (const line of lines) assert.include(dispatchedLines, line, `effect ${line} was dispatched first`)
  for (const fact of dispatched) {
    const ran = lines.includes(lineOf(fact.input))
    if (settled.has(fact.operationId)) assert.isTrue(ran, `settled ${lineOf(fact.input)} ran`)
  }
  const point = trial.point
  if (point === undefined) return
  switch (point.kind) {
    case "engine.after-dispatch":
      assert.strictEqual(dispatched.length, point.ordinal)
      assert.strictEqual(lines.length, point.ordinal - 1, "killed after the dispatch commit, before the effect")
      assert.strictEqual(settled.size, point.ordinal - 1)
      return
    case "engine.before-settle":
      assert.strictEqual(dispatched.length, point.ordinal)
      assert.strictEqual(lines.length, point.ordinal, "killed after the effect, before its settlement")
      assert.strictEqual(settled.size, point.ordinal - 1)
      return
    case "engine.commit":
      // Right after a commit returns, every effect that ran is settled in it or before it.
      assert.strictEqual(commits, point.ordinal, "killed right after the commit it names")
      assert.strictEqual(lines.length, settled.size)
      return
    default:
      // Inside the transaction of commit k: it may have carried the settlement of the last effect.
      assert.strictEqual(commits, point.ordinal - 1, "killed inside the commit it names")
      assert.include([settled.size, settled.size + 1], lines.length)
  }
}

/** What the next engine found: a pause it resumed, an invocation recovery sealed (by class), or nothing to recover. */
type Found = "resumed" | "host_interrupted" | "outcome_unknown" | "nothing to recover"
const FOUND: ReadonlyArray<Found> = ["resumed", "host_interrupted", "outcome_unknown", "nothing to recover"]

const modelAt = (url: string) =>
  LanguageModel.make({ kind: "openai-compatible", baseUrl: `${url}/v1`, model: "test-model", apiKey: Redacted.make("sk-parent") })

/**
 * Reads what the killed child left, opens the log with a new engine (recovery runs), checks it, and
 * uses the session again: a sealed pause's successor resumes on the child's server, then a new message.
 */
const verify = (trial: Trial, child: ChildResult) =>
  Effect.scoped(
    Effect.gen(function* () {
      const workspace = path.join(child.directory, "workspace")
      const file = path.join(child.directory, "events.sqlite")
      const journal = readJournal(child.directory)
      const recorded = journal.flat()
      // Before recovery the log holds exactly what the child journaled: no commit lost, none unseen.
      const left = yield* readUnrecovered(file)
      assert.deepStrictEqual(
        left.map((stored) => stored.sequence),
        recorded.map((item) => item.sequence),
      )
      assertJournaled(left, recorded)

      const engine = yield* reopen(file)
      assert.deepStrictEqual(yield* engine.log.unfinishedInvocations(100), [], "recovery sealed every invocation on open")
      assert.deepStrictEqual(yield* engine.recover, { sealed: [], count: 0, unsealed: [] }, "a second recovery writes nothing")
      const events = yield* engine.log.events(SESSION)
      assertJournaled(events, recorded)
      // Recovery sealed at most the one invocation that was live, failed with the class its effects call for.
      const sealed = factsOf(events.slice(left.length), "invocation_ended").map((fact) => fact.outcome)
      assert.isAtMost(sealed.length, 1)
      const foundHere: Array<Found> = []
      for (const outcome of sealed) {
        if (outcome.kind !== "failed" || (outcome.class !== "host_interrupted" && outcome.class !== "outcome_unknown")) {
          return assert.fail(`recovery sealed ${JSON.stringify(outcome)}`)
        }
        foundHere.push(outcome.class)
      }
      for (const item of recorded) {
        if (item.raw === undefined) continue
        const raw = yield* engine.log.readToolResult(SESSION, item.id)
        assert.strictEqual(Digest.sha256Hex(Canonical.stringify(raw.raw)), item.raw, `the raw result of ${item.id} is unchanged`)
      }
      assertSealed(events)
      const lines = readEffects(workspace)
      assertEffects(trial, events, lines, journal.length)

      // A sealed pause waits for its successor: it resumes on the child's server, which holds the rest of the script.
      const pending = yield* engine.log.pendingHandoffs()
      let effects = lines
      if (pending.length > 0) {
        assert.strictEqual(trial.scenario.name, "handoff")
        const model = yield* modelAt(child.server.url)
        const reports = yield* engine.resumePending({
          provider: (routeIdentity) => Effect.succeed(routeIdentity === model.routeIdentity ? model : undefined),
          tools: () => noteCatalog(workspace),
        })
        assert.strictEqual(reports.length, 1)
        const report = reports[0]!
        if (!("started" in report)) return assert.fail(`the pause was skipped: ${report.skipped}`)
        assert.deepStrictEqual((yield* report.started.wait).outcome, { kind: "completed" })
        effects = readEffects(workspace)
        assert.deepStrictEqual(effects, [...lines, "h2"])
        foundHere.push("resumed")
      }

      // The next message: refused for reconciliation after an unknown effect unless explicitly allowed.
      const server = yield* ScriptedServer.make({ script: [Respond.sse(OpenAiSse.response({ text: ["Checked."] }))] })
      const next = {
        invocation: invocation("next"),
        model: yield* modelAt(server.url),
        configuration: configuration(workspace),
        message: { text: "What state are the notes in?" },
        tools: noteCatalog(workspace),
      }
      const unknown = factsOf(yield* engine.log.events(SESSION), "invocation_ended").some(
        (fact) => fact.outcome.kind === "failed" && fact.outcome.class === "outcome_unknown",
      )
      if (unknown) {
        const refused = yield* Effect.flip(engine.start(next))
        assert.strictEqual(refused.reason._tag, "ReconciliationRequired")
      }
      const result = yield* engine.run({ ...next, allowPriorUnknown: unknown })
      assert.deepStrictEqual(result.outcome, { kind: "completed" })
      if (unknown) assert.include(server.requests()[0]!.body, "Prior execution was interrupted")
      assert.deepStrictEqual(readEffects(workspace), effects, "the next message repeats no effect")

      const after = yield* engine.log.events(SESSION)
      assertJournaled(after, recorded)
      assertSealed(after)
      assert.deepStrictEqual(yield* engine.log.pendingHandoffs(), [], "no pause is left waiting")
      assert.deepStrictEqual(yield* engine.log.unfinishedInvocations(100), [], "every invocation is sealed")
      yield* assertValid(engine.log, SESSION)
      return foundHere.length === 0 ? ["nothing to recover" as const] : foundHere
    }),
  ).pipe(Effect.ensuring(Effect.promise(() => child.server.close())))

// ---------------------------------------------------------------------------------------------

/** What a clean run of each scenario ends with (other than `completed`, the outcome's kind). */
const cleanOutcomes: Record<Scenario["name"], ReadonlyArray<unknown>> = {
  "tool-loop": [{ kind: "completed" }],
  compaction: [{ kind: "completed" }, { kind: "completed" }, "context_compact_finished"],
  handoff: ["handoff_paused", { kind: "completed" }],
  continuation: ["failed", { kind: "completed" }],
}

/** The paused run's commits: its opening with its request, completion with dispatch, settlement, and terminal. */
const PAUSED_COMMITS = 4

/** How often the trials met each way recovery and the next engine found a session. */
const found = new Map<Found, number>()

describe(`the engine killed anywhere (seed ${SEED}, ${TRIALS} trials)`, () => {
  for (const trial of cleanRuns) {
    it.live(trial.name, () =>
      Effect.gen(function* () {
        const child = yield* Effect.promise(() => results.get(trial.name)!)
        assert.strictEqual(child.code, 0, child.stderr)
        const left = trial.leave === true
        const summary = JSON.parse(child.stdout.trim()) as { readonly outcomes: ReadonlyArray<{ readonly kind: string }> }
        assert.deepStrictEqual(
          summary.outcomes.map((outcome) => (outcome.kind === "completed" ? outcome : outcome.kind)),
          left ? ["handoff_paused"] : cleanOutcomes[trial.scenario.name],
        )
        assert.deepStrictEqual(readEffects(path.join(child.directory, "workspace")), left ? ["h1"] : trial.scenario.lines)
        const journal = readJournal(child.directory)
        const substantive = journal.filter((commit) => commit.some((item) => item.kind !== "model_observed"))
        assert.strictEqual(substantive.length, left ? PAUSED_COMMITS : trial.scenario.commits)
        if (trial.scenario.name === "compaction") {
          const events = yield* readUnrecovered(path.join(child.directory, "events.sqlite"))
          const modes = factsOf(events, "context_checkpoint_recorded").map((fact) => fact.checkpoint.mode.kind)
          assert.deepStrictEqual(modes, ["mid_turn", "pre_turn", "standalone"])
        }
        assert.deepStrictEqual(yield* verify(trial, child), left ? ["resumed"] : ["nothing to recover"])
      }),
    60_000)
  }

  for (const trial of trials) {
    it.live(trial.name, () =>
      Effect.gen(function* () {
        const child = yield* Effect.promise(() => results.get(trial.name)!)
        assert.strictEqual(child.signal, "SIGKILL", `the child reached the point: ${child.stdout}${child.stderr}`)
        for (const item of yield* verify(trial, child)) found.set(item, (found.get(item) ?? 0) + 1)
        fs.rmSync(child.directory, { recursive: true, force: true })
      }),
    60_000)
  }

  it("the trials kill runs in flight, with and without an effect in doubt", () => {
    const counts = Object.fromEntries(FOUND.map((item) => [item, found.get(item) ?? 0]))
    process.stdout.write(`crash-anywhere (seed ${SEED}, ${TRIALS} trials): ${JSON.stringify(counts)}\n`)
    // Any seed's 50 trials seal both classes (a resumed pause is the clean run's above); fewer need not.
    if (trials.length >= 50) for (const item of ["host_interrupted", "outcome_unknown"] as const) assert.isAbove(counts[item]!, 0, `no trial found ${item}`)
  })
})
