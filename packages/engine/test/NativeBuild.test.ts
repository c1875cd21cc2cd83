/**
 * A fresh install whose better-sqlite3 never ran its build: the child process loads the real
 * better-sqlite3 JavaScript from a copy without its `build` folder (a resolve hook points the
 * specifier at it), exactly what a user gets when pnpm skipped the install script.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { afterEach, assert, describe, it } from "vitest"
import * as Hints from "../src/Hints.ts"

const root = path.resolve(import.meta.dirname, "../../..")
const requireFromLog = createRequire(path.join(root, "packages/event-log/package.json"))

const folders: Array<string> = []
afterEach(() => {
  for (const folder of folders.splice(0)) fs.rmSync(folder, { recursive: true, force: true })
})

/** A `node_modules` with better-sqlite3's JavaScript and `bindings`, but no native build. */
const unbuiltDriver = (folder: string): string => {
  const installed = path.dirname(requireFromLog.resolve("better-sqlite3/package.json"))
  const copy = path.join(folder, "node_modules", "better-sqlite3")
  fs.mkdirSync(copy, { recursive: true })
  fs.cpSync(path.join(installed, "lib"), path.join(copy, "lib"), { recursive: true })
  fs.copyFileSync(path.join(installed, "package.json"), path.join(copy, "package.json"))
  const bindings = path.dirname(createRequire(path.join(installed, "package.json")).resolve("bindings/package.json"))
  fs.symlinkSync(bindings, path.join(folder, "node_modules", "bindings"))
  assert.isFalse(fs.existsSync(path.join(copy, "build")))
  return path.join(copy, "lib", "index.js")
}

const hooks = (target: string) => `
import { pathToFileURL } from "node:url"
export async function resolve(specifier, context, next) {
  if (specifier === "better-sqlite3") return { url: pathToFileURL(${JSON.stringify(target)}).href, format: "commonjs", shortCircuit: true }
  return next(specifier, context)
}
`

describe("NativeBuild", () => {
  it("rejects createEngine with Store and the install commands when better-sqlite3 has no native build", async () => {
    const folder = fs.mkdtempSync(path.join(os.tmpdir(), "maka-native-"))
    folders.push(folder)
    fs.writeFileSync(path.join(folder, "hooks.mjs"), hooks(unbuiltDriver(folder)))
    fs.writeFileSync(path.join(folder, "register.mjs"), `import { register } from "node:module"\nregister("./hooks.mjs", import.meta.url)\n`)
    const database = path.join(folder, "agent.sqlite")
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        "--conditions=@maka/source",
        "--import",
        "tsx",
        "--import",
        path.join(folder, "register.mjs"),
        "packages/engine/test/children/open-log.ts",
        database,
      ],
      { cwd: root, timeout: 60_000 },
    )
    const result = JSON.parse(stdout.trim()) as { reason: string; storeReason?: string; message: string }
    assert.strictEqual(result.reason, "Store")
    assert.strictEqual(result.storeReason, "Database")
    assert.isTrue(result.message.startsWith(Hints.NATIVE_BUILD_HINT), result.message)
    assert.include(result.message, "Could not locate the bindings file")
    assert.isFalse(fs.existsSync(database))
  }, 60_000)
})
