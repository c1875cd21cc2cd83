import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterEach, describe, expect, it } from "vitest"

const repositoryRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
const script = path.join(repositoryRoot, "tools/check-deps.mjs")

/** What each package's source may import (docs/architecture.md §2), used to build a clean fixture tree. */
const DIRECTION: Record<string, ReadonlyArray<string>> = {
  facts: [],
  "event-log": ["facts"],
  model: ["facts"],
  tools: ["facts"],
  engine: ["facts", "event-log", "model", "tools"],
  testkit: ["facts"],
  cli: ["facts", "event-log", "model", "tools", "engine", "testkit"],
}

const run = (rootDir?: string) => {
  const result = spawnSync(process.execPath, rootDir === undefined ? [script] : [script, rootDir], {
    cwd: os.tmpdir(),
    encoding: "utf8",
  })
  return { status: result.status, stdout: result.stdout, stderr: result.stderr }
}

const temporaryRoots: Array<string> = []
afterEach(() => {
  for (const root of temporaryRoots.splice(0)) fs.rmSync(root, { recursive: true, force: true })
})

const write = (root: string, file: string, text: string) => {
  fs.mkdirSync(path.dirname(path.join(root, file)), { recursive: true })
  fs.writeFileSync(path.join(root, file), text)
}

/** A tree of the seven packages that obeys the direction: every allowed import is present. */
const cleanTree = () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "maka-check-deps-"))
  temporaryRoots.push(root)
  for (const [name, allowed] of Object.entries(DIRECTION)) {
    const dependencies = Object.fromEntries(allowed.map((target) => [`@maka/${target}`, "workspace:^"]))
    const devDependencies = name === "testkit" || name === "facts" ? {} : { "@maka/testkit": "workspace:^" }
    write(root, `packages/${name}/package.json`, JSON.stringify({ name: `@maka/${name}`, dependencies, devDependencies }, null, 2))
    write(
      root,
      `packages/${name}/src/index.ts`,
      [
        `/** @maka/${name}: a fixture. import "@maka/cli" in a comment is ignored. */`,
        ...allowed.map((target, index) => `import * as Dependency${index} from "@maka/${target}"`),
        `export * as Module from "./Module.ts"`,
        `// import { x } from "@maka/cli"`,
        `export const text = "import { y } from '@maka/cli'"`,
        "",
      ].join("\n"),
    )
    write(root, `packages/${name}/src/Module.ts`, `import { text } from "./internal/helper.ts"\nexport const value = text\n`)
    write(root, `packages/${name}/src/internal/helper.ts`, `export const text = "../../../other"\n`)
    write(
      root,
      `packages/${name}/test/Module.test.ts`,
      [
        `import { value } from "../src/Module.ts"`,
        `import * as Self from "@maka/${name}"`,
        ...(name === "facts" ? [] : [`import * as Testkit from "@maka/testkit"`]),
        ...allowed.map((target) => `import * as Testing${target.replace("-", "")} from "@maka/${target}/testing"`),
        "",
      ].join("\n"),
    )
  }
  return root
}

describe("tools/check-deps.mjs", () => {
  it("accepts the repository as it is", () => {
    const result = run()
    expect(result.stderr).toBe("")
    expect(result.stdout).toMatch(/^dependency direction ok \(\d+ files\)\n$/)
    expect(result.status).toBe(0)
  })

  it("accepts a tree that uses every allowed edge", () => {
    const root = cleanTree()
    const result = run(root)
    expect(result.stderr).toBe("")
    expect(result.stdout).toMatch(/^dependency direction ok \(\d+ files\)\n$/)
    expect(result.status).toBe(0)
  })

  it("lets a test use a sibling's ./testing entry, but not one of a package above its own", () => {
    const root = cleanTree()
    write(root, "packages/tools/test/Journal.test.ts", `import * as LogTesting from "@maka/event-log/testing"\n`)
    expect(run(root).status).toBe(0)
    write(root, "packages/tools/test/Engine.test.ts", `import * as EngineTesting from "@maka/engine/testing"\n`)
    const result = run(root)
    expect(result.status).toBe(1)
    expect(result.stderr).toContain("packages/tools/test/Engine.test.ts:1: @maka/tools must not import @maka/engine/testing")
  })

  it("rejects a middle package importing another middle package", () => {
    const root = cleanTree()
    write(root, "packages/model/src/Route.ts", `import { Schema } from "effect"\n\nimport type { EventLog } from "@maka/event-log"\n`)
    const result = run(root)
    expect(result.status).toBe(1)
    expect(result.stdout).toBe("")
    expect(result.stderr).toContain(
      "packages/model/src/Route.ts:3: @maka/model must not import @maka/event-log (docs/architecture.md §2)",
    )
  })

  it("rejects facts importing anything of maka, however the import is written", () => {
    const root = cleanTree()
    write(
      root,
      "packages/facts/src/Loader.ts",
      [
        `export { EventLog } from "@maka/event-log"`,
        `export const load = () => import("@maka/model")`,
        `const tools = require("@maka/tools")`,
        `import "@maka/engine"`,
        "",
      ].join("\n"),
    )
    const result = run(root)
    expect(result.status).toBe(1)
    for (const [line, target] of [[1, "event-log"], [2, "model"], [3, "tools"], [4, "engine"]] as const) {
      expect(result.stderr).toContain(`packages/facts/src/Loader.ts:${line}: @maka/facts must not import @maka/${target}`)
    }
  })

  it("rejects a relative import that leaves the package", () => {
    const root = cleanTree()
    write(root, "packages/engine/src/Runner.ts", `import { Fact } from "../../facts/src/Fact.ts"\n`)
    const result = run(root)
    expect(result.status).toBe(1)
    expect(result.stderr).toContain("packages/engine/src/Runner.ts:1: @maka/engine must not import ../../facts/src/Fact.ts")
  })

  it("lets only a package's mutation config reach the mutation tooling outside it", () => {
    const root = cleanTree()
    write(root, "packages/engine/vitest.mutate.config.ts", `import { QuickFirstSequencer } from "../../tools/mutate/sequencer.ts"\n`)
    expect(run(root).status).toBe(0)
    write(root, "packages/engine/vitest.config.ts", `import { QuickFirstSequencer } from "../../tools/mutate/sequencer.ts"\n`)
    write(root, "packages/event-log/vitest.mutate.config.ts", `import { x } from "../../tools/bench/lib.ts"\n`)
    const result = run(root)
    expect(result.status).toBe(1)
    expect(result.stderr).toContain("packages/engine/vitest.config.ts:1: @maka/engine must not import ../../tools/mutate/sequencer.ts")
    expect(result.stderr).toContain("packages/event-log/vitest.mutate.config.ts:1: @maka/event-log must not import ../../tools/bench/lib.ts")
    expect(result.stderr).not.toContain("packages/engine/vitest.mutate.config.ts")
  })

  it("rejects private modules of another package", () => {
    const root = cleanTree()
    write(root, "packages/engine/src/Runner.ts", `import { sql } from "@maka/event-log/internal/sql.ts"\n`)
    const result = run(root)
    expect(result.status).toBe(1)
    expect(result.stderr).toContain(
      "packages/engine/src/Runner.ts:1: @maka/engine must not import @maka/event-log/internal/sql.ts",
    )
  })

  it("rejects a test that imports a package above its own", () => {
    const root = cleanTree()
    write(root, "packages/tools/test/Journal.test.ts", `import { createEngine } from "@maka/engine"\n`)
    const result = run(root)
    expect(result.status).toBe(1)
    expect(result.stderr).toContain("packages/tools/test/Journal.test.ts:1: @maka/tools must not import @maka/engine")
  })

  it("rejects a forbidden workspace dependency in package.json", () => {
    const root = cleanTree()
    const manifestFile = path.join(root, "packages/event-log/package.json")
    const manifest = JSON.parse(fs.readFileSync(manifestFile, "utf8")) as Record<string, unknown>
    manifest["dependencies"] = { "@maka/facts": "workspace:^", "@maka/model": "workspace:^" }
    fs.writeFileSync(manifestFile, JSON.stringify(manifest, null, 2))
    const result = run(root)
    expect(result.status).toBe(1)
    expect(result.stderr).toMatch(/packages\/event-log\/package\.json:\d+: @maka\/event-log must not import @maka\/model/)
  })

  it("rejects a test-only dependency that closes a workspace cycle", () => {
    const root = cleanTree()
    const manifestFile = path.join(root, "packages/facts/package.json")
    const manifest = JSON.parse(fs.readFileSync(manifestFile, "utf8")) as Record<string, unknown>
    manifest["devDependencies"] = { "@maka/testkit": "workspace:^" }
    fs.writeFileSync(manifestFile, JSON.stringify(manifest, null, 2))
    const result = run(root)
    expect(result.status).toBe(1)
    expect(result.stderr).toContain(
      "packages/facts/package.json:5: @maka/facts must not import @maka/testkit (docs/architecture.md §2): @maka/testkit depends on @maka/facts",
    )
  })

  it("rejects a package the direction does not know", () => {
    const root = cleanTree()
    write(root, "packages/extra/package.json", JSON.stringify({ name: "@maka/extra" }))
    const result = run(root)
    expect(result.status).toBe(1)
    expect(result.stderr).toContain("packages/extra/package.json:1: @maka/extra has no place in the dependency direction")
  })
})
