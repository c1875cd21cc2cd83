import { EventWrite, type Fact, type Model } from "@maka/facts"
import { FactBuilders } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Result } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { appendBatch } from "../src/internal/append.ts"
import type { Database } from "../src/internal/database.ts"
import { openPglite } from "../src/internal/open-postgres.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import * as Reads from "../src/internal/reads.ts"
import * as Rows from "../src/internal/rows.ts"
import * as Safety from "../src/internal/safety.ts"
import { freshPglite } from "./support/pglite-snapshot.ts"

/**
 * Sequences the random comparison rarely builds, run on both state sources of the append rules
 * (docs/log-format.md §3.3) and the gate (docs/log-format.md §3.7): SQLite's in-memory index and
 * rows read back.
 */

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "maka-append-memory-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))
let files = 0

const invocation = FactBuilders.invocation()
const writer = () => {
  let next = 1
  return (fact: Fact.Fact) => Result.getOrThrow(EventWrite.plain({ id: FactBuilders.eventId(next++), recordedAt: 0, invocation, fact }))
}

const opened: Fact.Fact = {
  kind: "invocation_opened",
  input: { kind: "message", content: { text: "hello" } },
  configuration: FactBuilders.configuration(),
}

const facts = {
  opened,
  requested: (stepId: string): Fact.Fact => ({
    kind: "model_requested",
    stepId,
    modelId: "test-model",
    purpose: "main",
    sourceScope: { kind: "session", id: "session-1" },
    sourceHighWater: 0,
    sourceDigest: FactBuilders.digestOf("source"),
    inputDigest: FactBuilders.digestOf("input"),
    routeIdentity: FactBuilders.digestOf("route"),
  }),
  call: (kind: "tool_dispatched" | "tool_rejected", stepId: string): Fact.Fact => {
    const base = { operationId: `${stepId}:c0`, call: { toolCallId: "c0", origin: { kind: "provider" as const, stepId } }, name: "read_file", input: {} }
    return kind === "tool_dispatched" ? { kind, ...base } : { kind, ...base, reason: { kind: "cancelled" } }
  },
} satisfies Record<string, unknown>

/** Appends each batch on a fresh log with `validation`; the outcome of each and the gate after. */
const outcomes = async (batches: ReadonlyArray<ReadonlyArray<EventWrite.EventWrite>>, validation: "memory" | "sql") => {
  const database: Database = await openSqlite(path.join(directory, `log-${files++}.sqlite`), { synchronous: "NORMAL" })
  try {
    const results: Array<string> = []
    for (const batch of batches) {
      try {
        results.push(`ok ${(await appendBatch(database, batch, 0, { validation })).sequences.join(",")}`)
      } catch (error) {
        results.push(`refused ${JSON.stringify(error)}`)
      }
      results.push(
        await database.read(async (tx) => {
          try {
            const result =
              validation === "memory"
                ? await Safety.check(tx, "sqlite", "session-1")
                : await Safety.checkFolded(tx, "sqlite", (await Rows.ofSession(tx, "session-1", { withObservations: false })).map(Rows.stored))
            return `safe ${JSON.stringify(result)}`
          } catch (error) {
            return `unsafe ${JSON.stringify(error)}`
          }
        }),
      )
    }
    return results
  } finally {
    await database.close()
  }
}

const bothPaths = async (batches: ReadonlyArray<ReadonlyArray<EventWrite.EventWrite>>) => {
  const memory = await outcomes(batches, "memory")
  expect(memory).toEqual(await outcomes(batches, "sql"))
  return memory
}

/** An opening and one streamed step: its request, two observed deltas, its completion with `output`. */
const streamedStep = (write: ReturnType<typeof writer>, step: string, output: Model.ModelStep) => {
  const observed = (text: string): Fact.Fact => ({ kind: "model_observed", stepId: step, event: { kind: "part_delta", id: "0", text } })
  return [
    write(facts.opened),
    write(facts.requested(step)),
    write(observed("a")),
    write(observed("b")),
    write({ kind: "model_completed", stepId: step, output }),
  ]
}

/** Calls `count` with the SQL of every `all` of a better-sqlite3 statement until the returned restore runs. */
const watchAll = (count: (sql: string) => void): (() => void) => {
  const probe = new BetterSqlite3(":memory:")
  const prototype = Object.getPrototypeOf(probe.prepare("SELECT 1")) as { all: (...args: Array<unknown>) => unknown }
  probe.close()
  const all = prototype.all
  prototype.all = function (this: { readonly source: string }, ...args: Array<unknown>) {
    count(this.source)
    return all.apply(this, args)
  }
  return () => {
    prototype.all = all
  }
}

/** The error `appendBatch` refuses `writes` with on the SQL path, or undefined. */
const refusalOf = (database: Database, writes: ReadonlyArray<EventWrite.EventWrite>): Promise<unknown> =>
  appendBatch(database, writes, 0, { validation: "sql" }).then(
    () => undefined,
    (error: unknown) => error,
  )

describe("the in-memory index against rows read back", () => {
  it("reads an invocation's boundaries once per batch on the SQL path, and again after its opening or terminal", async () => {
    const write = writer()
    const batch = [
      ...streamedStep(write, "step-1", FactBuilders.textStep("ab")),
      write({ kind: "invocation_ended", outcome: { kind: "completed" } }),
    ]
    const reads = { alone: 0, withBatch: 0 }
    const restore = watchAll((sql) => {
      if (/where "invocation_id" = \? and kind IN \('invocation_opened', 'invocation_ended'\)/.test(sql)) reads.alone++
      if (/"invocation_id" in \([?, ]+\) and kind IN \('invocation_opened', 'invocation_ended'\)/.test(sql)) reads.withBatch++
    })
    const database: Database = await openSqlite(path.join(directory, `log-${files++}.sqlite`), { synchronous: "NORMAL" })
    try {
      expect((await appendBatch(database, batch, 0, { validation: "sql" })).sequences).toHaveLength(batch.length)
      // With the batch's other reads (no opening yet), then once more after it is appended; the terminal changes nothing after it.
      expect(reads).toEqual({ alone: 1, withBatch: 1 })
      // A write after the terminal in the same batch sees the invocation sealed.
      const next = writer()
      const sealed = [
        next(facts.opened),
        next({ kind: "invocation_ended", outcome: { kind: "completed" } }),
        next(facts.requested("step-2")),
      ].map((item, index) => Result.getOrThrow(EventWrite.plain({ ...item.event, id: FactBuilders.eventId(500 + index), invocation: { ...invocation, invocationId: "invocation-2", runId: "run-2", turnId: "turn-2" } })))
      expect(await refusalOf(database, sealed)).toMatchObject({ reason: { rejection: { _tag: "Sealed" } } })
    } finally {
      restore()
      await database.close()
    }
  })

  it("reads no boundaries for a new opening or a live current invocation the writer's index holds", async () => {
    const write = writer()
    const boundaryReads: Array<string> = []
    const restore = watchAll((sql) => {
      if (/kind IN \('invocation_opened', 'invocation_ended'\)/.test(sql)) boundaryReads.push(sql)
    })
    const database: Database = await openSqlite(path.join(directory, `log-${files++}.sqlite`), { synchronous: "NORMAL" })
    try {
      // The session's first opening loads its index (one read of its rows); the insert confirms the boundaries.
      await appendBatch(database, [write(facts.opened)], 0)
      await database.read((tx) => Reads.checkHistorySafety(tx, "sqlite", "session-1", invocation.invocationId))
      expect(boundaryReads).toEqual([])
      // An invocation the index does not hold live is read: here it is not live, so it is refused.
      const notLive = await database.read((tx) => Reads.checkHistorySafety(tx, "sqlite", "session-1", "invocation-9")).then(
        () => undefined,
        (error: unknown) => error,
      )
      expect(notLive).toMatchObject({ reason: { rejection: { _tag: "InvalidTransition" } } })
      expect(boundaryReads).toHaveLength(1)
    } finally {
      restore()
      await database.close()
    }
  })

  it("reads a batch's replay and operation rows in one statement on the SQL path, and sees the batch's own rows", async () => {
    const write = writer()
    const step = "step-1"
    const batch = [
      ...streamedStep(write, step, FactBuilders.toolCallStep([{ id: "c0", name: "read_file" }])),
      // Needs the completion appended just before it, in the same batch.
      write(facts.call("tool_dispatched", step)),
    ]
    const reads = { batch: 0, single: 0 }
    const restore = watchAll((sql) => {
      if (/"event_id" in \(/.test(sql)) reads.batch++
      if (/where "event_id" = \?|WHERE operation_id = \?/.test(sql)) reads.single++
    })
    const database: Database = await openSqlite(path.join(directory, `log-${files++}.sqlite`), { synchronous: "NORMAL" })
    try {
      const sequences = (await appendBatch(database, batch, 0, { validation: "sql" })).sequences
      expect(sequences).toEqual([1, 2, 3, 4, 5, 6])
      expect(reads).toEqual({ batch: 1, single: 0 })
      // A batch that repeats itself and a write of this batch: replays, the second one seen among the batch's own rows.
      const again = await appendBatch(database, [...batch, batch[5]!], 0, { validation: "sql" })
      expect(again).toEqual({ sequences: [1, 2, 3, 4, 5, 6, 6], inserted: false })
      const settled = write({ kind: "tool_rejected", operationId: `${step}:c1`, call: { toolCallId: "c1", origin: { kind: "provider", stepId: step } }, name: "read_file", input: {}, reason: { kind: "cancelled" } })
      // The second is the first's replay, but the first was refused: the step has no call c1.
      expect(await refusalOf(database, [settled, settled])).toMatchObject({ reason: { rejection: { _tag: "InvalidTransition" } } })
      const twin = write({ kind: "message_steered", message: FactBuilders.deliveredMessage("message-1", "and then?") })
      expect((await appendBatch(database, [twin, twin], 0, { validation: "sql" })).sequences).toEqual([7, 7])
      const conflict = Result.getOrThrow(EventWrite.plain({ ...twin.event, fact: { kind: "message_steered", message: FactBuilders.deliveredMessage("message-1", "something else") } }))
      expect(await refusalOf(database, [conflict])).toMatchObject({ reason: { rejection: { _tag: "EventConflict" } } })
    } finally {
      restore()
      await database.close()
    }
  })

  it("reads more than one statement's worth of ids in parts: each stored row once, in sequence order", async () => {
    const write = writer()
    const batch = streamedStep(write, "step-1", FactBuilders.textStep("ab"))
    const database: Database = await openSqlite(path.join(directory, `log-${files++}.sqlite`), { synchronous: "NORMAL" })
    try {
      await appendBatch(database, batch, 0)
      const absent = Array.from({ length: 1_100 }, (_, index) => FactBuilders.eventId(10_000 + index))
      // The stored ids in the first, second and third part of 500; the step's rows in the second part of its operations.
      const eventIds = [batch[4]!.event.id, ...absent.slice(0, 600), batch[0]!.event.id, ...absent.slice(600), batch[2]!.event.id]
      const operationIds = [...Array.from({ length: 700 }, (_, index) => `absent-${index}`), "step-1"]
      const rows = await database.read((tx) => Rows.byEventsOrOperations(tx, eventIds, operationIds, ["invocation-1"]))
      // The opening (by id and as a boundary), the request and completion (the step's), one observation (by id).
      expect(rows.map((row) => row.sequence)).toEqual([1, 2, 3, 5])
    } finally {
      await database.close()
    }
  })

  it("locks a PostgreSQL session whose row exists in one statement, and reads a batch's rows in one", async () => {
    const pglite = freshPglite()
    const statements: Array<string> = []
    const query = pglite.query.bind(pglite)
    pglite.query = ((sql: string, ...rest: Array<never>) => {
      statements.push(sql.replace(/\s+/g, " "))
      return query(sql, ...rest)
    }) as typeof pglite.query
    const database: Database = await openPglite(pglite, { schema: "locks" })
    try {
      const write = writer()
      const step = "step-1"
      await appendBatch(database, [write(facts.opened)], 0)
      const first = statements.splice(0)
      // A new session: its row is looked up, inserted, then locked.
      expect(first.filter((sql) => /"sessions"/.test(sql)).map((sql) => sql.split(" ")[0])).toEqual(["select", "insert", "select"])
      await appendBatch(database, [write(facts.requested(step)), write({ kind: "model_completed", stepId: step, output: FactBuilders.textStep("done") })], 0)
      const second = statements.splice(0)
      expect(second.filter((sql) => /"sessions"/.test(sql))).toEqual([expect.stringMatching(/^select "session_id" from "sessions" where "session_id" = \$1 for update$/)])
      expect(second.filter((sql) => /"event_id" in \(/.test(sql))).toHaveLength(1)
      expect(second.filter((sql) => /"event_id" = \$1|"operation_id" = \$1/.test(sql))).toEqual([])
      // A step's stream, completion and dispatch: validated from the batch read, inserted in one statement.
      const next = "step-2"
      const observed = (text: string): Fact.Fact => ({ kind: "model_observed", stepId: next, event: { kind: "part_delta", id: "0", text } })
      await appendBatch(database, [write(facts.requested(next))], 0)
      statements.splice(0)
      const streamed = [
        write(observed("a")),
        write(observed("b")),
        write({ kind: "model_completed", stepId: next, output: FactBuilders.toolCallStep([{ id: "c0", name: "read_file" }]) }),
        write(facts.call("tool_dispatched", next)),
      ]
      const { sequences } = await appendBatch(database, [...streamed, streamed[1]!], 0)
      expect(statements.filter((sql) => /^insert into "event_log"/.test(sql))).toHaveLength(1)
      expect(sequences).toEqual([5, 6, 7, 8, 6])
      const stored = await database.read((tx) => Rows.ofSession(tx, invocation.sessionId, { withObservations: true }))
      expect(stored.slice(-4).map((row) => [row.sequence, row.eventId])).toEqual(streamed.map((item, index) => [5 + index, item.event.id]))
    } finally {
      await database.close()
      await pglite.close()
    }
  })

  it("refuses a dispatch of an operation already rejected", async () => {
    const write = writer()
    const results = await bothPaths([
      [write(facts.opened), write(facts.requested("s1"))],
      [write({ kind: "model_completed", stepId: "s1", output: FactBuilders.toolCallStep([{ id: "c0", name: "read_file" }]) })],
      [write(facts.call("tool_rejected", "s1"))],
      [write(facts.call("tool_dispatched", "s1"))],
    ])
    expect(results[6]).toMatch(/^refused .*already dispatched or rejected/)
  })

  it("holds an interrupted step that observed a provider-executed call as unsafe once sealed", async () => {
    const write = writer()
    const results = await bothPaths([
      [write(facts.opened), write(facts.requested("s1"))],
      [write({ kind: "model_observed", stepId: "s1", event: { kind: "tool_call", id: "web", name: "web_search", input: {}, providerExecuted: true } })],
      [write({ kind: "model_interrupted", stepId: "s1", status: "failed" })],
      [write({ kind: "invocation_ended", outcome: { kind: "failed", class: "runtime_internal" } })],
    ])
    expect(results[6]).toMatch(/^ok/)
    expect(results[7]).toMatch(/^unsafe/)
  })

  it("keeps nothing of a batch refused half-way: the next batch sees the log as it was", async () => {
    const write = writer()
    const request = write(facts.requested("s1"))
    const results = await bothPaths([
      [write(facts.opened)],
      // The request is inserted, then the duplicate opening refuses the batch.
      [request, write(facts.opened)],
      [write({ kind: "model_completed", stepId: "s1", output: FactBuilders.textStep("answer") })],
      [request],
    ])
    expect(results[2]).toMatch(/^refused/)
    expect(results[4]).toMatch(/^refused .*no request in this invocation/)
    expect(results[6]).toMatch(/^ok 2$/)
  })
})
