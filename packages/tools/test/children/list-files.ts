/**
 * Child process of the list_files tests, run as `node --import tsx list-files.ts <root> <path>`
 * (under another user when the test runs as root): prints the outcome of one `list_files` call as
 * one JSON line, `{"output": …}` or `{"failure": message}`.
 */
import { Effect, Exit } from "effect"
import { listFiles } from "../../src/internal/list-files.ts"

const [root, listed] = process.argv.slice(2)
if (root === undefined || listed === undefined) throw new Error("usage: list-files.ts <root> <path>")
const exit = await Effect.runPromiseExit(listFiles(root, { path: listed }))
process.stdout.write(
  `${JSON.stringify(Exit.isSuccess(exit) ? { output: exit.value } : { failure: String(exit.cause) })}\n`,
)
