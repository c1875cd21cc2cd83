/**
 * A strict NodeNext program outside the repository, type checked by the repository's `tsc` against
 * the workspace's packages as an installed project sees them (its `node_modules` is the
 * repository's) and through their sources (the `@maka/source` condition): the README examples' check
 * and the library declarations' check.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

export const repositoryRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..")

/** Compiles `files` (already written in `folder`) with `options` over the common ones; tsc's output and status. */
export const compileProgram = (folder: string, files: ReadonlyArray<string>, options: Readonly<Record<string, unknown>>) => {
  fs.symlinkSync(path.join(repositoryRoot, "node_modules"), path.join(folder, "node_modules"), "dir")
  fs.writeFileSync(path.join(folder, "package.json"), JSON.stringify({ type: "module" }))
  const compilerOptions = {
    strict: true,
    exactOptionalPropertyTypes: true,
    module: "NodeNext",
    moduleResolution: "NodeNext",
    target: "ES2022",
    lib: ["ES2023", "DOM"],
    types: ["node"],
    skipLibCheck: true,
    customConditions: ["@maka/source"],
    allowImportingTsExtensions: true,
    ...options,
  }
  fs.writeFileSync(path.join(folder, "tsconfig.json"), JSON.stringify({ compilerOptions, files }))
  const tsc = path.join(repositoryRoot, "node_modules/.bin/tsc")
  const result = spawnSync(tsc, ["-p", path.join(folder, "tsconfig.json")], { cwd: folder, encoding: "utf8" })
  return { output: `${result.stdout}${result.stderr}`, status: result.status }
}
