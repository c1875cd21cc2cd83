/**
 * Which PostgreSQL transactions are tried again (docs/log-format.md §3.3), by the stage they failed
 * at: one that failed to begin or failed in its body on a lost connection (or, a write, met a
 * transient answer in its body) wrote nothing and is run again; a write that fails at its commit
 * may have landed and never is (`OutcomeUnknown`); a read is, on a lost connection.
 */
import type { Transaction } from "kysely"
import { describe, expect, it } from "vitest"
import * as EventLogError from "../src/EventLogError.ts"
import { runPostgres, type TransactionRunner } from "../src/internal/database-handle.ts"
import type { Tables } from "../src/internal/tables.ts"

type Stage = "begin" | "body" | "commit"

const lost = () => Object.assign(new Error("terminating connection due to administrator command"), { code: "57P01" })
const transient = () => Object.assign(new Error("canceling statement due to lock timeout"), { code: "55P03" })

/**
 * A runner whose first `failures` transactions fail at `stage` with `error()`, the later ones
 * succeed; `tries` counts the transactions begun (and `bodies` the bodies run).
 */
const failing = (stage: Stage, error: () => Error, failures: number) => {
  const counts = { tries: 0, bodies: 0 }
  const begin = (): TransactionRunner => ({
    execute: async <A>(callback: (transaction: Transaction<Tables>) => Promise<A>): Promise<A> => {
      const failsNow = counts.tries++ < failures
      if (failsNow && stage === "begin") throw error()
      const result = await callback({} as Transaction<Tables>)
      if (failsNow && stage === "commit") throw error()
      return result
    },
  })
  const body = (failsAt: () => boolean) => async () => {
    counts.bodies++
    if (failsAt()) throw error()
    return "done"
  }
  return { counts, begin, body: body(() => stage === "body" && counts.tries <= failures) }
}

const outcome = async (promise: Promise<unknown>): Promise<string> =>
  promise.then(
    (value) => `ok ${String(value)}`,
    (error: unknown) => (EventLogError.isEventLogError(error) ? `failed ${error.reason._tag}` : `threw ${(error as Error).message}`),
  )

describe("runPostgres", () => {
  it("tries a write again that lost its connection at its begin or in its body, or met a transient answer in its body", async () => {
    for (const [stage, error] of [
      ["begin", lost],
      ["body", lost],
      ["body", transient],
    ] as const) {
      const { counts, begin, body } = failing(stage, error, 2)
      expect(await outcome(runPostgres(begin, body, true, "log")), `${stage} ${error().message}`).toBe("ok done")
      expect(counts.tries, stage).toBe(3)
    }
  })

  it("never tries a write again that failed at its commit: its outcome is unknown", async () => {
    const { counts, begin, body } = failing("commit", lost, 1)
    expect(await outcome(runPostgres(begin, body, true, "log"))).toBe("failed OutcomeUnknown")
    expect(counts).toEqual({ tries: 1, bodies: 1 })
  })

  it("never tries a write again that failed at its commit, even with pg's \"not queryable\": that may be the ROLLBACK's error", async () => {
    // After a COMMIT sent and landed, the connection drops: pg refuses Kysely's ROLLBACK so.
    const { counts, begin, body } = failing("commit", () => new Error("Client has encountered a connection error and is not queryable"), 1)
    expect(await outcome(runPostgres(begin, body, true, "log"))).toBe("failed OutcomeUnknown")
    expect(counts).toEqual({ tries: 1, bodies: 1 })
  })

  it("tries a read again that lost its connection at any stage, its commit included", async () => {
    for (const stage of ["begin", "body", "commit"] as const) {
      const { counts, begin, body } = failing(stage, lost, 1)
      expect(await outcome(runPostgres(begin, body, false, "log")), stage).toBe("ok done")
      expect(counts.tries, stage).toBe(2)
    }
  })

  it("passes any other failure on at once: a transient answer at the begin or in a read, a refusal of the body", async () => {
    const refusal = () => EventLogError.invalidTransition("the invocation is sealed")
    for (const [stage, error, isWrite] of [
      ["begin", transient, true],
      ["body", transient, false],
      ["body", refusal, true],
      ["commit", transient, false],
    ] as const) {
      const { counts, begin, body } = failing(stage, error, 1)
      const what = `${stage} ${isWrite ? "write" : "read"} ${error().message}`
      expect(await outcome(runPostgres(begin, body, isWrite, "log")), what).not.toBe("ok done")
      expect(counts.tries, what).toBe(1)
    }
  })

  it("gives up after four tries, with the last failure", async () => {
    const { counts, begin, body } = failing("begin", lost, 10)
    expect(await outcome(runPostgres(begin, body, true, "log"))).toBe("failed Database")
    expect(counts.tries).toBe(4)
  })
})
