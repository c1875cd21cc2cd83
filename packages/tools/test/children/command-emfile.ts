/**
 * Child process of the run_command descriptor test, run as
 * `node --import tsx command-emfile.ts <root>` under a small `ulimit -n`: takes every free file
 * descriptor, runs one command (whose pipes then cannot be made), gives the descriptors back, and
 * prints the outcome as one JSON line, `{"output": …}` or `{"failure": message}`. A process that
 * crashed prints nothing.
 */
import { Effect, Exit } from "effect"
import * as fs from "node:fs"
import { runCommand } from "../../src/internal/run-command.ts"

const [root] = process.argv.slice(2)
if (root === undefined) throw new Error("usage: command-emfile.ts <root>")
const held: Array<number> = []
try {
  for (;;) held.push(fs.openSync("/dev/null", "r"))
} catch {
  // Every descriptor is taken.
}
const call = runCommand(root, { timeoutSeconds: 5, outputBytes: 1024, outputDrainMs: 50, hiddenEnvironment: [] }, { command: "echo ran" }, new AbortController().signal)
const exit = await Effect.runPromiseExit(call)
for (const fd of held) fs.closeSync(fd)
// The shell's late 'error' of a failed spawn, if any, comes in a later turn: the process outlives it.
await new Promise((resolve) => setTimeout(resolve, 100))
process.stdout.write(`${JSON.stringify(Exit.isSuccess(exit) ? { output: exit.value } : { failure: String(exit.cause) })}\n`)
