/**
 * The command line's decoder, fuzzed (docs/cli.md §10.1): valid argv of every command, mutated (tokens
 * dropped, repeated, swapped or replaced; values out of range, empty, unknown; flags of other
 * commands; near-miss command names) with a fuzzed environment. The flag checks either accept or
 * throw `UsageError`, never anything else; every refused command line run through `main` exits 2 with
 * one stderr line `maka: <message>`, nothing on stdout and no stack trace; a sample goes through the
 * built `maka` binary too. `MAKA_FUZZ_INPUTS` sets the inputs (default 2,000; long setting 100,000),
 * `MAKA_FUZZ_SEED` the seed; a failure names the seed and the case.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { PassThrough } from "node:stream"
import { afterAll, describe, expect, it } from "vitest"
import { commandUsage, USAGE } from "../src/Usage.ts"
import { ExitCode } from "../src/internal/exit.ts"
import * as Flags from "../src/internal/flags.ts"
import { main } from "../src/internal/main.ts"
import { settingsOf } from "../src/internal/run-command.ts"
import { maka, NOWHERE_BASE_URL } from "./support/cli.ts"

const INPUTS = Number(process.env["MAKA_FUZZ_INPUTS"] ?? 2_000)
const SEED = Number(process.env["MAKA_FUZZ_SEED"] ?? 0xc11_f1a9)
/** Ten minutes, or 30 ms per input at a long setting. */
const TIMEOUT_MS = Math.max(600_000, INPUTS * 30)

/** A small seeded generator (mulberry32), so a failing case can be replayed. */
const generator = (seed: number) => {
  let state = seed | 0
  const next = () => {
    state = (state + 0x6d2b79f5) | 0
    let t = Math.imul(state ^ (state >>> 15), 1 | state)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const int = (below: number) => Math.floor(next() * below)
  const pick = <A>(values: ReadonlyArray<A>): A => values[int(values.length)]!
  const chance = (p: number) => next() < p
  return { next, int, pick, chance }
}
type Random = ReturnType<typeof generator>

const cwd = fs.mkdtempSync(path.join(os.tmpdir(), "maka-flags-fuzz-"))
fs.mkdirSync(path.join(cwd, "ws"))
fs.writeFileSync(path.join(cwd, "file.txt"), "not a directory")
afterAll(() => fs.rmSync(cwd, { recursive: true, force: true }))

// ---------------------------------------------------------------------------------------------
// Valid command lines, and their mutations

const TEMPLATES: ReadonlyArray<ReadonlyArray<string>> = [
  ["run", "--db", "a.sqlite", "--session", "s1", "--tools", "read", "--max-steps", "8", "--idle-timeout", "30", "Hello"],
  ["run", "--provider", "openai-compatible", "--base-url", NOWHERE_BASE_URL, "--model", "m", "--json", "Hi"],
  ["run", "--workspace", "ws", "--context-window", "8000", "--declared-window", "6000", "--allow-prior-unknown", "Go"],
  ["chat", "--db", "a.sqlite", "--session", "s1", "--tools", "none"],
  ["compact", "--db", "a.sqlite", "--session", "s1", "--declared-window", "100"],
  ["events", "--db", "a.sqlite", "--session", "s1", "--json"],
  ["inspect", "--db", "a.sqlite", "--session", "s1", "--step", "2", "--html", "out.html"],
  ["resume", "--db", "a.sqlite", "--session", "s1", "--abandon"],
  ["resume", "--database-url", "postgres://u@127.0.0.1:1/db", "--provider", "anthropic", "--base-url", "https://x.example", "--model", "c"],
  ["recover", "--db", "a.sqlite"],
  ["sessions", "--database-url", "postgresql://127.0.0.1:1/x"],
  ["backup", "a.sqlite", "b.sqlite"],
  ["demo", "--keep"],
]

const FLAG_NAMES = Object.keys(Flags.FLAGS)
const COMMAND_NAMES = Object.keys(Flags.COMMANDS)

const strange = [
  "",
  " ",
  "-",
  "--",
  "---",
  "-x",
  "-vh",
  "--=",
  "--db=",
  "--max-steps=abc",
  "--json=yes",
  "--allow-prior-unknown=1",
  "--no-json",
  "--session",
  "\ud800",
  "é",
  "😀",
  "x".repeat(5_000),
  "0",
  "-1",
  "1e3",
  " 5",
  "0x10",
  "257",
  "301",
  "9007199254740993",
  "ftp://x",
  "http://",
  "postgres:/x",
  "file.txt",
  "missing-dir",
  "offline",
  "all",
  "READ",
  "Run",
  "runn",
  "help",
  "--version",
]

const randomToken = (random: Random): string => {
  switch (random.int(5)) {
    case 0:
      return `--${random.pick(FLAG_NAMES)}`
    case 1:
      return `--${random.pick(FLAG_NAMES)}=${random.pick(strange)}`
    case 2:
      return random.pick(COMMAND_NAMES)
    default:
      return random.pick(strange)
  }
}

const mutate = (random: Random, argv: ReadonlyArray<string>): Array<string> => {
  const tokens = [...argv]
  for (let round = 1 + random.int(3); round > 0; round--) {
    const at = random.int(tokens.length + 1)
    switch (random.int(7)) {
      case 0:
        tokens.splice(at, 1)
        break
      case 1:
        if (tokens[at] !== undefined) tokens.splice(at, 0, tokens[at]!)
        break
      case 2:
        if (at + 1 < tokens.length) [tokens[at], tokens[at + 1]] = [tokens[at + 1]!, tokens[at]!]
        break
      case 3:
        tokens.splice(at, 0, randomToken(random))
        break
      case 4:
        tokens.length = Math.min(tokens.length, at)
        break
      default:
        tokens[Math.min(at, Math.max(0, tokens.length - 1))] = randomToken(random)
    }
  }
  // `--help` anywhere shows help (exit 0); it is kept only now and then so refusals dominate.
  return random.chance(0.97) ? tokens.filter((token) => token !== "--help" && token !== "-h" && token !== "help") : tokens
}

const randomEnvironment = (random: Random): Readonly<Record<string, string>> => {
  const environment: Record<string, string> = {}
  if (random.chance(0.15)) environment["MAKA_DB"] = random.pick(["env.sqlite", "", "file.txt/x.sqlite"])
  if (random.chance(0.1)) environment["MAKA_DATABASE_URL"] = random.pick(["postgres://127.0.0.1:1/x", "mysql://x", ""])
  if (random.chance(0.15)) environment["MAKA_BASE_URL"] = random.pick([NOWHERE_BASE_URL, "not a url", "", "http://127.0.0.1:6000/v1", "http://u:p@127.0.0.1/v1"])
  if (random.chance(0.1)) environment["MAKA_MODEL"] = random.pick(["m", ""])
  if (random.chance(0.1)) environment["MAKA_OFFLINE_DELAY_MS"] = random.pick(["0", "10", "-1", "10001", "abc", ""])
  return environment
}

// ---------------------------------------------------------------------------------------------
// The decoder: each command's flag checks, in its order (packages/cli/src/internal/*-command.ts)

type Verdict = { readonly kind: "accepted" } | { readonly kind: "help" } | { readonly kind: "usage"; readonly message: string }

const checks = (command: Flags.CommandName, args: ReadonlyArray<string>, environment: Flags.Environment): void => {
  const context = { environment, cwd }
  const { values, positionals } = Flags.parse(command, args)
  switch (command) {
    case "run": {
      settingsOf(values, context)
      if (positionals.length > 1) throw new Flags.UsageError("maka run takes one MESSAGE; quote it")
      // The test's stdin is empty, not a terminal: a missing MESSAGE reads it and finds nothing.
      if ((positionals[0] ?? "").trim() === "") throw new Flags.UsageError("the message is empty; give a MESSAGE with text")
      return
    }
    case "chat":
      settingsOf(values, context)
      return
    case "compact":
      Flags.requiredSession(values, "compact")
      settingsOf(values, context)
      return
    case "events":
      Flags.database(values, environment, cwd)
      Flags.requiredSession(values, "events")
      return
    case "inspect":
      Flags.database(values, environment, cwd)
      Flags.requiredSession(values, "inspect")
      Flags.integer("step", values.step, 1, Number.MAX_SAFE_INTEGER)
      return
    case "resume": {
      Flags.database(values, environment, cwd)
      const isAbandon = values.abandon === true
      if (isAbandon && (values.session === undefined || values.session === "")) {
        throw new Flags.UsageError("maka resume --abandon needs --session ID: the pause to release")
      }
      if (!isAbandon) Flags.provider(values, environment)
      return
    }
    case "recover":
    case "sessions":
      Flags.database(values, environment, cwd)
      return
    case "backup":
      if (positionals.length !== 2 || positionals.some((value) => value === "")) {
        throw new Flags.UsageError("maka backup needs DB and FILE: maka backup DB FILE")
      }
      return
    case "demo":
      return
  }
}

/** What the decoder makes of a command line; a throw other than `UsageError` fails the test. */
const decode = (argv: ReadonlyArray<string>, environment: Flags.Environment, label: string): Verdict => {
  const [first, ...args] = argv
  if (first === undefined) return { kind: "usage", message: "" }
  // `maka help TOPIC` (or --help, -h) names one command or is refused like one; --version takes nothing.
  if (first === "-h" || first === "--help" || first === "help") {
    if (args[0] !== undefined && !Flags.isCommand(args[0])) return { kind: "usage", message: Flags.unknownCommand(args[0]) }
    if (args.length > 1) return { kind: "usage", message: `unexpected argument '${args[1]}': maka ${first} takes one command at most; see maka --help` }
    return { kind: "help" }
  }
  if (first === "-v" || first === "--version") {
    return args.length > 0 ? { kind: "usage", message: `unexpected argument '${args[0]}': maka ${first} takes none; see maka --help` } : { kind: "help" }
  }
  if (!Flags.isCommand(first)) return { kind: "usage", message: Flags.unknownCommand(first) }
  // After `--` a `--help` is the command's argument.
  const flags = args.includes("--") ? args.slice(0, args.indexOf("--")) : args
  // `maka COMMAND --help` takes nothing more.
  if (flags.includes("--help") || flags.includes("-h")) {
    if (args.length === 1) return { kind: "help" }
    const other = args.find((arg) => arg !== "--help" && arg !== "-h") ?? args[1]
    return { kind: "usage", message: `unexpected argument '${other}': maka ${first} --help takes nothing more; see maka ${first} --help` }
  }
  try {
    checks(first, args, environment)
    return { kind: "accepted" }
  } catch (error) {
    expect(error, `${label}: the flag checks threw ${String(error)}`).toBeInstanceOf(Flags.UsageError)
    return { kind: "usage", message: (error as Flags.UsageError).message }
  }
}

/** Runs `main` in this process on a command line the decoder refuses or answers with help. */
const runMain = async (argv: ReadonlyArray<string>, environment: Flags.Environment) => {
  let stdout = ""
  let stderr = ""
  const stdin = new PassThrough()
  stdin.end()
  const code = await main({
    argv,
    environment,
    cwd,
    sink: { out: (text) => void (stdout += text), err: (text) => void (stderr += text) },
    // An empty stream that is not a terminal, as a closed pipe is.
    stdin: stdin as unknown as NodeJS.ReadStream,
    version: "0.0.0-fuzz",
  })
  return { code, stdout, stderr }
}

const hasStackTrace = (text: string): boolean => /\n\s+at .+[(:]\d+/.test(text) || text.includes("internal error")

describe("command-line flag fuzz", () => {
  const refused: Array<{ readonly argv: ReadonlyArray<string>; readonly environment: Readonly<Record<string, string>>; readonly message: string }> = []

  it("refuses every fuzzed command line the flags reject with exit 2 and one line maka: <message>, never a stack trace", async () => {
    const counts = { accepted: 0, refused: 0, help: 0 }
    for (let index = 0; index < INPUTS; index++) {
      const seed = SEED + index
      const random = generator(seed)
      const template = random.pick(TEMPLATES)
      const argv = random.chance(0.05) ? Array.from({ length: random.int(6) }, () => randomToken(random)) : mutate(random, template)
      const environment = randomEnvironment(random)
      const label = `seed ${seed} (MAKA_FUZZ_SEED=${SEED} case ${index}): ${JSON.stringify(argv).slice(0, 300)} env ${JSON.stringify(environment)}`
      const verdict = decode(argv, environment, label)
      if (verdict.kind === "accepted") {
        // A command line the flags accept runs its command: not a decoder outcome, and not run here.
        counts.accepted++
        continue
      }
      const result = await runMain(argv, environment)
      expect(hasStackTrace(result.stderr), `${label}: ${result.stderr.slice(0, 500)}`).toBe(false)
      if (verdict.kind === "help") {
        counts.help++
        expect(result.code, label).toBe(ExitCode.completed)
        expect(result.stderr, label).toBe("")
        const first = argv[0]!
        const topic = argv[1]
        const expected =
          first === "-v" || first === "--version"
            ? "0.0.0-fuzz\n"
            : Flags.isCommand(first)
              ? commandUsage(first)
              : topic !== undefined && Flags.isCommand(topic)
                ? commandUsage(topic)
                : USAGE
        expect(result.stdout, label).toBe(expected)
        continue
      }
      counts.refused++
      expect(result.code, label).toBe(ExitCode.usage)
      expect(result.stdout, label).toBe("")
      if (argv.length === 0) {
        expect(result.stderr, label).toBe(USAGE)
        continue
      }
      expect(result.stderr, label).toBe(`maka: ${verdict.message}\n`)
      expect(verdict.message.includes("\n"), label).toBe(false)
      if (refused.length < 5 && !/[\ud800-\udfff\u0000]/.test(argv.join(""))) refused.push({ argv, environment, message: verdict.message })
    }
    if (process.env["MAKA_FUZZ_REPORT"] !== undefined) console.log(JSON.stringify(counts))
    // Both ends are reached.
    expect(counts.refused, JSON.stringify(counts)).toBeGreaterThan(INPUTS / 2)
    expect(counts.accepted, JSON.stringify(counts)).toBeGreaterThan(INPUTS / 50)
  }, TIMEOUT_MS)

  it("answers a sample of the refused command lines the same way from the built maka binary", async () => {
    expect(refused.length).toBe(5)
    for (const { argv, environment, message } of refused) {
      const result = await maka(argv, { cwd, env: { ...environment } })
      const label = JSON.stringify(argv)
      expect(result.code, label).toBe(ExitCode.usage)
      expect(result.stdout, label).toBe("")
      expect(result.stderr, label).toBe(`maka: ${message}\n`)
    }
  }, 120_000)
})
