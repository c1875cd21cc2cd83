/**
 * `pnpm bench`: runs the benchmark files `tools/bench/*.bench.ts` (or those named on the command line,
 * e.g. `pnpm bench model-stream`), each in its own Node process with the `@maka/source` condition so
 * the workspace sources are measured, and merges their results into `bench/results.json` by key.
 *
 * A bench file prints one JSON object on its last stdout line: `{ "<key>": { ...figures } }`. Every
 * figure that matters is a ratio against a baseline measured in the same run (DESIGN.md §12).
 */
import { spawnSync } from "node:child_process"
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"

const benchDirectory = dirname(fileURLToPath(import.meta.url))
const root = resolve(benchDirectory, "../..")
const resultsFile = join(root, "bench", "results.json")

const available = readdirSync(benchDirectory)
  .filter((file) => file.endsWith(".bench.ts"))
  .map((file) => file.slice(0, -".bench.ts".length))
  .sort()
const requested = process.argv.slice(2)
const unknown = requested.filter((name) => !available.includes(name))
if (unknown.length > 0) {
  console.error(`unknown bench: ${unknown.join(", ")} (available: ${available.join(", ")})`)
  process.exit(2)
}
const selected = requested.length > 0 ? requested : available

const readResults = (): Record<string, unknown> => {
  if (!existsSync(resultsFile)) return {}
  const parsed: unknown = JSON.parse(readFileSync(resultsFile, "utf8"))
  return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed) ? { ...parsed } : {}
}

let failed = false
for (const name of selected) {
  console.log(`bench ${name} …`)
  const child = spawnSync(process.execPath, ["--conditions=@maka/source", "--import", "tsx", join(benchDirectory, `${name}.bench.ts`)], {
    cwd: root,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
    maxBuffer: 64 * 1024 * 1024,
  })
  const lines = (child.stdout ?? "").trim().split("\n")
  const last = lines.pop() ?? ""
  for (const line of lines) console.log(`  ${line}`)
  if (child.status !== 0) {
    console.error(`bench ${name} failed (exit ${child.status ?? child.signal})`)
    failed = true
    continue
  }
  const figures: unknown = JSON.parse(last)
  if (typeof figures !== "object" || figures === null || Array.isArray(figures)) {
    console.error(`bench ${name} printed no result object`)
    failed = true
    continue
  }
  const results = { ...readResults(), ...figures, updatedAt: new Date().toISOString() }
  mkdirSync(dirname(resultsFile), { recursive: true })
  writeFileSync(resultsFile, `${JSON.stringify(results, null, 2)}\n`)
  console.log(JSON.stringify(figures, null, 2))
}
console.log(`results in ${resultsFile}`)
process.exit(failed ? 1 : 0)
