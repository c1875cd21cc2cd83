import * as fs from "node:fs"
import { afterEach, describe, expect, it } from "vitest"
import { folder, maka, NOWHERE_BASE_URL, type Folder } from "./support/cli.ts"

const folders: Array<Folder> = []
afterEach(() => {
  for (const created of folders.splice(0)) created.remove()
})

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
    expect(out).toMatch(/^ {4}resuming relay: \d+ steps left$/m)
    expect(out).toContain("the session called list_files and read_file, each once; its runs ended handoff_paused, then completed.")
    const kept = /kept in (\S+)$/m.exec(out)?.[1]
    expect(kept).toBeDefined()
    expect(fs.existsSync(`${kept}/events.sqlite`)).toBe(true)
    fs.rmSync(kept!, { recursive: true, force: true })
  }, 180_000)
})
