/**
 * Child process of the builtin tools' permission tests, run as
 * `node --import tsx builtin-call.ts <list|write> <root> <path>` (under another user when the test
 * runs as root): prints the outcome of one `list_files` call, or one `write_file` of "new" to the
 * path, as one JSON line, `{"output": …}` or `{"failure": message}`.
 */
import { Effect, Exit } from "effect"
import { listFiles } from "../../src/internal/list-files.ts"
import { writeFile } from "../../src/internal/write-file.ts"

const [tool, root, target] = process.argv.slice(2)
if (root === undefined || target === undefined || (tool !== "list" && tool !== "write")) {
  throw new Error("usage: builtin-call.ts <list|write> <root> <path>")
}
const call = tool === "list" ? listFiles(root, { path: target }) : writeFile(root, { path: target, content: "new" })
const exit = await Effect.runPromiseExit(call)
process.stdout.write(`${JSON.stringify(Exit.isSuccess(exit) ? { output: exit.value } : { failure: String(exit.cause) })}\n`)
