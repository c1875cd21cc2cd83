/**
 * Confinement holds when the file is opened, not only when its path is checked: a real child process
 * swaps a workspace entry between a real file or directory and a symbolic link that leads outside,
 * while the builtins are called again and again. No call may return content from outside the
 * workspace, and nothing may be written outside it.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Builtins, type Tool } from "@maka/tools"
import { Effect, type Scope } from "effect"
import { call, type Outcome, workspaceFixture } from "./fixtures.ts"

const SWAPPER = path.join(import.meta.dirname, "children", "swapper.mjs")
/** Exchanges the swapper must make while a builtin is called. */
const MIN_EXCHANGES = 2_000
/** The longest one race may run; it stops once enough exchanges and calls were made. */
const RACE_MS = 15_000
const MIN_CALLS = 1_000

/** Starts the swapper on `target` and resolves once it runs; stopping it gives its exchange count. */
interface Swapper {
  /** The exchanges the swapper reported so far. */
  readonly exchanges: () => number
  /** Stops it; its final count, NaN when it died on its own (it then failed to swap). */
  readonly stop: () => Promise<number>
}

const lastCount = (output: string): number => Number.parseInt(output.trim().split("\n").at(-1) ?? "", 10)

const swapper = (target: string, outside: string): Effect.Effect<Swapper, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(
      () =>
        new Promise<ChildProcess>((resolve, reject) => {
          const child = spawn(process.execPath, [SWAPPER, target, outside], { stdio: ["ignore", "pipe", "inherit"] })
          child.once("error", reject)
          child.stdout?.once("data", () => resolve(child))
        }),
    ),
    (child) => Effect.sync(() => child.kill("SIGKILL")),
  ).pipe(
    Effect.map((child) => {
      let output = ""
      child.stdout?.on("data", (data: Buffer) => (output += data.toString()))
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
      return {
        exchanges: () => lastCount(output) || 0,
        stop: () => {
          if (child.exitCode === null) child.kill("SIGTERM")
          return exited.then(() => lastCount(output))
        },
      }
    }),
  )

/** Calls `tool` with `input` until the race has run long enough; returns every outcome. */
const race = (target: string, outside: string, tool: Tool.Tool, input: unknown) =>
  Effect.gen(function* () {
    const running = yield* swapper(target, outside)
    const outcomes: Array<Outcome> = []
    const started = Date.now()
    const enough = () => outcomes.length >= MIN_CALLS && running.exchanges() >= MIN_EXCHANGES
    while (Date.now() - started < RACE_MS && !enough()) {
      outcomes.push(yield* call(tool, input))
    }
    const exchanges = yield* Effect.promise(running.stop)
    assert.isAtLeast(exchanges, MIN_EXCHANGES, "the swapper made too few exchanges")
    assert.isAtLeast(outcomes.length, MIN_CALLS, "the builtin was called too few times")
    return outcomes
  })

const succeeded = (outcomes: ReadonlyArray<Outcome>) =>
  outcomes.flatMap((outcome) => (outcome._tag === "Succeeded" ? [JSON.stringify(outcome.output)] : []))

const defects = (outcomes: ReadonlyArray<Outcome>) => outcomes.filter((outcome) => outcome._tag === "Defect" || outcome._tag === "Invalid")

/** A workspace with `inside` (a real file or directory) and its outside twin holding a secret. */
const racingFixture = (kind: "file" | "directory") =>
  Effect.gen(function* () {
    const fixture = yield* workspaceFixture
    const target = path.join(fixture.root, "entry")
    const outsideTarget = path.join(fixture.outside, "entry")
    if (kind === "file") {
      fs.writeFileSync(target, "inside line\n")
      fs.writeFileSync(outsideTarget, "OUTSIDE SECRET line\n")
    } else {
      fs.mkdirSync(target)
      fs.writeFileSync(path.join(target, "inside.txt"), "inside line\n")
      fs.mkdirSync(outsideTarget)
      fs.writeFileSync(path.join(outsideTarget, "secret-name.txt"), "OUTSIDE SECRET line\n")
    }
    return { ...fixture, target, outsideTarget }
  })

/** Every file under `directory` with its content. */
const snapshot = (directory: string): Record<string, string> =>
  Object.fromEntries(
    fs
      .readdirSync(directory, { recursive: true, encoding: "utf8" })
      .sort()
      .map((name) => {
        const full = path.join(directory, name)
        return [name, fs.lstatSync(full).isFile() ? fs.readFileSync(full, "utf8") : "(directory)"]
      }),
  )

describe("builtins against a racing symlink swap", () => {
  it.live("read_file never returns the content of a file outside the workspace", () =>
    Effect.gen(function* () {
      const { workspace, target, outsideTarget } = yield* racingFixture("file")
      const outcomes = yield* race(target, outsideTarget, Builtins.readFile(workspace), { path: "entry" })
      assert.deepStrictEqual(succeeded(outcomes).filter((text) => text.includes("OUTSIDE")), [])
      assert.deepStrictEqual(defects(outcomes), [])
    }),
  )

  it.live("read_file never reads through a directory swapped for a link outside", () =>
    Effect.gen(function* () {
      const { workspace, target, outsideTarget } = yield* racingFixture("directory")
      fs.writeFileSync(path.join(outsideTarget, "inside.txt"), "OUTSIDE SECRET line\n")
      const outcomes = yield* race(target, outsideTarget, Builtins.readFile(workspace), { path: "entry/inside.txt" })
      assert.deepStrictEqual(succeeded(outcomes).filter((text) => text.includes("OUTSIDE")), [])
      assert.deepStrictEqual(defects(outcomes), [])
    }),
  )

  it.live("list_files never lists a directory outside the workspace", () =>
    Effect.gen(function* () {
      const { workspace, target, outsideTarget } = yield* racingFixture("directory")
      const outcomes = yield* race(target, outsideTarget, Builtins.listFiles(workspace), { path: "entry" })
      assert.deepStrictEqual(succeeded(outcomes).filter((text) => text.includes("secret-name")), [])
      assert.deepStrictEqual(defects(outcomes), [])
    }),
  )

  it.live("search_text never matches inside a file or directory outside the workspace", () =>
    Effect.gen(function* () {
      const { workspace, target, outsideTarget } = yield* racingFixture("directory")
      const outcomes = yield* race(target, outsideTarget, Builtins.searchText(workspace), { pattern: "SECRET", path: "entry" })
      assert.deepStrictEqual(succeeded(outcomes).filter((text) => text.includes("SECRET")), [])
      assert.deepStrictEqual(defects(outcomes), [])
    }),
  )

  it.live("search_text never follows a file swapped for a link outside", () =>
    Effect.gen(function* () {
      const { workspace, target, outsideTarget } = yield* racingFixture("file")
      const outcomes = yield* race(target, outsideTarget, Builtins.searchText(workspace), { pattern: "SECRET" })
      assert.deepStrictEqual(succeeded(outcomes).filter((text) => text.includes("SECRET")), [])
      assert.deepStrictEqual(defects(outcomes), [])
    }),
  )

  it.live("write_file never writes through a file swapped for a link outside", () =>
    Effect.gen(function* () {
      const { workspace, target, outside, outsideTarget } = yield* racingFixture("file")
      const before = snapshot(outside)
      const outcomes = yield* race(target, outsideTarget, Builtins.writeFile(workspace), { path: "entry", content: "WRITTEN" })
      assert.deepStrictEqual(snapshot(outside), before)
      assert.deepStrictEqual(defects(outcomes), [])
    }),
  )

  it.live("write_file never creates anything under a directory swapped for a link outside", () =>
    Effect.gen(function* () {
      const { workspace, target, outside, outsideTarget } = yield* racingFixture("directory")
      const before = snapshot(outside)
      const outcomes = yield* race(target, outsideTarget, Builtins.writeFile(workspace), {
        path: "entry/sub/new.txt",
        content: "WRITTEN",
      })
      assert.deepStrictEqual(snapshot(outside), before)
      assert.deepStrictEqual(defects(outcomes), [])
    }),
  )
})
