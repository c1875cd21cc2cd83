#!/usr/bin/env node
/**
 * The `maka` executable: runs the command line and exits with its code once stdout and stderr are
 * flushed.
 */
import * as fs from "node:fs"
import { exitOnEarlySignals } from "./internal/early-signals.ts"

// First, before the command line's modules load: a signal until a command handles its own is exit 130.
exitOnEarlySignals()
const { main } = await import("./internal/main.ts")
const { afterOutput, processSink } = await import("./internal/terminal.ts")

// `src/bin.ts` and `dist/bin.js` both sit one folder below the package root.
const manifest: unknown = JSON.parse(fs.readFileSync(new URL("../package.json", import.meta.url), "utf8"))
const VERSION =
  typeof manifest === "object" && manifest !== null && "version" in manifest && typeof manifest.version === "string" ? manifest.version : "unknown"

const sink = processSink(process.stdout, process.stderr)
const code = await main({
  argv: process.argv.slice(2),
  environment: process.env,
  cwd: process.cwd(),
  sink,
  stdin: process.stdin,
  version: VERSION,
})
// The command has ended: a signal now has nothing to cancel, and its own exit code applies
// (docs/cli.md §10.1 "Signals"). The output goes on draining; a second signal stops at once.
let lateSignals = 0
const onLateSignal = () => {
  if (++lateSignals === 1) sink.err("maka: the command has ended; its output is still being written (signal again to stop now)\n")
  else process.exit(afterOutput(code, sink.outFailure()).code)
}
for (const name of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(name, onLateSignal)
sink.flush()
// A failed write reports itself after the write returns: wait until what was written is out.
await new Promise<void>((resolve) => process.stdout.write("", () => resolve()))
const ended = afterOutput(code, sink.outFailure())
if (ended.line !== undefined) sink.err(ended.line)
process.exitCode = ended.code
