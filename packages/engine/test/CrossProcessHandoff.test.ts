/**
 * A live run handed from one process to another over one SQLite file (docs/engine.md §5.10): process
 * A is handed off by SIGTERM while its first tool call runs, seals the pause and exits, releasing the
 * writer lease; process B opens the log, finds the pause with `resumePending`, and completes the run.
 * The countable effect of each call ran exactly once.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as LogTesting from "@maka/event-log/testing"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Context, Effect, Layer } from "effect"
import { spawn, type ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { bundleChild, root } from "./support/bundle.ts"
import { kinds } from "./support/harness.ts"

const here = path.dirname(fileURLToPath(import.meta.url))
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "maka-engine-handoff-"))
let bundle = ""

beforeAll(async () => {
  bundle = await bundleChild(path.join(here, "children/handoff-host.ts"), path.join(scratch, "bundle"))
}, 120_000)
afterAll(() => fs.rmSync(scratch, { recursive: true, force: true }))

const count = (id: string, value: string) =>
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id, name: "count", arguments: [JSON.stringify({ value })] }] }))

/** Spawns the host; `onLine` sees each JSON line it prints. */
const host = (args: ReadonlyArray<string>, onLine: (line: Record<string, unknown>, child: ChildProcess) => void = () => undefined) =>
  new Promise<{ readonly code: number | null; readonly lines: ReadonlyArray<Record<string, unknown>>; readonly stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [bundle, ...args], { cwd: root, stdio: ["ignore", "pipe", "pipe"] })
    const lines: Array<Record<string, unknown>> = []
    let buffered = ""
    let stderr = ""
    child.stdout!.on("data", (chunk: Buffer) => {
      buffered += chunk.toString("utf8")
      for (let end = buffered.indexOf("\n"); end >= 0; end = buffered.indexOf("\n")) {
        const line = JSON.parse(buffered.slice(0, end)) as Record<string, unknown>
        buffered = buffered.slice(end + 1)
        lines.push(line)
        onLine(line, child)
      }
    })
    child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")))
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000)
    child.on("close", (code) => {
      clearTimeout(timer)
      resolve({ code, lines, stderr })
    })
  })

describe("handoff across processes", () => {
  it.live("process A is handed off by a signal mid-run and exits; process B resumes from the same file and completes", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const server = yield* ScriptedServer.make({ script: [count("call-1", "a"), count("call-2", "b"), Respond.sse(OpenAiSse.response({ text: ["Counted."] }))] })
        const directory = path.join(scratch, "one")
        fs.mkdirSync(path.join(directory, "workspace"), { recursive: true })
        const baseUrl = `${server.url}/v1`
        const paused = yield* Effect.promise(() =>
          host(["pause", directory, baseUrl], (line, child) => {
            if (line["dispatched"] === 1) child.kill("SIGTERM")
          }),
        )
        assert.strictEqual(paused.code, 0, paused.stderr)
        assert.deepStrictEqual(paused.lines.at(-1), { closed: [{ outcome: "paused", remainingSteps: 7 }] })
        // A's pause left no request behind it: one model request, then the pause.
        assert.strictEqual(server.requests().length, 1)
        const resumed = yield* Effect.promise(() => host(["resume", directory, baseUrl]))
        assert.strictEqual(resumed.code, 0, resumed.stderr)
        assert.deepStrictEqual(resumed.lines.at(-1), { resumed: [{ kind: "completed" }] })
        // Each call's effect ran once: `a` in A, `b` in B.
        assert.deepStrictEqual(fs.readFileSync(path.join(directory, "workspace", "effects.txt"), "utf8"), "a\nb\n")
        const log = Context.get(
          yield* Layer.build(LogTesting.EventLog.layerSqlite({ path: path.join(directory, "events.sqlite") })),
          LogTesting.EventLog.EventLog,
        )
        const events = yield* log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_settled:succeeded",
          "invocation_ended:handoff_paused",
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_settled:succeeded",
          "model_requested",
          "model_completed",
          "invocation_ended:completed",
        ])
      }),
    ),
  120_000)
})
