import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"

const repositoryRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
const script = path.join(repositoryRoot, "tools/ci-summary.mjs")
const directory = fs.mkdtempSync(path.join(os.tmpdir(), "maka-ci-summary-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

let fileNumber = 0
const summarize = (report: unknown) => {
  const file = path.join(directory, `report-${++fileNumber}.json`)
  fs.writeFileSync(file, typeof report === "string" ? report : JSON.stringify(report))
  return summarizeFile(file)
}
const summarizeFile = (file: string) => {
  const result = spawnSync(process.execPath, [script, file], { encoding: "utf8" })
  return { status: result.status, stdout: result.stdout, stderr: result.stderr }
}

/** The fields vitest 4's JSON reporter writes (checked against `vitest run --reporter=json`). */
const report = (fields: Record<string, unknown>) => ({
  numTotalTests: 0,
  numPassedTests: 0,
  numFailedTests: 0,
  numPendingTests: 0,
  numTodoTests: 0,
  success: true,
  testResults: [],
  ...fields,
})

describe("tools/ci-summary.mjs", () => {
  it("prints the closing line of a green run", () => {
    const result = summarize(report({ numTotalTests: 12, numPassedTests: 12 }))
    expect(result.stdout).toBe("12 passed, 0 failed\n")
    expect(result.status).toBe(0)
  })

  it("adds skipped and todo tests only when there are some", () => {
    const result = summarize(report({ numPassedTests: 3, numPendingTests: 1, numTodoTests: 1 }))
    expect(result.stdout).toBe("3 passed, 0 failed, 2 skipped\n")
    expect(result.status).toBe(0)
  })

  it("exits 1 when a test failed", () => {
    const result = summarize(report({ numPassedTests: 3, numFailedTests: 2, success: false }))
    expect(result.stdout).toBe("3 passed, 2 failed\n")
    expect(result.status).toBe(1)
  })

  it("counts a test file that failed to load as a failure", () => {
    const result = summarize(
      report({
        numPassedTests: 3,
        success: false,
        testResults: [{ name: "/repo/a.test.ts", status: "failed", message: "Cannot find module './x.ts'", assertionResults: [] }],
      }),
    )
    expect(result.stdout).toBe("3 passed, 1 failed\n")
    expect(result.stderr).toContain("/repo/a.test.ts: Cannot find module './x.ts'")
    expect(result.status).toBe(1)
  })

  it("exits 1 on errors vitest reports outside any test", () => {
    const result = summarize(report({ numPassedTests: 3, success: false }))
    expect(result.stdout).toBe("3 passed, 1 failed\n")
    expect(result.status).toBe(1)
  })

  it("exits 1 when no test ran", () => {
    const result = summarize(report({}))
    expect(result.stdout).toBe("0 passed, 0 failed\n")
    expect(result.stderr).toContain("no test ran")
    expect(result.status).toBe(1)
  })

  it("exits 1 when the report is missing or unreadable", () => {
    expect(summarizeFile(path.join(directory, "missing.json")).status).toBe(1)
    const unreadable = summarize("{ not json")
    expect(unreadable.status).toBe(1)
    expect(unreadable.stderr).toContain("cannot read the vitest report")
  })
})
