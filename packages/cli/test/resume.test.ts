import { Prompts } from "@maka/facts"
import * as fs from "node:fs"
import * as path from "node:path"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { afterEach, describe, expect, it } from "vitest"
import { RESERVED_HINT } from "../src/internal/exit.ts"
import { levelNames, levelOf } from "../src/internal/resume-command.ts"
import { eventLines, folder, maka, NOWHERE_BASE_URL, signalWhenStill, when, type EventLine, type Folder } from "./support/cli.ts"

const folders: Array<Folder> = []
const fresh = () => {
  const created = folder()
  folders.push(created)
  return created
}
afterEach(() => {
  for (const created of folders.splice(0)) created.remove()
})

/** Slows the offline model's stream so a signal lands mid-run. */
const SLOW = { MAKA_OFFLINE_DELAY_MS: "80" }

/** Starts `maka run` on the offline model and sends SIGTERM once its first tool call is dispatched. */
const handOff = (created: Folder, session: string, extra: ReadonlyArray<string> = []) =>
  maka(["run", "--db", created.db, "--workspace", created.workspace, "--session", session, "--json", ...extra, "What is this project?"], {
    cwd: created.root,
    env: SLOW,
    onOutput: when((output) => output.stdout.includes('"kind":"tool_dispatched"'), (child) => child.kill("SIGTERM")),
  })

const storedEvents = async (created: Folder, session: string): Promise<ReadonlyArray<EventLine>> => {
  const result = await maka(["events", "--db", created.db, "--session", session, "--json"], { cwd: created.root })
  expect(result.code).toBe(0)
  return eventLines(result.stdout)
}

const dispatchedNames = (lines: ReadonlyArray<EventLine>) =>
  lines.filter((line) => line.event.fact.kind === "tool_dispatched").map((line) => line.event.fact["name"] as string)

describe("SIGTERM hands a run off, and maka resume continues it in another process", () => {
  it("seals handoff_paused at the next step boundary (exit 75); resume completes it and each tool ran once", async () => {
    const created = fresh()
    const paused = await handOff(created, "h1")
    expect(paused.stderr).toContain("handing off at the next step boundary")
    expect(paused.stderr).toContain("continue it with: maka resume --session h1")
    expect(paused.code).toBe(75)
    const pausedLines = eventLines(paused.stdout)
    const terminal = pausedLines.at(-1)!.event.fact
    expect(terminal.kind).toBe("invocation_ended")
    expect(terminal["outcome"].kind).toBe("handoff_paused")
    // The tool batch in flight settled before the pause.
    const dispatchedBefore = pausedLines.filter((line) => line.event.fact.kind === "tool_dispatched").length
    expect(pausedLines.filter((line) => line.event.fact.kind === "tool_settled")).toHaveLength(dispatchedBefore)
    // The pause records the catalog of --tools read, with the engine's read_tool_result.
    expect(terminal["outcome"].pause.execution.tools.names).toEqual(levelNames("read"))
    expect(terminal["outcome"].pause.remainingSteps).toBe(32 - pausedLines.filter((line) => line.event.fact.kind === "model_requested").length)

    const listed = await maka(["sessions", "--db", created.db], { cwd: created.root })
    expect(listed.stdout).toMatch(/^h1 {2}paused \(handoff\) {2}1 invocation,/m)
    // The session is reserved for the successor: a new message is refused.
    const refused = await maka(["run", "--db", created.db, "--workspace", created.workspace, "--session", "h1", "hi"], { cwd: created.root })
    expect(refused.code).toBe(1)
    expect(refused.stderr).toBe(`failed: session_busy: ${Prompts.SESSION_RESERVED_MESSAGE}${RESERVED_HINT}\n`)

    const resumed = await maka(["resume", "--db", created.db], { cwd: created.root })
    // Run outside the workspace, it names the folder the successor's tools act in.
    expect(resumed.stderr).toMatch(new RegExp(`^resuming h1: \\d+ steps left, in the paused run's workspace ${fs.realpathSync(created.workspace)}$`, "m"))
    expect(resumed.stdout).toContain("Lantern")
    expect(resumed.code).toBe(0)

    const lines = await storedEvents(created, "h1")
    const endings = lines.filter((line) => line.event.fact.kind === "invocation_ended").map((line) => line.event.fact["outcome"].kind)
    expect(endings).toEqual(["handoff_paused", "completed"])
    // The offline model's tool loop calls each tool once per turn: across both processes, still once.
    expect(dispatchedNames(lines).sort()).toEqual(["list_files", "read_file"])
    expect((await maka(["sessions", "--db", created.db], { cwd: created.root })).stdout).toMatch(/^h1 {2}idle /m)
    const again = await maka(["resume", "--db", created.db], { cwd: created.root })
    expect(again.stderr).toBe("nothing to resume\n")
    expect(again.code).toBe(0)
    // The inspector's timeline shows the pause and the successor that continued it.
    const inspected = await maka(["inspect", "--db", created.db, "--session", "h1"], { cwd: created.root })
    const successor = terminal["outcome"].pause.intent.successorInvocationId
    expect(inspected.stdout).toMatch(new RegExp(`ended: handoff_paused: \\d+ steps left for successor ${successor}`))
    expect(inspected.stdout).toMatch(new RegExp(`invocation ${successor} opened: handoff of invocation \\S+ \\(its first \\d+ events\\)`))
  }, 60_000)

  it("a successor killed mid-run is sealed by the next resume, which says so before `nothing to resume`", async () => {
    const created = fresh()
    const paused = await handOff(created, "k1")
    expect(paused.code).toBe(75)
    const successor = eventLines(paused.stdout).at(-1)!.event.fact["outcome"].pause.intent.successorInvocationId as string
    const killed = await maka(["resume", "--db", created.db, "--json"], {
      cwd: created.root,
      env: SLOW,
      onOutput: when((output) => output.stdout.includes('"kind":"model_requested"'), (child) => child.kill("SIGKILL")),
    })
    expect(killed.signal).toBe("SIGKILL")
    const again = await maka(["resume", "--db", created.db], { cwd: created.root })
    expect(again.code).toBe(0)
    expect(again.stderr).toMatch(
      new RegExp(`^recovered: session k1: run ${successor}, left open by a writer that no longer holds the log, sealed (host_interrupted|outcome_unknown)\nnothing to resume\n$`),
    )
  }, 60_000)

  it("resumes no pause once its stdout's reader is gone (`maka resume | false`): exit 130, every pause still waits", async () => {
    const created = fresh()
    for (const session of ["g1", "g2"]) expect((await handOff(created, session)).code).toBe(75)
    const resumed = await maka(["resume", "--db", created.db], { cwd: created.root, stdoutClosed: true })
    expect(resumed.code).toBe(130)
    const listed = await maka(["sessions", "--db", created.db], { cwd: created.root })
    expect(listed.stdout).toMatch(/^g1 {2}paused \(handoff\) {2}1 invocation,/m)
    expect(listed.stdout).toMatch(/^g2 {2}paused \(handoff\) {2}1 invocation,/m)
  })

  it("a signal ends resume's wait for a reader that stopped reading: exit 130, no pause resumed after it", async () => {
    const created = fresh()
    // The successors read the README: their --json lines carry it, and soon fill the pipe nobody reads.
    fs.writeFileSync(path.join(created.workspace, "README.md"), `# Lantern\n\n${"A tiny static-site generator. ".repeat(2_000)}\n`)
    const sessions = ["w1", "w2", "w3", "w4"]
    for (const session of sessions) expect((await handOff(created, session)).code).toBe(75)
    const paused = async () =>
      (await maka(["sessions", "--db", created.db], { cwd: created.root })).stdout.split("\n").filter((line) => line.includes("paused (handoff)")).length
    let pausedBeforeSignals = -1
    const resumed = await maka(["resume", "--db", created.db, "--json"], {
      cwd: created.root,
      stdoutUnread: true,
      // Once no pause has been taken for three looks in a row, resume waits for its output.
      onSpawn: (child) =>
        signalWhenStill(child, {
          measure: paused,
          started: (left) => left < sessions.length,
          beforeSignals: async (left) => {
            pausedBeforeSignals = left
          },
        }),
    })
    expect(resumed.code).toBe(130)
    expect(pausedBeforeSignals).toBeGreaterThan(0)
    // No pause was taken once the signals began.
    expect(await paused()).toBe(pausedBeforeSignals)
  }, 60_000)

  it("resumes only the session given with --session, and prints its events with --json", async () => {
    const created = fresh()
    expect((await handOff(created, "a")).code).toBe(75)
    expect((await handOff(created, "b")).code).toBe(75)
    const resumed = await maka(["resume", "--db", created.db, "--session", "b", "--json"], { cwd: created.root })
    expect(resumed.code).toBe(0)
    const lines = eventLines(resumed.stdout)
    expect(lines.every((line) => line.event.invocation.sessionId === "b")).toBe(true)
    expect(lines[0]!.event.fact.kind).toBe("invocation_opened")
    expect(lines[0]!.event.fact["input"].kind).toBe("handoff")
    expect(lines.at(-1)!.event.fact["outcome"].kind).toBe("completed")
    const listed = (await maka(["sessions", "--db", created.db], { cwd: created.root })).stdout
    expect(listed).toMatch(/^a {2}paused \(handoff\) /m)
    expect(listed).toMatch(/^b {2}idle /m)
  }, 60_000)

  it("skips a pause whose route differs from the connection's: handoff execution settings changed, exit 2, nothing written", async () => {
    const created = fresh()
    expect((await handOff(created, "r1")).code).toBe(75)
    const before = await storedEvents(created, "r1")
    const skipped = await maka(["resume", "--db", created.db, "--base-url", NOWHERE_BASE_URL, "--model", "other"], { cwd: created.root })
    expect(skipped.stderr).toMatch(/^skipped r1: handoff execution settings changed: /m)
    expect(skipped.code).toBe(2)
    expect(await storedEvents(created, "r1")).toEqual(before)
    // The same log on the route the run had still resumes.
    expect((await maka(["resume", "--db", created.db], { cwd: created.root })).code).toBe(0)
  }, 60_000)

  it("skips a pause whose folder is no longer its workspace, lost its marker or is gone: exit 2, nothing written, no marker made", async () => {
    const created = fresh()
    expect((await handOff(created, "w1")).code).toBe(75)
    const before = await storedEvents(created, "w1")
    const marker = path.join(created.workspace, ".maka-workspace.json")
    const original = fs.readFileSync(marker, "utf8")
    // Another workspace at the same path: its marker names another identity.
    fs.writeFileSync(marker, `${JSON.stringify({ uuid: "6ba7b810-9dad-41d1-80b4-00c04fd430c8" })}\n`)
    const other = await maka(["resume", "--db", created.db], { cwd: created.root })
    expect(other.stderr).toMatch(/^skipped w1: handoff execution settings changed: the folder .* is no longer the paused run's workspace/m)
    expect(other.code).toBe(2)
    // The marker removed: the folder is not given a new identity.
    fs.rmSync(marker)
    const lost = await maka(["resume", "--db", created.db], { cwd: created.root })
    expect(lost.stderr).toMatch(/^skipped w1: handoff execution settings changed: the paused run's workspace .* has lost its \.maka-workspace\.json/m)
    expect(lost.code).toBe(2)
    expect(fs.existsSync(marker)).toBe(false)
    // The folder gone (moved away): the ways out, restore it or abandon the pause; no folder made.
    const moved = `${created.workspace}-moved`
    fs.renameSync(created.workspace, moved)
    const gone = await maka(["resume", "--db", created.db], { cwd: created.root })
    expect(gone.stderr).toBe(
      `skipped w1: the paused run's workspace ${created.workspace} is gone; restore it to resume, or release the pause with \`maka resume --abandon --session w1\`\n`,
    )
    expect(gone.code).toBe(2)
    expect(fs.existsSync(created.workspace)).toBe(false)
    fs.renameSync(moved, created.workspace)
    expect(await storedEvents(created, "w1")).toEqual(before)
    // The marker restored, the run resumes.
    fs.writeFileSync(marker, original)
    expect((await maka(["resume", "--db", created.db], { cwd: created.root })).code).toBe(0)
  }, 60_000)

  it("makes no log where none is: nothing to resume (exit 0), no pause to release (exit 2)", async () => {
    const created = fresh()
    const resumed = await maka(["resume", "--session", "typo"], { cwd: created.workspace })
    expect(resumed.stderr).toBe("nothing to resume\n")
    expect(resumed.code).toBe(0)
    const abandoned = await maka(["resume", "--abandon", "--session", "nosuch"], { cwd: created.workspace })
    expect(abandoned.stderr).toBe("maka: invalid input: session nosuch holds no sealed handoff\n")
    expect(abandoned.code).toBe(2)
    expect(fs.existsSync(path.join(created.workspace, ".maka"))).toBe(false)
  })

  it("--abandon --session releases a pause: its successor is sealed cancelled {handoff_abandoned}, and the session is usable", async () => {
    const created = fresh()
    expect((await handOff(created, "x1")).code).toBe(75)
    const usage = await maka(["resume", "--db", created.db, "--abandon"], { cwd: created.root })
    expect(usage.code).toBe(2)
    expect(usage.stderr).toContain("needs --session")
    const abandoned = await maka(["resume", "--db", created.db, "--abandon", "--session", "x1", "--json"], { cwd: created.root })
    expect(abandoned.stderr).toMatch(/^abandoned the handoff of x1: its successor [0-9a-f-]{36} is sealed cancelled \{handoff_abandoned\}$/m)
    expect(abandoned.code).toBe(0)
    const lines = await storedEvents(created, "x1")
    expect(lines.at(-1)!.event.fact).toEqual({ kind: "invocation_ended", outcome: { kind: "cancelled", source: "handoff_abandoned" } })
    // With --json, stdout holds the successor's lines, its opening to its terminal, as stored.
    expect(eventLines(abandoned.stdout)).toEqual(lines.slice(-2))
    expect(lines.at(-2)!.event.fact["input"].kind).toBe("handoff")
    expect((await maka(["resume", "--db", created.db], { cwd: created.root })).stderr).toBe("nothing to resume\n")
    // Released already: a second abandon is session_busy (exit 1), as when another host's beat it.
    const again = await maka(["resume", "--db", created.db, "--abandon", "--session", "x1"], { cwd: created.root })
    expect(again.code).toBe(1)
    expect(again.stderr).toContain("the handoff was already resumed or abandoned")
    const next = await maka(["run", "--db", created.db, "--workspace", created.workspace, "--session", "x1", "hi"], { cwd: created.root })
    expect(next.code).toBe(0)
  }, 60_000)

  it("a successor handed off again by SIGTERM exits 75 and a third process completes it", async () => {
    const created = fresh()
    expect((await handOff(created, "t1")).code).toBe(75)
    // The successor's first step is its last tool call: the SIGTERM sent at its request must land
    // before that step ends (the answer after it has no boundary), so its stream is slower still,
    // which keeps the window open on a loaded machine.
    const again = await maka(["resume", "--db", created.db, "--json"], {
      cwd: created.root,
      env: { MAKA_OFFLINE_DELAY_MS: "250" },
      onOutput: when((output) => output.stdout.includes('"kind":"model_requested"'), (child) => child.kill("SIGTERM")),
    })
    expect(again.code).toBe(75)
    expect(eventLines(again.stdout).at(-1)!.event.fact["outcome"].kind).toBe("handoff_paused")
    expect((await maka(["resume", "--db", created.db], { cwd: created.root })).code).toBe(0)
    const endings = (await storedEvents(created, "t1"))
      .filter((line) => line.event.fact.kind === "invocation_ended")
      .map((line) => line.event.fact["outcome"].kind)
    expect(endings).toEqual(["handoff_paused", "handoff_paused", "completed"])
  }, 60_000)
})

describe("SIGTERM to maka resume", () => {
  it("whose successor ends before its next step boundary stops before the next pause, which stays paused", async () => {
    const created = fresh()
    expect((await handOff(created, "r1")).code).toBe(75)
    expect((await handOff(created, "r2")).code).toBe(75)
    const resumed = await maka(["resume", "--db", created.db, "--json"], {
      // Run in the paused run's workspace: no folder to name.
      cwd: created.workspace,
      env: SLOW,
      // The successor's answer streams in its last step: no step boundary comes after it.
      onOutput: when((output) => output.stdout.includes('"kind":"part_delta"'), (child) => child.kill("SIGTERM")),
    })
    expect(resumed.stderr).toMatch(/^resuming r1: \d+ steps left$/m)
    expect(resumed.stderr).not.toContain("resuming r2")
    expect(resumed.stderr).toContain("stopped before the next pause (SIGTERM): 1 left; continue with: maka resume\n")
    expect(resumed.code).toBe(0)
    const endings = async (session: string) =>
      (await storedEvents(created, session)).filter((line) => line.event.fact.kind === "invocation_ended").map((line) => line.event.fact["outcome"].kind)
    expect(await endings("r1")).toEqual(["handoff_paused", "completed"])
    expect(await endings("r2")).toEqual(["handoff_paused"])
    expect((await maka(["sessions", "--db", created.db], { cwd: created.root })).stdout).toMatch(/^r2 {2}paused \(handoff\) /m)
    const rest = await maka(["resume", "--db", created.db], { cwd: created.root })
    expect(rest.code, rest.stderr).toBe(0)
    expect(await endings("r2")).toEqual(["handoff_paused", "completed"])
  }, 90_000)
})

describe("SIGTERM when the handoff cannot be taken", () => {
  it("a run that ends before the next step boundary keeps its own exit code (0), with no refusal line", async () => {
    const created = fresh()
    const result = await maka(["run", "--db", created.db, "--workspace", created.workspace, "--json", "What is this project?"], {
      cwd: created.root,
      env: SLOW,
      // The answer streams in the last step: no step boundary comes after it.
      onOutput: when((output) => output.stdout.includes('"kind":"part_delta"'), (child) => child.kill("SIGTERM")),
    })
    expect(result.stderr).toContain("handing off at the next step boundary")
    expect(result.stderr).not.toContain("handoff not taken")
    expect(result.code).toBe(0)
    expect(eventLines(result.stdout).at(-1)!.event.fact["outcome"].kind).toBe("completed")
  }, 60_000)

  it("says why on stderr and the run goes on; a second SIGTERM cancels (exit 130)", async () => {
    const server = await ScriptedServer.start({
      script: [
        Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "run_command", arguments: ['{"command":"sleep 10"}'] }] })),
        // A tool call that lasts a second, so the SIGTERM sent at its dispatch lands before the next step boundary.
        Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-2", name: "run_command", arguments: ['{"command":"sleep 1"}'] }] })),
        Respond.hang(),
      ],
    })
    try {
      const created = fresh()
      const base = ["--db", created.db, "--workspace", created.workspace, "--base-url", `${server.url}/v1`, "--model", "m", "--session", "u1", "--tools", "all", "--json"]
      // A run killed during a tool call leaves its outcome unknown; a run admitted over it cannot be handed off.
      const killed = await maka(["run", ...base, "run it"], {
        cwd: created.root,
        onOutput: when((output) => output.stdout.includes('"kind":"tool_dispatched"'), (child) => child.kill("SIGKILL")),
      })
      expect(killed.signal).toBe("SIGKILL")
      expect((await maka(["recover", "--db", created.db], { cwd: created.root })).code).toBe(0)
      let terms = 0
      const result = await maka(["run", ...base, "--allow-prior-unknown", "look around"], {
        cwd: created.root,
        onOutput: (child, output) => {
          if (terms === 0 && output.stdout.includes('"kind":"tool_dispatched"')) {
            terms = 1
            child.kill("SIGTERM")
          } else if (terms === 1 && output.stderr.includes("handoff not taken")) {
            terms = 2
            child.kill("SIGTERM")
          }
        },
      })
      expect(result.stderr).toContain("handoff not taken: the run was admitted with --allow-prior-unknown over an effect of unknown outcome")
      expect(result.code).toBe(130)
      const lines = eventLines(result.stdout)
      // The run went on past the refused pause: its next step was requested before the cancellation.
      expect(lines.filter((line) => line.event.fact.kind === "model_requested" && line.event.fact["purpose"] === "main")).toHaveLength(2)
      expect(lines.at(-1)!.event.fact["outcome"].kind).toBe("cancelled")
    } finally {
      await server.close()
    }
  }, 60_000)

  it("says so even when the run's last step, after the refused boundary, ends at once", async () => {
    const server = await ScriptedServer.start({
      script: [
        Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "run_command", arguments: ['{"command":"sleep 10"}'] }] })),
        Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-2", name: "run_command", arguments: ['{"command":"sleep 1"}'] }] })),
        // The step after the refused pause answers at once and the run completes.
        Respond.sse(OpenAiSse.response({ text: ["done"], model: "m" })),
      ],
    })
    try {
      const created = fresh()
      const base = ["--db", created.db, "--workspace", created.workspace, "--base-url", `${server.url}/v1`, "--model", "m", "--session", "u2", "--tools", "all", "--json"]
      const killed = await maka(["run", ...base, "run it"], {
        cwd: created.root,
        onOutput: when((output) => output.stdout.includes('"kind":"tool_dispatched"'), (child) => child.kill("SIGKILL")),
      })
      expect(killed.signal).toBe("SIGKILL")
      expect((await maka(["recover", "--db", created.db], { cwd: created.root })).code).toBe(0)
      const result = await maka(["run", ...base, "--allow-prior-unknown", "look around"], {
        cwd: created.root,
        onOutput: when((output) => output.stdout.includes('"kind":"tool_dispatched"'), (child) => child.kill("SIGTERM")),
      })
      expect(result.code, result.stderr).toBe(0)
      expect(result.stderr).toContain("handoff not taken: the run was admitted with --allow-prior-unknown over an effect of unknown outcome")
      expect(eventLines(result.stdout).at(-1)!.event.fact["outcome"].kind).toBe("completed")
    } finally {
      await server.close()
    }
  }, 60_000)
})

describe("a resumed run's model", () => {
  it("waits for model output as long as resume's --idle-timeout says", async () => {
    const server = await ScriptedServer.start({
      script: [
        Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "run_command", arguments: ['{"command":"sleep 1"}'] }] })),
        // The successor's request: a stream that starts, then sends nothing more.
        Respond.stallAfter([OpenAiSse.role()]),
      ],
    })
    try {
      const created = fresh()
      const provider = ["--base-url", `${server.url}/v1`, "--model", "m"]
      const paused = await maka(["run", "--db", created.db, "--workspace", created.workspace, ...provider, "--tools", "all", "--json", "run it"], {
        cwd: created.root,
        onOutput: when((output) => output.stdout.includes('"kind":"tool_dispatched"'), (child) => child.kill("SIGTERM")),
      })
      expect(paused.code).toBe(75)
      const resumed = await maka(["resume", "--db", created.db, ...provider, "--idle-timeout", "1", "--json"], { cwd: created.root })
      expect(resumed.stderr).toContain("model_timeout")
      expect(eventLines(resumed.stdout).at(-1)!.event.fact["outcome"]).toMatchObject({ kind: "failed", class: "model_timeout" })
      const refused = await maka(["resume", "--db", created.db, ...provider, "--idle-timeout", "0"], { cwd: created.root })
      expect(refused.code).toBe(2)
    } finally {
      await server.close()
    }
  }, 60_000)
})

describe("a resumed run's tools", () => {
  it("never write the log kept in the workspace", async () => {
    const server = await ScriptedServer.start({
      script: [
        // A tool call that lasts a second, so the SIGTERM sent at its dispatch pauses the run at the step boundary after it.
        Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "run_command", arguments: ['{"command":"sleep 1"}'] }] })),
        Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-2", name: "write_file", arguments: ['{"path":"log.sqlite","content":"oops"}'] }] })),
        Respond.sse(OpenAiSse.response({ text: ["kept"], model: "m" })),
      ],
    })
    try {
      const created = fresh()
      const db = path.join(created.workspace, "log.sqlite")
      const provider = ["--base-url", `${server.url}/v1`, "--model", "m"]
      const paused = await maka(["run", "--db", db, "--workspace", created.workspace, ...provider, "--session", "w", "--tools", "all", "--json", "go"], {
        cwd: created.root,
        onOutput: when((output) => output.stdout.includes('"kind":"tool_dispatched"'), (child) => child.kill("SIGTERM")),
      })
      expect(paused.code).toBe(75)
      const resumed = await maka(["resume", "--db", db, ...provider], { cwd: created.root })
      expect(resumed.stderr).toMatch(/^tool: write_file failed \(\d+ ms\): log\.sqlite: a file of the event log, never written by a tool$/m)
      expect(resumed.stdout).toBe("kept\n")
      expect(resumed.code).toBe(0)
      const sessions = await maka(["sessions", "--db", db], { cwd: created.root })
      expect(sessions.stdout).toMatch(/^w\s/m)
      expect(sessions.code).toBe(0)
    } finally {
      await server.close()
    }
  }, 60_000)
})

describe("the tool level of a pause", () => {
  it("maps each level's names, in any order, back to the level, and any other set to no level", () => {
    for (const level of ["none", "read", "write", "all"] as const) {
      expect(levelOf([...levelNames(level)].reverse())).toBe(level)
    }
    expect(levelNames("read")).toEqual(["list_files", "read_file", "read_tool_result", "search_text"])
    expect(levelNames("none")).toEqual([])
    expect(levelOf([...levelNames("read"), "deploy"])).toBeUndefined()
    expect(levelOf(levelNames("write").filter((name) => name !== "read_tool_result"))).toBeUndefined()
  })
})
