/**
 * Crash-test fault points of the engine. `faultPoint(name)` reads `MAKA_TEST_FAULT` at the moment it
 * is called and, when it names this point (`name`, or `name.k` at the k-th call of `name` in this
 * process), kills the process with SIGKILL: no finalizer, no rollback, no flush. Without the variable
 * it does nothing and counts nothing, so production pays one environment lookup per point.
 */

/** The environment variable a crash test sets to the point that kills its child. */
export const FAULT_VARIABLE = "MAKA_TEST_FAULT"

const calls = new Map<string, number>()

export const faultPoint = (name: string): void => {
  const target = process.env[FAULT_VARIABLE]
  if (target === undefined || !target.startsWith(name)) return
  const count = (calls.get(name) ?? 0) + 1
  calls.set(name, count)
  if (target === name || target === `${name}.${count}`) process.kill(process.pid, "SIGKILL")
}
