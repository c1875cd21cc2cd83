/**
 * An application bundled into one file with esbuild, the drivers left outside (packages/engine
 * README, "Install"): as ES modules and as CommonJS, where `import.meta.url` is empty and the writer
 * lease finds its driver's file through the bundle's own `require`. Bundles the built package and
 * runs each bundle in a child process, from another directory, on a fresh SQLite log.
 */
import { assert, beforeAll, describe, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { build } from "esbuild"

const ROOT = fs.realpathSync(path.resolve(import.meta.dirname, "../../.."))
const ENGINE = path.join(ROOT, "packages", "engine", "dist", "index.js")

const APP = `
import { createEngine } from ${JSON.stringify(ENGINE)}
const main = async () => {
  const engine = await createEngine({ database: process.argv[2] })
  const events = await engine.events("none")
  await engine.close()
  process.stdout.write("opened " + events.length)
}
main().catch((error) => process.stdout.write("failed: " + error.message))
`

describe("an application bundled into one file", () => {
  // The built package runs in the child: built first (incremental; the cli project's setup does it too).
  beforeAll(() => {
    const build = spawnSync(path.join(ROOT, "node_modules/.bin/tsc"), ["-b", "packages/engine"], { cwd: ROOT, encoding: "utf8", timeout: 240_000 })
    if (build.status !== 0) throw new Error(`tsc -b packages/engine failed:\n${build.stdout}${build.stderr}`)
  }, 240_000)

  for (const format of ["cjs", "esm"] as const) {
    it(`opens a SQLite log as ${format === "cjs" ? "CommonJS" : "ES modules"}`, { timeout: 60_000 }, async () => {
      const directory = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "maka-bundle-")))
      try {
        fs.writeFileSync(path.join(directory, "app.mjs"), APP)
        const outfile = path.join(directory, `bundle.${format === "cjs" ? "cjs" : "mjs"}`)
        await build({
          entryPoints: [path.join(directory, "app.mjs")],
          bundle: true,
          platform: "node",
          format,
          outfile,
          external: ["better-sqlite3", "pg"],
          logLevel: "silent",
        })
        // The driver beside the bundle, as a deployment's `node_modules` gives it: the repository's own.
        fs.mkdirSync(path.join(directory, "node_modules"))
        fs.symlinkSync(path.join(ROOT, "node_modules", "better-sqlite3"), path.join(directory, "node_modules", "better-sqlite3"))
        const child = spawnSync(process.execPath, [outfile, path.join(directory, "log.db")], { cwd: directory, encoding: "utf8", timeout: 60_000 })
        assert.strictEqual(child.stdout, "opened 0", child.stderr)
      } finally {
        fs.rmSync(directory, { recursive: true, force: true })
      }
    })
  }
})
