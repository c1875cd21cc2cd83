/**
 * The history-safety gate (docs/log-format.md §3.7 step 2): a session is safe to build on when every
 * invocation before the current one is sealed and resolved. The manual-message policy (docs/engine.md §5.8)
 * tolerates dispatches without settlement in invocations sealed `failed {outcome_unknown}`.
 */
import { Prompts, type Event } from "@maka/facts"
import { sql } from "kysely"
import * as EventLogError from "../EventLogError.ts"
import type { Dialect } from "./database.ts"
import * as InvocationState from "./invocation-state.ts"
import * as Rows from "./rows.ts"

export interface SafetyOptions {
  /** The current invocation, excluded from the gate. */
  readonly exclude?: string
  /** The manual-message policy: tolerate unknown outcomes sealed `outcome_unknown`. */
  readonly manual?: boolean
}

export interface SafetyResult {
  /** Whether some dispatch sealed `outcome_unknown` lacks a settlement (manual policy only). */
  readonly priorUnknown: boolean
  /** Those dispatches in log order: name and operation id. */
  readonly unknownOperations: ReadonlyArray<{ readonly name: string; readonly operationId: string }>
}

const unsafe = (): EventLogError.EventLogError => EventLogError.invalidTransition(Prompts.UNSAFE_HISTORY_MESSAGE)

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

/** Checks the gate over already loaded session events (observations excluded). */
export const checkEvents = async (
  tx: Rows.Tx,
  dialect: Dialect,
  sessionId: string,
  events: ReadonlyArray<Event.StoredEvent>,
  options: SafetyOptions = {},
): Promise<SafetyResult> => {
  const unknownOperations: Array<{ name: string; operationId: string }> = []
  const successes: Array<{ eventId: string; bytes: number }> = []
  const interruptedSteps = new Set<string>()
  for (const [invocationId, group] of byInvocation(events)) {
    if (invocationId === options.exclude) continue
    const state = InvocationState.fold(group)
    if (state.opening === undefined) throw unsafe()
    if (state.terminal === undefined) throw unsafe()
    if (InvocationState.unresolvedRequests(state).length > 0) throw unsafe()
    if (InvocationState.unresolvedLocalCalls(state).length > 0) throw unsafe()
    if (state.hasProviderExecutedCall) throw unsafe()
    const unsettled = InvocationState.unsettledDispatches(state)
    if (unsettled.length > 0) {
      const terminal = state.terminal.event.fact
      const sealedUnknown =
        terminal.kind === "invocation_ended" &&
        terminal.outcome.kind === "failed" &&
        terminal.outcome.class === "outcome_unknown"
      if (options.manual !== true || !sealedUnknown) throw unsafe()
      for (const operationId of unsettled) {
        unknownOperations.push({ name: state.dispatched.get(operationId)?.name ?? "", operationId })
      }
    }
    for (const stored of state.settled.values()) {
      const fact = stored.event.fact
      if (fact.kind === "tool_settled" && fact.outcome.kind === "succeeded") {
        successes.push({ eventId: stored.event.id, bytes: fact.outcome.raw.bytes })
      }
    }
    for (const [stepId, request] of state.requests) {
      if (request !== undefined && !state.completions.has(stepId)) interruptedSteps.add(stepId)
    }
  }
  const lengths = await payloadLengths(
    tx,
    dialect,
    successes.map((success) => success.eventId),
  )
  for (const success of successes) {
    if (lengths.get(success.eventId) !== success.bytes) throw unsafe()
  }
  if (interruptedSteps.size > 0) {
    const observedProviderCalls = await tx
      .selectFrom("event_log")
      .select("operation_id")
      .where("session_id", "=", sessionId)
      .where("kind", "=", "model_observed")
      .where("event_json", "like", '%"providerExecuted":true%')
      .execute()
    for (const row of observedProviderCalls) {
      if (row.operation_id !== null && interruptedSteps.has(row.operation_id)) throw unsafe()
    }
  }
  return { priorUnknown: unknownOperations.length > 0, unknownOperations }
}

/** Loads the session (observations excluded) and checks the gate. */
export const check = async (
  tx: Rows.Tx,
  dialect: Dialect,
  sessionId: string,
  options: SafetyOptions = {},
): Promise<SafetyResult> => {
  const rows = await Rows.ofSession(tx, sessionId, { withObservations: false })
  return checkEvents(tx, dialect, sessionId, rows.map(Rows.stored), options)
}
