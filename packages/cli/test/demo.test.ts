import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { bin, folder, maka, NOWHERE_BASE_URL, type Folder } from "./support/cli.ts"

const folders: Array<Folder> = []
afterEach(() => {
  for (const created of folders.splice(0)) created.remove()
})

/** A test folder with an empty `tmp` in it: the demo's TMPDIR, so whatever it leaves behind is there. */
const withTemporaryFolder = (): { readonly root: string; readonly tmp: string } => {
  const created = folder()
  folders.push(created)
  const tmp = path.join(created.root, "tmp")
  fs.mkdirSync(tmp)
  return { root: created.root, tmp }
}

/** The ids of the processes alive whose command line mentions `text` (the demo's children name their log by path). */
const processesMentioning = (text: string): ReadonlyArray<number> =>
  execFileSync("ps", ["-ww", "-eo", "pid=,args="], { encoding: "utf8" })
    .split("\n")
    .filter((line) => line.includes(text))
    .map((line) => Number.parseInt(line.trim(), 10))

describe("maka demo", () => {
  it("tours a tool loop, a SIGKILL crash and its recovery, a compaction and a handoff offline, narrated, and exits 0", async () => {
    const created = folder()
    folders.push(created)
    // No endpoint configured, and none leaks in from the environment: the tour is offline.
    const result = await maka(["demo", "--keep"], { cwd: created.root, env: { MAKA_BASE_URL: NOWHERE_BASE_URL } })
    expect(result.stderr).toBe("")
    expect(result.code).toBe(0)
    const out = result.stdout
    expect(out).toContain("1. A tool loop.")
    expect(out).toContain('tool: list_files {"path":"."}')
    expect(out).toContain("Lantern")
    expect(out).toMatch(/The process died with SIGKILL after \d+ committed events/)
    expect(out).toMatch(/crash {2}unsealed/)
    expect(out).toMatch(/crash [0-9a-f-]{36} host_interrupted/)
    expect(out).toMatch(/crash {2}idle/)
    expect(out).toMatch(/input digest: sha256:[0-9a-f]{64} matches the rebuilt input/)
    expect(out).toContain("5. Compaction.")
    expect(out).toMatch(/^ {4}compacted: checkpoint [0-9a-f-]{36}, covers the history through event #\d+$/m)
    expect(out).toMatch(/^ {8}Continuation summary:\n {8}## Goal\n {8}- What is this project\?$/m)
    expect(out.match(/input digest: sha256:[0-9a-f]{64} matches the rebuilt input/g)).toHaveLength(2)
    expect(out).toContain("6. Handoff.")
    expect(out).toMatch(/SIGTERM after its first tool call; exit 75\)/)
    expect(out).toMatch(/^ {4}handed off with \d+ steps left; continue it with: maka resume --session relay$/m)
    expect(out).toMatch(/^ {4}relay {2}paused \(handoff\) {2}1 invocation/m)
    expect(out).toMatch(/^ {4}resuming relay: \d+ steps left, in the paused run's workspace \S+workspace$/m)
    expect(out).toContain("the session called list_files and read_file, each once; its runs ended handoff_paused, then completed.")
    const kept = /kept in (\S+)$/m.exec(out)?.[1]
    expect(kept).toBeDefined()
    expect(fs.existsSync(`${kept}/events.sqlite`)).toBe(true)
    fs.rmSync(kept!, { recursive: true, force: true })
  }, 180_000)

  it.each(["SIGINT", "SIGHUP"] as const)("%s while a child runs stops that child, removes the temporary folder, says so in one line and exits 130", async (signal) => {
    const { root, tmp } = withTemporaryFolder()
    let crashing: number | undefined
    let watch: NodeJS.Timeout | undefined
    try {
      const result = await maka(["demo"], {
        cwd: root,
        env: { TMPDIR: tmp },
        onOutput: (child, output) => {
          if (watch !== undefined || !output.stdout.includes("2. A crash.")) return
          // The run to crash is a child of the demo: the signal goes to the demo while that child is alive.
          watch = setInterval(() => {
            crashing = processesMentioning(tmp).at(0)
            if (crashing === undefined) return
            clearInterval(watch)
            child.kill(signal)
          }, 10)
        },
      })
      expect(crashing).toBeDefined()
      expect({ code: result.code, signal: result.signal, stderr: result.stderr }).toEqual({
        code: 130,
        signal: null,
        stderr: `maka: demo: cancelled by ${signal}\n`,
      })
      expect(result.stdout).not.toContain("Done.")
      expect(fs.readdirSync(tmp)).toEqual([])
      expect(processesMentioning(tmp)).toEqual([])
    } finally {
      clearInterval(watch)
      for (const pid of processesMentioning(tmp)) process.kill(pid, "SIGKILL")
    }
  }, 60_000)

  it("stops once its stdout is closed (`maka demo | head`): exit 130, the temporary folder removed, no child left", async () => {
    const { root, tmp } = withTemporaryFolder()
    const result = await maka(["demo"], {
      cwd: root,
      env: { TMPDIR: tmp },
      // Closing the read end makes the demo's next write fail with EPIPE.
      onOutput: (child, output) => {
        if (output.stdout !== "") child.stdout?.destroy()
      },
    })
    expect({ code: result.code, stderr: result.stderr }).toEqual({ code: 130, stderr: "maka: demo: stopped: stdout was closed\n" })
    expect(fs.readdirSync(tmp)).toEqual([])
    expect(processesMentioning(tmp)).toEqual([])
  }, 60_000)

  it("says its stdout failed, not that it was closed, when the disk is full: exit 130, nothing left behind", () => {
    const { root, tmp } = withTemporaryFolder()
    const full = fs.openSync("/dev/full", "w")
    try {
      const result = spawnSync(process.execPath, [bin, "demo"], {
        cwd: root,
        env: { ...process.env, TMPDIR: tmp },
        stdio: ["ignore", full, "pipe"],
        encoding: "utf8",
        timeout: 60_000,
      })
      expect({ code: result.status, stderr: result.stderr }).toEqual({
        code: 130,
        stderr:
          "maka: demo: stopped: stdout failed (ENOSPC)\n" +
          "maka: error: could not write to stdout (ENOSPC); what was printed is incomplete\n",
      })
    } finally {
      fs.closeSync(full)
    }
    expect(fs.readdirSync(tmp)).toEqual([])
    expect(processesMentioning(tmp)).toEqual([])
  }, 60_000)

  it("says in one line that no temporary folder can be made in a missing TMPDIR, and exits 1", async () => {
    const { root, tmp } = withTemporaryFolder()
    const missing = path.join(tmp, "missing")
    const result = await maka(["demo"], { cwd: root, env: { TMPDIR: missing } })
    expect(result.code).toBe(1)
    expect(result.stdout).toBe("")
    expect(result.stderr).toBe(
      `maka: demo: cannot make a temporary folder in ${missing}: no such file or directory (TMPDIR names the folder for temporary files)\n`,
    )
  })
})
