/**
 * `write_file`: creates or overwrites one file under the workspace root, creating its parent
 * directories. Every directory on the way and the file itself are opened relative to the descriptor
 * of the directory before them without following links (`beneath.ts`), so a path swapped for a link
 * after it was checked writes nothing anywhere; only a regular file is written (a FIFO, a socket or
 * a device is refused without blocking). The workspace marker is never written, whatever path (a
 * symlink, a hard link) leads to it, nor a protected file (an event log in the workspace) or a file
 * beside it whose name begins with its name.
 *
 * An existing file is replaced, never rewritten in place: the content goes to a new file beside it
 * (with the old file's permission bits), which is then renamed over it, so a write that fails part
 * way (a full disk, a file-size limit) leaves the old content as it was and no temporary behind.
 * The new file is the writer's; another hard link to the old one keeps the old content.
 */
import * as fs from "node:fs/promises"
import * as path from "node:path"
import type { ToolCall } from "@maka/facts"
import { Effect, Option, type Scope } from "effect"
import { defaults } from "../Defaults.ts"
import type { ToolFailure } from "../Tool.ts"
import {
  createTemporary,
  type Directory,
  lstatChild,
  makeChildDirectory,
  openDirectory,
  openExistingForWriting,
  removeChild,
  renameChild,
} from "./beneath.ts"
import { canonicalRoot, directoryEnding, existingAncestor, failure, fsFailure, inside, isInside, lexical, notAFile, realOrPlanned } from "./confine.ts"
import { tryFs } from "./fs.ts"

export interface WriteFileInput {
  readonly path: string
  readonly content: string
}

/**
 * The directory the file goes in, opened beneath the root, its missing parts created on the way; a
 * part `refuses` is not made (a folder named like a sidecar of the event log, `events.sqlite-journal`,
 * which SQLite would then fail to create: the log could not be opened).
 */
const parentOf = (
  root: string,
  resolved: string,
  display: string,
  refuses: (directory: string, name: string) => ToolFailure | undefined,
): Effect.Effect<Directory, ToolFailure, Scope.Scope> =>
  Effect.gen(function* () {
    const ancestor = yield* existingAncestor(root, resolved)
    yield* inside(root, display, ancestor.real)
    let directory = yield* openDirectory(root, ancestor.real, display)
    const missing = path.relative(ancestor.lexical, path.dirname(resolved)).split(path.sep).filter((name) => name.length > 0)
    for (const name of missing) {
      const refusal = refuses(directory.path, name)
      if (refusal !== undefined) return yield* Effect.fail(refusal)
      directory = yield* makeChildDirectory(root, directory, name, display)
    }
    return directory
  })

/**
 * Where the write lands: `name` in `directory`, or, when that entry is a link to a file inside the
 * root, the link's target (its real parent opened beneath the root again).
 */
const landing = (
  root: string,
  directory: Directory,
  name: string,
  display: string,
): Effect.Effect<{ readonly directory: Directory; readonly name: string }, ToolFailure, Scope.Scope> =>
  Effect.gen(function* () {
    const entry = yield* lstatChild(directory, name).pipe(
      Effect.map(Option.some),
      Effect.catchIf(
        (error) => error.code === "ENOENT",
        () => Effect.succeedNone,
      ),
      Effect.mapError(fsFailure(display)),
    )
    if (Option.isNone(entry) || !entry.value.isSymbolicLink()) return { directory, name }
    const real = yield* tryFs(() => fs.realpath(path.join(directory.path, name))).pipe(
      Effect.mapError((error) =>
        error.code === "ENOENT" ? failure(`${display}: is a symbolic link whose target does not exist`) : fsFailure(display)(error),
      ),
    )
    yield* inside(root, display, real)
    return { directory: yield* openDirectory(root, path.dirname(real), display), name: path.basename(real) }
  })

/**
 * A protected file where paths are compared: its real directory (or, for a directory not made yet,
 * the real path of its nearest existing folder with the rest of its path: a write that makes the
 * missing folders lands there) and its name, and the identity of the file when it exists, so that a
 * hard link to it is refused as well.
 */
interface Protected {
  readonly directory: string
  readonly name: string
  readonly stat: { readonly dev: number; readonly ino: number } | undefined
}

const protectedAt = (file: string): Effect.Effect<Protected | undefined> =>
  Effect.gen(function* () {
    const directory = yield* realOrPlanned(path.dirname(file))
    if (directory === undefined) return undefined
    const stat = yield* tryFs(() => fs.stat(path.join(directory, path.basename(file)))).pipe(Effect.option)
    return { directory, name: path.basename(file), stat: Option.getOrUndefined(stat) }
  })

/**
 * A protected file under its own name and, when that is a symbolic link, under its target's: the
 * store opens the target, whose sidecars (`-wal`, the writer's lock) are named after it.
 */
const protectedOf = (given: string): Effect.Effect<ReadonlyArray<Protected>> =>
  Effect.gen(function* () {
    // Absolute: `Builtins.writeFile` resolved a relative one when the set was built.
    const file = path.resolve(given)
    const target = yield* tryFs(() => fs.realpath(file)).pipe(Effect.option)
    const names = Option.isSome(target) && target.value !== file ? [file, target.value] : [file]
    return (yield* Effect.forEach(names, protectedAt)).filter((entry) => entry !== undefined)
  })

/** Whether `name` in the real `directory` is a protected file or one beside it named after it. */
const isGuarded = (guarded: ReadonlyArray<Protected>, directory: string | undefined, name: string): boolean =>
  guarded.some((file) => file.directory === directory && name.startsWith(file.name))

const sameFile = (stat: { readonly dev: number; readonly ino: number } | undefined, other: { readonly dev: number; readonly ino: number }) =>
  stat !== undefined && stat.dev === other.dev && stat.ino === other.ino

/** The permission bits a replacement keeps (set-id bits are dropped, as a write in place drops them). */
const PERMISSION_BITS = 0o777

/**
 * Writes `content` to a new file beside `name` in `directory` and renames it over `name`: with
 * `mode` (the permission bits of the file it replaces) or, for a new file, the default less the
 * umask. On any failure, or an interruption, the new file is removed and `name` is left as it was.
 */
const replace = (
  root: string,
  directory: Directory,
  name: string,
  content: string,
  mode: number | undefined,
  display: string,
): Effect.Effect<void, ToolFailure, Scope.Scope> =>
  Effect.gen(function* () {
    // Created no more permissive than the file it replaces (the umask may only take bits away).
    const temporary = yield* createTemporary(root, directory, name, mode ?? 0o666, display)
    yield* tryFs(() => temporary.handle.writeFile(content, { encoding: "utf8" })).pipe(
      Effect.andThen(mode === undefined ? Effect.void : tryFs(() => temporary.handle.chmod(mode))),
      // On disk before the rename: a crash after it never leaves an empty file where the old one was.
      Effect.andThen(tryFs(() => temporary.handle.datasync())),
      Effect.andThen(renameChild(directory, temporary.name, name)),
      Effect.mapError(fsFailure(display)),
      Effect.onError(() => Effect.ignore(removeChild(directory, temporary.name))),
    )
  })

export const writeFile = (
  root: string,
  input: WriteFileInput,
  protectedFiles: ReadonlyArray<string> = [],
): Effect.Effect<ToolCall.ToolOutput, ToolFailure> =>
  Effect.gen(function* () {
    const canonical = yield* canonicalRoot(root)
    const marker = path.join(canonical, defaults.workspaceMarker)
    const refused = failure(`${input.path}: the workspace marker ${defaults.workspaceMarker} is never written`)
    const refusedProtected = failure(`${input.path}: a file of the event log, never written by a tool`)
    const guarded = (yield* Effect.forEach(protectedFiles, protectedOf)).flat()
    const resolved = yield* lexical(canonical, input.path)
    if (resolved === canonical) return yield* Effect.fail(failure(`${input.path}: is the workspace root`))
    const ending = directoryEnding(input.path)
    if (ending !== undefined) return yield* Effect.fail(notAFile(input.path, ending))
    // Refused before a missing folder on the way is made (checked again where the write lands), as
    // is a folder it would make named like one (`events.sqlite-journal/x`: SQLite could then not make
    // its journal); an existing folder of such a name is no file of the log. A path that leads out is
    // left to be refused as outside, never told apart as the log's.
    if (guarded.length > 0) {
      const planned = yield* realOrPlanned(path.dirname(resolved))
      if (planned !== undefined && isInside(canonical, planned)) {
        if (isGuarded(guarded, planned, path.basename(resolved))) return yield* Effect.fail(refusedProtected)
        const existing = yield* Effect.option(existingAncestor(canonical, resolved))
        if (Option.isSome(existing) && isInside(existing.value.real, planned)) {
          let parent = existing.value.real
          for (const name of path.relative(parent, planned).split(path.sep).filter((part) => part.length > 0)) {
            if (isGuarded(guarded, parent, name)) return yield* Effect.fail(refusedProtected)
            parent = path.join(parent, name)
          }
        }
      }
    }
    yield* Effect.scoped(
      Effect.gen(function* () {
        const parent = yield* parentOf(canonical, resolved, input.path, (directory, name) =>
          isGuarded(guarded, directory, name) ? refusedProtected : undefined,
        )
        const target = yield* landing(canonical, parent, path.basename(resolved), input.path)
        if (path.join(target.directory.path, target.name) === marker) return yield* Effect.fail(refused)
        if (isGuarded(guarded, target.directory.path, target.name)) return yield* Effect.fail(refusedProtected)
        // The file it replaces, opened for writing as before a write in place: its permission and
        // its identity (a hard link to the marker or a protected file) are checked on a descriptor.
        const existing = yield* openExistingForWriting(canonical, target.directory, target.name, input.path)
        if (Option.isSome(existing)) {
          const stat = existing.value.stat
          if (stat.isDirectory()) return yield* Effect.fail(failure(`${input.path}: is a directory`))
          if (!stat.isFile()) return yield* Effect.fail(failure(`${input.path}: is not a regular file`))
          const markerStat = yield* tryFs(() => fs.lstat(marker)).pipe(Effect.option)
          if (Option.isSome(markerStat) && sameFile(markerStat.value, stat)) return yield* Effect.fail(refused)
          if (guarded.some((file) => sameFile(file.stat, stat))) return yield* Effect.fail(refusedProtected)
        }
        const mode = Option.isSome(existing) ? existing.value.stat.mode & PERMISSION_BITS : undefined
        yield* replace(canonical, target.directory, target.name, input.content, mode, input.path)
      }),
    )
    const bytes = Buffer.byteLength(input.content, "utf8")
    return { format: "text", value: `Wrote ${bytes} bytes to ${input.path}` } satisfies ToolCall.ToolOutput
  })
