/**
 * `write_file` replaces a file, never rewrites it in place: the content goes to a new file beside it
 * that is renamed over it. A write that fails part way (here a real file-size limit, `ulimit -f`, in
 * a child process: `EFBIG`, as a full disk gives `ENOSPC`) leaves the old content and no temporary.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { assert, describe, it } from "@effect/vitest"
import { Builtins } from "@maka/tools"
import { Effect } from "effect"
import { call, textOf, workspaceFixture } from "./fixtures.ts"

const repository = path.resolve(import.meta.dirname, "../../..")

/**
 * Runs `write_file {path, content: "N" × bytes}` in a child process whose files may grow to at most
 * `limitKib` KiB, and returns what it printed: the outcome as JSON.
 */
const writeLimited = (directory: string, root: string, file: string, bytes: number, limitKib: number) => {
  const script = path.join(directory, "write-limited.mjs")
  const tools = pathToFileURL(path.join(repository, "packages/tools/src/index.ts")).href
  const effect = pathToFileURL(createRequire(path.join(repository, "packages/tools/package.json")).resolve("effect")).href
  fs.writeFileSync(
    script,
    `import { Builtins } from ${JSON.stringify(tools)}
import { Effect } from ${JSON.stringify(effect)}
const [root, file, bytes] = process.argv.slice(2)
const run = await Effect.runPromise(Builtins.writeFile({ root }).decode({ path: file, content: "N".repeat(Number(bytes)) }))
const exit = await Effect.runPromiseExit(run({ signal: new AbortController().signal }))
process.stdout.write(JSON.stringify(exit._tag === "Success" ? { wrote: exit.value.value } : { failed: exit.cause.reasons[0]?.error?.message }))
`,
  )
  const command = `ulimit -f ${limitKib}; exec "$0" --import tsx --conditions=@maka/source "$@"`
  const child = spawnSync("bash", ["-c", command, process.execPath, script, root, file, String(bytes)], {
    cwd: repository,
    encoding: "utf8",
    timeout: 60_000,
  })
  assert.strictEqual(child.status, 0, child.stderr)
  return JSON.parse(child.stdout) as { readonly wrote?: string; readonly failed?: string }
}

describe("write_file replaces a file", () => {
  it.effect("keeps the old content, and leaves nothing beside it, when the write fails part way", () =>
    Effect.gen(function* () {
      const { base, root } = yield* workspaceFixture
      fs.writeFileSync(path.join(root, "important.txt"), "precious original content\n")
      fs.chmodSync(path.join(root, "important.txt"), 0o640)
      const before = fs.readdirSync(root).sort()
      const failed = writeLimited(base, root, "important.txt", 200 * 1024, 100)
      assert.isString(failed.failed)
      assert.match(failed.failed!, /^important\.txt: /)
      assert.strictEqual(fs.readFileSync(path.join(root, "important.txt"), "utf8"), "precious original content\n")
      assert.strictEqual(fs.statSync(path.join(root, "important.txt")).mode & 0o777, 0o640)
      // A new file that cannot be written is not left half-written either.
      assert.match(writeLimited(base, root, "fresh.txt", 200 * 1024, 100).failed!, /^fresh\.txt: /)
      assert.deepStrictEqual(fs.readdirSync(root).sort(), before)
      // Within the limit the same child writes it.
      assert.deepStrictEqual(writeLimited(base, root, "important.txt", 50 * 1024, 100), { wrote: `Wrote ${50 * 1024} bytes to important.txt` })
      assert.strictEqual(fs.readFileSync(path.join(root, "important.txt"), "utf8"), "N".repeat(50 * 1024))
      assert.deepStrictEqual(fs.readdirSync(root).sort(), before)
    }),
  )

  it.effect("gives the new file the old one's permission bits; another hard link keeps the old content", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const file = path.join(root, "script.sh")
      fs.writeFileSync(file, "echo old\n")
      fs.chmodSync(file, 0o751)
      fs.linkSync(file, path.join(root, "script-link.sh"))
      const tool = Builtins.writeFile(workspace)
      assert.strictEqual(textOf(yield* call(tool, { path: "script.sh", content: "echo new\n" })), "Wrote 9 bytes to script.sh")
      assert.strictEqual(fs.readFileSync(file, "utf8"), "echo new\n")
      assert.strictEqual(fs.statSync(file).mode & 0o7777, 0o751)
      assert.strictEqual(fs.readFileSync(path.join(root, "script-link.sh"), "utf8"), "echo old\n")
      assert.deepStrictEqual(fs.readdirSync(root).sort(), [".maka-workspace.json", "script-link.sh", "script.sh"])
    }),
  )
})
