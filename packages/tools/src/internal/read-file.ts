/**
 * `read_file`: one page of numbered lines of a text file, read in chunks so a huge file costs only
 * the page it serves: lines before the page are counted, never kept, and of a line longer than a
 * page only what the page can show is kept. A NUL byte in what is read (always at least the first
 * 8 KiB) marks the file binary, which is refused as a `ToolFailure`. A page holds at most `limit`
 * lines and fits the model-visible projection: its text, JSON-encoded with the closing note, stays
 * within `readFilePageBytes`, itself held to `MAX_PROJECTION_BYTES`.
 */
import type * as fs from "node:fs/promises"
import { Canonical, Limits, type ToolCall } from "@maka/facts"
import { Effect } from "effect"
import type { BuiltinLimits } from "../Defaults.ts"
import type { ToolFailure } from "../Tool.ts"
import { openForReading } from "./beneath.ts"
import { canonicalRoot, directoryEnding, existing, failure, fsFailure, notAFile } from "./confine.ts"
import { cutEncoded, encodedLength } from "./describe.ts"
import { tryFs } from "./fs.ts"

export interface ReadFileInput {
  readonly path: string
  readonly offset?: number | undefined
  readonly limit?: number | undefined
}

const CHUNK_BYTES = 64 * 1024
const NEWLINE = 0x0a
/**
 * Bytes kept of a line beyond what the page has left. The encoded size of decoded UTF-8 is at least
 * its byte count, and a character cut at the end of what is kept spans at most 3 bytes: a line that
 * outgrows `left + 4` bytes cannot fit, and what is kept still covers the part of it a page shows.
 */
const CHARACTER_SLACK = 4

/** What a text projection adds around its text: `{"kind":"text","text":""}`. */
const PROJECTION_OVERHEAD = Canonical.utf8Length(Canonical.stringify({ kind: "text", text: "" }))

/** The `\n` before the next line or the closing note, as a JSON string writes it. */
const SEPARATOR_BYTES = 2

/** The longest path a closing note repeats; a longer one is cut, with `…`. */
const NOTE_PATH_CHARS = 1_024

/** `cat -n` style: the 1-based line number right-aligned in six columns, a tab, the line. */
export const numberedLine = (lineNumber: number, text: string): string => `${String(lineNumber).padStart(6, " ")}\t${text}`

interface Page {
  readonly lines: Array<string>
  /** Encoded bytes of the lines, each with the separator after it. */
  bytes: number
  /** Lines seen so far (the number of the last complete line). */
  seen: number
  /** Why the page stopped before the end of the file. */
  stop: "limit" | "bytes" | undefined
  /** The page's last line was cut to fit. */
  cutLine: boolean
}

type Stop = "limit" | "bytes" | "cut"

const notePath = (displayPath: string): string =>
  displayPath.length <= NOTE_PATH_CHARS ? displayPath : `${Canonical.truncateUtf16(displayPath, NOTE_PATH_CHARS)}…`

const note = (stop: Stop, first: number, last: number, displayPath: string): string => {
  const next = `read on with offset ${last + 1}`
  if (stop === "cut") return `[line ${first} is longer than one page (${notePath(displayPath)}); it was cut; ${next}]`
  if (stop === "bytes") return `[page cut at its byte limit after line ${last}; ${next}]`
  return `[showing lines ${first}-${last}; the file continues; ${next}]`
}

const trailer = (page: Page, first: number, displayPath: string): string => {
  const last = first + page.lines.length - 1
  if (page.cutLine) return note("cut", first, last, displayPath)
  return page.stop === undefined ? "" : note(page.stop, first, last, displayPath)
}

/**
 * Encoded bytes the lines of a page may take: the page's cap (held to the projection's) less the
 * projection's own keys and the longest closing note the page could end with.
 */
const lineBudget = (limits: BuiltinLimits, displayPath: string): number => {
  const largest = Number.MAX_SAFE_INTEGER
  const longestNote = Math.max(
    ...(["limit", "bytes", "cut"] as const).map((stop) => encodedLength(note(stop, largest, largest, displayPath))),
  )
  const cap = Math.min(limits.readFilePageBytes, Limits.MAX_PROJECTION_BYTES)
  return Math.max(0, cap - PROJECTION_OVERHEAD - longestNote)
}

/** Adds the complete line `bytes` (line `page.seen + 1`) when it fits; returns false once the page is full. */
const accept = (page: Page, budget: number, bytes: Buffer): boolean => {
  page.seen++
  let text = bytes.toString("utf8")
  if (page.seen === 1 && text.startsWith("\uFEFF")) text = text.slice(1)
  if (text.endsWith("\r")) text = text.slice(0, -1)
  const line = numberedLine(page.seen, text)
  const size = encodedLength(line) + SEPARATOR_BYTES
  if (page.bytes + size <= budget) {
    page.lines.push(line)
    page.bytes += size
    return true
  }
  if (page.lines.length === 0) {
    // A single line longer than a page: its first page-worth is shown, marked as cut.
    page.lines.push(cutEncoded(line, budget - SEPARATOR_BYTES))
    page.bytes = budget
    page.cutLine = true
  }
  page.stop = "bytes"
  return false
}

/**
 * How far past its size at opening a file is read: what was appended while it was read, up to this.
 * A file that keeps growing (a log a background job writes) is never chased to its end.
 */
const GROWTH_READ_BYTES = 1024 * 1024

/**
 * Scans the file for line ends byte by byte, never joining more than the line being read: a line
 * before the page is only counted; of a line on the page at most what is left of the page's budget
 * (and a few bytes to finish a character) is kept. Once a kept line outgrows that, it cannot fit
 * (its encoded size is at least its byte count), so the page ends there without reading the rest.
 * It reads no further than `GROWTH_READ_BYTES` past `sizeAtOpening`.
 */
export const readPage = (
  handle: fs.FileHandle,
  displayPath: string,
  first: number,
  limit: number,
  limits: BuiltinLimits,
  signal: AbortSignal,
  sizeAtOpening: number,
): Effect.Effect<Page, ToolFailure> =>
  Effect.gen(function* () {
    const page: Page = { lines: [], bytes: 0, seen: 0, stop: undefined, cutLine: false }
    const end = sizeAtOpening + GROWTH_READ_BYTES
    const budget = lineBudget(limits, displayPath)
    const buffer = Buffer.alloc(Math.max(CHUNK_BYTES, limits.binaryProbeBytes))
    /** The kept bytes of the line being read, and whether that line has a byte yet. */
    let kept: Array<Buffer> = []
    let keptBytes = 0
    let started = false
    const take = () => {
      const line = Buffer.concat(kept, keptBytes)
      kept = []
      keptBytes = 0
      started = false
      return line
    }
    let position = 0
    /** Whether the read stopped at `end` (the file went on growing), not at its end. */
    let bounded = false
    while (true) {
      if (signal.aborted) return yield* Effect.fail(failure(`${displayPath}: read cancelled`))
      if (position >= end) {
        bounded = true
        break
      }
      const { bytesRead } = yield* tryFs(() => handle.read(buffer, 0, Math.min(buffer.length, end - position), position)).pipe(
        Effect.mapError(fsFailure(displayPath)),
      )
      if (bytesRead === 0) break
      const chunk = buffer.subarray(0, bytesRead)
      if (chunk.includes(0)) {
        return yield* Effect.fail(failure(`${displayPath}: binary file; read_file reads text files only`))
      }
      position += bytesRead
      let start = 0
      while (start < chunk.length) {
        const newline = chunk.indexOf(NEWLINE, start)
        const end = newline === -1 ? chunk.length : newline
        const onPage = page.seen + 1 >= first
        // A further line exists (this one has a byte, or its end): the page is full at `limit` lines.
        if (onPage && page.lines.length >= limit) {
          page.stop = "limit"
          return page
        }
        started = true
        if (onPage) {
          // What is left of the budget, and up to 3 bytes more to finish a character.
          const room = Math.max(0, budget - page.bytes + CHARACTER_SLACK - keptBytes)
          const piece = chunk.subarray(start, start + Math.min(end - start, room))
          kept.push(Buffer.from(piece))
          keptBytes += piece.length
          if (piece.length < end - start) {
            // Longer than what is left: it cannot fit, so it ends the page (cut when it is the first).
            accept(page, budget, take())
            return page
          }
        }
        if (newline === -1) break
        if (onPage) {
          if (!accept(page, budget, take())) return page
        } else {
          page.seen++
          started = false
        }
        start = newline + 1
      }
    }
    if (bounded) {
      // The line being read when the bound came is not whole: left for the next page, which the
      // note asks for (the file continues).
      if (page.lines.length > 0) page.stop = "limit"
    } else if (started) {
      // The last line, without a line end.
      if (page.seen + 1 >= first) accept(page, budget, take())
      else page.seen++
    }
    // A page stops with a note only when a further line exists; at the end of the file nothing follows.
    return page
  })

export const readFile = (
  root: string,
  limits: BuiltinLimits,
  input: ReadFileInput,
  signal: AbortSignal,
): Effect.Effect<ToolCall.ToolOutput, ToolFailure> =>
  Effect.gen(function* () {
    const canonical = yield* canonicalRoot(root)
    const file = yield* existing(canonical, input.path)
    const first = input.offset ?? 1
    const limit = input.limit ?? limits.readFileLimitLines
    // Opened without following links and checked on the descriptor: what is read is what was checked.
    const page = yield* Effect.scoped(
      Effect.gen(function* () {
        const opened = yield* openForReading(canonical, file, input.path)
        if (opened.stat.isDirectory()) return yield* Effect.fail(failure(`${input.path}: is a directory; use list_files`))
        const ending = directoryEnding(input.path)
        if (ending !== undefined) return yield* Effect.fail(notAFile(input.path, ending))
        if (!opened.stat.isFile()) return yield* Effect.fail(failure(`${input.path}: is not a regular file`))
        return yield* readPage(opened.handle, input.path, first, limit, limits, signal, opened.stat.size)
      }),
    )
    if (page.lines.length === 0) {
      if (page.seen === 0) return { format: "text", value: "(empty file)" } satisfies ToolCall.ToolOutput
      return yield* Effect.fail(
        failure(`${input.path}: offset ${first} is past the end of the file (${page.seen} lines)`),
      )
    }
    const closing = trailer(page, first, input.path)
    const body = page.lines.join("\n")
    return { format: "text", value: closing.length === 0 ? body : `${body}\n${closing}` } satisfies ToolCall.ToolOutput
  })
