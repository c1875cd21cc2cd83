/**
 * A session met for the first time is read once (docs/architecture.md §12): on SQLite the writer's
 * index loads a session in the engine's admission check (a read), keeps that read's rows, and the
 * context read that follows takes them with only the rows appended since. The context and its hash
 * are exactly those of a fresh read. Real SQLite files; rows are counted at better-sqlite3.
 */
import BetterSqlite3 from "better-sqlite3"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { EventLog } from "../src/index.ts"
import { finishedTurns, turnIds } from "./support/harness.ts"

const SESSION = "session-1"

/** Finished turns with observations, then the opening of a live one (appended by the test). */
const history = (turns: number, sessionId = SESSION, firstId = 1) => {
  const built = finishedTurns(sessionId, turns, { firstId, observations: ["looking", " around"] })
  const stored = built.writes.length
  const live = built.open({ message: "And now?", ...turnIds(sessionId, turns) })
  return { built, stored, live }
}

/** Rows better-sqlite3 returns from `event_log` while `body` runs. */
const countRows = async <A>(body: () => Promise<A>): Promise<{ readonly rows: number; readonly result: A }> => {
  const probe = new BetterSqlite3(":memory:")
  const prototype = Object.getPrototypeOf(probe.prepare("SELECT 1")) as Record<string, (...args: Array<unknown>) => unknown>
  probe.close()
  let rows = 0
  const originals = { all: prototype["all"]!, get: prototype["get"]! }
  prototype["all"] = function (this: { readonly source: string }, ...args: Array<unknown>) {
    const result = originals.all.apply(this, args) as ReadonlyArray<unknown>
    if (/from "?event_log"?/i.test(this.source)) rows += result.length
    return result
  }
  prototype["get"] = function (this: { readonly source: string }, ...args: Array<unknown>) {
    const result = originals.get.apply(this, args)
    if (/from "?event_log"?/i.test(this.source) && result !== undefined) rows += 1
    return result
  }
  try {
    const result = await body()
    return { rows, result }
  } finally {
    prototype["all"] = originals.all
    prototype["get"] = originals.get
  }
}

const directories: Array<string> = []
afterEach(() => {
  for (const directory of directories.splice(0)) fs.rmSync(directory, { recursive: true, force: true })
})

/** A SQLite log file holding the finished turns of `history(turns)`. */
const logFile = async (turns: number) => {
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "maka-read-once-"))
  directories.push(directory)
  const file = path.join(directory, "log.sqlite")
  const session = history(turns)
  await withFile(file, (log) => log.appendBatch(session.built.writes.slice(0, session.stored)))
  return { file, ...session }
}

const withFile = <A>(file: string, body: (log: EventLog.EventLogShape) => Effect.Effect<A, unknown>) =>
  Effect.runPromise(
    Effect.scoped(
      Effect.provide(
        Effect.flatMap(EventLog.EventLog, body),
        EventLog.layerSqlite({ path: file, synchronous: "NORMAL" }),
      ),
    ),
  )

/** What a fresh log reads for the live invocation: the reference every primed read must equal. */
const freshContext = (file: string, current: string) =>
  withFile(file, (log) => log.readModelContextWithHash(SESSION, { current }))

describe("a session met first by a read is read once", () => {
  it("keeps the rows of the last four sessions so met, no more", async () => {
    const { file } = await logFile(2)
    const sessions = ["a", "b", "c", "d", "e"].map((name, index) => ({ sessionId: `session-${name}`, ...history(3, `session-${name}`, 10_000 * (index + 1)), index }))
    await withFile(file, (log) => Effect.forEach(sessions, (session) => log.appendBatch(session.built.writes.slice(0, session.stored))))
    const rows = await withFile(file, (log) =>
      Effect.gen(function* () {
        for (const session of sessions) yield* log.checkHistorySafety(session.sessionId)
        return yield* Effect.forEach(sessions, (session) =>
          Effect.promise(() => countRows(() => Effect.runPromise(log.readModelContextWithHash(session.sessionId)))),
        )
      }),
    )
    // The first session's rows were dropped for the fifth's: it is read again, the others are not.
    expect(rows[0]!.rows).toBeGreaterThanOrEqual(sessions[0]!.stored)
    for (const read of rows.slice(1)) expect(read.rows).toBeLessThan(5)
  })

  it.each([
    { first: "the admission check", pendingFirst: false },
    { first: "the pending-handoff check, then the admission check (a start's order)", pendingFirst: true },
  ])("$first, the opening and the context read read the session's rows once, and the context is a fresh read's", async ({ pendingFirst }) => {
    const { file, built, stored, live } = await logFile(20)
    const current = live.invocation.invocationId
    const { rows, result } = await countRows(() =>
      withFile(file, (log) =>
        Effect.gen(function* () {
          // The index answers the pending-handoff check of a session it holds whose latest run did not pause: no row.
          const pending = pendingFirst ? yield* log.hasPendingHandoff(SESSION) : false
          const again = pendingFirst ? (yield* Effect.promise(() => countRows(() => Effect.runPromise(log.hasPendingHandoff(SESSION))))).rows : 0
          yield* log.checkHistorySafety(SESSION)
          yield* log.appendBatch(built.writes.slice(stored))
          return { pending, again, read: yield* log.readModelContextWithHash(SESSION, { current }) }
        }),
      ),
    )
    expect(stored).toBeGreaterThan(200)
    expect(result.pending).toBe(false)
    expect(result.again).toBe(0)
    // Once: the load's rows, the new opening's, and a few indexed look-ups (the opening, high waters).
    expect(rows).toBeLessThan(stored + 10)
    expect(result.read).toEqual(await freshContext(file, current))
  })

  it("takes the kept rows once: the next context read reads the session again, and answers the same", async () => {
    const { file, built, stored, live } = await logFile(6)
    const current = live.invocation.invocationId
    const [first, second] = await withFile(file, (log) =>
      Effect.gen(function* () {
        yield* log.checkHistorySafety(SESSION)
        yield* log.appendBatch(built.writes.slice(stored))
        const first = yield* log.readModelContextWithHash(SESSION, { current })
        const { rows } = yield* Effect.promise(() => countRows(() => Effect.runPromise(log.readModelContextWithHash(SESSION, { current }))))
        expect(rows).toBeGreaterThan(stored)
        return [first, yield* log.readModelContextWithHash(SESSION, { current })] as const
      }),
    )
    expect(second).toEqual(first)
    expect(first).toEqual(await freshContext(file, current))
  })

  it("a context read that meets the session first loads the index without observations and keeps nothing", async () => {
    const { file, built, stored } = await logFile(8)
    const facts = built.writes.slice(0, stored).filter((item) => item.event.fact.kind !== "model_observed").length
    const [first, second] = await withFile(file, (log) =>
      Effect.gen(function* () {
        const first = yield* Effect.promise(() => countRows(() => Effect.runPromise(log.readModelContextWithHash(SESSION))))
        const second = yield* Effect.promise(() => countRows(() => Effect.runPromise(log.readModelContextWithHash(SESSION))))
        return [first, second] as const
      }),
    )
    expect(facts).toBeLessThan(stored)
    // Its own read of every row, then the index's read of the facts alone.
    expect(first.rows).toBeGreaterThanOrEqual(stored + facts)
    expect(first.rows).toBeLessThan(stored + facts + 10)
    // Nothing was kept: the next read reads the session again.
    expect(second.rows).toBeGreaterThanOrEqual(stored)
    expect(second.result).toEqual(first.result)
  })

  it("a session first met by a write keeps no rows: the context read reads it whole", async () => {
    const { file, built, stored, live } = await logFile(6)
    const current = live.invocation.invocationId
    const { rows, result } = await countRows(() =>
      withFile(file, (log) =>
        Effect.gen(function* () {
          yield* log.appendBatch(built.writes.slice(stored))
          return yield* log.readModelContextWithHash(SESSION, { current })
        }),
      ),
    )
    expect(rows).toBeGreaterThan(stored + stored / 2)
    expect(result).toEqual(await freshContext(file, current))
  })
})
