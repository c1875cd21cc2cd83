/**
 * For a test that runs a package's built `dist` in a child process (a bundle, Node's permission
 * model): builds it and the packages it references with `tsc -b` first, as the cli project's global
 * setup does, so the test never runs a missing or stale build. Incremental: a build that is current
 * costs a fraction of a second.
 */
import { spawnSync } from "node:child_process"
import * as path from "node:path"

const ROOT = path.resolve(import.meta.dirname, "../..")

export const buildDist = (packageName: string): void => {
  const tsc = path.join(ROOT, "node_modules/.bin/tsc")
  const build = spawnSync(tsc, ["-b", `packages/${packageName}`], { cwd: ROOT, encoding: "utf8", timeout: 240_000 })
  if (build.status !== 0) throw new Error(`tsc -b packages/${packageName} failed (${build.status ?? build.signal}):\n${build.stdout}${build.stderr}`)
}
