/**
 * Output to a terminal (docs/cli.md §10.1 "Output"): control characters from the log are shown as
 * visible escapes on a terminal, and pass through unchanged to a pipe.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { processSink, terminalSafe } from "../src/internal/terminal.ts"
import { bin, folder, maka, type Folder } from "./support/cli.ts"

const ESCAPES = "a\u001b]0;title\u0007b \u001b[31mred\u001b[0m \u009b2J c\rd \u0008\u007f e\r\nf\tg\n"

describe("terminalSafe", () => {
  it("shows every control a terminal acts on as a visible escape, and keeps tab, line feed and CR LF", () => {
    expect(terminalSafe(ESCAPES)).toBe("a\\u001b]0;title\\u0007b \\u001b[31mred\\u001b[0m \\u009b2J c\\rd \\u0008\\u007f e\r\nf\tg\n")
  })

  it("keeps a JSON line JSON: the escapes it writes are JSON's own, for DEL and C1 too", () => {
    const line = JSON.stringify({ text: "a\u007fb\u009bc\u0085d" })
    expect(line).toContain("\u007f")
    expect(JSON.parse(terminalSafe(line))).toEqual(JSON.parse(line))
  })

  it("leaves text without controls as it is, other scripts and emoji included", () => {
    const text = "ünïcödé — 漢字 🙂 \"quoted\" \\u001b is text\n"
    expect(terminalSafe(text)).toBe(text)
  })
})

describe("processSink", () => {
  const stream = (isTTY: boolean | undefined) => {
    const written: Array<string> = []
    return { written, stream: { isTTY, write: (text: string) => written.push(text) } }
  }

  it("escapes what goes to a terminal, on stdout and stderr alike", () => {
    const out = stream(true)
    const err = stream(true)
    const sink = processSink(out.stream, err.stream)
    sink.out(ESCAPES)
    sink.err("maka: \u001b[2J\n")
    expect(out.written).toEqual([terminalSafe(ESCAPES)])
    expect(err.written).toEqual(["maka: \\u001b[2J\n"])
  })

  it("writes to a pipe byte for byte", () => {
    const out = stream(undefined)
    const err = stream(false)
    const sink = processSink(out.stream, err.stream)
    sink.out(ESCAPES)
    sink.err(ESCAPES)
    expect(out.written).toEqual([ESCAPES])
    expect(err.written).toEqual([ESCAPES])
  })
})

describe("maka on a terminal", () => {
  let current: Folder | undefined
  afterEach(() => current?.remove())

  const message = "look \u001b]52;c;aGk=\u0007 here \u001b[2J"

  it("prints a message's escape sequences visibly on a terminal, and as stored to a pipe", async () => {
    const { root, workspace, db } = (current = folder())
    const piped = await maka(["run", "--db", db, "--workspace", workspace, "--session", "t", message], { cwd: root })
    expect(piped.code).toBe(0)
    // The offline model quotes the message: a pipe gets it as it is.
    expect(piped.stdout).toContain(message)
    // `script` runs the command on a pseudo-terminal and copies what it printed.
    const transcript = path.join(root, "transcript.txt")
    const shown = spawnSync(
      "script",
      ["-q", "-e", "-c", `${process.execPath} ${bin} inspect --db ${db} --session t --step 1`, transcript],
      { cwd: root, encoding: "utf8", env: { PATH: process.env["PATH"] ?? "" } },
    )
    expect(shown.status, shown.stderr).toBe(0)
    const printed = fs.readFileSync(transcript, "utf8")
    expect(printed).toContain("look \\u001b]52;c;aGk=\\u0007 here \\u001b[2J")
    expect(printed).not.toContain("\u001b]52")
  }, 60_000)
})
