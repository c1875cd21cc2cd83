/**
 * Recovery the log will not let seal (docs/cli.md §10.1 "Recovery"): a run left open by a process
 * that ended, on a SQLite log whose store refuses the terminal (a trigger stands in for a full disk).
 * `maka recover` names the run on stderr and exits 1; a writing command says on stderr, once, what it
 * could not seal, and with `--json` its stdout carries event lines only.
 */
import { EventLog } from "@maka/event-log"
import { History } from "@maka/testkit"
import { Context, Effect, Layer } from "effect"
import { createRequire } from "node:module"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { eventLines, folder, maka, packageRoot, type Folder } from "./support/cli.ts"

/** better-sqlite3 as the log loads it (a dependency of `@maka/event-log`). */
interface Connection {
  exec(sql: string): void
  close(): void
}
const openConnection = (file: string): Connection => {
  const Database = createRequire(path.join(packageRoot, "../event-log/package.json"))("better-sqlite3") as new (file: string) => Connection
  return new Database(file)
}

/** A log at `db` holding a run left open (its opening alone), whose terminals the store refuses. */
const logRefusingSeals = async (db: string) => {
  const crashed = History.smallRun({ sessionId: "crashed" })
  await Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const log = yield* Layer.build(EventLog.layerSqlite({ path: db }))
        yield* Context.get(log, EventLog.EventLog).appendBatch(crashed.writes.slice(0, 1))
      }),
    ),
  )
  const connection = openConnection(db)
  connection.exec(`CREATE TRIGGER refuse_terminals BEFORE INSERT ON event_log WHEN NEW.kind = 'invocation_ended'
    BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END`)
  connection.close()
  return crashed.writes[0]!.event.invocation.invocationId
}

describe("recovery the log will not let seal", () => {
  let current: Folder | undefined
  afterEach(() => current?.remove())

  it("makes maka recover name the run on stderr and exit 1", async () => {
    const { root, db } = (current = folder())
    const invocation = await logRefusingSeals(db)
    const result = await maka(["recover", "--db", db], { cwd: root })
    expect(result.stdout).toBe("recovered 0 invocations\n")
    expect(result.stderr).toBe(`maka: could not seal crashed ${invocation}: database: database or disk is full\n`)
    expect(result.code).toBe(1)
  }, 30_000)

  it("is said once on stderr by a writing command, and never on a --json stdout", async () => {
    const { root, db, workspace } = (current = folder())
    const invocation = await logRefusingSeals(db)
    const result = await maka(["run", "--json", "--db", db, "--session", "other", "--workspace", workspace, "Hello."], { cwd: root })
    expect(result.stderr.split("\n").filter((line) => line.includes("could not seal"))).toEqual([
      `recovery could not seal session crashed: run ${invocation}: database: database or disk is full`,
    ])
    // Every stdout line is an event; the run's own terminal is refused too.
    expect(eventLines(result.stdout).length).toBeGreaterThan(0)
    expect(result.code).toBe(1)
  }, 30_000)
})
