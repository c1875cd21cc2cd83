/**
 * The workspace (docs/architecture.md §7, docs/cli.md §10.1): `open(root)` gives the canonical root (realpath; it must be an
 * existing directory) and its identity `"workspace:v1:" + uuid`, read from the `.maka-workspace.json`
 * marker (`{"uuid": "<uuid>"}`), which is created with a fresh UUIDv4 when absent.
 */
import * as fsSync from "node:fs"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { Configuration } from "@maka/facts"
import { Effect, Option, Result, Schema } from "effect"
import { defaults } from "./Defaults.ts"
import { Ids } from "./Ids.ts"
import { fsReason, tryFs, tryFsSync, type FsError } from "./internal/fs.ts"
import { workspaceInvalid, type ToolError } from "./ToolError.ts"

export interface Workspace {
  /** The canonical absolute root: `configuration.cwd`. */
  readonly root: string
  /** `"workspace:v1:" + uuid`: `configuration.workspaceIdentity`. */
  readonly identity: string
  /** The marker's UUID in its exact spelling. */
  readonly uuid: string
}

/** The marker's closed shape: exactly `{"uuid": "<RFC 4122 variant UUID, version 1-8>"}`. */
export const Marker = Schema.Struct({
  uuid: Schema.String.check(Schema.isPattern(Configuration.WORKSPACE_UUID_PATTERN)),
})
export type Marker = typeof Marker.Type

const decodeMarker = Schema.decodeUnknownResult(Marker)

/** The marker file's path under a canonical root. */
export const markerPath = (root: string): string => path.join(root, defaults.workspaceMarker)

/** The marker file's text for `uuid`. */
export const markerText = (uuid: string): string => `${JSON.stringify({ uuid })}\n`

/** A failed file operation on `where`; the error's message names the path once (`workspace <where>: <reason>`). */
const fsFailure = (where: string) => (error: FsError) => workspaceInvalid(where, fsReason(error))

/** Parses and validates a marker's text; a corrupt marker is a clear error. */
export const parseMarker = (file: string, text: string): Result.Result<Marker, ToolError> => {
  const parsed = Result.try(() => JSON.parse(text) as unknown)
  if (Result.isFailure(parsed)) {
    return Result.fail(workspaceInvalid(file, `workspace marker is not valid JSON; expected {"uuid": "<uuid>"}`))
  }
  const decoded = decodeMarker(parsed.success, { onExcessProperty: "error" })
  return Result.mapError(decoded, (error) =>
    workspaceInvalid(file, `workspace marker must be exactly {"uuid": "<uuid>"}: ${error.message}`),
  )
}

/** The identity of a marker file's contents as `lstat` gives it: the same file, not changed since. */
const versionOf = (stat: fsSync.BigIntStats): string => `${stat.dev}:${stat.ino}:${stat.size}:${stat.mtimeNs}:${stat.ctimeNs}`

/** How many markers' parsed contents are kept, by path; the least recently read goes first. */
const KEPT_MARKERS = 64

/** The largest marker read: the one maka writes is about 60 bytes. */
const MAX_MARKER_BYTES = 4_096

/**
 * Markers read before, with the version of the file they were read from: a start that finds the
 * same file unchanged (device, inode, size and both nanosecond times) takes the parsed marker
 * instead of reading and parsing it again. Any write to the file, or a new file in its place, changes
 * its version and it is read again (on a file system whose times are coarser than a rewrite in place
 * to the same size, such a rewrite is seen from the next tick of its clock).
 */
const keptMarkers = new Map<string, { readonly version: string; readonly marker: Marker }>()

const keepMarker = (file: string, version: string, marker: Marker): void => {
  keptMarkers.delete(file)
  keptMarkers.set(file, { version, marker })
  if (keptMarkers.size > KEPT_MARKERS) {
    const oldest = keptMarkers.keys().next()
    if (oldest.done !== true) keptMarkers.delete(oldest.value)
  }
}

/**
 * Reads the marker when present; anything other than a regular file is refused. The look-ups of an
 * existing workspace are synchronous: every run's start opens its workspace.
 */
const readMarker = (file: string): Effect.Effect<Option.Option<Marker>, ToolError> =>
  tryFsSync(() => fsSync.lstatSync(file, { bigint: true })).pipe(
    Effect.map(Option.some),
    Effect.catchIf(
      (error) => error.code === "ENOENT",
      () => Effect.succeedNone,
    ),
    Effect.mapError(fsFailure(file)),
    Effect.flatMap((stat) => {
      if (Option.isNone(stat)) return Effect.succeedNone
      if (!stat.value.isFile()) return Effect.fail(workspaceInvalid(file, "workspace marker is not a regular file"))
      // A marker is a line of JSON: one of megabytes is no marker, and is never read whole.
      if (stat.value.size > BigInt(MAX_MARKER_BYTES)) {
        return Effect.fail(workspaceInvalid(file, `workspace marker is ${stat.value.size} bytes; a marker holds at most ${MAX_MARKER_BYTES}`))
      }
      const version = versionOf(stat.value)
      const kept = keptMarkers.get(file)
      if (kept !== undefined && kept.version === version) {
        keepMarker(file, version, kept.marker)
        return Effect.succeed(Option.some(kept.marker))
      }
      return tryFsSync(() => fsSync.readFileSync(file, "utf8")).pipe(
        Effect.mapError(fsFailure(file)),
        Effect.flatMap((text) => Effect.fromResult(parseMarker(file, text))),
        Effect.tap((marker) => Effect.sync(() => keepMarker(file, version, marker))),
        Effect.map(Option.some),
      )
    }),
  )

/**
 * Creates the marker without ever replacing one: the text goes to a temporary file that is then
 * hard-linked into place (atomic, fails if the marker exists), so a concurrent `open` that won the
 * race is read back instead, and a crash never leaves a half-written marker.
 */
const createMarker = (root: string, file: string): Effect.Effect<Marker, ToolError, Ids> =>
  Effect.gen(function* () {
    const uuid = yield* Ids.use((ids) => ids.next)
    const temporary = path.join(root, `${defaults.workspaceMarker}.${uuid}.tmp`)
    const linked = yield* tryFs(() => fs.writeFile(temporary, markerText(uuid), { flag: "wx" })).pipe(
      Effect.andThen(tryFs(() => fs.link(temporary, file))),
      Effect.as(true),
      Effect.catchIf(
        (error) => error.code === "EEXIST",
        () => Effect.succeed(false),
      ),
      // The marker is created in the root: a failure here is a root maka cannot write to.
      Effect.mapError((error) =>
        workspaceInvalid(file, `cannot create the workspace marker: ${fsReason(error)}; the workspace must be a folder maka can write to`),
      ),
      Effect.ensuring(Effect.ignore(tryFs(() => fs.rm(temporary, { force: true })))),
    )
    if (linked) return { uuid }
    const raced = yield* readMarker(file)
    return Option.isSome(raced) ? raced.value : yield* Effect.fail(workspaceInvalid(file, "workspace marker vanished"))
  })

/** Opens the workspace at `root` (resolved against the current directory). */
export const open = (root: string): Effect.Effect<Workspace, ToolError, Ids> =>
  Effect.gen(function* () {
    if (typeof root !== "string") return yield* Effect.fail(workspaceInvalid(`(${typeof root})`, "the workspace root must be a path (a string)"))
    const requested = path.resolve(root)
    const canonical = yield* tryFsSync(() => fsSync.realpathSync.native(requested)).pipe(Effect.mapError(fsFailure(requested)))
    const stat = yield* tryFsSync(() => fsSync.statSync(canonical)).pipe(Effect.mapError(fsFailure(canonical)))
    if (!stat.isDirectory()) return yield* Effect.fail(workspaceInvalid(canonical, "workspace root is not a directory"))
    const file = markerPath(canonical)
    const existing = yield* readMarker(file)
    const marker = Option.isSome(existing) ? existing.value : yield* createMarker(canonical, file)
    return {
      root: canonical,
      identity: Configuration.workspaceIdentity(marker.uuid),
      uuid: marker.uuid,
    } satisfies Workspace
  })
