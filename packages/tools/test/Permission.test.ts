/**
 * Node's permission model: a process allowed to read its program's files but not `/proc/self/fd`
 * imports the package (the look at `/proc`, which throws there, waits for a tool's first path and
 * falls back to resolving by path). Runs the built package in a child process.
 */
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { buildDist } from "../../../tools/test/built.ts"

const ROOT = fs.realpathSync(path.resolve(import.meta.dirname, "../../.."))
const CHILD = path.join(import.meta.dirname, "fixtures", "permission-child.mjs")
const PERMISSION = Number(process.versions.node.split(".")[0]) >= 22 ? "--permission" : "--experimental-permission"

describe("under Node's permission model", () => {
  beforeAll(() => buildDist("tools"), 240_000)

  it("imports without reading /proc at load", () => {
    const child = spawnSync(process.execPath, [PERMISSION, `--allow-fs-read=${ROOT}/*`, CHILD], { encoding: "utf8", timeout: 60_000 })
    assert.strictEqual(child.status, 0, child.stderr)
    assert.include(child.stdout.split(","), "read_file")
  })
})
