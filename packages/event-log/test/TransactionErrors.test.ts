/**
 * What a failed transaction reports (docs/log-format.md §3.4): the body's own error, also when the
 * rollback after it fails too, as it does once the connection is gone.
 */
import type { Transaction } from "kysely"
import { describe, expect, it } from "vitest"
import { runTransaction, type TransactionRunner } from "../src/internal/database-handle.ts"
import type { Tables } from "../src/internal/tables.ts"

/** A runner whose rollback fails after a body that failed, as a dropped connection's does. */
const failingRollback: TransactionRunner = {
  execute: async <A>(callback: (transaction: Transaction<Tables>) => Promise<A>): Promise<A> => {
    try {
      return await callback({} as Transaction<Tables>)
    } catch {
      throw new Error("Client has encountered a connection error and is not queryable")
    }
  },
}

describe("runTransaction", () => {
  it("reports the body's error, not the rollback's that followed it", async () => {
    const reset = Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" })
    const thrown = await runTransaction(failingRollback, () => Promise.reject(reset), true, "postgres://db.example/agents").catch(
      (error: unknown) => error,
    )
    expect(thrown).toBe(reset)
  })
})
