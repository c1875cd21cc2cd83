import * as fs from "node:fs"
import * as path from "node:path"
import { EventLog } from "@maka/event-log"
import { FactBuilders, History } from "@maka/testkit"
import { Effect } from "effect"
import { afterEach, describe, expect, it } from "vitest"
import { eventLines, folder, maka, type Folder, type Result } from "./support/cli.ts"

describe("maka backup", () => {
  let current: Folder | undefined
  afterEach(() => current?.remove())

  it("copies a live log while a run holds the writer lease: the copy shows every event committed before the backup", async () => {
    const { root, workspace, db } = (current = folder())
    const copy = path.join(root, "copy.sqlite")
    let backup: Promise<{ readonly result: Result; readonly seenBefore: number }> | undefined
    const run = await maka(["run", "--db", db, "--workspace", workspace, "--session", "live", "--json", "What is this?"], {
      cwd: root,
      env: { MAKA_OFFLINE_DELAY_MS: "300" },
      onOutput: (_child, output) => {
        if (backup !== undefined || !output.stdout.includes('"kind":"model_requested"')) return
        // Every line printed so far is a committed event; the backup starts after all of them.
        const seenBefore = eventLines(output.stdout.slice(0, output.stdout.lastIndexOf("\n") + 1)).length
        backup = maka(["backup", db, copy], { cwd: root }).then((result) => ({ result, seenBefore }))
      },
    })
    expect(run.code).toBe(0)
    expect(backup).toBeDefined()
    const { result, seenBefore } = await backup!
    expect(result.stderr).toBe("")
    expect(result.code).toBe(0)
    const original = eventLines(run.stdout)
    const copied = eventLines((await maka(["events", "--db", copy, "--session", "live", "--json"], { cwd: root })).stdout)
    expect(seenBefore).toBeGreaterThan(0)
    expect(copied.length).toBeGreaterThanOrEqual(seenBefore)
    // A complete prefix of the live run: the same events in the same order, none missing.
    expect(copied).toEqual(original.slice(0, copied.length))
    // The run went on writing after the backup, so the copy was taken from a live log.
    expect(copied.length).toBeLessThan(original.length)
    expect(copied.map((line) => line.event.fact.kind)).not.toContain("invocation_ended")
  }, 120_000)

  it("refuses an existing destination with exit 1 and leaves it untouched", async () => {
    const { root, workspace, db } = (current = folder())
    expect((await maka(["run", "--db", db, "--workspace", workspace, "hi"], { cwd: root })).code).toBe(0)
    const existing = path.join(root, "existing.sqlite")
    fs.writeFileSync(existing, "keep me\n")
    const result = await maka(["backup", db, existing], { cwd: root })
    expect(result.code).toBe(1)
    expect(result.stderr).toMatch(/already exists/)
    expect(fs.readFileSync(existing, "utf8")).toBe("keep me\n")
  }, 60_000)

  it("refuses a file that is not a maka log with exit 1 and writes no copy", async () => {
    const { root } = (current = folder())
    const notALog = path.join(root, "notes.sqlite")
    fs.writeFileSync(notALog, "not a database\n")
    const copy = path.join(root, "copy.sqlite")
    const result = await maka(["backup", notALog, copy], { cwd: root })
    expect(result.code).toBe(1)
    expect(result.stderr).not.toBe("")
    expect(fs.existsSync(copy)).toBe(false)
    const missing = await maka(["backup", path.join(root, "missing.sqlite"), copy], { cwd: root })
    expect(missing.code).toBe(1)
    // `backup` takes the log as DB, not as --db (which it refuses).
    expect(missing.stderr).toBe(`maka: no maka log at ${path.join(root, "missing.sqlite")}; DB must be an existing log\n`)
    expect(fs.existsSync(copy)).toBe(false)
  })

  it("stops at a signal mid-copy with exit 130, leaving nothing at FILE and no temporary file", async () => {
    const { root, db } = (current = folder())
    // About 60 MB of answers: a copy that takes long enough to be stopped half-way.
    const large = "x".repeat(1000 * 1000)
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const log = yield* Effect.service(EventLog.EventLog)
          for (let index = 0; index < 60; index++) {
            const history = new History.History({ sessionId: `big${index}`, firstId: index * 100 + 1 })
            const run = history.open({ message: "hi", turnId: `turn-${index}`, runId: `run-${index}`, invocationId: `invocation-${index}` })
            run.complete(run.request(), FactBuilders.textStep(large))
            run.end({ kind: "completed" })
            yield* log.appendBatch(history.writes)
          }
        }).pipe(Effect.provide(EventLog.layerSqlite({ path: db, synchronous: "NORMAL" }))),
      ),
    )
    const target = path.join(root, "backups")
    fs.mkdirSync(target)
    let signalled = false
    let watcher: ReturnType<typeof setInterval> | undefined
    const result = await maka(["backup", db, path.join(target, "copy.sqlite")], {
      cwd: root,
      // Signalled once the copy is under way: its temporary file is there.
      onSpawn: (child) => {
        watcher = setInterval(() => {
          if (signalled || !fs.readdirSync(target).some((name) => name.startsWith(".maka-backup-"))) return
          signalled = true
          child.kill("SIGINT")
        }, 2)
      },
    })
    clearInterval(watcher)
    expect(signalled).toBe(true)
    expect(result.code, result.stderr).toBe(130)
    expect(result.stderr).toBe(`maka: backup stopped by a signal; nothing was written at ${path.join(target, "copy.sqlite")}\n`)
    expect(fs.readdirSync(target)).toEqual([])
  }, 120_000)

  it("refuses a database URL as DB without repeating it", async () => {
    const { root } = (current = folder())
    const result = await maka(["backup", "postgres://maka:s3cret@127.0.0.1:5432/logs", path.join(root, "copy.sqlite")], { cwd: root })
    expect(result.code).toBe(2)
    expect(result.stderr).toContain("pg_dump")
    expect(result.stderr).not.toContain("s3cret")
    expect(fs.readdirSync(root).sort()).toEqual(["workspace"])
  })

  it.each([[[]], [["only-one"]], [["a", "b", "c"]], [["--db", "x", "a", "b"]]])("exits 2 on usage errors: %j", async (args) => {
    const { root } = (current = folder())
    const result = await maka(["backup", ...args], { cwd: root })
    expect(result.code).toBe(2)
    expect(result.stderr).toMatch(/^maka: /)
    expect(fs.readdirSync(root).sort()).toEqual(["workspace"])
  })
})

describe("maka recover on a missing file", () => {
  let current: Folder | undefined
  afterEach(() => current?.remove())

  it("refuses a missing --db path with exit 1 and creates nothing", async () => {
    const { root, db } = (current = folder())
    const result = await maka(["recover", "--db", db], { cwd: root })
    expect(result.code).toBe(1)
    expect(result.stderr).toMatch(/no maka log at/)
    expect(fs.existsSync(db)).toBe(false)
  })

  it("creates the default log when it is missing", async () => {
    const { root } = (current = folder())
    const result = await maka(["recover"], { cwd: root })
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("recovered 0 invocations\n")
    expect(fs.existsSync(path.join(root, ".maka/events.sqlite"))).toBe(true)
  })
})

/** One completed run of two model steps in session `sessionId`, with ids unique to `index`. */
const sessionOf = (sessionId: string, index: number): History.History => {
  const history = new History.History({ sessionId, firstId: index * 100 + 1 })
  const run = history.open({ message: "hi", turnId: `turn-${index}`, runId: `run-${index}`, invocationId: `invocation-${index}` })
  run.complete(run.request(), FactBuilders.textStep("hello"))
  run.end({ kind: "completed" })
  return history
}

describe("maka sessions and maka events on a big log", () => {
  let current: Folder | undefined
  afterEach(() => current?.remove())

  it("lists every session of a log over the default history limit of 10,000 events", async () => {
    const { root, db } = (current = folder())
    const sessions = 2600
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const log = yield* Effect.service(EventLog.EventLog)
          const writes = Array.from({ length: sessions }, (_, index) => sessionOf(`s${index}`, index).writes).flat()
          expect(writes.length).toBeGreaterThan(10_000)
          yield* log.appendBatch(writes)
        }).pipe(Effect.provide(EventLog.layerSqlite({ path: db }))),
      ),
    )
    const result = await maka(["sessions", "--db", db], { cwd: root })
    expect(result.stderr).toBe("")
    expect(result.code).toBe(0)
    const lines = result.stdout.split("\n").filter((line) => line !== "")
    expect(lines.length).toBe(sessions)
    expect(lines).toContain(`s${sessions - 1}  idle  1 invocation, ${sessionOf("x", 0).writes.length} events`)
  }, 120_000)

  it("lists every event of a session longer than a page, in order, as text, as JSON and as a timeline", async () => {
    const { root, db } = (current = folder())
    const history = new History.History({ sessionId: "long" })
    const run = history.open()
    while (history.writes.length < 2_600) run.steer(`m${history.writes.length}`, "more")
    run.end({ kind: "completed" })
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const log = yield* Effect.service(EventLog.EventLog)
          yield* log.appendBatch(history.writes)
        }).pipe(Effect.provide(EventLog.layerSqlite({ path: db }))),
      ),
    )
    const text = await maka(["events", "--db", db, "--session", "long"], { cwd: root })
    expect(text.stderr).toBe("")
    expect(text.code).toBe(0)
    const sequences = text.stdout
      .split("\n")
      .filter((line) => line !== "")
      .map((line) => Number(line.trim().split(/\s+/)[0]))
    expect(sequences).toEqual(history.events.map((stored) => stored.sequence))
    const json = await maka(["events", "--db", db, "--session", "long", "--json"], { cwd: root })
    expect(json.code).toBe(0)
    expect(eventLines(json.stdout).map((line) => line.sequence)).toEqual(history.events.map((stored) => stored.sequence))
    // The timeline of `maka inspect` reads the same pages: every steering message, once, in order.
    const inspected = await maka(["inspect", "--db", db, "--session", "long"], { cwd: root })
    expect(inspected.code).toBe(0)
    const lines = inspected.stdout.split("\n").filter((line) => line !== "")
    expect(lines[0]).toBe(`session long: ${history.events.length} events`)
    const steered = history.events.filter((stored) => stored.event.fact.kind === "message_steered").map((stored) => stored.sequence)
    expect(steered.length).toBeGreaterThan(2_000)
    expect(lines.filter((line) => line.includes(" steered: ")).map((line) => Number(line.trim().split(" ")[0]))).toEqual(steered)
    expect(lines.at(-1)).toMatch(/ended: completed$/)
  }, 120_000)
})
