import { History } from "@maka/testkit"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Effect } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"

const here = path.dirname(new URL(import.meta.url).pathname)
const root = path.resolve(here, "../../..")
const directory = fs.mkdtempSync(path.join(os.tmpdir(), "maka-crash-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

const runChild = (file: string, fault?: string) =>
  spawnSync(process.execPath, ["--import", "tsx", "--conditions=@maka/source", path.join(here, "children/append-batch.ts"), file], {
    cwd: root,
    env: { ...process.env, ...(fault === undefined ? {} : { MAKA_TEST_FAULT: fault }) },
    encoding: "utf8",
    timeout: 60_000,
  })

const readBack = (file: string) =>
  Effect.runPromise(
    Effect.scoped(Effect.flatMap(EventLog.fromDatabase(() => openSqlite(file)), (log) => log.events("session-1"))),
  )

describe("a batch killed by SIGKILL", () => {
  for (const point of ["append.after-insert.1", "append.after-insert.4", "append.before-commit"]) {
    it(`leaves nothing of the batch when the writer dies at ${point}`, async () => {
      const file = path.join(directory, `${point}.sqlite`)
      const result = runChild(file, point)
      expect(result.signal).toBe("SIGKILL")
      expect(await readBack(file)).toEqual([])
      const again = runChild(file)
      expect(again.status, again.stderr).toBe(0)
      const events = await readBack(file)
      expect(events.map((stored) => stored.event.id)).toEqual(History.smallRun().events.map((stored) => stored.event.id))
    })
  }
})
