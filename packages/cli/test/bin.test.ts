import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { COMMANDS, flagText } from "../src/internal/flags.ts"
import { bin, maka, packageRoot } from "./support/cli.ts"

// The built `maka` binary, run with plain `node` from a directory outside the repository (docs/architecture.md §2).
const run = (...args: ReadonlyArray<string>) => maka(args, { cwd: os.tmpdir() })

describe("the maka binary", () => {
  it("prints the usage with --help and exits 0", async () => {
    const result = await run("--help")
    expect(result.code).toBe(0)
    expect(result.stdout).toContain("Usage: maka <command>")
    for (const command of Object.keys(COMMANDS)) expect(result.stdout).toContain(`  ${command}`)
  })

  it("prints the usage on stderr and exits 2 without a command", async () => {
    const result = await run()
    expect(result.code).toBe(2)
    expect(result.stderr).toContain("Usage: maka <command>")
    expect(result.stdout).toBe("")
  })

  it("lists compact and resume in the usage, with exit 75 for a handoff, and resume --help lists its flags", async () => {
    const result = await run("--help")
    expect(result.stdout).toMatch(/^\s+compact\s+summarise a session's history/m)
    expect(result.stdout).toMatch(/^\s+resume\s+run the successors of sealed handoffs/m)
    expect(result.stdout).toContain("75 handed off")
    const help = await run("resume", "--help")
    expect(help.code).toBe(0)
    for (const flag of ["--db", "--database-url", "--session", "--provider", "--base-url", "--model", "--abandon", "--json"]) {
      expect(help.stdout).toContain(flag)
    }
    expect(help.stdout).not.toContain("--workspace")
  })

  it("shows a command's help for maka help COMMAND, the command list for maka help, and refuses another topic", async () => {
    const topic = await run("help", "run")
    expect(topic.code).toBe(0)
    expect(topic.stdout).toBe((await run("run", "--help")).stdout)
    const bare = await run("help")
    expect(bare.code).toBe(0)
    expect(bare.stdout).toBe((await run("--help")).stdout)
    const other = await run("help", "rnu")
    expect(other.code).toBe(2)
    expect(other.stdout).toBe("")
    expect(other.stderr).toBe("maka: unknown command 'rnu'; did you mean 'run'? see maka --help\n")
    // --help takes a command as help does; neither takes a second argument.
    expect((await run("--help", "run")).stdout).toBe(topic.stdout)
    const second = await run("help", "run", "events")
    expect([second.code, second.stdout, second.stderr]).toEqual([2, "", "maka: unexpected argument 'events': maka help takes one command at most; see maka --help\n"])
    // Nor does maka COMMAND --help (docs/cli.md §10), wherever the other argument stands.
    for (const args of [["run", "--help", "--json"], ["run", "--bogus", "--help"], ["backup", "a", "-h"]] as const) {
      const extra = await run(...args)
      const other = args.find((arg) => arg !== "--help" && arg !== "-h" && arg !== args[0])
      expect([extra.code, extra.stdout, extra.stderr]).toEqual([
        2,
        "",
        `maka: unexpected argument '${other}': maka ${args[0]} --help takes nothing more; see maka ${args[0]} --help\n`,
      ])
    }
  })

  it("takes --help after '--' as the command's argument, not as a request for help", async () => {
    const result = await run("run", "--db", path.join(os.tmpdir(), `maka-dashes-${process.pid}`, "events.sqlite"), "--", "--help")
    fs.rmSync(path.join(os.tmpdir(), `maka-dashes-${process.pid}`), { recursive: true, force: true })
    expect(result.code, result.stderr).toBe(0)
    expect(result.stdout).toContain('You asked: "--help"')
  })

  it("refuses an unknown command with exit 2 and a message on stderr", async () => {
    const result = await run("no-such-command")
    expect(result.code).toBe(2)
    expect(result.stderr).toContain("no-such-command")
    expect(result.stdout).toBe("")
  })

  it("prints the package version with --version", async () => {
    const { version } = JSON.parse(fs.readFileSync(path.join(packageRoot, "package.json"), "utf8")) as { version: string }
    const result = await run("--version")
    expect(result.code).toBe(0)
    expect(result.stdout.trim()).toBe(version)
    const extra = await run("--version", "extra")
    expect([extra.code, extra.stdout, extra.stderr]).toEqual([2, "", "maka: unexpected argument 'extra': maka --version takes none; see maka --help\n"])
  })

  it("bundled into one file, prints unknown for its version rather than another package's, or failing", async () => {
    const { build } = await import("esbuild")
    const directory = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "maka-cli-bundle-")))
    try {
      // The bundle's folder, in a program whose own manifest sits one folder up.
      fs.writeFileSync(path.join(directory, "package.json"), JSON.stringify({ name: "host", version: "9.9.9" }))
      const bundle = path.join(directory, "dist", "maka.mjs")
      await build({
        entryPoints: [path.join(packageRoot, "dist", "bin.js")],
        bundle: true,
        platform: "node",
        format: "esm",
        outfile: bundle,
        external: ["better-sqlite3", "pg"],
        logLevel: "silent",
      })
      fs.mkdirSync(path.join(directory, "node_modules"))
      fs.symlinkSync(path.join(packageRoot, "..", "..", "node_modules", "better-sqlite3"), path.join(directory, "node_modules", "better-sqlite3"))
      const child = spawnSync(process.execPath, [bundle, "--version"], { cwd: directory, encoding: "utf8", timeout: 60_000 })
      expect([child.status, child.stdout, child.stderr]).toEqual([0, "unknown\n", ""])
      fs.rmSync(path.join(directory, "package.json"))
      const alone = spawnSync(process.execPath, [bundle, "--version"], { cwd: directory, encoding: "utf8", timeout: 60_000 })
      expect([alone.status, alone.stdout, alone.stderr]).toEqual([0, "unknown\n", ""])
    } finally {
      fs.rmSync(directory, { recursive: true, force: true })
    }
  }, 60_000)

  it("in a current directory that was removed, prints its version and help, and does nothing else", () => {
    const directory = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "maka-gone-")))
    try {
      // PWD names a path: the removed one (which a mkdir would make again), or another that exists.
      const inGone = (pwd: string, ...args: ReadonlyArray<string>) =>
        spawnSync("sh", ["-c", 'mkdir gone && cd gone && rmdir ../gone && PWD="$0" exec "$@"', pwd, process.execPath, bin, ...args], {
          cwd: directory,
          encoding: "utf8",
          timeout: 60_000,
        })
      const version = inGone(path.join(directory, "gone"), "--version")
      expect([version.status, version.stderr]).toEqual([0, ""])
      for (const args of [["--help"], ["-v"], ["help"], ["help", "run"], ["run", "--help"], ["sessions", "-h"]]) {
        expect(inGone(path.join(directory, "gone"), ...args).status, args.join(" ")).toBe(0)
      }
      for (const pwd of [path.join(directory, "gone"), directory]) {
        // A --help that is a message, or among other arguments, asks for a run: no root stands in.
        const runs = [["run", "--db", "x.sqlite", "--", "--help"], ["run", "--session", "-h", "hi"], ["run", "hi", "--help"]]
        for (const args of [["run", "hi"], ["sessions"], ...runs]) {
          const refused = inGone(pwd, ...args)
          expect([refused.status, refused.stderr]).toEqual([1, "maka: the current directory no longer exists; cd to one that does\n"])
        }
      }
      // Nothing was made, where it was or where PWD said.
      expect(fs.readdirSync(directory)).toEqual([])
    } finally {
      fs.rmSync(directory, { recursive: true, force: true })
    }
  })

  it.each(Object.keys(COMMANDS))("lists every flag of %s with its default in its --help", async (command) => {
    const result = await run(command, "--help")
    expect(result.code).toBe(0)
    expect(result.stdout).toContain(`Usage: maka ${command}`)
    const spec = COMMANDS[command as keyof typeof COMMANDS]
    for (const flag of spec.flags) {
      const line = result.stdout.split("\n").find((candidate) => candidate.trimStart().startsWith(`--${flag} `) || candidate.trim() === `--${flag}`)
      expect(line, `--${flag}`).toBeDefined()
      const { description, defaultText } = flagText(command as keyof typeof COMMANDS, flag)
      expect(line).toContain(description)
      if (defaultText !== undefined) expect(line).toContain(`(default: ${defaultText})`)
      else expect(line).not.toContain("(default:")
    }
    // Every description starts in one column, at least two spaces after the longest flag and its value.
    const lines = result.stdout.split("\n").filter((candidate) => candidate.startsWith("  --"))
    const columns = lines.map((candidate) => /^ {2}--\S+(?: \S+)? {2,}/.exec(candidate)?.[0].length)
    expect(columns.every((column) => column !== undefined && column === columns[0]), lines.join("\n")).toBe(true)
  })

  it("documents the run defaults of docs/cli.md §10.1 in run --help", async () => {
    const { stdout } = await run("run", "--help")
    const lineOf = (flag: string) => stdout.split("\n").find((line) => line.trimStart().startsWith(`--${flag}`)) ?? ""
    expect(lineOf("db")).toContain(".maka/events.sqlite, env MAKA_DB")
    expect(lineOf("tools")).toContain("(default: read)")
    expect(lineOf("max-steps")).toContain("(default: 32)")
    expect(lineOf("max-steps")).toContain("1–256")
    expect(lineOf("idle-timeout")).toContain("(default: 120)")
    expect(lineOf("idle-timeout")).toContain("1–300")
    expect(stdout).not.toContain("--api-key")
  })

  it("starts quickly: --help answers well under a second", async () => {
    const started = performance.now()
    const result = await run("--help")
    expect(result.code).toBe(0)
    // Generous for a loaded CI machine; a --help that loads the engine takes several times longer here.
    expect(performance.now() - started).toBeLessThan(1_500)
  })
})
