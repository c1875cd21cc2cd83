/**
 * A first-in first-out lock for single-connection stores (the SQLite driver, the PGlite pool):
 * `lock()` resolves once every earlier holder has called `unlock()`.
 */
export class Mutex {
  #isLocked = false
  readonly #waiting: Array<() => void> = []

  /** Takes the lock at once when it is free (no turn of the microtask queue); `false` when it is held. */
  tryLock(): boolean {
    if (this.#isLocked) return false
    this.#isLocked = true
    return true
  }

  lock(): Promise<void> {
    if (!this.#isLocked) {
      this.#isLocked = true
      return Promise.resolve()
    }
    return new Promise<void>((resolve) => {
      this.#waiting.push(resolve)
    })
  }

  /** Hands the lock to the next waiter, or frees it. */
  unlock(): void {
    const next = this.#waiting.shift()
    if (next === undefined) this.#isLocked = false
    else next()
  }
}
