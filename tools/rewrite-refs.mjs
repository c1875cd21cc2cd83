#!/usr/bin/env node
// Rewrites section references to the two retired contract files (the design and the behaviour
// reference) into references to docs/, using the map of docs/README.md. Idempotent: a second run
// changes nothing.
//
// Usage: node tools/rewrite-refs.mjs [--dry-run] [rootDir]   (rootDir defaults to this repository)
//
// - A reference naming a retired file and a section, with or without `.md` and backticks, becomes
//   `docs/<file>.md §N`; sections listed after it (`, §M`, `–§M`) keep its chapter.
// - A section sign with a number but no file, outside docs/, is read as a behaviour chapter (every
//   such reference in the code cites one) and is qualified the same way.
// - In Markdown outside code, the reference becomes a link: `[docs/<file>.md §N](<relative>#anchor)`;
//   not in .changeset/, whose text is copied into each package's changelog, where the link would break.
// - A section that has no heading in docs/ is left as it is and listed; so is a mention of a retired
//   file without a section. The exit status is 1 when anything is left for hand editing.
// Files are the ones tools/check-refs.mjs scans, except docs/ itself.
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import {
  LIST_SEPARATOR,
  loadDocs,
  NUMBER,
  qualifiedPattern,
  RETIRED_NAMES,
  retiredPattern,
  scannedFiles,
  SECTION,
} from "./check-refs.mjs"

const [DESIGN, BEHAVIOUR] = RETIRED_NAMES

/** `docs/<file>` holding a chapter's section `number`, by the map of docs/README.md. */
export const targetOf = (chapter, number) => {
  const major = number.split(".")[0]
  if (chapter === DESIGN) return major === "10" ? "cli.md" : "architecture.md"
  if (major === "1") return "architecture.md"
  if (number === "2.12" || number.startsWith("2.12.")) return "tools.md"
  if (major === "2" || major === "3") return "log-format.md"
  if (major === "4") return "model.md"
  if (major === "5") return "engine.md"
  if (major === "6") return "scenarios.md"
  return undefined
}

const SECTIONS = String.raw`${SECTION}\s?(${NUMBER})((?:${LIST_SEPARATOR}${SECTION}\s?${NUMBER})*)`

/** A retired file and a section list; the file may stand in backticks: group 2 is the file's name. */
const namedPattern = () => new RegExp(String.raw`(\x60?)\b(${RETIRED_NAMES.join("|")})(?:\.md)?\1\s?${SECTIONS}`, "g")

/** A section list without a file. */
const barePattern = () => new RegExp(SECTIONS, "g")

const itemsOf = (first, rest) => [
  { separator: "", number: first },
  ...[...rest.matchAll(new RegExp(String.raw`(${LIST_SEPARATOR})${SECTION}\s?(${NUMBER})`, "g"))].map((match) => ({
    separator: match[1],
    number: match[2],
  })),
]

/**
 * Rewrites one file's text. Returns the new text, the rewritten references (`{line, chapter,
 * inferred, from, to}`), and what was left (`{line, text, reason}`).
 */
export const rewriteText = (file, text, docs) => {
  const markdown = file.endsWith(".md")
  const linked = markdown && !file.startsWith(".changeset/")
  const docsLink = (target) => path.posix.relative(path.posix.dirname(file), `docs/${target}`)
  const rewritten = []
  const left = []
  let fence
  const lines = text.split("\n").map((line, index) => {
    const fenceRun = markdown ? /^ {0,3}(`{3,}|~{3,})/.exec(line) : null
    const inCode = markdown && (fence !== undefined || fenceRun !== null)
    if (fenceRun !== null) {
      if (fence === undefined) fence = fenceRun[1]
      else if (fenceRun[1][0] === fence[0] && fenceRun[1].length >= fence.length && line.trim() === fenceRun[1]) {
        fence = undefined
      }
    }
    if (!line.includes(SECTION) && !RETIRED_NAMES.some((name) => line.includes(name))) return line

    const groups = []
    const taken = []
    const isTaken = (at) => taken.some(([start, end]) => at >= start && at < end)
    for (const match of line.matchAll(qualifiedPattern())) taken.push([match.index, match.index + match[0].length])
    for (const match of line.matchAll(namedPattern())) {
      if (isTaken(match.index)) continue
      taken.push([match.index, match.index + match[0].length])
      const items = itemsOf(match[3], match[4])
      groups.push({ start: match.index, text: match[0], chapter: match[2], inferred: false, items })
    }
    for (const match of line.matchAll(barePattern())) {
      if (isTaken(match.index)) continue
      taken.push([match.index, match.index + match[0].length])
      const items = itemsOf(match[1], match[2])
      groups.push({ start: match.index, text: match[0], chapter: BEHAVIOUR, inferred: true, items })
    }
    for (const match of line.matchAll(retiredPattern())) {
      if (isTaken(match.index)) continue
      left.push({ line: index + 1, text: match[0], reason: "names a retired file without a section; reword it by hand" })
    }

    let result = line
    for (const group of groups.sort((a, b) => b.start - a.start)) {
      const targets = group.items.map(({ number }) => {
        const target = targetOf(group.chapter, number)
        const headings = target === undefined ? undefined : docs.get(target)
        return headings?.sections.has(number) ? { target, anchor: headings.sectionAnchors.get(number) } : undefined
      })
      if (targets.some((target) => target === undefined)) {
        left.push({ line: index + 1, text: group.text, reason: "has no heading in docs/ under the map of docs/README.md" })
        continue
      }
      let replacement = ""
      group.items.forEach(({ separator, number }, position) => {
        const { target, anchor } = targets[position]
        const label = `docs/${target} ${SECTION}${number}`
        const sameFile = position > 0 && targets[position - 1].target === target
        if (linked && !inCode) replacement += `${separator}[${label}](${docsLink(target)}#${anchor})`
        else replacement += sameFile ? `${separator}${SECTION}${number}` : `${separator}${label}`
        rewritten.push({ line: index + 1, chapter: group.chapter, inferred: group.inferred, from: number, to: label })
      })
      result = result.slice(0, group.start) + replacement + result.slice(group.start + group.text.length)
    }
    return result
  })
  return { text: lines.join("\n"), rewritten, left }
}

/** Rewrites the tree at rootDir (or only reports, with `dryRun`). */
export const rewriteTree = (rootDir, { dryRun }) => {
  const docs = loadDocs(rootDir)
  const files = []
  for (const file of scannedFiles(rootDir)) {
    if (file.startsWith("docs/")) continue
    const absolute = path.join(rootDir, file)
    const before = fs.readFileSync(absolute, "utf8")
    const { text, rewritten, left } = rewriteText(file, before, docs)
    if (rewritten.length === 0 && left.length === 0) continue
    if (!dryRun && text !== before) fs.writeFileSync(absolute, text)
    files.push({ file, rewritten, left })
  }
  return files
}

const main = () => {
  const args = process.argv.slice(2)
  const dryRun = args.includes("--dry-run")
  const rootArg = args.find((arg) => !arg.startsWith("--"))
  const rootDir = path.resolve(rootArg ?? path.join(path.dirname(fileURLToPath(import.meta.url)), ".."))
  const files = rewriteTree(rootDir, { dryRun })
  let named = 0
  let inferred = 0
  const left = []
  for (const { file, rewritten, left: fileLeft } of files) {
    const fileInferred = rewritten.filter((item) => item.inferred).length
    named += rewritten.length - fileInferred
    inferred += fileInferred
    const detail = fileInferred > 0 ? ` (${fileInferred} without a file)` : ""
    if (rewritten.length > 0) console.log(`${file}: ${rewritten.length}${detail}`)
    for (const item of fileLeft) left.push(`${file}:${item.line}: ${item.text.trim()} ${item.reason}`)
  }
  const total = named + inferred
  const changed = files.filter((entry) => entry.rewritten.length > 0).length
  const plural = (count, noun) => `${count} ${noun}${count === 1 ? "" : "s"}`
  console.log(
    `rewrite-refs: ${dryRun ? "would rewrite" : "rewrote"} ${plural(total, "reference")} in ${plural(changed, "file")} ` +
      `(${named} naming a retired file, ${inferred} without a file, read as behaviour chapters); ${left.length} left`,
  )
  for (const line of left) console.log(`left: ${line}`)
  if (left.length > 0) process.exit(1)
}

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main()
