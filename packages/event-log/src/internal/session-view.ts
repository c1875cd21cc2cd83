/**
 * The state the append rules of docs/log-format.md §3.3 ask about, behind one interface with two
 * sources: `SqlView` reads rows inside the writer's transaction (PostgreSQL, under its session
 * lock), `MemoryView` answers from the writer's in-memory index (SQLite, one writer) and asks SQL
 * only what memory cannot know (ids that may belong to other sessions, sealed invocations).
 * The rules in `append.ts` are written once against this interface.
 */
import { Fact, type EventWrite, type Model } from "@maka/facts"
import { sql } from "kysely"
import * as EventLogError from "../EventLogError.ts"
import type { Dialect } from "./database.ts"
import * as InvocationState from "./invocation-state.ts"
import * as Lineage from "./lineage.ts"
import type * as LogIndex from "./log-index.ts"
import * as Rows from "./rows.ts"
import type { SqliteAccess } from "./database.ts"

export interface OpeningRef {
  readonly row: Rows.Row
  readonly fact: Fact.InvocationOpened
}

export interface Boundaries {
  readonly isOpened: boolean
  readonly isSealed: boolean
  /** The opening, when the invocation is opened and not sealed. */
  readonly opening?: OpeningRef | undefined
}

/** The non-observation facts stored under one operation id (a step id or a tool operation). */
export interface OperationFacts {
  readonly isUsed: boolean
  readonly request?: { readonly invocationId: string; readonly fact: Fact.ModelRequested } | undefined
  readonly completion?: { readonly invocationId: string; readonly output: Model.ModelStep } | undefined
  /** Whether the step completed or was interrupted. */
  readonly isResolved: boolean
  readonly dispatch?: { readonly invocationId: string; readonly fact: Fact.ToolDispatched } | undefined
  readonly isSettled: boolean
  readonly isRejected: boolean
}

export interface SessionView {
  readonly tx: Rows.Tx
  readonly dialect: Dialect
  readonly boundaries: (sessionId: string, invocationId: string) => Promise<Boundaries>
  readonly operation: (sessionId: string, operationId: string) => Promise<OperationFacts>
  readonly hasUnsealedOpening: (sessionId: string) => Promise<boolean>
  readonly pendingPause: (sessionId: string) => Promise<Lineage.PendingPause | undefined>
  readonly hasUnresolvedRequest: (sessionId: string, invocationId: string, purpose: Model.ModelPurpose) => Promise<boolean>
  readonly isSteeringDelivered: (sessionId: string, messageId: string) => Promise<boolean>
  /** Whether the session holds an archive of the settled result `settledEventId` (one indexed lookup). */
  readonly isArchived: (sessionId: string, settledEventId: string) => Promise<boolean>
  readonly highWater: (sessionId: string) => Promise<number>
  readonly invocationState: (sessionId: string, invocationId: string) => Promise<InvocationState.InvocationState>
  /**
   * Whether an opening of `invocationId` may leave its boundaries to the insert: true when the view
   * knows no opening of it in the session and the unique index on (invocation id, boundary kind)
   * refuses a second opening anywhere in the log, so a refused write reads them then (`appendBatch`).
   */
  readonly opensUnread?: (sessionId: string, invocationId: string) => Promise<boolean>
}

/** The operation ids the append rules ask about for `fact` (docs/log-format.md §3.3). */
const operationsNamedBy = (fact: Fact.Fact): ReadonlyArray<string> => {
  const own = Fact.operationKey(fact)
  const ids = own === undefined ? [] : [own]
  if ((fact.kind === "tool_dispatched" || fact.kind === "tool_rejected") && fact.call.origin.kind === "provider") {
    ids.push(fact.call.origin.stepId)
  }
  if (fact.kind === "context_checkpoint_recorded") ids.push(fact.checkpoint.summaryStepId)
  return ids
}

const NO_OPERATION: OperationFacts = { isUsed: false, isResolved: false, isSettled: false, isRejected: false }

const wrongKind = (row: Rows.Row, kind: string) =>
  EventLogError.make({ _tag: "Decode", message: `event ${row.eventId} at ${row.sequence} is not ${kind}` })

const requestOf = (row: Rows.Row): Fact.ModelRequested => {
  const fact = Rows.decode(row).fact
  if (fact.kind !== "model_requested") throw wrongKind(row, "model_requested")
  return fact
}

const openingOf = (row: Rows.Row): Fact.InvocationOpened => {
  const fact = Rows.decode(row).fact
  if (fact.kind !== "invocation_opened") throw wrongKind(row, "invocation_opened")
  return fact
}

const completionOf = (row: Rows.Row): Model.ModelStep => {
  const fact = Rows.decode(row).fact
  if (fact.kind !== "model_completed") throw wrongKind(row, "model_completed")
  return fact.output
}

const dispatchOf = (row: Rows.Row): Fact.ToolDispatched => {
  const fact = Rows.decode(row).fact
  if (fact.kind !== "tool_dispatched") throw wrongKind(row, "tool_dispatched")
  return fact
}

const OPERATION_ROWS = `SELECT sequence, event_id, session_id, turn_id, run_id, invocation_id, kind, operation_id, event_json
  FROM event_log WHERE operation_id = ? AND kind <> 'model_observed' ORDER BY sequence`

/** The rule state read from rows inside the writer's transaction. */
/** A unique index over one key of one kind of event (docs/log-format.md §3.2). */
interface IndexedKey {
  readonly kind: string
  readonly jsonPath: string
  readonly column: string
}

const INDEXED = {
  steering: { kind: "message_steered", jsonPath: "$.fact.message.messageId", column: "steering_message_id" },
  archive: { kind: "tool_result_archived", jsonPath: "$.fact.placeholder.identity.runtimeEventId", column: "archived_event_id" },
} as const satisfies Record<string, IndexedKey>

export class SqlView implements SessionView {
  readonly tx: Rows.Tx
  readonly dialect: Dialect
  readonly #sqlite: SqliteAccess | undefined

  constructor(tx: Rows.Tx, dialect: Dialect, sqlite?: SqliteAccess) {
    this.tx = tx
    this.dialect = dialect
    this.#sqlite = sqlite
  }

  /**
   * An invocation's boundaries as this transaction read them: they change only when it appends the
   * invocation's opening or terminal (`inserted`), so a batch of one invocation reads them once.
   */
  readonly #boundaries = new Map<string, Boundaries>()

  async boundaries(_sessionId: string, invocationId: string): Promise<Boundaries> {
    const known = this.#boundaries.get(invocationId)
    if (known !== undefined) return known
    await this.beforeRead()
    const { opening, terminal } = await Rows.boundaries(this.tx, invocationId)
    return this.#knowBoundaries(invocationId, opening, terminal)
  }

  #knowBoundaries(invocationId: string, opening: Rows.Row | undefined, terminal: Rows.Row | undefined): Boundaries {
    const boundaries: Boundaries = {
      isOpened: opening !== undefined,
      isSealed: terminal !== undefined,
      opening:
        opening === undefined || terminal !== undefined ? undefined : { row: opening, fact: openingOf(opening) },
    }
    this.#boundaries.set(invocationId, boundaries)
    return boundaries
  }

  /**
   * Rows this transaction read or appended, by event id (`null`: read, not stored) and by operation
   * (its non-observation rows): what `prefetch` read in one statement and what the batch appended
   * since. The batch holds its sessions' locks, so no other writer adds rows of its sessions. Another
   * session may commit a row with one of these ids meanwhile (a collision of ids across sessions):
   * as between any read and the insert after it, the unique indexes refuse what they cover (the
   * same event id, or the same operation and kind); the rules' look-ups see it only from the next batch.
   */
  readonly #events = new Map<string, Rows.Row | null>()
  readonly #operations = new Map<string, Array<Rows.Row>>()

  /**
   * Runs before this view reads rows it does not hold: on PostgreSQL the batch's validated rows wait
   * for one multi-row insert, which must land before anything reads the log (`appendBatch`).
   */
  beforeRead: () => Promise<void> = () => Promise.resolve()

  /** A row this transaction appended: an opening or a terminal changes its invocation's boundaries. */
  inserted(row: Rows.Row): void {
    if (row.kind === "invocation_opened" || row.kind === "invocation_ended") this.#boundaries.delete(row.invocationId)
    if (this.#events.has(row.eventId)) this.#events.set(row.eventId, row)
    if (row.operationId !== null && row.kind !== "model_observed") this.#operations.get(row.operationId)?.push(row)
  }

  /**
   * Reads, in one statement, what the rules will ask about `writes` (taken under their sessions'
   * locks): the stored row of each event id (the replay check), the rows of each operation they
   * name, and their invocations' boundaries. A batch then reads them once, not once per write.
   */
  async prefetch(writes: ReadonlyArray<EventWrite.EventWrite>): Promise<void> {
    const eventIds = [...new Set(writes.map((write) => write.event.id))].filter((id) => !this.#events.has(id))
    const operationIds = [...new Set(writes.flatMap((write) => operationsNamedBy(write.event.fact)))].filter(
      (id) => !this.#operations.has(id),
    )
    const invocationIds = [...new Set(writes.map((write) => write.event.invocation.invocationId))].filter(
      (id) => !this.#boundaries.has(id),
    )
    if (eventIds.length === 0 && operationIds.length === 0 && invocationIds.length === 0) return
    const rows = await Rows.byEventsOrOperations(this.tx, eventIds, operationIds, invocationIds)
    for (const id of eventIds) this.#events.set(id, null)
    // Only the operations read now: a row also matched by its event id may name one read before.
    const read = new Map(operationIds.map((id): [string, Array<Rows.Row>] => [id, []]))
    for (const [id, rows] of read) this.#operations.set(id, rows)
    const found = new Map(invocationIds.map((id) => [id, { opening: undefined as Rows.Row | undefined, terminal: undefined as Rows.Row | undefined }]))
    for (const row of rows) {
      if (this.#events.get(row.eventId) === null) this.#events.set(row.eventId, row)
      if (row.operationId !== null && row.kind !== "model_observed") read.get(row.operationId)?.push(row)
      const boundaries = found.get(row.invocationId)
      if (boundaries !== undefined && row.kind === "invocation_opened") boundaries.opening = row
      if (boundaries !== undefined && row.kind === "invocation_ended") boundaries.terminal = row
    }
    for (const [id, { opening, terminal }] of found) this.#knowBoundaries(id, opening, terminal)
  }

  /** The stored row of `eventId`, as this transaction knows it, or read now. */
  async byEventId(eventId: string): Promise<Rows.Row | undefined> {
    const known = this.#events.get(eventId)
    if (known !== undefined) return known ?? undefined
    await this.beforeRead()
    return Rows.byEventId(this.tx, eventId)
  }

  async #operationRows(operationId: string): Promise<ReadonlyArray<Rows.Row>> {
    const known = this.#operations.get(operationId)
    if (known !== undefined) return known
    await this.beforeRead()
    // The hot look-up of a new step or operation id: a prepared statement where SQLite serves it.
    if (this.#sqlite !== undefined) {
      return this.#sqlite.statement(OPERATION_ROWS).all(operationId).map(Rows.checkedRow)
    }
    return Rows.byOperation(this.tx, operationId)
  }

  async operation(_sessionId: string, operationId: string): Promise<OperationFacts> {
    const rows = await this.#operationRows(operationId)
    if (rows.length === 0) return NO_OPERATION
    const request = rows.find((row) => row.kind === "model_requested")
    const completion = rows.find((row) => row.kind === "model_completed")
    const dispatch = rows.find((row) => row.kind === "tool_dispatched")
    return {
      isUsed: true,
      request: request === undefined ? undefined : { invocationId: request.invocationId, fact: requestOf(request) },
      completion: completion === undefined ? undefined : { invocationId: completion.invocationId, output: completionOf(completion) },
      isResolved: rows.some((row) => row.kind === "model_completed" || row.kind === "model_interrupted"),
      dispatch: dispatch === undefined ? undefined : { invocationId: dispatch.invocationId, fact: dispatchOf(dispatch) },
      isSettled: rows.some((row) => row.kind === "tool_settled"),
      isRejected: rows.some((row) => row.kind === "tool_rejected"),
    }
  }

  async hasUnsealedOpening(sessionId: string): Promise<boolean> {
    return (await Rows.unsealedOpenings(this.tx, sessionId, 1)).length > 0
  }

  pendingPause(sessionId: string): Promise<Lineage.PendingPause | undefined> {
    return Lineage.pendingPause(this.tx, sessionId)
  }

  async hasUnresolvedRequest(_sessionId: string, invocationId: string, purpose: Model.ModelPurpose): Promise<boolean> {
    // The invocation's requests without a completion or an interruption, by index; few at most.
    const rows = await this.tx
      .selectFrom("event_log as request")
      .select(["request.sequence", "request.event_id", "request.event_json"])
      .where("request.invocation_id", "=", invocationId)
      .where(sql<boolean>`request.kind = 'model_requested'`)
      .where(({ not, exists, selectFrom }) =>
        not(
          exists(
            selectFrom("event_log as outcome")
              .select("outcome.sequence")
              .whereRef("outcome.operation_id", "=", "request.operation_id")
              .where(sql<boolean>`outcome.kind IN ('model_completed', 'model_interrupted')`)
              .where(sql<boolean>`outcome.kind <> 'model_observed'`),
          ),
        ),
      )
      .execute()
    return rows.some(
      (row) =>
        requestOf({
          sequence: Rows.toNumber(row.sequence),
          eventId: row.event_id,
          sessionId: "",
          turnId: "",
          runId: "",
          invocationId,
          kind: "model_requested",
          operationId: null,
          json: row.event_json,
        }).purpose === purpose,
    )
  }

  isSteeringDelivered(sessionId: string, messageId: string): Promise<boolean> {
    return this.#holds(sessionId, INDEXED.steering, messageId)
  }

  isArchived(sessionId: string, settledEventId: string): Promise<boolean> {
    return this.#holds(sessionId, INDEXED.archive, settledEventId)
  }

  /**
   * Whether the session holds an event of the key's kind whose key is `value`, in one descent of
   * the key's unique index: an expression index on SQLite (the expression spelled exactly as the
   * index's), a generated column on PostgreSQL; the kind is a literal, as in the partial index.
   */
  async #holds(sessionId: string, key: IndexedKey, value: string): Promise<boolean> {
    const column = this.dialect === "sqlite" ? sql<string>`json_extract(event_json, ${sql.lit(key.jsonPath)})` : sql.ref(key.column)
    const found = await this.tx
      .selectFrom("event_log")
      .select("sequence")
      .where("session_id", "=", sessionId)
      .where(sql<boolean>`kind = ${sql.lit(key.kind)}`)
      .where(column, "=", value)
      .executeTakeFirst()
    return found !== undefined
  }

  highWater(sessionId: string): Promise<number> {
    return Rows.sessionHighWater(this.tx, sessionId)
  }

  async invocationState(_sessionId: string, invocationId: string): Promise<InvocationState.InvocationState> {
    return InvocationState.fold((await Rows.ofInvocation(this.tx, invocationId)).map(Rows.stored))
  }
}

/**
 * The rule state from the writer's in-memory index. Every answer equals what `SqlView` would read
 * in the same transaction; what the index does not hold (another session's ids, a sealed
 * invocation, the details of a pending pause) is read through `SqlView`.
 */
export class MemoryView implements SessionView {
  readonly tx: Rows.Tx
  readonly dialect: Dialect
  readonly #index: LogIndex.LogIndex
  readonly #sql: SqlView

  constructor(index: LogIndex.LogIndex, sqlView: SqlView) {
    this.tx = sqlView.tx
    this.dialect = sqlView.dialect
    this.#index = index
    this.#sql = sqlView
  }

  #session(sessionId: string): Promise<LogIndex.SessionIndex> {
    return this.#index.session(this.tx, this.dialect, sessionId)
  }

  async opensUnread(sessionId: string, invocationId: string): Promise<boolean> {
    return (await this.#session(sessionId)).live.get(invocationId)?.opening === undefined
  }

  async boundaries(sessionId: string, invocationId: string): Promise<Boundaries> {
    const live = (await this.#session(sessionId)).live.get(invocationId)
    if (live?.opening === undefined) return this.#sql.boundaries(sessionId, invocationId)
    return { isOpened: true, isSealed: false, opening: live.opening }
  }

  async operation(sessionId: string, operationId: string): Promise<OperationFacts> {
    const live = (await this.#session(sessionId)).operations.get(operationId)
    if (live === undefined) return this.#sql.operation(sessionId, operationId)
    const state = live.state
    const request = state.requests.get(operationId)
    const completion = state.completions.get(operationId)
    const dispatch = state.dispatched.get(operationId)
    const invocationId = live.invocationId
    return {
      isUsed: true,
      request: request === undefined ? undefined : { invocationId, fact: request },
      completion: completion === undefined ? undefined : { invocationId, output: completion },
      isResolved: state.resolvedSteps.has(operationId),
      dispatch: dispatch === undefined ? undefined : { invocationId, fact: dispatch },
      isSettled: state.settled.has(operationId),
      isRejected: state.rejected.has(operationId),
    }
  }

  async hasUnsealedOpening(sessionId: string): Promise<boolean> {
    for (const live of (await this.#session(sessionId)).live.values()) if (live.opening !== undefined) return true
    return false
  }

  async pendingPause(sessionId: string): Promise<Lineage.PendingPause | undefined> {
    const session = await this.#session(sessionId)
    return session.latestOpeningOutcome === "handoff_paused" ? this.#sql.pendingPause(sessionId) : undefined
  }

  async hasUnresolvedRequest(sessionId: string, invocationId: string, purpose: Model.ModelPurpose): Promise<boolean> {
    const live = (await this.#session(sessionId)).live.get(invocationId)
    if (live === undefined) return this.#sql.hasUnresolvedRequest(sessionId, invocationId, purpose)
    for (const pending of live.unresolved.values()) if (pending === purpose) return true
    return false
  }

  async isSteeringDelivered(sessionId: string, messageId: string): Promise<boolean> {
    return (await this.#session(sessionId)).steering.has(messageId)
  }

  isArchived(sessionId: string, settledEventId: string): Promise<boolean> {
    return this.#sql.isArchived(sessionId, settledEventId)
  }

  async highWater(sessionId: string): Promise<number> {
    return (await this.#session(sessionId)).highWater
  }

  async invocationState(sessionId: string, invocationId: string): Promise<InvocationState.InvocationState> {
    const live = (await this.#session(sessionId)).live.get(invocationId)
    return live === undefined ? this.#sql.invocationState(sessionId, invocationId) : live.state
  }
}
