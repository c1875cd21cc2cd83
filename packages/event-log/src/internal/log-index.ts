/**
 * The writer's in-memory index of the log (docs/architecture.md §5, §12): on SQLite the writer
 * lease guarantees that this process alone appends, so the state the append rules of
 * docs/log-format.md §3.3 and the safety gate of docs/log-format.md §3.7 ask about is kept per
 * session in memory, loaded by one read of the session on first touch and then kept current by the
 * writer's own commits. A transaction's changes are applied as its writes are inserted; when it does not commit,
 * every session it touched is dropped and reloads from the store on its next use, so a refused or
 * rolled-back batch leaves nothing behind.
 *
 * The index keeps, per session: the high water, the steering message ids, each live invocation's
 * folded state (with its opening row, its unresolved requests and the steps that observed a
 * provider-executed call), the operations of live invocations, the latest opening and how it ended,
 * and the gate's verdict on every invocation not known to be safe. Sealed safe invocations cost
 * nothing; questions the index cannot answer (ids of other sessions, sealed invocations) go to SQL.
 */
import { Fact, Model, type Event } from "@maka/facts"
import type { Dialect } from "./database.ts"
import * as InvocationState from "./invocation-state.ts"
import * as Rows from "./rows.ts"
import * as Safety from "./safety.ts"

/** How many sessions one log keeps in memory; the least recently used is dropped first. */
export const MAX_SESSIONS = 1_024

/** How many sessions' loaded rows are kept for their context read, and for how long at most. */
export const MAX_PRIMED = 4
export const PRIMED_TTL_MS = 10_000

export interface LiveInvocation {
  readonly invocationId: string
  readonly state: InvocationState.Accumulator
  opening?: { readonly row: Rows.Row; readonly fact: Fact.InvocationOpened }
  /** Requests without completion or interruption, by step id, with their purpose. */
  readonly unresolved: Map<string, Model.ModelPurpose>
  /** Steps with an observed provider-executed tool call. */
  readonly providerCallSteps: Set<string>
}

/** A loaded row as the context read takes it. */
const sessionRow = (row: Rows.Row): Rows.SessionRow => [row.sequence, row.kind === "model_observed" ? row.invocationId : null, row.json]

/** Every row of one session as a read transaction loaded it, up to `highWater`. */
export interface PrimedRows {
  readonly sessionId: string
  readonly highWater: number
  readonly rows: ReadonlyArray<Rows.SessionRow>
}

const liveInvocation = (invocationId: string): LiveInvocation => ({
  invocationId,
  state: new InvocationState.Accumulator(),
  unresolved: new Map(),
  providerCallSteps: new Set(),
})

export class SessionIndex {
  highWater = 0
  readonly steering = new Set<string>()
  readonly live = new Map<string, LiveInvocation>()
  /** Operation ids (step ids and tool operations) of live invocations. */
  readonly operations = new Map<string, LiveInvocation>()
  latestOpening: string | undefined
  /** How the latest opening ended (the outcome kind), if it did. */
  latestOpeningOutcome: string | undefined
  /** The gate's verdict on every invocation not known to be safe, in log order. */
  readonly #notSafe = new Map<string, Safety.InvocationStatus>()

  statuses(): Iterable<readonly [string, Safety.InvocationStatus]> {
    return this.#notSafe
  }

  #liveOf(invocationId: string): LiveInvocation {
    let entry = this.live.get(invocationId)
    if (entry === undefined) {
      entry = liveInvocation(invocationId)
      this.live.set(invocationId, entry)
      this.#notSafe.set(invocationId, Safety.UNSAFE)
    }
    return entry
  }

  /** Adds one committed (or, inside the writer's transaction, inserted) event. */
  add(stored: Event.StoredEvent, row: Rows.Row): void {
    if (stored.sequence > this.highWater) this.highWater = stored.sequence
    const fact = stored.event.fact
    const invocationId = stored.event.invocation.invocationId
    if (fact.kind === "model_observed") {
      if (Safety.isProviderCallObservation(fact)) this.#liveOf(invocationId).providerCallSteps.add(fact.stepId)
      return
    }
    const entry = this.#liveOf(invocationId)
    entry.state.add(stored)
    switch (fact.kind) {
      case "invocation_opened":
        entry.opening = { row, fact }
        this.latestOpening = invocationId
        this.latestOpeningOutcome = undefined
        return
      case "invocation_ended":
        this.#seal(entry, fact)
        return
      case "message_steered":
        this.steering.add(fact.message.messageId)
        return
      case "model_requested":
        entry.unresolved.set(fact.stepId, fact.purpose)
        break
      case "model_completed":
      case "model_interrupted":
        entry.unresolved.delete(fact.stepId)
        break
      default:
        break
    }
    const operationId = Fact.operationKey(fact)
    if (operationId !== undefined) this.operations.set(operationId, entry)
  }

  /** A terminal: the invocation's verdict is kept and its live state dropped. Payloads were checked on insert. */
  #seal(entry: LiveInvocation, fact: Fact.InvocationEnded): void {
    const status = Safety.invocationStatus(entry.state, {
      payloadMatches: () => true,
      providerCallObserved: (stepId) => entry.providerCallSteps.has(stepId),
    })
    if (status.kind === "safe") this.#notSafe.delete(entry.invocationId)
    else this.#notSafe.set(entry.invocationId, status)
    if (this.latestOpening === entry.invocationId) this.latestOpeningOutcome = fact.outcome.kind
    this.live.delete(entry.invocationId)
    // Stryker disable next-line all: releases memory only; a sealed operation's rows answer the same from SQL
    for (const operationId of [...entry.state.requests.keys(), ...entry.state.dispatched.keys(), ...entry.state.settled.keys(), ...entry.state.rejected]) {
      // Stryker disable next-line all: as above
      if (this.operations.get(operationId) === entry) this.operations.delete(operationId)
    }
  }

  /**
   * Loads a session from its stored rows: one read of its facts, then the gate's evidence by index.
   * With `onRows`, the read takes every row of the session (observations too) and hands them, with
   * their high water, to `onRows`: the context read that follows takes them instead of reading the
   * session again.
   */
  static async load(
    tx: Rows.Tx,
    dialect: Dialect,
    sessionId: string,
    onRows?: (rows: ReadonlyArray<Rows.SessionRow>, highWater: number) => void,
  ): Promise<SessionIndex> {
    const index = new SessionIndex()
    const all = onRows === undefined ? undefined : await Rows.ofSession(tx, sessionId)
    // Stryker disable next-line ObjectLiteral,BooleanLiteral: reading the observations too costs time only; the gate's evidence is read by index below
    const rows = all === undefined ? await Rows.ofSession(tx, sessionId, { withObservations: false }) : all.filter((row) => row.kind !== "model_observed")
    const groups = new Map<string, { state: InvocationState.Accumulator; rows: Array<Rows.Row>; stored: Array<Event.StoredEvent> }>()
    for (const row of rows) {
      const stored = Rows.stored(row)
      let group = groups.get(row.invocationId)
      if (group === undefined) {
        group = { state: new InvocationState.Accumulator(), rows: [], stored: [] }
        groups.set(row.invocationId, group)
      }
      group.state.add(stored)
      group.rows.push(row)
      group.stored.push(stored)
    }
    const { statuses, observed } = await Safety.statusesOf(
      tx,
      dialect,
      [...groups].map(([invocationId, group]) => [invocationId, group.state] as const),
    )
    for (const [invocationId, group] of groups) {
      if (group.state.terminal === undefined) {
        for (let position = 0; position < group.stored.length; position++) index.add(group.stored[position]!, group.rows[position]!)
        const entry = index.#liveOf(invocationId)
        for (const stepId of InvocationState.incompleteSteps(entry.state)) {
          if (observed.has(stepId)) entry.providerCallSteps.add(stepId)
        }
        continue
      }
      const status = statuses.get(invocationId) ?? Safety.UNSAFE
      if (status.kind !== "safe") index.#notSafe.set(invocationId, status)
      for (const stored of group.stored) {
        const fact = stored.event.fact
        if (fact.kind === "message_steered") index.steering.add(fact.message.messageId)
        if (fact.kind === "invocation_opened") {
          index.latestOpening = invocationId
          index.latestOpeningOutcome = undefined
        }
        if (fact.kind === "invocation_ended" && index.latestOpening === invocationId) index.latestOpeningOutcome = fact.outcome.kind
      }
    }
    index.highWater = await Rows.sessionHighWater(tx, sessionId)
    if (all !== undefined) onRows?.(all.map(sessionRow), index.highWater)
    return index
  }
}

/** The index of one log (one `Database`), valid while `isValid` (the writer lease is held). */
export class LogIndex {
  readonly #sessions = new Map<string, SessionIndex>()
  readonly #isValid: () => boolean
  /**
   * The rows of the sessions read transactions loaded, each kept for one context read: a session
   * touched first by a read (the engine's admission check) is then read once, not twice. At most
   * `MAX_PRIMED` sessions' rows are kept, each until taken, replaced or `PRIMED_TTL_MS` old.
   */
  readonly #primed = new Map<string, { readonly rows: PrimedRows; readonly expiry: ReturnType<typeof setTimeout> }>()

  constructor(isValid: () => boolean) {
    this.#isValid = isValid
  }

  get isValid(): boolean {
    if (this.#isValid()) return true
    // A lost lease is not held again: nothing in memory answers after it (`of`), so these two
    // lines release memory only (test/LeaseLost.test.ts checks what the reads see instead).
    // Stryker disable next-line all: releases memory only
    this.#sessions.clear()
    // Stryker disable next-line all: releases memory only
    for (const sessionId of [...this.#primed.keys()]) this.takePrimed(sessionId)
    return false
  }

  /** The session's index, loaded on first use (inside `tx`, so a writer sees its own inserts). */
  async session(tx: Rows.Tx, dialect: Dialect, sessionId: string): Promise<SessionIndex> {
    const cached = this.#sessions.get(sessionId)
    if (cached !== undefined) {
      this.#sessions.delete(sessionId)
      this.#sessions.set(sessionId, cached)
      return cached
    }
    // Only a read keeps its rows (a write's transaction may insert rows and then not commit), and
    // only one that has not read them already (a context read loads the index after its own read).
    const served = byTransaction.get(tx)
    const keep = served !== undefined && served.isRead && !served.rowsRead
      ? (rows: ReadonlyArray<Rows.SessionRow>, highWater: number) => this.#prime({ sessionId, highWater, rows })
      : undefined
    const loaded = await SessionIndex.load(tx, dialect, sessionId, keep)
    this.#sessions.set(sessionId, loaded)
    if (this.#sessions.size > MAX_SESSIONS) {
      const oldest = this.#sessions.keys().next()
      if (oldest.done !== true) this.#sessions.delete(oldest.value)
    }
    return loaded
  }

  /** The session's index if it is loaded. */
  loaded(sessionId: string): SessionIndex | undefined {
    return this.#sessions.get(sessionId)
  }

  /** Drops sessions; each reloads from the store on its next use. */
  evict(sessionIds: Iterable<string>): void {
    for (const sessionId of sessionIds) this.#sessions.delete(sessionId)
  }

  /** The rows a read loaded for `sessionId`, once: they are dropped as they are taken. */
  takePrimed(sessionId: string): PrimedRows | undefined {
    const primed = this.#primed.get(sessionId)
    if (primed === undefined) return undefined
    clearTimeout(primed.expiry)
    this.#primed.delete(sessionId)
    return primed.rows
  }

  #prime(rows: PrimedRows): void {
    this.takePrimed(rows.sessionId)
    const expiry = setTimeout(() => {
      if (this.#primed.get(rows.sessionId)?.rows === rows) this.#primed.delete(rows.sessionId)
    }, PRIMED_TTL_MS)
    // Stryker disable next-line all: a pending expiry must not keep the process alive
    expiry.unref?.()
    this.#primed.set(rows.sessionId, { rows, expiry })
    if (this.#primed.size > MAX_PRIMED) this.takePrimed(this.#primed.keys().next().value!)
  }

  get size(): number {
    return this.#sessions.size
  }
}

/** A transaction the index serves: whether it only reads, and whether it read a session's rows. */
interface Served {
  readonly index: LogIndex
  /** A read keeps the rows its loads read (see `session`). */
  readonly isRead: boolean
  /** It read a session's rows itself (the context read): a load in it keeps none. */
  rowsRead: boolean
}

/**
 * The transactions the index serves, from `register` at their begin to `release` at their end. A
 * map with explicit removal, not a weak one keyed by each transaction: a weak table's entries for
 * transactions that died are cleared by the next collection, and its first insertion after it then
 * rebuilt the table, 50 to 90 µs charged to whichever read came first (a context read of an empty
 * session measured 0.115 ms after a young-generation collection, 0.025 ms without).
 */
const byTransaction = new Map<Rows.Tx, Served>()

/** Notes that `tx` read a session's rows (the context read), so an index load in it keeps none. */
export const noteRowsRead = (tx: Rows.Tx): void => {
  const served = byTransaction.get(tx)
  if (served !== undefined) served.rowsRead = true
}

/** Serves `tx` from `index` (called by the database handle as it begins a transaction). */
export const register = (tx: Rows.Tx, index: LogIndex, isRead = false): void => {
  byTransaction.set(tx, { index, isRead, rowsRead: false })
}

/** Ends the serving of `tx` (called by the database handle when its body has settled). */
export const release = (tx: Rows.Tx): void => {
  byTransaction.delete(tx)
}

/** How many transactions the index serves now (none between transactions). */
export const servedTransactions = (): number => byTransaction.size

/** Stops serving `tx` from memory (a write validated by SQL alone). */
export const forget = (tx: Rows.Tx): void => {
  byTransaction.delete(tx)
}

/** The index serving `tx`, when there is one and the writer lease still holds. */
export const of = (tx: Rows.Tx): LogIndex | undefined => {
  const index = byTransaction.get(tx)?.index
  return index !== undefined && index.isValid ? index : undefined
}
