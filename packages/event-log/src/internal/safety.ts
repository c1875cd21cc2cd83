/**
 * The history-safety gate (docs/log-format.md §3.7 step 2): a session is safe to build on when every
 * invocation before the current one is sealed and resolved. The manual-message policy (docs/engine.md §5.8)
 * tolerates dispatches without settlement in invocations sealed `failed {outcome_unknown}`.
 *
 * One verdict per invocation (`invocationStatus`) serves both state sources: the writer's in-memory
 * index keeps each sealed invocation's verdict (docs/architecture.md §5), and the SQL path folds
 * the loaded events and reads only the evidence it needs by index (payload lengths by event id,
 * observations of incomplete steps by invocation), never a pattern match over a session.
 */
import { Codec, Prompts, type Event } from "@maka/facts"
import { Result } from "effect"
import { sql } from "kysely"
import * as EventLogError from "../EventLogError.ts"
import type { Dialect } from "./database.ts"
import * as InvocationState from "./invocation-state.ts"
import * as LogIndex from "./log-index.ts"
import * as Rows from "./rows.ts"

export interface SafetyOptions {
  /** The current invocation, excluded from the gate. */
  readonly exclude?: string
  /** The manual-message policy: tolerate unknown outcomes sealed `outcome_unknown`. */
  readonly manual?: boolean
}

export interface UnknownOperation {
  readonly name: string
  readonly operationId: string
}

export interface SafetyResult {
  /** Whether some dispatch sealed `outcome_unknown` lacks a settlement (manual policy only). */
  readonly priorUnknown: boolean
  /** Those dispatches in log order: name and operation id. */
  readonly unknownOperations: ReadonlyArray<UnknownOperation>
}

/** The gate's verdict on one invocation: safe, never safe, or safe only under the manual policy. */
export type InvocationStatus =
  | { readonly kind: "safe" }
  | { readonly kind: "unsafe" }
  | { readonly kind: "unknown"; readonly operations: ReadonlyArray<UnknownOperation> }

export const SAFE: InvocationStatus = { kind: "safe" }
export const UNSAFE: InvocationStatus = { kind: "unsafe" }

/** What the verdict needs beyond the folded facts. */
export interface Evidence {
  /** Whether the stored raw payload of a successful settlement has the length its fact records. */
  readonly payloadMatches: (eventId: string, bytes: number) => boolean
  /** Whether an observation of the step carries a provider-executed tool call. */
  readonly providerCallObserved: (stepId: string) => boolean
}

const unsafe = (): EventLogError.EventLogError => EventLogError.invalidTransition(Prompts.UNSAFE_HISTORY_MESSAGE)

/** Whether an observation reports a provider-executed tool call (docs/log-format.md §3.7). */
export const isProviderCallObservation = (fact: Event.RuntimeEvent["fact"]): boolean =>
  fact.kind === "model_observed" && fact.event.kind === "tool_call" && fact.event.providerExecuted

/** The verdict on one invocation from its folded state (docs/log-format.md §3.7 step 2). */
export const invocationStatus = (state: InvocationState.InvocationState, evidence: Evidence): InvocationStatus => {
  if (state.opening === undefined || state.terminal === undefined) return UNSAFE
  if (InvocationState.unresolvedRequests(state).length > 0) return UNSAFE
  if (InvocationState.unresolvedLocalCalls(state).length > 0) return UNSAFE
  if (state.hasProviderExecutedCall) return UNSAFE
  for (const stored of state.settled.values()) {
    const fact = stored.event.fact
    if (fact.kind === "tool_settled" && fact.outcome.kind === "succeeded") {
      if (!evidence.payloadMatches(stored.event.id, fact.outcome.raw.bytes)) return UNSAFE
    }
  }
  for (const stepId of InvocationState.incompleteSteps(state)) {
    if (evidence.providerCallObserved(stepId)) return UNSAFE
  }
  const unsettled = InvocationState.unsettledDispatches(state)
  if (unsettled.length === 0) return SAFE
  const terminal = state.terminal.event.fact
  const sealedUnknown =
    terminal.kind === "invocation_ended" && terminal.outcome.kind === "failed" && terminal.outcome.class === "outcome_unknown"
  if (!sealedUnknown) return UNSAFE
  return {
    kind: "unknown",
    operations: unsettled.map((operationId) => ({ name: state.dispatched.get(operationId)?.name ?? "", operationId })),
  }
}

/** Applies the policy to the verdicts of a session's invocations, in log order. */
export const decide = (statuses: Iterable<readonly [string, InvocationStatus]>, options: SafetyOptions): SafetyResult => {
  const unknownOperations: Array<UnknownOperation> = []
  for (const [invocationId, status] of statuses) {
    if (invocationId === options.exclude || status.kind === "safe") continue
    if (status.kind === "unsafe" || options.manual !== true) throw unsafe()
    unknownOperations.push(...status.operations)
  }
  return { priorUnknown: unknownOperations.length > 0, unknownOperations }
}

/** Groups stored events by invocation, keeping log order inside each group. */
export const byInvocation = (events: ReadonlyArray<Event.StoredEvent>): Map<string, Array<Event.StoredEvent>> => {
  const groups = new Map<string, Array<Event.StoredEvent>>()
  for (const stored of events) {
    const id = stored.event.invocation.invocationId
    const group = groups.get(id)
    if (group === undefined) groups.set(id, [stored])
    else group.push(stored)
  }
  return groups
}

const payloadLengths = async (
  tx: Rows.Tx,
  dialect: Dialect,
  eventIds: ReadonlyArray<string>,
): Promise<Map<string, number>> => {
  const lengths = new Map<string, number>()
  for (let start = 0; start < eventIds.length; start += 500) {
    const chunk = eventIds.slice(start, start + 500)
    const length =
      dialect === "sqlite" ? sql<number | string>`length(CAST(payload AS BLOB))` : sql<number | string>`octet_length(payload)`
    const rows = await tx
      .selectFrom("tool_result_payloads")
      .select(["event_id", length.as("bytes")])
      .where("event_id", "in", chunk)
      .execute()
    for (const row of rows) lengths.set(row.event_id, Rows.toNumber(row.bytes))
  }
  return lengths
}

/** The steps of `invocationId` among `stepIds` with an observed provider-executed call. */
const observedProviderCalls = async (
  tx: Rows.Tx,
  invocationId: string,
  stepIds: ReadonlyArray<string>,
  found: Set<string>,
): Promise<void> => {
  for (let start = 0; start < stepIds.length; start += 500) {
    const rows = await tx
      .selectFrom("event_log")
      .select(["event_id", "sequence", "operation_id", "event_json"])
      .where("invocation_id", "=", invocationId)
      .where(sql<boolean>`kind = 'model_observed'`)
      .where("operation_id", "in", stepIds.slice(start, start + 500))
      .execute()
    for (const row of rows) {
      // Most observations are text deltas: only a row naming the flag is decoded and checked.
      if (row.operation_id === null || found.has(row.operation_id) || !row.event_json.includes('"providerExecuted":true')) continue
      const decoded = Codec.decodeEventJson(row.event_json)
      if (Result.isFailure(decoded)) {
        throw EventLogError.make({ _tag: "Decode", message: `event ${row.event_id}: ${decoded.failure.message}` })
      }
      if (isProviderCallObservation(decoded.success.fact)) found.add(row.operation_id)
    }
  }
}

/**
 * The verdicts of folded invocations, reading their evidence by index: the payload lengths of their
 * successes and the observations of their incomplete steps. Sealed invocations only need evidence;
 * live ones are unsafe as they stand, but `observedFor` also lists their provider-call steps.
 */
export const statusesOf = async (
  tx: Rows.Tx,
  dialect: Dialect,
  states: ReadonlyArray<readonly [string, InvocationState.InvocationState]>,
): Promise<{ readonly statuses: Map<string, InvocationStatus>; readonly observed: ReadonlySet<string> }> => {
  const successes: Array<string> = []
  const observed = new Set<string>()
  for (const [invocationId, state] of states) {
    for (const stored of state.settled.values()) {
      const fact = stored.event.fact
      if (fact.kind === "tool_settled" && fact.outcome.kind === "succeeded") successes.push(stored.event.id)
    }
    const incomplete = InvocationState.incompleteSteps(state)
    if (incomplete.length > 0) await observedProviderCalls(tx, invocationId, incomplete, observed)
  }
  const lengths = successes.length === 0 ? new Map<string, number>() : await payloadLengths(tx, dialect, successes)
  const evidence: Evidence = {
    payloadMatches: (eventId, bytes) => lengths.get(eventId) === bytes,
    providerCallObserved: (stepId) => observed.has(stepId),
  }
  const statuses = new Map<string, InvocationStatus>()
  for (const [invocationId, state] of states) statuses.set(invocationId, invocationStatus(state, evidence))
  return { statuses, observed }
}

/**
 * Checks the gate. Where the writer's in-memory index serves this transaction (SQLite with the
 * writer lease) it answers from the verdicts kept per invocation and `events` is not called;
 * otherwise it folds `events()` (the session without observations) and reads the evidence by index.
 */
export const checkEvents = async (
  tx: Rows.Tx,
  dialect: Dialect,
  sessionId: string,
  events: () => ReadonlyArray<Event.StoredEvent>,
  options: SafetyOptions = {},
): Promise<SafetyResult> => {
  const index = LogIndex.of(tx)
  if (index !== undefined) return decide((await index.session(tx, dialect, sessionId)).statuses(), options)
  return checkFolded(tx, dialect, events(), options)
}

/** The SQL path of the gate over loaded events (no in-memory index). */
export const checkFolded = (
  tx: Rows.Tx,
  dialect: Dialect,
  events: ReadonlyArray<Event.StoredEvent>,
  options: SafetyOptions = {},
): Promise<SafetyResult> => checkGroups(tx, dialect, byInvocation(events), options)

/**
 * `checkFolded` over the events already grouped by invocation, in log order (`byInvocation`).
 * `sealed` keeps the verdicts of sealed invocations between calls over growing prefixes of one
 * session (a batch of frozen reads): a sealed invocation's events all lie at or below its terminal,
 * so its verdict is the same in every prefix that holds the terminal, and it is not folded again.
 */
export const checkGroups = async (
  tx: Rows.Tx,
  dialect: Dialect,
  groups: ReadonlyMap<string, ReadonlyArray<Event.StoredEvent>>,
  options: SafetyOptions = {},
  sealed?: Map<string, InvocationStatus>,
): Promise<SafetyResult> => {
  const order: Array<string> = []
  const states: Array<readonly [string, InvocationState.InvocationState]> = []
  for (const [invocationId, group] of groups) {
    if (invocationId === options.exclude) continue
    order.push(invocationId)
    if (sealed?.has(invocationId) !== true) states.push([invocationId, InvocationState.fold(group)])
  }
  // A live invocation fails the gate without reading any evidence.
  for (const [, state] of states) if (state.terminal === undefined) throw unsafe()
  const { statuses } = await statusesOf(tx, dialect, states)
  if (sealed === undefined) return decide(statuses, options)
  for (const [invocationId, status] of statuses) sealed.set(invocationId, status)
  // In log order, as `decide` lists the unknown operations.
  return decide(
    order.map((invocationId) => [invocationId, statuses.get(invocationId) ?? sealed.get(invocationId)!] as const),
    options,
  )
}

/** Loads the session (observations excluded) and checks the gate; the index, where it serves, loads nothing. */
export const check = async (
  tx: Rows.Tx,
  dialect: Dialect,
  sessionId: string,
  options: SafetyOptions = {},
): Promise<SafetyResult> => {
  const index = LogIndex.of(tx)
  if (index !== undefined) return decide((await index.session(tx, dialect, sessionId)).statuses(), options)
  const rows = await Rows.ofSession(tx, sessionId, { withObservations: false })
  return checkFolded(tx, dialect, rows.map(Rows.stored), options)
}
