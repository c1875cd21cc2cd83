/**
 * `list_files` is never silently shorter (packages/tools/src/internal/list-files.ts): a directory
 * its user can read but not search (mode 0444) lists names whose entries cannot be described; the
 * call fails naming the first, never a listing without them. Run as a user the mode binds: this
 * process's own, or `nobody` (through `setpriv`) when it is root, which searches any directory.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"

const here = path.dirname(fileURLToPath(import.meta.url))
const tsxLoader = createRequire(import.meta.url).resolve("tsx")

const listAsUnprivileged = (root: string, listed: string): unknown => {
  const node = [process.execPath, "--conditions=@maka/source", "--import", tsxLoader, path.join(here, "children", "list-files.ts"), root, listed]
  const command = process.getuid?.() === 0 ? ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", ...node] : node
  const result = spawnSync(command[0]!, command.slice(1), { encoding: "utf8", env: { ...process.env, HOME: os.tmpdir() }, timeout: 60_000 })
  expect(result.stderr).toBe("")
  return JSON.parse(result.stdout)
}

describe("list_files on a directory that can be read but not searched", () => {
  it("fails naming an entry it cannot describe, never lists fewer", () => {
    const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "maka-list-")))
    try {
      fs.chmodSync(root, 0o755)
      const locked = path.join(root, "locked")
      fs.mkdirSync(locked)
      for (const name of ["a.txt", "b.txt", "c.txt"]) fs.writeFileSync(path.join(locked, name), name)
      fs.chmodSync(locked, 0o444)
      const result = listAsUnprivileged(root, "locked")
      expect(result).toEqual({ failure: expect.stringContaining("locked/a.txt: permission denied") })
      // The root, which it can search, lists as before.
      expect(listAsUnprivileged(root, ".")).toEqual({
        output: { format: "json", value: [{ name: "locked", type: "directory", size: fs.statSync(locked).size }] },
      })
    } finally {
      fs.chmodSync(path.join(root, "locked"), 0o755)
      fs.rmSync(root, { recursive: true, force: true })
    }
  }, 60_000)
})
