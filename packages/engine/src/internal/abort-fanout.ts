/**
 * One `abort` listener per caller signal, however many runs share it. A host that gives one
 * `AbortSignal` to many runs would otherwise get two listeners per run on it, and Node warns
 * (`MaxListenersExceededWarning`) past ten. Each subscriber is called once, when the signal aborts;
 * the shared listener is removed when its last subscriber leaves.
 */

interface Shared {
  readonly listener: () => void
  readonly subscribers: Set<() => void>
}

const shared = new WeakMap<AbortSignal, Shared>()

/** Calls `onAbort` once when `signal` aborts; the returned function unsubscribes it. */
export const subscribe = (signal: AbortSignal, onAbort: () => void): (() => void) => {
  let entry = shared.get(signal)
  if (entry === undefined) {
    const subscribers = new Set<() => void>()
    const listener = (): void => {
      shared.delete(signal)
      // A subscriber may unsubscribe another while they are called: each is called from a copy.
      const called = [...subscribers]
      subscribers.clear()
      for (const subscriber of called) subscriber()
    }
    entry = { listener, subscribers }
    shared.set(signal, entry)
    signal.addEventListener("abort", listener, { once: true })
  }
  const { listener, subscribers } = entry
  // Its own function, so one `onAbort` given twice is two subscriptions.
  const subscriber = (): void => onAbort()
  subscribers.add(subscriber)
  return () => {
    if (!subscribers.delete(subscriber) || subscribers.size > 0) return
    shared.delete(signal)
    signal.removeEventListener("abort", listener)
  }
}
