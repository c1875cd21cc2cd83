/**
 * Confinement of builtin paths to the workspace root: a path is relative, has no NUL, stays under
 * the root lexically (`..` may not climb out), and its real path (symlinks resolved) stays under the
 * canonical root too. Every refusal is a `ToolFailure` naming the path as the model wrote it.
 */
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { Effect, Option } from "effect"
import { ToolFailure } from "../Tool.ts"
import { describeFsError, tryFs, type FsError } from "./fs.ts"

export const failure = (message: string): ToolFailure => new ToolFailure({ message })

export const fsFailure = (displayPath: string) => (error: FsError) => failure(describeFsError(displayPath, error))

/** Whether `candidate` (absolute, normalised) is `root` or below it. */
export const isInside = (root: string, candidate: string): boolean =>
  root === path.sep || candidate === root || candidate.startsWith(root + path.sep)

/** The canonical root, read at each call so a root that moved or vanished is caught. */
export const canonicalRoot = (root: string): Effect.Effect<string, ToolFailure> =>
  tryFs(() => fs.realpath(root)).pipe(Effect.mapError((error) => failure(describeFsError("workspace root", error))))

/** The lexical absolute path of `input` under `root`, or why it is refused. */
export const lexical = (root: string, input: string): Effect.Effect<string, ToolFailure> => {
  if (input.length === 0) return Effect.fail(failure("path is empty; use \".\" for the workspace root"))
  if (input.includes("\u0000")) return Effect.fail(failure("path contains a NUL character"))
  if (path.isAbsolute(input)) {
    return Effect.fail(failure(`${input}: absolute paths are refused; paths are relative to the workspace root`))
  }
  const resolved = path.resolve(root, input)
  return isInside(root, resolved)
    ? Effect.succeed(resolved)
    : Effect.fail(failure(`${input}: path is outside the workspace`))
}

/**
 * The ending of `input` that makes it name only a directory, when it has one: a final `/`, or a last
 * component `.` or `..`. Resolving a path drops that ending (`notes.txt/` resolves as `notes.txt`),
 * so a tool that opens a file asks this of the path the model wrote.
 */
export const directoryEnding = (input: string): string | undefined => {
  if (input.endsWith("/")) return "/"
  const slash = input.lastIndexOf("/")
  const last = input.slice(slash + 1)
  return last === "." || last === ".." ? input.slice(Math.max(0, slash)) : undefined
}

/** The refusal of a file tool given a path that names a directory: why, and what to write instead. */
export const notAFile = (input: string, ending: string): ToolFailure =>
  failure(`${input}: is not a file (the path ends with ${ending}, which names a directory); give the file's path without it`)

const checkReal = (root: string, input: string, real: string): Effect.Effect<string, ToolFailure> =>
  isInside(root, real) ? Effect.succeed(real) : Effect.fail(failure(`${input}: path resolves outside the workspace`))

/**
 * The real path of an existing `input`, under the root; follows symlinks that stay inside. A path
 * that does not resolve through a link that leads outside is refused as outside, never with the
 * outside's own answer (whether a file there exists or is a folder is not the workspace's to tell).
 */
export const existing = (root: string, input: string): Effect.Effect<string, ToolFailure> =>
  Effect.gen(function* () {
    const resolved = yield* lexical(root, input)
    const real = yield* tryFs(() => fs.realpath(resolved)).pipe(
      Effect.catch((error) =>
        Effect.flatMap(leadsOutside(root, resolved), (outside) =>
          Effect.fail(outside ? failure(`${input}: path resolves outside the workspace`) : fsFailure(input)(error)),
        ),
      ),
    )
    return yield* checkReal(root, input, real)
  })

/**
 * Whether `absolute`, which does not resolve, leads out of `root`: the nearest of it and its
 * ancestors that exists is a link whose target (resolved as far as it exists) leaves the root, or
 * an entry whose real path does. A dangling link to outside leads out as a link to a file there does.
 */
const leadsOutside = (root: string, absolute: string): Effect.Effect<boolean> => {
  const walk = (current: string): Effect.Effect<boolean> => {
    if (current === root || !isInside(root, current)) return Effect.succeed(false)
    return Effect.flatMap(Effect.option(tryFs(() => fs.lstat(current))), (stat) => {
      if (Option.isNone(stat)) return walk(path.dirname(current))
      if (!stat.value.isSymbolicLink()) {
        return Effect.map(Effect.option(tryFs(() => fs.realpath(current))), (real) => Option.isSome(real) && !isInside(root, real.value))
      }
      return Effect.flatMap(
        Effect.all([Effect.option(tryFs(() => fs.realpath(path.dirname(current)))), Effect.option(tryFs(() => fs.readlink(current)))]),
        ([parent, target]) => {
          if (Option.isNone(parent) || Option.isNone(target)) return walk(path.dirname(current))
          const resolved = path.resolve(parent.value, target.value)
          return Effect.map(realOrPlanned(resolved), (planned) => !isInside(root, planned ?? resolved))
        },
      )
    })
  }
  return walk(absolute)
}

/**
 * The real path of the absolute `directory`, or of its nearest existing ancestor joined with the
 * rest of it when it does not exist; `undefined` when no ancestor can be resolved.
 */
export const realOrPlanned = (directory: string): Effect.Effect<string | undefined> =>
  Effect.flatMap(Effect.option(tryFs(() => fs.realpath(directory))), (real) => {
    if (Option.isSome(real)) return Effect.succeed(real.value)
    const parent = path.dirname(directory)
    if (parent === directory) return Effect.succeed(undefined)
    return Effect.map(realOrPlanned(parent), (planned) => (planned === undefined ? undefined : path.join(planned, path.basename(directory))))
  })

/** The deepest existing ancestor of `absolute` (`root` exists, so the walk ends there): as written and its real path. */
export const existingAncestor = (
  root: string,
  absolute: string,
): Effect.Effect<{ readonly lexical: string; readonly real: string }, ToolFailure> =>
  Effect.gen(function* () {
    let current = path.dirname(absolute)
    while (true) {
      const real = yield* tryFs(() => fs.realpath(current)).pipe(
        Effect.map(Option.some),
        Effect.catchIf(
          (error) => error.code === "ENOENT" && current !== root,
          () => Effect.succeedNone,
        ),
        Effect.mapError(fsFailure(path.relative(root, current) || ".")),
      )
      if (Option.isSome(real)) return { lexical: current, real: real.value }
      current = path.dirname(current)
    }
  })

/** `real` when it lies under `root`, else the refusal naming `input`. */
export const inside = (root: string, input: string, real: string): Effect.Effect<string, ToolFailure> => checkReal(root, input, real)

/** A path relative to the root with `/` separators, for results the model reads. */
export const display = (root: string, absolute: string): string =>
  path.relative(root, absolute).split(path.sep).join("/") || "."
