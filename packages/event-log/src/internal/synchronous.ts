/**
 * The `synchronous` levels a SQLite log opens with (docs/architecture.md §12), in a module of their
 * own: the public `EventLog` re-exports them, and its declarations must not reach the SQLite
 * driver's types (a consumer without `@types/better-sqlite3` type-checks against them).
 */
export type Synchronous = "FULL" | "NORMAL"

/**
 * `FULL` is durable across power loss, `NORMAL` across process crashes only. The level is written
 * into a pragma, so anything else, from a caller without types, is refused before the file is touched.
 */
export const SYNCHRONOUS_LEVELS: ReadonlyArray<Synchronous> = ["FULL", "NORMAL"]

/** Whether `value` is one of `SYNCHRONOUS_LEVELS`, spelled exactly. */
export const isSynchronous = (value: unknown): value is Synchronous => SYNCHRONOUS_LEVELS.some((level) => level === value)
