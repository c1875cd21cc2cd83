/**
 * The `maka` command line: picks the command, prints help, loads the command's module only when it
 * runs (so `maka --help` stays quick), and turns every failure into one stderr line and an exit code.
 */
import { USAGE, commandUsage } from "../Usage.ts"
import { CliError, ExitCode, fromEngineError } from "./exit.ts"
import { isCommand, unknownCommand, UsageError, type Environment } from "./flags.ts"
import type { Sink } from "./render.ts"

export interface MainContext {
  readonly argv: ReadonlyArray<string>
  readonly environment: Environment
  readonly cwd: string
  readonly sink: Sink
  readonly stdin: NodeJS.ReadStream
  readonly version: string
}

const HELP_OR_VERSION: ReadonlySet<string> = new Set(["-h", "--help", "help", "-v", "--version"])

/**
 * Whether `argv` asks for nothing but the usage, a help text or the version (docs/cli.md §10): what
 * runs in a directory that was removed, since it touches no file. `maka COMMAND --help` takes
 * nothing more, so a `--help` among other arguments (a message, a flag's value, after `--`) is not.
 */
export const asksOnlyHelp = (argv: ReadonlyArray<string>): boolean => {
  const [first, ...args] = argv
  if (first === undefined || HELP_OR_VERSION.has(first)) return true
  return isCommand(first) && args.length === 1 && (args[0] === "--help" || args[0] === "-h")
}

const dispatch = async (context: MainContext): Promise<number> => {
  const [first, ...args] = context.argv
  if (first === undefined) {
    context.sink.err(USAGE)
    return ExitCode.usage
  }
  if (first === "-h" || first === "--help" || first === "help") {
    // `maka help run` and `maka --help run` are `maka run --help`; a topic that names no command is
    // refused like one, and so is a second argument.
    const [topic, ...rest] = args
    if (topic !== undefined && !isCommand(topic)) throw new UsageError(unknownCommand(topic))
    if (rest.length > 0) throw new UsageError(`unexpected argument '${rest[0]}': maka ${first} takes one command at most; see maka --help`)
    context.sink.out(topic !== undefined && isCommand(topic) ? commandUsage(topic) : USAGE)
    return ExitCode.completed
  }
  if (first === "-v" || first === "--version") {
    if (args.length > 0) throw new UsageError(`unexpected argument '${args[0]}': maka ${first} takes none; see maka --help`)
    context.sink.out(`${context.version}\n`)
    return ExitCode.completed
  }
  if (!isCommand(first)) throw new UsageError(unknownCommand(first))
  // After `--` every argument is the command's own (`maka run -- --help` sends "--help").
  const dashes = args.indexOf("--")
  const flags = dashes === -1 ? args : args.slice(0, dashes)
  if (flags.includes("--help") || flags.includes("-h")) {
    // `maka COMMAND --help` takes nothing more (docs/cli.md §10), as `maka --help COMMAND` does.
    const other = args.find((arg) => arg !== "--help" && arg !== "-h") ?? args[1]
    if (args.length > 1) throw new UsageError(`unexpected argument '${other}': maka ${first} --help takes nothing more; see maka ${first} --help`)
    context.sink.out(commandUsage(first))
    return ExitCode.completed
  }
  const command = { args, environment: context.environment, cwd: context.cwd, sink: context.sink }
  switch (first) {
    case "run":
      return (await import("./run-command.ts")).runCommand({ ...command, stdin: context.stdin })
    case "chat":
      return (await import("./chat-command.ts")).chatCommand({ ...command, stdin: context.stdin })
    case "compact":
      return (await import("./compact-command.ts")).compactCommand({ ...command, stdin: context.stdin })
    case "events":
      return (await import("./read-commands.ts")).eventsCommand(command)
    case "sessions":
      return (await import("./read-commands.ts")).sessionsCommand(command)
    case "recover":
      return (await import("./read-commands.ts")).recoverCommand(command)
    case "backup":
      return (await import("./read-commands.ts")).backupCommand(command)
    case "resume":
      return (await import("./resume-command.ts")).resumeCommand(command)
    case "inspect":
      return (await import("./inspect.ts")).inspectCommand(command)
    case "demo":
      return (await import("./demo.ts")).demoCommand(command)
  }
}

/** Whether `error` carries a tagged `reason`, as `EngineError` and `EventLogError` do. */
const hasReasonTag = (error: unknown): boolean => {
  const reason: unknown = typeof error === "object" && error !== null && "reason" in error ? error.reason : undefined
  return typeof reason === "object" && reason !== null && "_tag" in reason && typeof reason._tag === "string"
}

/**
 * A failure's line: `maka: ` before it, but a failure class's own line (`failed: <class>:
 * <message>`, a refusal at admission as a run's terminal prints it) as it is (docs/cli.md §10.1).
 */
const prefixed = (message: string): string => (message.startsWith("failed: ") ? message : `maka: ${message}`)

/** The stderr line and exit code of a failure that reached the command line's top. */
export const failureReport = (error: unknown): { readonly line: string; readonly code: number } => {
  if (error instanceof UsageError) return { line: `maka: ${error.message}\n`, code: ExitCode.usage }
  if (error instanceof CliError) return { line: `${prefixed(error.message)}\n`, code: error.exitCode }
  // An engine or log error a command did not map itself (a store that failed mid-run, say) is
  // still one line with its exit code, never a stack trace.
  if (hasReasonTag(error)) {
    const mapped = fromEngineError(error)
    return { line: `${prefixed(mapped.message)}\n`, code: mapped.exitCode }
  }
  return { line: `maka: internal error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`, code: ExitCode.failed }
}

/** Runs one command line; resolves with the exit code. */
export const main = async (context: MainContext): Promise<number> => {
  try {
    return await dispatch(context)
  } catch (error) {
    const { line, code } = failureReport(error)
    context.sink.err(line)
    return code
  }
}
