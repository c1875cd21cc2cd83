// The consumer test (`.ci/run`, step `consumer`): installs the packed packages into fresh projects
// outside the repository with pnpm and with npm, using the install commands the package READMEs
// give, type checks `project/main.mts` under strict NodeNext and runs it (one turn through
// `createEngine` against the testkit's scripted server). Exits 1 when any step fails.
//
//   node tools/consumer-test/run.mjs [--tarballs DIR] [--managers pnpm,npm] [--keep] [--readme-strict]
//
// --tarballs DIR  reuse the tarballs in DIR (`tools/pack-check.mjs` names); otherwise packs them
//                 (the packages must be built).
// --keep          leaves the projects in place and prints where they are.
// --compile       lets npm compile better-sqlite3 from source (about two minutes) even when the
//                 pnpm project already built it (see `localPrebuild`).
// --readme-strict fails, instead of warning, when a README does not give a command of INSTALLS.
//
// The `@maka/*` names in a command are replaced by the tarballs, and every `@maka/*` dependency
// between the packages is overridden to its tarball (pnpm `overrides`, npm `overrides`), so nothing
// named `@maka/*` is fetched from the registry. Everything else (effect, better-sqlite3, kysely, …)
// comes from the registry through the usual caches: pnpm's store is shared with the repository.
import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { existingTarballs, packAll, ROOT } from "../packages.mjs"

/**
 * The install commands, in order, per package manager, as the READMEs give them
 * (`readme`: the README that must show the command; checked below).
 */
export const INSTALLS = {
  pnpm: [
    { readme: "packages/engine/README.md", command: "pnpm add @maka/engine @maka/tools effect --allow-build=better-sqlite3" },
    { readme: "packages/tools/README.md", command: "pnpm add zod" },
    { readme: "packages/testkit/README.md", command: "pnpm add -D @maka/testkit" },
    { readme: "packages/cli/README.md", command: "pnpm add -D @maka/cli" },
  ],
  npm: [
    { readme: "packages/engine/README.md", command: "npm install @maka/engine @maka/tools effect" },
    { readme: "packages/tools/README.md", command: "npm install zod" },
    { readme: "packages/testkit/README.md", command: "npm install -D @maka/testkit" },
    { readme: "packages/cli/README.md", command: "npm install -D @maka/cli" },
  ],
}

/** What the program needs to type check, beside the packages (a project's usual dev dependencies). */
const TOOLING = { pnpm: "pnpm add -D @types/node@^20.19.0", npm: "npm install -D @types/node@^20.19.0" }

const PROGRAM = path.join(import.meta.dirname, "project")
const TSC = path.join(ROOT, "node_modules", "typescript", "bin", "tsc")

const args = process.argv.slice(2)
const option = (name) => {
  const index = args.indexOf(name)
  return index === -1 ? undefined : args[index + 1]
}
const managers = (option("--managers") ?? "pnpm,npm").split(",").filter((name) => name.length > 0)
const keep = args.includes("--keep")
const readmeStrict = args.includes("--readme-strict")
const compile = args.includes("--compile")

const seconds = (since) => `${((Date.now() - since) / 1000).toFixed(1)} s`
const log = (line) => console.log(`[consumer] ${line}`)

/** The commands of INSTALLS that a README does not show, as `README: command` lines. */
export const readmeGaps = (installs = INSTALLS, root = ROOT) =>
  Object.values(installs)
    .flat()
    .filter(({ readme, command }) => {
      const text = fs.readFileSync(path.join(root, readme), "utf8")
      const normalized = command.trim().split(/\s+/).join(" ")
      return !text.split("\n").some((line) => line.trim().split(/\s+/).join(" ") === normalized)
    })
    .map(({ readme, command }) => `${readme} does not give \`${command}\``)

/** A command with every `@maka/<name>` (optionally `@version`) replaced by its tarball path. */
export const withTarballs = (command, tarballs) =>
  command
    .split(/\s+/)
    .map((word) => {
      const match = /^(@maka\/[a-z0-9-]+)(?:@.*)?$/.exec(word)
      if (match === null) return word
      const tarball = tarballs.get(match[1])
      if (tarball === undefined) throw new Error(`\`${command}\` names ${match[1]}, which is not released`)
      return tarball
    })

/**
 * better-sqlite3's binary as a prebuilt archive, made from the one an earlier project of this run
 * compiled, or undefined. A user's `npm install` downloads this archive from the release page of
 * better-sqlite3 (this machine reaches only the npm registry, so the download fails and npm
 * compiles for two minutes); prebuild-install takes it from `npm_config_better_sqlite3_local_prebuilds`
 * before it downloads, so npm goes the user's way with the same install script.
 */
const localPrebuild = (work) => {
  const built = fs
    .readdirSync(work, { recursive: true })
    .map((file) => path.join(work, String(file)))
    .find((file) => file.endsWith(path.join("better-sqlite3", "build", "Release", "better_sqlite3.node")))
  if (built === undefined) return undefined
  const packageDirectory = path.resolve(path.dirname(built), "..", "..")
  const { version } = JSON.parse(fs.readFileSync(path.join(packageDirectory, "package.json"), "utf8"))
  const directory = path.join(work, "prebuilds")
  fs.mkdirSync(directory, { recursive: true })
  const name = `better-sqlite3-v${version}-node-v${process.versions.modules}-${process.platform}-${process.arch}.tar.gz`
  execFileSync("tar", ["czf", path.join(directory, name), "-C", packageDirectory, "build/Release/better_sqlite3.node"])
  return directory
}

/** The environment the installs run in: Node's own headers for native builds when they are installed. */
const installEnvironment = (manager, work) => {
  const environment = { ...process.env }
  const prebuilds = manager === "npm" && !compile ? localPrebuild(work) : undefined
  if (prebuilds !== undefined) environment.npm_config_better_sqlite3_local_prebuilds = prebuilds
  // better-sqlite3 compiles from source when no prebuilt binary can be downloaded; node-gyp then
  // needs Node's headers, which it downloads unless `nodedir` names a local copy (pnpm does not
  // pass ~/.npmrc's nodedir to build scripts, so it goes through the environment).
  const prefix = path.resolve(path.dirname(process.execPath), "..")
  if (environment.npm_config_nodedir === undefined && fs.existsSync(path.join(prefix, "include/node/node_version.h"))) {
    environment.npm_config_nodedir = prefix
  }
  // The project lies outside the repository; keep pnpm from reading the repository's settings.
  delete environment.npm_config_user_agent
  return environment
}

const run = (words, cwd, environment) => {
  const [command, ...rest] = words
  const result = spawnSync(command, rest, { cwd, env: environment, encoding: "utf8" })
  if (result.status !== 0) {
    const output = `${result.stdout ?? ""}${result.stderr ?? ""}`.trim().split("\n").slice(-40).join("\n")
    throw new Error(`\`${words.join(" ")}\` exited ${result.status ?? result.signal}:\n${output}`)
  }
}

/** Writes the project's package.json (and pnpm's settings) so `@maka/*` resolve to the tarballs. */
const createProject = (manager, directory, tarballs) => {
  const direct = new Set(
    INSTALLS[manager].flatMap(({ command }) => command.split(/\s+/).filter((word) => word.startsWith("@maka/"))),
  )
  const manifest = { name: `maka-consumer-${manager}`, version: "0.0.0", private: true, type: "module" }
  if (manager === "npm") {
    // npm refuses an override of a direct dependency that differs from it; the direct ones are tarballs already.
    manifest.overrides = Object.fromEntries(
      [...tarballs].filter(([name]) => !direct.has(name)).map(([name, tarball]) => [name, `file:${tarball}`]),
    )
  } else {
    const lines = [...tarballs].map(([name, tarball]) => `  ${JSON.stringify(name)}: ${JSON.stringify(`file:${tarball}`)}`)
    fs.writeFileSync(path.join(directory, "pnpm-workspace.yaml"), `overrides:\n${lines.join("\n")}\n`)
  }
  fs.writeFileSync(path.join(directory, "package.json"), `${JSON.stringify(manifest, null, 2)}\n`)
  for (const file of fs.readdirSync(PROGRAM)) fs.copyFileSync(path.join(PROGRAM, file), path.join(directory, file))
}

const consumer = (manager, tarballs, work) => {
  const directory = fs.mkdtempSync(path.join(work, `${manager}-`))
  const environment = installEnvironment(manager, work)
  if (environment.npm_config_better_sqlite3_local_prebuilds !== undefined) {
    log(`${manager}: better-sqlite3's prebuilt binary comes from the pnpm project's build (--compile to compile it)`)
  }
  createProject(manager, directory, tarballs)
  for (const { command } of INSTALLS[manager]) {
    const started = Date.now()
    run(withTarballs(command, tarballs), directory, environment)
    log(`${manager}: ${command}  (${seconds(started)})`)
  }
  let started = Date.now()
  run(TOOLING[manager].split(" "), directory, environment)
  log(`${manager}: ${TOOLING[manager]}  (${seconds(started)})`)
  started = Date.now()
  run([process.execPath, TSC, "-p", "tsconfig.json"], directory, environment)
  log(`${manager}: tsc -p tsconfig.json (strict, NodeNext) passes  (${seconds(started)})`)
  started = Date.now()
  const program = spawnSync(process.execPath, ["dist/main.mjs"], { cwd: directory, env: environment, encoding: "utf8", timeout: 60_000 })
  for (const line of `${program.stdout ?? ""}`.trim().split("\n")) if (line !== "") log(`${manager}:   ${line}`)
  if (program.status !== 0) {
    throw new Error(`node dist/main.mjs exited ${program.status ?? program.signal}:\n${(program.stderr ?? "").trim()}`)
  }
  log(`${manager}: node dist/main.mjs passes  (${seconds(started)})`)
  // The installed command: its offline tour (a tool loop, a crash and its recovery, compaction, a
  // handoff between two processes) in a temporary folder.
  started = Date.now()
  const demo = spawnSync(path.join(directory, "node_modules", ".bin", "maka"), ["demo"], { cwd: directory, env: environment, encoding: "utf8", timeout: 120_000 })
  if (demo.status !== 0) throw new Error(`maka demo exited ${demo.status ?? demo.signal}:\n${`${demo.stdout ?? ""}${demo.stderr ?? ""}`.trim().split("\n").slice(-20).join("\n")}`)
  log(`${manager}: maka demo passes  (${seconds(started)})`)
  return directory
}

const main = () => {
  const started = Date.now()
  const work = fs.mkdtempSync(path.join(os.tmpdir(), "maka-consumer-"))
  if (path.relative(ROOT, work).split(path.sep)[0] !== "..") throw new Error(`${work} lies inside the repository`)
  const failures = []
  try {
    const gaps = readmeGaps()
    for (const gap of gaps) log(`${readmeStrict ? "FAILED" : "warning"}: ${gap}`)
    if (readmeStrict && gaps.length > 0) failures.push("README")

    const from = option("--tarballs")
    const tarballs = from === undefined ? packAll(path.join(work, "tarballs")) : existingTarballs(from)
    log(`${from === undefined ? "packed" : "reusing"} ${[...tarballs.keys()].join(", ")}`)

    for (const manager of managers) {
      if (INSTALLS[manager] === undefined) throw new Error(`unknown package manager ${manager}`)
      const managerStarted = Date.now()
      try {
        const directory = consumer(manager, tarballs, work)
        log(`ok      ${manager}  (${seconds(managerStarted)})${keep ? ` in ${directory}` : ""}`)
      } catch (error) {
        failures.push(manager)
        log(`FAILED  ${manager}: ${error instanceof Error ? error.message : String(error)}`)
      }
    }
  } finally {
    if (keep) log(`kept ${work}`)
    else fs.rmSync(work, { recursive: true, force: true })
  }
  log(failures.length === 0 ? `passed (${seconds(started)})` : `failed: ${failures.join(", ")} (${seconds(started)})`)
  if (failures.length > 0) process.exitCode = 1
}

if (process.argv[1] && path.resolve(process.argv[1]) === import.meta.filename) main()
