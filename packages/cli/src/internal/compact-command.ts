/**
 * `maka compact --session S` (docs/cli.md §10, §10.1): a standalone compaction of the session's
 * history into a summary checkpoint, on the same provider, database and workspace settings as `maka
 * run`. Prints what happened (the checkpoint and its coverage, unchanged, or the failure) or, with
 * `--json`, the committed events as `maka run --json` does; exit 0 for compacted or unchanged.
 */
import { EngineError } from "@maka/engine"
import type { Event, Outcome } from "@maka/facts"
import { CliError, ExitCode, exitCodeOf, failureLine, fromEngineError } from "./exit.ts"
import * as Flags from "./flags.ts"
import { eventLine } from "./render.ts"
import { cancelOnSignals, openHost, settingsOf, type RunContext } from "./run-command.ts"
import { openReadOnly } from "./store.ts"

/** Why `maka compact` refuses a session with an unknown tool outcome, and what its turns can do. */
export const PRIOR_UNKNOWN_COMPACT =
  "session has a tool effect whose outcome is unknown, and a compaction never covers one (it stays unknown); " +
  "the session's turns go on with `maka run --allow-prior-unknown`"

/**
 * A refusal of the compaction in the command line's words. The engine's way out of an unknown tool
 * outcome is a new message (`maka run --allow-prior-unknown`): it leaves the outcome unknown, so no
 * compaction of the session can run, now or after; compact says so instead of pointing to run.
 */
const compactRefusal = (error: unknown): CliError =>
  error instanceof EngineError.EngineError &&
  error.reason._tag === "ReconciliationRequired" &&
  error.reason.message === EngineError.PRIOR_UNKNOWN_MESSAGE
    ? new CliError(`failed: reconciliation_required: ${PRIOR_UNKNOWN_COMPACT}`, ExitCode.reconciliation)
    : fromEngineError(error)

/** The line that says what a finished compaction did; `stdout` false for a failure (stderr). */
export const resultLine = (
  outcome: Outcome.InvocationOutcome,
  events: ReadonlyArray<Event.StoredEvent>,
): { readonly text: string; readonly stdout: boolean } => {
  switch (outcome.kind) {
    case "context_compact_finished": {
      const result = outcome.outcome
      if (result.kind === "unchanged") return { text: `unchanged: ${result.reason} (nothing new to summarise since the last checkpoint)`, stdout: true }
      if (result.kind === "failed") return { text: `compaction failed: ${result.reason}`, stdout: false }
      const recorded = events.find((stored) => stored.event.id === result.checkpointId)?.event.fact
      const coverage =
        recorded?.kind === "context_checkpoint_recorded"
          ? `, covers the history through event #${recorded.checkpoint.coveredThrough}` +
            (recorded.checkpoint.previousCheckpointId === undefined ? "" : ` (updates checkpoint ${recorded.checkpoint.previousCheckpointId})`)
          : ""
      return { text: `compacted: checkpoint ${result.checkpointId}${coverage}`, stdout: true }
    }
    case "failed":
      return { text: failureLine(outcome), stdout: false }
    case "cancelled":
      return { text: "cancelled", stdout: false }
    case "completed":
    case "handoff_paused":
      return { text: outcome.kind, stdout: false }
  }
}

export const compactCommand = async (context: RunContext): Promise<number> => {
  const { values } = Flags.parse("compact", context.args)
  Flags.requiredSession(values, "compact")
  const settings = settingsOf(values, context)
  // Compaction needs history: a log that does not exist is not created (`openReadOnly` refuses it), and
  // a session without history is refused before the workspace (its marker) and the writer are opened.
  const reader = await openReadOnly(settings.database)
  try {
    const first = await reader.run(reader.log.events(settings.sessionId, undefined, 1))
    if (first.length === 0) throw new CliError(`session ${settings.sessionId} has no events`, ExitCode.failed)
  } finally {
    await reader.close()
  }
  const signals = cancelOnSignals()
  try {
    const host = await openHost(settings, context.sink, signals.signal)
    try {
      const { outcome, events } = await host.compact()
      if (settings.json) for (const stored of events) context.sink.out(`${eventLine(stored)}\n`)
      const line = resultLine(outcome, events)
      if (line.stdout && !settings.json) context.sink.out(`${line.text}\n`)
      if (!line.stdout) context.sink.err(`${line.text}\n`)
      return exitCodeOf(outcome)
    } catch (error) {
      throw compactRefusal(error)
    } finally {
      await host.close()
    }
  } finally {
    signals.release()
  }
}
