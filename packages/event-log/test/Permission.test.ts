/**
 * Node's permission model without `--allow-child-process`: a SQLite writer cannot start its lease's
 * keeper, and the open fails saying so and what to allow, writing nothing. Runs the built package in
 * a child process.
 */
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const ROOT = fs.realpathSync(path.resolve(import.meta.dirname, "../../.."))
const CHILD = path.join(import.meta.dirname, "fixtures", "permission-child.mjs")
const PERMISSION = Number(process.versions.node.split(".")[0]) >= 22 ? "--permission" : "--experimental-permission"

describe("under Node's permission model", () => {
  // The built package runs in the child: built first (incremental; the cli project's setup does it too).
  beforeAll(() => {
    const build = spawnSync(path.join(ROOT, "node_modules/.bin/tsc"), ["-b", "packages/event-log"], { cwd: ROOT, encoding: "utf8", timeout: 240_000 })
    if (build.status !== 0) throw new Error(`tsc -b packages/event-log failed:\n${build.stdout}${build.stderr}`)
  }, 240_000)

  it("a writer that may not start a child process is refused naming the permission, and writes nothing", () => {
    const directory = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "maka-permission-")))
    try {
      const child = spawnSync(
        process.execPath,
        [
          "--no-warnings",
          PERMISSION,
          `--allow-fs-read=${ROOT}/`,
          `--allow-fs-read=${directory}/`,
          `--allow-fs-write=${directory}/`,
          "--allow-addons",
          CHILD,
          path.join(directory, "log.db"),
        ],
        { encoding: "utf8", timeout: 60_000 },
      )
      assert.strictEqual(child.status, 0, child.stderr)
      assert.include(child.stdout, "the lease keeper (a node child process every SQLite writer runs) could not start")
      assert.include(child.stdout, "allow it with --allow-child-process")
      assert.deepStrictEqual(fs.readdirSync(directory), [])
    } finally {
      fs.rmSync(directory, { recursive: true, force: true })
    }
  })
})
