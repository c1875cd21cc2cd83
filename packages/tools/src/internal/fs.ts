/**
 * The edge to `node:fs`: every call wrapped with `Effect.tryPromise` (or `Effect.try` for the few
 * synchronous ones), its rejection kept as an `FsError` carrying the errno code, so callers turn
 * expected errors into readable messages (a `ToolFailure` for tools, a `ToolError` for the
 * workspace) instead of defects.
 */
import { Data, Effect } from "effect"

/** `detail` is Node's message, for diagnosis only: it names paths and is never shown to a model. */
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
  EDQUOT: "disk quota exceeded",
  EFBIG: "file too large",
  EROFS: "read-only file system",
  EMFILE: "too many open files",
  ENFILE: "too many open files in the system",
  ENOTEMPTY: "directory not empty",
  EBUSY: "resource busy",
  ETXTBSY: "text file busy (a program running from it)",
  EIO: "input/output error",
  EXDEV: "cross-device link",
  EINVAL: "invalid argument",
  EAGAIN: "resource temporarily unavailable",
  EINTR: "interrupted system call",
  ENXIO: "no such device or address",
  ENODEV: "no such device",
  EMLINK: "too many links",
  EOVERFLOW: "value too large",
  ENOMEM: "out of memory",
  ESTALE: "stale file handle",
  ENOTSUP: "operation not supported",
  EOPNOTSUPP: "operation not supported",
  ENOSYS: "function not implemented",
}

/**
 * What went wrong, in words, for an `FsError`: `permission denied`; the bare code for one outside
 * the table. Never Node's own message, which names the path Node opened (a descriptor path such as
 * `/proc/self/fd/27/name`, or a real path the model never gave).
 */
export const fsReason = (error: FsError): string =>
  error.code === undefined ? "unexpected file system error" : (REASONS[error.code] ?? error.code)

/** `"<path>: <reason>"` for an `FsError`. */
export const describeFsError = (displayPath: string, error: FsError): string => `${displayPath}: ${fsReason(error)}`
