/**
 * `maka chat` at a real terminal, `script`'s (util-linux), which passes this test's writes to it as
 * typing. A terminal that goes away (docs/cli.md §10.1 "Signals"): a closed window or SSH connection
 * hangs up the terminal mid-turn; the run is cancelled and sealed, and the command exits 130, never
 * aborted by Node's restore of a terminal that is gone (killing `script` closes its side, which hangs
 * up the command's). A pasted line longer than the terminal's line buffer, which the terminal cuts,
 * is reported and not sent.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterEach, describe, expect, it } from "vitest"
import { TERMINAL_LINE_PROBLEM } from "../src/internal/run-command.ts"
import { bin, eventLines, folder, maka, type Folder } from "./support/cli.ts"

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

/**
 * `maka ARGS` on a terminal of its own (`script`'s): the test writes to `terminal.stdin` as typing;
 * `ended()` is how the command ended (a hangup does not end the wrapper that tells it), `stderr()`
 * what it wrote there; `shows(text)` resolves once the terminal showed `text`.
 */
const atTerminal = (made: Folder, args: ReadonlyArray<string>, env: Readonly<Record<string, string>> = {}) => {
  const status = path.join(made.root, "status.json")
  const errors = path.join(made.root, "stderr.txt")
  const command = [process.execPath, wrapper, status, errors, process.execPath, bin, ...args]
  const terminal = spawn("script", ["-q", "-c", command.map((word) => `'${word}'`).join(" "), "/dev/null"], {
    cwd: made.root,
    stdio: ["pipe", "pipe", "inherit"],
    env: { ...process.env, ...env },
  })
  let shown = ""
  const waiting: Array<{ readonly text: string; readonly resolve: () => void }> = []
  terminal.stdout.on("data", (chunk: Buffer) => {
    shown += chunk.toString("utf8")
    for (const waiter of waiting.filter((item) => shown.includes(item.text))) {
      waiting.splice(waiting.indexOf(waiter), 1)
      waiter.resolve()
    }
  })
  return {
    terminal,
    shows: (text: string) => new Promise<void>((resolve) => (shown.includes(text) ? resolve() : waiting.push({ text, resolve }))),
    ended: async () => JSON.parse(await appears(status, 20_000)) as { code: number | null; signal: string | null },
    stderr: () => fs.readFileSync(errors, "utf8"),
  }
}

describe("a terminal that hangs up", () => {
  it("cancels maka chat's turn, seals it, and exits 130 without an abort", async () => {
    const made = folder()
    folders.push(made)
    const { root, workspace, db } = made
    const chat = atTerminal(made, ["chat", "--db", db, "--workspace", workspace, "--session", "h1"], { MAKA_OFFLINE_DELAY_MS: "300" })
    const streaming = chat.shows("You asked")
    // Typed once the chat is up: a line before it would be read all the same.
    chat.terminal.stdin.write("first\n")
    await streaming
    chat.terminal.kill("SIGKILL")
    const ended = await chat.ended()
    const stderr = chat.stderr()
    expect(stderr).not.toContain("Assertion failed")
    expect(ended).toEqual({ code: 130, signal: null })
    expect(stderr).toContain("cancelled")
    const sessions = await maka(["sessions", "--db", db], { cwd: root })
    expect(sessions.stdout).toMatch(/^h1 {2}idle {2}1 invocation, /m)
  })

  it("reports a line the terminal may have cut and does not send it; the next line is a turn", async () => {
    const made = folder()
    folders.push(made)
    const { root, workspace, db } = made
    const chat = atTerminal(made, ["chat", "--db", db, "--workspace", workspace, "--session", "p1"])
    const answered = chat.shows('You asked: "short"')
    // Pasted in pieces, as a terminal receives a paste: the terminal keeps 4,095 bytes of the line.
    const long = "x".repeat(6_000)
    for (let offset = 0; offset < long.length; offset += 1_000) chat.terminal.stdin.write(long.slice(offset, offset + 1_000))
    chat.terminal.stdin.write("\nshort\n")
    await answered
    // End of input at a terminal: Ctrl-D.
    chat.terminal.stdin.write("\u0004")
    const ended = await chat.ended()
    chat.terminal.kill("SIGKILL")
    expect(chat.stderr()).toContain(`maka: ${TERMINAL_LINE_PROBLEM}; the line is skipped`)
    expect(ended).toEqual({ code: 0, signal: null })
    const events = await maka(["events", "--db", db, "--session", "p1", "--json"], { cwd: root })
    const texts = eventLines(events.stdout).flatMap((line) =>
      line.event.fact.kind === "invocation_opened" ? [(line.event.fact["input"] as { content: { text: string } }).content.text] : [],
    )
    expect(texts).toEqual(["short"])
  })

  it("refuses a maka run - message with a line the terminal may have cut, before anything is opened", async () => {
    const made = folder()
    folders.push(made)
    const { workspace, db } = made
    const run = atTerminal(made, ["run", "--db", db, "--workspace", workspace, "-"])
    const long = "y".repeat(6_000)
    for (let offset = 0; offset < long.length; offset += 1_000) run.terminal.stdin.write(long.slice(offset, offset + 1_000))
    // The line, then end of input (Ctrl-D at the start of the next line).
    run.terminal.stdin.write("\n\u0004")
    const ended = await run.ended()
    run.terminal.kill("SIGKILL")
    expect(run.stderr()).toBe(`maka: ${TERMINAL_LINE_PROBLEM}\n`)
    expect(ended).toEqual({ code: 2, signal: null })
    expect(fs.existsSync(db)).toBe(false)
  })
})
