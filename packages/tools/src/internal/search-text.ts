/**
 * `search_text`: a literal (not a regular expression) search of the text files under a workspace
 * path, in name order, as `{matches: [{path, line, text}], truncated}`. Symbolic links are not
 * followed, `.git` folders are skipped, and binary or very large files are passed over. A name that
 * is not valid UTF-8 is opened by its bytes and shown decoded (U+FFFD for what cannot be read).
 * The search stops (`truncated`) at `maxResults` matches, or before its result would no longer fit
 * the model-visible projection (`MAX_PROJECTION_BYTES` encoded, `MAX_PROJECTION_NODES` JSON values).
 */
import { constants, type Dirent } from "node:fs"
import * as path from "node:path"
import { Canonical, Limits, type ToolCall } from "@maka/facts"
import { Effect } from "effect"
import type { BuiltinLimits } from "../Defaults.ts"
import type { ToolFailure } from "../Tool.ts"
import { type Directory, entryName, nameText, openChild, openChildDirectory, openForReading, type Opened, rawEntries } from "./beneath.ts"
import { canonicalRoot, directoryEnding, display, existing, failure } from "./confine.ts"
import { type FsError, tryFs } from "./fs.ts"

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

/** The projection of a result without matches (`truncated` as `false`, the longer literal): its bytes and JSON values. */
const EMPTY_PROJECTION_BYTES = Canonical.utf8Length(
  Canonical.stringify({ kind: "json", value: { matches: [], truncated: false } }),
)
const EMPTY_RESULT_NODES = Canonical.measure({ matches: [], truncated: false }).nodes

/** Bytes (with the comma before it) and JSON values one more match adds to the projection. */
const matchSize = (match: Match) => ({
  bytes: Canonical.utf8Length(Canonical.stringify(match)) + 1,
  nodes: Canonical.measure(match).nodes,
})

/** `text` within `maxChars` UTF-16 units, never ending on half a surrogate pair, `…` when cut. */
export const cutLine = (text: string, maxChars: number): string => {
  if (text.length <= maxChars) return text
  let end = maxChars
  const last = text.charCodeAt(end - 1)
  if (last >= 0xd800 && last <= 0xdbff) end--
  return `${text.slice(0, end)}…`
}

/** A listed entry with its name as it is opened and as it is shown (and sorted). */
interface Listed {
  readonly entry: Dirent<Buffer>
  readonly name: string | Buffer
  readonly text: string
}

/**
 * What the opened file held when it was opened: its first `size` bytes (`size`, from its `fstat`,
 * is at most the search's limit), read in turn; a file that grew since is not read further.
 */
export const readOpened = (handle: Opened["handle"], size: number): Effect.Effect<Buffer, FsError> => {
  const buffer = Buffer.alloc(size)
  const from = (filled: number): Effect.Effect<Buffer, FsError> =>
    filled >= size
      ? Effect.succeed(buffer)
      : Effect.flatMap(tryFs(() => handle.read(buffer, filled, size - filled, filled)), ({ bytesRead }) =>
          bytesRead === 0 ? Effect.succeed(buffer.subarray(0, filled)) : from(filled + bytesRead),
        )
  return from(0)
}

const byName = (left: Listed, right: Listed): number => (left.text < right.text ? -1 : left.text > right.text ? 1 : 0)

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
    // Less the comma the first match does not have.
    let bytes = EMPTY_PROJECTION_BYTES - 1
    let nodes = EMPTY_RESULT_NODES

    /** Searches one opened file; returns true once the search must stop. Only regular files are read. */
    const searchFile = (opened: Opened): Effect.Effect<boolean> =>
      Effect.gen(function* () {
        if (!opened.stat.isFile() || opened.stat.size > limits.searchMaxFileBytes) return false
        // What it held when opened: a file that grows while it is searched is not chased.
        const content = yield* readOpened(opened.handle, opened.stat.size)
        // Binary anywhere, as read_file finds it reading the whole file: none of its lines is shown.
        if (content.includes(0)) return false
        // A leading byte-order mark is no text of the first line (read_file leaves it out too).
        const text = content.toString("utf8")
        const lines = (text.charCodeAt(0) === 0xfeff ? text.slice(1) : text).split("\n")
        for (const [index, raw] of lines.entries()) {
          if (!raw.includes(input.pattern)) continue
          if (matches.length >= maxResults) {
            truncated = true
            return true
          }
          const text = raw.endsWith("\r") ? raw.slice(0, -1) : raw
          const match = { path: display(canonical, opened.path), line: index + 1, text: cutLine(text, limits.searchLineChars) }
          const size = matchSize(match)
          if (bytes + size.bytes > Limits.MAX_PROJECTION_BYTES || nodes + size.nodes > Limits.MAX_PROJECTION_NODES) {
            // One more match and the model would read no result at all: what was found is returned.
            truncated = true
            return true
          }
          matches.push(match)
          bytes += size.bytes
          nodes += size.nodes
        }
        return false
      }).pipe(Effect.orElseSucceed(() => false))

    // Each directory and file is opened relative to its parent's descriptor without following links;
    // an entry that turned into a link (or vanished) since it was listed is passed over.
    const walk = (directory: Directory): Effect.Effect<boolean, ToolFailure> =>
      Effect.gen(function* () {
        // Listed as bytes, so a name that is not valid UTF-8 is opened by its own bytes (and shown
        // decoded, as list_files shows it) instead of being passed over.
        const raw = yield* rawEntries(directory, displayPath).pipe(Effect.orElseSucceed((): Array<Dirent<Buffer>> => []))
        const listed = raw.map((entry): Listed => {
          const name = entryName(entry.name)
          return { entry, name, text: nameText(name) }
        })
        for (const { entry, name, text } of listed.sort(byName)) {
          if (signal.aborted) return yield* Effect.fail(failure("search cancelled"))
          const entryDisplay = display(canonical, path.join(directory.path, text))
          if (entry.isDirectory()) {
            if (SKIPPED_DIRECTORIES.has(text)) continue
            const stop = yield* Effect.scoped(
              Effect.gen(function* () {
                const child = yield* Effect.option(openChildDirectory(canonical, directory, name, entryDisplay))
                return child._tag === "Some" ? yield* walk(child.value) : false
              }),
            )
            if (stop) return true
          } else if (entry.isFile()) {
            const stop = yield* Effect.scoped(
              Effect.flatMap(openChild(canonical, directory, name, constants.O_RDONLY, entryDisplay), searchFile),
            ).pipe(Effect.orElseSucceed(() => false))
            if (stop) return true
          }
        }
        return false
      })

    yield* Effect.scoped(
      Effect.gen(function* () {
        const opened = yield* openForReading(canonical, start, displayPath)
        const ending = directoryEnding(displayPath)
        if (opened.stat.isDirectory()) yield* walk({ handle: opened.handle, path: opened.path })
        else if (ending !== undefined) {
          return yield* Effect.fail(failure(`${displayPath}: is not a directory (the path ends with ${ending})`))
        } else if (opened.stat.isFile()) yield* searchFile(opened)
        else return yield* Effect.fail(failure(`${displayPath}: is not a file or directory`))
      }),
    )
    return {
      format: "json",
      value: { matches: matches.map((match) => ({ ...match })), truncated },
    } satisfies ToolCall.ToolOutput
  })
