#!/usr/bin/env node
// The dependency-direction check of docs/architecture.md §2, run by `pnpm check:deps` and `.ci/run`.
//
//   facts  <-  event-log, model, tools  <-  engine  <-  cli
//   testkit depends on facts only; every package may use testkit in tests.
//
// Usage: node tools/check-deps.mjs [rootDir]   (rootDir defaults to this repository)
// Reads every TS/JS file of packages/*/ (except node_modules, dist, .turbo, coverage) and every
// packages/*/package.json. Plain Node, no dependencies. Exit 0 when the direction holds, 1 otherwise.
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const SCOPE = "@maka/"

/** What each package's `src/**` may import (docs/architecture.md §2). The single place to change the rule. */
const ALLOWED = {
  facts: [],
  "event-log": ["facts"],
  model: ["facts"],
  tools: ["facts"],
  engine: ["facts", "event-log", "model", "tools"],
  testkit: ["facts"],
  cli: ["facts", "event-log", "model", "tools", "engine", "testkit"],
}

/** Every package may use testkit in tests (docs/architecture.md §2), and other packages' `./testing` entries; never a package above its own. */
const TEST_HELPERS = ["testkit"]

/** Subpaths that reach behind a package's exports map. */
const DEEP_PATHS = new Set(["internal", "src", "dist"])

/**
 * The one relative import that may leave a package: a package's `vitest.mutate.config.ts` (the test
 * run `pnpm mutate` uses; repository tooling, never built, published or run by the package's tests)
 * may use the mutation tooling of `tools/mutate/`.
 */
const MUTATE_CONFIG = "vitest.mutate.config.ts"
const MUTATE_TOOLING = "tools/mutate/"

const SKIPPED_DIRECTORIES = new Set(["node_modules", "dist", ".turbo", "coverage", ".git"])
const CODE_FILE = /\.(?:[cm]?[jt]sx?)$/
const DECLARATION_FILE = /\.d\.[cm]?ts$/

// ---------------------------------------------------------------------------------------------
// Rules

/** Packages whose entries `pkg` may import from its source (`src/**`) or its tests (everything else). */
const allowedTargets = (pkg, isSource) =>
  isSource ? new Set(ALLOWED[pkg]) : new Set([pkg, ...TEST_HELPERS, ...ALLOWED[pkg]])

/** Why `pkg` may not use `specifier`, or undefined when it may. */
const violation = (pkg, isSource, specifier) => {
  if (!specifier.startsWith(SCOPE)) return undefined
  const [target, ...subpath] = specifier.slice(SCOPE.length).split("/")
  // Private modules are sealed (`"./internal/*": null`) and files are reached through the exports map
  // only; a package reaches its own modules through relative imports.
  if (DEEP_PATHS.has(subpath[0])) return `${SCOPE}${pkg} must not import ${specifier}`
  // A package's source never imports itself by name: that goes through its own dist.
  if (isSource && target === pkg) return `${SCOPE}${pkg} must not import ${specifier}`
  if (target === pkg && !isSource) return undefined
  // Tests may use another package's `./testing` entry (a temp-file log, a fake model) unless that
  // package depends on this one, which would make a cycle.
  if (!isSource && subpath.length === 1 && subpath[0] === "testing" && target in ALLOWED && !ALLOWED[target].includes(pkg)) {
    return undefined
  }
  if (!(target in ALLOWED) || !allowedTargets(pkg, isSource).has(target)) {
    return `${SCOPE}${pkg} must not import ${specifier}`
  }
  return undefined
}

// ---------------------------------------------------------------------------------------------
// A small tokenizer: enough of JavaScript/TypeScript to skip comments and read string literals
// without being fooled by quotes inside comments, template literals or regular expressions.

const IDENTIFIER_START = /[A-Za-z_$\u00A0-\uFFFF]/
const IDENTIFIER_PART = /[A-Za-z0-9_$\u00A0-\uFFFF]/
const KEYWORDS_BEFORE_EXPRESSION = new Set([
  "return", "typeof", "instanceof", "in", "of", "new", "delete", "void", "throw", "case", "do", "else", "yield", "await",
])

/** Tokens `{type: "name" | "string" | "punct" | "other", value, line}`; comments and whitespace dropped. */
export const tokenize = (text) => {
  const tokens = []
  let index = 0
  let line = 1
  const length = text.length
  const push = (type, value, atLine) => tokens.push({ type, value, line: atLine })
  const regexAllowed = () => {
    const previous = tokens[tokens.length - 1]
    if (previous === undefined) return true
    if (previous.type === "string" || previous.type === "other") return false
    if (previous.type === "name") return KEYWORDS_BEFORE_EXPRESSION.has(previous.value)
    return !(previous.value === ")" || previous.value === "]" || previous.value === "}")
  }
  // Skips a quoted string starting at `index` (on the quote); returns its decoded-enough value.
  const readQuoted = (quote) => {
    let value = ""
    index++
    while (index < length) {
      const char = text[index]
      if (char === "\\") {
        value += text[index + 1] ?? ""
        if (text[index + 1] === "\n") line++
        index += 2
        continue
      }
      if (char === quote) {
        index++
        return value
      }
      if (char === "\n") {
        // An unterminated string: stop at the end of the line.
        return value
      }
      value += char
      index++
    }
    return value
  }
  // Skips a template literal starting at `index` (on the backtick), including `${ … }` code.
  const skipTemplate = () => {
    index++
    while (index < length) {
      const char = text[index]
      if (char === "\\") {
        if (text[index + 1] === "\n") line++
        index += 2
        continue
      }
      if (char === "`") {
        index++
        return
      }
      if (char === "\n") line++
      if (char === "$" && text[index + 1] === "{") {
        index += 2
        skipCode("}")
        continue
      }
      index++
    }
  }
  // Reads code until the matching `close` (for template substitutions) or the end of the text.
  const skipCode = (close) => {
    let depth = 0
    while (index < length) {
      const char = text[index]
      if (close !== undefined) {
        if (char === "{") depth++
        else if (char === "}") {
          if (depth === 0) {
            index++
            return
          }
          depth--
        }
      }
      step()
    }
  }
  const step = () => {
    const char = text[index]
    const next = text[index + 1]
    if (char === "\n") {
      line++
      index++
    } else if (char === " " || char === "\t" || char === "\r" || char === "\f" || char === "\v" || char === "\uFEFF") {
      index++
    } else if (char === "/" && next === "/") {
      while (index < length && text[index] !== "\n") index++
    } else if (char === "/" && next === "*") {
      const end = text.indexOf("*/", index + 2)
      const stop = end === -1 ? length : end + 2
      for (let cursor = index; cursor < stop; cursor++) if (text[cursor] === "\n") line++
      index = stop
    } else if (char === "'" || char === '"') {
      const atLine = line
      push("string", readQuoted(char), atLine)
    } else if (char === "`") {
      const atLine = line
      skipTemplate()
      push("other", "`template`", atLine)
    } else if (char === "/" && regexAllowed()) {
      let inClass = false
      index++
      while (index < length && text[index] !== "\n") {
        const current = text[index]
        if (current === "\\") index += 2
        else if (current === "[") (inClass = true), index++
        else if (current === "]") (inClass = false), index++
        else if (current === "/" && !inClass) {
          index++
          break
        } else index++
      }
      while (index < length && IDENTIFIER_PART.test(text[index])) index++
      push("other", "/regex/", line)
    } else if (IDENTIFIER_START.test(char)) {
      const start = index
      while (index < length && IDENTIFIER_PART.test(text[index])) index++
      push("name", text.slice(start, index), line)
    } else if (/[0-9]/.test(char)) {
      while (index < length && /[0-9A-Za-z_.]/.test(text[index])) index++
      push("other", "number", line)
    } else {
      push("punct", char, line)
      index++
    }
  }
  skipCode(undefined)
  return tokens
}

/** Every module specifier `text` imports or re-exports, with its line. */
export const findImports = (text) => {
  const tokens = tokenize(text)
  const found = []
  const at = (position) => tokens[position]
  const isMemberAccess = (position) => {
    const previous = at(position - 1)
    return previous !== undefined && previous.type === "punct" && previous.value === "."
  }
  for (let position = 0; position < tokens.length; position++) {
    const token = at(position)
    if (token.type !== "name" || isMemberAccess(position)) continue
    const next = at(position + 1)
    if (next === undefined) continue
    // import("x"), require("x")
    if ((token.value === "import" || token.value === "require") && next.type === "punct" && next.value === "(") {
      const argument = at(position + 2)
      if (argument !== undefined && argument.type === "string") found.push({ specifier: argument.value, line: argument.line })
      continue
    }
    // import "x"
    if (token.value === "import" && next.type === "string") {
      found.push({ specifier: next.value, line: next.line })
      continue
    }
    // import … from "x", export … from "x": only names, braces, commas, `*`, `as`, `type` in between.
    if (token.value === "import" || token.value === "export") {
      for (let cursor = position + 1; cursor < tokens.length; cursor++) {
        const current = at(cursor)
        if (current.type === "name" && current.value === "from") {
          const source = at(cursor + 1)
          if (source !== undefined && source.type === "string") {
            found.push({ specifier: source.value, line: source.line })
            break
          }
          continue // `from` used as a binding name, as in `import { from } from "x"`
        }
        const isClausePart =
          current.type === "name" ||
          (current.type === "string" && at(cursor - 1)?.value === "{") || // import { "a-b" as x }
          (current.type === "string" && at(cursor - 1)?.value === ",") ||
          (current.type === "punct" && ["{", "}", ",", "*"].includes(current.value))
        if (!isClausePart) break
        // `export const`, `export function`, … are declarations, not re-exports.
        if (
          token.value === "export" &&
          cursor === position + 1 &&
          current.type === "name" &&
          current.value !== "type" &&
          current.value !== "from"
        ) {
          break
        }
        // Stop at a keyword that cannot be part of an import clause (`import x = require(…)` ends at `=`).
        if (current.type === "name" && (current.value === "import" || current.value === "export") && cursor > position + 1) break
      }
    }
  }
  return found
}

// ---------------------------------------------------------------------------------------------
// The walk

const relative = (rootDir, file) => path.relative(rootDir, file).split(path.sep).join("/")

const codeFiles = (directory) => {
  const files = []
  const visit = (current) => {
    let entries
    try {
      entries = fs.readdirSync(current, { withFileTypes: true })
    } catch {
      return
    }
    for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      const full = path.join(current, entry.name)
      if (entry.isDirectory()) {
        if (!SKIPPED_DIRECTORIES.has(entry.name)) visit(full)
      } else if (entry.isFile() && CODE_FILE.test(entry.name) && !DECLARATION_FILE.test(entry.name)) {
        files.push(full)
      }
    }
  }
  visit(directory)
  return files
}

/** Line (1-based) of `"key":` inside the `"field"` object of a JSON text (or of `"key"` anywhere), or 1. */
const lineOf = (text, key, field) => {
  const fieldAt = field === undefined ? 0 : Math.max(0, text.indexOf(JSON.stringify(field)))
  const pattern = new RegExp(`${JSON.stringify(key).replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}\\s*:`, "g")
  pattern.lastIndex = fieldAt
  const at = pattern.exec(text)?.index ?? text.indexOf(JSON.stringify(key))
  return at === -1 ? 1 : text.slice(0, at).split("\n").length
}

const DEPENDENCY_FIELDS = ["dependencies", "peerDependencies", "optionalDependencies", "devDependencies"]

/** The workspace packages: `{pkg, name, directory, manifestFile, manifestText, manifest}` sorted by directory. */
const readPackages = (rootDir, problems) => {
  const packagesDir = path.join(rootDir, "packages")
  let directories = []
  try {
    directories = fs.readdirSync(packagesDir, { withFileTypes: true }).filter((entry) => entry.isDirectory())
  } catch {
    problems.push(`${relative(rootDir, packagesDir)}: no packages directory`)
  }
  const packages = []
  for (const directory of directories.map((entry) => entry.name).sort()) {
    const packageDir = path.join(packagesDir, directory)
    const manifestFile = path.join(packageDir, "package.json")
    if (!fs.existsSync(manifestFile)) continue
    const manifestText = fs.readFileSync(manifestFile, "utf8")
    let manifest
    try {
      manifest = JSON.parse(manifestText)
    } catch (error) {
      problems.push(`${relative(rootDir, manifestFile)}:1: unreadable package.json (${error.message})`)
      continue
    }
    const name = typeof manifest.name === "string" ? manifest.name : ""
    const pkg = name.startsWith(SCOPE) ? name.slice(SCOPE.length) : ""
    if (!(pkg in ALLOWED)) {
      problems.push(
        `${relative(rootDir, manifestFile)}:${lineOf(manifestText, "name")}: ${name || directory} has no place in the dependency direction; add it to tools/check-deps.mjs (docs/architecture.md §2)`,
      )
      continue
    }
    packages.push({ pkg, name, packageDir, manifestFile, manifestText, manifest })
  }
  return packages
}

/** Whether `from` reaches `to` through the declared workspace dependencies (all fields). */
const reaches = (graph, from, to, seen = new Set()) => {
  if (from === to) return true
  if (seen.has(from)) return false
  seen.add(from)
  return [...(graph.get(from) ?? [])].some((next) => reaches(graph, next, to, seen))
}

export const checkRepository = (rootDir) => {
  const problems = []
  const report = (file, line, message, detail) =>
    problems.push(`${relative(rootDir, file)}:${line}: ${message} (docs/architecture.md §2)${detail === undefined ? "" : `: ${detail}`}`)
  const packages = readPackages(rootDir, problems)
  const graph = new Map(
    packages.map(({ name, manifest }) => [
      name,
      new Set(DEPENDENCY_FIELDS.flatMap((field) => Object.keys(manifest[field] ?? {})).filter((dependency) => dependency.startsWith(SCOPE))),
    ]),
  )
  let fileCount = 0
  for (const { pkg, name, packageDir, manifestFile, manifestText, manifest } of packages) {
    // Declared workspace dependencies must agree with what the code may import.
    for (const field of DEPENDENCY_FIELDS) {
      const isSource = field !== "devDependencies"
      for (const dependency of Object.keys(manifest[field] ?? {})) {
        const line = lineOf(manifestText, dependency, field)
        const message =
          violation(pkg, isSource, dependency) === undefined || (!isSource && violation(pkg, false, `${dependency}/testing`) === undefined)
            ? undefined
            : violation(pkg, isSource, dependency)
        if (message !== undefined) report(manifestFile, line, message)
        // A test-only edge back to a package that depends on this one is a workspace cycle (turbo refuses it).
        else if (!isSource && dependency !== name && graph.has(dependency) && reaches(graph, dependency, name)) {
          report(
            manifestFile,
            line,
            `${name} must not import ${dependency}`,
            `${dependency} depends on ${name}, so this devDependency is a workspace cycle`,
          )
        }
      }
    }
    for (const file of codeFiles(packageDir)) {
      fileCount++
      const isSource = relative(packageDir, file).startsWith("src/")
      const text = fs.readFileSync(file, "utf8")
      for (const { specifier, line } of findImports(text)) {
        if (specifier.startsWith(".")) {
          const resolved = path.resolve(path.dirname(file), specifier)
          const inside = path.relative(packageDir, resolved)
          const tooling = relative(packageDir, file) === MUTATE_CONFIG && relative(rootDir, resolved).startsWith(MUTATE_TOOLING)
          if ((inside.startsWith("..") || path.isAbsolute(inside)) && !tooling) report(file, line, `${name} must not import ${specifier}`)
          continue
        }
        if (path.isAbsolute(specifier)) {
          report(file, line, `${name} must not import ${specifier}`)
          continue
        }
        const message = violation(pkg, isSource, specifier)
        if (message !== undefined) report(file, line, message)
      }
    }
  }
  return { problems, fileCount }
}

const isMain = process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)
if (isMain) {
  const rootDir = path.resolve(process.argv[2] ?? path.join(path.dirname(fileURLToPath(import.meta.url)), ".."))
  const { problems, fileCount } = checkRepository(rootDir)
  if (problems.length > 0) {
    for (const problem of problems) console.error(problem)
    console.error(`dependency direction violated: ${problems.length} problem${problems.length === 1 ? "" : "s"}`)
    process.exitCode = 1
  } else {
    console.log(`dependency direction ok (${fileCount} files)`)
  }
}
