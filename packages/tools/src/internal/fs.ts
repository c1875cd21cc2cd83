/**
 * The edge to `node:fs`: every call wrapped with `Effect.tryPromise` (or `Effect.try` for the few
 * synchronous ones), its rejection kept as an `FsError` carrying the errno code, so callers turn
 * expected errors into readable messages (a `ToolFailure` for tools, a `ToolError` for the
 * workspace) instead of defects.
 */
import { Data, Effect } from "effect"

export class FsError extends Data.TaggedError("FsError")<{ readonly code: string | undefined; readonly detail: string }> {}

const toFsError = (error: unknown): FsError => {
  const code =
    typeof error === "object" && error !== null && "code" in error && typeof error.code === "string" ? error.code : undefined
  const detail = error instanceof Error ? error.message : String(error)
  return new FsError({ code, detail })
}

export const tryFs = <A>(thunk: () => PromiseLike<A>): Effect.Effect<A, FsError> =>
  Effect.tryPromise({ try: () => Promise.resolve(thunk()), catch: toFsError })

/**
 * A synchronous `node:fs` call with the same `FsError`: for the few metadata look-ups of opening a
 * workspace, which each run's start pays (a call through the thread pool costs a round trip of the
 * event loop, several times the call's own time).
 */
export const tryFsSync = <A>(thunk: () => A): Effect.Effect<A, FsError> => Effect.try({ try: thunk, catch: toFsError })

/** Short readable reasons for the errno codes a model can act on. */
const REASONS: Readonly<Record<string, string>> = {
  ENOENT: "no such file or directory",
  ENOTDIR: "a component of the path is not a directory",
  EISDIR: "is a directory",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  ELOOP: "too many levels of symbolic links",
  ENAMETOOLONG: "file name too long",
  EEXIST: "already exists",
  ENOSPC: "no space left on device",
  EROFS: "read-only file system",
  EMFILE: "too many open files",
  ENOTEMPTY: "directory not empty",
  EBUSY: "resource busy",
}

/** What went wrong, in words, for an `FsError`: `permission denied`. */
export const fsReason = (error: FsError): string => (error.code !== undefined ? REASONS[error.code] : undefined) ?? error.detail

/** `"<path>: <reason>"` for an `FsError`. */
export const describeFsError = (displayPath: string, error: FsError): string => `${displayPath}: ${fsReason(error)}`
