import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"

const repositoryRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
const script = path.join(repositoryRoot, "tools/pack-check.mjs")
const directory = fs.mkdtempSync(path.join(os.tmpdir(), "maka-pack-check-test-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

const manifest = {
  name: "@maka/example",
  version: "0.1.0",
  license: "Apache-2.0",
  keywords: ["maka"],
  homepage: "https://example.invalid/maka#readme",
  bugs: { url: "https://example.invalid/maka/issues" },
  repository: { type: "git", url: "git+https://example.invalid/maka.git", directory: "packages/example" },
  type: "module",
  types: "./dist/index.d.ts",
  exports: { ".": { types: "./dist/index.d.ts", default: "./dist/index.js" }, "./package.json": "./package.json" },
  dependencies: { "@maka/facts": "^0.1.0" },
}

/** An unpacked package as `pnpm pack` leaves it, with `change` applied to its files. */
let packageNumber = 0
const unpacked = (change: (files: Map<string, string>) => void = () => {}) => {
  const files = new Map<string, string>([
    ["package.json", JSON.stringify(manifest)],
    ["LICENSE", "Apache License, Version 2.0"],
    ["README.md", "# example"],
    ["src/index.ts", "export const one = 1\n"],
    ["dist/index.js", "export const one = 1;\n//# sourceMappingURL=index.js.map\n"],
    ["dist/index.js.map", JSON.stringify({ version: 3, file: "index.js", sources: ["../src/index.ts"], mappings: "" })],
    ["dist/index.d.ts", "export declare const one = 1;\n//# sourceMappingURL=index.d.ts.map\n"],
    ["dist/index.d.ts.map", JSON.stringify({ version: 3, file: "index.d.ts", sources: ["../src/index.ts"], mappings: "" })],
  ])
  change(files)
  const root = path.join(directory, `package-${++packageNumber}`)
  for (const [file, text] of files) {
    fs.mkdirSync(path.dirname(path.join(root, file)), { recursive: true })
    fs.writeFileSync(path.join(root, file), text)
  }
  return root
}

const withManifest = (fields: Record<string, unknown>, without: ReadonlyArray<string> = []) => (files: Map<string, string>) => {
  const next: Record<string, unknown> = { ...manifest, ...fields }
  for (const field of without) delete next[field]
  files.set("package.json", JSON.stringify(next))
}

const check = (root: string) => {
  const result = spawnSync(process.execPath, [script, "--contents", root], { encoding: "utf8" })
  return { status: result.status, stdout: result.stdout }
}

describe("tools/pack-check.mjs --contents", () => {
  it("accepts a package with its licence, sources beside the maps and published metadata", () => {
    const result = check(unpacked())
    expect(result.stdout).toContain("ok")
    expect(result.status).toBe(0)
  })

  const faults: ReadonlyArray<readonly [string, (files: Map<string, string>) => void, string]> = [
    ["a missing LICENSE", (files) => files.delete("LICENSE"), "no LICENSE file"],
    ["a build-info file", (files) => files.set("dist/.tsbuildinfo", "{}"), "ships the build-info file dist/.tsbuildinfo"],
    ["a source map whose source is not shipped", (files) => files.delete("src/index.ts"), "dist/index.js.map points at ../src/index.ts"],
    ["a map that is not JSON", (files) => files.set("dist/index.js.map", "not json"), "dist/index.js.map is not a JSON source map"],
    ["no top-level types", withManifest({}, ["types"]), 'no top-level "types"'],
    ["a top-level types file that is not shipped", withManifest({ types: "./dist/missing.d.ts" }), '"types" names ./dist/missing.d.ts'],
    [
      "the development condition in the published exports",
      withManifest({ exports: { ".": { "@maka/source": "./src/index.ts", types: "./dist/index.d.ts", default: "./dist/index.js" } } }),
      "still holds the @maka/source condition",
    ],
    ["a workspace range", withManifest({ dependencies: { "@maka/facts": "workspace:^" } }), "dependencies.@maka/facts is still workspace:^"],
    ["a repository without its directory", withManifest({ repository: { type: "git", url: "git+https://example.invalid/maka.git" } }), '"repository" needs a url and a directory'],
    ["no homepage", withManifest({}, ["homepage"]), 'no "homepage"'],
    ["no bugs", withManifest({}, ["bugs"]), 'no "bugs"'],
    ["no keywords", withManifest({ keywords: [] }), 'no "keywords"'],
    ["no licence field", withManifest({}, ["license"]), 'no "license"'],
  ]
  for (const [name, change, problem] of faults) {
    it(`refuses ${name}`, () => {
      const result = check(unpacked(change))
      expect(result.stdout).toContain(problem)
      expect(result.stdout).toContain("FAILED")
      expect(result.status).toBe(1)
    })
  }
})
