import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { assert, describe, it } from "@effect/vitest"
import { Builtins, Defaults } from "@maka/tools"
import { Effect, Result } from "effect"
import { call, jsonOf, workspaceFixture } from "./fixtures.ts"

interface CommandResult {
  readonly exitCode: number | null
  readonly signal?: string
  readonly stdout: string
  readonly stderr: string
  readonly timedOut: boolean
}

const resultOf = (outcome: Parameters<typeof jsonOf>[0]): CommandResult => jsonOf(outcome) as CommandResult

/** The process group of `pid`, from /proc (field 5 of stat, after the parenthesised name). */
const processGroup = (pid: number | "self"): string =>
  fs.readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /s, "").split(" ")[2]!

/** Whether `pid` is gone or a zombie (killed, waiting to be reaped by whoever adopted it). */
const isDead = (pid: number): boolean => {
  if (!fs.existsSync(`/proc/${pid}/stat`)) return true
  const state = fs.readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /s, "")[0]
  return state === "Z" || state === "X"
}

/** Kills the process group `pid` belongs to (a command's shell leads it), if it is still there. */
const killGroupOf = (pid: number): void => {
  Result.try(() => process.kill(-Number(processGroup(pid)), "SIGKILL"))
}

/** Waits (by polling, not by asserting a duration) until `pid` is dead, or gives up. */
const awaitDeath = (pid: number) =>
  Effect.gen(function* () {
    for (let attempt = 0; attempt < 200 && !isDead(pid); attempt++) yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 25)))
    return isDead(pid)
  })

describe("run_command", () => {
  it.effect("runs /bin/sh -c in the workspace root and returns a non-zero exit as a result", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const tool = Builtins.runCommand(workspace)
      const result = resultOf(yield* call(tool, { command: "pwd; echo oops >&2; exit 3" }))
      assert.deepStrictEqual(result, { exitCode: 3, stdout: `${root}\n`, stderr: "oops\n", timedOut: false })
    }),
  )

  it.effect("hides the variables its workspace names from the shell, which inherits every other one", () =>
    Effect.gen(function* () {
      const { workspace } = yield* workspaceFixture
      process.env["MAKA_TEST_HIDDEN"] = "hidden-value"
      process.env["MAKA_TEST_SHOWN"] = "shown-value"
      try {
        const command = 'echo "[$MAKA_TEST_HIDDEN] [$MAKA_TEST_SHOWN]"'
        const hiding = Builtins.runCommand({ ...workspace, hiddenEnvironment: ["MAKA_TEST_HIDDEN"] })
        assert.strictEqual(resultOf(yield* call(hiding, { command })).stdout, "[] [shown-value]\n")
        // Nothing hidden: the whole environment, as before.
        assert.strictEqual(resultOf(yield* call(Builtins.runCommand(workspace), { command })).stdout, "[hidden-value] [shown-value]\n")
        // The host's own environment is left as it was.
        assert.strictEqual(process.env["MAKA_TEST_HIDDEN"], "hidden-value")
      } finally {
        delete process.env["MAKA_TEST_HIDDEN"]
        delete process.env["MAKA_TEST_SHOWN"]
      }
    }),
  )

  it.effect("runs the command in its own process group", () =>
    Effect.gen(function* () {
      const { workspace } = yield* workspaceFixture
      const result = resultOf(yield* call(Builtins.runCommand(workspace), { command: "cut -d' ' -f5 /proc/$$/stat; echo $$" }))
      const [group, pid] = result.stdout.trim().split("\n")
      assert.strictEqual(group, pid, "the shell leads its own group")
      assert.notStrictEqual(group, processGroup("self"))
    }),
  )

  it.effect("keeps at most 64 KiB of stdout and of stderr from a command with huge output", () =>
    Effect.gen(function* () {
      const { workspace } = yield* workspaceFixture
      const cap = Defaults.defaults.commandOutputBytes
      const result = resultOf(
        yield* call(Builtins.runCommand(workspace), {
          command: "head -c 3000000 /dev/zero | tr '\\0' a; head -c 200000 /dev/zero | tr '\\0' b >&2",
        }),
      )
      assert.strictEqual(result.exitCode, 0)
      assert.strictEqual(result.stdout, `${"a".repeat(cap)}\n[truncated: ${3_000_000 - cap} more bytes]`)
      assert.strictEqual(result.stderr, `${"b".repeat(cap)}\n[truncated: ${200_000 - cap} more bytes]`)
    }),
  )

  it.effect("counts what it cut in the command's own bytes, unreadable bytes and a split character included", () =>
    Effect.gen(function* () {
      const { workspace } = yield* workspaceFixture
      // 100,000 bytes of 0xff: each one shown as U+FFFD (1 byte of output, 3 of UTF-8).
      const result = resultOf(yield* call(Builtins.runCommand(workspace), { command: "head -c 100000 /dev/zero | tr '\\0' '\\377'" }))
      const [shown, note] = result.stdout.split("\n[truncated: ")
      const dropped = Number(/^(\d+) more bytes\]$/.exec(note ?? "")?.[1])
      assert.isTrue([...shown!].every((character) => character === "\uFFFD"))
      assert.strictEqual(shown!.length + dropped, 100_000)
      // A three-byte character split by the cap: its bytes kept are counted with the rest.
      const cap = Defaults.defaults.commandOutputBytes
      const split = resultOf(yield* call(Builtins.runCommand(workspace), { command: `head -c ${cap - 1} /dev/zero | tr '\\0' a; printf '\\342\\202\\254'` }))
      assert.strictEqual(split.stdout, `${"a".repeat(cap - 1)}\n[truncated: 3 more bytes]`)
      // Under the cap nothing is truncated: a last character cut by the command itself shows as
      // U+FFFD, and a leading byte-order mark is kept.
      const short = resultOf(yield* call(Builtins.runCommand(workspace), { command: "printf '\\357\\273\\277abc\\342'" }))
      assert.strictEqual(short.stdout, "\uFEFFabc\uFFFD")
      // Two bytes of a three-byte character are one U+FFFD, and nothing was cut either.
      const twoBytes = resultOf(yield* call(Builtins.runCommand(workspace), { command: "printf 'abc\\342\\202'" }))
      assert.strictEqual(twoBytes.stdout, "abc\uFFFD")
      // Cut where its JSON form would pass the limit (a control character is 6 bytes there), after a
      // three-byte character: the dropped bytes are the rest of the output's own.
      const mixed = resultOf(
        yield* call(Builtins.runCommand(workspace), { command: "for i in $(seq 10000); do printf '\\001\\001\\001\\342\\202\\254'; done" }),
      )
      const [kept, cutNote] = mixed.stdout.split("\n[truncated: ")
      assert.isTrue(kept!.endsWith("\u20AC"), "the cut falls after a three-byte character")
      assert.strictEqual(Buffer.byteLength(kept!) + Number(/^(\d+) more bytes\]$/.exec(cutNote ?? "")?.[1]), 60_000)
      // The cut right after the U+FFFD of an interrupted sequence (two bytes of a three-byte
      // character, then an ASCII one): those two bytes are kept, the rest is dropped.
      const interrupted = resultOf(
        yield* call(Builtins.runCommand(workspace), {
          command: "head -c 21000 /dev/zero | tr '\\0' '\\001'; head -c 4493 /dev/zero | tr '\\0' a; printf '\\342\\202X'; head -c 100 /dev/zero | tr '\\0' b",
        }),
      )
      const [shownCut, shownNote] = interrupted.stdout.split("\n[truncated: ")
      assert.isTrue(shownCut!.endsWith("a\uFFFD"), "the cut falls after the interrupted sequence")
      assert.strictEqual(shownNote, "101 more bytes]")
    }),
  )

  it.effect("waits out a timeout longer than a timer can hold (a raised maximum) instead of killing at once", () =>
    Effect.gen(function* () {
      const { workspace } = yield* workspaceFixture
      const tool = Builtins.runCommand(workspace, { commandMaxTimeoutSeconds: 40 * 86_400 })
      const result = resultOf(yield* call(tool, { command: "sleep 0.3; echo ok", timeoutSeconds: 30 * 86_400 }))
      assert.deepStrictEqual(result, { exitCode: 0, stdout: "ok\n", stderr: "", timedOut: false })
    }),
  )

  it.effect("kills the whole process group at the timeout, a background grandchild included", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const result = resultOf(
        yield* call(Builtins.runCommand(workspace), {
          command: "sleep 300 & echo $! > grandchild.pid; echo started; wait",
          timeoutSeconds: 1,
        }),
      )
      assert.deepInclude(result, { exitCode: null, signal: "SIGKILL", timedOut: true, stdout: "started\n" })
      const grandchild = Number(fs.readFileSync(path.join(root, "grandchild.pid"), "utf8"))
      assert.isTrue(Number.isInteger(grandchild) && grandchild > 0)
      assert.isTrue(yield* awaitDeath(grandchild), `sleep ${grandchild} survived the timeout`)
    }),
  )

  it.effect("kills the process group when the call's signal is aborted", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const controller = new AbortController()
      const watcher = setInterval(() => {
        if (fs.existsSync(path.join(root, "child.pid"))) controller.abort()
      }, 10)
      const outcome = yield* call(
        Builtins.runCommand(workspace),
        { command: "sleep 300 & echo $! > child.pid.tmp; mv child.pid.tmp child.pid; wait" },
        controller.signal,
      ).pipe(Effect.ensuring(Effect.sync(() => clearInterval(watcher))))
      const result = resultOf(outcome)
      assert.deepInclude(result, { exitCode: null, signal: "SIGKILL", timedOut: false })
      const child = Number(fs.readFileSync(path.join(root, "child.pid"), "utf8"))
      assert.isTrue(yield* awaitDeath(child))
    }),
  )

  it.effect("rejects an empty command or a timeout out of range", () =>
    Effect.gen(function* () {
      const { workspace } = yield* workspaceFixture
      const tool = Builtins.runCommand(workspace)
      for (const input of [{ command: "" }, { command: "true", timeoutSeconds: 0 }, { command: "true", timeoutSeconds: 3601 }]) {
        assert.strictEqual((yield* call(tool, input))._tag, "Invalid", JSON.stringify(input))
      }
    }),
  )

  it.effect("returns when the shell exits, leaving a background process that holds the pipes running", () =>
    Effect.gen(function* () {
      const { workspace } = yield* workspaceFixture
      const started = Date.now()
      const result = resultOf(yield* call(Builtins.runCommand(workspace), { command: "sleep 20 & echo $!; echo started" }))
      const elapsed = Date.now() - started
      const [pid, said] = result.stdout.trim().split("\n")
      const background = Number(pid)
      try {
        assert.strictEqual(said, "started")
        assert.deepInclude(result, { exitCode: 0, timedOut: false })
        assert.isBelow(elapsed, 10_000)
        assert.isFalse(isDead(background), "the background process is left running")
      } finally {
        process.kill(background, "SIGKILL")
      }
    }),
  )

  it.effect("leaves a background process able to write after the call returned (no broken pipe)", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      // Writes twice to the output it inherited, well after the call has returned, then leaves a mark.
      const command = "(sleep 0.4; echo one; sleep 0.4; echo two >&2; touch survived) & echo $!"
      const result = resultOf(yield* call(Builtins.runCommand(workspace), { command }))
      const background = Number(result.stdout.trim())
      try {
        assert.deepInclude(result, { exitCode: 0, timedOut: false })
        for (let waited = 0; !fs.existsSync(path.join(root, "survived")) && waited < 5_000; waited += 50) {
          yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 50)))
        }
        assert.isTrue(fs.existsSync(path.join(root, "survived")), "the background process died writing to its output")
      } finally {
        Result.try(() => process.kill(background, "SIGKILL"))
      }
    }),
  )

  it.effect("is not timed out once the shell has exited: what it left running keeps writing and lives on", () =>
    Effect.gen(function* () {
      const { workspace } = yield* workspaceFixture
      // The shell exits before the 1 s timeout; its background loop keeps the pipes busy past it.
      const command = "(while :; do echo tick; sleep 0.05; done) & echo $! >&2; sleep 0.8; echo bye"
      const result = resultOf(yield* call(Builtins.runCommand(workspace), { command, timeoutSeconds: 1 }))
      const background = Number(result.stderr.trim().split("\n")[0])
      try {
        assert.deepInclude(result, { exitCode: 0, timedOut: false })
        assert.include(result.stdout, "bye")
        assert.isFalse(isDead(background), "the background process was killed at the shell's timeout")
      } finally {
        killGroupOf(background)
      }
    }),
  )

  it.effect("keeps the output the shell wrote just before it exited", () =>
    Effect.gen(function* () {
      const { workspace } = yield* workspaceFixture
      const command = "sleep 20 & i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done; echo $! >&2"
      const result = resultOf(yield* call(Builtins.runCommand(workspace), { command }))
      const lines = result.stdout.trim().split("\n")
      process.kill(Number(result.stderr.trim()), "SIGKILL")
      assert.strictEqual(lines.length, 2000)
      assert.strictEqual(lines.at(-1), "line-1999")
    }),
  )
})

describe("run_command without a file descriptor to spare", () => {
  it("fails the call with the spawn's error, and the process goes on", () => {
    // A child process under a small descriptor limit takes every free one, then runs a command.
    const here = path.dirname(fileURLToPath(import.meta.url))
    const tsx = createRequire(import.meta.url).resolve("tsx")
    const root = fs.mkdtempSync(path.join(os.tmpdir(), "maka-emfile-"))
    const script = [process.execPath, "--conditions=@maka/source", "--import", tsx, path.join(here, "children", "command-emfile.ts"), root]
    const result = spawnSync("/bin/sh", ["-c", 'ulimit -n 1024 && exec "$@"', "sh", ...script], { encoding: "utf8", timeout: 60_000 })
    fs.rmSync(root, { recursive: true, force: true })
    assert.strictEqual(result.status, 0, result.stderr)
    assert.include(result.stdout, "could not run /bin/sh:")
    assert.include(result.stdout, "EMFILE")
  }, 60_000)
})
