/**
 * The builtin set (docs/architecture.md §7), confined to a workspace root: `read_file`, `list_files` and
 * `search_text` (the `read` set), plus `write_file` (`write`), plus `run_command` (`all`). Write and
 * command tools are opt-in. Every expected error is a `ToolFailure` the model can read.
 */
import { Schema } from "effect"
import * as path from "node:path"
import { defaults, type BuiltinLimits } from "./Defaults.ts"
import { listFiles as listFilesEffect } from "./internal/list-files.ts"
import { readFile as readFileEffect } from "./internal/read-file.ts"
import { runCommand as runCommandEffect } from "./internal/run-command.ts"
import { searchText as searchTextEffect } from "./internal/search-text.ts"
import { writeFile as writeFileEffect } from "./internal/write-file.ts"
import * as Tool from "./Tool.ts"
import { invalidDefinition } from "./ToolError.ts"
import type { Workspace } from "./Workspace.ts"

/**
 * What a builtin needs of a workspace: its canonical root (from `Workspace.open`), and the files
 * `write_file` never writes, such as an event log kept inside the workspace: each named file
 * (through any path or link), and every file beside it whose name begins with its name (a SQLite
 * log's `-wal`, `-shm` and `-journal`, its writer's lock).
 */
export type Root = Pick<Workspace, "root"> & {
  readonly protectedFiles?: ReadonlyArray<string>
  /**
   * Environment variables `run_command`'s shell does not inherit from the host (the CLI hides
   * `MAKA_API_KEY` and `MAKA_DATABASE_URL`): they are not in the environment of a command the model
   * runs, whose output is stored and sent to the model. Every other variable is inherited. The
   * shell is no sandbox: a command can still read the host process's own environment
   * (`/proc/$PPID/environ`) as the user it runs as.
   */
  readonly hiddenEnvironment?: ReadonlyArray<string>
}

/** The model-facing descriptions; they are part of the catalog digest, so they change only deliberately. */
export const descriptions = Object.freeze({
  read_file:
    "Read a text file in the workspace. Returns numbered lines (line number, tab, text). Use offset (1-based line) and limit (lines) to page through long files; binary files are refused.",
  list_files:
    "List one directory of the workspace as [{name, type, size}] sorted by name; type is file, directory or symlink.",
  search_text:
    "Search the text files under a workspace path for a literal string (not a regular expression). Returns {matches: [{path, line, text}], truncated}.",
  write_file:
    "Write a file in the workspace, creating parent directories and replacing any existing content.",
  run_command:
    "Run a shell command with /bin/sh -c in the workspace root. Returns {exitCode, signal?, stdout, stderr, timedOut}; output is capped and the command is killed at its timeout.",
} as const)

const Path = (description: string) => Schema.String.annotate({ description })

const PositiveInt = (maximum: number, description: string) =>
  Schema.Int.check(Schema.isBetween({ minimum: 1, maximum })).annotate({ description })

/** The names a set's `overrides` may hold: every key of `BuiltinLimits`, and only those. */
const limitNames: Readonly<Record<keyof BuiltinLimits, true>> = {
  readFileLimitLines: true,
  readFileMaxLimitLines: true,
  readFilePageBytes: true,
  binaryProbeBytes: true,
  searchMaxResults: true,
  searchMaxResultsLimit: true,
  searchLineChars: true,
  searchMaxFileBytes: true,
  commandTimeoutSeconds: true,
  commandMaxTimeoutSeconds: true,
  commandOutputBytes: true,
}

/**
 * The largest value of each cap that sizes a buffer: `binaryProbeBytes` is allocated by every
 * `read_file` call, `searchMaxFileBytes` is read whole per file searched, and `commandOutputBytes`
 * is kept per stream, both of which must fit the 64 MiB a stored raw result may hold.
 */
const largest: Readonly<Partial<Record<keyof BuiltinLimits, number>>> = {
  binaryProbeBytes: 1024 * 1024,
  searchMaxFileBytes: 1024 * 1024 * 1024,
  commandOutputBytes: 32 * 1024 * 1024,
}

/** Each default whose call input is bounded by another limit: the default must be an input the bound admits. */
const boundedBy: ReadonlyArray<readonly [keyof BuiltinLimits, keyof BuiltinLimits]> = [
  ["readFileLimitLines", "readFileMaxLimitLines"],
  ["searchMaxResults", "searchMaxResultsLimit"],
  ["commandTimeoutSeconds", "commandMaxTimeoutSeconds"],
]

/**
 * The caps a set is built with: `overrides` over `defaults`. Each cap is a count, so an override
 * must be a positive safe integer of a known name (a misspelt one would otherwise be ignored, and
 * `0` or `Infinity` turns a cap into "refuse everything" or "no cap"), a cap that sizes a buffer no
 * more than `largest` says, and a default a call may fall back to no more than the largest value a
 * call may ask for. Refused with `InvalidDefinition`.
 */
const limitsOf = (overrides: Partial<BuiltinLimits>): BuiltinLimits => {
  const limits: Record<string, unknown> = { ...defaults }
  let entries: ReadonlyArray<readonly [string, unknown]>
  try {
    entries = Object.entries(overrides ?? {})
  } catch (error) {
    throw invalidDefinition(`builtin limits could not be read: ${error instanceof Error ? error.message : String(error)}`)
  }
  for (const [name, value] of entries) {
    if (!Object.hasOwn(limitNames, name))
      throw invalidDefinition(`builtin limit ${JSON.stringify(name)} is not one a builtin set takes`)
    if (value === undefined) continue
    if (!Number.isSafeInteger(value) || (value as number) < 1)
      throw invalidDefinition(`builtin limit ${name} must be a positive integer, got ${describeValue(value)}`)
    const most = largest[name as keyof BuiltinLimits]
    if (most !== undefined && (value as number) > most)
      throw invalidDefinition(`builtin limit ${name} must be at most ${most}, got ${String(value)}`)
    limits[name] = value
  }
  const checked = limits as unknown as BuiltinLimits
  for (const [fallback, bound] of boundedBy)
    if (checked[fallback] > checked[bound])
      throw invalidDefinition(`builtin limit ${fallback} (${checked[fallback]}) exceeds ${bound} (${checked[bound]})`)
  return checked
}

const describeValue = (value: unknown): string =>
  typeof value === "number" ? String(value) : typeof value === "string" ? JSON.stringify(value) : typeof value

export const readFile = (workspace: Root, overrides: Partial<BuiltinLimits> = {}): Tool.Tool => {
  const limits = limitsOf(overrides)
  return Tool.make({
    name: "read_file",
    description: descriptions.read_file,
    input: Schema.Struct({
      path: Path("File path relative to the workspace root"),
      offset: Schema.optionalKey(PositiveInt(Number.MAX_SAFE_INTEGER, "1-based line to start at (default 1)")),
      limit: Schema.optionalKey(
        PositiveInt(limits.readFileMaxLimitLines, `Lines to read (default ${limits.readFileLimitLines})`),
      ),
    }),
    semantics: "parallel",
    execute: (input, { signal }) => readFileEffect(workspace.root, limits, input, signal),
  })
}

export const listFiles = (workspace: Root): Tool.Tool =>
  Tool.make({
    name: "list_files",
    description: descriptions.list_files,
    input: Schema.Struct({
      path: Schema.optionalKey(Path('Directory path relative to the workspace root (default ".")')),
    }),
    semantics: "parallel",
    execute: (input) => listFilesEffect(workspace.root, input),
  })

export const searchText = (workspace: Root, overrides: Partial<BuiltinLimits> = {}): Tool.Tool => {
  const limits = limitsOf(overrides)
  return Tool.make({
    name: "search_text",
    description: descriptions.search_text,
    input: Schema.Struct({
      pattern: Schema.String.check(Schema.isMinLength(1)).annotate({ description: "The literal text to find" }),
      path: Schema.optionalKey(Path('File or directory to search, relative to the workspace root (default ".")')),
      maxResults: Schema.optionalKey(
        PositiveInt(limits.searchMaxResultsLimit, `Most matches to return (default ${limits.searchMaxResults})`),
      ),
    }),
    semantics: "parallel",
    execute: (input, { signal }) => searchTextEffect(workspace.root, limits, input, signal),
  })
}

export const writeFile = (workspace: Root): Tool.Tool => {
  // A relative path is the process's when the set is built, as the log's own is when the store opens
  // it: resolved once, so a later change of directory cannot move the protection off the log.
  const protectedFiles = (workspace.protectedFiles ?? []).map((file) => path.resolve(file))
  return Tool.make({
    name: "write_file",
    description: descriptions.write_file,
    input: Schema.Struct({
      path: Path("File path relative to the workspace root"),
      content: Schema.String.annotate({ description: "The complete new content of the file" }),
    }),
    semantics: "parallel",
    execute: (input) => writeFileEffect(workspace.root, input, protectedFiles),
  })
}

export const runCommand = (workspace: Root, overrides: Partial<BuiltinLimits> = {}): Tool.Tool => {
  const limits = limitsOf(overrides)
  return Tool.make({
    name: "run_command",
    description: descriptions.run_command,
    input: Schema.Struct({
      command: Schema.String.check(Schema.isMinLength(1)).annotate({ description: "The shell command to run" }),
      timeoutSeconds: Schema.optionalKey(
        PositiveInt(
          limits.commandMaxTimeoutSeconds,
          `Seconds before the command is killed (default ${limits.commandTimeoutSeconds})`,
        ),
      ),
    }),
    semantics: "parallel",
    execute: (input, { signal }) =>
      runCommandEffect(
        workspace.root,
        {
          timeoutSeconds: input.timeoutSeconds ?? limits.commandTimeoutSeconds,
          outputBytes: limits.commandOutputBytes,
          outputDrainMs: defaults.commandOutputDrainMs,
          hiddenEnvironment: workspace.hiddenEnvironment ?? [],
        },
        input,
        signal,
      ),
  })
}

/** `read_file`, `list_files`, `search_text`. */
export const read = (workspace: Root, overrides: Partial<BuiltinLimits> = {}): ReadonlyArray<Tool.Tool> => [
  readFile(workspace, overrides),
  listFiles(workspace),
  searchText(workspace, overrides),
]

/** `read` and `write_file`. */
export const write = (workspace: Root, overrides: Partial<BuiltinLimits> = {}): ReadonlyArray<Tool.Tool> => [
  ...read(workspace, overrides),
  writeFile(workspace),
]

/** `write` and `run_command`. */
export const all = (workspace: Root, overrides: Partial<BuiltinLimits> = {}): ReadonlyArray<Tool.Tool> => [
  ...write(workspace, overrides),
  runCommand(workspace, overrides),
]

/** The CLI's `--tools` levels (docs/cli.md §10.1). */
export type Level = "none" | "read" | "write" | "all"

export const forLevel = (
  level: Level,
  workspace: Root,
  overrides: Partial<BuiltinLimits> = {},
): ReadonlyArray<Tool.Tool> =>
  level === "none" ? [] : level === "read" ? read(workspace, overrides) : level === "write" ? write(workspace, overrides) : all(workspace, overrides)
