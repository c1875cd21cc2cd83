import { EventWrite, type Fact } from "@maka/facts"
import { FactBuilders } from "@maka/testkit"
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
