/**
 * Vitest global setup of the cli project: builds the `maka` binary (and the packages it references)
 * once with `tsc -b`, so the end-to-end tests spawn `node packages/cli/dist/bin.js` as users run it.
 */
import { spawnSync } from "node:child_process"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

export default function setup(): void {
  const packageRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
  const repositoryRoot = path.resolve(packageRoot, "../..")
  const tsc = path.join(repositoryRoot, "node_modules/.bin/tsc")
  const build = spawnSync(tsc, ["-b", "packages/cli"], { cwd: repositoryRoot, encoding: "utf8", timeout: 240_000 })
  if (build.status !== 0) {
    throw new Error(`tsc -b packages/cli failed (${build.status ?? build.signal}):\n${build.stdout}${build.stderr}`)
  }
}
