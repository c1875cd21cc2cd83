/**
 * Child process of the lease test without file descriptors, run as
 * `node --import tsx lease-emfile.ts <database>` under a small `ulimit -n`: takes every free file
 * descriptor, asks for the writer's lease (its keeper cannot be spawned), gives the descriptors
 * back, and prints `refused <message>` or `acquired`. A process that crashed prints nothing.
 */
import * as fs from "node:fs"
import { acquireLease } from "../../src/internal/lease.ts"

const [file] = process.argv.slice(2)
if (file === undefined) throw new Error("usage: lease-emfile.ts <database>")
const held: Array<number> = []
try {
  for (;;) held.push(fs.openSync("/dev/null", "r"))
} catch {
  // Every descriptor is taken.
}
let outcome: string
try {
  await (await acquireLease(file)).release()
  outcome = "acquired"
} catch (error) {
  outcome = `refused ${error instanceof Error ? error.message : String(error)}`
}
for (const fd of held) fs.closeSync(fd)
// A late 'error' of the failed spawn, if any, comes in a later turn: the process outlives it.
await new Promise((resolve) => setTimeout(resolve, 100))
process.stdout.write(`${outcome}\n`)
