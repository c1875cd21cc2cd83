/**
 * Typed row access inside one transaction: the small set of indexed look-ups the append validators
 * and reads share. Rows are decoded at this boundary; a row that does not decode is a `Decode`
 * store error, never a silently skipped fact.
 */
import { Codec, type Event } from "@maka/facts"
import { Result } from "effect"
import { type Compilable, type CompiledQuery, type DialectAdapter, type QueryResult, sql, type Transaction } from "kysely"
import * as EventLogError from "../EventLogError.ts"
import { sqliteAccessOf } from "./sqlite-driver.ts"
import type { Tables } from "./tables.ts"

export type Tx = Transaction<Tables>

/**
 * Kind predicates written as SQL literals, so the planner can prove the partial indexes' conditions
 * (a bound parameter hides them from PostgreSQL's generic plans, and SQLite plans without them
 * until the statement is prepared again). Kinds are the fact vocabulary, never outside text.
 */
export const notObservation = sql<boolean>`kind <> 'model_observed'`
export const boundaryKinds = sql<boolean>`kind IN ('invocation_opened', 'invocation_ended')`
const isKind = (kind: string) => sql<boolean>`kind = ${sql.lit(kind)}`

/** A parameter's stand-in while a query is compiled once: no id or text the log binds holds NUL. */
const slot = (index: number): string => `\u0000maka.parameter.${index}\u0000`
const SLOT = /^\u0000maka\.parameter\.(\d+)\u0000$/

/**
 * A hot query built and compiled by Kysely once per dialect, then run by its SQL with the call's
 * parameters in place of the stand-ins it was compiled with (the SQLite driver keeps the prepared
 * statement by that SQL), instead of building and compiling the same tree on every read
 * (docs/architecture.md §12). `build` must bind each of its parameters as one value, as a plain
 * `where` comparison does; the first compile checks that it did.
 */
export const compiledOnce = <P extends ReadonlyArray<string | number>, R>(
  arity: P["length"],
  build: (tx: Tx, ...parameters: P) => Compilable<R>,
): ((tx: Tx, ...parameters: P) => Promise<QueryResult<R>>) => {
  const compiledBy = new WeakMap<DialectAdapter, CompiledQuery<R>>()
  const compile = (tx: Tx): CompiledQuery<R> => {
    const slots = Array.from({ length: arity }, (_, index) => slot(index))
    // The stand-ins are strings where a parameter may be a number: they only mark its place.
    const compiled = build(tx, ...(slots as unknown as P)).compile()
    const bound = compiled.parameters.filter((value) => typeof value === "string" && SLOT.test(value))
    if (bound.length !== arity || new Set(bound).size !== arity) throw new Error(`a query compiled once binds ${bound.length} of its ${arity} parameters`)
    return compiled
  }
  return (tx, ...parameters) => {
    const adapter = tx.getExecutor().adapter
    let compiled = compiledBy.get(adapter)
    if (compiled === undefined) {
      compiled = compile(tx)
      compiledBy.set(adapter, compiled)
    }
    const values = compiled.parameters.map((value) => {
      const at = typeof value === "string" ? SLOT.exec(value) : null
      return at === null ? value : parameters[Number(at[1])]
    })
    return tx.executeQuery({ ...compiled, parameters: values })
  }
}

export interface Row {
  readonly sequence: number
  readonly eventId: string
  readonly sessionId: string
  readonly turnId: string
  readonly runId: string
  readonly invocationId: string
  readonly kind: string
  readonly operationId: string | null
  readonly json: string
}

const columns = [
  "sequence",
  "event_id",
  "session_id",
  "turn_id",
  "run_id",
  "invocation_id",
  "kind",
  "operation_id",
  "event_json",
] as const

interface RawRow {
  readonly sequence: number | string
  readonly event_id: string
  readonly session_id: string
  readonly turn_id: string
  readonly run_id: string
  readonly invocation_id: string
  readonly kind: string
  readonly operation_id: string | null
  readonly event_json: string
}

export const toNumber = (value: number | string | bigint): number => {
  const number = typeof value === "number" ? value : Number(value)
  if (!Number.isSafeInteger(number)) throw EventLogError.make({ _tag: "Decode", message: `not a safe integer: ${String(value)}` })
  return number
}

const text = (record: Record<string, unknown>, key: string): string => {
  const value = record[key]
  if (typeof value !== "string") throw EventLogError.make({ _tag: "Decode", message: `column ${key} is not text` })
  return value
}

/**
 * One row of a prepared statement, checked field by field: the driver's values are not trusted to
 * match the table's declared types.
 */
export const checkedRow = (raw: unknown): Row => {
  if (typeof raw !== "object" || raw === null) throw EventLogError.make({ _tag: "Decode", message: "a row is not an object" })
  const record: Record<string, unknown> = { ...raw }
  const sequence = record["sequence"]
  const operationId = record["operation_id"]
  if (typeof sequence !== "number" && typeof sequence !== "bigint") {
    throw EventLogError.make({ _tag: "Decode", message: "column sequence is not an integer" })
  }
  return {
    sequence: toNumber(sequence),
    eventId: text(record, "event_id"),
    sessionId: text(record, "session_id"),
    turnId: text(record, "turn_id"),
    runId: text(record, "run_id"),
    invocationId: text(record, "invocation_id"),
    kind: text(record, "kind"),
    operationId: operationId === null ? null : text(record, "operation_id"),
    json: text(record, "event_json"),
  }
}

const toRow = (raw: RawRow): Row => ({
  sequence: toNumber(raw.sequence),
  eventId: raw.event_id,
  sessionId: raw.session_id,
  turnId: raw.turn_id,
  runId: raw.run_id,
  invocationId: raw.invocation_id,
  kind: raw.kind,
  operationId: raw.operation_id,
  json: raw.event_json,
})

/** Decodes stored event JSON; JSON that does not decode is a store `Decode` error naming `eventId` and `sequence`. */
export const decodeJson = (json: string, eventId: string, sequence: number): Event.RuntimeEvent => {
  const decoded = Codec.decodeEventJson(json)
  if (Result.isFailure(decoded)) {
    throw EventLogError.make({ _tag: "Decode", message: `event ${eventId} at ${sequence}: ${decoded.failure.message}` })
  }
  return decoded.success
}

/**
 * The `Decode` error of `decodeJson` for a row read without its event id (`SessionRow`): the id is
 * read by sequence, only then.
 */
export const undecodableAt = async (tx: Tx, sequence: number, failure: { readonly message: string }): Promise<never> => {
  const row = await tx.selectFrom("event_log").select("event_id").where("sequence", "=", sequence).executeTakeFirst()
  throw EventLogError.make({ _tag: "Decode", message: `event ${row?.event_id ?? "?"} at ${sequence}: ${failure.message}` })
}

/** Decodes a row's event; a row that does not decode is a store `Decode` error. */
export const decode = (row: Row): Event.RuntimeEvent => decodeJson(row.json, row.eventId, row.sequence)

export const stored = (row: Row): Event.StoredEvent => ({ sequence: row.sequence, event: decode(row) })

export const byEventId = async (tx: Tx, eventId: string): Promise<Row | undefined> => {
  const raw = await tx.selectFrom("event_log").select(columns).where("event_id", "=", eventId).executeTakeFirst()
  return raw === undefined ? undefined : toRow(raw)
}

export const byInvocationKind = async (tx: Tx, invocationId: string, kind: string): Promise<Row | undefined> => {
  const raw = await tx
    .selectFrom("event_log")
    .select(columns)
    .where("invocation_id", "=", invocationId)
    .where(isKind(kind))
    .where(boundaryKinds)
    .orderBy("sequence")
    .executeTakeFirst()
  return raw === undefined ? undefined : toRow(raw)
}

/** How many ids one look-up names at most (a statement's parameters stay well below every driver's bound). */
const IDS_PER_READ = 500

/**
 * The rows whose `event_id` is in `eventIds`, the non-observation rows whose `operation_id` is in
 * `operationIds`, and the openings and terminals of `invocationIds`, in one read per 500 ids of each
 * (an OR of three unique indexes), in sequence order.
 */
export const byEventsOrOperations = async (
  tx: Tx,
  eventIds: ReadonlyArray<string>,
  operationIds: ReadonlyArray<string>,
  invocationIds: ReadonlyArray<string> = [],
): Promise<ReadonlyArray<Row>> => {
  const rows: Array<Row> = []
  const reads = Math.max(...[eventIds, operationIds, invocationIds].map((ids) => Math.ceil(ids.length / IDS_PER_READ)))
  for (let read = 0; read < reads; read++) {
    const part = (ids: ReadonlyArray<string>) => ids.slice(read * IDS_PER_READ, (read + 1) * IDS_PER_READ)
    const [events, operations, invocations] = [part(eventIds), part(operationIds), part(invocationIds)]
    const raw = await tx
      .selectFrom("event_log")
      .select(columns)
      .where((builder) =>
        builder.or([
          ...(events.length === 0 ? [] : [builder("event_id", "in", events)]),
          ...(operations.length === 0 ? [] : [builder.and([builder("operation_id", "in", operations), notObservation])]),
          ...(invocations.length === 0 ? [] : [builder.and([builder("invocation_id", "in", invocations), boundaryKinds])]),
        ]),
      )
      .orderBy("sequence")
      .execute()
    rows.push(...raw.map(toRow))
  }
  if (reads <= 1) return rows
  // A row can match an event id of one read and an operation of another.
  return [...new Map(rows.map((row) => [row.sequence, row])).values()].sort((left, right) => left.sequence - right.sequence)
}

export const byOperation = async (tx: Tx, operationId: string): Promise<ReadonlyArray<Row>> =>
  (
    await tx
      .selectFrom("event_log")
      .select(columns)
      .where("operation_id", "=", operationId)
      .where(notObservation)
      .orderBy("sequence")
      .execute()
  ).map(toRow)

/** An invocation's facts in order (not its observations); `settlements: false` leaves its `tool_settled` rows out. */
export const ofInvocation = async (
  tx: Tx,
  invocationId: string,
  options: { readonly settlements?: boolean } = {},
): Promise<ReadonlyArray<Row>> =>
  (
    await tx
      .selectFrom("event_log")
      .select(columns)
      .where("invocation_id", "=", invocationId)
      .where(options.settlements === false ? sql<boolean>`kind NOT IN ('model_observed', 'tool_settled')` : notObservation)
      .orderBy("sequence")
      .execute()
  ).map(toRow)

/** The operation ids of an invocation's facts of `kind`, in order, reading no payload. */
export const operationsOfKind = async (tx: Tx, invocationId: string, kind: string): Promise<ReadonlyArray<string>> =>
  (
    await tx
      .selectFrom("event_log")
      .select("operation_id")
      .where("invocation_id", "=", invocationId)
      .where(isKind(kind))
      .orderBy("sequence")
      .execute()
  ).flatMap((row) => (row.operation_id === null ? [] : [row.operation_id]))

/** One page of `ofInvocation`: at most `limit` rows after the sequence `after`. */
export const ofInvocationPage = async (tx: Tx, invocationId: string, after: number, limit: number): Promise<ReadonlyArray<Row>> =>
  (
    await tx
      .selectFrom("event_log")
      .select(columns)
      .where("invocation_id", "=", invocationId)
      .where(notObservation)
      .where("sequence", ">", after)
      .orderBy("sequence")
      .limit(limit)
      .execute()
  ).map(toRow)

/** The session's newest event of `kind` at or below `through` (any, when absent), walking its index down from there. */
export const latestOfKind = async (tx: Tx, sessionId: string, kind: string, through?: number): Promise<Row | undefined> => {
  let query = tx.selectFrom("event_log").select(columns).where("session_id", "=", sessionId).where(isKind(kind))
  if (through !== undefined) query = query.where("sequence", "<=", through)
  const row = await query.orderBy("sequence", "desc").limit(1).executeTakeFirst()
  return row === undefined ? undefined : toRow(row)
}

/** Events of a session of one kind, in sequence order (the openings from their own index). */
export const ofSessionKind = async (tx: Tx, sessionId: string, kind: string): Promise<ReadonlyArray<Row>> =>
  (
    await tx
      .selectFrom("event_log")
      .select(columns)
      .where("session_id", "=", sessionId)
      .where(isKind(kind))
      .orderBy("sequence")
      .execute()
  ).map(toRow)

/**
 * A whole session's rows by their own SQL on SQLite (a prepared statement, no query building): what
 * the writer's index reads when it first meets a session, every turn of a new one (exported for
 * their plan test).
 */
export const SESSION_FACTS_SQL = `SELECT ${columns.join(", ")} FROM event_log WHERE session_id = ? ORDER BY sequence`
export const SESSION_FACTS_WITHOUT_OBSERVATIONS_SQL = `SELECT ${columns.join(", ")} FROM event_log WHERE session_id = ? AND kind <> 'model_observed' ORDER BY sequence`

/** Session events after `after`, in sequence order, optionally up to `through` and without observations. */
export const ofSession = async (
  tx: Tx,
  sessionId: string,
  options: { readonly after?: number; readonly through?: number; readonly withObservations?: boolean; readonly limit?: number } = {},
): Promise<ReadonlyArray<Row>> => {
  const sqlite = options.after === undefined && options.through === undefined && options.limit === undefined ? sqliteAccessOf(tx) : undefined
  if (sqlite !== undefined) {
    const statement = sqlite.statement(options.withObservations === false ? SESSION_FACTS_WITHOUT_OBSERVATIONS_SQL : SESSION_FACTS_SQL)
    return statement.all(sessionId).map(checkedRow)
  }
  let query = tx.selectFrom("event_log").select(columns).where("session_id", "=", sessionId)
  if (options.after !== undefined) query = query.where("sequence", ">", options.after)
  if (options.through !== undefined) query = query.where("sequence", "<=", options.through)
  if (options.withObservations === false) query = query.where(notObservation)
  query = query.orderBy("sequence")
  if (options.limit !== undefined) query = query.limit(options.limit)
  return (await query.execute()).map(toRow)
}

/**
 * A session row as the context read takes it: the columns it needs before decoding, in select order
 * (`[sequence, observed invocation id, event JSON]`). An observation is never decoded, only hashed:
 * its row carries its invocation id (null on every other row). The kind and ids of any other row
 * come from its decoded event (the columns are written from it), so they are not read twice: each
 * column read is a string the driver makes for every row of the session. A tuple, as SQLite's raw
 * rows come: the driver builds no object with named keys per row of a session (docs/architecture.md §12).
 */
export type SessionRow = readonly [sequence: number | string | bigint, observedInvocationId: string | null, eventJson: string]

const sessionColumns = [
  "sequence",
  sql<string | null>`CASE WHEN kind = 'model_observed' THEN invocation_id END`.as("observed_invocation_id"),
  "event_json",
] as const

/** The same select as `sessionColumns` over a session, for SQLite's raw rows (exported for its plan test). */
export const SESSION_ROWS_SQL =
  "SELECT sequence, CASE WHEN kind = 'model_observed' THEN invocation_id END, event_json FROM event_log WHERE session_id = ? ORDER BY sequence"
/** `SESSION_ROWS_SQL` over a range of sequences (after, through]. */
export const SESSION_ROWS_BETWEEN_SQL =
  "SELECT sequence, CASE WHEN kind = 'model_observed' THEN invocation_id END, event_json FROM event_log WHERE session_id = ? AND sequence > ? AND sequence <= ? ORDER BY sequence"

/**
 * SQLite's raw rows of those selects. `event_log` is a STRICT table: its columns hold an integer
 * sequence and text (the observed invocation null or text), so the driver's arrays are the tuples.
 */
const sessionRowsOfRaw = (rows: Array<unknown>): Array<SessionRow> => rows as Array<SessionRow>

const tupleOf = (row: { readonly sequence: number | string | bigint; readonly observed_invocation_id: string | null; readonly event_json: string }): SessionRow => [
  row.sequence,
  row.observed_invocation_id,
  row.event_json,
]

const selectSessionRows = compiledOnce(1, (tx: Tx, sessionId: string) =>
  tx.selectFrom("event_log").select(sessionColumns).where("session_id", "=", sessionId).orderBy("sequence"),
)

/**
 * Every row of a session in sequence order, as `SessionRow`s: on SQLite straight from a raw prepared
 * statement (arrays, no query building), elsewhere through Kysely. The array is new: the caller's own.
 */
export const sessionRows = async (tx: Tx, sessionId: string): Promise<Array<SessionRow>> => {
  const sqlite = sqliteAccessOf(tx)
  if (sqlite !== undefined) return sessionRowsOfRaw(sqlite.statement(SESSION_ROWS_SQL).raw(true).all(sessionId))
  return (await selectSessionRows(tx, sessionId)).rows.map(tupleOf)
}

const selectSessionRowsBetween = compiledOnce(3, (tx: Tx, sessionId: string, after: number, through: number) =>
  tx
    .selectFrom("event_log")
    .select(sessionColumns)
    .where("session_id", "=", sessionId)
    .where("sequence", ">", after)
    .where("sequence", "<=", through)
    .orderBy("sequence"),
)

/** The rows of `sessionRows` after sequence `after`, up to `through`. */
export const sessionRowsBetween = async (tx: Tx, sessionId: string, after: number, through: number): Promise<ReadonlyArray<SessionRow>> => {
  const sqlite = sqliteAccessOf(tx)
  if (sqlite !== undefined) return sessionRowsOfRaw(sqlite.statement(SESSION_ROWS_BETWEEN_SQL).raw(true).all(sessionId, after, through))
  return (await selectSessionRowsBetween(tx, sessionId, after, through)).rows.map(tupleOf)
}

const selectBoundaries = compiledOnce(1, (tx: Tx, invocationId: string) =>
  tx.selectFrom("event_log").select(columns).where("invocation_id", "=", invocationId).where(boundaryKinds),
)

/** The opening and the terminal of an invocation, in one indexed look-up. */
export const boundaries = async (
  tx: Tx,
  invocationId: string,
): Promise<{ readonly opening?: Row; readonly terminal?: Row }> => {
  const rows = (await selectBoundaries(tx, invocationId)).rows.map(toRow)
  const opening = rows.find((row) => row.kind === "invocation_opened")
  const terminal = rows.find((row) => row.kind === "invocation_ended")
  return { ...(opening === undefined ? {} : { opening }), ...(terminal === undefined ? {} : { terminal }) }
}

/** Every event of the log in sequence order. */
export const all = async (tx: Tx): Promise<ReadonlyArray<Row>> =>
  (await tx.selectFrom("event_log").select(columns).orderBy("sequence").execute()).map(toRow)

/**
 * Openings without a terminal (of one session, or of the whole log), in sequence order: the openings
 * come from their partial indexes (`event_log_session_openings`, `event_log_openings`) and each
 * terminal from `event_log_invocation_boundary`, so neither walks the session's other events.
 */
export const unsealedOpenings = async (
  tx: Tx,
  sessionId: string | undefined,
  limit?: number,
  after?: number,
): Promise<ReadonlyArray<Row>> => {
  let query = tx
    .selectFrom("event_log as opening")
    .select(columns.map((column) => `opening.${column}` as const))
    .where(sql<boolean>`opening.kind = 'invocation_opened'`)
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom("event_log as terminal")
            .select("terminal.sequence")
            .whereRef("terminal.invocation_id", "=", "opening.invocation_id")
            .where(sql<boolean>`terminal.kind = 'invocation_ended'`)
            .where(sql<boolean>`terminal.kind IN ('invocation_opened', 'invocation_ended')`),
        ),
      ),
    )
  if (sessionId !== undefined) query = query.where("opening.session_id", "=", sessionId)
  if (after !== undefined) query = query.where("opening.sequence", ">", after)
  query = query.orderBy("opening.sequence")
  if (limit !== undefined) query = query.limit(limit)
  return (await query.execute()).map(toRow)
}

/** Every event of one run of a session, in sequence order. */
export const ofRun = async (tx: Tx, sessionId: string, runId: string): Promise<ReadonlyArray<Row>> =>
  (
    await tx
      .selectFrom("event_log")
      .select(columns)
      .where("session_id", "=", sessionId)
      .where("run_id", "=", runId)
      .orderBy("sequence")
      .execute()
  ).map(toRow)

/** The session's latest opening, if any. */
export const latestOpening = async (tx: Tx, sessionId: string): Promise<Row | undefined> => {
  const raw = await tx
    .selectFrom("event_log")
    .select(columns)
    .where("session_id", "=", sessionId)
    .where(sql<boolean>`kind = 'invocation_opened'`)
    .orderBy("sequence", "desc")
    // One row: without the limit the driver returns every opening of the session.
    .limit(1)
    .executeTakeFirst()
  return raw === undefined ? undefined : toRow(raw)
}

/** The session's highest sequence, 0 without events: one descent of `event_log_session_sequence`. */
const selectSessionHighWater = compiledOnce(1, (tx: Tx, sessionId: string) =>
  tx
    .selectFrom("event_log")
    .select(({ fn }) => fn.max("sequence").as("highWater"))
    .where("session_id", "=", sessionId),
)

/** The log's highest sequence, 0 when it is empty: one descent of the primary key. */
export const logHighWater = async (tx: Tx): Promise<number> => {
  const raw = (await tx.selectFrom("event_log").select(({ fn }) => fn.max("sequence").as("highWater")).execute())[0]
  return raw?.highWater === null || raw?.highWater === undefined ? 0 : toNumber(raw.highWater)
}

/** `selectSessionHighWater` by its own SQL, on SQLite (exported for its plan test). */
export const SESSION_HIGH_WATER_SQL = "SELECT max(sequence) AS highWater FROM event_log WHERE session_id = ?"

export const sessionHighWater = async (tx: Tx, sessionId: string): Promise<number> => {
  const sqlite = sqliteAccessOf(tx)
  if (sqlite === undefined) {
    const raw = (await selectSessionHighWater(tx, sessionId)).rows[0]
    return raw?.highWater === null || raw?.highWater === undefined ? 0 : toNumber(raw.highWater)
  }
  const row: unknown = sqlite.statement(SESSION_HIGH_WATER_SQL).all(sessionId)[0]
  const highWater: unknown = typeof row === "object" && row !== null ? Reflect.get(row, "highWater") : undefined
  if (highWater === null || highWater === undefined) return 0
  if (typeof highWater !== "number" && typeof highWater !== "bigint") throw EventLogError.make({ _tag: "Decode", message: "the high water is not an integer" })
  return toNumber(highWater)
}

export const payloadOf = async (tx: Tx, eventId: string): Promise<string | undefined> =>
  (await tx.selectFrom("tool_result_payloads").select("payload").where("event_id", "=", eventId).executeTakeFirst())
    ?.payload
