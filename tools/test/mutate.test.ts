import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
// @ts-expect-error: a plain JavaScript module of the repository's tools, without types
import { moduleScore, parsePart, partRange, score, strykerOptions, survivors, vitestConfig } from "../mutate/run.mjs"

const mutant = (status: string, line: number, replacement?: string) => ({
  status,
  mutatorName: "ConditionalExpression",
  location: { start: { line, column: 1 }, end: { line, column: 5 } },
  ...(replacement === undefined ? {} : { replacement }),
})

describe("pnpm mutate's reading of a report", () => {
  it("lists the surviving and uncovered mutants with their source line, never the detected ones", () => {
    const report = {
      files: {
        "a.ts": { source: "first()\n  if (x) y()\nlast()", mutants: [mutant("Killed", 1, "{}"), mutant("Survived", 2, "false"), mutant("NoCoverage", 3), mutant("Timeout", 2)] },
      },
    }
    expect(survivors(report)).toEqual([
      'a.ts:2 Survived ConditionalExpression "false"\n    if (x) y()',
      'a.ts:3 NoCoverage ConditionalExpression ""\n    last()',
    ])
  })

  it("scores killed and timed-out mutants over every one tested or left uncovered", () => {
    const results = [mutant("Killed", 1), mutant("Timeout", 1), mutant("Survived", 1), mutant("NoCoverage", 1), mutant("Ignored", 1)]
    expect(score(results)).toMatchObject({ detected: 2, undetected: 2, ignored: 1, score: 50 })
  })

  it("runs a package's mutants against its vitest.mutate.config.ts when it has one", () => {
    expect(vitestConfig("engine")).toBe("packages/engine/vitest.mutate.config.ts")
    expect(vitestConfig("facts")).toBe("packages/facts/vitest.config.ts")
  })
})

describe("pnpm mutate --part", () => {
  const source = [
    "import x from 'x'", // 1
    "", // 2
    "/** A comment. */", // 3
    "export const a = () => {", // 4
    "  if (x) {", // 5
    "    return 1", // 6
    "  }", // 7
    "}", // 8
    "", // 9
    "const b = 2", // 10
    "", // 11
    "function c() {", // 12
    "  return b", // 13
    "}", // 14
  ].join("\n")

  it("cuts every line into exactly one part, each cut at a top-level declaration", () => {
    for (const n of [1, 2, 3, 5]) {
      const ranges = Array.from({ length: n }, (_, index) => partRange(source, { k: index + 1, n }))
      let next = 1
      for (const { start, end } of ranges) {
        expect(start).toBe(next)
        if (end >= start && start > 1) expect(["export const a = () => {", "const b = 2", "function c() {"]).toContain(source.split("\n")[start - 1])
        next = Math.max(next, end + 1)
      }
      expect(next).toBe(15)
    }
    // The middle of a function is never a cut: the half-way line 7 moves down to line 10.
    expect(partRange(source, { k: 1, n: 2 })).toEqual({ start: 1, end: 9 })
    expect(partRange(source, { k: 2, n: 2 })).toEqual({ start: 10, end: 14 })
  })

  it("takes k/n with 1 ≤ k ≤ n only", () => {
    expect(parsePart("2/3")).toEqual({ k: 2, n: 3 })
    for (const bad of ["0/3", "4/3", "3", "a/b", undefined]) expect(() => parsePart(bad)).toThrow(/--part/)
  })

  it("sums a split only over parts run on the files as they are, each over its own lines, and names the parts not run", () => {
    const now = "const a = 1\nconst b = 2\nconst c = 3\nconst d = 4"
    // Part 1 of 2 is line 1, part 2 lines 2–4; an incremental run keeps a neighbour's earlier results.
    expect([partRange(now, { k: 1, n: 2 }), partRange(now, { k: 2, n: 2 })]).toEqual([{ start: 1, end: 1 }, { start: 2, end: 4 }])
    const report = (text: string, entries: ReadonlyArray<readonly [string, number]>) => ({
      files: { "a.ts": { source: text, mutants: entries.map(([status, line]) => mutant(status, line)) } },
    })
    const reports = new Map<string, unknown>([
      ["part-1-of-2", report(now, [["Killed", 1], ["Survived", 1], ["Survived", 3]])],
      ["part-2-of-2", report(now, [["Killed", 2], ["Killed", 4], ["Survived", 1]])],
      ["part-1-of-3", report(Array.from({ length: 9 }, (_, index) => `const v${index} = 0`).join("\n"), [["Killed", 1]])],
    ])
    const module = "journal"
    const base = path.join(os.tmpdir(), "maka-mutate", module)
    const made: Array<string> = []
    for (const name of reports.keys()) {
      const directory = path.join(base, name)
      if (!fs.existsSync(directory)) {
        fs.mkdirSync(directory, { recursive: true })
        made.push(directory)
      }
    }
    try {
      const read = (directory: string) => reports.get(path.basename(directory))
      const found = moduleScore(module, read, () => now)
      expect(found).toEqual([
        expect.objectContaining({ kind: "parts of 2", detected: 3, undetected: 1, score: 75, mutants: 4, stale: false, missing: [] }),
        expect.objectContaining({ kind: "parts of 3", detected: 1, stale: true, missing: [2, 3] }),
      ])
    } finally {
      for (const directory of made) fs.rmSync(directory, { recursive: true })
    }
  })

  it("runs incrementally unless forced, from the last run of the same part", () => {
    const options = strykerOptions("journal", "/reports/journal/part-2-of-3", { k: 2, n: 3 })
    expect(options).toEqual(expect.objectContaining({ incremental: true, incrementalFile: "/reports/journal/part-2-of-3/incremental.json", force: false }))
    expect(strykerOptions("journal", "/reports/journal", undefined, true)).toEqual(expect.objectContaining({ force: true }))
  })
})

describe("the order of a mutant's test files", () => {
  it("runs the file that failed last first, then the quickest first", async () => {
    const { QuickFirstSequencer } = await import("../mutate/sequencer.ts")
    const stats: Record<string, { readonly failed: boolean; readonly duration: number } | undefined> = {
      "engine:test/Slow.test.ts": { failed: false, duration: 9_000 },
      "engine:test/Quick.test.ts": { failed: false, duration: 100 },
      "engine:test/Failed.test.ts": { failed: true, duration: 5_000 },
      "engine:test/Middle.test.ts": { failed: false, duration: 2_000 },
    }
    const context = { cache: { getFileTestResults: (key: string) => stats[key] }, config: { root: "/repo/packages/engine" } }
    const file = (name: string) => ({ project: { name: "engine" }, moduleId: `/repo/packages/engine/test/${name}` })
    const sequencer = new QuickFirstSequencer(context as never)
    const sorted = await sequencer.sort(["Slow.test.ts", "New.test.ts", "Middle.test.ts", "Failed.test.ts", "Quick.test.ts"].map(file) as never)
    // A file with no result yet counts as instant.
    expect(sorted.map((entry) => entry.moduleId.split("/").pop())).toEqual(["Failed.test.ts", "New.test.ts", "Quick.test.ts", "Middle.test.ts", "Slow.test.ts"])
  })
})
