#!/usr/bin/env node
/**
 * The `maka` executable: runs the command line and exits with its code once stdout and stderr are
 * flushed.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import * as tty from "node:tty"
import { exitOnEarlySignals, terminalHungUp } from "./internal/early-signals.ts"

// First, before the command line's modules load: a signal until a command handles its own is exit 130.
exitOnEarlySignals()

/**
 * At exit Node 20 gives the terminal back its settings, and aborts (SIGABRT, a native stack on
 * stderr) when that terminal has hung up (nodejs/node#51519): a closed window or SSH connection would
 * end a cancelled run with status 134 instead of 130. Once the terminal is known gone (a SIGHUP, or
 * a write to it that failed `EIO`), its descriptors are closed first, which Node's restore skips.
 */
let stdoutFailure: () => string | undefined = () => undefined
// Which are terminals is known now only: a hung-up terminal no longer answers as one.
const terminals = [0, 1, 2].filter((fd) => tty.isatty(fd))
process.on("exit", () => {
  if (!terminalHungUp() && stdoutFailure() !== "EIO") return
  for (const fd of terminals) {
    try {
      fs.closeSync(fd)
    } catch {
      // Closed already: nothing to restore.
    }
  }
})
const { asksOnlyHelp, main } = await import("./internal/main.ts")
const { afterOutput, processSink } = await import("./internal/terminal.ts")

/**
 * The package's version from its manifest: `src/bin.ts` and `dist/bin.js` both sit one folder below
 * the package root. Bundled into one file, the file there is another's or none: `unknown` then.
 */
const versionOf = (): string => {
  try {
    const manifest: unknown = JSON.parse(fs.readFileSync(new URL("../package.json", import.meta.url), "utf8"))
    return typeof manifest === "object" && manifest !== null && "name" in manifest && manifest.name === "@maka/cli" &&
      "version" in manifest && typeof manifest.version === "string"
      ? manifest.version
      : "unknown"
  } catch {
    return "unknown"
  }
}
const VERSION = versionOf()

/**
 * The current directory; `undefined` when it was removed (`uv_cwd` fails). No path stands in for it:
 * the shell's `PWD` may name another directory, or one a `mkdir` would make again, and maka would
 * then work (and write its log) where it was not started.
 */
const currentDirectory = (): string | undefined => {
  try {
    return process.cwd()
  } catch {
    return undefined
  }
}
// What needs no directory: the version and the help, printed wherever maka is (`asksOnlyHelp`).
const cwd = currentDirectory() ?? (asksOnlyHelp(process.argv.slice(2)) ? path.parse(process.execPath).root : undefined)
if (cwd === undefined) {
  process.stderr.write("maka: the current directory no longer exists; cd to one that does\n")
  process.exit(1)
}

const sink = processSink(process.stdout, process.stderr)
stdoutFailure = sink.outFailure
const code = await main({
  argv: process.argv.slice(2),
  environment: process.env,
  cwd,
  sink,
  stdin: process.stdin,
  version: VERSION,
})
// The command has ended: a signal now has nothing to cancel, and its own exit code applies
// (docs/cli.md §10.1 "Signals"). The output goes on draining; a second signal stops at once.
let lateSignals = 0
const onLateSignal = () => {
  // Said only while output waits to be written: with nothing pending the process is ending anyway.
  if (++lateSignals === 1) {
    if (process.stdout.writableLength > 0) sink.err("maka: the command has ended; its output is still being written (signal again to stop now)\n")
  } else process.exit(afterOutput(code, sink.outFailure()).code)
}
for (const name of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(name, onLateSignal)
sink.flush()
// A failed write reports itself after the write returns: wait until what was written is out.
await new Promise<void>((resolve) => process.stdout.write("", () => resolve()))
const ended = afterOutput(code, sink.outFailure())
if (ended.line !== undefined) sink.err(ended.line)
process.exitCode = ended.code
