/**
 * Opening beneath the workspace root without following symbolic links at open time. A path that was
 * checked (its real path lies inside the root) is opened one component at a time, each relative to
 * the directory descriptor opened before it, with `O_NOFOLLOW`: a component swapped for a symbolic
 * link after the check fails to open (`ELOOP`) instead of leading outside. On Linux the kernel
 * resolves a name relative to an open directory through `/proc/self/fd/N/name`; elsewhere the
 * component is opened by path and then verified: every component of the path is `lstat`ed again
 * (none may be a link) and the last must be the very file opened (same device and inode).
 * `O_NONBLOCK` keeps a FIFO from blocking the open; only regular files are read or written. A file
 * is replaced by writing a new one beside it (created with `O_EXCL`, so never through a link) and
 * renaming it over the old name, both names relative to the same directory descriptor.
 */
import { constants, existsSync, type Stats } from "node:fs"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { Canonical } from "@maka/facts"
import { Effect, Option, type Scope } from "effect"
import type { ToolFailure } from "../Tool.ts"
import { failure, fsFailure } from "./confine.ts"
import { fsReason, tryFs, type FsError } from "./fs.ts"

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_DIRECTORY } = constants

let descriptorPaths: boolean | undefined

/**
 * Whether names can be resolved relative to an open directory descriptor (Linux `/proc`). Looked at
 * the first time a tool resolves a name, not when the module loads: a process that may not read
 * `/proc/self/fd` (Node's permission model without it in `--allow-fs-read`, where the look throws)
 * resolves names by path, as where there is no `/proc`.
 */
const hasDescriptorPaths = (): boolean => {
  if (descriptorPaths === undefined) {
    try {
      descriptorPaths = process.platform === "linux" && existsSync("/proc/self/fd")
    } catch {
      descriptorPaths = false
    }
  }
  return descriptorPaths
}

/** An open directory inside the workspace: its descriptor and the real path it was opened as. */
export interface Directory {
  readonly handle: fs.FileHandle
  readonly path: string
}

/** An open file with its `fstat`. */
export interface Opened {
  readonly handle: fs.FileHandle
  readonly path: string
  readonly stat: Stats
}

/**
 * A directory entry's name: a string, or the bytes the file system holds when they are not valid
 * UTF-8 (no string names such an entry: decoding replaces the bytes it cannot read).
 */
export type EntryName = string | Buffer

/** `name` as text, for display: bytes that are not UTF-8 read as U+FFFD. */
export const nameText = (name: EntryName): string => (typeof name === "string" ? name : name.toString("utf8"))

/** The name of a listed entry: its string when its bytes are UTF-8, else the bytes themselves. */
export const entryName = (bytes: Buffer): EntryName => {
  const text = bytes.toString("utf8")
  return Buffer.from(text).equals(bytes) ? text : bytes
}

/** The path through which `name` is opened relative to `directory`. */
const at = (directory: Directory, name: EntryName): string | Buffer => {
  const base = hasDescriptorPaths() ? `/proc/self/fd/${directory.handle.fd}` : directory.path
  return typeof name === "string"
    ? hasDescriptorPaths()
      ? `${base}/${name}`
      : path.join(base, name)
    : Buffer.concat([Buffer.from(`${base}${path.sep}`), name])
}

/** The path a directory's own entries are listed through. */
const listPath = (directory: Directory): string =>
  hasDescriptorPaths() ? `/proc/self/fd/${directory.handle.fd}` : directory.path

const changed = (display: string): ToolFailure =>
  failure(`${display}: the path changed while it was opened (a symbolic link appeared); try again`)

/** An open error as a `ToolFailure`: a link met at open time means the path changed under us. */
const openFailure = (display: string) => (error: FsError): ToolFailure =>
  error.code === "ELOOP"
    ? changed(display)
    : error.code === "ENXIO"
      ? failure(`${display}: is not a regular file`)
      : fsFailure(display)(error)

/** A file handle closed with the scope; the open's error as it is, for callers that expect one. */
const acquireRaw = (open: () => Promise<fs.FileHandle>): Effect.Effect<fs.FileHandle, FsError, Scope.Scope> =>
  Effect.acquireRelease(tryFs(open), (handle) => Effect.ignore(tryFs(() => handle.close())))

const acquire = (open: () => Promise<fs.FileHandle>, display: string): Effect.Effect<fs.FileHandle, ToolFailure, Scope.Scope> =>
  acquireRaw(open).pipe(Effect.mapError(openFailure(display)))

/**
 * Where descriptor paths are not available: checks that `real` (below `root`) still has no link in
 * any component and names the file `stat` describes.
 */
const verify = (root: string, real: string, stat: Stats, display: string): Effect.Effect<void, ToolFailure> => {
  if (hasDescriptorPaths()) return Effect.void
  return Effect.gen(function* () {
    let current = root
    const names = path.relative(root, real).split(path.sep).filter((name) => name.length > 0)
    for (const name of names) {
      current = path.join(current, name)
      const entry = yield* tryFs(() => fs.lstat(current)).pipe(Effect.mapError(fsFailure(display)))
      if (entry.isSymbolicLink()) return yield* Effect.fail(changed(display))
      if (current === real && (entry.dev !== stat.dev || entry.ino !== stat.ino)) return yield* Effect.fail(changed(display))
    }
  })
}

/** The workspace root, opened as a directory. */
export const openRoot = (root: string): Effect.Effect<Directory, ToolFailure, Scope.Scope> =>
  Effect.map(acquire(() => fs.open(root, O_RDONLY | O_DIRECTORY), "workspace root"), (handle) => ({ handle, path: root }))

/** The directory `name` inside `directory`, never through a link. */
export const openChildDirectory = (
  root: string,
  directory: Directory,
  name: EntryName,
  display: string,
): Effect.Effect<Directory, ToolFailure, Scope.Scope> =>
  Effect.gen(function* () {
    const handle = yield* acquire(() => fs.open(at(directory, name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK), display)
    const opened = { handle, path: path.join(directory.path, nameText(name)) }
    if (!hasDescriptorPaths()) {
      const stat = yield* tryFs(() => handle.stat()).pipe(Effect.mapError(fsFailure(display)))
      yield* verify(root, opened.path, stat, display)
    }
    return opened
  })

/** The entry `name` inside `directory`, never through a link, with its `fstat`. */
export const openChild = (
  root: string,
  directory: Directory,
  name: EntryName,
  flags: number,
  display: string,
): Effect.Effect<Opened, ToolFailure, Scope.Scope> =>
  Effect.gen(function* () {
    const handle = yield* acquire(() => fs.open(at(directory, name), flags | O_NOFOLLOW | O_NONBLOCK, 0o666), display)
    const stat = yield* tryFs(() => handle.stat()).pipe(Effect.mapError(fsFailure(display)))
    const file = path.join(directory.path, nameText(name))
    yield* verify(root, file, stat, display)
    return { handle, path: file, stat }
  })

/** The directory at `real` (a checked real path under `root`), opened component by component. */
export const openDirectory = (root: string, real: string, display: string): Effect.Effect<Directory, ToolFailure, Scope.Scope> =>
  Effect.gen(function* () {
    let directory = yield* openRoot(root)
    for (const name of path.relative(root, real).split(path.sep).filter((part) => part.length > 0)) {
      directory = yield* openChildDirectory(root, directory, name, display)
    }
    return directory
  })

/** The entry at `real` (a checked real path under `root`, not the root itself), opened for reading. */
export const openForReading = (root: string, real: string, display: string): Effect.Effect<Opened, ToolFailure, Scope.Scope> =>
  Effect.gen(function* () {
    if (real === root) {
      const directory = yield* openRoot(root)
      const stat = yield* tryFs(() => directory.handle.stat()).pipe(Effect.mapError(fsFailure(display)))
      return { handle: directory.handle, path: root, stat }
    }
    const parent = yield* openDirectory(root, path.dirname(real), display)
    return yield* openChild(root, parent, path.basename(real), O_RDONLY, display)
  })

/** `name` inside `directory`, created when missing, then opened as a directory: never through a link. */
export const makeChildDirectory = (
  root: string,
  directory: Directory,
  name: string,
  display: string,
): Effect.Effect<Directory, ToolFailure, Scope.Scope> =>
  Effect.gen(function* () {
    yield* tryFs(() => fs.mkdir(at(directory, name))).pipe(
      Effect.catchIf(
        (error) => error.code === "EEXIST",
        () => Effect.void,
      ),
      Effect.mapError(fsFailure(display)),
    )
    return yield* openChildDirectory(root, directory, name, display)
  })

/**
 * The existing file `name` inside `directory`, opened for writing (never written through, never
 * truncated) so that its permission to be written and its identity are those of a descriptor;
 * `None` when there is no such entry.
 */
export const openExistingForWriting = (
  root: string,
  directory: Directory,
  name: string,
  display: string,
): Effect.Effect<Option.Option<Opened>, ToolFailure, Scope.Scope> =>
  Effect.gen(function* () {
    const handle = yield* acquireRaw(() => fs.open(at(directory, name), O_WRONLY | O_NOFOLLOW | O_NONBLOCK)).pipe(
      Effect.map(Option.some),
      Effect.catchIf(
        (error) => error.code === "ENOENT",
        () => Effect.succeedNone,
      ),
      Effect.mapError(openFailure(display)),
    )
    if (Option.isNone(handle)) return Option.none()
    const stat = yield* tryFs(() => handle.value.stat()).pipe(Effect.mapError(fsFailure(display)))
    const file = path.join(directory.path, name)
    yield* verify(root, file, stat, display)
    return Option.some({ handle: handle.value, path: file, stat })
  })

/** Temporary files made by this process so far: with its id, a name no other writer picks. */
let temporaries = 0

/** A name for a temporary beside `name`: hidden, after it (cut to leave room), and this writer's own. */
const temporaryName = (name: string): string =>
  `.${Canonical.truncateUtf8(name, 200)}.${process.pid}-${++temporaries}.tmp`

/**
 * A new empty file beside `name` in `directory`, created with `O_EXCL` (never an existing entry or
 * a link) and permission bits `mode` (less the umask), open for writing, with its name.
 */
export const createTemporary = (
  root: string,
  directory: Directory,
  name: string,
  mode: number,
  display: string,
): Effect.Effect<Opened & { readonly name: string }, ToolFailure, Scope.Scope> =>
  Effect.gen(function* () {
    const flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK
    const open = (attempt: number): Effect.Effect<{ readonly handle: fs.FileHandle; readonly name: string }, FsError, Scope.Scope> => {
      const temporary = temporaryName(name)
      return acquireRaw(() => fs.open(at(directory, temporary), flags, mode)).pipe(
        Effect.map((handle) => ({ handle, name: temporary })),
        // A name left by an earlier process with the same id: the next one.
        Effect.catchIf(
          (error) => error.code === "EEXIST" && attempt < 8,
          () => open(attempt + 1),
        ),
      )
    }
    const created = yield* open(0).pipe(
      Effect.mapError((error) =>
        // The file itself may be writable: it is replaced through a new file beside it.
        error.code === "EACCES" || error.code === "EROFS"
          ? failure(`${display}: ${fsReason(error)}: a file is written through a new file beside it, which needs its folder writable`)
          : openFailure(display)(error),
      ),
    )
    const stat = yield* tryFs(() => created.handle.stat()).pipe(Effect.mapError(fsFailure(display)))
    const file = path.join(directory.path, created.name)
    yield* verify(root, file, stat, display)
    return { handle: created.handle, path: file, stat, name: created.name }
  })

/** Renames `from` over `to`, both inside `directory`; `to` is replaced whatever it is, never followed. */
export const renameChild = (directory: Directory, from: string, to: string) =>
  tryFs(() => fs.rename(at(directory, from), at(directory, to)))

/** Removes the file `name` inside `directory`. */
export const removeChild = (directory: Directory, name: string) => tryFs(() => fs.unlink(at(directory, name)))

/** `lstat` of `name` inside `directory`. */
export const lstatChild = (directory: Directory, name: string) => tryFs(() => fs.lstat(at(directory, name)))

/**
 * The entries of an open directory with their names as the bytes the file system holds: a name that
 * is not valid UTF-8 has no string that finds it again (decoding it replaces the bytes it cannot read).
 */
export const rawEntries = (directory: Directory, display: string) =>
  tryFs(() => fs.readdir(listPath(directory), { withFileTypes: true, encoding: "buffer" })).pipe(Effect.mapError(fsFailure(display)))

/** `lstat` of the entry named by the bytes `name` inside `directory`. */
export const lstatRawChild = (directory: Directory, name: Buffer) => tryFs(() => fs.lstat(at(directory, name)))
