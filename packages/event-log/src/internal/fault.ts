/**
 * Crash-test fault points. `faultPoint(name)` reads `MAKA_TEST_FAULT` from the environment at the
 * moment it is called and, when it names this point, kills the process with SIGKILL (no finalizer,
 * no rollback, no flush: the same as a power-cut of the process). Otherwise it does nothing, so it
 * costs one environment lookup in production builds. Used by the crash suites' child processes.
 */

/** The environment variable a crash test sets to the name of the point that kills its child. */
export const FAULT_VARIABLE = "MAKA_TEST_FAULT"

export const faultPoint = (name: string): void => {
  if (process.env[FAULT_VARIABLE] === name) process.kill(process.pid, "SIGKILL")
}
