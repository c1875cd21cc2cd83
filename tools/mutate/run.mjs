// `pnpm mutate [module…]`: mutation testing of the rule modules with StrykerJS and its vitest
// runner. Each module is mutated against its own package's vitest project (which resolves the
// packages through the `@maka/source` condition, straight from the TypeScript sources); without an
// argument every module runs, one after the other. Not part of `.ci/run`: a module takes minutes.
//
//   pnpm mutate                    every module
//   pnpm mutate facts journal      named modules (a package name stands for its modules)
//   pnpm mutate --list             the modules and their files
//   pnpm mutate --survivors [module…]
//                                  the surviving and uncovered mutants of the last run's reports
//   pnpm mutate <module> --part k/n
//                                  the k-th of n parts of a module's lines (cut between top-level
//                                  declarations, so no mutant is split): a module that takes hours
//                                  is measured part by part, in runs of their own
//   pnpm mutate --score [module…]  each module's score: its last whole run, or the sum of its parts
//                                  when every part of one split was run over the file as it is now
//   pnpm mutate … --force          test every mutant again: by default a run is incremental, it
//                                  reuses the last run's result (of the same part) for a mutant
//                                  whose code is unchanged when its killing test is unchanged, or
//                                  when it was not killed and no test covering it changed
//
//   MAKA_MUTATE_CONCURRENCY   test processes at once (default 1; the machines have 2 cores)
//
// Mutants are placed in the working tree itself (Stryker's `inPlace`: a sandbox copy would resolve
// the workspace packages through node_modules symlinks back to the unmutated sources): only the
// mutated files change, and Stryker restores them when the run ends (also on Ctrl-C; after a
// `kill -9`, `git checkout` them); do not edit them, build or run other tests while it runs. Static mutants
// (module-level constants, evaluated once at import) are ignored, which keeps a run to minutes.
// Reports: clear text on stdout, HTML and JSON under $TMPDIR/maka-mutate/<module>/.
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"

const ROOT = path.resolve(import.meta.dirname, "../..")

/** The rule modules: the files mutated and the vitest project whose tests must kill the mutants. */
export const MODULES = {
  append: {
    project: "event-log",
    files: [
      "packages/event-log/src/internal/append.ts",
      "packages/event-log/src/internal/safety.ts",
      // The rules read the log's state through these: an in-memory index on SQLite, rows on PostgreSQL.
      "packages/event-log/src/internal/session-view.ts",
      "packages/event-log/src/internal/log-index.ts",
    ],
  },
  // The context reads (docs/log-format.md §3.7): selection, gate, baseline, tail, evidence, frozen reads.
  context: { project: "event-log", files: ["packages/event-log/src/internal/context.ts"] },
  validation: { project: "facts", files: ["packages/facts/src/Validation.ts"] },
  attempt: { project: "engine", files: ["packages/engine/src/internal/attempt.ts"] },
  runner: { project: "engine", files: ["packages/engine/src/internal/runner.ts"] },
  journal: { project: "tools", files: ["packages/tools/src/Journal.ts"] },
  recovery: { project: "engine", files: ["packages/engine/src/Recovery.ts"] },
}

/** A package name stands for every module of its project. */
export const resolveModules = (names) => {
  if (names.length === 0) return Object.keys(MODULES)
  const chosen = new Set()
  for (const name of names) {
    if (MODULES[name] !== undefined) chosen.add(name)
    else {
      const ofPackage = Object.keys(MODULES).filter((module) => MODULES[module].project === name)
      if (ofPackage.length === 0) {
        throw new Error(`unknown module ${name}: one of ${Object.keys(MODULES).join(", ")}, or a package name`)
      }
      for (const module of ofPackage) chosen.add(module)
    }
  }
  return [...chosen]
}

const concurrency = () => {
  const value = Number(process.env.MAKA_MUTATE_CONCURRENCY ?? "1")
  if (!Number.isInteger(value) || value < 1) throw new Error("MAKA_MUTATE_CONCURRENCY must be a positive integer")
  return value
}

/**
 * The vitest config a module's mutants run against: the package's own, or its `vitest.mutate.config.ts`
 * when it has one (which leaves out slow tests that no rule depends on; see each file).
 */
export const vitestConfig = (project) => {
  const mutate = `packages/${project}/vitest.mutate.config.ts`
  return fs.existsSync(path.join(ROOT, mutate)) ? mutate : `packages/${project}/vitest.config.ts`
}

/** `k/n` as numbers: the k-th of n parts (1 ≤ k ≤ n). */
export const parsePart = (text) => {
  const match = /^(\d+)\/(\d+)$/.exec(text ?? "")
  const [k, n] = match === null ? [0, 0] : [Number(match[1]), Number(match[2])]
  if (!(n >= 1 && k >= 1 && k <= n)) throw new Error(`--part takes k/n with 1 ≤ k ≤ n, got ${text}`)
  return { k, n }
}

/**
 * The line range (1-based, inclusive) of the k-th of n parts of a source text: the lines are cut into n
 * runs of about equal length, each cut moved down to the next top-level line (one that starts in the
 * first column and is not a closing bracket), so a function's mutants all fall into one part.
 */
export const partRange = (source, { k, n }) => {
  const lines = source.split("\n")
  const starts = [1]
  for (let index = 0; index < lines.length; index++) {
    if (index > 0 && /^[A-Za-z@/]/.test(lines[index]) && !/^\/\/|^\/\*| \*/.test(lines[index])) starts.push(index + 1)
  }
  const cut = (part) => {
    if (part === 0) return 1
    if (part === n) return lines.length + 1
    const target = Math.round((lines.length * part) / n)
    return starts.find((line) => line >= target) ?? lines.length + 1
  }
  return { start: cut(k - 1), end: cut(k) - 1 }
}

/** What a run mutates: the module's files, or the part `part` of each. */
export const mutatePatterns = (module, part) => {
  const { files } = MODULES[module]
  if (part === undefined) return files
  return files.flatMap((file) => {
    const { start, end } = partRange(fs.readFileSync(path.join(ROOT, file), "utf8"), part)
    return end < start ? [] : [`${file}:${start}-${end}`]
  })
}

/** Stryker's options for one module (or one part of it). */
export const strykerOptions = (module, reports, part, force = false) => {
  const { project } = MODULES[module]
  const require = createRequire(path.join(ROOT, "package.json"))
  return {
    mutate: mutatePatterns(module, part),
    testRunner: "vitest",
    plugins: [require.resolve("@stryker-mutator/vitest-runner")],
    vitest: { configFile: vitestConfig(project), dir: `packages/${project}` },
    coverageAnalysis: "perTest",
    inPlace: true,
    // vitest does not type check, so no file needs `// @ts-nocheck`; in place, Stryker would
    // otherwise write that line into every source file of the repository for the run.
    disableTypeChecks: false,
    ignoreStatic: true,
    concurrency: concurrency(),
    timeoutMS: 30_000,
    // The initial test run of the engine's suite takes minutes on a loaded 2-core machine; Stryker's
    // default limit of 5 minutes would end the run before a single mutant is tested.
    dryRunTimeoutMinutes: Number(process.env.MAKA_MUTATE_DRY_RUN_MINUTES ?? 30),
    // Stryker's incremental mode: the last run of this module (or part) is `incremental.json` beside
    // its report (seeded from `report.json`, which has the same form, by `main`).
    incremental: true,
    incrementalFile: path.join(reports, "incremental.json"),
    force,
    tempDirName: path.join(reports, "stryker-tmp"),
    cleanTempDir: true,
    // The event recorder writes each mutant's result as it is known (`<reports>/events`), so the
    // survivors of a run that takes hours can be read (`--survivors`) before it ends.
    reporters: ["clear-text", "progress-append-only", "html", "json", "event-recorder"],
    eventReporter: { baseDir: path.join(reports, "events") },
    htmlReporter: { fileName: path.join(reports, "index.html") },
    jsonReporter: { fileName: path.join(reports, "report.json") },
    thresholds: { high: 85, low: 70, break: null },
    logLevel: "info",
    fileLogLevel: "off",
  }
}

/** The score of Stryker's results: killed and timed-out mutants over all that were tested or survived. */
export const score = (results) => {
  const count = (...statuses) => results.filter((result) => statuses.includes(result.status)).length
  const detected = count("Killed", "Timeout")
  const undetected = count("Survived", "NoCoverage")
  const valid = detected + undetected
  return { detected, undetected, ignored: count("Ignored"), invalid: count("CompileError", "RuntimeError"), score: valid === 0 ? 100 : (100 * detected) / valid }
}

/** The mutants of a Stryker JSON report that no test detected, as lines: file:line, status, mutator, replacement, source. */
export const survivors = (report) => {
  const lines = []
  for (const [file, { source, mutants }] of Object.entries(report.files)) {
    const sourceLines = source.split("\n")
    for (const mutant of mutants) {
      if (mutant.status !== "Survived" && mutant.status !== "NoCoverage") continue
      const line = mutant.location.start.line
      const replacement = JSON.stringify(mutant.replacement ?? "").slice(0, 70)
      lines.push(`${file}:${line} ${mutant.status} ${mutant.mutatorName} ${replacement}\n    ${(sourceLines[line - 1] ?? "").trim().slice(0, 120)}`)
    }
  }
  return lines
}

/**
 * The results a run's event recorder has written so far, shaped as a report: the mutants tested
 * until now (a run still going, or one that was stopped), with the sources of their files.
 */
const reportOfEvents = (directory) => {
  const files = {}
  // Each mutated file once: while the run goes on it holds the mutants, so its committed text is
  // the source they refer to.
  const byPath = new Map()
  for (const name of fs.readdirSync(directory).sort()) {
    if (!name.endsWith("-onMutantTested.json")) continue
    const result = JSON.parse(fs.readFileSync(path.join(directory, name), "utf8"))
    if (!byPath.has(result.fileName)) {
      // A worktree removed since the run: the same path inside this repository.
      const directoryOf = path.dirname(result.fileName)
      const top = fs.existsSync(directoryOf)
        ? execFileSync("git", ["-C", directoryOf, "rev-parse", "--show-toplevel"], { encoding: "utf8" }).trim()
        : ROOT
      const file = fs.existsSync(directoryOf) ? path.relative(top, result.fileName) : result.fileName.slice(result.fileName.indexOf("packages/"))
      files[file] = { source: execFileSync("git", ["-C", top, "show", `HEAD:${file}`], { encoding: "utf8" }), mutants: [] }
      byPath.set(result.fileName, files[file])
    }
    byPath.get(result.fileName).mutants.push(result)
  }
  return { files, partial: true }
}

/** The mutants of a report's file entry that lie in the part `part` of its source's lines. */
export const inPart = (entry, part) => {
  const { start, end } = partRange(entry.source, part)
  return entry.mutants.filter((mutant) => mutant.location.start.line >= start && mutant.location.start.line <= end)
}

const reportsOf = (module, part) =>
  path.join(os.tmpdir(), "maka-mutate", module, ...(part === undefined ? [] : [`part-${part.k}-of-${part.n}`]))

/**
 * A module's score from its reports: the last whole run, and each split whose every part was run over
 * the module's files exactly as they are now at HEAD (a part over another text of a file is stale).
 */
export const moduleScore = (module, readReport, headText) => {
  const lines = []
  const whole = readReport(reportsOf(module))
  if (whole !== undefined) {
    const results = Object.values(whole.files).flatMap((entry) => entry.mutants)
    const stale = Object.entries(whole.files).some(([file, entry]) => entry.source !== headText(file))
    lines.push({ kind: "whole", ...score(results), mutants: results.length, stale })
  }
  const base = reportsOf(module)
  const splits = new Map()
  for (const name of fs.existsSync(base) ? fs.readdirSync(base) : []) {
    const match = /^part-(\d+)-of-(\d+)$/.exec(name)
    if (match === null) continue
    const report = readReport(path.join(base, name))
    if (report === undefined) continue
    const n = Number(match[2])
    if (!splits.has(n)) splits.set(n, new Map())
    splits.get(n).set(Number(match[1]), report)
  }
  for (const [n, parts] of [...splits].sort((a, b) => a[0] - b[0])) {
    // Only a part's own lines: an incremental run keeps the earlier results of mutants outside the
    // lines it mutates (after an edit moved a cut), which belong to a neighbouring part.
    const results = [...parts].flatMap(([k, report]) => Object.values(report.files).flatMap((entry) => inPart(entry, { k, n })))
    const stale = [...parts.values()].some((report) => Object.entries(report.files).some(([file, entry]) => entry.source !== headText(file)))
    const missing = []
    for (let k = 1; k <= n; k++) if (!parts.has(k)) missing.push(k)
    lines.push({ kind: `parts of ${n}`, ...score(results), mutants: results.length, stale, missing })
  }
  return lines
}

const main = async () => {
  const args = process.argv.slice(2)
  if (args.includes("--list")) {
    for (const [name, { project, files }] of Object.entries(MODULES)) console.log(`${name.padEnd(11)} ${project.padEnd(10)} ${files.join(" ")}`)
    return
  }
  if (args.includes("--score")) {
    const readReport = (directory) => {
      const file = path.join(directory, "report.json")
      return fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, "utf8")) : undefined
    }
    const headText = (file) => execFileSync("git", ["-C", ROOT, "show", `HEAD:${file}`], { encoding: "utf8" })
    for (const module of resolveModules(args.filter((arg) => arg !== "--score"))) {
      const found = moduleScore(module, readReport, headText)
      if (found.length === 0) console.log(`${module.padEnd(11)} no report yet (${reportsOf(module)})`)
      for (const entry of found) {
        const notes = [
          ...(entry.stale ? ["stale: a file changed since"] : []),
          ...(entry.missing?.length ? [`parts ${entry.missing.join(", ")} not run`] : []),
        ]
        console.log(
          `${module.padEnd(11)} ${entry.score.toFixed(1).padStart(5)} %  ${entry.kind}: ${entry.detected} detected, ${entry.undetected} survived or uncovered, ${entry.ignored} ignored of ${entry.mutants}${notes.length ? ` (${notes.join("; ")})` : ""}`,
        )
      }
    }
    return
  }
  if (args.includes("--survivors")) {
    for (const module of resolveModules(args.filter((arg) => arg !== "--survivors"))) {
      // The whole run's reports and each part's.
      const base = reportsOf(module)
      const parts = fs.existsSync(base) ? fs.readdirSync(base).filter((name) => /^part-\d+-of-\d+$/.test(name)).sort() : []
      const directories = [base, ...parts.map((name) => path.join(base, name))]
      let found = 0
      for (const directory of directories) {
        const file = path.join(directory, "report.json")
        const events = path.join(directory, "events")
        // The events of a run newer than the last report (one still going, or stopped) take precedence.
        const mtime = (entry) => (fs.existsSync(entry) ? fs.statSync(entry).mtimeMs : -1)
        const report =
          mtime(events) > mtime(file) ? reportOfEvents(events) : fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, "utf8")) : undefined
        if (report === undefined) continue
        found++
        const listed = survivors(report)
        const tested = Object.values(report.files).reduce((sum, entry) => sum + entry.mutants.length, 0)
        const name = directory === base ? module : `${module} ${path.basename(directory)}`
        console.log(`${name}: ${listed.length} surviving or uncovered of ${tested} mutants${report.partial ? " tested so far (the recorded events of a run going on or stopped)" : ""} (${report.partial ? events : file})`)
        for (const line of listed) console.log(`  ${line}`)
      }
      if (found === 0) console.log(`${module}: no report yet (${base})`)
    }
    return
  }
  const force = args.includes("--force")
  const rest = args.filter((arg) => arg !== "--force")
  const partAt = rest.indexOf("--part")
  const part = partAt === -1 ? undefined : parsePart(rest[partAt + 1])
  const modules = resolveModules(partAt === -1 ? rest : rest.filter((_, index) => index !== partAt && index !== partAt + 1))
  process.chdir(ROOT)
  const { Stryker } = await import("@stryker-mutator/core")
  const lines = []
  for (const module of modules) {
    const reports = reportsOf(module, part)
    fs.mkdirSync(reports, { recursive: true })
    // A report written before runs were incremental seeds the incremental file: the same form.
    const incremental = path.join(reports, "incremental.json")
    if (!fs.existsSync(incremental) && fs.existsSync(path.join(reports, "report.json"))) fs.copyFileSync(path.join(reports, "report.json"), incremental)
    const started = Date.now()
    console.log(`\n==> mutate ${module}: ${mutatePatterns(module, part).join(", ")} (vitest project ${MODULES[module].project})`)
    const all = await new Stryker(strykerOptions(module, reports, part, force)).runMutationTest()
    // A part's own lines only (see `moduleScore`), each file read once.
    const byFile = new Map()
    for (const result of all) {
      const mutants = byFile.get(result.fileName)
      if (mutants === undefined) byFile.set(result.fileName, [result])
      else mutants.push(result)
    }
    const results =
      part === undefined ? all : [...byFile].flatMap(([file, mutants]) => inPart({ source: fs.readFileSync(file, "utf8"), mutants }, part))
    const { detected, undetected, ignored, score: value } = score(results)
    const minutes = ((Date.now() - started) / 60_000).toFixed(1)
    lines.push(`${module.padEnd(11)} ${value.toFixed(1).padStart(5)} %  (${detected} killed, ${undetected} survived or uncovered, ${ignored} ignored; ${minutes} min; report ${reports}/index.html)`)
  }
  console.log("\nmutation scores")
  for (const line of lines) console.log(line)
}

if (process.argv[1] && path.resolve(process.argv[1]) === import.meta.filename) {
  main().catch((error) => {
    console.error(error instanceof Error ? error.message : error)
    process.exitCode = 1
  })
}
