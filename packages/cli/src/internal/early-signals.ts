/**
 * Signals that come before a command has set up its own handling (docs/cli.md §10.1 "Signals"): the
 * modules are still loading, or `maka run` still reads its message from stdin. Nothing is open yet,
 * so SIGINT, SIGTERM and SIGHUP end the process at once with exit 130, as a signal before the opening
 * is durable does; left to their defaults they would end it with 130, 143 or 129. A command's own
 * handlers take over while they are installed: this one acts only when it is the signal's only
 * listener.
 */
const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const

/** Whether a SIGHUP came (this listener is the first of every one, so it sees each). */
let hungUp = false

export const exitOnEarlySignals = (): void => {
  for (const name of SIGNALS) {
    process.on(name, () => {
      if (name === "SIGHUP") hungUp = true
      if (process.listenerCount(name) === 1) process.exit(130)
    })
  }
}

/** Whether the process was told its terminal went away (SIGHUP). */
export const terminalHungUp = (): boolean => hungUp
