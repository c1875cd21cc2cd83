#!/usr/bin/env node
// The reference check of docs/README.md, run by `pnpm check:refs` and `.ci/run`: every section
// reference in the repository's code, tests, READMEs and scripts leads to a heading in docs/.
//
// Usage: node tools/check-refs.mjs [rootDir]   (rootDir defaults to this repository)
//
// Accepted forms:
//   docs/<file>.md §N.N        a numbered heading of that file; more sections of the same file may
//                              follow: `docs/engine.md §5.3–§5.4, §5.7`
//   docs/<file>.md#anchor      a heading's GitHub anchor or an explicit <a id="…"> in that file
//   docs/<file>.md             the file exists
//   scenario N, scenarios N, M a numbered scenario of docs/scenarios.md (anchor `scenario-N`)
// Refused:
//   a section sign with a number but no file, outside docs/ (inside docs/ it means its own file);
//   any mention of the two contract files the docs replaced: they are not part of the repository.
//
// Scanned: README.md, .ci/**, .changeset/**, packages/*/** and tools/** (except node_modules, dist,
// .turbo, coverage), and docs/** (whose relative Markdown links are checked too). Plain Node, no
// dependencies. Exit 0 when every reference resolves, 1 otherwise, listing `file:line: problem`.
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

export const SECTION = "\u00a7"
const SKIPPED_DIRECTORIES = new Set(["node_modules", "dist", ".turbo", "coverage", ".git"])
const SCANNED_ROOTS = ["README.md", ".ci", ".changeset", "packages", "tools", "docs"]

/** The two retired contract files, spelled so that this file does not mention them itself. */
export const RETIRED_NAMES = ["DESIGN", "SEMANTICS"]

export const NUMBER = String.raw`\d+(?:\.\d+)*`
export const LIST_SEPARATOR = String.raw`\s*(?:,|and|or|to|\u2013|\u2014|-)\s*`
/** `§N`, then more sections of the same file (`, §M`, `–§M`); group 1 is the first number, group 2 the rest. */
const SECTION_LIST = String.raw`\x60?\s?${SECTION}\s?(${NUMBER})((?:${LIST_SEPARATOR}${SECTION}\s?${NUMBER})*)`
/** An anchor ends before punctuation that follows it in prose. */
const ANCHOR = String.raw`[^\s)\]>"'\x60|:;,.!?]+`

/**
 * A reference into docs/: group 1 is the file, then either group 2 (an anchor) or groups 3 and 4 (a
 * section list). A leading `../` is allowed (Markdown links); a path inside a URL is not a reference.
 */
export const qualifiedPattern = () =>
  new RegExp(String.raw`(?<![\w/.-])(?:\.\.?\/)*docs\/((?:[\w.-]+\/)*[\w.-]+\.md)\b(?:#(${ANCHOR})|${SECTION_LIST})?`, "g")

/** Inside docs/: `<file>.md §N`, a section of a sibling file. */
export const localPattern = () => new RegExp(String.raw`(?<![\w/.-])([\w-]+\.md)${SECTION_LIST}`, "g")

/** A section sign followed by a number, wherever it stands. */
export const sectionPattern = () => new RegExp(String.raw`${SECTION}\s?(${NUMBER})`, "g")

/** A reference to a retired contract file, with or without a section. */
export const retiredPattern = () =>
  new RegExp(String.raw`\b(?:${RETIRED_NAMES.join("|")})(?:(?:\.md)?${SECTION_LIST}|\.md\b)`, "g")

/** `scenario 12`, `scenarios 9, 10`, `Scenario 8`. */
export const scenarioPattern = () => new RegExp(String.raw`\bscenarios?\s+#?(\d+)((?:${LIST_SEPARATOR}\d+)*)`, "gi")

// ---------------------------------------------------------------------------------------------
// Headings of a Markdown file

/** The GitHub anchor of a heading's text (before de-duplication). */
export const slugOf = (text) =>
  text
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/<[^>]+>/g, "")
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M}\s_-]/gu, "")
    .replace(/\s/g, "-")

/**
 * Numbered sections, anchors, and the anchor of each numbered section, of one Markdown text;
 * headings inside code fences do not count.
 */
export const headingsOf = (text) => {
  const sections = new Set()
  const anchors = new Set()
  const sectionAnchors = new Map()
  const seen = new Map()
  let fence
  for (const line of text.split("\n")) {
    const fenceRun = /^ {0,3}(`{3,}|~{3,})/.exec(line)
    if (fenceRun !== null) {
      if (fence === undefined) fence = fenceRun[1]
      else if (fenceRun[1][0] === fence[0] && fenceRun[1].length >= fence.length && line.trim() === fenceRun[1]) fence = undefined
      continue
    }
    if (fence !== undefined) continue
    for (const explicit of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(explicit[1])
    const heading = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)
    if (heading === null) continue
    const number = new RegExp(String.raw`^(${NUMBER})\.?(?:\s|$)`).exec(heading[1])
    const base = slugOf(heading[1])
    const count = seen.get(base) ?? 0
    seen.set(base, count + 1)
    const anchor = count === 0 ? base : `${base}-${count}`
    anchors.add(anchor)
    if (number !== null && !sections.has(number[1])) {
      sections.add(number[1])
      sectionAnchors.set(number[1], anchor)
    }
  }
  return { sections, anchors, sectionAnchors }
}

/** Reads docs/ once: file (relative to docs/) → headings. */
export const loadDocs = (rootDir) => {
  const docsDir = path.join(rootDir, "docs")
  const docs = new Map()
  for (const file of walk(docsDir)) {
    if (!file.endsWith(".md")) continue
    docs.set(path.relative(docsDir, file).split(path.sep).join("/"), headingsOf(fs.readFileSync(file, "utf8")))
  }
  return docs
}

// ---------------------------------------------------------------------------------------------
// Files

function* walk(entry) {
  let stat
  try {
    stat = fs.statSync(entry)
  } catch {
    return
  }
  if (stat.isFile()) {
    yield entry
    return
  }
  if (!stat.isDirectory()) return
  for (const name of fs.readdirSync(entry).sort()) {
    if (SKIPPED_DIRECTORIES.has(name)) continue
    yield* walk(path.join(entry, name))
  }
}

/** Every scanned text file of the tree, as paths relative to rootDir with forward slashes. */
export const scannedFiles = (rootDir) => {
  const files = []
  for (const start of SCANNED_ROOTS) {
    for (const file of walk(path.join(rootDir, start))) {
      const buffer = fs.readFileSync(file)
      if (buffer.includes(0)) continue
      files.push(path.relative(rootDir, file).split(path.sep).join("/"))
    }
  }
  return files
}

// ---------------------------------------------------------------------------------------------
// The check

const sectionNumbersOf = (first, rest) => [
  first,
  ...[...(rest ?? "").matchAll(sectionPattern())].map((match) => match[1]),
]

/** Problems of one file's text, as `{line, message}`; `file` is relative to the root. */
export const checkText = (file, text, docs) => {
  const problems = []
  const inDocs = file.startsWith("docs/")
  const ownDoc = inDocs ? file.slice("docs/".length) : undefined
  const lines = text.split("\n")
  lines.forEach((line, index) => {
    const report = (message) => problems.push({ line: index + 1, message })
    const covered = []

    for (const match of line.matchAll(retiredPattern())) {
      covered.push([match.index, match.index + match[0].length])
      const text = match[0].replace(/`/g, "")
      report(`${text}: names a file that is not part of this repository; cite docs/ instead (docs/README.md)`)
    }

    for (const match of line.matchAll(qualifiedPattern())) {
      covered.push([match.index, match.index + match[0].length])
      const [text, target, anchor, first, rest] = match
      const headings = docs.get(target)
      if (headings === undefined) {
        report(`${text.trim()}: docs/${target} does not exist`)
        continue
      }
      if (anchor !== undefined && !headings.anchors.has(anchor)) {
        report(`docs/${target}#${anchor}: docs/${target} has no heading or anchor "${anchor}"`)
      }
      if (first !== undefined) {
        for (const number of sectionNumbersOf(first, rest)) {
          if (headings.sections.has(number)) continue
          report(`docs/${target} ${SECTION}${number}: docs/${target} has no heading numbered ${number}`)
        }
      }
    }

    if (ownDoc !== undefined) {
      for (const match of line.matchAll(localPattern())) {
        covered.push([match.index, match.index + match[0].length])
        const [, name, first, rest] = match
        const target = path.posix.join(path.posix.dirname(ownDoc), name)
        const headings = docs.get(target)
        if (headings === undefined) {
          report(`${name}: docs/${target} does not exist`)
          continue
        }
        for (const number of sectionNumbersOf(first, rest)) {
          if (headings.sections.has(number)) continue
          report(`${name} ${SECTION}${number}: docs/${target} has no heading numbered ${number}`)
        }
      }
    }

    for (const match of line.matchAll(sectionPattern())) {
      if (covered.some(([start, end]) => match.index >= start && match.index < end)) continue
      if (ownDoc !== undefined) {
        // Inside docs/, a section without a file is one of the same file.
        if (docs.get(ownDoc)?.sections.has(match[1])) continue
        report(`${SECTION}${match[1]}: docs/${ownDoc} has no heading numbered ${match[1]}`)
        continue
      }
      report(`${SECTION}${match[1]} names no file; write docs/<file>.md ${SECTION}${match[1]} (docs/README.md)`)
    }

    for (const match of line.matchAll(scenarioPattern())) {
      const numbers = [match[1], ...[...(match[2] ?? "").matchAll(/\d+/g)].map((number) => number[0])]
      const scenarios = docs.get("scenarios.md")
      for (const number of numbers) {
        if (scenarios?.anchors.has(`scenario-${number}`)) continue
        report(`scenario ${number}: docs/scenarios.md has no scenario ${number}`)
      }
    }

    if (inDocs) {
      for (const link of line.replace(/`[^`]*`/g, "").matchAll(/\]\(([^)\s]+)\)/g)) {
        const href = link[1]
        if (/^[a-z][a-z0-9+.-]*:/i.test(href)) continue
        const [pathPart, anchor] = href.split("#")
        const target = pathPart === ""
          ? ownDoc
          : path.posix.normalize(path.posix.join(path.posix.dirname(ownDoc), pathPart))
        if (!target.endsWith(".md")) continue
        const headings = docs.get(target)
        if (headings === undefined) report(`${href}: docs/${target} does not exist`)
        else if (anchor !== undefined && !headings.anchors.has(anchor)) {
          report(`${href}: docs/${target} has no heading or anchor "${anchor}"`)
        }
      }
    }
  })
  return problems
}

/** Checks the tree at rootDir: the problems as `file:line: message`, and how many references were read. */
export const checkTree = (rootDir) => {
  const docs = loadDocs(rootDir)
  const problems = []
  let references = 0
  if (docs.size === 0) problems.push("docs/: no Markdown files; references cannot resolve")
  for (const file of scannedFiles(rootDir)) {
    const text = fs.readFileSync(path.join(rootDir, file), "utf8")
    references += countReferences(text)
    for (const problem of checkText(file, text, docs)) problems.push(`${file}:${problem.line}: ${problem.message}`)
  }
  return { problems, references }
}

const countReferences = (text) =>
  [...text.matchAll(qualifiedPattern())].length + [...text.matchAll(scenarioPattern())].length

const main = () => {
  const rootDir = path.resolve(process.argv[2] ?? path.join(path.dirname(fileURLToPath(import.meta.url)), ".."))
  const { problems, references } = checkTree(rootDir)
  if (problems.length > 0) {
    for (const problem of problems) console.error(problem)
    console.error(`check-refs: ${problems.length} reference problem${problems.length === 1 ? "" : "s"}`)
    process.exit(1)
  }
  console.log(`check-refs: ${references} references resolve`)
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) main()
