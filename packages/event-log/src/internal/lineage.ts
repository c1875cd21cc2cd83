/**
 * Continuation and handoff checks of the store (docs/log-format.md §3.10): run prefixes and session bases,
 * the reservation rule for a sealed pause, continuation openings with their ancestry, and the seal
 * checks of a `handoff_paused` terminal.
 */
import {
  Canonical,
  Digest,
  Identity,
  Limits,
  Lineage as FactLineage,
  type Event,
  type Fact,
  type Input,
} from "@maka/facts"
import { sql } from "kysely"
import * as EventLogError from "../EventLogError.ts"
import type { Dialect } from "./database.ts"
import * as InvocationState from "./invocation-state.ts"
import * as Rows from "./rows.ts"
import * as Safety from "./safety.ts"

const invalid = EventLogError.invalidTransition

interface Context {
  readonly tx: Rows.Tx
  readonly dialect: Dialect
}

export interface RunPrefix {
  readonly invocation: Identity.Invocation
  readonly highWater: number
  readonly digest: string
  readonly events: ReadonlyArray<Event.StoredEvent>
}

/**
 * The prefix of one run: its events in sequence order from its opening, `highWater` the count of
 * events. `upTo` must name an existing 1-based position (never clamped). `undefined` when the run
 * has no events.
 */
export const runPrefix = async (
  tx: Rows.Tx,
  sessionId: string,
  runId: string,
  upTo?: number,
  limits: { readonly maxEvents: number; readonly maxBytes: number } = {
    maxEvents: Limits.MAX_HISTORY_EVENTS,
    maxBytes: Limits.MAX_HISTORY_BYTES,
  },
): Promise<RunPrefix | undefined> => {
  const rows = await Rows.ofRun(tx, sessionId, runId)
  if (rows.length === 0) return undefined
  if (upTo !== undefined && (!Number.isSafeInteger(upTo) || upTo < 1 || upTo > rows.length)) {
    throw invalid(`run position ${upTo} does not exist (the run has ${rows.length} events)`)
  }
  const selected = upTo === undefined ? rows : rows.slice(0, upTo)
  if (selected.length > limits.maxEvents) throw EventLogError.prefixTooLarge()
  let bytes = 0
  for (const row of selected) bytes += Canonical.utf8Length(row.json)
  if (bytes > limits.maxBytes) throw EventLogError.prefixTooLarge()
  const events = selected.map(Rows.stored)
  const first = events[0]!
  if (first.event.fact.kind !== "invocation_opened") throw invalid("a run prefix starts with the run's opening")
  const invocation = first.event.invocation
  for (const stored of events) {
    if (!Identity.sameInvocation(stored.event.invocation, invocation)) throw invalid("a run's identity never changes")
  }
  const digest = Digest.runPrefix(
    events.length,
    invocation,
    selected.map((row) => ({ sequence: row.sequence, json: row.json })),
  )
  return { invocation, highWater: events.length, digest, events }
}

/** The session prefix digest at `highWater` (session scope, every event up to it). */
export const sessionDigestAt = async (tx: Rows.Tx, sessionId: string, highWater: number): Promise<string> => {
  const rows = await Rows.ofSession(tx, sessionId, { through: highWater })
  return Digest.logPrefix(
    { kind: "session", id: sessionId },
    rows.map((row) => ({ sequence: row.sequence, json: row.json })),
    rows.length === 0 ? 0 : rows[rows.length - 1]!.sequence,
  )
}

/** The base inherited by everything a message-opened root starts: the session just before it. */
export const rootBase = async (tx: Rows.Tx, opening: Rows.Row): Promise<FactLineage.SessionBase> => {
  const before = await tx
    .selectFrom("event_log")
    .select(({ fn }) => fn.max("sequence").as("highWater"))
    .where("session_id", "=", opening.sessionId)
    .where("sequence", "<", opening.sequence)
    .executeTakeFirst()
  const highWater = before?.highWater === null || before?.highWater === undefined ? 0 : Rows.toNumber(before.highWater)
  return { highWater, digest: await sessionDigestAt(tx, opening.sessionId, highWater) }
}

const openingFact = (row: Rows.Row): Fact.InvocationOpened => {
  const fact = Rows.decode(row).fact
  if (fact.kind !== "invocation_opened") throw invalid("expected an opening")
  return fact
}

const openingOfRun = async (tx: Rows.Tx, sessionId: string, runId: string): Promise<Rows.Row | undefined> => {
  const rows = await Rows.ofSessionKind(tx, sessionId, "invocation_opened")
  return rows.find((row) => row.runId === runId)
}

/** The base a run's lineage inherits: its claim's base, or the root's session base. */
export const inheritedBase = async (tx: Rows.Tx, opening: Rows.Row): Promise<FactLineage.SessionBase> => {
  const fact = openingFact(opening)
  return fact.input.kind === "continuation" || fact.input.kind === "handoff" ? fact.input.claim.base : rootBase(tx, opening)
}

export interface PendingPause {
  readonly opening: Rows.Row
  readonly terminal: Rows.Row
  readonly pause: FactLineage.HandoffPause
}

/** The session's latest opening when it ended `handoff_paused` and its successor has not opened. */
export const pendingPause = async (tx: Rows.Tx, sessionId: string): Promise<PendingPause | undefined> => {
  const opening = await Rows.latestOpening(tx, sessionId)
  if (opening === undefined) return undefined
  const terminal = await Rows.byInvocationKind(tx, opening.invocationId, "invocation_ended")
  if (terminal === undefined) return undefined
  const ended = Rows.decode(terminal).fact
  if (ended.kind !== "invocation_ended" || ended.outcome.kind !== "handoff_paused") return undefined
  const pause = ended.outcome.pause
  if ((await Rows.byInvocationKind(tx, pause.intent.successorInvocationId, "invocation_opened")) !== undefined) {
    return undefined
  }
  return { opening, terminal, pause }
}

/** A sealed `handoff_paused` terminal whose successor has not opened (docs/log-format.md §3.10). */
export interface PendingHandoff {
  /** The terminal's sequence: the cursor of the next page. */
  readonly sequence: number
  readonly sessionId: string
  /** The paused run's invocation. */
  readonly invocation: Identity.Invocation
  readonly pause: FactLineage.HandoffPause
}

/**
 * Up to `PENDING_HANDOFF_PAGE` pending pauses after `afterSequence`, in sequence order, across the
 * log. The terminals come from the handoff-successor index (only `handoff_paused` terminals carry a
 * successor), and each successor's opening from the invocation-boundary index.
 */
export const pendingHandoffs = async (
  tx: Rows.Tx,
  dialect: Dialect,
  afterSequence: number,
): Promise<ReadonlyArray<PendingHandoff>> => {
  // SQLite: `> ''` (ids are never empty) searches the expression index for handoff terminals only,
  // and the unary plus keeps the planner from walking the whole log by sequence instead; the few
  // rows found are then sorted. PostgreSQL: the generated column's partial index.
  const successor =
    dialect === "sqlite"
      ? sql<string | null>`json_extract(terminal.event_json, '$.fact.outcome.pause.intent.successorInvocationId')`
      : sql<string | null>`terminal.successor_invocation_id`
  const isHandoff = dialect === "sqlite" ? sql<boolean>`${successor} > ''` : sql<boolean>`${successor} IS NOT NULL`
  const sequence = dialect === "sqlite" ? sql<number>`+terminal.sequence` : sql<number>`terminal.sequence`
  const rows = await tx
    .selectFrom("event_log as terminal")
    .select(["terminal.sequence", "terminal.event_id", "terminal.event_json"])
    .where(sql<boolean>`terminal.kind = 'invocation_ended'`)
    .where(isHandoff)
    .where(sequence, ">", afterSequence)
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom("event_log as opening")
            .select("opening.sequence")
            .where(sql<boolean>`opening.invocation_id = ${successor}`)
            .where(sql<boolean>`opening.kind = 'invocation_opened'`)
            .where(sql<boolean>`opening.kind IN ('invocation_opened', 'invocation_ended')`),
        ),
      ),
    )
    .orderBy(sequence)
    .limit(Limits.PENDING_HANDOFF_PAGE)
    .execute()
  return rows.map((row) => {
    const sequence = Rows.toNumber(row.sequence)
    const event = Rows.decodeJson(row.event_json, row.event_id, sequence)
    const fact = event.fact
    if (fact.kind !== "invocation_ended" || fact.outcome.kind !== "handoff_paused") {
      throw EventLogError.make({ _tag: "Decode", message: `event ${row.event_id} at ${sequence} is not a handoff pause` })
    }
    return { sequence, sessionId: event.invocation.sessionId, invocation: event.invocation, pause: fact.outcome.pause }
  })
}

/**
 * The session position just before a message-opened run's opening, with the session prefix digest
 * there: the base a continuation of that run inherits (docs/log-format.md §3.7).
 */
export const contextBeforeRun = async (tx: Rows.Tx, invocation: Identity.Invocation): Promise<FactLineage.SessionBase> => {
  const { opening } = await Rows.boundaries(tx, invocation.invocationId)
  if (
    opening === undefined ||
    opening.sessionId !== invocation.sessionId ||
    opening.turnId !== invocation.turnId ||
    opening.runId !== invocation.runId
  ) {
    throw invalid("the invocation has no opening")
  }
  if (openingFact(opening).input.kind !== "message") throw invalid("contextBeforeRun reads the base of a message-opened run")
  return rootBase(tx, opening)
}

const sameBase = (left: FactLineage.SessionBase, right: FactLineage.SessionBase) =>
  left.highWater === right.highWater && left.digest === right.digest

/** The reservation rule: only the identical successor of the pending pause may open. */
export const checkReservedSuccessor = async (
  tx: Rows.Tx,
  pending: PendingPause,
  event: Event.RuntimeEvent,
  fact: Fact.InvocationOpened,
): Promise<void> => {
  const input = fact.input
  const paused = Rows.decode(pending.opening)
  if (input.kind !== "handoff" || !Identity.sameInvocation(input.claim.source.invocation, paused.invocation)) {
    throw EventLogError.rejected({ _tag: "Reserved" })
  }
  const pausedFact = openingFact(pending.opening)
  if (!Canonical.equal(pausedFact.configuration, fact.configuration)) {
    throw invalid("a handoff successor opens with the paused run's configuration")
  }
  if (!Canonical.equal(input.pause, pending.pause)) throw invalid("a handoff successor carries the sealed pause")
  if (!Identity.sameInvocation(event.invocation, FactLineage.successorOf(pending.pause.intent, paused.invocation))) {
    throw invalid("the opening is not the successor the pause names")
  }
  const prefix = await runPrefix(tx, paused.invocation.sessionId, paused.invocation.runId)
  if (
    prefix === undefined ||
    prefix.highWater !== input.claim.source.highWater ||
    prefix.digest !== input.claim.source.digest
  ) {
    throw invalid("the claim's source is not the paused run's prefix with its terminal")
  }
  if (!sameBase(input.claim.base, await inheritedBase(tx, pending.opening))) {
    throw invalid("the claim's base differs from the paused lineage's base")
  }
}

/** Walks a source's ancestry back to its message-opened root (≤ 64 links, no cycles). */
const checkAncestry = async (
  tx: Rows.Tx,
  sessionId: string,
  sourceRunId: string,
  base: FactLineage.SessionBase,
  workspaceIdentity: string | undefined,
): Promise<void> => {
  const visited = new Set<string>()
  let runId = sourceRunId
  for (let depth = 0; depth < Limits.MAX_ANCESTRY; depth++) {
    if (visited.has(runId)) throw invalid("the lineage has a cycle")
    visited.add(runId)
    const opening = await openingOfRun(tx, sessionId, runId)
    if (opening === undefined) throw invalid("a lineage link has no opening")
    const fact = openingFact(opening)
    if (fact.configuration.workspaceIdentity !== workspaceIdentity) {
      throw invalid("a lineage link has another workspace identity")
    }
    switch (fact.input.kind) {
      case "message":
        if (!sameBase(base, await rootBase(tx, opening))) throw invalid("the claim's base is not its root's session base")
        return
      case "continuation":
      case "handoff":
        if (!sameBase(base, fact.input.claim.base)) throw invalid("a lineage link inherits another base")
        runId = fact.input.claim.source.invocation.runId
        break
      case "context_compact":
        throw invalid("a lineage never passes through a compaction run")
    }
  }
  throw invalid(`the lineage is deeper than ${Limits.MAX_ANCESTRY}`)
}

const claimsOfSession = async (tx: Rows.Tx, sessionId: string): Promise<ReadonlyArray<FactLineage.ContinuationClaim>> => {
  const claims: Array<FactLineage.ContinuationClaim> = []
  for (const row of await Rows.ofSessionKind(tx, sessionId, "invocation_opened")) {
    const fact = openingFact(row)
    if (fact.input.kind === "continuation" || fact.input.kind === "handoff") claims.push(fact.input.claim)
  }
  return claims
}

/** The continuation opening checks of docs/log-format.md §3.10. */
export const checkContinuationOpening = async (
  context: Context,
  event: Event.RuntimeEvent,
  input: Extract<Input.InvocationInput, { kind: "continuation" }>,
  configuration: Fact.InvocationOpened["configuration"],
): Promise<void> => {
  const { tx } = context
  const { sessionId, turnId, runId } = event.invocation
  const used = await tx
    .selectFrom("event_log")
    .select("sequence")
    .where("session_id", "=", sessionId)
    .where((builder) => builder.or([builder("turn_id", "=", turnId), builder("run_id", "=", runId)]))
    .executeTakeFirst()
  if (used !== undefined) throw invalid("a continuation opens a turn and run never used in the session")
  await Safety.check(tx, context.dialect, sessionId)
  const claim = input.claim
  const source = await runPrefix(tx, sessionId, claim.source.invocation.runId)
  const last = source?.events[source.events.length - 1]
  if (
    source === undefined ||
    !Identity.sameInvocation(source.invocation, claim.source.invocation) ||
    source.highWater !== claim.source.highWater ||
    source.digest !== claim.source.digest ||
    last?.event.fact.kind !== "invocation_ended"
  ) {
    throw invalid("the claim's source is not the sealed run's exact prefix")
  }
  for (const other of await claimsOfSession(tx, sessionId)) {
    if (other.id === claim.id) throw invalid("the claim id is already used")
    if (other.source.invocation.runId === claim.source.invocation.runId && other.source.highWater === claim.source.highWater) {
      throw invalid("the source boundary is already claimed")
    }
  }
  await checkAncestry(tx, sessionId, claim.source.invocation.runId, claim.base, configuration.workspaceIdentity)
}

/** The seal checks of a `handoff_paused` terminal (docs/log-format.md §3.10). */
export const checkHandoffSeal = async (
  context: Context,
  event: Event.RuntimeEvent,
  pause: FactLineage.HandoffPause,
  opening: Rows.Row,
): Promise<void> => {
  const { tx } = context
  const sessionId = event.invocation.sessionId
  const fact = openingFact(opening)
  if (fact.configuration.workspaceIdentity === undefined) throw invalid("a handoff needs a workspace identity")
  if (fact.input.kind === "context_compact") throw invalid("a compaction run is never handed off")
  await Safety.check(tx, context.dialect, sessionId, { exclude: event.invocation.invocationId })
  const state = InvocationState.fold((await Rows.ofInvocation(tx, event.invocation.invocationId)).map(Rows.stored))
  const reason = InvocationState.unsettledReason(state)
  if (reason !== undefined) throw invalid(`a handoff seals only at a settled boundary: ${reason}`)
  const intent = pause.intent
  switch (fact.input.kind) {
    case "message":
      if (intent.rootRunId !== event.invocation.runId) throw invalid("the intent's root is the run itself")
      if (pause.execution.replayBase !== undefined) throw invalid("a message-opened run has no replay base")
      break
    case "continuation":
      if (intent.rootRunId !== event.invocation.runId) throw invalid("the intent's root is the run itself")
      if (pause.execution.replayBase !== fact.input.claim.base.highWater) {
        throw invalid("the replay base is the continuation's base")
      }
      break
    case "handoff": {
      const predecessor = fact.input.pause
      if (intent.rootRunId !== predecessor.intent.rootRunId) throw invalid("the intent's root is the predecessor's root")
      if (pause.remainingSteps > predecessor.remainingSteps) throw invalid("remaining steps never grow across a handoff")
      if (pause.execution.replayBase !== predecessor.execution.replayBase) {
        throw invalid("a handoff never introduces or drops the replay base")
      }
      break
    }
  }
  let depth = 0
  let link: Fact.InvocationOpened = fact
  while (link.input.kind === "handoff") {
    depth++
    if (depth >= Limits.MAX_ANCESTRY) throw invalid(`the handoff lineage reaches ${Limits.MAX_ANCESTRY}`)
    const previous = await openingOfRun(tx, sessionId, link.input.claim.source.invocation.runId)
    if (previous === undefined) break
    link = openingFact(previous)
  }
  const takenRun = await tx
    .selectFrom("event_log")
    .select("sequence")
    .where((builder) =>
      builder.or([builder("run_id", "=", intent.successorRunId), builder("invocation_id", "=", intent.successorInvocationId)]),
    )
    .executeTakeFirst()
  if (takenRun !== undefined) throw invalid("the successor run or invocation id is already used")
  for (const claim of await claimsOfSession(tx, sessionId)) {
    if (claim.id === intent.claimId) throw invalid("the successor claim id is already used")
  }
  for (const row of await Rows.ofSessionKind(tx, sessionId, "invocation_ended")) {
    const ended = Rows.decode(row).fact
    if (ended.kind !== "invocation_ended" || ended.outcome.kind !== "handoff_paused") continue
    const other = ended.outcome.pause.intent
    if (
      other.successorRunId === intent.successorRunId ||
      other.successorInvocationId === intent.successorInvocationId ||
      other.claimId === intent.claimId
    ) {
      throw invalid("the successor is already reserved by another pause")
    }
  }
  await checkSuccessorFits(tx, sessionId)
}

/** The successor's first read must fit the history limits (10,000 events / 8 MiB after the baseline). */
const checkSuccessorFits = async (tx: Rows.Tx, sessionId: string): Promise<void> => {
  let coveredThrough = 0
  for (const row of await Rows.ofSessionKind(tx, sessionId, "context_checkpoint_recorded")) {
    const fact = Rows.decode(row).fact
    if (fact.kind === "context_checkpoint_recorded") coveredThrough = Math.max(coveredThrough, fact.checkpoint.coveredThrough)
  }
  const rows = await Rows.ofSession(tx, sessionId, { after: coveredThrough, withObservations: false })
  let bytes = 0
  for (const row of rows) bytes += Canonical.utf8Length(row.json)
  if (rows.length > Limits.MAX_HISTORY_EVENTS || bytes > Limits.MAX_HISTORY_BYTES) {
    throw invalid("the successor's first read would exceed the history limits")
  }
}
