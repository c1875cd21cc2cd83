import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { bin, eventLines, folder, maka, signalWhenStill, when, type Folder } from "./support/cli.ts"

const folders: Array<Folder> = []
const fresh = () => {
  const created = folder()
  folders.push(created)
  return created
}
afterEach(() => {
  for (const created of folders.splice(0)) created.remove()
})

const invocationsOf = async (root: string, db: string, session: string) => {
  const lines = eventLines((await maka(["events", "--db", db, "--session", session, "--json"], { cwd: root })).stdout)
  return {
    lines,
    openings: lines.filter((line) => line.event.fact.kind === "invocation_opened"),
    endings: lines.filter((line) => line.event.fact.kind === "invocation_ended"),
  }
}

describe("maka chat", () => {
  it("runs one turn per line of stdin in one session, and ends with the input (exit 0)", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "c"], { cwd: root, input: "first question\n\nsecond question\n" })
    expect(result.code).toBe(0)
    expect(result.stdout).toContain('You asked: "first question"')
    expect(result.stdout).toContain('You asked: "second question"')
    const { openings, endings } = await invocationsOf(root, db, "c")
    expect(openings.map((line) => line.event.fact["input"].content.text)).toEqual(["first question", "second question"])
    expect(endings.map((line) => line.event.fact["outcome"].kind)).toEqual(["completed", "completed"])
  })

  it("ends a line only at \\n, as maka run reads: a \\r before it is dropped, a lone \\r is text, a last line needs none", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "c"], { cwd: root, input: "\ufeffalpha\rbeta\none\r\n\ufefflast" })
    expect(result.code).toBe(0)
    const { openings } = await invocationsOf(root, db, "c")
    // A byte-order mark that begins the input is no text of its first line; one later is text.
    expect(openings.map((line) => line.event.fact["input"].content.text)).toEqual(["alpha\rbeta", "one", "\ufefflast"])
  })

  it("delivers a line entered while a turn runs to that turn as steering", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "s"], {
      cwd: root,
      env: { MAKA_OFFLINE_DELAY_MS: "100" },
      input: { open: "look around\n" },
      onOutput: when(
        (output) => output.stderr.includes("tool: list_files"),
        (child) => child.stdin!.end("and mind the notes\n"),
      ),
    })
    expect(result.code).toBe(0)
    const { lines, openings } = await invocationsOf(root, db, "s")
    expect(openings).toHaveLength(1)
    const steered = lines.filter((line) => line.event.fact.kind === "message_steered")
    expect(steered.map((line) => line.event.fact["message"].content.text)).toEqual(["and mind the notes"])
    expect(result.stderr).toContain("steered: and mind the notes")
  })

  it("keeps the lines' order: a line waiting for a turn of its own keeps a later line from being steered ahead of it", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "o"], {
      cwd: root,
      env: { MAKA_OFFLINE_DELAY_MS: "100" },
      // The second line comes with the first, before the first turn runs: it waits for a turn of its
      // own, and so does the third, typed while the first turn runs.
      input: { open: "first\nsecond\n" },
      onOutput: when(
        (output) => output.stderr.includes("tool: list_files"),
        (child) => child.stdin!.end("third\n"),
      ),
    })
    expect(result.code, result.stderr).toBe(0)
    const { lines } = await invocationsOf(root, db, "o")
    const typed = lines.flatMap((line) => {
      const fact = line.event.fact
      if (fact.kind === "invocation_opened") return [fact["input"].content.text as string]
      if (fact.kind === "message_steered") return [fact["message"].content.text as string]
      return []
    })
    expect(typed).toEqual(["first", "second", "third"])
  })

  it("reports a line over the limit typed while a turn runs when it comes, and a later steered line sets the exit code", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "b"], {
      cwd: root,
      env: { MAKA_OFFLINE_DELAY_MS: "100" },
      input: { open: "first\n" },
      onOutput: when(
        (output) => output.stderr.includes("tool: list_files"),
        (child) => child.stdin!.end(`${"x".repeat(70_000)}\nafter the long one\n`),
      ),
    })
    expect(result.code, result.stderr).toBe(0)
    expect(result.stderr).toContain("maka: the message is 70000 bytes of UTF-8; a message holds at most 65536; the line is skipped\n")
    const { lines, openings } = await invocationsOf(root, db, "b")
    expect(openings).toHaveLength(1)
    const steered = lines.filter((line) => line.event.fact.kind === "message_steered")
    expect(steered.map((line) => line.event.fact["message"].content.text)).toEqual(["after the long one"])
  })

  it("SIGINT cancels the current turn and ends the chat with exit 130", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "x", "--json"], {
      cwd: root,
      env: { MAKA_OFFLINE_DELAY_MS: "200" },
      input: { open: "hello\nnext\n" },
      onOutput: when((output) => output.stdout.includes('"kind":"model_requested"'), (child) => child.kill("SIGINT")),
    })
    expect(result.code).toBe(130)
    const { openings, endings } = await invocationsOf(root, db, "x")
    expect(openings).toHaveLength(1)
    expect(endings.map((line) => line.event.fact["outcome"])).toEqual([{ kind: "cancelled", source: "runtime_cancellation" }])
  })

  it("ends with exit 130 when its stdout's reader is gone (`maka chat | false`): no turn opens, no log is made", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "p"], {
      cwd: root,
      input: "one\ntwo\nthree\n",
      stdoutClosed: true,
    })
    expect(result.code).toBe(130)
    expect(fs.existsSync(db)).toBe(false)
  })

  it("ends on signals while its output waits for a reader that stopped reading, and opens no next turn", async () => {
    const { root, workspace, db } = fresh()
    // Each turn's --json lines carry its 60 KB message: a few turns fill the pipe nobody reads.
    const lines = Array.from({ length: 16 }, (_, index) => `${String.fromCharCode(97 + index).repeat(60_000)}\n`).join("")
    const count = async (kind: string) =>
      eventLines((await maka(["events", "--db", db, "--session", "u", "--json"], { cwd: root })).stdout).filter(
        (line) => line.event.fact.kind === kind,
      ).length
    let openedBeforeSignals = -1
    const result = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "u", "--json"], {
      cwd: root,
      input: lines,
      stdoutUnread: true,
      // Once no turn has ended for three looks in a row, the chat waits for its output before the
      // next: signals, again and again, until it exits (after it ended, the second stops the wait
      // for its last output too).
      onSpawn: (child) =>
        signalWhenStill(child, {
          measure: () => count("invocation_ended"),
          started: (ended) => ended > 0,
          beforeSignals: async () => {
            openedBeforeSignals = await count("invocation_opened")
          },
        }),
    })
    expect(result.code).toBe(130)
    const { openings, endings } = await invocationsOf(root, db, "u")
    // No turn opened once the signals began.
    expect(openings).toHaveLength(openedBeforeSignals)
    expect(openings.length).toBeLessThan(16)
    // Every turn opened ended; on a machine slow enough that a turn outlasted the looks, the last one
    // may have been cancelled by the first signal instead.
    const kinds = endings.map((line) => line.event.fact["outcome"].kind as string)
    expect(kinds).toHaveLength(openings.length)
    expect(kinds.slice(0, -1).every((kind) => kind === "completed")).toBe(true)
    expect(["completed", "cancelled"]).toContain(kinds.at(-1))
  }, 60_000)

  it("SIGTERM hands the current turn off and ends the chat with exit 75; the next line is not sent", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "y", "--json"], {
      cwd: root,
      env: { MAKA_OFFLINE_DELAY_MS: "40" },
      input: { open: "What is this project?\nnext\n" },
      onOutput: when((output) => output.stdout.includes('"kind":"tool_dispatched"'), (child) => child.kill("SIGTERM")),
    })
    expect(result.stderr).toContain("continue it with: maka resume --session y")
    expect(result.code).toBe(75)
    const { openings, endings } = await invocationsOf(root, db, "y")
    expect(openings).toHaveLength(1)
    expect(endings.map((line) => line.event.fact["outcome"].kind)).toEqual(["handoff_paused"])
  })

  it("SIGTERM during a turn that ends before its next step boundary ends the chat after it (exit 0); the next line is not sent", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "z", "--json"], {
      cwd: root,
      env: { MAKA_OFFLINE_DELAY_MS: "40" },
      input: "What is this project?\nnext\n",
      // The answer streams in the turn's last step: no step boundary comes after it.
      onOutput: when((output) => output.stdout.includes('"kind":"part_delta"'), (child) => child.kill("SIGTERM")),
    })
    expect(result.stderr).toContain("handing off at the next step boundary")
    expect(result.code).toBe(0)
    const { openings, endings } = await invocationsOf(root, db, "z")
    expect(openings).toHaveLength(1)
    expect(endings.map((line) => line.event.fact["outcome"].kind)).toEqual(["completed"])
  })

  it("waits for a dozen lines, each typed after the last answer, without piling up listeners", async () => {
    const { root, workspace, db } = fresh()
    const turns = 12
    let sent = 1
    const result = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "long"], {
      cwd: root,
      input: { open: "question 1\n" },
      onOutput: (child, output) => {
        // The next line once the last one is answered, so the chat waits for each.
        if (!output.stdout.includes(`You asked: "question ${sent}"`)) return
        if (sent === turns) child.stdin!.end()
        else child.stdin!.write(`question ${++sent}\n`)
      },
    })
    expect(result.code).toBe(0)
    expect((await invocationsOf(root, db, "long")).endings).toHaveLength(turns)
    // Each wait used to add an abort listener that stayed: Node warned from the eleventh on.
    expect(result.stderr).not.toContain("MaxListenersExceededWarning")
  })

  it("ends with the refusal's one line and exit code, as maka run does, when a turn is refused", async () => {
    const { root, workspace, db } = fresh()
    const paused = await maka(["run", "--db", db, "--workspace", workspace, "--session", "p", "--json", "What is this project?"], {
      cwd: root,
      env: { MAKA_OFFLINE_DELAY_MS: "40" },
      onOutput: when((output) => output.stdout.includes('"kind":"tool_dispatched"'), (child) => child.kill("SIGTERM")),
    })
    expect(paused.code).toBe(75)
    // The paused session refuses a new turn until it is resumed.
    const run = await maka(["run", "--db", db, "--workspace", workspace, "--session", "p", "hello"], { cwd: root })
    const chat = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "p"], { cwd: root, input: "hello\nagain\n" })
    expect(run.code).not.toBe(0)
    expect(chat.code).toBe(run.code)
    expect(chat.stderr).toBe(run.stderr)
    expect(chat.stderr).not.toContain("internal error")
    expect(chat.stderr.trim().split("\n")).toHaveLength(1)
  })

  it("makes no log, no workspace marker and no session when its piped input holds no line (exit 0)", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["chat", "--db", db, "--workspace", workspace], { cwd: root, input: "\n  \n" })
    expect(result.code).toBe(0)
    expect(result.stderr).toBe("")
    expect(fs.existsSync(db)).toBe(false)
    expect(fs.existsSync(path.join(workspace, ".maka-workspace.json"))).toBe(false)
  })

  it("skips a line over the message limit with a message and goes on; exit 2 when the last line was skipped", async () => {
    const { root, workspace, db } = fresh()
    const long = "c".repeat(70_000)
    const limit = "the message is 70000 bytes of UTF-8; a message holds at most 65536; the line is skipped"
    // Only over-long lines: no log, no marker, exit 2.
    const none = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "c"], { cwd: root, input: `${long}\n` })
    expect(none.stderr).toBe(`maka: ${limit}\n`)
    expect(none.code).toBe(2)
    expect(fs.existsSync(db)).toBe(false)
    expect(fs.existsSync(path.join(workspace, ".maka-workspace.json"))).toBe(false)
    // Skipped between turns, the lines after it still run; the last line's turn gives the code.
    const between = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "c"], { cwd: root, input: `first\n${long}\nsecond\n` })
    expect(between.stderr).toContain(`maka: ${limit}\n`)
    expect(between.stdout).toContain('You asked: "first"')
    expect(between.stdout).toContain('You asked: "second"')
    expect(between.code).toBe(0)
    const { openings } = await invocationsOf(root, db, "c")
    expect(openings.map((line) => line.event.fact["input"].content.text)).toEqual(["first", "second"])
    const last = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "c"], { cwd: root, input: `third\n${long}\n` })
    expect(last.stdout).toContain('You asked: "third"')
    expect(last.code).toBe(2)
    // A line of many megabytes, multi-byte and with no line end till its last: counted as it comes,
    // never held whole nor searched again as it grows (it took minutes), and skipped the same way.
    const huge = "\u00e9".repeat(4 * 1024 * 1024)
    const big = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "c"], { cwd: root, input: `${huge}\r\nfourth\n` })
    expect(big.stderr.split("\n").filter((line) => line.includes("skipped"))).toEqual([
      `maka: the message is ${8 * 1024 * 1024} bytes of UTF-8; a message holds at most 65536; the line is skipped`,
    ])
    expect(big.stdout).toContain('You asked: "fourth"')
    expect(big.code).toBe(0)
    // Taken in its place among the lines: the last line skipped, the chat's code is 2.
    const bigLast = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "c"], { cwd: root, input: `fifth\nsixth\n${huge}\n` })
    expect(bigLast.stdout).toContain('You asked: "sixth"')
    expect(bigLast.code).toBe(2)
  }, 60_000)

  it("reads no further while enough lines wait for turns: lines piped faster than turns stay in the pipe", async () => {
    const { root, workspace, db } = fresh()
    // 2,000,000 lines, far more than a pipe, a socket and the streams hold: read all at once, they
    // filled memory. Written as one chunk, which stays unwritten on this side until the chat reads it.
    const flood = "x\n".repeat(2_000_000)
    let unread = 0
    const result = await maka(["chat", "--db", db, "--workspace", workspace, "--session", "f", "--tools", "none"], {
      cwd: root,
      env: { MAKA_OFFLINE_DELAY_MS: "200" },
      input: { open: flood },
      onOutput: when(
        (output) => output.stdout.includes('You asked: "x"'),
        (child) => {
          // Some turns in, the chat has stopped reading: most of the flood still waits on this side.
          setTimeout(() => {
            unread = child.stdin!.writableLength
            // The flood left unwritten meets the chat's end as EPIPE: expected, not a failure.
            child.stdin!.on("error", () => undefined)
            child.kill("SIGINT")
          }, 1_000)
        },
      ),
    })
    expect(result.code).toBe(130)
    expect(unread).toBe(flood.length)
  }, 60_000)

  it("refuses bad flags with exit 2 before reading any line", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["chat", "--db", db, "--workspace", workspace, "--max-steps", "0"], { cwd: root, input: "hi\n" })
    expect(result.code).toBe(2)
  })
})

describe("maka chat and maka run on a stdin that cannot be read", () => {
  it.each([
    ["chat", "maka: could not read stdin (EBADF); pipe the chat's lines on stdin, or run it at a terminal\n"],
    ["run", "maka: could not read the message from stdin (EBADF); give a MESSAGE, or pipe it on stdin\n"],
  ])("maka %s says why and exits 2, with nothing made", (command, line) => {
    const { root, workspace, db } = fresh()
    // A descriptor opened for writing only: every read of it fails with EBADF.
    const writeOnly = fs.openSync(path.join(root, "out.txt"), "w")
    try {
      const result = spawnSync(process.execPath, [bin, command, "--db", db, "--workspace", workspace], {
        cwd: root,
        stdio: [writeOnly, "pipe", "pipe"],
        encoding: "utf8",
        timeout: 30_000,
      })
      expect({ code: result.status, stdout: result.stdout, stderr: result.stderr }).toEqual({ code: 2, stdout: "", stderr: line })
    } finally {
      fs.closeSync(writeOnly)
    }
    expect(fs.existsSync(db)).toBe(false)
  })

  it.each([
    ["chat", "maka: could not read stdin (EISDIR); pipe the chat's lines on stdin, or run it at a terminal\n"],
    ["run", "maka: could not read the message from stdin (EISDIR); give a MESSAGE, or pipe it on stdin\n"],
  ])("maka %s on a directory as stdin says so (it reads as empty) and exits 2, with nothing made", (command, line) => {
    const { root, workspace, db } = fresh()
    const directory = fs.openSync(root, "r")
    try {
      const result = spawnSync(process.execPath, [bin, command, "--db", db, "--workspace", workspace], {
        cwd: root,
        stdio: [directory, "pipe", "pipe"],
        encoding: "utf8",
        timeout: 30_000,
      })
      expect({ code: result.status, stdout: result.stdout, stderr: result.stderr }).toEqual({ code: 2, stdout: "", stderr: line })
    } finally {
      fs.closeSync(directory)
    }
    expect(fs.existsSync(db)).toBe(false)
  })
})
