/**
 * Runs one suite against every dialect: SQLite files in temp folders, PostgreSQL through PGlite (one
 * instance per test file, a fresh schema per test), and a real PostgreSQL server when
 * `MAKA_TEST_DATABASE_URL` is set (CI sets it; elsewhere those cases are skipped with a notice).
 */
import type { PGlite } from "@electric-sql/pglite"
import { freshPglite } from "./pglite-snapshot.ts"
import { Effect, type Scope } from "effect"
import { afterAll } from "vitest"
import * as EventLog from "../../src/EventLog.ts"
import { openPglite, openPostgres } from "../../src/internal/open-postgres.ts"
import * as Testing from "../../src/testing.ts"

export interface DialectCase {
  readonly name: string
  readonly open: Effect.Effect<EventLog.EventLogShape, unknown, Scope.Scope>
}

let pglite: PGlite | undefined
let schemaCount = 0
const freshSchema = () => `t_${process.pid}_${Date.now().toString(36)}_${++schemaCount}`

const sharedPglite = (): PGlite => {
  if (pglite === undefined) {
    pglite = freshPglite()
    afterAll(async () => {
      await pglite?.close()
    })
  }
  return pglite
}

export const databaseUrl = process.env["MAKA_TEST_DATABASE_URL"]

export const dialects = (): ReadonlyArray<DialectCase> => {
  const cases: Array<DialectCase> = [
    { name: "sqlite", open: Effect.map(Testing.makeTemporary({ synchronous: "NORMAL" }), ({ log }) => log) },
    {
      name: "pglite",
      open: EventLog.fromDatabase(() => openPglite(sharedPglite(), { schema: freshSchema() })),
    },
  ]
  if (databaseUrl !== undefined && databaseUrl !== "") {
    cases.push({
      name: "postgres",
      open: EventLog.fromDatabase(() => openPostgres({ url: databaseUrl }, { schema: freshSchema() })),
    })
  }
  return cases
}

if (databaseUrl === undefined || databaseUrl === "") {
  process.stdout.write("note: MAKA_TEST_DATABASE_URL is unset; the PostgreSQL-server cases of this suite do not run here\n")
}
