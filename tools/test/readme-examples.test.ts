/**
 * Every TypeScript example in a package README type checks, as a strict NodeNext program against
 * the packages' sources, so an example cannot drift from the API it shows. A value the example
 * takes from its host (a step, an event) is declared in the example (`declare const`), which says
 * where it comes from. The testkit's examples are also run, by its own `ReadmeExamples.test.ts`.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { compileProgram, repositoryRoot } from "./support/workspace-program.ts"

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
    const result = compileProgram(folder, files, { noEmit: true, moduleDetection: "force" })
    expect(result.output).toBe("")
    expect(result.status).toBe(0)
  }, 120_000)
})
