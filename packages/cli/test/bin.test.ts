import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { beforeAll, describe, expect, it } from "vitest"

// The built `maka` binary, run with plain `node` from a directory outside the repository (DESIGN.md §2).
const packageRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const repositoryRoot = path.resolve(packageRoot, "../..")
const bin = path.join(packageRoot, "dist/bin.js")

const maka = (...args: ReadonlyArray<string>) => {
  const result = spawnSync(process.execPath, [bin, ...args], { cwd: os.tmpdir(), encoding: "utf8", timeout: 30_000 })
  return { status: result.status, stdout: result.stdout, stderr: result.stderr }
}

beforeAll(() => {
  const tsc = path.join(repositoryRoot, "node_modules/.bin/tsc")
  const build = spawnSync(tsc, ["-b", "packages/cli"], { cwd: repositoryRoot, encoding: "utf8", timeout: 240_000 })
  if (build.status !== 0) {
    throw new Error(`tsc -b packages/cli failed (${build.status ?? build.signal}):\n${build.stdout}${build.stderr}`)
  }
}, 300_000)

describe("the maka binary", () => {
  it("prints the usage with --help and exits 0", () => {
    const result = maka("--help")
    expect(result.status).toBe(0)
    expect(result.stdout).toContain("Usage: maka <command>")
    expect(result.stdout).toContain("run")
  })

  it("refuses an unknown command with exit 2 and a message on stderr", () => {
    const result = maka("no-such-command")
    expect(result.status).toBe(2)
    expect(result.stderr).toContain("no-such-command")
    expect(result.stdout).toBe("")
  })

  it("prints the package version with --version", () => {
    const { version } = JSON.parse(fs.readFileSync(path.join(packageRoot, "package.json"), "utf8")) as { version: string }
    const result = maka("--version")
    expect(result.status).toBe(0)
    expect(result.stdout).toContain(version)
    expect(result.stdout).toMatch(/\d+\.\d+\.\d+/)
  })
})
