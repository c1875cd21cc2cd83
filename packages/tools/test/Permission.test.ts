/**
 * Node's permission model: a process allowed to read its program's files but not `/proc/self/fd`
 * imports the package (the look at `/proc`, which throws there, waits for a tool's first path and
 * falls back to resolving by path). Runs the built package in a child process.
 */
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"

const ROOT = fs.realpathSync(path.resolve(import.meta.dirname, "../../.."))
const CHILD = path.join(import.meta.dirname, "fixtures", "permission-child.mjs")
const PERMISSION = Number(process.versions.node.split(".")[0]) >= 22 ? "--permission" : "--experimental-permission"

describe("under Node's permission model", () => {
  // The built package runs in the child: built first (incremental; the cli project's setup does it too).
  beforeAll(() => {
    const build = spawnSync(path.join(ROOT, "node_modules/.bin/tsc"), ["-b", "packages/tools"], { cwd: ROOT, encoding: "utf8", timeout: 240_000 })
    if (build.status !== 0) throw new Error(`tsc -b packages/tools failed:\n${build.stdout}${build.stderr}`)
  }, 240_000)

  it("imports without reading /proc at load", () => {
    const child = spawnSync(process.execPath, [PERMISSION, `--allow-fs-read=${ROOT}/*`, CHILD], { encoding: "utf8", timeout: 60_000 })
    assert.strictEqual(child.status, 0, child.stderr)
    assert.include(child.stdout.split(","), "read_file")
  })
})
