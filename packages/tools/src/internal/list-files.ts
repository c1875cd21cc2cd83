/**
 * `list_files`: the entries of one workspace directory as `[{name, type, size}]`, sorted by name
 * (UTF-16 code units). Entries are described without following symbolic links: a link is a
 * `symlink` whatever it points to, and its size is the link's own. A name that is not valid UTF-8 is
 * listed as decoded, each byte it cannot read as U+FFFD: the listing is never silently shorter.
 * Nor is it ever cut: a listing the model-visible projection cannot hold (over `MAX_PROJECTION_BYTES`
 * encoded or `MAX_PROJECTION_NODES` JSON values) is refused as a `ToolFailure` saying so, since a
 * list of entries has no place to say that some were left out.
 */
import { Canonical, EventWrite, Limits, type ToolCall } from "@maka/facts"
import { Effect, Option } from "effect"
import type { ToolFailure } from "../Tool.ts"
import { lstatRawChild, openForReading, rawEntries } from "./beneath.ts"
import { canonicalRoot, existing, failure, fsFailure } from "./confine.ts"

export interface Entry {
  readonly name: string
  readonly type: "file" | "directory" | "symlink"
  readonly size: number
}

const typeOf = (stat: { isSymbolicLink(): boolean; isDirectory(): boolean }): Entry["type"] =>
  stat.isSymbolicLink() ? "symlink" : stat.isDirectory() ? "directory" : "file"

export const listFiles = (root: string, input: { readonly path?: string | undefined }): Effect.Effect<ToolCall.ToolOutput, ToolFailure> =>
  Effect.gen(function* () {
    const displayPath = input.path ?? "."
    const canonical = yield* canonicalRoot(root)
    const real = yield* existing(canonical, displayPath)
    // Listed through the descriptor opened without following links, so a swapped path lists nothing else.
    const entries = yield* Effect.scoped(
      Effect.gen(function* () {
        const opened = yield* openForReading(canonical, real, displayPath)
        if (!opened.stat.isDirectory()) return yield* Effect.fail(failure(`${displayPath}: is not a directory; use read_file`))
        const directory = { handle: opened.handle, path: opened.path }
        const names = yield* rawEntries(directory, displayPath)
        return yield* Effect.forEach(
          names,
          ({ name }) =>
            lstatRawChild(directory, name).pipe(
              Effect.map((entry) => Option.some<Entry>({ name: name.toString("utf8"), type: typeOf(entry), size: entry.size })),
              // An entry removed between readdir and lstat is simply not listed; any other error (a
              // directory that can be read but not searched) fails the call: never a shorter list.
              Effect.catch((error) =>
                error.code === "ENOENT"
                  ? Effect.succeed(Option.none<Entry>())
                  : Effect.fail(fsFailure(`${displayPath === "." ? "" : `${displayPath}/`}${name.toString("utf8")}`)(error)),
              ),
            ),
          { concurrency: 16 },
        )
      }),
    )
    const listed = entries
      .filter(Option.isSome)
      .map((entry) => entry.value)
      .sort((left, right) => (left.name < right.name ? -1 : left.name > right.name ? 1 : 0))
    const output = { format: "json", value: listed.map((entry) => ({ ...entry })) } satisfies ToolCall.ToolOutput
    if (EventWrite.freezeProjection(output).kind === "failure") return yield* Effect.fail(tooMany(displayPath, listed))
    return output
  })

/** How many of `listed` (from the first) one projection holds: bytes with their commas, JSON values. */
const fitting = (listed: ReadonlyArray<Entry>): number => {
  // Less the comma the first entry does not have.
  let bytes = Canonical.utf8Length(Canonical.stringify({ kind: "json", value: [] })) - 1
  let nodes = Canonical.measure([]).nodes
  let count = 0
  for (const entry of listed) {
    bytes += Canonical.utf8Length(Canonical.stringify(entry)) + 1
    nodes += Canonical.measure(entry).nodes
    if (bytes > Limits.MAX_PROJECTION_BYTES || nodes > Limits.MAX_PROJECTION_NODES) break
    count++
  }
  return count
}

const tooMany = (displayPath: string, listed: ReadonlyArray<Entry>): ToolFailure =>
  failure(
    `${displayPath}: has ${listed.length} entries; one list_files result holds only the first ${fitting(listed)} ` +
      `(at most ${Limits.MAX_PROJECTION_NODES} JSON values and ${Limits.MAX_PROJECTION_BYTES / 1024} KiB); ` +
      "list a subdirectory, or find what you need with search_text",
  )
