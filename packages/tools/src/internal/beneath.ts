/**
 * Opening beneath the workspace root without following symbolic links at open time. A path that was
 * checked (its real path lies inside the root) is opened one component at a time, each relative to
 * the directory descriptor opened before it, with `O_NOFOLLOW`: a component swapped for a symbolic
 * link after the check fails to open (`ELOOP`) instead of leading outside. On Linux the kernel
 * resolves a name relative to an open directory through `/proc/self/fd/N/name`; elsewhere the
 * component is opened by path and then verified: every component of the path is `lstat`ed again
 * (none may be a link) and the last must be the very file opened (same device and inode).
 * `O_NONBLOCK` keeps a FIFO from blocking the open; only regular files are read or written.
 */
import { constants, existsSync, type Stats } from "node:fs"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { Effect, type Scope } from "effect"
import type { ToolFailure } from "../Tool.ts"
import { failure, fsFailure } from "./confine.ts"
import { tryFs, type FsError } from "./fs.ts"

const { O_RDONLY, O_WRONLY, O_CREAT, O_NOFOLLOW, O_NONBLOCK, O_DIRECTORY } = constants

/** Whether names can be resolved relative to an open directory descriptor (Linux `/proc`). */
const hasDescriptorPaths = process.platform === "linux" && existsSync("/proc/self/fd")

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
  const base = hasDescriptorPaths ? `/proc/self/fd/${directory.handle.fd}` : directory.path
  return typeof name === "string"
    ? hasDescriptorPaths
      ? `${base}/${name}`
      : path.join(base, name)
    : Buffer.concat([Buffer.from(`${base}${path.sep}`), name])
}

/** The path a directory's own entries are listed through. */
const listPath = (directory: Directory): string =>
  hasDescriptorPaths ? `/proc/self/fd/${directory.handle.fd}` : directory.path

const changed = (display: string): ToolFailure =>
  failure(`${display}: the path changed while it was opened (a symbolic link appeared); try again`)

/** An open error as a `ToolFailure`: a link met at open time means the path changed under us. */
const openFailure = (display: string) => (error: FsError): ToolFailure =>
  error.code === "ELOOP"
    ? changed(display)
    : error.code === "ENXIO"
      ? failure(`${display}: is not a regular file`)
      : fsFailure(display)(error)

const acquire = (open: () => Promise<fs.FileHandle>, display: string): Effect.Effect<fs.FileHandle, ToolFailure, Scope.Scope> =>
  Effect.acquireRelease(tryFs(open).pipe(Effect.mapError(openFailure(display))), (handle) =>
    Effect.ignore(tryFs(() => handle.close())),
  )

/**
 * Where descriptor paths are not available: checks that `real` (below `root`) still has no link in
 * any component and names the file `stat` describes.
 */
const verify = (root: string, real: string, stat: Stats, display: string): Effect.Effect<void, ToolFailure> => {
  if (hasDescriptorPaths) return Effect.void
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
    if (!hasDescriptorPaths) {
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

/** `name` inside `directory`, opened (created when missing) for writing: not truncated yet. */
export const openForWriting = (
  root: string,
  directory: Directory,
  name: string,
  display: string,
): Effect.Effect<Opened, ToolFailure, Scope.Scope> => openChild(root, directory, name, O_WRONLY | O_CREAT, display)

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
