// Checks the tarballs of every released package as a user receives them (`.ci/run`, step `packages`):
// packs them (into a temporary folder, or into `--out DIR` where they stay for later steps, or
// takes the ones in `--tarballs DIR`), then for each one checks the contents below, runs publint
// (strict: warnings fail too) and arethetypeswrong (`--profile esm-only`), and prints its size.
// Exits 1 when any check fails.
//
//   node tools/pack-check.mjs [--out DIR | --tarballs DIR]
//   node tools/pack-check.mjs --contents DIR     only the content checks, of one unpacked package
//
// The content checks (`checkPackage`): a LICENSE; no TypeScript build-info file; every source map
// and declaration map names sources that ship beside it; a top-level `types` file that ships; no
// development condition (`@maka/source`) and no `workspace:` range left in the packed package.json;
// repository (with its directory), homepage, bugs, keywords and license set.
import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { existingTarballs, packAll, ROOT } from "./packages.mjs"

const DEVELOPMENT_CONDITION = "@maka/source"

const walk = (directory, base = directory) =>
  fs.readdirSync(directory, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(directory, entry.name)
    return entry.isDirectory() ? walk(full, base) : [path.relative(base, full).split(path.sep).join("/")]
  })

const conditionsOf = (value) =>
  value === null || typeof value !== "object"
    ? []
    : Object.entries(value).flatMap(([key, inner]) => [key, ...conditionsOf(inner)])

/** The problems of one unpacked package directory (the tarball's `package/`), as sentences; empty when it is fine. */
export const checkPackage = (directory) => {
  const problems = []
  const files = walk(directory)
  const shipped = new Set(files)
  const manifest = JSON.parse(fs.readFileSync(path.join(directory, "package.json"), "utf8"))

  if (!shipped.has("LICENSE")) problems.push("no LICENSE file")
  for (const file of files.filter((file) => file.endsWith(".tsbuildinfo"))) problems.push(`ships the build-info file ${file}`)

  for (const map of files.filter((file) => file.endsWith(".map"))) {
    let sources
    try {
      sources = JSON.parse(fs.readFileSync(path.join(directory, map), "utf8")).sources
    } catch {
      problems.push(`${map} is not a JSON source map`)
      continue
    }
    for (const source of Array.isArray(sources) ? sources : []) {
      const resolved = path.posix.normalize(path.posix.join(path.posix.dirname(map), source))
      if (!shipped.has(resolved)) problems.push(`${map} points at ${source}, which is not in the package`)
    }
  }

  if (typeof manifest.types !== "string") problems.push('no top-level "types"')
  else if (!shipped.has(path.posix.normalize(manifest.types))) problems.push(`"types" names ${manifest.types}, which is not in the package`)
  if (conditionsOf(manifest.exports).includes(DEVELOPMENT_CONDITION)) {
    problems.push(`the published "exports" still holds the ${DEVELOPMENT_CONDITION} condition`)
  }
  for (const field of ["dependencies", "peerDependencies", "optionalDependencies"]) {
    for (const [name, range] of Object.entries(manifest[field] ?? {})) {
      if (String(range).startsWith("workspace:")) problems.push(`${field}.${name} is still ${range}`)
    }
  }
  if (typeof manifest.license !== "string") problems.push('no "license"')
  if (typeof manifest.repository?.url !== "string" || typeof manifest.repository?.directory !== "string") {
    problems.push('"repository" needs a url and a directory')
  }
  if (typeof manifest.homepage !== "string") problems.push('no "homepage"')
  if (typeof manifest.bugs?.url !== "string" && typeof manifest.bugs !== "string") problems.push('no "bugs"')
  if (!Array.isArray(manifest.keywords) || manifest.keywords.length === 0) problems.push('no "keywords"')
  return problems
}

const kib = (bytes) => `${(bytes / 1024).toFixed(1)} KiB`

const bin = (name) => path.join(ROOT, "node_modules", ".bin", name)

/** Runs a checker; returns its output when it fails, undefined when it passes. */
const runChecker = (command, args) => {
  const result = spawnSync(command, args, { encoding: "utf8", env: { ...process.env, FORCE_COLOR: "0" } })
  return result.status === 0 ? undefined : `${result.stdout}${result.stderr}`.trim() || `exit ${result.status}`
}

const main = () => {
  const option = (name) => {
    const index = process.argv.indexOf(name)
    return index === -1 ? undefined : process.argv[index + 1]
  }
  const contents = option("--contents")
  if (contents !== undefined) {
    const problems = checkPackage(contents)
    for (const problem of problems) console.log(`  - ${problem}`)
    console.log(problems.length === 0 ? `ok      ${contents}` : `FAILED  ${contents}`)
    process.exitCode = problems.length === 0 ? 0 : 1
    return
  }
  const work = fs.mkdtempSync(path.join(os.tmpdir(), "maka-pack-check-"))
  let failed = 0
  try {
    const from = option("--tarballs")
    const tarballs = from !== undefined ? existingTarballs(from) : packAll(option("--out") ?? path.join(work, "tarballs"))
    for (const [name, tarball] of tarballs) {
      const unpacked = path.join(work, "unpacked", path.basename(tarball, ".tgz"))
      fs.mkdirSync(unpacked, { recursive: true })
      execFileSync("tar", ["xzf", tarball, "-C", unpacked])
      const directory = path.join(unpacked, "package")
      const files = walk(directory)
      const unpackedBytes = files.reduce((sum, file) => sum + fs.statSync(path.join(directory, file)).size, 0)
      const problems = checkPackage(directory).map((problem) => `contents: ${problem}`)
      const publint = runChecker(bin("publint"), ["run", "--strict", "--pack", "false", tarball])
      if (publint !== undefined) problems.push(`publint --strict:\n${publint}`)
      const attw = runChecker(bin("attw"), ["--profile", "esm-only", "--no-definitely-typed", "--format", "ascii", tarball])
      if (attw !== undefined) problems.push(`attw --profile esm-only:\n${attw}`)
      const size = `${kib(fs.statSync(tarball).size)} packed, ${kib(unpackedBytes)} unpacked, ${files.length} files`
      if (problems.length === 0) {
        console.log(`ok      ${name}  (${size}; contents, publint --strict, attw esm-only)`)
      } else {
        failed++
        console.log(`FAILED  ${name}  (${size})`)
        for (const problem of problems) console.log(`  - ${problem.replaceAll("\n", "\n    ")}`)
      }
    }
  } finally {
    fs.rmSync(work, { recursive: true, force: true })
  }
  if (failed > 0) {
    console.log(`${failed} package(s) failed the tarball checks`)
    process.exitCode = 1
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === import.meta.filename) main()
