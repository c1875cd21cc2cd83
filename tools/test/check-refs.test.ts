import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterEach, describe, expect, it } from "vitest"

const repositoryRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
const checkScript = path.join(repositoryRoot, "tools/check-refs.mjs")
const rewriteScript = path.join(repositoryRoot, "tools/rewrite-refs.mjs")

// Spelled in pieces so that this file holds no reference the check itself would read.
const S = "\u00a7"
const DESIGN = "DESIGN"
const BEHAVIOUR = "SEMANTICS"
const SCENARIO = "scenario"
const DOCS = "docs"

const run = (script: string, args: ReadonlyArray<string>) => {
  const result = spawnSync(process.execPath, [script, ...args], { cwd: os.tmpdir(), encoding: "utf8" })
  return { status: result.status, stdout: result.stdout, stderr: result.stderr }
}
const check = (root: string) => run(checkScript, [root])

const temporaryRoots: Array<string> = []
afterEach(() => {
  for (const root of temporaryRoots.splice(0)) fs.rmSync(root, { recursive: true, force: true })
})

const write = (root: string, file: string, text: string) => {
  fs.mkdirSync(path.dirname(path.join(root, file)), { recursive: true })
  fs.writeFileSync(path.join(root, file), text)
}
const read = (root: string, file: string) => fs.readFileSync(path.join(root, file), "utf8")

/** A small docs/ tree and a package whose references all resolve. */
const cleanTree = () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "maka-check-refs-"))
  temporaryRoots.push(root)
  write(
    root,
    "docs/engine.md",
    [
      "# Engine",
      "",
      "## 5 Engine",
      "",
      "### 5.3 Runner",
      "",
      "### 5.4 Step loop",
      "",
      `See ${S}5.3 and [log-format.md ${S}3.3](log-format.md#33-append-rules).`,
      "",
      "```",
      "## 5.9 Not a heading: inside a fence",
      "```",
      "",
    ].join("\n"),
  )
  write(root, "docs/log-format.md", ["# Log", "", "## 3.3 Append rules", "", "### 2.12 Journal", ""].join("\n"))
  write(root, "docs/architecture.md", ["# Architecture", "", "## 2 Layout", "", "## 7 Tools", ""].join("\n"))
  write(root, "docs/cli.md", ["# CLI", "", "## 10 The maka command", "", "## 10.1 How the CLI builds a run", ""].join("\n"))
  write(root, "docs/README.md", "# Docs\n\nWhat lives where.\n")
  write(root, "docs/model.md", ["# Model", "", "## 4.5 Error classification", ""].join("\n"))
  write(root, "docs/tools.md", ["# Tools", "", "## 2.12 Tool contracts and the journal", ""].join("\n"))
  write(
    root,
    "docs/scenarios.md",
    ["# Scenarios", "", "## 6 Behaviour scenarios", "", '<a id="scenario-18"></a>', "#### 18. A failed dispatch commit", ""].join("\n"),
  )
  write(
    root,
    "packages/engine/src/Runner.ts",
    [
      `/** The step loop (docs/engine.md ${S}5.4 step 11) and the runner (docs/engine.md ${S}5.3${"\u2013"}${S}5.4). */`,
      `// The append rules: docs/log-format.md#33-append-rules and docs/log-format.md ${S}3.3.`,
      "export const loop = 1",
      "",
    ].join("\n"),
  )
  write(root, "packages/engine/test/Runner.test.ts", `it("never runs a failed dispatch (${SCENARIO} 18)", () => {})\n`)
  write(root, "packages/engine/README.md", `The step loop: [docs/engine.md ${S}5.4](../../docs/engine.md#54-step-loop).\n`)
  write(root, "tools/script.mjs", `// The layers of docs/architecture.md ${S}2.\n`)
  write(root, "README.md", "See [docs/](docs/README.md), docs/cli.md and https://example.com/guide/docs/intro.md.\n")
  return root
}

describe("check-refs", () => {
  it("passes when every reference resolves to a heading, an anchor or a scenario in docs/", () => {
    const result = check(cleanTree())
    expect(result.stderr).toBe("")
    expect(result.status).toBe(0)
    expect(result.stdout).toMatch(/^check-refs: \d+ references resolve$/m)
  })

  it("fails on a section that has no heading in the named file, listing file:line", () => {
    const root = cleanTree()
    write(root, "packages/engine/src/Dangling.ts", `// ok\n// the retry rule (docs/engine.md ${S}5.9)\n`)
    const result = check(root)
    expect(result.status).toBe(1)
    expect(result.stderr).toContain(
      `packages/engine/src/Dangling.ts:2: docs/engine.md ${S}5.9: docs/engine.md has no heading numbered 5.9`,
    )
    // A heading inside a code fence is not a heading.
    expect(result.stderr).toContain("check-refs: 1 reference problem")
  })

  it("fails on the later sections of a list that do not resolve", () => {
    const root = cleanTree()
    write(root, "packages/engine/src/List.ts", `// docs/engine.md ${S}5.3, ${S}5.8\n`)
    const result = check(root)
    expect(result.status).toBe(1)
    expect(result.stderr).toContain(`packages/engine/src/List.ts:1: docs/engine.md ${S}5.8: docs/engine.md has no heading numbered 5.8`)
    expect(result.stderr).not.toContain(`${S}5.3:`)
  })

  it("fails on a reference to a retired contract file, with or without a section", () => {
    const root = cleanTree()
    write(root, "packages/tools/src/Tool.ts", `/** A tool (${DESIGN}.md ${S}7). */\n`)
    write(root, "packages/model/README.md", `Classification: \`${BEHAVIOUR}.md\` ${S}4.5.\n\nBuilt against ${DESIGN}.md.\n`)
    write(root, "packages/facts/src/Canonical.ts", `// ${BEHAVIOUR} ${S}2.1\n`)
    const result = check(root)
    expect(result.status).toBe(1)
    expect(result.stderr).toContain(`packages/tools/src/Tool.ts:1: ${DESIGN}.md ${S}7: names a file that is not part of this repository`)
    expect(result.stderr).toContain(`packages/model/README.md:1: ${BEHAVIOUR}.md ${S}4.5: names a file that is not part of this repository`)
    expect(result.stderr).toContain(`packages/model/README.md:3: ${DESIGN}.md: names a file that is not part of this repository`)
    expect(result.stderr).toContain(`packages/facts/src/Canonical.ts:1: ${BEHAVIOUR} ${S}2.1: names a file that is not part of this repository`)
    expect(result.stderr).toContain("check-refs: 4 reference problems")
  })

  it("fails on a section sign without a file outside docs/", () => {
    const root = cleanTree()
    write(root, "packages/facts/src/Prompts.ts", `// Compaction (${S}5.4)\n`)
    const result = check(root)
    expect(result.status).toBe(1)
    expect(result.stderr).toContain(`packages/facts/src/Prompts.ts:1: ${S}5.4 names no file`)
  })

  it("fails on an unknown docs file, a dangling anchor and an unknown scenario", () => {
    const root = cleanTree()
    write(
      root,
      "packages/cli/test/Cli.test.ts",
      [`// ${DOCS}/shell.md ${S}1`, `// ${DOCS}/engine.md#55-prompts`, `it("x (${SCENARIO}s 18, 99)", () => {})`, ""].join("\n"),
    )
    const result = check(root)
    expect(result.status).toBe(1)
    expect(result.stderr).toContain(`packages/cli/test/Cli.test.ts:1: ${DOCS}/shell.md ${S}1: ${DOCS}/shell.md does not exist`)
    expect(result.stderr).toContain(`packages/cli/test/Cli.test.ts:2: ${DOCS}/engine.md#55-prompts: docs/engine.md has no heading or anchor "55-prompts"`)
    expect(result.stderr).toContain(`packages/cli/test/Cli.test.ts:3: ${SCENARIO} 99: docs/scenarios.md has no ${SCENARIO} 99`)
    expect(result.stderr).toContain("check-refs: 3 reference problems")
  })

  it("checks references and relative links inside docs/ against their own files", () => {
    const root = cleanTree()
    write(root, "docs/tools.md", `# Tools\n\n## 2.12 Journal\n\nSee ${S}2.13 and [engine](engine.md#56-retries) and [cli.md ${S}10.2](cli.md).\n`)
    const result = check(root)
    expect(result.status).toBe(1)
    expect(result.stderr).toContain(`docs/tools.md:5: ${S}2.13: docs/tools.md has no heading numbered 2.13`)
    expect(result.stderr).toContain('docs/tools.md:5: engine.md#56-retries: docs/engine.md has no heading or anchor "56-retries"')
    expect(result.stderr).toContain(`docs/tools.md:5: cli.md ${S}10.2: docs/cli.md has no heading numbered 10.2`)
  })

  it("finds no dangling reference inside the repository's own docs/", () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), "maka-check-refs-docs-"))
    temporaryRoots.push(root)
    fs.cpSync(path.join(repositoryRoot, "docs"), path.join(root, "docs"), { recursive: true })
    const result = check(root)
    expect(result.stderr).toBe("")
    expect(result.status).toBe(0)
    // Every scenario 1–67 has its anchor.
    const scenarios = read(root, "docs/scenarios.md")
    for (let number = 1; number <= 67; number++) expect(scenarios).toContain(`<a id="scenario-${number}"></a>`)
  })
})

describe("rewrite-refs", () => {
  /** A tree whose code still cites the retired files. */
  const oldTree = () => {
    const root = cleanTree()
    write(
      root,
      "packages/tools/src/Journal.ts",
      [
        `/** The journal (${BEHAVIOUR}.md ${S}2.12, ${S}5.4) and the tool contract (${DESIGN}.md ${S}7, ${S}10.1). */`,
        `// The runner (${BEHAVIOUR} ${S}5.3${"\u2013"}${S}5.4), the append rules (${S}3.3).`,
        "",
      ].join("\n"),
    )
    write(root, "packages/engine/README.md", `Errors follow \`${BEHAVIOUR}.md\` ${S}4.5.\n\n\`\`\`ts\n// ${BEHAVIOUR}.md ${S}5.4\n\`\`\`\n`)
    write(root, ".changeset/model.md", `---\n"@maka/model": minor\n---\n\nThe output limit field (${DESIGN}.md ${S}7).\n`)
    return root
  }

  it("rewrites named and bare references into docs/ references that the check accepts, and is idempotent", () => {
    const root = oldTree()
    const first = run(rewriteScript, [root])
    expect(first.status).toBe(0)
    expect(first.stdout).toContain("rewrote 10 references in 3 files (9 naming a retired file, 1 without a file, read as behaviour chapters); 0 left")
    expect(read(root, "packages/tools/src/Journal.ts")).toBe(
      [
        `/** The journal (docs/tools.md ${S}2.12, docs/engine.md ${S}5.4) and the tool contract (docs/architecture.md ${S}7, docs/cli.md ${S}10.1). */`,
        `// The runner (docs/engine.md ${S}5.3${"\u2013"}${S}5.4), the append rules (docs/log-format.md ${S}3.3).`,
        "",
      ].join("\n"),
    )
    expect(read(root, "packages/engine/README.md")).toBe(
      `Errors follow [docs/model.md ${S}4.5](../../docs/model.md#45-error-classification).\n\n\`\`\`ts\n// docs/engine.md ${S}5.4\n\`\`\`\n`,
    )
    // A changeset's text is copied into each package's changelog: no relative link there.
    expect(read(root, ".changeset/model.md")).toContain(`The output limit field (docs/architecture.md ${S}7).`)
    expect(check(root).status).toBe(0)

    const before = read(root, "packages/tools/src/Journal.ts")
    const second = run(rewriteScript, [root])
    expect(second.status).toBe(0)
    expect(second.stdout).toContain("rewrote 0 references in 0 files")
    expect(read(root, "packages/tools/src/Journal.ts")).toBe(before)
  })

  it("writes nothing with --dry-run, and leaves and lists what it cannot map", () => {
    const root = oldTree()
    write(root, "packages/facts/src/Old.ts", `// ${BEHAVIOUR}.md ${S}9.9 and ${DESIGN}.md\n`)
    const before = read(root, "packages/tools/src/Journal.ts")
    const result = run(rewriteScript, ["--dry-run", root])
    expect(result.status).toBe(1)
    expect(result.stdout).toContain("would rewrite 10 references in 3 files")
    expect(result.stdout).toContain(`left: packages/facts/src/Old.ts:1: ${BEHAVIOUR}.md ${S}9.9 has no heading in docs/`)
    expect(result.stdout).toContain(`left: packages/facts/src/Old.ts:1: ${DESIGN}.md names a retired file without a section`)
    expect(read(root, "packages/tools/src/Journal.ts")).toBe(before)
  })
})
