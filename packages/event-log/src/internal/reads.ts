/**
 * The other reads of the log (docs/log-format.md §3.5, §3.9, §3.10): complete bounded prefixes, events for
 * inspection, prune candidates with their cursor, unfinished invocations and their recovery view,
 * raw tool results with integrity checks, and the handoff and continuation look-ups.
 */
import {
  Canonical,
  Codec,
  Digest,
  EventWrite,
  Identity,
  Limits,
  ToolCall,
  type Archive,
  type Event,
  type Lineage as FactLineage,
} from "@maka/facts"
import { Result, Schema } from "effect"
import { sql } from "kysely"
import * as EventLogError from "../EventLogError.ts"
import * as Context from "./context.ts"
import type { Dialect } from "./database.ts"
import * as InvocationState from "./invocation-state.ts"
import * as Lineage from "./lineage.ts"
import * as LogIndex from "./log-index.ts"
import * as Rows from "./rows.ts"
import * as Safety from "./safety.ts"

export interface LogPrefix {
  readonly scope: Identity.LogScope
  readonly highWater: number
  readonly digest: string
  readonly events: ReadonlyArray<Event.StoredEvent>
}

/** A complete prefix of `scope`, or `PrefixTooLarge`; never partial. */
export const prefix = async (
  tx: Rows.Tx,
  dialect: Dialect,
  scope: Identity.LogScope,
  maxEvents: number,
  maxBytes: number,
): Promise<LogPrefix> => {
  if (scope.kind === "lineage") {
    throw EventLogError.invalidTransition("lineage-scoped prefixes are not supported by this version")
  }
  const kind: unknown = (scope as { readonly kind?: unknown }).kind
  if (kind !== "root" && kind !== "session") throw EventLogError.invalidTransition(`unknown log scope ${String(kind)}`)
  // A scope parsed from untyped input (`{kind: "session", sessionId}`) would read an empty session.
  if (!Schema.is(Identity.LogScope)(scope)) throw EventLogError.invalidTransition("the log scope is not {kind: \"root\"} or {kind: \"session\", id}")
  const length = dialect === "sqlite" ? sql<number>`length(CAST(event_json AS BLOB))` : sql<number>`octet_length(event_json)`
  let measure = tx
    .selectFrom("event_log")
    .select(({ fn }) => [fn.countAll<number | string>().as("count"), fn.sum<number | string>(length).as("bytes"), fn.max("sequence").as("highWater")])
  if (scope.kind === "session") measure = measure.where("session_id", "=", scope.id)
  const totals = await measure.executeTakeFirst()
  const count = totals === undefined ? 0 : Rows.toNumber(totals.count)
  const bytes = totals?.bytes === null || totals?.bytes === undefined ? 0 : Rows.toNumber(totals.bytes)
  if (count > maxEvents || bytes > maxBytes) throw EventLogError.prefixTooLarge()
  const rows = scope.kind === "session" ? await Rows.ofSession(tx, scope.id) : await Rows.all(tx)
  const highWater = rows.length === 0 ? 0 : rows[rows.length - 1]!.sequence
  return {
    scope,
    highWater,
    digest: Digest.logPrefix(scope, rows.map((row) => ({ sequence: row.sequence, json: row.json })), highWater),
    events: rows.map(Rows.stored),
  }
}

/**
 * The running log-prefix hash of a session through `through` (docs/log-format.md §3.5), over the stored
 * bytes without decoding them, for a live run to extend event by event.
 */
export const sessionHash = async (tx: Rows.Tx, sessionId: string, through: number): Promise<Digest.LogPrefixHash> => {
  const hash = Digest.LogPrefixHash.start({ kind: "session", id: sessionId })
  for (const row of await Rows.ofSession(tx, sessionId, { through })) hash.update(row.sequence, row.json)
  return hash
}

/**
 * A caller's range argument that is not a whole number within its bounds, refused as the caller's
 * error (a fraction, NaN or Infinity would reach SQL as a type mismatch, a negative limit as none).
 */
const requireCount = (name: string, value: number | undefined, least: number): void => {
  if (value !== undefined && !(Number.isSafeInteger(value) && value >= least)) {
    throw EventLogError.invalidTransition(`${name} must be an integer of ${least} or more, got ${String(value)}`)
  }
}

/** Stored events of a session after `after`, for inspection. */
export const events = async (
  tx: Rows.Tx,
  sessionId: string,
  after?: number,
  limit?: number,
): Promise<ReadonlyArray<Event.StoredEvent>> => {
  requireCount("after", after, 0)
  requireCount("limit", limit, 1)
  return (
    await Rows.ofSession(tx, sessionId, {
      ...(after === undefined ? {} : { after }),
      ...(limit === undefined ? {} : { limit }),
    })
  ).map(Rows.stored)
}

/** Openings without a terminal, across the log; more than `limit` is `PrefixTooLarge`. */
export const unfinishedInvocations = async (tx: Rows.Tx, limit: number): Promise<ReadonlyArray<Identity.Invocation>> => {
  requireCount("limit", limit, 0)
  const rows = await Rows.unsealedOpenings(tx, undefined, limit + 1)
  if (rows.length > limit) throw EventLogError.prefixTooLarge()
  return rows.map((row) => Rows.decode(row).invocation)
}

export interface UnfinishedPage {
  /** Unfinished invocations in opening order, each named by its opening row's id columns. */
  readonly invocations: ReadonlyArray<Identity.Invocation>
  /** The cursor of the next page (the last opening's sequence) when more may follow. */
  readonly next?: number
}

/**
 * One page of openings without a terminal after the opening sequence `after`, at most `limit`
 * (1..10,000). Ids come from the row's columns, not its JSON, so one damaged opening cannot stop
 * recovery from reading the others.
 */
export const unfinishedInvocationPage = async (tx: Rows.Tx, after: number, limit: number): Promise<UnfinishedPage> => {
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > Limits.MAX_HISTORY_EVENTS) {
    throw EventLogError.invalidTransition(`limit is outside 1..${Limits.MAX_HISTORY_EVENTS}`)
  }
  const rows = await Rows.unsealedOpenings(tx, undefined, limit + 1, after)
  const page = rows.slice(0, limit)
  const invocations = page.map((row) => ({
    sessionId: row.sessionId,
    turnId: row.turnId,
    runId: row.runId,
    invocationId: row.invocationId,
  }))
  return rows.length > limit ? { invocations, next: page[page.length - 1]!.sequence } : { invocations }
}

export interface UndispatchedCall {
  readonly operationId: string
  readonly identity: ToolCall.ToolCallIdentity
  readonly name: string
  readonly input: InvocationState.LocalCall["input"]
}

export interface InvocationRecovery {
  readonly unfinishedModelSteps: ReadonlyArray<string>
  readonly undispatchedCalls: ReadonlyArray<UndispatchedCall>
  readonly uncertainOperations: ReadonlyArray<string>
}

/** How many rows one page of `invocationRecovery` reads. */
const RECOVERY_PAGE_ROWS = 1_000

/**
 * What recovery must seal for one invocation; `model_observed` payloads are not read. The rows are
 * read a page at a time and folded as they come; over `maxEvents` rows or `maxBytes` of their JSON
 * is `PrefixTooLarge` (`Infinity` for either reads an invocation of any length: recovery must seal
 * a crashed run however long it grew, docs/engine.md §5.13).
 */
export const invocationRecovery = async (
  tx: Rows.Tx,
  invocation: Identity.Invocation,
  maxEvents: number,
  maxBytes: number,
): Promise<InvocationRecovery> => {
  const state = InvocationState.accumulator()
  let events = 0
  let bytes = 0
  for (let after = 0; ; ) {
    const rows = await Rows.ofInvocationPage(tx, invocation.invocationId, after, RECOVERY_PAGE_ROWS)
    events += rows.length
    if (events > maxEvents) throw EventLogError.prefixTooLarge()
    for (const row of rows) {
      bytes += Canonical.utf8Length(row.json)
      if (row.sessionId !== invocation.sessionId) throw EventLogError.invalidTransition("the invocation belongs to another session")
    }
    if (bytes > maxBytes) throw EventLogError.prefixTooLarge()
    for (const row of rows) state.add(Rows.stored(row))
    if (rows.length < RECOVERY_PAGE_ROWS) break
    after = rows[rows.length - 1]!.sequence
  }
  return {
    unfinishedModelSteps: InvocationState.unresolvedRequests(state),
    undispatchedCalls: InvocationState.unresolvedLocalCalls(state).map((call) => ({
      operationId: call.operationId,
      identity: { toolCallId: call.toolCallId, origin: { kind: "provider", stepId: call.stepId } },
      name: call.name,
      input: call.input,
    })),
    uncertainOperations: InvocationState.unsettledDispatches(state),
  }
}

export interface PruneCandidate {
  readonly eventId: string
  readonly toolCallId: string
  readonly toolName: string
  /** What an archive of this result would replace: a settled projection or a failure message. */
  readonly source: Archive.ArchiveSource
}

export interface PruneCursor {
  readonly through: number
  readonly afterSequence: number
}

export interface PrunePage {
  readonly candidates: ReadonlyArray<PruneCandidate>
  readonly next?: PruneCursor
}

export interface PruneOptions {
  readonly current?: string
  readonly maxCandidates: number
  readonly maxBytes: number
  readonly cursor?: PruneCursor
}

/**
 * The history-safety gate on its own (docs/log-format.md §3.7 step 2): every invocation of the session
 * other than `current` is sealed and resolved, else `InvalidTransition` with the unsafe-history
 * message. `current`, when given, must be a live opening of the session. Materialises nothing.
 */
export const checkHistorySafety = async (
  tx: Rows.Tx,
  dialect: Dialect,
  sessionId: string,
  current?: string,
): Promise<void> => {
  if (current !== undefined) await Context.requireLive(tx, sessionId, current)
  await Safety.check(tx, dialect, sessionId, current === undefined ? {} : { exclude: current })
}

/** docs/log-format.md §3.9: candidates for archiving, cursor-paged; `maxCandidates = 0` is the cheap safety check. */
export const preparePruneCandidates = async (
  tx: Rows.Tx,
  dialect: Dialect,
  sessionId: string,
  options: PruneOptions,
): Promise<PrunePage> => {
  if (options.maxCandidates < 0 || options.maxCandidates > Limits.MAX_PRUNE_CANDIDATES) {
    throw EventLogError.invalidTransition(`maxCandidates is outside 0..${Limits.MAX_PRUNE_CANDIDATES}`)
  }
  if (options.maxBytes < 0 || options.maxBytes > Limits.MAX_PRUNE_BYTES) {
    throw EventLogError.invalidTransition(`maxBytes is outside 0..${Limits.MAX_PRUNE_BYTES}`)
  }
  if (options.current !== undefined) {
    await Context.requireLive(tx, sessionId, options.current)
    await Context.requireSettledBoundary(tx, options.current)
  }
  await Safety.check(tx, dialect, sessionId, options.current === undefined ? {} : { exclude: options.current })
  if (options.maxCandidates === 0) return { candidates: [] }
  // Only the rows after the newest checkpoint's coverage are read (a session's older history is no
  // candidate): all of them, as archives the pass wrote since its first page come after the fence.
  const checkpointRow = await Rows.latestOfKind(tx, sessionId, "context_checkpoint_recorded", options.cursor?.through)
  const checkpoint = checkpointRow === undefined ? undefined : Rows.decode(checkpointRow).fact
  const coveredThrough = checkpoint?.kind === "context_checkpoint_recorded" ? checkpoint.checkpoint.coveredThrough : 0
  const rows = await Rows.ofSession(tx, sessionId, { ...(coveredThrough > 0 ? { after: coveredThrough } : {}), withObservations: false })
  const through = options.cursor?.through ?? (rows.length === 0 ? coveredThrough : rows[rows.length - 1]!.sequence)
  const archived = new Set<string>()
  const dispatches = new Map<string, Rows.Row>()
  for (const row of rows) {
    if (row.kind === "tool_result_archived") {
      const fact = Rows.decode(row).fact
      if (fact.kind === "tool_result_archived") archived.add(fact.placeholder.identity.runtimeEventId)
    }
    if (row.kind === "tool_dispatched" && row.operationId !== null) dispatches.set(row.operationId, row)
  }
  const start = Math.max(coveredThrough, options.cursor?.afterSequence ?? 0)
  const candidates: Array<PruneCandidate> = []
  let bytes = 0
  // The last row charged: the next page starts after it, so a page of rows that are no candidates
  // (archived already, too small, not the provider's) moves the cursor on as one of candidates does.
  let charged = start
  for (const row of rows) {
    if (row.kind !== "tool_settled" || row.sequence <= start || row.sequence > through) continue
    const charge = Canonical.utf8Length(row.json) + Limits.PRUNE_CANDIDATE_OVERHEAD
    if (candidates.length >= options.maxCandidates || bytes + charge > options.maxBytes) {
      if (charged === start) throw EventLogError.prefixTooLarge()
      return { candidates, next: { through, afterSequence: charged } }
    }
    bytes += charge
    charged = row.sequence
    if (archived.has(row.eventId)) continue
    const settled = Rows.decode(row).fact
    // A dispatch is read with its settlement after the coverage (a clean cut never separates them);
    // one that is not is looked up by its operation.
    const dispatchRow =
      row.operationId === null
        ? undefined
        : (dispatches.get(row.operationId) ?? (await Rows.byOperation(tx, row.operationId)).find((item) => item.kind === "tool_dispatched"))
    const dispatch = dispatchRow === undefined ? undefined : Rows.decode(dispatchRow).fact
    if (settled.kind !== "tool_settled" || dispatch?.kind !== "tool_dispatched" || dispatch.call.origin.kind !== "provider") {
      continue
    }
    if (settled.outcome.kind === "failed" && Canonical.utf8Length(settled.outcome.message) > Limits.MAX_ARCHIVABLE_FAILURE_BYTES) {
      continue
    }
    candidates.push({
      eventId: row.eventId,
      toolCallId: dispatch.call.toolCallId,
      toolName: dispatch.name,
      source:
        settled.outcome.kind === "succeeded"
          ? { kind: "projection", projection: settled.outcome.projection }
          : { kind: "failed", message: settled.outcome.message },
    })
  }
  return { candidates }
}

/** The raw result of a settled call, with its length and digest checked. */
export const readToolResult = async (
  tx: Rows.Tx,
  sessionId: string,
  eventId: string,
): Promise<{ readonly toolName: string; readonly raw: ToolCall.ToolOutput }> => {
  const row = await Rows.byEventId(tx, eventId)
  if (row === undefined || row.sessionId !== sessionId || row.kind !== "tool_settled") {
    throw EventLogError.invalidTransition("no settled tool result with this id in the session")
  }
  const fact = Rows.decode(row).fact
  if (fact.kind !== "tool_settled" || fact.outcome.kind !== "succeeded") {
    throw EventLogError.invalidTransition("the tool result is not a success")
  }
  const payload = await Rows.payloadOf(tx, eventId)
  if (payload === undefined || !EventWrite.payloadMatches(fact.outcome.raw, payload)) {
    throw EventLogError.rejected({ _tag: "PayloadMismatch" })
  }
  const dispatch = (await Rows.byOperation(tx, fact.operationId)).find((item) => item.kind === "tool_dispatched")
  const dispatched = dispatch === undefined ? undefined : Rows.decode(dispatch).fact
  const output = Codec.decodeClosed(ToolCall.ToolOutput)(JSON.parse(payload))
  if (Result.isFailure(output)) throw EventLogError.make({ _tag: "Decode", message: output.failure.message })
  return { toolName: dispatched?.kind === "tool_dispatched" ? dispatched.name : "", raw: output.success }
}


/**
 * Whether the session's latest opening ended `handoff_paused` and its successor has not opened. On
 * SQLite the writer's index knows how the latest opening ended: only a paused one is read from the
 * store (every run's start asks this).
 */
export const hasPendingHandoff = async (tx: Rows.Tx, dialect: Dialect, sessionId: string): Promise<boolean> => {
  const index = LogIndex.of(tx)
  if (index !== undefined && (await index.session(tx, dialect, sessionId)).latestOpeningOutcome !== "handoff_paused") return false
  return (await Lineage.pendingPause(tx, sessionId)) !== undefined
}

/** A session as `maka sessions` lists it, read by index from the log's columns. */
export interface SessionSummary {
  readonly sessionId: string
  /** Its events, observations included. */
  readonly events: number
  /** Its invocations (openings). */
  readonly invocations: number
  /** Its openings without a terminal: live runs, or crashed ones awaiting recovery. */
  readonly unsealed: number
  /**
   * Its operations dispatched by an invocation sealed `failed {outcome_unknown}` and settled nowhere
   * in the session: effects whose outcome stays unknown (docs/engine.md §5.8).
   */
  readonly unknownOutcomes: number
}

/** Whether a terminal's text says `failed {outcome_unknown}` (its text first: most terminals do not). */
const isOutcomeUnknown = (json: string, invocationId: string): boolean => {
  if (!json.includes('"outcome_unknown"')) return false
  const decoded = Codec.decodeEventJson(json)
  if (Result.isFailure(decoded)) {
    throw EventLogError.make({ _tag: "Decode", message: `the terminal of invocation ${invocationId}: ${decoded.failure.message}` })
  }
  const fact = decoded.success.fact
  return fact.kind === "invocation_ended" && fact.outcome.kind === "failed" && fact.outcome.class === "outcome_unknown"
}

/**
 * Every session of the log, in the order of its first event, summarised from the columns and the
 * indexes: its events counted (no event decoded), its openings joined with their terminals, and only
 * for a session holding a run sealed `outcome_unknown`, its dispatches and settlements
 * (docs/log-format.md §3.10).
 */
export const sessionSummaries = async (tx: Rows.Tx): Promise<ReadonlyArray<SessionSummary>> => {
  const counted = await tx
    .selectFrom("event_log")
    .select(["session_id", sql<number | string>`count(*)`.as("events"), sql<number | string>`min(sequence)`.as("first")])
    .groupBy("session_id")
    .orderBy("first")
    .execute()
  // The terminal through the boundary index (`invocation_id, kind`, partial on these two kinds: the
  // `IN` lets the planner use it), one look-up per opening.
  const openings = await sql<{ readonly session_id: string; readonly invocation_id: string; readonly ended_json: string | null }>`
    SELECT opened.session_id, opened.invocation_id, ended.event_json AS ended_json
    FROM event_log AS opened
    LEFT JOIN event_log AS ended ON ended.invocation_id = opened.invocation_id AND ended.kind = 'invocation_ended'
      AND ended.kind IN ('invocation_opened', 'invocation_ended')
    WHERE opened.kind = 'invocation_opened'`.execute(tx)
  const invocations = new Map<string, { count: number; unsealed: number; unknown: Set<string> }>()
  for (const row of openings.rows) {
    const found = invocations.get(row.session_id) ?? { count: 0, unsealed: 0, unknown: new Set<string>() }
    invocations.set(row.session_id, found)
    found.count++
    if (row.ended_json === null) found.unsealed++
    else if (isOutcomeUnknown(row.ended_json, row.invocation_id)) found.unknown.add(row.invocation_id)
  }
  const summaries: Array<SessionSummary> = []
  for (const row of counted) {
    const found = invocations.get(row.session_id)
    let unknownOutcomes = 0
    if (found !== undefined && found.unknown.size > 0) {
      const calls = await tx
        .selectFrom("event_log")
        .select(["operation_id", "kind", "invocation_id"])
        .where("session_id", "=", row.session_id)
        .where("kind", "in", ["tool_dispatched", "tool_settled"])
        .execute()
      const settled = new Set(calls.flatMap((call) => (call.kind === "tool_settled" && call.operation_id !== null ? [call.operation_id] : [])))
      for (const call of calls) {
        if (call.kind === "tool_dispatched" && found.unknown.has(call.invocation_id) && !settled.has(call.operation_id ?? "")) unknownOutcomes++
      }
    }
    summaries.push({
      sessionId: row.session_id,
      events: Rows.toNumber(row.events),
      invocations: found?.count ?? 0,
      unsealed: found?.unsealed ?? 0,
      unknownOutcomes,
    })
  }
  return summaries
}

/** The committed opening that claimed exactly this boundary, if any. */
export const continuationForSource = async (
  tx: Rows.Tx,
  boundary: FactLineage.RunBoundary,
): Promise<Event.StoredEvent | undefined> => {
  for (const row of await Rows.ofSessionKind(tx, boundary.invocation.sessionId, "invocation_opened")) {
    const stored = Rows.stored(row)
    const fact = stored.event.fact
    if (
      fact.kind === "invocation_opened" &&
      (fact.input.kind === "continuation" || fact.input.kind === "handoff") &&
      fact.input.claim.source.invocation.runId === boundary.invocation.runId &&
      fact.input.claim.source.highWater === boundary.highWater
    ) {
      return stored
    }
  }
  return undefined
}

/** Safety under the manual-message policy: `true` when an unknown prior outcome exists. */
export const checkManualMessageHistory = async (tx: Rows.Tx, dialect: Dialect, sessionId: string): Promise<boolean> =>
  (await Safety.check(tx, dialect, sessionId, { manual: true })).priorUnknown
