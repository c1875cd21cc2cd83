import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { eventLines, folder, maka, type Folder } from "./support/cli.ts"

const folders: Array<Folder> = []
const servers: Array<ScriptedServer.ScriptedServer> = []
const fresh = () => {
  const created = folder()
  folders.push(created)
  return created
}
afterEach(async () => {
  for (const server of servers.splice(0)) await server.close()
  for (const created of folders.splice(0)) created.remove()
})

/** A session `s` with one completed offline run in a fresh folder. */
const withRun = async (): Promise<Folder> => {
  const created = fresh()
  const run = await maka(["run", "--db", created.db, "--workspace", created.workspace, "--session", "s", "What is this?"], { cwd: created.root })
  expect(run.code).toBe(0)
  return created
}

describe("maka compact on the offline model", () => {
  let shared: Folder
  let first: Awaited<ReturnType<typeof maka>>
  let second: Awaited<ReturnType<typeof maka>>
  beforeAll(async () => {
    shared = folder()
    const { root, workspace, db } = shared
    expect((await maka(["run", "--db", db, "--workspace", workspace, "--session", "s", "What is this?"], { cwd: root })).code).toBe(0)
    first = await maka(["compact", "--db", db, "--workspace", workspace, "--session", "s"], { cwd: root })
    second = await maka(["compact", "--db", db, "--workspace", workspace, "--session", "s"], { cwd: root })
  }, 120_000)
  afterAll(() => shared.remove())

  it("summarises the history after a run into a checkpoint, prints its id and coverage, and exits 0", async () => {
    expect(first.stderr).toBe("")
    expect(first.code).toBe(0)
    const match = /^compacted: checkpoint (\S+), covers the history through event #(\d+)\n$/.exec(first.stdout)
    expect(match).not.toBeNull()
    const events = eventLines((await maka(["events", "--db", shared.db, "--session", "s", "--json"], { cwd: shared.root })).stdout)
    const runEnd = events.find((line) => line.event.fact.kind === "invocation_ended")!
    const checkpoint = events.find((line) => line.event.fact.kind === "context_checkpoint_recorded")!
    expect(checkpoint.event.id).toBe(match![1])
    expect(Number(match![2])).toBe(runEnd.sequence)
    expect(checkpoint.event.fact.checkpoint.mode.kind).toBe("standalone")
    expect(checkpoint.event.fact.checkpoint.summary.text).toContain("## Goal\n- What is this?")
  })

  it("finds nothing new the second time: unchanged no_new_history, exit 0, no second checkpoint", async () => {
    expect(second.code).toBe(0)
    expect(second.stdout).toMatch(/^unchanged: no_new_history/)
    const events = eventLines((await maka(["events", "--db", shared.db, "--session", "s", "--json"], { cwd: shared.root })).stdout)
    expect(events.filter((line) => line.event.fact.kind === "context_checkpoint_recorded")).toHaveLength(1)
    const ends = events.filter((line) => line.event.fact.kind === "invocation_ended").map((line) => line.event.fact.outcome)
    expect(ends.slice(1)).toEqual([
      { kind: "context_compact_finished", outcome: { kind: "compacted", checkpointId: expect.any(String) } },
      { kind: "context_compact_finished", outcome: { kind: "unchanged", reason: "no_new_history" } },
    ])
  })

  it("maka inspect shows the compaction in the timeline: its summary request, the checkpoint and the outcome", async () => {
    const result = await maka(["inspect", "--db", shared.db, "--session", "s"], { cwd: shared.root })
    expect(result.code).toBe(0)
    const checkpointId = /checkpoint (\S+),/.exec(first.stdout)![1]!
    expect(result.stdout).toMatch(/invocation \S+ opened: context_compact$/m)
    expect(result.stdout).toMatch(/summary request requested/)
    expect(result.stdout).toMatch(/summary request completed in \d+ ms: finish stop/)
    expect(result.stdout).toContain(`checkpoint ${checkpointId} recorded (standalone, covers through `)
    expect(result.stdout).toContain(`ended: context_compact_finished: compacted into checkpoint ${checkpointId}`)
    expect(result.stdout).toMatch(/ended: context_compact_finished: unchanged: no_new_history$/m)
    // The summary request is not a step: the run's three steps keep their numbers.
    expect(result.stdout).not.toMatch(/step 4/)
  })
})

describe("maka compact", () => {
  it("--json prints the committed events of the compaction, the same lines maka events --json prints", async () => {
    const { root, workspace, db } = await withRun()
    const result = await maka(["compact", "--db", db, "--workspace", workspace, "--session", "s", "--json"], { cwd: root })
    expect(result.code).toBe(0)
    const lines = eventLines(result.stdout)
    expect(lines[0]!.event.fact.input).toMatchObject({ kind: "context_compact" })
    expect(lines.at(-1)!.event.fact.outcome.outcome.kind).toBe("compacted")
    expect(lines.some((line) => line.event.fact.kind === "model_requested" && line.event.fact.purpose === "summary")).toBe(true)
    expect(lines.some((line) => line.event.fact.kind === "context_checkpoint_recorded")).toBe(true)
    const all = (await maka(["events", "--db", db, "--session", "s", "--json"], { cwd: root })).stdout.split("\n")
    const own = result.stdout.split("\n").filter((line) => line !== "")
    expect(all.slice(all.length - 1 - own.length, -1)).toEqual(own)
  })

  it("a later run starts from the summary, and maka inspect --step rebuilds its input over the checkpoint", async () => {
    const { root, workspace, db } = await withRun()
    expect((await maka(["compact", "--db", db, "--workspace", workspace, "--session", "s"], { cwd: root })).code).toBe(0)
    const later = await maka(["run", "--db", db, "--workspace", workspace, "--session", "s", "--json", "And the notes?"], { cwd: root })
    expect(later.code).toBe(0)
    const request = eventLines(later.stdout).find((line) => line.event.fact.kind === "model_requested")!.event.fact
    expect(request.checkpointEventId).toEqual(expect.any(String))
    const step = await maka(["inspect", "--db", db, "--session", "s", "--step", "4"], { cwd: root })
    expect(step.stdout).toContain("Continuation summary:")
    expect(step.stdout).not.toContain("What is this?\n  [assistant]")
    expect(step.stdout).toMatch(/^input digest: \S+ matches the rebuilt input \(tools read\)$/m)
    expect(step.stdout).toMatch(/^source: the session through event \d+, checkpoint at event \d+, digest verified$/m)
    expect(step.code).toBe(0)
  })

  it("fails with exit 1 and the reason on stderr when the summary stays malformed after its repair", async () => {
    const { root, workspace, db } = await withRun()
    const notASummary = () => Respond.sse(OpenAiSse.response({ text: ["Sure, here is what we did."], model: "test-model" }))
    const server = await ScriptedServer.start({ script: [notASummary(), notASummary()] })
    servers.push(server)
    const result = await maka(
      ["compact", "--db", db, "--workspace", workspace, "--session", "s", "--base-url", `${server.url}/v1`, "--model", "test-model"],
      { cwd: root },
    )
    expect(result.stderr).toMatch(/^compaction failed: malformed_summary_\w+\n$/)
    expect(result.stdout).toBe("")
    expect(result.code).toBe(1)
    expect(server.requests()).toHaveLength(2)
    const events = eventLines((await maka(["events", "--db", db, "--session", "s", "--json"], { cwd: root })).stdout)
    expect(events.some((line) => line.event.fact.kind === "context_checkpoint_recorded")).toBe(false)
  })

  it("fails with exit 1 and the failure class when the provider refuses the summary request", async () => {
    const { root, workspace, db } = await withRun()
    const server = await ScriptedServer.start({ script: [Respond.json(400, Respond.openAiError("bad request body", { type: "invalid_request_error" }))] })
    servers.push(server)
    const result = await maka(
      ["compact", "--db", db, "--workspace", workspace, "--session", "s", "--base-url", `${server.url}/v1`, "--model", "test-model"],
      { cwd: root },
    )
    expect(result.stderr).toMatch(/^failed: model_provider: /m)
    expect(result.code).toBe(1)
  })

  it("shows a summary request the provider failed as interrupted, never as retried (a summary attempt runs once)", async () => {
    const { root, workspace, db } = await withRun()
    const server = await ScriptedServer.start({ script: [Respond.json(500, Respond.openAiError("server error", { type: "server_error" }))] })
    servers.push(server)
    const result = await maka(
      ["compact", "--db", db, "--workspace", workspace, "--session", "s", "--base-url", `${server.url}/v1`, "--model", "test-model"],
      { cwd: root },
    )
    expect(result.code).toBe(1)
    expect(server.requests()).toHaveLength(1)
    const timeline = await maka(["inspect", "--db", db, "--session", "s"], { cwd: root })
    expect(timeline.stdout).toMatch(/summary request interrupted: retryable_failure\n/)
    expect(timeline.stdout).not.toContain("(retried)")
  })

  it("needs --session (exit 2), and refuses an unknown session or a missing log with exit 1, opening no invocation and creating no log", async () => {
    const { root, workspace, db } = await withRun()
    const usage = await maka(["compact", "--db", db, "--workspace", workspace], { cwd: root })
    expect(usage.stderr).toContain("maka compact needs --session ID")
    expect(usage.code).toBe(2)
    const unknown = await maka(["compact", "--db", db, "--workspace", workspace, "--session", "nobody"], { cwd: root })
    expect(unknown.stderr).toContain("session nobody has no events")
    expect(unknown.code).toBe(1)
    const sessions = await maka(["sessions", "--db", db], { cwd: root })
    expect(sessions.stdout).not.toContain("nobody")
    // Refused before the workspace is opened: a folder compact was pointed at gets no marker.
    const other = path.join(root, "other")
    fs.mkdirSync(other)
    const elsewhere = await maka(["compact", "--db", db, "--workspace", other, "--session", "nobody"], { cwd: root })
    expect(elsewhere.code).toBe(1)
    expect(fs.readdirSync(other)).toEqual([])
    const missing = `${db}.absent`
    const absent = await maka(["compact", "--db", missing, "--workspace", workspace, "--session", "s"], { cwd: root })
    expect(absent.stderr).toContain(`no maka log at ${missing}`)
    expect(absent.code).toBe(1)
    expect(fs.existsSync(missing)).toBe(false)
  })
})

describe("automatic compaction in maka run on the offline model", () => {
  it("with --declared-window below the last request's input, the next run compacts before its turn", async () => {
    const { root, workspace, db } = fresh()
    const window = ["--declared-window", "700"]
    expect((await maka(["run", "--db", db, "--workspace", workspace, "--session", "s", ...window, "What is this?"], { cwd: root })).code).toBe(0)
    const next = await maka(["run", "--db", db, "--workspace", workspace, "--session", "s", ...window, "And the notes?"], { cwd: root })
    expect(next.code).toBe(0)
    const stored = await maka(["events", "--db", db, "--session", "s", "--json"], { cwd: root })
    const facts = eventLines(stored.stdout).map((line) => line.event.fact)
    const checkpoint = facts.find((fact) => fact.kind === "context_checkpoint_recorded")
    expect(checkpoint?.checkpoint.mode.kind).toBe("pre_turn")
    expect(next.stderr).toContain("compacting the context…")
    expect(next.stderr).toMatch(/^context compacted: history through #\d+ summarised \(pre_turn\)$/m)
    // The summary is not the answer: its text never reaches stdout.
    expect(next.stdout).toMatch(/^You asked: "And the notes\?"/)
    expect(next.stdout).not.toContain("## Goal")
    const requests = facts.filter((fact) => fact.kind === "model_requested" && fact.purpose === "main")
    expect(requests.at(-1)!.checkpointEventId).toEqual(expect.any(String))
    // Every step of the compacted turn is rebuilt over its checkpoint and matches its digest.
    for (const step of [4, 5, 6]) {
      const rebuilt = await maka(["inspect", "--db", db, "--session", "s", "--step", String(step)], { cwd: root })
      expect(rebuilt.stdout).toMatch(/^input digest: \S+ matches the rebuilt input \(tools read\)$/m)
    }
  })

  it("without --declared-window a short session is not compacted", async () => {
    const { root, workspace, db } = fresh()
    expect((await maka(["run", "--db", db, "--workspace", workspace, "--session", "s", "What is this?"], { cwd: root })).code).toBe(0)
    const next = await maka(["run", "--db", db, "--workspace", workspace, "--session", "s", "--json", "And the notes?"], { cwd: root })
    expect(next.code).toBe(0)
    expect(eventLines(next.stdout).some((line) => line.event.fact.kind === "model_requested" && line.event.fact.purpose === "summary")).toBe(false)
    expect(next.stderr).not.toContain("compacting")
  })
})
