import { FactBuilders, History } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Effect, Fiber } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import * as Testing from "../src/testing.ts"
import { dialects } from "./support/dialects.ts"
import { appendAll, failure, withLog } from "./support/harness.ts"
import { childScript, spawnChild, temporaryDirectory } from "./fixtures/storage.ts"

/** A finished run of its own session: opening, a request, its completion and the terminal. */
const session = (index: number) => {
  const history = new History.History({ sessionId: `session-${index}`, firstId: 1 + index * 100 })
  const run = history.open({ invocationId: `invocation-${index}`, runId: `run-${index}`, turnId: `turn-${index}` })
  run.complete(run.request(), FactBuilders.textStep(`answer ${index}`))
  run.end()
  return history
}

describe("EventLog.backup", () => {
  it("copies a live log while writes go on: the copy is a valid log holding every event committed before it finished", () =>
    Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          for (let index = 0; index < 20; index++) yield* appendAll(log, session(index).writes)
          const destination = path.join(temporaryDirectory(), "backup.sqlite")
          const writer = yield* Effect.forkChild(
            Effect.forEach(Array.from({ length: 40 }, (_, index) => index + 20), (index) => appendAll(log, session(index).writes), { discard: true }),
          )
          yield* log.backup(destination)
          const committedBeforeEnd = yield* log.prefix({ kind: "root" }, 100_000, 1 << 30)
          yield* Fiber.join(writer)
          const source = yield* log.prefix({ kind: "root" }, 100_000, 1 << 30)
          const copy = yield* Effect.scoped(
            Effect.flatMap(EventLog.fromDatabase(() => openSqlite(destination)), (backup) =>
              Effect.gen(function* () {
                const prefix = yield* backup.prefix({ kind: "root" }, 100_000, 1 << 30)
                // The copy is a working log: it admits the next run of a new session.
                yield* appendAll(backup, session(99).writes)
                return prefix
              }),
            ),
          )
          expect(copy.highWater).toBeGreaterThanOrEqual(committedBeforeEnd.highWater)
          expect(copy.events.length).toBeGreaterThanOrEqual(20 * 4)
          // Every event of the copy is the source's event at the same sequence, with nothing missing before it.
          expect(copy.events).toEqual(source.events.slice(0, copy.events.length))
          expect(copy.events.map((stored) => stored.sequence)).toEqual(copy.events.map((_, index) => index + 1))
        }),
      ),
    ))

  it("writes a copy whose name is as long as a name can be, and leaves nothing else", () =>
    Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          yield* appendAll(log, session(1).writes)
          const folder = temporaryDirectory()
          const destination = path.join(folder, `${"b".repeat(248)}.sqlite`)
          yield* log.backup(destination)
          expect(fs.readdirSync(folder)).toEqual([path.basename(destination)])
        }),
      ),
    ))

  it("finishes while another process commits without pause, and leaves only the copy", async () => {
    const directory = temporaryDirectory()
    const file = path.join(directory, "events.sqlite")
    // About 12 MB: some thousands of pages, so a commit by the other process lands inside the copy.
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const log = yield* EventLog.fromDatabase(() => openSqlite(file, { synchronous: "NORMAL" }))
          for (let index = 0; index < 2_000; index++) {
            const history = new History.History({ sessionId: `session-${index}`, firstId: 1 + index * 100 })
            const run = history.open({ invocationId: `invocation-${index}`, runId: `run-${index}`, turnId: `turn-${index}` })
            run.complete(run.request(), FactBuilders.textStep(`answer ${index} ${"x".repeat(4_000)}`))
            run.end()
            yield* appendAll(log, history.writes)
          }
        }),
      ),
    )
    const writer = spawnChild(childScript("append-loop.ts"), [file, "10000"])
    try {
      await writer.line("appending")
      const destination = path.join(temporaryDirectory(), "backup.sqlite")
      const reader = await openSqlite(file, { readOnly: true })
      try {
        await reader.backup(destination)
      } finally {
        await reader.close()
      }
      expect(fs.readdirSync(path.dirname(destination))).toEqual(["backup.sqlite"])
      const copy = await openSqlite(destination, { readOnly: true })
      try {
        const prefix = await Effect.runPromise(
          Effect.scoped(Effect.flatMap(EventLog.fromDatabase(() => Promise.resolve(copy)), (log) => log.prefix({ kind: "root" }, 100_000, 1 << 30))),
        )
        expect(prefix.events.length).toBeGreaterThanOrEqual(2_000 * 4)
      } finally {
        await copy.close()
      }
    } finally {
      writer.process.kill("SIGKILL")
      await writer.exited
    }
  }, 120_000)

  it("copies a live log from another connection with VACUUM INTO, as the README says", () =>
    Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log, file } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          for (let index = 0; index < 5; index++) yield* appendAll(log, session(index).writes)
          const destination = path.join(temporaryDirectory(), "vacuumed.sqlite")
          const reader = new BetterSqlite3(file, { readonly: true })
          reader.prepare("VACUUM INTO ?").run(destination)
          reader.close()
          const source = yield* log.prefix({ kind: "root" })
          const copy = yield* Effect.scoped(
            Effect.flatMap(EventLog.fromDatabase(() => openSqlite(destination, { readOnly: true })), (backup) => backup.prefix({ kind: "root" })),
          )
          expect(copy.digest).toBe(source.digest)
        }),
      ),
    ))

  it("never overwrites an existing file", () =>
    Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          const destination = path.join(temporaryDirectory(), "taken.sqlite")
          fs.writeFileSync(destination, "mine")
          const error = yield* failure(log.backup(destination))
          expect(error.reason._tag).toBe("Io")
          expect(fs.readFileSync(destination, "utf8")).toBe("mine")
          // Nor one the destination names with whitespace after it, which the driver would drop.
          for (const named of [`${destination} `, `${destination}\n`]) {
            const trailing = yield* failure(log.backup(named))
            expect(trailing.reason._tag).toBe("Io")
            expect(trailing.message).toContain("ends in whitespace")
          }
          expect(fs.readFileSync(destination, "utf8")).toBe("mine")
          expect(fs.readdirSync(path.dirname(destination))).toEqual(["taken.sqlite"])
        }),
      ),
    ))

  it("never writes a copy beside a -wal, -journal or -shm left by a database once at its name", () =>
    Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          yield* appendAll(log, session(1).writes)
          const directory = temporaryDirectory()
          const destination = path.join(directory, "backup.sqlite")
          for (const suffix of ["-wal", "-journal", "-shm"]) {
            fs.writeFileSync(`${destination}${suffix}`, "left behind")
            const error = yield* failure(log.backup(destination))
            expect(error.reason._tag, suffix).toBe("Io")
            expect(error.message).toContain(`${destination}${suffix} exists, the ${suffix} file of a database once at ${destination}`)
            expect(fs.readdirSync(directory), suffix).toEqual([`backup.sqlite${suffix}`])
            fs.rmSync(`${destination}${suffix}`)
          }
          // Once removed, the backup is written.
          yield* log.backup(destination)
          expect(fs.readdirSync(directory)).toEqual(["backup.sqlite"])
        }),
      ),
    ))

  it("stops when interrupted mid-copy, leaving nothing at the destination once the log is closed", () =>
    Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          // About 40 MB: a copy of many steps.
          for (let index = 0; index < 40; index++) {
            const history = new History.History({ sessionId: `big-${index}`, firstId: 1 + index * 100 })
            const run = history.open({ invocationId: `invocation-${index}`, runId: `run-${index}`, turnId: `turn-${index}` })
            run.complete(run.request(), FactBuilders.textStep("x".repeat(1_000_000)))
            run.end()
            yield* appendAll(log, history.writes)
          }
          const directory = temporaryDirectory()
          const copying = yield* Effect.forkChild(log.backup(path.join(directory, "copy.sqlite")))
          // Interrupted once its temporary file is there: the copy is under way.
          while (!fs.readdirSync(directory).some((name) => name.startsWith(".maka-backup-"))) {
            yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 1)))
          }
          yield* Fiber.interrupt(copying)
          yield* log.close
          expect(fs.readdirSync(directory)).toEqual([])
        }),
      ),
    ), 60_000)

  it("never writes through a symbolic link, even one whose target does not exist", () =>
    Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          const directory = temporaryDirectory()
          const link = path.join(directory, "link.sqlite")
          fs.symlinkSync(path.join(directory, "elsewhere.sqlite"), link)
          const error = yield* failure(log.backup(link))
          expect(error.reason._tag).toBe("Io")
          expect(error.message).toContain("already exists")
          expect(fs.readdirSync(directory)).toEqual(["link.sqlite"])
        }),
      ),
    ))

  it("never writes a copy under the name of a database's sidecar: the source and that database stay readable", () =>
    Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log, file } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          yield* appendAll(log, session(1).writes)
          for (const suffix of ["-journal", "-wal", "-shm", ".writer.lock"]) {
            const target = `${file}${suffix}`
            const existed = fs.existsSync(target)
            const error = yield* failure(log.backup(target))
            expect(error.reason._tag, suffix).toBe("Io")
            expect(error.message).toContain(existed ? "already exists" : `the name of the ${suffix} file of the database ${file}`)
            // Nothing was written there (the log's own -wal, -shm and lock are its own files).
            if (!existed) expect(fs.existsSync(target), suffix).toBe(false)
          }
          // Beside no database, the same kind of name is a backup like any other.
          const other = path.join(temporaryDirectory(), "copy.sqlite-journal")
          yield* log.backup(other)
          const reader = yield* Effect.promise(() => openSqlite(file, { readOnly: true }))
          yield* Effect.promise(() => reader.close())
          expect((yield* log.events("session-1")).length).toBe(session(1).writes.length)
        }),
      ),
    ))

  for (const dialect of dialects().filter((item) => item.name !== "sqlite")) {
    it(`refuses a ${dialect.name} log with a pointer to the server's tools`, () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const error = yield* failure(log.backup(path.join(temporaryDirectory(), "backup.sqlite")))
          expect(error.reason._tag).toBe("Database")
          expect(error.message).toContain("pg_dump")
        }),
      ))
  }
})
