/**
 * `appendBatch`: one write transaction that validates each write against the log and the earlier
 * writes of the batch, in the order of docs/log-format.md §3.3 (exact replay, sealed, opening rules,
 * per-kind validators, transitions, clean completion), then inserts the row and its raw payload.
 * A write is inserted before the next one is validated, so later writes see earlier ones.
 */
import { Archive, Canonical, EventWrite, Fact, Input, type Event } from "@maka/facts"
import { Result } from "effect"
import { sql } from "kysely"
import * as EventLogError from "../EventLogError.ts"
import type { Database, Dialect } from "./database.ts"
import { faultPoint } from "./fault.ts"
import * as InvocationState from "./invocation-state.ts"
import * as Lineage from "./lineage.ts"
import * as Rows from "./rows.ts"

const invalid = EventLogError.invalidTransition
const reject = (rejection: EventLogError.Rejection) => EventLogError.rejected(rejection)

interface Context {
  readonly tx: Rows.Tx
  readonly dialect: Dialect
}

const lockSession = async ({ tx, dialect }: Context, sessionId: string, time: number): Promise<void> => {
  await tx
    .insertInto("sessions")
    .values({ session_id: sessionId, created_at: time })
    .onConflict((conflict) => conflict.column("session_id").doNothing())
    .execute()
  if (dialect === "postgres") {
    await tx.selectFrom("sessions").select("session_id").where("session_id", "=", sessionId).forUpdate().execute()
  }
}

const invocationState = async (context: Context, invocationId: string): Promise<InvocationState.InvocationState> =>
  InvocationState.fold((await Rows.ofInvocation(context.tx, invocationId)).map(Rows.stored))

/** Rule 3: the opening of any non-opening fact exists and names the identical invocation. */
const requireOpening = (event: Event.RuntimeEvent, opening: Rows.Row | undefined): Rows.Row => {
  if (opening === undefined) throw invalid("the invocation has no opening")
  const invocation = event.invocation
  if (opening.sessionId !== invocation.sessionId || opening.turnId !== invocation.turnId || opening.runId !== invocation.runId) {
    throw invalid("the invocation differs from its opening")
  }
  return opening
}

const validateOpening = async (context: Context, event: Event.RuntimeEvent, fact: Fact.InvocationOpened) => {
  const { tx } = context
  const invocation = event.invocation
  if ((await Rows.byInvocationKind(tx, invocation.invocationId, "invocation_opened")) !== undefined) {
    throw invalid("the invocation is already opened")
  }
  const pending = await Lineage.pendingPause(tx, invocation.sessionId)
  if (pending !== undefined) {
    await Lineage.checkReservedSuccessor(tx, pending, event, fact)
  } else if (fact.input.kind === "handoff") {
    throw invalid("no sealed handoff pause awaits this successor")
  }
  if ((await Rows.unsealedOpenings(tx, invocation.sessionId)).length > 0) throw reject({ _tag: "SessionBusy" })
  if (fact.input.kind === "continuation") {
    await Lineage.checkContinuationOpening(context, event, fact.input, fact.configuration)
  }
}

const providerCall = async (
  context: Context,
  event: Event.RuntimeEvent,
  fact: Fact.ToolDispatched | Fact.ToolRejected,
): Promise<void> => {
  const existing = await Rows.byOperation(context.tx, fact.operationId)
  if (fact.call.origin.kind === "standalone") {
    if (existing.length > 0) throw invalid("the operation id is already used")
    return
  }
  if (existing.some((row) => row.kind === "tool_dispatched" || row.kind === "tool_rejected")) {
    throw invalid("the operation is already dispatched or rejected")
  }
  const stepId = fact.call.origin.stepId
  const stepRows = await Rows.byOperation(context.tx, stepId)
  const request = stepRows.find((row) => row.kind === "model_requested")
  const completion = stepRows.find((row) => row.kind === "model_completed")
  if (request === undefined || completion === undefined || completion.invocationId !== event.invocation.invocationId) {
    throw invalid("the call names no completed step of this invocation")
  }
  const requested = Rows.decode(request).fact
  if (requested.kind !== "model_requested" || requested.purpose !== "main") {
    throw invalid("tool calls come only from main steps")
  }
  const completed = Rows.decode(completion).fact
  const part =
    completed.kind === "model_completed"
      ? completed.output.parts.find((item) => item.kind === "tool_call" && item.id === fact.call.toolCallId)
      : undefined
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

const validateSettled = async (context: Context, event: Event.RuntimeEvent, fact: Fact.ToolSettled) => {
  const rows = await Rows.byOperation(context.tx, fact.operationId)
  const dispatch = rows.find((row) => row.kind === "tool_dispatched")
  if (dispatch === undefined || dispatch.invocationId !== event.invocation.invocationId) {
    throw invalid("tool_settled needs a dispatch of the same operation in this invocation")
  }
  if (rows.some((row) => row.kind === "tool_settled")) throw invalid("the operation is already settled")
}

const validateModelFollowUp = async (context: Context, event: Event.RuntimeEvent, stepId: string) => {
  const rows = await Rows.byOperation(context.tx, stepId)
  const request = rows.find((row) => row.kind === "model_requested")
  if (request === undefined || request.invocationId !== event.invocation.invocationId) {
    throw invalid("the step has no request in this invocation")
  }
  if (rows.some((row) => row.kind === "model_completed" || row.kind === "model_interrupted")) {
    throw invalid("the step is already completed or interrupted")
  }
}

const validateRequested = async (context: Context, event: Event.RuntimeEvent, fact: Fact.ModelRequested, opening: Rows.Row) => {
  if ((await Rows.byOperation(context.tx, fact.stepId)).length > 0) throw invalid("the step id is already used")
  const openingFact = Rows.decode(opening).fact
  if (openingFact.kind !== "invocation_opened" || !Input.allowsPurpose(openingFact.input, fact.purpose)) {
    throw invalid(`the opening does not allow ${fact.purpose} requests`)
  }
  // At most one request per purpose is ever unresolved, so only the latest one can be. Canonical
  // JSON escapes quotes inside strings, so this pattern matches only the purpose field.
  const latest = await context.tx
    .selectFrom("event_log")
    .select("operation_id")
    .where("invocation_id", "=", event.invocation.invocationId)
    .where("kind", "=", "model_requested")
    .where("event_json", "like", `%"purpose":"${fact.purpose}"%`)
    .orderBy("sequence", "desc")
    .executeTakeFirst()
  const unresolved =
    latest?.operation_id === null || latest?.operation_id === undefined
      ? undefined
      : (await Rows.byOperation(context.tx, latest.operation_id)).some(
            (row) => row.kind === "model_completed" || row.kind === "model_interrupted",
          )
        ? undefined
        : latest
  if (unresolved !== undefined) throw invalid(`a ${fact.purpose} request is already unresolved`)
}

const validateSteered = async (context: Context, event: Event.RuntimeEvent, fact: Fact.MessageSteered) => {
  // The steering-identity index: an expression index on SQLite, a generated column on PostgreSQL.
  const messageId =
    context.dialect === "sqlite"
      ? sql<string>`json_extract(event_json, '$.fact.message.messageId')`
      : sql<string>`steering_message_id`
  const delivered = await context.tx
    .selectFrom("event_log")
    .select("sequence")
    .where("session_id", "=", event.invocation.sessionId)
    .where(sql<boolean>`kind = 'message_steered'`)
    .where(messageId, "=", fact.message.messageId)
    .executeTakeFirst()
  if (delivered !== undefined) throw invalid("the message was already delivered in this session")
}

const validateCheckpoint = async (
  context: Context,
  event: Event.RuntimeEvent,
  fact: Fact.ContextCheckpointRecorded,
  opening: Rows.Row,
) => {
  const checkpoint = fact.checkpoint
  const rows = await Rows.byOperation(context.tx, checkpoint.summaryStepId)
  const request = rows.find((row) => row.kind === "model_requested")
  const completed = rows.some((row) => row.kind === "model_completed")
  const requested = request === undefined ? undefined : Rows.decode(request).fact
  if (
    requested === undefined ||
    requested.kind !== "model_requested" ||
    request!.invocationId !== event.invocation.invocationId ||
    requested.purpose !== "summary" ||
    !completed
  ) {
    throw invalid("the checkpoint needs a completed summary request of this invocation")
  }
  if (requested.sourceHighWater !== checkpoint.coveredThrough) throw invalid("coveredThrough differs from the summary's source")
  if (requested.sourceDigest !== checkpoint.sourceDigest) throw invalid("sourceDigest differs from the summary's source")
  if (requested.checkpointEventId !== checkpoint.previousCheckpointId) {
    throw invalid("previousCheckpointId differs from the summary's baseline")
  }
  const openingFact = Rows.decode(opening).fact
  const isCompact = openingFact.kind === "invocation_opened" && openingFact.input.kind === "context_compact"
  if ((checkpoint.mode.kind === "standalone") !== isCompact) {
    throw invalid("standalone checkpoints belong to context_compact invocations, turn checkpoints to model runs")
  }
  if (checkpoint.mode.kind === "mid_turn" && checkpoint.mode.anchorEventId !== opening.eventId) {
    throw invalid("a mid_turn checkpoint anchors the current opening")
  }
  if (checkpoint.coveredThrough > (await Rows.sessionHighWater(context.tx, event.invocation.sessionId))) {
    throw invalid("coveredThrough is beyond the session's history")
  }
}

const validateArchive = async (context: Context, event: Event.RuntimeEvent, fact: Fact.ToolResultArchived) => {
  const identity = fact.placeholder.identity
  const settledRow = await Rows.byEventId(context.tx, identity.runtimeEventId)
  if (settledRow === undefined || settledRow.kind !== "tool_settled" || settledRow.sessionId !== event.invocation.sessionId) {
    throw invalid("the archive names no settled tool result of this session")
  }
  const settled = Rows.decode(settledRow).fact
  if (settled.kind !== "tool_settled") throw invalid("the archive names no settled tool result")
  const dispatchRow = (await Rows.byOperation(context.tx, settled.operationId)).find((row) => row.kind === "tool_dispatched")
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
  for (const row of await Rows.ofSessionKind(context.tx, event.invocation.sessionId, "tool_result_archived")) {
    const archived = Rows.decode(row).fact
    if (archived.kind === "tool_result_archived" && archived.placeholder.identity.runtimeEventId === identity.runtimeEventId) {
      throw invalid("the result is already archived")
    }
  }
}

const validateTerminal = async (
  context: Context,
  event: Event.RuntimeEvent,
  fact: Fact.InvocationEnded,
  opening: Rows.Row,
) => {
  const outcome = fact.outcome
  if (outcome.kind === "completed" || outcome.kind === "context_compact_finished") {
    const reason = InvocationState.unsettledReason(await invocationState(context, event.invocation.invocationId))
    if (reason !== undefined) throw invalid(`a clean completion is refused: ${reason}`)
  }
  if (outcome.kind === "handoff_paused") await Lineage.checkHandoffSeal(context, event, outcome.pause, opening)
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

/** Rules 2–7 for one write. */
const validate = async (context: Context, write: EventWrite.EventWrite): Promise<void> => {
  const event = write.event
  const fact = event.fact
  const boundaries = await Rows.boundaries(context.tx, event.invocation.invocationId)
  if (boundaries.terminal !== undefined) throw reject({ _tag: "Sealed" })
  if (fact.kind === "invocation_opened") {
    validatePayload(write)
    return validateOpening(context, event, fact)
  }
  const opening = requireOpening(event, boundaries.opening)
  validatePayload(write)
  switch (fact.kind) {
    case "tool_dispatched":
    case "tool_rejected":
      return providerCall(context, event, fact)
    case "tool_settled":
      return validateSettled(context, event, fact)
    case "model_requested":
      return validateRequested(context, event, fact, opening)
    case "model_observed":
      return validateModelFollowUp(context, event, fact.stepId)
    case "model_completed":
    case "model_interrupted":
      return validateModelFollowUp(context, event, fact.stepId)
    case "message_steered":
      return validateSteered(context, event, fact)
    case "context_checkpoint_recorded":
      return validateCheckpoint(context, event, fact, opening)
    case "tool_result_archived":
      return validateArchive(context, event, fact)
    case "invocation_ended":
      return validateTerminal(context, event, fact, opening)
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

/** Sessions whose row is known to exist, per database (SQLite only skips the insert). */
const knownSessionsByDatabase = new WeakMap<Database, Set<string>>()

export interface AppendResult {
  readonly sequences: ReadonlyArray<number>
  /** Whether anything new was inserted (a pure replay inserts nothing). */
  readonly inserted: boolean
}

/**
 * Rule 0: each write is what `EventWrite.plain` or `toolSuccess` would build: its event passes the
 * fact rules (well-formed text included) and `json`, the bytes stored, is the canonical JSON of the
 * event the log validates. A hand-built write cannot store one event while the rules check another.
 */
const verifyWrites = (writes: ReadonlyArray<EventWrite.EventWrite>): void => {
  for (const write of writes) {
    const verified = EventWrite.verify(write)
    if (Result.isFailure(verified)) throw invalid(`the write is not a checked EventWrite: ${verified.failure.message}`)
  }
}

/**
 * Builds the trailing writes of a batch from the sequences of its leading ones, inside the
 * transaction: a request whose source evidence covers the settlements committed with it.
 */
export type CompleteBatch = (sequences: ReadonlyArray<number>) => ReadonlyArray<EventWrite.EventWrite>

/**
 * Validates and appends `leading`, then the writes `complete` builds from their sequences, in one
 * transaction; all or nothing. The sequences returned cover both, in order.
 */
export const appendBatch = async (
  database: Database,
  leading: ReadonlyArray<EventWrite.EventWrite>,
  now: number,
  complete?: CompleteBatch,
) => {
  verifyWrites(leading)
  return database.write(async (tx): Promise<AppendResult> => {
    let knownSessions = knownSessionsByDatabase.get(database)
    if (knownSessions === undefined) {
      knownSessions = new Set()
      knownSessionsByDatabase.set(database, knownSessions)
    }
    const context: Context = { tx, dialect: database.dialect }
    const sequences: Array<number> = []
    let inserted = false
    let insertedCount = 0
    const locked = new Set<string>()
    const appendAll = async (writes: ReadonlyArray<EventWrite.EventWrite>) => {
      for (const write of writes) {
        const event = write.event
        if (!locked.has(event.invocation.sessionId)) {
          // SQLite has one writer: a session row known to exist needs no insert (rows are never deleted).
          if (database.dialect === "postgres" || !knownSessions.has(event.invocation.sessionId)) {
            await lockSession(context, event.invocation.sessionId, now)
          }
          locked.add(event.invocation.sessionId)
        }
        const existing = await Rows.byEventId(tx, event.id)
        if (existing !== undefined) {
          if (existing.json !== write.json) throw reject({ _tag: "EventConflict" })
          const payload = await Rows.payloadOf(tx, event.id)
          if (payload !== write.rawPayload) throw reject({ _tag: "EventConflict" })
          sequences.push(existing.sequence)
          continue
        }
        await validate(context, write)
        const row = await tx
          .insertInto("event_log")
          .values({
            event_id: event.id,
            session_id: event.invocation.sessionId,
            turn_id: event.invocation.turnId,
            run_id: event.invocation.runId,
            invocation_id: event.invocation.invocationId,
            kind: event.fact.kind,
            operation_id: Fact.operationKey(event.fact) ?? null,
            event_json: write.json,
          })
          .returning("sequence")
          .executeTakeFirstOrThrow()
        if (write.rawPayload !== undefined) {
          await tx.insertInto("tool_result_payloads").values({ event_id: event.id, payload: write.rawPayload }).execute()
        }
        sequences.push(Rows.toNumber(row.sequence))
        inserted = true
        insertedCount++
        faultPoint("append.after-insert")
        faultPoint(`append.after-insert.${insertedCount}`)
      }
    }
    await appendAll(leading)
    const trailing = complete === undefined ? [] : complete([...sequences])
    verifyWrites(trailing)
    await appendAll(trailing)
    const writes = [...leading, ...trailing]
    const fresh = writes.filter((write, index) => writes.findIndex((other) => other.event.id === write.event.id) === index)
    if (inserted) checkBatchRules(fresh)
    faultPoint("append.before-commit")
    for (const sessionId of locked) knownSessions.add(sessionId)
    return { sequences, inserted }
  })
}
