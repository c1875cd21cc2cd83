/**
 * The builtin tools where permissions bind, run as a user the modes bind: this process's own, or
 * `nobody` (through `setpriv`) when it is root, which reads and writes anything. `list_files` is
 * never silently shorter (packages/tools/src/internal/list-files.ts): a directory its user can read
 * but not search (mode 0444) lists names whose entries cannot be described; the call fails naming
 * the first, never a listing without them. `write_file` of a writable file in a folder it cannot
 * write says why it needs the folder.
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

const callAsUnprivileged = (tool: "list" | "write", root: string, target: string): unknown => {
  const node = [process.execPath, "--conditions=@maka/source", "--import", tsxLoader, path.join(here, "children", "builtin-call.ts"), tool, root, target]
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
      const result = callAsUnprivileged("list", root, "locked")
      expect(result).toEqual({ failure: expect.stringContaining("locked/a.txt: permission denied") })
      // The root, which it can search, lists as before.
      expect(callAsUnprivileged("list", root, ".")).toEqual({
        output: { format: "json", value: [{ name: "locked", type: "directory", size: fs.statSync(locked).size }] },
      })
    } finally {
      fs.chmodSync(path.join(root, "locked"), 0o755)
      fs.rmSync(root, { recursive: true, force: true })
    }
  }, 60_000)
})

describe("write_file of a writable file in a folder this user cannot write", () => {
  it("fails saying the file is written through a new one beside it, and leaves the file as it was", () => {
    const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "maka-write-")))
    try {
      fs.chmodSync(root, 0o755)
      const folder = path.join(root, "kept")
      fs.mkdirSync(folder)
      fs.writeFileSync(path.join(folder, "notes.txt"), "old")
      fs.chmodSync(path.join(folder, "notes.txt"), 0o666)
      fs.chmodSync(folder, 0o555)
      const result = callAsUnprivileged("write", root, "kept/notes.txt")
      expect(result).toEqual({
        failure: expect.stringContaining("kept/notes.txt: permission denied: a file is written through a new file beside it, which needs its folder writable"),
      })
      expect(fs.readFileSync(path.join(folder, "notes.txt"), "utf8")).toBe("old")
    } finally {
      fs.chmodSync(path.join(root, "kept"), 0o755)
      fs.rmSync(root, { recursive: true, force: true })
    }
  }, 60_000)
})
