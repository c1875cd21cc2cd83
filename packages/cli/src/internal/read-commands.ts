/**
 * `maka events`, `maka sessions` and `maka recover` (docs/cli.md §10.1). The first two are read-only;
 * `recover` takes the writer lease and seals what a crashed host left open, one line per invocation.
 */
import type { EventLog } from "@maka/event-log"
import type { Event } from "@maka/facts"
import { Recovery } from "@maka/engine"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { CliError, ExitCode } from "./exit.ts"
import * as Flags from "./flags.ts"
import { eventLine, type Sink } from "./render.ts"
import { openReadOnly, openWriter, prepareLogFolder, sessionEventPages } from "./store.ts"

export interface CommandContext {
  readonly args: ReadonlyArray<string>
  readonly environment: Flags.Environment
  readonly cwd: string
  readonly sink: Sink
}

/** A one-line human description of a stored event. */
export const describeEvent = (stored: Event.StoredEvent): string => {
  const fact = stored.event.fact
  const detail = (() => {
    switch (fact.kind) {
      case "invocation_opened":
        return fact.input.kind === "message" ? JSON.stringify(fact.input.content.text) : fact.input.kind
      case "model_requested":
        return `${fact.purpose} step ${fact.stepId}`
      case "model_observed":
        return fact.event.kind === "part_delta" ? `${fact.event.kind} ${JSON.stringify(fact.event.text)}` : fact.event.kind
      case "model_completed":
        return `finish ${fact.output.finishReason}`
      case "model_interrupted":
        return fact.status
      case "tool_dispatched":
      case "tool_rejected":
        return `${fact.name} ${JSON.stringify(fact.input)}`
      case "tool_settled":
        return fact.outcome.kind
      case "invocation_ended":
        return fact.outcome.kind === "failed" ? `failed ${fact.outcome.class}` : fact.outcome.kind
      case "message_steered":
        return JSON.stringify(fact.message.content.text)
      case "tool_result_archived":
        return `${fact.placeholder.identity.toolName} result of event ${fact.placeholder.identity.runtimeEventId}`
      case "context_checkpoint_recorded":
        return `${fact.checkpoint.mode.kind} through #${fact.checkpoint.coveredThrough}`
      default:
        return ""
    }
  })()
  return `${String(stored.sequence).padStart(5)}  ${fact.kind.padEnd(27)} ${detail}`.trimEnd()
}

export const eventsCommand = async (context: CommandContext): Promise<number> => {
  const { values } = Flags.parse("events", context.args)
  const target = Flags.database(values, context.environment, context.cwd)
  const sessionId = Flags.requiredSession(values, "events")
  const open = await openReadOnly(target)
  try {
    // Printed as read, at the pace of stdout's reader: a long session is never held whole, and a
    // reader that went away (`| head`) ends the reading.
    for await (const page of sessionEventPages(open, sessionId)) {
      for (const stored of page) {
        context.sink.out(`${values.json === true ? eventLine(stored) : describeEvent(stored)}\n`)
        const drained = context.sink.outDrained?.()
        if (drained !== undefined) await drained
        if (context.sink.outClosed?.aborted === true) return ExitCode.completed
      }
    }
    return ExitCode.completed
  } finally {
    await open.close()
  }
}

export type SessionState = "idle" | "unsealed" | "paused (handoff)" | "needs reconciliation"

/**
 * The state of one session (docs/cli.md §10.1 "Other commands"): a run without terminal first, then
 * a pending handoff, then an effect whose outcome stays unknown. `hasPendingHandoff` is asked only
 * when no run is unsealed.
 */
export const sessionState = async (summary: EventLog.SessionSummary, hasPendingHandoff: () => Promise<boolean>): Promise<SessionState> => {
  if (summary.unsealed > 0) return "unsealed"
  if (await hasPendingHandoff()) return "paused (handoff)"
  // A dispatch with no settlement in an invocation sealed `outcome_unknown`. It stays unknown for
  // good: a run admitted with --allow-prior-unknown completes over it, and the next plain message is
  // refused again (exit 3), so the state holds whatever ran after it.
  return summary.unknownOutcomes > 0 ? "needs reconciliation" : "idle"
}

export const sessionsCommand = async (context: CommandContext): Promise<number> => {
  const { values } = Flags.parse("sessions", context.args)
  const target = Flags.database(values, context.environment, context.cwd)
  const open = await openReadOnly(target)
  try {
    // Counted and joined by the log's indexes, no event decoded: a log of millions of events lists
    // its sessions without holding them (docs/log-format.md §3.10).
    for (const summary of await open.run(open.log.sessionSummaries())) {
      const state = await sessionState(summary, () => open.run(open.log.hasPendingHandoff(summary.sessionId)))
      const { invocations } = summary
      context.sink.out(
        values.json === true
          ? `${JSON.stringify({ sessionId: summary.sessionId, state, invocations, events: summary.events })}\n`
          : `${summary.sessionId}  ${state}  ${invocations} invocation${invocations === 1 ? "" : "s"}, ${summary.events} events\n`,
      )
    }
    return ExitCode.completed
  } finally {
    await open.close()
  }
}

/** `lstat` of `file` (a dangling symbolic link is there too), or `undefined` when nothing is. */
const lstatOrUndefined = (file: string): fs.Stats | undefined => {
  try {
    return fs.lstatSync(file)
  } catch {
    return undefined
  }
}

/**
 * `maka backup DB FILE`: opens DB read-only (no lease, so a live run keeps writing) and copies it to
 * the new file FILE with the event log's online backup; an existing FILE is refused untouched.
 */
export const backupCommand = async (context: CommandContext): Promise<number> => {
  const { positionals } = Flags.parse("backup", context.args)
  if (positionals.length !== 2 || positionals.some((value) => value === "")) {
    throw new Flags.UsageError("maka backup needs DB and FILE: maka backup DB FILE")
  }
  // A database URL is no path: named as one, it would be looked up (and echoed, password and all)
  // as a file under the current folder.
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(positionals[0]!)) {
    throw new Flags.UsageError("maka backup copies a SQLite log file (DB is its path); back a PostgreSQL log up with the server's tools (pg_dump)")
  }
  const source = path.resolve(context.cwd, positionals[0]!)
  const destination = path.resolve(context.cwd, positionals[1]!)
  if (lstatOrUndefined(destination) !== undefined) {
    throw new CliError(`${destination} already exists; a backup never overwrites a file, pick a new path`, ExitCode.failed)
  }
  const open = await openReadOnly({ kind: "sqlite", path: source }, "DB must be an existing log")
  // A signal stops the copy between two of its steps: the temporary file is removed (closing the
  // log waits for it) and nothing is left at FILE. A copy that was whole before the signal took
  // effect is in place: that is said instead.
  const stopping = new AbortController()
  const stop = () => stopping.abort()
  for (const name of STOP_SIGNALS) process.on(name, stop)
  let failure: { readonly error: unknown } | undefined
  try {
    await open.run(open.log.backup(destination), stopping.signal)
  } catch (error) {
    failure = { error }
  } finally {
    await open.close()
  }
  // The handlers stay until the command's outcome is decided (a signal now changes nothing), so no
  // signal takes its default action between the report and the exit.
  if (failure !== undefined && !(stopping.signal.aborted && lstatOrUndefined(destination) !== undefined)) {
    if (stopping.signal.aborted) throw new CliError(`backup stopped by a signal; nothing was written at ${destination}`, ExitCode.cancelled)
    throw failure.error
  }
  context.sink.out(`backed up ${source} to ${destination}\n`)
  return ExitCode.completed
}

const STOP_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const

export const recoverCommand = async (context: CommandContext): Promise<number> => {
  const { values } = Flags.parse("recover", context.args)
  const target = Flags.database(values, context.environment, context.cwd)
  const unmake = prepareLogFolder(target, { defaultUnder: context.cwd })
  const open = await openWriter(target).catch((error: unknown) => {
    unmake()
    throw error
  })
  try {
    const report = await open.run(Effect.flatMap(Effect.succeed(open.log), (log) => Recovery.recover(log)))
    for (const sealed of report.sealed) {
      context.sink.out(`${sealed.invocation.sessionId} ${sealed.invocation.invocationId} ${sealed.failureClass}\n`)
    }
    context.sink.out(`recovered ${report.count} invocation${report.count === 1 ? "" : "s"}\n`)
    // An invocation the log would not let recovery seal (a full disk, a role that cannot write)
    // is still open: the command failed at what it is for.
    for (const open of report.unsealed) {
      context.sink.err(`maka: could not seal ${open.invocation.sessionId} ${open.invocation.invocationId}: ${open.message}\n`)
    }
    return report.unsealed.length === 0 ? ExitCode.completed : ExitCode.failed
  } finally {
    await open.close()
  }
}
