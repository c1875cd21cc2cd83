import { EventWrite, type Fact } from "@maka/facts"
import { FactBuilders } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Result } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { appendBatch } from "../src/internal/append.ts"
import type { Database } from "../src/internal/database.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import * as Rows from "../src/internal/rows.ts"
import * as Safety from "../src/internal/safety.ts"

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

describe("the in-memory index against rows read back", () => {
  it("reads an invocation's boundaries once per batch on the SQL path, and again after its opening or terminal", async () => {
    const write = writer()
    const step = "step-1"
    const observed = (text: string): Fact.Fact => ({ kind: "model_observed", stepId: step, event: { kind: "part_delta", id: "0", text } })
    const batch = [
      write(facts.opened),
      write(facts.requested(step)),
      write(observed("a")),
      write(observed("b")),
      write({ kind: "model_completed", stepId: step, output: FactBuilders.textStep("ab") }),
      write({ kind: "invocation_ended", outcome: { kind: "completed" } }),
    ]
    const probe = new BetterSqlite3(":memory:")
    const prototype = Object.getPrototypeOf(probe.prepare("SELECT 1")) as { all: (...args: Array<unknown>) => unknown }
    probe.close()
    const all = prototype.all
    let reads = 0
    prototype.all = function (this: { readonly source: string }, ...args: Array<unknown>) {
      if (/where "invocation_id" = \? and kind IN \('invocation_opened', 'invocation_ended'\)/.test(this.source)) reads++
      return all.apply(this, args)
    }
    const database: Database = await openSqlite(path.join(directory, `log-${files++}.sqlite`), { synchronous: "NORMAL" })
    try {
      expect((await appendBatch(database, batch, 0, { validation: "sql" })).sequences).toHaveLength(batch.length)
      // The opening's (none yet), then once more after it is appended; the terminal changes nothing after it.
      expect(reads).toBe(2)
      // A write after the terminal in the same batch sees the invocation sealed.
      const next = writer()
      const sealed = [
        next(facts.opened),
        next({ kind: "invocation_ended", outcome: { kind: "completed" } }),
        next(facts.requested("step-2")),
      ].map((item, index) => Result.getOrThrow(EventWrite.plain({ ...item.event, id: FactBuilders.eventId(500 + index), invocation: { ...invocation, invocationId: "invocation-2", runId: "run-2", turnId: "turn-2" } })))
      const refused = await appendBatch(database, sealed, 0, { validation: "sql" }).then(
        () => undefined,
        (error: unknown) => error,
      )
      expect(refused).toMatchObject({ reason: { rejection: { _tag: "Sealed" } } })
    } finally {
      prototype.all = all
      await database.close()
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
