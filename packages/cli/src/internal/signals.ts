/**
 * Signals of a running turn (docs/cli.md §10.1 "Signals"): SIGINT cancels; the first SIGTERM asks the
 * current run for a handoff at its next step boundary, and says on stderr when it cannot be taken;
 * a second SIGTERM, or a SIGINT, cancels. Before a run is attached, either signal cancels: the
 * opening is not durable yet, so nothing is written. SIGHUP, and a stdout closed by its reader, cancel
 * as SIGINT does.
 */
import type { Event } from "@maka/facts"
import type { Sink } from "./render.ts"

/** What the signals act on: a run of the facade, or a successor of a pause. */
export interface Controllable {
  /** Resolves with the sealed pause, or `null` when the run ended first or the pause could not be taken. */
  readonly handoff: () => Promise<unknown>
  readonly cancel: () => Promise<void>
  /** Settles once the run's terminal is durable. */
  readonly ended: Promise<unknown>
  /**
   * Resolves once the command shows a main request of the run recorded after `time` (epoch ms): the
   * run passed a step boundary after then.
   */
  readonly stepAfter: (time: number) => Promise<void>
  /** Whether the run was started with `--allow-prior-unknown` (a run admitted over an unknown effect never pauses). */
  readonly allowsPriorUnknown?: boolean
}

/**
 * Watches the main `model_requested` facts a command shows (`observe` sees every event it shows):
 * `after(time)` resolves at the first one recorded after `time`. A handoff asked for at `time` and
 * refused at the next step boundary is followed by that step's request; a run that ended first
 * records none. (Its recording time, not when it is shown: the request of the step in flight when
 * the signal came may be shown just after it.)
 */
export const stepWatch = () => {
  let waiters: Array<{ readonly time: number; readonly wake: () => void }> = []
  let latest = Number.NEGATIVE_INFINITY
  return {
    observe: (stored: Event.StoredEvent): void => {
      const fact = stored.event.fact
      if (fact.kind !== "model_requested" || fact.purpose !== "main") return
      latest = Math.max(latest, stored.event.recordedAt)
      const woken = waiters.filter((waiter) => latest > waiter.time)
      waiters = waiters.filter((waiter) => latest <= waiter.time)
      for (const waiter of woken) waiter.wake()
    },
    after: (time: number): Promise<void> =>
      latest > time ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ time, wake: resolve })),
  }
}

export interface Signals {
  /** Aborted once the current work is to be cancelled. */
  readonly signal: AbortSignal
  /**
   * A SIGTERM asked the attached run for a handoff. Whether or not the run ended first, the command
   * takes up no more work after it: `maka resume` no next pause, `maka chat` no next line.
   */
  readonly handoffRequested: () => boolean
  /** Makes `run` the target of the signals until the returned function detaches it. */
  readonly attach: (run: Controllable) => () => void
  readonly release: () => void
}

export const HANDOFF_REQUESTED =
  "handing off at the next step boundary once the current step settles (SIGTERM again or SIGINT cancels)"
export const HANDOFF_NOT_TAKEN =
  "handoff not taken: the run's handoff preflight failed (the log refused the pause, or the step's request " +
  "could not be prepared); the run continues (SIGTERM again or SIGINT cancels)"
/** Why a run started with `--allow-prior-unknown` did not pause (docs/engine.md §5.10). */
export const HANDOFF_NOT_TAKEN_PRIOR_UNKNOWN =
  "handoff not taken: the run was admitted with --allow-prior-unknown over an effect of unknown outcome, " +
  "and such a run does not pause; the run continues (SIGTERM again or SIGINT cancels)"

/** How many log opens are in progress (`whileOpening`). */
let opening = 0

/**
 * Opens the log through `open`: a signal that comes meanwhile, with no run started, ends the process
 * at once with exit 130. Nothing is durable yet, and an open can wait long (another host's migration,
 * a lock held on PostgreSQL, up to the pool's 300 s query bound) while the signal could not stop it;
 * a migration in flight is rolled back with the connection.
 */
export const whileOpening = async <A>(open: Promise<A>): Promise<A> => {
  opening++
  try {
    return await open
  } finally {
    opening--
  }
}

/** Ends the process with exit 130 when a log open is in progress (`whileOpening`). */
export const exitIfOpening = (): void => {
  if (opening > 0) process.exit(130)
}

export const handleSignals = (sink: Sink): Signals => {
  const controller = new AbortController()
  let current: { readonly run: Controllable; isDetached: boolean } | undefined
  let hasRequestedHandoff = false
  const cancel = () => {
    if (current === undefined) exitIfOpening()
    controller.abort()
    void current?.run.cancel().catch(() => undefined)
  }
  const onInterrupt = () => cancel()
  const onTerminate = () => {
    const target = current
    if (target === undefined || target.isDetached || hasRequestedHandoff) return cancel()
    hasRequestedHandoff = true
    sink.err(`${HANDOFF_REQUESTED}\n`)
    // A boundary passed after now, without a pause, refused it.
    const passedBoundary = target.run.stepAfter(Date.now())
    target.run.handoff().then(
      async (pause) => {
        if (pause !== null && pause !== undefined) return
        // `null` because the run ended first is no refusal (the run's own exit code applies); a
        // refusal at a step boundary is followed by that step's request.
        const isRefused = await Promise.race([passedBoundary.then(() => true), target.run.ended.then(() => false, () => false)])
        if (isRefused && !target.isDetached) {
          sink.err(`${target.run.allowsPriorUnknown === true ? HANDOFF_NOT_TAKEN_PRIOR_UNKNOWN : HANDOFF_NOT_TAKEN}\n`)
        }
      },
      (error: unknown) => {
        if (!target.isDetached) sink.err(`handoff not taken: ${error instanceof Error ? error.message : String(error)}; the run continues\n`)
      },
    )
  }
  process.on("SIGINT", onInterrupt)
  process.on("SIGTERM", onTerminate)
  // A hangup (the terminal or the SSH connection went away) cancels as SIGINT does: left to its
  // default, it would kill the process mid-step and leave the run for recovery.
  process.on("SIGHUP", onInterrupt)
  // Nobody reads the output any more: stop as on SIGINT, so the run's terminal is written.
  const outClosed = sink.outClosed
  if (outClosed?.aborted === true) cancel()
  else outClosed?.addEventListener("abort", onInterrupt, { once: true })
  return {
    signal: controller.signal,
    handoffRequested: () => hasRequestedHandoff,
    attach: (run) => {
      const attached = { run, isDetached: false }
      current = attached
      if (controller.signal.aborted) void run.cancel().catch(() => undefined)
      return () => {
        attached.isDetached = true
        if (current === attached) current = undefined
      }
    },
    release: () => {
      process.off("SIGINT", onInterrupt)
      process.off("SIGTERM", onTerminate)
      process.off("SIGHUP", onInterrupt)
      outClosed?.removeEventListener("abort", onInterrupt)
    },
  }
}
