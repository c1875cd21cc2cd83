/**
 * `search_text`: a literal (not a regular expression) search of the text files under a workspace
 * path, in name order, as `{matches: [{path, line, text}], truncated}`. Symbolic links are not
 * followed, `.git` folders are skipped, and binary or very large files are passed over.
 */
import type { Dirent } from "node:fs"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import type { ToolCall } from "@maka/facts"
import { Effect } from "effect"
import type { BuiltinLimits } from "../Defaults.ts"
import type { ToolFailure } from "../Tool.ts"
import { canonicalRoot, display, existing, failure, fsFailure } from "./confine.ts"
import { tryFs } from "./fs.ts"

export interface SearchTextInput {
  readonly pattern: string
  readonly path?: string | undefined
  readonly maxResults?: number | undefined
}

export interface Match {
  readonly path: string
  readonly line: number
  readonly text: string
}

const SKIPPED_DIRECTORIES = new Set([".git"])

/** `text` within `maxChars` UTF-16 units, never ending on half a surrogate pair, `…` when cut. */
export const cutLine = (text: string, maxChars: number): string => {
  if (text.length <= maxChars) return text
  let end = maxChars
  const last = text.charCodeAt(end - 1)
  if (last >= 0xd800 && last <= 0xdbff) end--
  return `${text.slice(0, end)}…`
}

const byName = (left: Dirent, right: Dirent): number => (left.name < right.name ? -1 : left.name > right.name ? 1 : 0)

export const searchText = (
  root: string,
  limits: BuiltinLimits,
  input: SearchTextInput,
  signal: AbortSignal,
): Effect.Effect<ToolCall.ToolOutput, ToolFailure> =>
  Effect.gen(function* () {
    const displayPath = input.path ?? "."
    const maxResults = input.maxResults ?? limits.searchMaxResults
    const canonical = yield* canonicalRoot(root)
    const start = yield* existing(canonical, displayPath)
    const matches: Array<Match> = []
    let truncated = false

    /** Searches one file; returns true once the search must stop. */
    const searchFile = (file: string): Effect.Effect<boolean> =>
      Effect.gen(function* () {
        const content = yield* tryFs(() => fs.readFile(file))
        if (content.subarray(0, limits.binaryProbeBytes).includes(0)) return false
        const lines = content.toString("utf8").split("\n")
        for (const [index, raw] of lines.entries()) {
          if (!raw.includes(input.pattern)) continue
          if (matches.length >= maxResults) {
            truncated = true
            return true
          }
          const text = raw.endsWith("\r") ? raw.slice(0, -1) : raw
          matches.push({ path: display(canonical, file), line: index + 1, text: cutLine(text, limits.searchLineChars) })
        }
        return false
      }).pipe(Effect.orElseSucceed(() => false))

    const searchEntry = (file: string, size: number): Effect.Effect<boolean> =>
      size > limits.searchMaxFileBytes ? Effect.succeed(false) : searchFile(file)

    const walk = (directory: string): Effect.Effect<boolean, ToolFailure> =>
      Effect.gen(function* () {
        const entries = yield* tryFs(() => fs.readdir(directory, { withFileTypes: true })).pipe(
          Effect.orElseSucceed((): Array<Dirent> => []),
        )
        for (const entry of entries.sort(byName)) {
          if (signal.aborted) return yield* Effect.fail(failure("search cancelled"))
          const full = path.join(directory, entry.name)
          if (entry.isDirectory()) {
            if (SKIPPED_DIRECTORIES.has(entry.name)) continue
            if (yield* walk(full)) return true
          } else if (entry.isFile()) {
            const stat = yield* tryFs(() => fs.stat(full)).pipe(Effect.option)
            if (stat._tag === "Some" && (yield* searchEntry(full, stat.value.size))) return true
          }
        }
        return false
      })

    const stat = yield* tryFs(() => fs.stat(start)).pipe(Effect.mapError(fsFailure(displayPath)))
    if (stat.isDirectory()) yield* walk(start)
    else if (stat.isFile()) yield* searchEntry(start, stat.size)
    else return yield* Effect.fail(failure(`${displayPath}: is not a file or directory`))
    return {
      format: "json",
      value: { matches: matches.map((match) => ({ ...match })), truncated },
    } satisfies ToolCall.ToolOutput
  })
