/**
 * The exit codes of docs/cli.md §10.1 and the mapping from outcomes and engine errors to them, with the
 * one-line messages the CLI prints on stderr.
 */
import { Prompts, type Outcome } from "@maka/facts"

export const ExitCode = Object.freeze({
  completed: 0,
  failed: 1,
  usage: 2,
  reconciliation: 3,
  handedOff: 75,
  cancelled: 130,
})

/** A failure the CLI reports with one line on stderr and a fixed exit code. */
export class CliError extends Error {
  override readonly name = "CliError"
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message)
  }
}

/**
 * Node's file system message without its path part: `ENOENT: no such file or directory, open
 * '/x/.maka-inspect-1-ab.tmp'` as `no such file or directory`. The path it names may be a temporary
 * one the user never gave; the CLI's line names the user's own.
 */
export const fsReasonOf = (error: unknown): string => {
  const message = error instanceof Error ? error.message : String(error)
  return /^[A-Z]+: (.+?), \w+ '/.exec(message)?.[1] ?? message
}

/** The exit code of a run's terminal outcome. */
export const exitCodeOf = (outcome: Outcome.InvocationOutcome): number => {
  switch (outcome.kind) {
    case "completed":
      return ExitCode.completed
    case "context_compact_finished":
      // A compaction that ran but produced no checkpoint (`failed {reason}`) is a failure of the command.
      return outcome.outcome.kind === "failed" ? ExitCode.failed : ExitCode.completed
    case "handoff_paused":
      return ExitCode.handedOff
    case "cancelled":
      return ExitCode.cancelled
    case "failed":
      return outcome.class === "reconciliation_required" ? ExitCode.reconciliation : ExitCode.failed
  }
}

/**
 * The engine's ways out name its API (`allowPriorUnknown`, the provider's `apiKey` and `baseUrl`);
 * the command line names its own flags and settings instead.
 */
const CLI_TERMS: ReadonlyArray<readonly [string, string]> = [
  ["start again with `allowPriorUnknown: true`", "send it with `maka run --allow-prior-unknown`"],
  ["send an explicit new message with allowPriorUnknown", "send an explicit new message with `maka run --allow-prior-unknown`"],
  ["allowPriorUnknown only lets a message follow", "--allow-prior-unknown only lets a message follow"],
  ["(a recovery seals it)", "(`maka recover` seals it)"],
  ["(read the session's events to find it)", "(`maka events --session ID` shows them)"],
  ["check the provider's apiKey (and that it belongs to this baseUrl)", "check MAKA_API_KEY (and that it belongs to this --base-url)"],
  ["the provider's baseUrl is right", "--base-url is right"],
]

/** `message` with the engine's API terms in the command line's own. */
export const inCliTerms = (message: string): string =>
  CLI_TERMS.reduce((text, [api, cli]) => text.split(api).join(cli), message)

/** The ways out of a session reserved for the successor of its sealed pause (docs/cli.md §10.2). */
export const RESERVED_HINT = "; continue its paused run with `maka resume`, or release it with `maka resume --abandon --session ID`"

/** The stderr line of a failed outcome: `failed: <class>: <message>`. */
export const failureLine = (outcome: Extract<Outcome.InvocationOutcome, { readonly kind: "failed" }>): string =>
  outcome.message === undefined ? `failed: ${outcome.class}` : `failed: ${outcome.class}: ${inCliTerms(outcome.message)}`

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> => typeof value === "object" && value !== null

/** Maps a rejection of the facade (an `EngineError`) to the CLI's message and exit code. */
export const fromEngineError = (error: unknown): CliError => {
  if (error instanceof CliError) return error
  const reason = isRecord(error) && isRecord(error["reason"]) ? error["reason"] : undefined
  const tag = typeof reason?.["_tag"] === "string" ? reason["_tag"] : undefined
  const message = inCliTerms(error instanceof Error ? error.message : String(error))
  switch (tag) {
    case "InvalidInput":
      return new CliError(`invalid input: ${message}`, ExitCode.usage)
    case "Busy":
      return new CliError(`failed: session_busy: ${message}${message.includes(Prompts.SESSION_RESERVED_MESSAGE) ? RESERVED_HINT : ""}`, ExitCode.failed)
    case "ReconciliationRequired":
      return new CliError(`failed: reconciliation_required: ${message}`, ExitCode.reconciliation)
    case "Cancelled":
      return new CliError("cancelled", ExitCode.cancelled)
    // A commit the log failed is a store failure too, shown as every other one is.
    case "Commit":
    case "Store":
      return new CliError(`store error: ${message}`, ExitCode.failed)
    default:
      return new CliError(`error: ${message}`, ExitCode.failed)
  }
}
