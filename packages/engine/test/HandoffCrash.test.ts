/**
 * A crash during handoff never leaves a session unusable (docs/engine.md §5.10, §5.13). A child
 * process runs a tool loop, is handed off while its first effect runs, and starts the successor
 * itself; it is killed with SIGKILL at a point of its progress between the reservation and the
 * successor's first step: at an engine fault point (`engine.before-settle.<n>`, `engine.commit.<k>`,
 * which fires right after the k-th durable commit) or on a progress line it prints. After each kill a
 * new engine opens the log (SQLite recovery runs) and the test checks that the run is either sealed
 * paused with a successor that resumes and completes, or sealed failed with the expected class; that
 * no effect ran twice; and that the session admits the next message (with `allowPriorUnknown` after
 * `outcome_unknown`, which an ordinary message is refused).
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { LanguageModel } from "@maka/model"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Effect, Redacted } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { bundleChild, root } from "./support/bundle.ts"
import { assertValid } from "./support/crash-anywhere.ts"
import { factsOf, kinds, reopen } from "./support/harness.ts"
import { configuration, countCatalog, handoffScript, HANDOFF_INVOCATION, readEffects } from "./support/handoff-crash.ts"

const here = path.dirname(fileURLToPath(import.meta.url))
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "maka-engine-handoff-crash-"))
const SESSION = HANDOFF_INVOCATION.sessionId
let bundle = ""

beforeAll(async () => {
  bundle = await bundleChild(path.join(here, "children/handoff-crash.ts"), path.join(scratch, "bundle"))
}, 120_000)
afterAll(() => fs.rmSync(scratch, { recursive: true, force: true }))

/** Where the child dies: a fault point of the engine, or a progress line it prints. */
type Kill = { readonly fault: string } | { readonly line: "reserved" | "paused" }

/** What recovery leaves: the pause waiting for its successor, or one invocation of the run sealed failed. */
type Expected =
  | { readonly kind: "paused" }
  | { readonly kind: "failed"; readonly invocation: "paused" | "successor"; readonly failure: "host_interrupted" | "outcome_unknown" }

interface Point {
  readonly name: string
  readonly kill: Kill
  readonly expected: Expected
}

/**
 * The points, in the order a clean run passes them (its commits are checked below): the first effect
 * ran but is unsettled (before-settle.1, the `reserved` line), the settlement the pause's preflight
 * flushes (commit 3; the opening rode the first request's commit), the `handoff_paused` terminal
 * (commit 4, the `paused` line), the successor's opening (commit 5), its first request (commit 6),
 * and its first dispatch, before the effect (commit 7).
 */
const points: ReadonlyArray<Point> = [
  { name: "engine.before-settle.1", kill: { fault: "engine.before-settle.1" }, expected: { kind: "failed", invocation: "paused", failure: "outcome_unknown" } },
  { name: "the reserved line", kill: { line: "reserved" }, expected: { kind: "failed", invocation: "paused", failure: "outcome_unknown" } },
  { name: "engine.commit.3", kill: { fault: "engine.commit.3" }, expected: { kind: "failed", invocation: "paused", failure: "host_interrupted" } },
  { name: "engine.commit.4", kill: { fault: "engine.commit.4" }, expected: { kind: "paused" } },
  { name: "the paused line", kill: { line: "paused" }, expected: { kind: "paused" } },
  { name: "engine.commit.5", kill: { fault: "engine.commit.5" }, expected: { kind: "failed", invocation: "successor", failure: "host_interrupted" } },
  { name: "engine.commit.6", kill: { fault: "engine.commit.6" }, expected: { kind: "failed", invocation: "successor", failure: "host_interrupted" } },
  { name: "engine.commit.7", kill: { fault: "engine.commit.7" }, expected: { kind: "failed", invocation: "successor", failure: "outcome_unknown" } },
]

interface ChildResult {
  readonly directory: string
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly lines: ReadonlyArray<Record<string, unknown>>
  readonly stderr: string
}

/** Runs the bundled child in a fresh folder against `baseUrl`; kills it as `kill` says. */
const runChild = (name: string, baseUrl: string, kill: Kill | undefined): Promise<ChildResult> => {
  const directory = path.join(scratch, name)
  fs.mkdirSync(path.join(directory, "workspace"), { recursive: true })
  const env: NodeJS.ProcessEnv = { ...process.env }
  delete env["MAKA_TEST_FAULT"]
  if (kill !== undefined && "fault" in kill) env["MAKA_TEST_FAULT"] = kill.fault
  return new Promise((resolve) => {
    const hold = kill !== undefined && "line" in kill && kill.line === "paused" ? ["paused"] : []
    const child = spawn(process.execPath, [bundle, directory, baseUrl, ...hold], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] })
    const lines: Array<Record<string, unknown>> = []
    let buffered = ""
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => {
      buffered += chunk.toString("utf8")
      for (let end = buffered.indexOf("\n"); end >= 0; end = buffered.indexOf("\n")) {
        const line = JSON.parse(buffered.slice(0, end)) as Record<string, unknown>
        buffered = buffered.slice(end + 1)
        lines.push(line)
        if (kill !== undefined && "line" in kill && kill.line in line) child.kill("SIGKILL")
      }
    })
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")))
    const timer = setTimeout(() => child.kill("SIGTERM"), 30_000)
    child.on("error", (error) => {
      clearTimeout(timer)
      resolve({ directory, code: null, signal: null, lines, stderr: `${stderr}${String(error)}` })
    })
    child.on("close", (code, signal) => {
      clearTimeout(timer)
      resolve({ directory, code, signal, lines, stderr })
    })
  })
}

const modelAt = (server: ScriptedServer.ScriptedServer) =>
  LanguageModel.make({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "test-model", apiKey: Redacted.make("sk-parent") })

/** Each effect at most once. */
const assertOnce = (lines: ReadonlyArray<string>) => assert.strictEqual(new Set(lines).size, lines.length, `an effect ran twice: ${lines.join(",")}`)

/**
 * Opens the killed child's log (recovery runs), checks what recovery left, and uses the session again:
 * the successor of a sealed pause resumes on the child's server and completes; otherwise the next
 * message runs on a fresh server.
 */
const verify = (child: ChildResult, server: ScriptedServer.ScriptedServer, expected: Expected) =>
  Effect.scoped(
    Effect.gen(function* () {
      const workspace = path.join(child.directory, "workspace")
      const engine = yield* reopen(path.join(child.directory, "events.sqlite"))
      assert.deepStrictEqual(yield* engine.log.unfinishedInvocations(100), [])
      const events = yield* engine.log.events(SESSION)
      const effects = readEffects(workspace)
      assertOnce(effects)
      // Every dispatch settled at most once; the first effect ran exactly once in every case.
      const settled = factsOf(events, "tool_settled").map((fact) => fact.operationId)
      assert.strictEqual(new Set(settled).size, settled.length)
      assert.deepStrictEqual(effects, ["a"])
      const openings = events.filter((stored) => stored.event.fact.kind === "invocation_opened")
      const last = openings[openings.length - 1]!.event.invocation
      const terminal = factsOf(
        events.filter((stored) => stored.event.invocation.invocationId === last.invocationId),
        "invocation_ended",
      )
      assert.strictEqual(terminal.length, 1)
      const pending = yield* engine.log.pendingHandoffs()

      if (expected.kind === "paused") {
        assert.strictEqual(last.invocationId, HANDOFF_INVOCATION.invocationId)
        assert.strictEqual(terminal[0]!.outcome.kind, "handoff_paused")
        assert.strictEqual(pending.length, 1)
        // The successor has not reached the model: it resumes on the child's server, which has the rest of the script.
        assert.strictEqual(server.requests().length, 1)
        const model = yield* modelAt(server)
        const reports = yield* engine.resumePending({
          provider: (routeIdentity) => Effect.succeed(routeIdentity === model.routeIdentity ? model : undefined),
          tools: () => countCatalog(workspace),
        })
        assert.strictEqual(reports.length, 1)
        const report = reports[0]!
        if (!("started" in report)) return assert.fail(`the pause was skipped: ${report.skipped}`)
        assert.deepStrictEqual((yield* report.started.wait).outcome, { kind: "completed" })
        assert.deepStrictEqual(readEffects(workspace), ["a", "b"])
      } else {
        const invocation = expected.invocation === "paused" ? HANDOFF_INVOCATION.invocationId : last.invocationId
        assert.strictEqual(last.invocationId, invocation)
        if (expected.invocation === "successor") {
          assert.notStrictEqual(last.invocationId, HANDOFF_INVOCATION.invocationId)
          assert.deepStrictEqual(openings.map((stored) => stored.event.fact.kind === "invocation_opened" && stored.event.fact.input.kind), ["message", "handoff"])
        } else {
          assert.strictEqual(openings.length, 1)
        }
        assert.deepStrictEqual(terminal[0]!.outcome, { kind: "failed", class: expected.failure })
        assert.deepStrictEqual(pending, [])
        const fresh = yield* ScriptedServer.make({ script: [Respond.sse(OpenAiSse.response({ text: ["Checked."] }))] })
        const model = yield* modelAt(fresh)
        const next = {
          invocation: { ...HANDOFF_INVOCATION, turnId: "turn-next", runId: "run-next", invocationId: "invocation-next" },
          model,
          configuration: configuration(workspace),
          message: { text: "What was counted?" },
          tools: countCatalog(workspace),
        }
        const unknown = expected.failure === "outcome_unknown"
        if (unknown) {
          const refused = yield* Effect.flip(engine.start(next))
          assert.strictEqual(refused.reason._tag, "ReconciliationRequired")
        }
        const result = yield* engine.run({ ...next, allowPriorUnknown: unknown })
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(readEffects(workspace), ["a"])
      }
      const after = yield* engine.log.events(SESSION)
      assert.deepStrictEqual(kinds(after).slice(-1), ["invocation_ended:completed"])
      assert.deepStrictEqual(yield* engine.log.pendingHandoffs(), [])
      assert.deepStrictEqual(yield* engine.log.unfinishedInvocations(100), [])
      assertOnce(readEffects(workspace))
      yield* assertValid(engine.log, SESSION)
    }),
  )

describe("a crash during handoff", () => {
  it.live("a clean run pauses after its first effect and its successor completes, in the commits the points name", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const server = yield* ScriptedServer.make({ script: handoffScript })
        const child = yield* Effect.promise(() => runChild("clean", `${server.url}/v1`, undefined))
        assert.strictEqual(child.code, 0, child.stderr)
        const summary = child.lines[child.lines.length - 1]!
        assert.deepStrictEqual(summary["outcome"], { kind: "completed" })
        assert.strictEqual(summary["paused"], "handoff_paused")
        const commits = (summary["commits"] as ReadonlyArray<ReadonlyArray<string>>).map((batch) => batch.filter((kind) => kind !== "model_observed"))
        assert.deepStrictEqual(commits, [
          ["invocation_opened", "model_requested"],
          ["model_completed", "tool_dispatched"],
          ["tool_settled"],
          ["invocation_ended"],
          ["invocation_opened"],
          ["model_requested"],
          ["model_completed", "tool_dispatched"],
          ["tool_settled", "model_requested"],
          ["model_completed", "invocation_ended"],
        ])
        assert.deepStrictEqual(readEffects(path.join(child.directory, "workspace")), ["a", "b"])
        assert.deepStrictEqual(child.lines.find((line) => "paused" in line && typeof line["paused"] === "number"), { paused: 5 })
      }),
    ),
  30_000)

  for (const point of points) {
    it.live(`a child killed at ${point.name} leaves a usable session`, () =>
      Effect.scoped(
        Effect.gen(function* () {
          const server = yield* ScriptedServer.make({ script: handoffScript })
          const child = yield* Effect.promise(() => runChild(point.name.replaceAll(/[ .]/g, "-"), `${server.url}/v1`, point.kill))
          assert.strictEqual(child.signal, "SIGKILL", `the child reached ${point.name}: ${JSON.stringify(child.lines)} ${child.stderr}`)
          yield* verify(child, server, point.expected)
          fs.rmSync(child.directory, { recursive: true, force: true })
        }),
      ),
    30_000)
  }
})
