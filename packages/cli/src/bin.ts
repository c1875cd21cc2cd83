#!/usr/bin/env node
/**
 * The `maka` executable. Parses the command line and dispatches; the commands arrive with the CLI issue.
 */
import { USAGE } from "./Usage.ts"

const argv = process.argv.slice(2)
const first = argv[0]
if (first === undefined || first === "-h" || first === "--help" || first === "help") {
  process.stdout.write(USAGE)
  process.exitCode = first === undefined ? 2 : 0
} else if (first === "-v" || first === "--version") {
  process.stdout.write("0.0.0\n")
} else {
  process.stderr.write(`maka: unknown command '${first}'\n\n${USAGE}`)
  process.exitCode = 2
}
