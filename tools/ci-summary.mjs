#!/usr/bin/env node
// Prints the closing line the CI reads, `N passed, N failed` (plus `, N skipped` when N > 0), from
// the file vitest's JSON reporter wrote (`vitest run --reporter=json --outputFile=FILE`).
//
// Usage: node tools/ci-summary.mjs FILE
// Exit 1 when a test failed, a test file failed to load, vitest reported an error outside the tests,
// no test ran, or FILE is missing or unreadable. Plain Node, no dependencies.
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const count = (value) => (Number.isInteger(value) && value >= 0 ? value : 0)

/** The counts of a vitest JSON report, with failures outside any test turned into failed tests. */
export const summarize = (report) => {
  const notes = []
  const passed = count(report.numPassedTests)
  const skipped = count(report.numPendingTests) + count(report.numTodoTests)
  let failed = count(report.numFailedTests)
  // A test file that fails to load (syntax error, missing import) reports no failed test.
  const results = Array.isArray(report.testResults) ? report.testResults : []
  const brokenFiles = results.filter(
    (file) =>
      file?.status === "failed" &&
      !(Array.isArray(file.assertionResults) && file.assertionResults.some((test) => test?.status === "failed")),
  )
  for (const file of brokenFiles) {
    const reason = typeof file.message === "string" && file.message !== "" ? `: ${file.message.split("\n")[0]}` : ""
    notes.push(`failed to run ${file.name}${reason}`)
  }
  failed += brokenFiles.length
  // Unhandled errors and other run-level failures only show as `success: false`.
  if (report.success === false && failed === 0) {
    notes.push("vitest reported errors outside the tests (see its output above)")
    failed += 1
  }
  if (passed + failed === 0) notes.push("no test ran")
  const line = `${passed} passed, ${failed} failed${skipped > 0 ? `, ${skipped} skipped` : ""}`
  return { line, notes, ok: failed === 0 && passed > 0 }
}

const main = (file) => {
  if (file === undefined) {
    console.error("usage: node tools/ci-summary.mjs VITEST_JSON_FILE")
    console.log("0 passed, 0 failed")
    return 1
  }
  let report
  try {
    report = JSON.parse(fs.readFileSync(file, "utf8"))
  } catch (error) {
    console.error(`ci-summary: cannot read the vitest report ${file}: ${error.message}`)
    console.log("0 passed, 0 failed")
    return 1
  }
  if (report === null || typeof report !== "object") {
    console.error(`ci-summary: ${file} is not a vitest JSON report`)
    console.log("0 passed, 0 failed")
    return 1
  }
  const { line, notes, ok } = summarize(report)
  for (const note of notes) console.error(`ci-summary: ${note}`)
  console.log(line)
  return ok ? 0 : 1
}

const isMain = process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)
if (isMain) {
  process.exitCode = main(process.argv[2])
}
