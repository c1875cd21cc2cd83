/**
 * A terminal that goes away (docs/cli.md §10.1 "Signals"): a closed window or SSH connection hangs up
 * `maka chat`'s terminal mid-turn. The run is cancelled and sealed, and the command exits 130, never
 * aborted by Node's restore of a terminal that is gone. The terminal is `script`'s (util-linux):
 * killing `script` closes its side, which hangs up the command's.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterEach, describe, expect, it } from "vitest"
import { bin, folder, maka, type Folder } from "./support/cli.ts"

const wrapper = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "hangup-wrapper.mjs")

const folders: Array<Folder> = []
afterEach(() => {
  for (const made of folders.splice(0)) made.remove()
})

/** Resolves once `file` exists (within `timeoutMs`), with its text. */
const appears = async (file: string, timeoutMs: number): Promise<string> => {
  for (let waited = 0; waited < timeoutMs; waited += 50) {
    if (fs.existsSync(file)) return fs.readFileSync(file, "utf8")
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error(`${file} did not appear within ${timeoutMs} ms`)
}

describe("a terminal that hangs up", () => {
  it("cancels maka chat's turn, seals it, and exits 130 without an abort", async () => {
    const made = folder()
    folders.push(made)
    const { root, workspace, db } = made
    const status = path.join(root, "status.json")
    const errors = path.join(root, "stderr.txt")
    const command = [process.execPath, wrapper, status, errors, process.execPath, bin, "chat", "--db", db, "--workspace", workspace, "--session", "h1"]
    const terminal = spawn("script", ["-q", "-c", command.map((word) => `'${word}'`).join(" "), "/dev/null"], {
      cwd: root,
      stdio: ["pipe", "pipe", "inherit"],
      env: { ...process.env, MAKA_OFFLINE_DELAY_MS: "300" },
    })
    let shown = ""
    const streaming = new Promise<void>((resolve) => {
      terminal.stdout.on("data", (chunk: Buffer) => {
        shown += chunk.toString("utf8")
        if (shown.includes("You asked")) resolve()
      })
    })
    // Typed once the chat is up: a line before it would be read all the same.
    terminal.stdin.write("first\n")
    await streaming
    terminal.kill("SIGKILL")
    const ended = JSON.parse(await appears(status, 20_000)) as { code: number | null; signal: string | null }
    const stderr = fs.readFileSync(errors, "utf8")
    expect(stderr).not.toContain("Assertion failed")
    expect(ended).toEqual({ code: 130, signal: null })
    expect(stderr).toContain("cancelled")
    const sessions = await maka(["sessions", "--db", db], { cwd: root })
    expect(sessions.stdout).toMatch(/^h1 {2}idle {2}1 invocation, /m)
  })
})
