/**
 * Every TypeScript example in a package README type checks, as a strict NodeNext program against
 * the packages' sources, so an example cannot drift from the API it shows. A value the example
 * takes from its host (a step, an event) is declared in the example (`declare const`), which says
 * where it comes from. The testkit's examples are also run, by its own `ReadmeExamples.test.ts`.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"

const repositoryRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
const PACKAGES = ["engine", "event-log", "facts", "model", "tools", "testkit"]

/** The ```ts blocks of a README, in order. */
const examplesOf = (markdown: string): ReadonlyArray<string> =>
  [...markdown.matchAll(/^```ts\n([\s\S]*?)^```/gm)].map((match) => match[1]!)

const folder = fs.mkdtempSync(path.join(os.tmpdir(), "maka-readme-examples-"))
afterAll(() => fs.rmSync(folder, { recursive: true, force: true }))

describe("the package READMEs' examples", () => {
  it("finds the examples in a README's ts blocks only", () => {
    expect(examplesOf("text\n```ts\nconst a = 1\n```\n```sh\nls\n```\n```ts\nconst b = 2\n```\n")).toEqual([
      "const a = 1\n",
      "const b = 2\n",
    ])
  })

  it("type check, each as a module of its own, strict and NodeNext", () => {
    const files: Array<string> = []
    for (const name of PACKAGES) {
      const examples = examplesOf(fs.readFileSync(path.join(repositoryRoot, "packages", name, "README.md"), "utf8"))
      examples.forEach((example, index) => {
        const file = `${name}-${index + 1}.ts`
        fs.writeFileSync(path.join(folder, file), example)
        files.push(file)
      })
    }
    // Every package with an API shows one.
    for (const name of PACKAGES) expect(files.some((file) => file.startsWith(`${name}-`)), name).toBe(true)
    // The workspace's packages and their dependencies, as an installed project would see them.
    fs.symlinkSync(path.join(repositoryRoot, "node_modules"), path.join(folder, "node_modules"), "dir")
    fs.writeFileSync(path.join(folder, "package.json"), JSON.stringify({ type: "module" }))
    fs.writeFileSync(
      path.join(folder, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          exactOptionalPropertyTypes: true,
          module: "NodeNext",
          moduleResolution: "NodeNext",
          target: "ES2022",
          lib: ["ES2023", "DOM"],
          types: ["node"],
          noEmit: true,
          skipLibCheck: true,
          moduleDetection: "force",
          customConditions: ["@maka/source"],
          allowImportingTsExtensions: true,
        },
        files,
      }),
    )
    const tsc = path.join(repositoryRoot, "node_modules/.bin/tsc")
    const result = spawnSync(tsc, ["-p", path.join(folder, "tsconfig.json")], { cwd: folder, encoding: "utf8" })
    expect(`${result.stdout}${result.stderr}`).toBe("")
    expect(result.status).toBe(0)
  }, 120_000)
})
