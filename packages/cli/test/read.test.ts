import { execFileSync } from "node:child_process"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import BetterSqlite3 from "better-sqlite3"
import { afterEach, beforeAll, afterAll, describe, expect, it } from "vitest"
import type { Event } from "@maka/facts"
import type { EventLog } from "@maka/event-log"
import { inspectCommand, sourceLine, UNCHECKED_TOOLS } from "../src/internal/inspect.ts"
import { describeEvent, eventsCommand } from "../src/internal/read-commands.ts"
import { eventLines, folder, maka, when, type Folder } from "./support/cli.ts"

/** Every file of a folder with its digest, to prove a command changed nothing. */
/** Each file of `directory` by its content's digest, each link by its target, each FIFO as such. */
const snapshot = (directory: string): Readonly<Record<string, string>> =>
  Object.fromEntries(
    fs.readdirSync(directory).flatMap((name) => {
      const entry = path.join(directory, name)
      const stat = fs.lstatSync(entry)
      if (stat.isSymbolicLink()) return [[name, `link to ${fs.readlinkSync(entry)}`]]
      if (stat.isFIFO()) return [[name, "fifo"]]
      return stat.isFile() ? [[name, createHash("sha256").update(fs.readFileSync(entry)).digest("hex")]] : []
    }),
  )

describe("read-only commands over a log with a completed and a crashed run", () => {
  let shared: Folder
  beforeAll(async () => {
    shared = folder()
    const done = await maka(["run", "--db", shared.db, "--workspace", shared.workspace, "--session", "done", "What is this?"], { cwd: shared.root })
    expect(done.code).toBe(0)
    const crashed = await maka(["run", "--db", shared.db, "--workspace", shared.workspace, "--session", "crashed", "--json", "hi"], {
      cwd: shared.root,
      env: { MAKA_OFFLINE_DELAY_MS: "200" },
      onOutput: when((output) => output.stdout.includes('"kind":"part_delta"'), (child) => child.kill("SIGKILL")),
    })
    expect(crashed.signal).toBe("SIGKILL")
  }, 120_000)
  afterAll(() => shared.remove())

  it("maka sessions lists each session with its state, idle and unsealed", async () => {
    const result = await maka(["sessions", "--db", shared.db], { cwd: shared.root })
    expect(result.code).toBe(0)
    expect(result.stdout).toMatch(/^done {2}idle {2}1 invocation, \d+ events$/m)
    expect(result.stdout).toMatch(/^crashed {2}unsealed {2}1 invocation, \d+ events$/m)
    // With --json, one JSON line per session with the same fields, whatever its id holds.
    const json = await maka(["sessions", "--db", shared.db, "--json"], { cwd: shared.root })
    expect(json.code).toBe(0)
    const lines = json.stdout.trimEnd().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>)
    const events = (await maka(["events", "--db", shared.db, "--session", "done", "--json"], { cwd: shared.root })).stdout.trimEnd().split("\n").length
    expect(lines).toContainEqual({ sessionId: "done", state: "idle", invocations: 1, events })
    expect(lines.find((line) => line["sessionId"] === "crashed")).toMatchObject({ state: "unsealed", invocations: 1 })
    expect(lines.map((line) => Object.keys(line))).toEqual(lines.map(() => ["sessionId", "state", "invocations", "events"]))
  })

  it("maka events prints a session's events, one line each; an unknown session prints nothing and exits 0", async () => {
    const result = await maka(["events", "--db", shared.db, "--session", "done"], { cwd: shared.root })
    expect(result.code).toBe(0)
    expect(result.stdout.split("\n")[0]).toMatch(/^\s+1 {2}invocation_opened\s+"What is this\?"$/)
    expect(result.stdout).toMatch(/invocation_ended\s+completed$/m)
    const unknown = await maka(["events", "--db", shared.db, "--session", "nobody", "--json"], { cwd: shared.root })
    expect(unknown.code).toBe(0)
    expect(unknown.stdout).toBe("")
  })

  it.each(["events", "inspect"] as const)(
    "maka %s prints at the pace of stdout's reader, and stops once the reader went away",
    async (command) => {
      // A sink whose stdout is full after each line until released, as a pipe nobody reads is.
      const lines: Array<string> = []
      let release: (() => void) | undefined
      const outClosed = new AbortController()
      const sink = {
        out: (text: string) => void lines.push(text),
        err: () => undefined,
        outClosed: outClosed.signal,
        outDrained: () => new Promise<void>((resolve) => (release = resolve)),
      }
      const run = (command === "events" ? eventsCommand : inspectCommand)({
        args: ["--db", shared.db, "--session", "done"],
        environment: {},
        cwd: shared.root,
        sink,
      })
      for (let waited = 0; lines.length === 0 && waited < 10_000; waited += 10) await new Promise((resolve) => setTimeout(resolve, 10))
      await new Promise((resolve) => setTimeout(resolve, 100))
      // One line, then it waits for the reader.
      expect(lines).toHaveLength(command === "events" ? 1 : 2)
      release!()
      await new Promise((resolve) => setTimeout(resolve, 100))
      expect(lines).toHaveLength(command === "events" ? 2 : 3)
      // The reader goes away: nothing more is printed, and the command ends as it would.
      outClosed.abort()
      release!()
      expect(await run).toBe(0)
      expect(lines).toHaveLength(command === "events" ? 2 : 3)
    },
    30_000,
  )

  it("maka inspect shows the timeline: invocation, steps, tool calls with durations, terminal", async () => {
    const result = await maka(["inspect", "--db", shared.db, "--session", "done"], { cwd: shared.root })
    expect(result.code).toBe(0)
    expect(result.stdout).toMatch(/invocation \S+ opened: message "What is this\?"/)
    expect(result.stdout).toMatch(/step 1 requested/)
    expect(result.stdout).toMatch(/step 3 completed in \d+ ms: finish stop/)
    expect(result.stdout).toMatch(/tool list_files succeeded in \d+ ms/)
    expect(result.stdout).toMatch(/tool read_file succeeded in \d+ ms/)
    expect(result.stdout).toMatch(/ended: completed$/m)
  })

  it.each([1, 2, 3])("maka inspect --step %i rebuilds the exact model input and matches its recorded inputDigest", async (step) => {
    const result = await maka(["inspect", "--db", shared.db, "--session", "done", "--step", String(step)], { cwd: shared.root })
    expect(result.stderr).toBe("")
    expect(result.code).toBe(0)
    expect(result.stdout).toMatch(/^input digest: sha256:[0-9a-f]{64} matches the rebuilt input \(tools read\)$/m)
    expect(result.stdout).toMatch(/^source: the session through event \d+, no checkpoint, digest verified$/m)
    expect(result.stdout).toContain("[system]")
    expect(result.stdout).toContain("What is this?")
    if (step === 3) expect(result.stdout).toContain("# Lantern")
  })

  it("maka inspect --html writes a self-contained page: timeline, context size per step, each step's input and output", async () => {
    const page = path.join(shared.root, "page.html")
    const result = await maka(["inspect", "--db", shared.db, "--session", "done", "--html", page], { cwd: shared.root })
    expect(result.code).toBe(0)
    const html = fs.readFileSync(page, "utf8")
    expect(html).toMatch(/^<!doctype html>/)
    expect(html).toContain("<h2>Timeline</h2>")
    expect(html).toMatch(/<li>\s+\d+ [\d:.]+ invocation \S+ opened: message &quot;What is this\?&quot;<\/li>/)
    expect(html).toContain("<h2>Context size per step</h2>")
    expect(html.match(/<tr><td>step \d+<\/td>/g)).toHaveLength(3)
    expect(html.match(/<details id="step-\d+">/g)).toHaveLength(3)
    expect(html.match(/input digest matches/g)).toHaveLength(3)
    expect(html).toContain("# Lantern")
    expect(html).toContain("What is this?")
    // Each message of the inputs once: a step names what it shares with the step before it.
    expect(html.match(/What is this\?<\/pre>/g)).toHaveLength(1)
    expect(html.match(/# Lantern/g)).toHaveLength(1)
    expect(html.match(/<div class="role">/g)).toHaveLength(6)
    expect(html.match(/Messages 1–\d+: the same as messages 1–\d+ of <a href="#step-\d+">step \d+<\/a>\./g)).toEqual([
      'Messages 1–2: the same as messages 1–2 of <a href="#step-1">step 1</a>.',
      'Messages 1–4: the same as messages 1–4 of <a href="#step-2">step 2</a>.',
    ])
    // Self-contained: nothing to fetch, no script; the only links are to the page's own steps.
    expect(html).not.toMatch(/<script|<link|<img|<iframe|\ssrc=|\shref="(?!#step-\d+")|url\(/i)
  })

  it("maka inspect --html - writes the same page to stdout, and is refused with --step", async () => {
    const page = path.join(shared.root, "page-for-stdout.html")
    expect((await maka(["inspect", "--db", shared.db, "--session", "done", "--html", page], { cwd: shared.root })).code).toBe(0)
    const result = await maka(["inspect", "--db", shared.db, "--session", "done", "--html", "-"], { cwd: shared.root })
    expect(result.code).toBe(0)
    expect(result.stdout).toBe(fs.readFileSync(page, "utf8"))
    expect(fs.existsSync(path.join(shared.root, "-"))).toBe(false)
    const refused = await maka(["inspect", "--db", shared.db, "--session", "done", "--html", "-", "--step", "1"], { cwd: shared.root })
    expect(refused.code).toBe(2)
    expect(refused.stdout).toBe("")
    expect(refused.stderr).toContain("--html - writes the page to stdout")
  })

  it("maka inspect --html shows a control, a bidirectional override or markup in what it prints as escapes, never raw", async () => {
    const hostile = folder()
    try {
      fs.writeFileSync(path.join(hostile.workspace, "README.md"), "# Notes\n\nbell\u0007 title\u001b]0;x\u0007 evil\u202egnp.exe </pre><script>alert(1)</script>\n")
      expect((await maka(["run", "--db", hostile.db, "--workspace", hostile.workspace, "--session", "h", "Read it."], { cwd: hostile.root })).code).toBe(0)
      const page = path.join(hostile.root, "page.html")
      expect((await maka(["inspect", "--db", hostile.db, "--session", "h", "--html", page], { cwd: hostile.root })).code).toBe(0)
      const html = fs.readFileSync(page, "utf8")
      expect(html).toContain("bell\\u0007 title\\u001b]0;x\\u0007 evil\\u202egnp.exe &lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;")
      expect(html).not.toMatch(/[\u0000-\u0008\u001b\u202e]|<script/)
    } finally {
      hostile.remove()
    }
  })

  it("maka inspect never rebuilds a step from changed rows: --step is exit 1, the page marks that step only", async () => {
    const copy = path.join(shared.root, "changed.db")
    expect((await maka(["backup", shared.db, copy], { cwd: shared.root })).code).toBe(0)
    // Another connection changes one row between step 2's source and step 3's: the row still decodes.
    const connection = new BetterSqlite3(copy)
    const highWaters = (
      connection
        .prepare("SELECT event_json FROM event_log WHERE session_id = 'done' AND kind = 'model_requested' ORDER BY sequence")
        .all() as ReadonlyArray<{ event_json: string }>
    ).map((row) => (JSON.parse(row.event_json) as { fact: { sourceHighWater: number } }).fact.sourceHighWater)
    expect(highWaters).toHaveLength(3)
    const changed = connection
      .prepare("UPDATE event_log SET event_json = replace(event_json, '\"recordedAt\":1', '\"recordedAt\":2') WHERE sequence = ?")
      .run(highWaters[2])
    connection.close()
    expect(changed.changes).toBe(1)
    const step = (n: number) => maka(["inspect", "--db", copy, "--session", "done", "--step", String(n)], { cwd: shared.root })
    const refused = await step(3)
    expect(refused.code).toBe(1)
    expect(refused.stdout).toBe("")
    expect(refused.stderr).toBe(
      `maka: the source of step 3 cannot be re-read from the log: store error: rejected: the frozen source changed: its rows through ${highWaters[2]} no longer give the digest it recorded\n`,
    )
    expect((await step(2)).stdout).toMatch(/^input digest: sha256:[0-9a-f]{64} matches the rebuilt input/m)
    const page = path.join(shared.root, "changed.html")
    expect((await maka(["inspect", "--db", copy, "--session", "done", "--html", page], { cwd: shared.root })).code).toBe(0)
    const html = fs.readFileSync(page, "utf8")
    expect(html.match(/input digest matches/g)).toHaveLength(2)
    expect(html).toContain('<details id="step-3"><summary>Step 3 — source not readable</summary>')
    expect(html).toContain("the source of this step cannot be re-read from the log: store error: rejected: the frozen source changed")
  })

  it("maka inspect checks a step's input against its recorded digest: one that differs is exit 1 and marked on the page", async () => {
    const copy = path.join(shared.root, "other-digest.db")
    expect((await maka(["backup", shared.db, copy], { cwd: shared.root })).code).toBe(0)
    // Another connection rewrites step 3's recorded input digest: its own source (the rows below it)
    // is untouched, so the step is rebuilt, and its input no longer gives the digest.
    const connection = new BetterSqlite3(copy)
    const requests = connection
      .prepare("SELECT sequence, event_json FROM event_log WHERE session_id = 'done' AND kind = 'model_requested' ORDER BY sequence")
      .all() as ReadonlyArray<{ sequence: number; event_json: string }>
    expect(requests).toHaveLength(3)
    const recorded = (JSON.parse(requests[2]!.event_json) as { fact: { inputDigest: string } }).fact.inputDigest
    const other = `sha256:${"0".repeat(64)}`
    expect(connection.prepare("UPDATE event_log SET event_json = replace(event_json, ?, ?) WHERE sequence = ?").run(recorded, other, requests[2]!.sequence).changes).toBe(1)
    connection.close()
    const step = (n: number) => maka(["inspect", "--db", copy, "--session", "done", "--step", String(n)], { cwd: shared.root })
    const differs = await step(3)
    expect(differs.code).toBe(1)
    expect(differs.stdout).toMatch(/^messages \(6\):$/m)
    expect(differs.stderr).toBe(
      `input digest: recorded ${other}, rebuilt ${recorded}: the rebuilt input differs\n${UNCHECKED_TOOLS}\n`,
    )
    expect((await step(2)).code).toBe(0)
    const page = path.join(shared.root, "other-digest.html")
    expect((await maka(["inspect", "--db", copy, "--session", "done", "--html", page], { cwd: shared.root })).code).toBe(0)
    const html = fs.readFileSync(page, "utf8")
    expect(html.match(/input digest matches/g)).toHaveLength(2)
    expect(html).toContain(`input digest differs: recorded ${other}, rebuilt ${recorded}`)
  })

  it("maka inspect --html overwrites only a page it wrote: never the log or another file (exit 2, nothing changed)", async () => {
    const page = path.join(shared.root, "again.html")
    const args = ["inspect", "--db", shared.db, "--session", "done", "--html"]
    expect((await maka([...args, page], { cwd: shared.root })).code).toBe(0)
    // A page written before is written again.
    fs.appendFileSync(page, "<!-- edited -->")
    const again = await maka([...args, page], { cwd: shared.root })
    expect(again.code, again.stderr).toBe(0)
    expect(fs.readFileSync(page, "utf8")).not.toContain("<!-- edited -->")
    const notes = path.join(shared.root, "notes.md")
    fs.writeFileSync(notes, "# my notes\n")
    // A FIFO is refused without being opened (an open would wait for a writer, signals unheard), and
    // a link is not a page, even one to a page or to nothing.
    const fifo = path.join(shared.root, "pipe.html")
    execFileSync("mkfifo", [fifo])
    const linked = path.join(shared.root, "linked.html")
    fs.symlinkSync(page, linked)
    const dangling = path.join(shared.root, "dangling.html")
    fs.symlinkSync(path.join(shared.root, "nowhere.html"), dangling)
    const before = snapshot(shared.root)
    for (const target of [shared.db, notes, shared.workspace, fifo, linked, dangling]) {
      const refused = await maka([...args, target], { cwd: shared.root })
      expect(refused.code, target).toBe(2)
      expect(refused.stderr).toBe(`maka: ${target} exists and is not a page maka inspect wrote; choose a new FILE for --html\n`)
    }
    expect(snapshot(shared.root)).toEqual(before)
    for (const made of [page, notes, fifo, linked, dangling]) fs.rmSync(made)
  })

  it("maka inspect --html with a --step beyond the session's steps writes no page (exit 2)", async () => {
    const page = path.join(shared.root, "never.html")
    const result = await maka(["inspect", "--db", shared.db, "--session", "done", "--html", page, "--step", "4"], { cwd: shared.root })
    expect(result.code).toBe(2)
    expect(fs.existsSync(page)).toBe(false)
  })

  it("maka inspect --html writes a FILE whose name is as long as a name can be, and leaves nothing else", async () => {
    const folder = path.join(shared.root, "long")
    fs.mkdirSync(folder)
    const page = path.join(folder, `${"p".repeat(250)}.html`)
    const result = await maka(["inspect", "--db", shared.db, "--session", "done", "--html", page], { cwd: shared.root })
    expect(result.stderr).toBe(`wrote ${page}\n`)
    expect(result.code).toBe(0)
    expect(fs.readdirSync(folder)).toEqual([path.basename(page)])
    fs.rmSync(folder, { recursive: true })
  })

  it("maka inspect --html into a folder that does not exist is exit 1", async () => {
    const page = path.join(shared.root, "no/such/page.html")
    const result = await maka(["inspect", "--db", shared.db, "--session", "done", "--html", page], { cwd: shared.root })
    expect(result.code).toBe(1)
    // The page the user named, not the temporary file beside it that failed first.
    expect(result.stderr).toBe(`maka: cannot write ${page}: no such file or directory\n`)
  })

  it("maka inspect --step beyond the session's steps is exit 2", async () => {
    const result = await maka(["inspect", "--db", shared.db, "--session", "done", "--step", "4"], { cwd: shared.root })
    expect(result.code).toBe(2)
    expect(result.stderr).toContain("session done has 3 steps; --step must be in 1..3")
    const db = path.join(shared.root, "one-step.sqlite")
    const single = ["--db", db, "--session", "one"]
    // One step, then the step limit: a session with a single request.
    expect((await maka(["run", ...single, "--workspace", shared.workspace, "--max-steps", "1", "hi"], { cwd: shared.root })).code).toBe(1)
    const one = await maka(["inspect", ...single, "--step", "2"], { cwd: shared.root })
    expect(one.code).toBe(2)
    expect(one.stderr).toContain("session one has 1 step; --step must be in 1..1")
  })

  it("maka inspect of a session without events is exit 1", async () => {
    const result = await maka(["inspect", "--db", shared.db, "--session", "nobody"], { cwd: shared.root })
    expect(result.code).toBe(1)
  })

  it("events and inspect need --session (exit 2)", async () => {
    expect((await maka(["events", "--db", shared.db], { cwd: shared.root })).code).toBe(2)
    expect((await maka(["inspect", "--db", shared.db], { cwd: shared.root })).code).toBe(2)
  })

  it("read-only commands change no byte of the log, even with a crashed run in it", async () => {
    const before = snapshot(shared.root)
    for (const args of [
      ["sessions"],
      ["events", "--session", "crashed", "--json"],
      ["inspect", "--session", "crashed"],
      ["inspect", "--session", "done", "--step", "1"],
    ]) {
      expect((await maka([...args, "--db", shared.db], { cwd: shared.root })).code).toBe(0)
    }
    expect(snapshot(shared.root)).toEqual(before)
  })
})

describe("maka recover", () => {
  const folders: Array<Folder> = []
  afterEach(() => {
    for (const created of folders.splice(0)) created.remove()
  })

  it("prints one line per sealed invocation and the count; a second pass seals nothing", async () => {
    const created = folder()
    folders.push(created)
    const crashed = await maka(["run", "--db", created.db, "--workspace", created.workspace, "--session", "c", "--json", "hi"], {
      cwd: created.root,
      env: { MAKA_OFFLINE_DELAY_MS: "200" },
      onOutput: when((output) => output.stdout.includes('"kind":"part_delta"'), (child) => child.kill("SIGKILL")),
    })
    expect(crashed.signal).toBe("SIGKILL")
    const invocation = eventLines(crashed.stdout.split("\n").slice(0, 1).join("\n"))[0]!.event.invocation.invocationId
    const first = await maka(["recover", "--db", created.db], { cwd: created.root })
    expect(first.code).toBe(0)
    expect(first.stdout).toBe(`c ${invocation} host_interrupted\nrecovered 1 invocation\n`)
    const second = await maka(["recover", "--db", created.db], { cwd: created.root })
    expect(second.stdout).toBe("recovered 0 invocations\n")
    const events = eventLines((await maka(["events", "--db", created.db, "--session", "c", "--json"], { cwd: created.root })).stdout)
    expect(events.at(-1)!.event.fact).toEqual({ kind: "invocation_ended", outcome: { kind: "failed", class: "host_interrupted" } })
    const sessions = await maka(["sessions", "--db", created.db], { cwd: created.root })
    expect(sessions.stdout).toMatch(/^c {2}idle /m)
  })

  it("a run on SQLite recovers what a crashed host left before it starts", async () => {
    const created = folder()
    folders.push(created)
    await maka(["run", "--db", created.db, "--workspace", created.workspace, "--session", "c", "--json", "hi"], {
      cwd: created.root,
      env: { MAKA_OFFLINE_DELAY_MS: "200" },
      onOutput: when((output) => output.stdout.includes('"kind":"part_delta"'), (child) => child.kill("SIGKILL")),
    })
    const next = await maka(["run", "--db", created.db, "--workspace", created.workspace, "--session", "c", "again"], { cwd: created.root })
    expect(next.code).toBe(0)
    const events = await maka(["events", "--db", created.db, "--session", "c"], { cwd: created.root })
    expect(events.stdout).toMatch(/invocation_ended\s+failed host_interrupted/)
    expect(events.stdout).toMatch(/invocation_ended\s+completed$/m)
  })
})

describe("a missing or foreign log", () => {
  const folders: Array<Folder> = []
  afterEach(() => {
    for (const created of folders.splice(0)) created.remove()
  })

  it.each([["events", "--session", "s"], ["inspect", "--session", "s"], ["sessions"]])(
    "maka %s on a missing file is exit 1 and creates nothing",
    async (...args) => {
      const created = folder()
      folders.push(created)
      const result = await maka([...args, "--db", created.db], { cwd: created.root })
      expect(result.code).toBe(1)
      expect(result.stderr).toContain("no maka log")
      expect(fs.readdirSync(created.root).sort()).toEqual(["workspace"])
    },
  )

  it.each([["events", "--session", "s"], ["sessions"], ["recover"], ["run", "hi"]])(
    "maka %s on a file that is not a maka log is exit 1 and leaves it untouched",
    async (...args) => {
      const created = folder()
      folders.push(created)
      fs.writeFileSync(created.db, "this is not a database, just some text that is long enough to look like a file\n".repeat(20))
      const before = snapshot(created.root)
      const result = await maka([...args, "--db", created.db, ...(args[0] === "run" ? ["--workspace", created.workspace] : [])], {
        cwd: created.root,
      })
      expect(result.code).toBe(1)
      expect(result.stderr.trim().split("\n")).toHaveLength(1)
      expect(snapshot(created.root)[path.basename(created.db)]).toBe(before[path.basename(created.db)])
    },
  )
})

describe("maka events' line of each kind", () => {
  const line = (fact: unknown, sequence = 7) =>
    describeEvent({
      sequence,
      event: { id: "e", recordedAt: 0, invocation: { sessionId: "s", turnId: "t", runId: "r", invocationId: "i" }, fact },
    } as unknown as Event.StoredEvent)

  it("shows a steering message's text, an archive's result and a checkpoint's cut", () => {
    const steered = { kind: "message_steered", message: { messageId: "m", content: { text: "mind the tests" }, submittedContentDigest: "d" } }
    expect(line(steered)).toBe(`    7  ${"message_steered".padEnd(27)} "mind the tests"`)
    const archived = { kind: "tool_result_archived", placeholder: { identity: { runtimeEventId: "evt-1", toolName: "read_file" } } }
    expect(line(archived)).toBe(`    7  ${"tool_result_archived".padEnd(27)} read_file result of event evt-1`)
    const checkpoint = { kind: "context_checkpoint_recorded", checkpoint: { mode: { kind: "pre_turn" }, coveredThrough: 41 } }
    expect(line(checkpoint)).toBe(`    7  ${"context_checkpoint_recorded".padEnd(27)} pre_turn through #41`)
  })
})

describe("maka inspect --step's source line", () => {
  const source = (overrides: Partial<EventLog.ModelContextSource>): EventLog.ModelContextSource =>
    ({
      sourceEvidence: { scope: { kind: "session", id: "s" }, highWater: 15, digest: "sha256:x" },
      tail: [],
      effectiveSourceDigest: "sha256:x",
      latestMain: { kind: "no_completed_request" },
      unknownOperations: [],
      ...overrides,
    }) as EventLog.ModelContextSource

  it("names the selection, the event it reads through, its checkpoint and its archived results", () => {
    expect(sourceLine(source({}))).toBe("the session through event 15, no checkpoint, digest verified")
    const archived = { kind: "archived" } as unknown as EventLog.TailItem
    const canonical = { kind: "canonical" } as unknown as EventLog.TailItem
    expect(
      sourceLine(
        source({
          sourceEvidence: { scope: { kind: "lineage", sessionId: "s", runId: "run-2" }, highWater: 40, digest: "sha256:x" },
          baseline: { eventId: "c", sequence: 31, checkpoint: {} as EventLog.Baseline["checkpoint"] },
          tail: [archived, canonical, archived],
        }),
      ),
    ).toBe("the lineage of run run-2 through event 40, checkpoint at event 31, 2 archived results, digest verified")
    expect(sourceLine(source({ tail: [archived] }))).toBe("the session through event 15, no checkpoint, 1 archived result, digest verified")
  })
})

describe("a log written by an earlier version of maka", () => {
  // Made by the CLI of 2026-12-01 (`maka run --session old "What is here?"`, offline model, read
  // tools), before runs were offered read_tool_result: its requests' digests name tools without it.
  const fixture = path.join(path.dirname(new URL(import.meta.url).pathname), "fixtures/log-2026-12-01.sqlite")
  let created: Folder | undefined
  afterAll(() => created?.remove())

  it("maka inspect --step verifies each of its steps, and a new turn runs on it", async () => {
    created = folder()
    const db = path.join(created.root, "old.sqlite")
    fs.copyFileSync(fixture, db)
    for (const step of [1, 2, 3]) {
      const result = await maka(["inspect", "--db", db, "--session", "old", "--step", String(step)], { cwd: created.root })
      expect(result.stderr, `step ${step}`).toBe("")
      expect(result.code, `step ${step}`).toBe(0)
      expect(result.stdout).toMatch(
        /^input digest: sha256:[0-9a-f]{64} matches the rebuilt input \(tools read, without read_tool_result, as earlier versions of maka offered them\)$/m,
      )
    }
    const next = await maka(["run", "--db", db, "--workspace", created.workspace, "--session", "old", "And now?"], { cwd: created.root })
    expect(next.code, next.stderr).toBe(0)
    // The new turn's steps were offered read_tool_result, and are verified with it.
    const fourth = await maka(["inspect", "--db", db, "--session", "old", "--step", "4"], { cwd: created.root })
    expect(fourth.stdout).toMatch(/^input digest: sha256:[0-9a-f]{64} matches the rebuilt input \(tools read\)$/m)
  }, 60_000)
})
