/**
 * The writer's in-memory index answers only while the writer lease holds (docs/architecture.md §5):
 * once the lease is lost another process may append, so what the index and its kept rows say of a
 * session is dropped and the next read goes to the store. A writer that has not yet seen its keeper
 * end (its event loop busy) finds another writer's lease epoch in its next write transaction and
 * writes nothing (docs/log-format.md §3.1).
 */
import { History } from "@maka/testkit"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import * as EventLogError from "../src/EventLogError.ts"
import { keeperProcessId } from "../src/internal/lease.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import { childScript, expectReason, runChildBlocking, spawnChild, temporaryDirectory } from "./fixtures/storage.ts"

const SESSION = History.smallRun().sessionId

/** Kills this process's lease keeper and waits until it is gone: every lease it held is lost. */
const loseLease = async (): Promise<void> => {
  const keeper = keeperProcessId()
  expect(keeper).toBeDefined()
  process.kill(keeper!, "SIGKILL")
  for (let waited = 0; keeperProcessId() !== undefined && waited < 5_000; waited += 20) {
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  expect(keeperProcessId()).toBeUndefined()
}

/**
 * Opens a writer, lets `before` load the session into memory, loses the lease, lets the next writer
 * append (`part`: the whole small run, or its opening alone), then runs `after` on the first writer's log.
 */
const acrossLostLease = async (
  part: "run" | "opening",
  before: (log: EventLog.EventLogShape) => Effect.Effect<unknown, unknown>,
  after: (log: EventLog.EventLogShape) => Effect.Effect<void, unknown>,
): Promise<void> => {
  const file = path.join(temporaryDirectory(), "events.sqlite")
  const database = await openSqlite(file)
  await Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const log = yield* EventLog.fromDatabase(() => Promise.resolve(database))
        yield* before(log)
        yield* Effect.promise(loseLease)
        yield* Effect.promise(() => expectReason(database.write(async () => 1), "WriterBusy"))
        const next = spawnChild(childScript("append-batch.ts"), part === "run" ? [file] : [file, "opening"])
        const appended = yield* Effect.promise(() => next.line("appended"))
        expect(appended).toBe(`appended ${part === "run" ? History.smallRun().writes.length : 1}`)
        expect((yield* Effect.promise(() => next.exited)).code).toBe(0)
        yield* after(log)
      }),
    ),
  )
}

describe("a writer that lost its lease", () => {
  it("reads what the next writer appended, not what it kept in memory", () =>
    acrossLostLease(
      "run",
      // The safety check loads the (empty) session into memory and keeps its rows for the context read.
      (log) => log.checkHistorySafety(SESSION),
      (log) =>
        Effect.gen(function* () {
          const after = yield* log.readModelContextWithHash(SESSION)
          expect(after.source.sourceEvidence.highWater).toBe(History.smallRun().writes.length)
          expect(after.source.tail.length).toBeGreaterThan(0)
        }),
    ))

  it("answers the safety check from the store: a run the next writer left open is seen", () =>
    acrossLostLease(
      "opening",
      // The session is loaded into memory (empty, so safe), and answered from it the second time.
      (log) => Effect.andThen(log.checkHistorySafety(SESSION), log.checkHistorySafety(SESSION)),
      (log) =>
        Effect.gen(function* () {
          const refused = yield* Effect.flip(log.checkHistorySafety(SESSION))
          expect(refused.reason._tag).toBe("Rejected")
          expect(refused.message).toContain("unsealed or unresolved")
        }),
    ))

  it("writes nothing after another writer opened the log, before it has seen its keeper end", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const database = await openSqlite(file)
    const { writes } = History.smallRun()
    // The same run's next event under other ids: what this writer would append next.
    const mine = History.smallRun({ firstId: 1_000 }).writes[1]!
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const log = yield* EventLog.fromDatabase(() => Promise.resolve(database))
          // The run's opening, in the writer's memory as open.
          yield* log.appendBatch(writes.slice(0, 1))
          // From the keeper's kill to the refused append, this process never yields: its keeper's
          // exit is not seen, so the lease still reads as held. The next writer ends the run.
          const refused = yield* Effect.flip(
            Effect.suspend(() => {
              process.kill(keeperProcessId()!, "SIGKILL")
              const next = runChildBlocking(childScript("append-batch.ts"), [file, "rest"])
              expect(next.stderr).toBe("")
              expect(next.stdout).toBe(`appended ${writes.length - 1}\n`)
              return log.appendBatch([mine])
            }),
          )
          expect(refused.reason).toEqual({ _tag: "WriterBusy", path: database.location, lost: true, why: "another writer opened the log since" })
          expect(refused.message).toContain(EventLogError.LEASE_LOST_MESSAGE)
        }),
      ),
    )
    const reader = await openSqlite(file, { readOnly: true })
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const log = yield* EventLog.fromDatabase(() => Promise.resolve(reader))
          const stored = yield* log.events(History.smallRun().sessionId)
          expect(stored.map((event) => event.event.id)).toEqual(writes.map((write) => write.event.id))
        }),
      ),
    )
  })
})

describe("a writer whose file was removed or replaced under it", () => {
  it.each([
    ["the log removed", (file: string) => fs.rmSync(file)],
    ["the log renamed", (file: string) => fs.renameSync(file, `${file}.moved`)],
    ["the -wal removed", (file: string) => fs.rmSync(`${file}-wal`)],
    ["the folder removed", (file: string) => fs.rmSync(path.dirname(file), { recursive: true })],
  ])("writes nothing more once it finds it so (%s), and says why", async (_, remove) => {
    const file = path.join(temporaryDirectory(), "logs", "events.sqlite")
    fs.mkdirSync(path.dirname(file))
    const database = await openSqlite(file)
    const { writes } = History.smallRun()
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const log = yield* EventLog.fromDatabase(() => Promise.resolve(database))
          yield* log.appendBatch(writes.slice(0, 1))
          remove(file)
          const refused = yield* Effect.flip(log.appendBatch(writes.slice(1)))
          expect(refused.reason).toEqual({
            _tag: "WriterBusy",
            path: database.location,
            lost: true,
            why: EventLogError.FILE_REPLACED,
          })
        }),
      ),
    )
    await database.close()
  })
})
