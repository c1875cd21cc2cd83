/**
 * What `maka run` shows while a run goes on (docs/cli.md §10.1 "Output"): assistant text on stdout as it
 * becomes durable; tool activity, progress of long tool calls and retries with their wait on stderr;
 * or, with `--json`, one line per committed event. Every line comes from a committed event.
 */
import type { Recovery } from "@maka/engine"
import { Canonical, Limits, Summary, type Event } from "@maka/facts"
import { clip } from "./clip.ts"

export interface Sink {
  readonly out: (text: string) => void
  readonly err: (text: string) => void
  /** Aborted once stdout takes no more text (its reader went away); a running turn is then cancelled. */
  readonly outClosed?: AbortSignal
  /** The error code of stdout's first failed write (`EPIPE`: its reader went away), if it failed. */
  readonly outFailure?: () => string | undefined
  /**
   * While stdout holds more than its buffer's worth that its reader has not taken: a promise that
   * settles once it drains (or fails); otherwise undefined. A command that prints much awaits it, so
   * a slow reader slows the command instead of growing its memory.
   */
  readonly outDrained?: () => Promise<void> | undefined
  /**
   * Settles once every write so far went through or failed, a failure having aborted `outClosed`, or
   * once `stop` aborts (a reader that stopped reading holds the writes back): a command that goes on
   * to new work (chat's next turn) awaits it, so work its reader can no longer see is never started.
   */
  readonly outSettled?: (stop?: AbortSignal) => Promise<void>
}

/**
 * The JSON line of a stored event, shared by `maka run --json` and `maka events --json`: the order of
 * docs/cli.md §10.1, `{"sequence":N,"event":{…}}`, with the event in its canonical form (the bytes the
 * log hashes, keys sorted).
 */
export const eventLine = (stored: Event.StoredEvent): string =>
  `{"sequence":${stored.sequence},"event":${Canonical.stringify(stored.event)}}`

/** The last provider failure the run's `fetch` saw: what a retry line names. */
export interface ObservedFailure {
  readonly reason: string
  readonly retryAfterMs?: number | undefined
}

/**
 * What opening the log sealed (a run a crashed process left open), one stderr line each: otherwise
 * a writing command would change a session's state without a word (docs/cli.md §10.1 "Recovery").
 */
export const recoveredLines = (report: Recovery.Report | undefined): string =>
  [
    ...(report?.sealed ?? []).map(
      (sealed) =>
        `recovered: session ${sealed.invocation.sessionId}: run ${sealed.invocation.invocationId}, left open by a writer that no longer holds the log, sealed ${sealed.failureClass}\n`,
    ),
    // What the log would not let recovery seal (a full disk): still open, said once, on stderr.
    ...(report?.unsealed ?? []).map(
      (open) => `recovery could not seal session ${open.invocation.sessionId}: run ${open.invocation.invocationId}: ${open.message}\n`,
    ),
  ].join("")

export const formatSeconds = (ms: number): string =>
  ms >= 1000 ? `${Math.round(ms / 1000)} s` : `${(Math.max(ms, 0) / 1000).toFixed(1)} s`

const shortJson = (value: unknown, max = 120): string => clip(Canonical.stringify(value), max)

/**
 * How a `run_command` call ended when the command did not exit 0 (`timed out, killed`, `killed by
 * SIGTERM`, `exited 2`), from its result `{exitCode, signal?, timedOut}`; undefined otherwise (the
 * line then says `done`). A tool call that succeeded only ran the command: the command itself may
 * have failed.
 */
const commandEnd = (name: string, projection: { readonly kind: string; readonly value?: unknown }): string | undefined => {
  if (name !== "run_command" || projection.kind !== "json") return undefined
  const result = projection.value
  if (typeof result !== "object" || result === null || Array.isArray(result)) return undefined
  const { exitCode, signal, timedOut } = result as Record<string, unknown>
  if (timedOut === true) return "timed out, killed"
  if (typeof signal === "string") return `killed by ${signal}`
  return typeof exitCode === "number" && exitCode !== 0 ? `exited ${exitCode}` : undefined
}

/** How long a tool call runs before its progress is shown, and how often after that (checked every second). */
export const PROGRESS_INTERVAL_MS = 5_000

/**
 * The defect the engine finds in a completed summary (`Summary.fromModelStep`), or `undefined`. The
 * fold floor applies only to a first fold, which the run's events alone do not tell: a summary whose
 * only defect is that floor is named by it.
 */
const summaryDefectOf = (output: Parameters<typeof Summary.fromModelStep>[0]): string | undefined => {
  const later = Summary.fromModelStep(output, false)
  if (later._tag === "Failure") return later.failure
  const first = Summary.fromModelStep(output, true)
  return first._tag === "Failure" ? first.failure : undefined
}

export class RunRenderer {
  private readonly textParts = new Set<string>()
  private readonly summarySteps = new Set<string>()
  /** A summary was announced and no checkpoint has been recorded since. */
  private isCompacting = false
  /** Why the engine refuses the last summary the model completed, if it does (docs/engine.md §5.12). */
  private summaryDefect: string | undefined
  private readonly dispatched = new Map<string, { readonly name: string; readonly at: number; readonly startedAt: number; shown: number }>()
  private lastChar = "\n"
  private failedAttempts = 0
  private progress: ReturnType<typeof setInterval> | undefined

  constructor(
    private readonly sink: Sink,
    private readonly json: boolean,
    private readonly lastFailure: () => ObservedFailure | undefined,
    private readonly backoff: { readonly baseMs: number; readonly maxMs: number; readonly maxAttempts: number } = {
      baseMs: Limits.BACKOFF_INITIAL_MS,
      maxMs: Limits.BACKOFF_MAX_MS,
      maxAttempts: Limits.MAX_MODEL_ATTEMPTS,
    },
  ) {}

  /**
   * Starts the progress lines of long tool calls (real time: this is the terminal edge), timed on the
   * monotonic clock: a wall clock set back or forward during a call never shows a wrong duration.
   */
  startProgress(): void {
    this.progress = setInterval(() => {
      const now = performance.now()
      for (const call of this.dispatched.values()) {
        const periods = Math.floor((now - call.startedAt) / PROGRESS_INTERVAL_MS)
        if (periods > call.shown) {
          call.shown = periods
          this.sink.err(`tool: ${call.name} still running (${formatSeconds(periods * PROGRESS_INTERVAL_MS)})\n`)
        }
      }
    }, 1_000)
    this.progress.unref()
  }

  stop(): void {
    if (this.progress !== undefined) clearInterval(this.progress)
    if (!this.json && this.lastChar !== "\n") {
      this.sink.out("\n")
      this.lastChar = "\n"
    }
  }

  private text(value: string): void {
    if (value === "") return
    this.sink.out(value)
    this.lastChar = value.at(-1)!
  }

  handle(stored: Event.StoredEvent): void {
    if (this.json) this.sink.out(`${eventLine(stored)}\n`)
    const fact = stored.event.fact
    switch (fact.kind) {
      case "model_requested":
        // A summary's stream is compaction, not the answer: it is announced, not printed.
        if (fact.purpose === "summary") {
          this.summarySteps.add(fact.stepId)
          if (!this.json && this.lastChar !== "\n") this.text("\n")
          this.sink.err("compacting the context…\n")
          this.isCompacting = true
          this.summaryDefect = undefined
        }
        return
      case "context_checkpoint_recorded":
        this.isCompacting = false
        this.sink.err(`context compacted: history through #${fact.checkpoint.coveredThrough} summarised (${fact.checkpoint.mode.kind})\n`)
        return
      case "model_observed": {
        const event = fact.event
        const key = `${fact.stepId}/${"id" in event ? event.id : ""}`
        if (this.summarySteps.has(fact.stepId)) return
        if (event.kind === "part_started" && event.textKind === "text") this.textParts.add(key)
        if (event.kind === "part_delta" && this.textParts.has(key) && !this.json) this.text(event.text)
        return
      }
      case "model_completed":
        this.failedAttempts = 0
        if (this.summarySteps.has(fact.stepId)) {
          this.summaryDefect = summaryDefectOf(fact.output)
          return
        }
        if (!this.json && this.lastChar !== "\n") this.text("\n")
        return
      case "model_interrupted": {
        if (this.summarySteps.has(fact.stepId) && fact.status !== "retryable_failure") {
          // A background summary still running when the run ends is cancelled: the history stays as it
          // was, and the next turn compacts before its request (docs/engine.md §5.12).
          // A refused one (too long for the model, docs/engine.md §5.12 "Slices") may be followed by
          // smaller ones: the next summary request announces itself again.
          this.isCompacting = false
          this.sink.err(
            fact.status === "cancelled"
              ? "compaction left to the next turn: this one ended before its summary\n"
              : `summary request ${fact.status === "timed_out" ? "timed out" : "failed"}: the history stays as it was until a summary is adopted\n`,
          )
          return
        }
        if (fact.status !== "retryable_failure") return
        this.failedAttempts++
        // The step's last attempt failing is not followed by a retry: the run fails next.
        if (this.failedAttempts >= this.backoff.maxAttempts) return
        const failure = this.lastFailure()
        const exponent = Math.min(this.failedAttempts - 1, 5)
        const delay = failure?.retryAfterMs ?? Math.min(this.backoff.baseMs * 2 ** exponent, this.backoff.maxMs)
        if (!this.json && this.lastChar !== "\n") this.text("\n")
        this.sink.err(`retrying in ${formatSeconds(delay)}: ${failure?.reason ?? "provider failure"}\n`)
        return
      }
      case "tool_dispatched":
        this.dispatched.set(fact.operationId, { name: fact.name, at: stored.event.recordedAt, startedAt: performance.now(), shown: 0 })
        this.sink.err(`tool: ${fact.name} ${shortJson(fact.input)}\n`)
        return
      case "tool_settled": {
        const call = this.dispatched.get(fact.operationId)
        this.dispatched.delete(fact.operationId)
        const name = call?.name ?? fact.operationId
        // On the monotonic clock, as the call's progress lines: a wall clock stepped meanwhile changes nothing.
        const took = call === undefined ? "" : ` (${Math.round(performance.now() - call.startedAt)} ms)`
        this.sink.err(
          fact.outcome.kind === "succeeded"
            ? `tool: ${name} ${commandEnd(name, fact.outcome.projection) ?? "done"}${took}\n`
            : `tool: ${name} failed${took}: ${fact.outcome.message}\n`,
        )
        return
      }
      case "tool_rejected":
        this.sink.err(`tool: ${fact.name} rejected: ${fact.reason.kind}${"message" in fact.reason ? `: ${fact.reason.message}` : ""}\n`)
        return
      case "invocation_ended":
        if (this.isCompacting) {
          this.isCompacting = false
          this.sink.err(
            this.summaryDefect === undefined
              ? "compaction not adopted: no checkpoint was recorded before the run ended\n"
              : `compaction not adopted: the model's summary was refused (${this.summaryDefect}); the history stays as it was\n`,
          )
        }
        return
      case "message_steered":
        this.sink.err(`steered: ${fact.message.content.text}\n`)
        return
      default:
        return
    }
  }
}
