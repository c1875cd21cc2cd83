/**
 * Output to a terminal (docs/cli.md §10.1 "Output"): control characters from the log are shown as
 * visible escapes on a terminal, and pass through unchanged to a pipe.
 */
import { spawn, spawnSync } from "node:child_process"
import { EventEmitter } from "node:events"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { afterOutput, processSink, terminalSafe } from "../src/internal/terminal.ts"
import { bin, eventLines, folder, maka, type Folder } from "./support/cli.ts"

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

  it("shows the bidirectional embeddings, overrides and isolates and the line and paragraph separators as escapes", () => {
    expect(terminalSafe("evil\u202egnp.exe \u202a\u202b\u202c\u202d \u2066\u2067\u2068\u2069 a\u2028b\u2029c")).toBe(
      "evil\\u202egnp.exe \\u202a\\u202b\\u202c\\u202d \\u2066\\u2067\\u2068\\u2069 a\\u2028b\\u2029c",
    )
  })

  it("leaves text without controls as it is, other scripts and emoji included", () => {
    const text = "ünïcödé — 漢字 🙂 👩\u200d👩\u200d👧 عربي\u200f \"quoted\" \\u001b is text\n"
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

  it("keeps a CR LF split across two writes as a line end on a terminal, and shows a lone CR", () => {
    const out = stream(true)
    const err = stream(true)
    const sink = processSink(out.stream, err.stream)
    sink.out("abcd\r")
    sink.out("\nefgh\r")
    sink.out("ijkl\r")
    sink.flush()
    expect(out.written.join("")).toBe("abcd\r\nefgh\\rijkl\\r")
    // A pipe gets every write as it comes.
    const piped = stream(false)
    const pipeSink = processSink(piped.stream, err.stream)
    pipeSink.out("abcd\r")
    expect(piped.written).toEqual(["abcd\r"])
  })

  it("takes no more text on a stream whose write failed, and says so for stdout only", () => {
    const failing = () => {
      const written: Array<string> = []
      let onError: ((error: Error) => void) | undefined
      return {
        written,
        fail: () => onError?.(Object.assign(new Error("write EPIPE"), { code: "EPIPE" })),
        stream: { isTTY: false, write: (text: string) => written.push(text), on: (_event: "error", listener: (error: Error) => void) => (onError = listener) },
      }
    }
    const out = failing()
    const err = failing()
    const sink = processSink(out.stream, err.stream)
    sink.out("one\n")
    err.fail()
    sink.err("lost\n")
    expect(sink.outClosed?.aborted).toBe(false)
    sink.out("two\n")
    out.fail()
    out.fail()
    expect(sink.outClosed?.aborted).toBe(true)
    sink.out("three\n")
    expect(out.written).toEqual(["one\n", "two\n"])
    expect(err.written).toEqual([])
  })

  it("keeps the code of stdout's first failure, and maps a lost output to exit 1 unless it was a reader going away", () => {
    let fail: ((error: Error) => void) | undefined
    const sink = processSink({ isTTY: false, write: () => true, on: (_event, listener) => (fail = listener) }, { write: () => true })
    expect(sink.outFailure()).toBeUndefined()
    fail?.(Object.assign(new Error("write ENOSPC"), { code: "ENOSPC" }))
    fail?.(Object.assign(new Error("write EPIPE"), { code: "EPIPE" }))
    expect(sink.outFailure()).toBe("ENOSPC")
    expect(afterOutput(0, undefined)).toEqual({ code: 0 })
    expect(afterOutput(3, undefined)).toEqual({ code: 3 })
    expect(afterOutput(0, "EPIPE")).toEqual({ code: 0 })
    expect(afterOutput(0, "ENOSPC")).toEqual({ code: 1, line: "maka: error: could not write to stdout (ENOSPC); what was printed is incomplete\n" })
    expect(afterOutput(130, "EIO").code).toBe(130)
    expect(afterOutput(130, "EIO").line).toContain("(EIO)")
  })

  it("settles its output once the writes so far went through or failed, or once the given signal aborts", async () => {
    // A stream that holds each write's callback until the test lets it go, and reports a failure.
    const held: Array<(error?: Error | null) => void> = []
    let fail: ((error: Error) => void) | undefined
    const sink = processSink(
      { isTTY: false, write: (_text: string, written?: (error?: Error | null) => void) => (written !== undefined && held.push(written), true), on: (_event, listener) => (fail = listener) },
      { write: () => true },
    )
    const listening = (signal: AbortSignal) => {
      let count = 0
      const add = signal.addEventListener.bind(signal)
      const remove = signal.removeEventListener.bind(signal)
      signal.addEventListener = (...args: Parameters<typeof add>) => (count++, add(...args))
      signal.removeEventListener = (...args: Parameters<typeof remove>) => (count--, remove(...args))
      return () => count
    }
    // Whether the wait has settled once the turns of the event loop a settling wait takes are over.
    const state = async (promise: Promise<void>) => {
      let settled = false
      void promise.then(() => {
        settled = true
      })
      for (let turn = 0; turn < 5; turn++) await new Promise((resolve) => setImmediate(resolve))
      return settled ? "settled" : "waiting"
    }
    // Written through: settles, and leaves no listener on the signal.
    const stop = new AbortController()
    const listeners = listening(stop.signal)
    const through = sink.outSettled!(stop.signal)
    expect(await state(through)).toBe("waiting")
    held.shift()!(null)
    expect(await state(through)).toBe("settled")
    expect(listeners()).toBe(0)
    // A reader that stopped reading: only the signal ends the wait.
    const stalled = sink.outSettled!(stop.signal)
    expect(await state(stalled)).toBe("waiting")
    stop.abort()
    expect(await state(stalled)).toBe("settled")
    expect(listeners()).toBe(0)
    expect(await state(sink.outSettled!(stop.signal))).toBe("settled")
    // A failed write: Node emits its error event on a later tick than the callback, and the wait
    // settles after it, so outClosed is aborted by then.
    held.shift()
    const failing = sink.outSettled!()
    held.shift()!(Object.assign(new Error("write EPIPE"), { code: "EPIPE" }))
    process.nextTick(() => fail?.(Object.assign(new Error("write EPIPE"), { code: "EPIPE" })))
    await failing
    expect(sink.outClosed?.aborted).toBe(true)
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

describe("maka whose reader goes away", () => {
  let current: Folder | undefined
  afterEach(() => current?.remove())

  /** Runs maka with its stdout closed by the reader after the first line, as `maka … | head -1` does. */
  const headOne = (args: ReadonlyArray<string>, cwd: string): Promise<{ readonly code: number | null; readonly stderr: string; readonly first: string }> =>
    new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [bin, ...args], { cwd, stdio: ["ignore", "pipe", "pipe"] })
      let first = ""
      let stderr = ""
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
        if (first !== "") return
        first = chunk.split("\n")[0]!
        child.stdout.destroy()
      })
      child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
      child.on("error", reject)
      child.on("close", (code) => resolve({ code, stderr, first }))
    })

  it("cancels a run as SIGINT does, with its terminal written and the session usable", async () => {
    const { root, workspace, db } = (current = folder())
    const cut = await headOne(["run", "--db", db, "--workspace", workspace, "--session", "p", "--json", "look around"], root)
    expect(JSON.parse(cut.first)).toMatchObject({ event: { fact: { kind: "invocation_opened" } } })
    expect(cut.stderr).not.toMatch(/EPIPE|internal error|\n\s+at /)
    expect(cut.code).toBe(130)
    expect(cut.stderr).toContain("cancelled")
    const stored = await maka(["events", "--db", db, "--session", "p", "--json"], { cwd: root })
    const facts = eventLines(stored.stdout).map((line) => line.event.fact)
    expect(facts.at(-1)).toMatchObject({ kind: "invocation_ended", outcome: { kind: "cancelled" } })
    // Nothing was left unsettled: the next turn runs.
    const next = await maka(["run", "--db", db, "--workspace", workspace, "--session", "p", "again"], { cwd: root })
    expect(next.code, next.stderr).toBe(0)
  }, 60_000)

  /** Runs maka with stdout on /dev/full: every write fails with ENOSPC. */
  const fullDisk = (args: ReadonlyArray<string>, cwd: string): { readonly code: number | null; readonly stderr: string } => {
    const full = fs.openSync("/dev/full", "w")
    try {
      const result = spawnSync(process.execPath, [bin, ...args], { cwd, stdio: ["ignore", full, "pipe"], encoding: "utf8", timeout: 60_000 })
      return { code: result.status, stderr: result.stderr }
    } finally {
      fs.closeSync(full)
    }
  }

  it("does not exit 0 when its output was lost to a full disk, and leaves the session usable", async () => {
    const { root, workspace, db } = (current = folder())
    const run = fullDisk(["run", "--db", db, "--workspace", workspace, "--session", "f", "--json", "look around"], root)
    expect(run.stderr).toContain("maka: error: could not write to stdout (ENOSPC)")
    expect(run.stderr).not.toMatch(/internal error|\n\s+at /)
    expect(run.code === 130 || run.code === 1, `exit ${run.code}`).toBe(true)
    const stored = await maka(["events", "--db", db, "--session", "f", "--json"], { cwd: root })
    expect(eventLines(stored.stdout).at(-1)?.event.fact).toMatchObject({ kind: "invocation_ended" })
    const events = fullDisk(["events", "--db", db, "--session", "f", "--json"], root)
    expect(events.code).toBe(1)
    expect(events.stderr).toBe("maka: error: could not write to stdout (ENOSPC); what was printed is incomplete\n")
    const next = await maka(["run", "--db", db, "--workspace", workspace, "--session", "f", "again"], { cwd: root })
    expect(next.code, next.stderr).toBe(0)
  }, 60_000)

  it("ends a read command quietly", async () => {
    const { root, workspace, db } = (current = folder())
    expect((await maka(["run", "--db", db, "--workspace", workspace, "--session", "q", "look around"], { cwd: root })).code).toBe(0)
    const cut = await headOne(["events", "--db", db, "--session", "q", "--json"], root)
    expect(cut.stderr).toBe("")
    expect(cut.code).toBe(0)
  }, 60_000)
})

describe("processSink's outDrained", () => {
  /** A stream whose buffer is full after every write, as a pipe nobody reads. */
  const fullStream = () => {
    const emitter = new EventEmitter()
    return Object.assign(emitter, { isTTY: false, write: () => false })
  }

  it("is undefined while stdout takes what it is given, and a promise from a write it held back until it drains", async () => {
    const stdout = fullStream()
    const taking = { isTTY: false, write: () => true }
    expect(processSink(taking, taking).outDrained!()).toBeUndefined()
    const sink = processSink(stdout, taking)
    expect(sink.outDrained!()).toBeUndefined()
    sink.out("line\n")
    const drained = sink.outDrained!()
    expect(drained).toBeInstanceOf(Promise)
    let settled = false
    void drained!.then(() => (settled = true))
    await new Promise((resolve) => setTimeout(resolve, 20))
    expect(settled).toBe(false)
    stdout.emit("drain")
    await drained
    expect(sink.outDrained!()).toBeUndefined()
  })

  it("settles when stdout fails: a reader that went away never holds a command", async () => {
    const stdout = fullStream()
    const sink = processSink(stdout, { isTTY: false, write: () => true })
    sink.out("line\n")
    const drained = sink.outDrained!()
    stdout.emit("error", Object.assign(new Error("write EPIPE"), { code: "EPIPE" }))
    await drained
    expect(sink.outClosed?.aborted).toBe(true)
    sink.out("more\n")
    expect(sink.outDrained!()).toBeUndefined()
  })
})
