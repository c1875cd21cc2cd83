/**
 * `appendBatch`: one write transaction that validates each write against the log and the earlier
 * writes of the batch, in the order of docs/log-format.md §3.3 (exact replay, sealed, opening rules,
 * per-kind validators, transitions, clean completion), then inserts the row and its raw payload.
 * A write is inserted before the next one is validated, so later writes see earlier ones (on
 * PostgreSQL its row waits for the batch's multi-row insert, and the rules see it in the batch's
 * cached rows until then). The rules
 * are written once against `SessionView`: the writer's in-memory index on SQLite, rows read back
 * under the session lock on PostgreSQL.
 */
import { Archive, Canonical, EventWrite, Fact, Input, type Event } from "@maka/facts"
import { Result } from "effect"
import * as EventLogError from "../EventLogError.ts"
import type { Database } from "./database.ts"
import { faultPoint } from "./fault.ts"
import * as InvocationState from "./invocation-state.ts"
import * as Lineage from "./lineage.ts"
import * as LogIndex from "./log-index.ts"
import * as Rows from "./rows.ts"
import * as SessionView from "./session-view.ts"

const invalid = EventLogError.invalidTransition
const reject = (rejection: EventLogError.Rejection) => EventLogError.rejected(rejection)

/** Rule 3: the opening of any non-opening fact exists and names the identical invocation. */
const requireOpening = (event: Event.RuntimeEvent, opening: SessionView.OpeningRef | undefined): SessionView.OpeningRef => {
  if (opening === undefined) throw invalid("the invocation has no opening")
  const invocation = event.invocation
  const row = opening.row
  if (row.sessionId !== invocation.sessionId || row.turnId !== invocation.turnId || row.runId !== invocation.runId) {
    throw invalid("the invocation differs from its opening")
  }
  return opening
}

const validateOpening = async (view: SessionView.SessionView, event: Event.RuntimeEvent, fact: Fact.InvocationOpened) => {
  const sessionId = event.invocation.sessionId
  const pending = await view.pendingPause(sessionId)
  if (pending !== undefined) {
    await Lineage.checkReservedSuccessor(view.tx, pending, event, fact)
  } else if (fact.input.kind === "handoff") {
    throw invalid("no sealed handoff pause awaits this successor")
  }
  if (await view.hasUnsealedOpening(sessionId)) throw reject({ _tag: "SessionBusy" })
  if (fact.input.kind === "continuation") {
    await Lineage.checkContinuationOpening(view, event, fact.input, fact.configuration)
  }
}

const providerCall = async (
  view: SessionView.SessionView,
  event: Event.RuntimeEvent,
  fact: Fact.ToolDispatched | Fact.ToolRejected,
): Promise<void> => {
  const sessionId = event.invocation.sessionId
  const existing = await view.operation(sessionId, fact.operationId)
  if (fact.call.origin.kind === "standalone") {
    if (existing.isUsed) throw invalid("the operation id is already used")
    return
  }
  if (existing.dispatch !== undefined || existing.isRejected) {
    throw invalid("the operation is already dispatched or rejected")
  }
  const step = await view.operation(sessionId, fact.call.origin.stepId)
  if (step.request === undefined || step.completion === undefined || step.completion.invocationId !== event.invocation.invocationId) {
    throw invalid("the call names no completed step of this invocation")
  }
  if (step.request.fact.purpose !== "main") throw invalid("tool calls come only from main steps")
  const part = step.completion.output.parts.find((item) => item.kind === "tool_call" && item.id === fact.call.toolCallId)
  if (
    part === undefined ||
    part.kind !== "tool_call" ||
    part.providerExecuted ||
    part.name !== fact.name ||
    !Canonical.equal(part.input, fact.input)
  ) {
    throw invalid("the call does not match a local tool call of its step")
  }
}

const validateSettled = async (view: SessionView.SessionView, event: Event.RuntimeEvent, fact: Fact.ToolSettled) => {
  const operation = await view.operation(event.invocation.sessionId, fact.operationId)
  if (operation.dispatch === undefined || operation.dispatch.invocationId !== event.invocation.invocationId) {
    throw invalid("tool_settled needs a dispatch of the same operation in this invocation")
  }
  if (operation.isSettled) throw invalid("the operation is already settled")
}

const validateModelFollowUp = async (view: SessionView.SessionView, event: Event.RuntimeEvent, stepId: string) => {
  const step = await view.operation(event.invocation.sessionId, stepId)
  if (step.request === undefined || step.request.invocationId !== event.invocation.invocationId) {
    throw invalid("the step has no request in this invocation")
  }
  if (step.isResolved) throw invalid("the step is already completed or interrupted")
}

const validateRequested = async (
  view: SessionView.SessionView,
  event: Event.RuntimeEvent,
  fact: Fact.ModelRequested,
  opening: SessionView.OpeningRef,
) => {
  const { sessionId, invocationId } = event.invocation
  if ((await view.operation(sessionId, fact.stepId)).isUsed) throw invalid("the step id is already used")
  if (!Input.allowsPurpose(opening.fact.input, fact.purpose)) {
    throw invalid(`the opening does not allow ${fact.purpose} requests`)
  }
  if (await view.hasUnresolvedRequest(sessionId, invocationId, fact.purpose)) {
    throw invalid(`a ${fact.purpose} request is already unresolved`)
  }
}

const validateSteered = async (view: SessionView.SessionView, event: Event.RuntimeEvent, fact: Fact.MessageSteered) => {
  if (await view.isSteeringDelivered(event.invocation.sessionId, fact.message.messageId)) {
    throw invalid("the message was already delivered in this session")
  }
}

const validateCheckpoint = async (
  view: SessionView.SessionView,
  event: Event.RuntimeEvent,
  fact: Fact.ContextCheckpointRecorded,
  opening: SessionView.OpeningRef,
) => {
  const checkpoint = fact.checkpoint
  const step = await view.operation(event.invocation.sessionId, checkpoint.summaryStepId)
  const request = step.request
  if (
    request === undefined ||
    request.invocationId !== event.invocation.invocationId ||
    request.fact.purpose !== "summary" ||
    step.completion === undefined
  ) {
    throw invalid("the checkpoint needs a completed summary request of this invocation")
  }
  const requested = request.fact
  if (requested.sourceHighWater !== checkpoint.coveredThrough) throw invalid("coveredThrough differs from the summary's source")
  if (requested.sourceDigest !== checkpoint.sourceDigest) throw invalid("sourceDigest differs from the summary's source")
  if (requested.checkpointEventId !== checkpoint.previousCheckpointId) {
    throw invalid("previousCheckpointId differs from the summary's baseline")
  }
  const isCompact = opening.fact.input.kind === "context_compact"
  if ((checkpoint.mode.kind === "standalone") !== isCompact) {
    throw invalid("standalone checkpoints belong to context_compact invocations, turn checkpoints to model runs")
  }
  if (checkpoint.mode.kind === "mid_turn" && checkpoint.mode.anchorEventId !== opening.row.eventId) {
    throw invalid("a mid_turn checkpoint anchors the current opening")
  }
  if (checkpoint.coveredThrough > (await view.highWater(event.invocation.sessionId))) {
    throw invalid("coveredThrough is beyond the session's history")
  }
}

/** Archives are rare (pruning): their rule reads rows on both paths. */
const validateArchive = async (view: SessionView.SessionView, event: Event.RuntimeEvent, fact: Fact.ToolResultArchived) => {
  const tx = view.tx
  const identity = fact.placeholder.identity
  const settledRow = await Rows.byEventId(tx, identity.runtimeEventId)
  if (settledRow === undefined || settledRow.kind !== "tool_settled" || settledRow.sessionId !== event.invocation.sessionId) {
    throw invalid("the archive names no settled tool result of this session")
  }
  const settled = Rows.decode(settledRow).fact
  if (settled.kind !== "tool_settled") throw invalid("the archive names no settled tool result")
  const dispatchRow = (await Rows.byOperation(tx, settled.operationId)).find((row) => row.kind === "tool_dispatched")
  const dispatch = dispatchRow === undefined ? undefined : Rows.decode(dispatchRow).fact
  if (
    dispatch === undefined ||
    dispatch.kind !== "tool_dispatched" ||
    dispatch.call.origin.kind !== "provider" ||
    dispatch.call.toolCallId !== identity.toolCallId ||
    dispatch.name !== identity.toolName
  ) {
    throw invalid("the archive does not match the dispatch of its result")
  }
  const source: Archive.ArchiveSource =
    settled.outcome.kind === "succeeded"
      ? { kind: "projection", projection: settled.outcome.projection }
      : { kind: "failed", message: settled.outcome.message }
  const expected = Archive.prepare(identity.runtimeEventId, identity.toolCallId, identity.toolName, source)
  if (expected === undefined || !Canonical.equal(expected, fact.placeholder)) {
    throw invalid("the archive placeholder differs from the one its result produces")
  }
  if (await view.isArchived(event.invocation.sessionId, identity.runtimeEventId)) throw invalid("the result is already archived")
}

const validateTerminal = async (
  view: SessionView.SessionView,
  event: Event.RuntimeEvent,
  fact: Fact.InvocationEnded,
  opening: SessionView.OpeningRef,
) => {
  const outcome = fact.outcome
  if (outcome.kind === "completed" || outcome.kind === "context_compact_finished") {
    const state = await view.invocationState(event.invocation.sessionId, event.invocation.invocationId)
    const reason = InvocationState.unsettledReason(state)
    if (reason !== undefined) throw invalid(`a clean completion is refused: ${reason}`)
  }
  if (outcome.kind === "handoff_paused") await Lineage.checkHandoffSeal(view, event, outcome.pause, opening.row)
}

const validatePayload = (write: EventWrite.EventWrite) => {
  const fact = write.event.fact
  const success = fact.kind === "tool_settled" && fact.outcome.kind === "succeeded" ? fact.outcome : undefined
  if (success === undefined) {
    if (write.rawPayload !== undefined) throw reject({ _tag: "PayloadMismatch" })
    return
  }
  if (write.rawPayload === undefined || !EventWrite.payloadMatches(success.raw, write.rawPayload)) {
    throw reject({ _tag: "PayloadMismatch" })
  }
}

/**
 * Rules 2 and 3 for an opening (sealed, already opened), from what `view` reads of its invocation's
 * boundaries.
 */
const checkOpeningBoundaries = (boundaries: SessionView.Boundaries): void => {
  if (boundaries.isSealed) throw reject({ _tag: "Sealed" })
  if (boundaries.isOpened) throw invalid("the invocation is already opened")
}

/** Rules 2–7 for one write. */
const validate = async (view: SessionView.SessionView, write: EventWrite.EventWrite): Promise<void> => {
  const event = write.event
  const fact = event.fact
  // The writer's index: an opening of an invocation it does not know live skips the read of its
  // boundaries; the insert confirms them (see appendBatch).
  if (fact.kind === "invocation_opened" && (await view.opensUnread?.(event.invocation.sessionId, event.invocation.invocationId))) {
    validatePayload(write)
    return validateOpening(view, event, fact)
  }
  const boundaries = await view.boundaries(event.invocation.sessionId, event.invocation.invocationId)
  if (fact.kind === "invocation_opened") {
    checkOpeningBoundaries(boundaries)
    validatePayload(write)
    return validateOpening(view, event, fact)
  }
  if (boundaries.isSealed) throw reject({ _tag: "Sealed" })
  const opening = requireOpening(event, boundaries.opening)
  validatePayload(write)
  switch (fact.kind) {
    case "tool_dispatched":
    case "tool_rejected":
      return providerCall(view, event, fact)
    case "tool_settled":
      return validateSettled(view, event, fact)
    case "model_requested":
      return validateRequested(view, event, fact, opening)
    case "model_observed":
    case "model_completed":
    case "model_interrupted":
      return validateModelFollowUp(view, event, fact.stepId)
    case "message_steered":
      return validateSteered(view, event, fact)
    case "context_checkpoint_recorded":
      return validateCheckpoint(view, event, fact, opening)
    case "tool_result_archived":
      return validateArchive(view, event, fact)
    case "invocation_ended":
      return validateTerminal(view, event, fact, opening)
  }
}

/** The batch rule: a standalone checkpoint commits only with the terminal that names it. */
const checkBatchRules = (writes: ReadonlyArray<EventWrite.EventWrite>) => {
  for (const write of writes) {
    const fact = write.event.fact
    if (fact.kind !== "context_checkpoint_recorded" || fact.checkpoint.mode.kind !== "standalone") continue
    const named = writes.some((other) => {
      const terminal = other.event.fact
      return (
        terminal.kind === "invocation_ended" &&
        other.event.invocation.invocationId === write.event.invocation.invocationId &&
        terminal.outcome.kind === "context_compact_finished" &&
        terminal.outcome.outcome.kind === "compacted" &&
        terminal.outcome.outcome.checkpointId === write.event.id
      )
    })
    if (!named) throw invalid("a standalone checkpoint commits only in the batch of the terminal that names it")
  }
}

/**
 * Sessions whose row is known to exist, per SQLite database (PostgreSQL locks the row every time):
 * a session is added once a commit that wrote or found its row has landed, so a batch whose COMMIT
 * fails leaves its session to the next append's insert. At most `KNOWN_SESSIONS` are kept (the
 * least recently written is dropped first): a session that left the set costs its next append one
 * `INSERT … ON CONFLICT DO NOTHING`, and a long-running writer's memory does not grow with every
 * session it ever wrote.
 */
const knownSessionsByDatabase = new WeakMap<Database, Set<string>>()

/** How many sessions one SQLite database remembers as having their row. */
export const KNOWN_SESSIONS = 4_096

const rememberSessions = (known: Set<string>, sessionIds: Iterable<string>): void => {
  for (const sessionId of sessionIds) {
    known.delete(sessionId)
    known.add(sessionId)
  }
  if (known.size <= KNOWN_SESSIONS) return
  for (const oldest of known) {
    known.delete(oldest)
    if (known.size <= KNOWN_SESSIONS) return
  }
}

export interface AppendResult {
  readonly sequences: ReadonlyArray<number>
  /** Whether anything new was inserted (a pure replay inserts nothing). */
  readonly inserted: boolean
}

export interface AppendOptions {
  /**
   * Where the rules read the log's state: `memory` (the default where the writer's in-memory index
   * serves the database, SQLite) or `sql` (rows read back in the transaction, as on PostgreSQL).
   */
  readonly validation?: "memory" | "sql" | undefined
  /**
   * Builds the trailing writes of the batch from the sequences of its leading ones, inside the
   * transaction: a request whose source evidence covers the settlements committed with it.
   */
  readonly complete?: CompleteBatch | undefined
}

/**
 * Builds the trailing writes from the sequences of the leading ones. `priorHighWater(session)` is
 * the session's last sequence before this batch where the writer's in-memory index knows it (SQLite),
 * for a leading write's session; undefined where it does not (the rules read by SQL).
 */
export type CompleteBatch = (
  sequences: ReadonlyArray<number>,
  priorHighWater?: (sessionId: string) => number | undefined,
) => ReadonlyArray<EventWrite.EventWrite>

/**
 * Rule 0: each write is what `EventWrite.plain` or `toolSuccess` would build: its event passes the
 * fact rules (well-formed text included) and `json`, the bytes stored, is the canonical JSON of the
 * event the log validates. A hand-built write cannot store one event while the rules check another.
 */
const verifyWrites = (writes: ReadonlyArray<EventWrite.EventWrite>): ReadonlyArray<EventWrite.EventWrite> =>
  writes.map((write) => {
    const verified = EventWrite.verify(write)
    if (Result.isFailure(verified)) throw invalid(`the write is not a checked EventWrite: ${verified.failure.message}`)
    // From here on the store reads only the checked write, never the caller's object again.
    return verified.success
  })

/**
 * Validates `write` as `appendBatch` would (rules 0 and 2–7, the same code) inside the caller's
 * transaction, reading rows by SQL and inserting nothing: the store's dry run of a write
 * (`checkHandoff`). A pure replay of a stored event is not recognised: the write is new.
 */
export const checkWrite = async (tx: Rows.Tx, dialect: Database["dialect"], write: EventWrite.EventWrite): Promise<void> => {
  await validate(new SessionView.SqlView(tx, dialect), verifyWrites([write])[0]!)
}

const INSERT_SESSION = "INSERT INTO sessions (session_id, created_at) VALUES (?, ?) ON CONFLICT (session_id) DO NOTHING"
const INSERT_EVENT =
  "INSERT INTO event_log (event_id, session_id, turn_id, run_id, invocation_id, kind, operation_id, event_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
const INSERT_PAYLOAD = "INSERT INTO tool_result_payloads (event_id, payload) VALUES (?, ?)"

const lockSession = async (tx: Rows.Tx, database: Database, sessionId: string, time: number): Promise<void> => {
  if (database.sqlite !== undefined) {
    database.sqlite.statement(INSERT_SESSION).run(sessionId, time)
    return
  }
  // PostgreSQL: the session's row lock, in one statement once the row exists (rows are never deleted).
  // A new session's row is inserted (or found inserted by a concurrent writer), then locked; a lock
  // taken in the insert's own statement could miss a row committed during that statement.
  const lockRow = async () =>
    (await tx.selectFrom("sessions").select("session_id").where("session_id", "=", sessionId).forUpdate().execute()).length > 0
  if (database.dialect === "postgres" && (await lockRow())) return
  await tx
    .insertInto("sessions")
    .values({ session_id: sessionId, created_at: time })
    .onConflict((conflict) => conflict.column("session_id").doNothing())
    .execute()
  if (database.dialect === "postgres") await lockRow()
}

/** Inserts the row (rule 8) and returns its sequence: a prepared statement on SQLite. */
const insertRow = async (tx: Rows.Tx, database: Database, write: EventWrite.EventWrite): Promise<number> => {
  if (database.sqlite === undefined) return (await insertRows(tx, [write]))[0]!
  const event = write.event
  const invocation = event.invocation
  const operationId = Fact.operationKey(event.fact) ?? null
  const { lastInsertRowid } = database.sqlite
    .statement(INSERT_EVENT)
    .run(event.id, invocation.sessionId, invocation.turnId, invocation.runId, invocation.invocationId, event.fact.kind, operationId, write.json)
  if (write.rawPayload !== undefined) database.sqlite.statement(INSERT_PAYLOAD).run(event.id, write.rawPayload)
  return Rows.toNumber(lastInsertRowid)
}

/** Rule 1: the sequence of a stored identical event, `EventConflict` for a different body, or undefined. */
const replayed = async (tx: Rows.Tx, sqlView: SessionView.SqlView, write: EventWrite.EventWrite): Promise<number | undefined> => {
  const existing = await sqlView.byEventId(write.event.id)
  if (existing === undefined) return undefined
  if (existing.json !== write.json) throw reject({ _tag: "EventConflict" })
  // A row of this batch still waiting for its insert lands first: its payload and its sequence.
  await sqlView.beforeRead()
  const payload = await Rows.payloadOf(tx, write.event.id)
  if (payload !== write.rawPayload) throw reject({ _tag: "EventConflict" })
  return existing.sequence
}

/**
 * Inserts `writes` in one statement per 1,000 rows (PostgreSQL), then their raw payloads; returns
 * their sequences, handed out in the order of the rows.
 */
const insertRows = async (tx: Rows.Tx, writes: ReadonlyArray<EventWrite.EventWrite>): Promise<ReadonlyArray<number>> => {
  const sequences = new Map<string, number>()
  for (let start = 0; start < writes.length; start += ROWS_PER_INSERT) {
    const part = writes.slice(start, start + ROWS_PER_INSERT)
    const rows = await tx
      .insertInto("event_log")
      .values(
        part.map(({ event, json }) => ({
          event_id: event.id,
          session_id: event.invocation.sessionId,
          turn_id: event.invocation.turnId,
          run_id: event.invocation.runId,
          invocation_id: event.invocation.invocationId,
          kind: event.fact.kind,
          operation_id: Fact.operationKey(event.fact) ?? null,
          event_json: json,
        })),
      )
      .returning(["sequence", "event_id"])
      .execute()
    for (const row of rows) sequences.set(row.event_id, Rows.toNumber(row.sequence))
  }
  const payloads = writes.flatMap((write) => (write.rawPayload === undefined ? [] : [{ event_id: write.event.id, payload: write.rawPayload }]))
  if (payloads.length > 0) await tx.insertInto("tool_result_payloads").values(payloads).execute()
  return writes.map((write) => sequences.get(write.event.id)!)
}

const ROWS_PER_INSERT = 1_000

/**
 * The facts whose rules read only an invocation's boundaries and the operations a batch read holds
 * (`SqlView` reads the log itself, after `beforeRead`, for anything else): a batch's rows wait for
 * their insert while such facts are validated. Any other fact's rules may read the log directly.
 */
const READS_ONLY_VIEW = new Set<string>(["model_observed", "model_completed", "model_interrupted", "tool_dispatched", "tool_rejected", "tool_settled"])

/** The row `insertRow` stored for `write` at `sequence`. */
const rowOf = (write: EventWrite.EventWrite, sequence: number): Rows.Row => {
  const event = write.event
  const invocation = event.invocation
  return {
    sequence,
    eventId: event.id,
    sessionId: invocation.sessionId,
    turnId: invocation.turnId,
    runId: invocation.runId,
    invocationId: invocation.invocationId,
    kind: event.fact.kind,
    operationId: Fact.operationKey(event.fact) ?? null,
    json: write.json,
  }
}

const isUniqueViolation = (error: unknown): boolean =>
  typeof error === "object" && error !== null && "code" in error && error.code === "SQLITE_CONSTRAINT_UNIQUE"

/**
 * Validates and appends `writes` in one transaction; all or nothing.
 *
 * With the in-memory index (SQLite) the rules read memory, and rule 1 costs nothing on the usual
 * path: an event id already stored either fails a rule or collides with the unique index on insert,
 * and only then is the stored row read and compared, so the outcome is the one rule 1 gives first.
 * Each inserted event is added to the index at once (later writes of the batch see it); if the
 * transaction does not commit, the sessions it touched are dropped from the index.
 */
export const appendBatch = async (
  database: Database,
  given: ReadonlyArray<EventWrite.EventWrite>,
  now: number,
  options: AppendOptions = {},
) => {
  const leading = verifyWrites(given)
  return database.write(async (tx): Promise<AppendResult> => {
    const writes = [...leading]
    let knownSessions = knownSessionsByDatabase.get(database)
    if (knownSessions === undefined) {
      knownSessions = new Set()
      knownSessionsByDatabase.set(database, knownSessions)
    }
    const sqlView = new SessionView.SqlView(tx, database.dialect, database.sqlite)
    const index = options.validation === "sql" ? undefined : LogIndex.of(tx)
    const touched = new Set<string>()
    if (database.index !== undefined) {
      const logIndex = database.index
      if (index === undefined) LogIndex.forget(tx)
      // A transaction that does not commit leaves no trace in memory; one validated by SQL alone
      // leaves its sessions to reload.
      database.sqlite?.onTransactionEnd((committed) => {
        if (!committed || index === undefined) logIndex.evict(touched)
      })
    }
    const view: SessionView.SessionView = index === undefined ? sqlView : new SessionView.MemoryView(index, sqlView)
    const sequences: Array<number> = []
    let inserted = false
    let insertedCount = 0
    const locked = new Set<string>()
    // Each session's last sequence before the batch's first insert into it, where the index knows it.
    const prior = new Map<string, number | undefined>()
    // SQLite has one writer: a session row known to exist needs no insert (rows are never deleted).
    const lock = async (sessionId: string) => {
      if (locked.has(sessionId)) return
      if (database.dialect === "postgres" || !knownSessions.has(sessionId)) await lockSession(tx, database, sessionId, now)
      locked.add(sessionId)
    }
    // Read by SQL, the rules' rows for the writes are read at once, under their sessions' locks
    // (taken in the order the writes name them, as one at a time would).
    const prefetch = async (part: ReadonlyArray<EventWrite.EventWrite>) => {
      for (const write of part) await lock(write.event.invocation.sessionId)
      await sqlView.prefetch(part)
    }
    if (index === undefined) await prefetch(leading)
    // PostgreSQL: validated rows wait and go in one multi-row insert before anything reads the log,
    // before `complete` and at the end (a round trip per batch, not per row).
    const queued: Array<{ readonly write: EventWrite.EventWrite; readonly row: Rows.Row; readonly position: number }> = []
    const flush = async () => {
      if (queued.length === 0) return
      const items = queued.splice(0)
      const assigned = await insertRows(tx, items.map((item) => item.write))
      for (const [offset, item] of items.entries()) {
        sequences[item.position] = assigned[offset]!
        // The cached row learns its sequence from the insert.
        ;(item.row as { sequence: number }).sequence = assigned[offset]!
      }
    }
    const queues = index === undefined && database.dialect === "postgres"
    if (queues) sqlView.beforeRead = flush
    for (let position = 0; position <= writes.length; position++) {
      if (position === leading.length && options.complete !== undefined) {
        await flush()
        // The trailing writes, built from the sequences of the leading ones inside the transaction.
        const built = options.complete([...sequences], (sessionId) => prior.get(sessionId))
        if (!Array.isArray(built)) throw invalid("the batch's complete returned no list of checked EventWrites")
        const trailing = verifyWrites(built)
        writes.push(...trailing)
        if (index === undefined) await prefetch(trailing)
      }
      if (position === writes.length) break
      const write = writes[position]!
      const event = write.event
      const sessionId = event.invocation.sessionId
      if (!locked.has(sessionId)) await lock(sessionId)
      touched.add(sessionId)
      let sequence: number
      if (index === undefined) {
        const original = await replayed(tx, sqlView, write)
        if (original !== undefined) {
          sequences.push(original)
          continue
        }
        if (queues && !READS_ONLY_VIEW.has(event.fact.kind)) await flush()
        await validate(view, write)
        if (queues) {
          const row = rowOf(write, 0)
          sqlView.inserted(row)
          queued.push({ write, row, position: sequences.length })
          // Its sequence comes with the insert.
          sequence = 0
        } else {
          sequence = await insertRow(tx, database, write)
          sqlView.inserted(rowOf(write, sequence))
        }
      } else {
        try {
          await validate(view, write)
          // Only `complete` reads it: a batch without one (most appends) keeps nothing.
          if (options.complete !== undefined && !prior.has(sessionId)) prior.set(sessionId, index.loaded(sessionId)?.highWater)
          sequence = await insertRow(tx, database, write)
        } catch (error) {
          const original = await replayed(tx, sqlView, write)
          if (original !== undefined) {
            sequences.push(original)
            continue
          }
          // An opening whose boundaries were left to the insert: rules 2 and 3 first, as SQL orders them.
          if (event.fact.kind === "invocation_opened") {
            checkOpeningBoundaries(await sqlView.boundaries(sessionId, event.invocation.invocationId))
          }
          // Another session holds this step, operation or invocation id (the indexes that SQL
          // reads would have found it; memory knows only this session).
          if (isUniqueViolation(error)) throw invalid("an id of this write is already used in the log")
          throw error
        }
        const row = rowOf(write, sequence)
        sqlView.inserted(row)
        // A session dropped since its validation (the index's size bound) reloads with this row.
        index.loaded(sessionId)?.add({ sequence, event }, row)
      }
      sequences.push(sequence)
      inserted = true
      insertedCount++
      faultPoint("append.after-insert")
      faultPoint(`append.after-insert.${insertedCount}`)
    }
    await flush()
    const seen = new Set<string>()
    const fresh = writes.filter((write) => !seen.has(write.event.id) && seen.add(write.event.id) !== undefined)
    if (inserted) checkBatchRules(fresh)
    faultPoint("append.before-commit")
    if (database.sqlite !== undefined && locked.size > 0) {
      const known = knownSessions
      database.sqlite.onTransactionEnd((committed) => {
        if (committed) rememberSessions(known, locked)
      })
    }
    return { sequences, inserted }
  })
}
