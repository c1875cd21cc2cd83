/**
 * `read_file`: one page of numbered lines of a text file, read in chunks so a huge file costs only
 * the page it serves. A NUL byte in what is read (always at least the first 8 KiB) marks the file
 * binary, which is refused as a `ToolFailure`. A page holds at most `limit` lines and 256 KiB.
 */
import type * as fs from "node:fs/promises"
import type { ToolCall } from "@maka/facts"
import { Effect } from "effect"
import type { BuiltinLimits } from "../Defaults.ts"
import type { ToolFailure } from "../Tool.ts"
import { openForReading } from "./beneath.ts"
import { canonicalRoot, existing, failure, fsFailure } from "./confine.ts"
import { cutUtf8 } from "./describe.ts"
import { tryFs } from "./fs.ts"

export interface ReadFileInput {
  readonly path: string
  readonly offset?: number | undefined
  readonly limit?: number | undefined
}

const CHUNK_BYTES = 64 * 1024

/** `cat -n` style: the 1-based line number right-aligned in six columns, a tab, the line. */
export const numberedLine = (lineNumber: number, text: string): string => `${String(lineNumber).padStart(6, " ")}\t${text}`

interface Page {
  readonly lines: Array<string>
  bytes: number
  /** Lines seen so far (the number of the last complete line). */
  seen: number
  /** Why the page stopped before the end of the file. */
  stop: "limit" | "bytes" | undefined
  /** The page's last line was cut to fit. */
  cutLine: boolean
}

/** Counts one more line and adds it when it belongs to the page; returns false once the page is full. */
const accept = (page: Page, first: number, limit: number, pageBytes: number, text: string): boolean => {
  page.seen++
  if (page.seen < first) return true
  if (page.lines.length >= limit) {
    page.stop = "limit"
    return false
  }
  const line = numberedLine(page.seen, text.endsWith("\r") ? text.slice(0, -1) : text)
  const bytes = Buffer.byteLength(line, "utf8") + 1
  if (page.bytes + bytes <= pageBytes) {
    page.lines.push(line)
    page.bytes += bytes
    return true
  }
  if (page.lines.length === 0) {
    // A single line longer than a page: its first page-worth is shown, marked as cut.
    page.lines.push(cutUtf8(line, pageBytes - 1))
    page.bytes = pageBytes
    page.cutLine = true
  }
  page.stop = "bytes"
  return false
}

const trailer = (page: Page, first: number, displayPath: string): string => {
  const last = first + page.lines.length - 1
  const next = `read on with offset ${last + 1}`
  if (page.cutLine) return `[line ${first} is longer than one page (${displayPath}); it was cut; ${next}]`
  if (page.stop === "bytes") return `[page cut at its byte limit after line ${last}; ${next}]`
  if (page.stop === "limit") return `[showing lines ${first}-${last}; the file continues; ${next}]`
  return ""
}

const readPage = (
  handle: fs.FileHandle,
  displayPath: string,
  first: number,
  limit: number,
  limits: BuiltinLimits,
  signal: AbortSignal,
): Effect.Effect<Page, ToolFailure> =>
  Effect.gen(function* () {
    const page: Page = { lines: [], bytes: 0, seen: 0, stop: undefined, cutLine: false }
    const decoder = new TextDecoder("utf-8")
    const buffer = Buffer.alloc(Math.max(CHUNK_BYTES, limits.binaryProbeBytes))
    let position = 0
    let pending = ""
    while (true) {
      if (signal.aborted) return yield* Effect.fail(failure(`${displayPath}: read cancelled`))
      const { bytesRead } = yield* tryFs(() => handle.read(buffer, 0, buffer.length, position)).pipe(
        Effect.mapError(fsFailure(displayPath)),
      )
      if (bytesRead === 0) break
      const chunk = buffer.subarray(0, bytesRead)
      if (chunk.includes(0)) {
        return yield* Effect.fail(failure(`${displayPath}: binary file; read_file reads text files only`))
      }
      position += bytesRead
      const parts = (pending + decoder.decode(chunk, { stream: true })).split("\n")
      pending = parts.pop() ?? ""
      for (const part of parts) {
        if (!accept(page, first, limit, limits.readFilePageBytes, part)) return page
      }
    }
    pending += decoder.decode()
    if (pending.length > 0) accept(page, first, limit, limits.readFilePageBytes, pending)
    // `accept` sets `stop` only when a further line exists; at the end of the file nothing follows.
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
        if (!opened.stat.isFile()) return yield* Effect.fail(failure(`${input.path}: is not a regular file`))
        return yield* readPage(opened.handle, input.path, first, limit, limits, signal)
      }),
    )
    if (page.lines.length === 0) {
      if (page.seen === 0) return { format: "text", value: "(empty file)" } satisfies ToolCall.ToolOutput
      return yield* Effect.fail(
        failure(`${input.path}: offset ${first} is past the end of the file (${page.seen} lines)`),
      )
    }
    const note = trailer(page, first, input.path)
    const body = page.lines.join("\n")
    return { format: "text", value: note.length === 0 ? body : `${body}\n${note}` } satisfies ToolCall.ToolOutput
  })
