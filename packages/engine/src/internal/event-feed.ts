/**
 * A run's committed events as the facade hands them out (docs/architecture.md §12): `events()`,
 * `text()` and `textAndThinking()` read the run's list of committed events with plain promises, so
 * delivering an event runs no fiber (an Effect stream turned into an async iterable runs one per
 * `next`). The Effect API's stream (`RunningInvocation.events`) reads the same list.
 */
import type { Event, Model } from "@maka/facts"

/** One piece of a rendered answer: visible text or the model's thinking. */
export interface TextDelta {
  readonly kind: Model.TextKind
  readonly text: string
}

export class EventFeed {
  /** Every committed event of the run, in order. */
  readonly committed: Array<Event.StoredEvent> = []
  #ended = false
  #waiting: Array<() => void> = []
  #wakeScheduled = false

  /**
   * Adds events just made durable and wakes the readers. The list holds its own copy of each fact
   * but an observation (a few a step): the engine memoises prompt messages by the identity of the
   * facts it projects, and a message can end a request chain that holds the whole history before it,
   * so a run's handle kept by a host would pin its session's prompt history (docs/engine.md §5.4
   * "Kept context": a handle holds only its own events). Facts are never mutated; nested values are
   * shared.
   */
  add(events: ReadonlyArray<Event.StoredEvent>): void {
    for (const stored of events) {
      const fact = stored.event.fact
      this.committed.push(fact.kind === "model_observed" ? stored : { ...stored, event: { ...stored.event, fact: { ...fact } } })
    }
    this.#wake()
  }

  /** No event follows: readers end once they have read every committed one. */
  end(): void {
    this.#ended = true
    this.#wake()
  }

  /**
   * Wakes the waiting readers in the event loop's next check phase (`setImmediate`), not in the turn
   * of the commit that added the events: the request the engine just made durable is written to its
   * socket first (a `process.nextTick` of the request's creation), and a reader's own work with the
   * events runs while the step waits for the answer (docs/architecture.md §12). Readers that start
   * waiting before the wake runs are woken by it too.
   */
  #wake(): void {
    if (this.#wakeScheduled || this.#waiting.length === 0) return
    this.#wakeScheduled = true
    setImmediate(() => {
      this.#wakeScheduled = false
      const waiting = this.#waiting
      this.#waiting = []
      for (const resume of waiting) resume()
    })
  }

  /** Every committed event from the run's first, live; ends after the last one once the run ended. */
  events(): AsyncIterableIterator<Event.StoredEvent> {
    let index = 0
    let closed = false
    /** This reader's calls of `next` waiting for an event: `return` ends them at once. */
    const pending = new Set<() => void>()
    const next = (): Promise<IteratorResult<Event.StoredEvent, undefined>> => {
      if (!closed && index < this.committed.length) return Promise.resolve({ done: false, value: this.committed[index++]! })
      if (closed || this.#ended) {
        closed = true
        return Promise.resolve({ done: true, value: undefined })
      }
      return new Promise((resolve) => {
        const resume = () => {
          pending.delete(resume)
          resolve(next())
        }
        pending.add(resume)
        this.#waiting.push(resume)
      })
    }
    const iterator: AsyncIterableIterator<Event.StoredEvent> = {
      next,
      // A reader that stops (a `break`, a client gone) ends its waiting calls now, not at the run's
      // next commit, which a slow tool or a silent model may hold off for minutes.
      return: () => {
        closed = true
        if (pending.size > 0) {
          const ended = [...pending]
          this.#waiting = this.#waiting.filter((resume) => !pending.has(resume))
          for (const resume of ended) resume()
        }
        return Promise.resolve({ done: true, value: undefined })
      },
      [Symbol.asyncIterator]: () => iterator,
    }
    return iterator
  }
}

/** The feeds of live runs, by the Effect stream of the same events (kept as is by every wrapper). */
const feeds = new WeakMap<object, EventFeed>()

export const register = (stream: object, feed: EventFeed): void => {
  feeds.set(stream, feed)
}

/** The feed behind a run's event stream, when the engine made it. */
export const of = (stream: object): EventFeed | undefined => feeds.get(stream)

/** The kinds of the parts seen so far, and the summary steps whose streams are left out. */
export interface TextState {
  readonly kinds: Map<string, Model.TextKind>
  readonly summaries: Set<string>
}

export const textState = (): TextState => ({ kinds: new Map(), summaries: new Set() })

/**
 * The text or thinking delta one committed event adds to the answer, if any; parts are told apart
 * by their step. A summary request's stream (compaction, docs/engine.md §5.12) is not the answer.
 */
export const textDeltaOf = (state: TextState, stored: Event.StoredEvent): TextDelta | undefined => {
  const fact = stored.event.fact
  if (fact.kind === "model_requested" && fact.purpose === "summary") state.summaries.add(fact.stepId)
  if (fact.kind !== "model_observed" || state.summaries.has(fact.stepId)) return undefined
  const observed = fact.event
  const key = `${fact.stepId}:${"id" in observed ? String(observed.id) : ""}`
  if (observed.kind === "part_started") {
    state.kinds.set(key, observed.textKind)
    return undefined
  }
  if (observed.kind !== "part_delta" || observed.text === "") return undefined
  return { kind: state.kinds.get(key) ?? "text", text: observed.text }
}

/**
 * What `pick` gives of each event of `events` (an undefined skipped), in order. Its `return` returns
 * the events' iterator at once, which ends a `next` waiting on it (an async generator would queue
 * the `return` behind that `next`, until the run's next commit).
 */
const picked = <A>(events: AsyncIterable<Event.StoredEvent>, pick: (stored: Event.StoredEvent) => A | undefined): AsyncIterableIterator<A> => {
  const source = events[Symbol.asyncIterator]()
  const pull = async (): Promise<IteratorResult<A, undefined>> => {
    for (;;) {
      const result = await source.next()
      if (result.done === true) return { done: true, value: undefined }
      const value = pick(result.value)
      if (value !== undefined) return { done: false, value }
    }
  }
  // Calls of `next` made before the last settled are served in the order they were made, as an
  // async generator serves them (a call whose events were all skipped must not pull behind later ones).
  let last: Promise<unknown> = Promise.resolve()
  const next = (): Promise<IteratorResult<A, undefined>> => {
    const result = last.then(pull)
    last = result.catch(() => undefined)
    return result
  }
  const iterator: AsyncIterableIterator<A> = {
    next,
    return: async () => {
      await source.return?.()
      return { done: true, value: undefined }
    },
    [Symbol.asyncIterator]: () => iterator,
  }
  return iterator
}

/** The text and thinking deltas of `events`, in order. */
export const textAndThinkingOf = (events: AsyncIterable<Event.StoredEvent>): AsyncIterableIterator<TextDelta> => {
  const state = textState()
  return picked(events, (stored) => textDeltaOf(state, stored))
}

/** The answer's text deltas of `events`, thinking excluded. */
export const textOf = (events: AsyncIterable<Event.StoredEvent>): AsyncIterableIterator<string> => {
  const state = textState()
  return picked(events, (stored) => {
    const delta = textDeltaOf(state, stored)
    return delta?.kind === "text" ? delta.text : undefined
  })
}
