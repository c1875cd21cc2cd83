/**
 * The line scan behind `validateSummary` (docs/log-format.md §2.5, check 3): matches the required level-2
 * headings in order, tracks code fences, and attributes content lines to the section they belong to.
 * Pure and private; `Summary.ts` supplies the headings and the template lines it must ignore.
 */

/** What the scan needs from the summary format. */
export interface ScanFormat {
  readonly requiredHeadings: ReadonlyArray<string>
  /** Lines of the template; a line identical to one of them never counts as content. */
  readonly templateLines: ReadonlySet<string>
}

export interface ScanResult {
  /** Every required heading matched, in order, and each section holds content. */
  readonly hasEverySection: boolean
  /** A fence was opened and never closed. */
  readonly isFenceOpen: boolean
}

interface Fence {
  readonly family: "`" | "~"
  readonly width: number
}

const MAX_STRUCTURAL_INDENT = 3
const MIN_FENCE_WIDTH = 3

const LEVEL_TWO_HEADING = /^##(?:\s|$)/
const ANY_LEVEL_HEADING = /^#{1,6}(?:\s|$)/
const THEMATIC_BREAK = /^(?:-{3,}|\*{3,}|_{3,})$/
const BARE_FENCE_RUN = /^(?:`{3,}|~{3,})$/

const countLeadingSpaces = (line: string): number => {
  let count = 0
  while (line.charCodeAt(count) === 0x20) count++
  return count
}

/** The fence run a structural line starts with, or undefined when it starts with none. */
const fenceRunOf = (body: string): Fence | undefined => {
  const first = body[0]
  if (first !== "`" && first !== "~") return undefined
  let width = 0
  while (body[width] === first) width++
  return width >= MIN_FENCE_WIDTH ? { family: first, width } : undefined
}

const isThematicBreak = (body: string): boolean => THEMATIC_BREAK.test(body.replace(/\s/g, ""))

export const scanSections = (text: string, format: ScanFormat): ScanResult => {
  const { requiredHeadings, templateLines } = format
  const hasContent = requiredHeadings.map(() => false)
  let matchedCount = 0
  // Index of the section that content is attributed to, or undefined while attribution is off.
  let attributed: number | undefined = undefined
  let openFence: Fence | undefined = undefined

  const countContent = (): void => {
    if (attributed !== undefined) hasContent[attributed] = true
  }

  for (const rawLine of text.split("\n")) {
    const line = rawLine.endsWith("\r") ? rawLine.slice(0, -1) : rawLine
    const indent = countLeadingSpaces(line)
    const isStructural = indent <= MAX_STRUCTURAL_INDENT
    const body = isStructural ? line.slice(indent) : line
    const trimmed = line.trim()

    if (openFence !== undefined) {
      const run = isStructural ? fenceRunOf(body) : undefined
      const isClosing =
        run !== undefined &&
        run.family === openFence.family &&
        run.width >= openFence.width &&
        trimmed === run.family.repeat(run.width)
      if (isClosing) openFence = undefined
      else countContent()
      continue
    }

    if (isStructural) {
      const run = fenceRunOf(body)
      if (run !== undefined) {
        // The opening line then falls through: an info string counts as content, a bare run does not.
        openFence = run
      } else if (body.startsWith("#")) {
        if (matchedCount < requiredHeadings.length && trimmed === requiredHeadings[matchedCount]) {
          attributed = matchedCount
          matchedCount++
          continue
        }
        if (LEVEL_TWO_HEADING.test(body)) {
          attributed = undefined
          continue
        }
        if (ANY_LEVEL_HEADING.test(body)) continue
      } else if (isThematicBreak(body)) {
        continue
      }
    }

    if (trimmed.length > 0 && !templateLines.has(trimmed) && !BARE_FENCE_RUN.test(trimmed)) countContent()
  }

  return {
    hasEverySection: matchedCount === requiredHeadings.length && hasContent.every((has) => has),
    isFenceOpen: openFence !== undefined,
  }
}
