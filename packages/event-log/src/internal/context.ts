/**
 * Model-context materialisation (docs/log-format.md §3.7) and `latestMain` (docs/log-format.md §3.8), inside one read
 * transaction: the safety gate, the baseline checkpoint and its mid-turn anchor, the tail with its
 * exclusions and archived replacements, the evidence digest over the whole selection, and the
 * newest accepted main request.
 */
import { Archive, Canonical, Codec, Digest, Fact, Limits, Prompts, type Event, Identity, type Lineage as FactLineage, type Model, type ModelContext } from "@maka/facts"
import { Result, Schema } from "effect"
import * as EventLogError from "../EventLogError.ts"
import * as CompactionCut from "./compaction-cut.ts"
import type { Dialect } from "./database.ts"
import * as InvocationState from "./invocation-state.ts"
import * as Lineage from "./lineage.ts"
import * as LogIndex from "./log-index.ts"
import * as Rows from "./rows.ts"
import * as Safety from "./safety.ts"

export interface SourceEvidence {
  readonly scope: Identity.LogScope
  readonly highWater: number
  readonly digest: string
}

export interface Baseline {
  readonly eventId: string
  readonly sequence: number
  readonly checkpoint: ModelContext.ContextCheckpoint
}

export type TailItem =
  | { readonly kind: "canonical"; readonly stored: Event.StoredEvent }
  | {
      readonly kind: "archived"
      readonly sequence: number
      readonly eventId: string
      readonly invocation: Identity.Invocation
      readonly operationId: string
      /** The archive placeholder's model value. */
      readonly replacement: ReturnType<typeof Archive.modelValue>
      readonly archiveEventId: string
      readonly isError: boolean
    }

export type LatestMainContext =
  | { readonly kind: "no_completed_request" }
  | { readonly kind: "trace_unavailable" }
  | {
      readonly kind: "selected"
      readonly projectionCurrent: boolean
      readonly sequence: number
      readonly recordedAt: number
      readonly modelId: string
      readonly connectionId?: string
      readonly checkpointEventId?: string
      readonly context?: ModelContext.ModelRequestContext
      readonly usage: Model.ModelUsage
      readonly routeIdentity: string
    }

/**
 * The newest summary request of a context after its baseline's coverage, and whether it was drained:
 * ended `model_interrupted {cancelled}` (docs/engine.md §5.12: the next automatic compaction then
 * runs in the foreground).
 */
export interface LatestSummary {
  readonly stepId: string
  /** The sequence of its `model_requested`. */
  readonly sequence: number
  readonly drained: boolean
}

export interface ModelContextSource {
  readonly sourceEvidence: SourceEvidence
  readonly baseline?: Baseline
  readonly anchor?: Event.StoredEvent
  readonly tail: ReadonlyArray<TailItem>
  readonly effectiveSourceDigest: string
  readonly latestMain: LatestMainContext
  /** Unknown prior operations under the manual-message policy (docs/engine.md §5.8), in log order. */
  readonly unknownOperations: ReadonlyArray<{ readonly name: string; readonly operationId: string }>
  /** The newest summary request after the baseline's coverage, through the high water; absent when none. */
  readonly latestSummary?: LatestSummary
}

export interface ContextOptions {
  readonly current?: string
  readonly maxEvents: number
  readonly maxBytes: number
  /** The manual-message policy (docs/engine.md §5.8): tolerate unknown outcomes sealed `outcome_unknown`. */
  readonly manual?: boolean
  /**
   * Read the lineage of this invocation (docs/log-format.md §3.6) instead of the session: for a sealed
   * run's replay, seen from a continuation about to claim it. A live `current` whose opening is a
   * continuation (or a handoff successor carrying a replay base) selects its own lineage without it.
   */
  readonly lineageOf?: string
}

/** A lineage selection: every event at or below `base`, and the events of `invocations`. */
export interface LineageSelection {
  readonly base: number
  readonly invocations: ReadonlySet<string>
  /** The run the selection is scoped to (the lineage's newest run). */
  readonly runId: string
}

interface Opening {
  readonly runId: string
  readonly sequence: number
  readonly fact: Fact.InvocationOpened
}

type Openings = ReadonlyMap<string, Opening>

/**
 * An invocation with its handoff predecessors and, recursively, its continuation sources and their
 * predecessors (docs/log-format.md §3.6), at most `MAX_ANCESTRY` links.
 */
const chainOf = (openings: Openings, invocationId: string): ReadonlySet<string> => {
  const invocations = new Set<string>([invocationId])
  let current = openings.get(invocationId)?.fact
  for (let depth = 0; current !== undefined && depth < Limits.MAX_ANCESTRY; depth++) {
    if (current.input.kind !== "continuation" && current.input.kind !== "handoff") break
    const source = current.input.claim.source.invocation.invocationId
    if (invocations.has(source)) break
    invocations.add(source)
    current = openings.get(source)?.fact
  }
  return invocations
}

/**
 * The selection a live invocation reads (docs/log-format.md §3.6): its lineage when it was opened by a
 * continuation (base: the claim's) or is a handoff successor carrying a replay base; `undefined` (the
 * session) otherwise.
 */
export const liveLineage = (openings: Openings, invocationId: string): LineageSelection | undefined => {
  const start = openings.get(invocationId)
  if (start === undefined) return undefined
  const input = start.fact.input
  const base =
    input.kind === "continuation" ? input.claim.base.highWater : input.kind === "handoff" ? input.pause.execution.replayBase : undefined
  return base === undefined ? undefined : { base, invocations: chainOf(openings, invocationId), runId: start.runId }
}

/**
 * The lineage of a sealed run seen by a continuation that claims it: its chain over the base it
 * inherits (a claim's, a replay base, or the session just before a message-opened root).
 */
export const sealedLineage = (openings: Openings, invocationId: string, sequenceBefore: (sequence: number) => number): LineageSelection => {
  const start = openings.get(invocationId)
  if (start === undefined) throw EventLogError.invalidTransition("the lineage's invocation has no opening")
  const input = start.fact.input
  const base =
    input.kind === "continuation"
      ? input.claim.base.highWater
      : input.kind === "handoff"
        ? (input.pause.execution.replayBase ?? input.claim.base.highWater)
        : sequenceBefore(start.sequence)
  return { base, invocations: chainOf(openings, invocationId), runId: start.runId }
}

const decodeOrUndefined = (row: Rows.Row): Event.RuntimeEvent | undefined => {
  try {
    return Rows.decode(row)
  } catch {
    return undefined
  }
}

/**
 * Requires `current` to be a live opening of the session. The writer's index answers for a session
 * it holds (an invocation live there is opened in that session and not sealed); otherwise one
 * indexed read.
 */
export const requireLive = async (tx: Rows.Tx, sessionId: string, current: string): Promise<Rows.Row> =>
  (await liveOpening(tx, sessionId, current)).row

/** `requireLive`'s opening, with its fact when the writer's index holds it decoded. */
const liveOpening = async (tx: Rows.Tx, sessionId: string, current: string): Promise<{ readonly row: Rows.Row; readonly fact?: Fact.InvocationOpened }> => {
  const known = LogIndex.of(tx)?.loaded(sessionId)?.live.get(current)?.opening
  if (known !== undefined) return known
  const { opening, terminal } = await Rows.boundaries(tx, current)
  if (opening === undefined || opening.sessionId !== sessionId || terminal !== undefined) {
    throw EventLogError.invalidTransition(Prompts.CURRENT_NOT_LIVE_MESSAGE)
  }
  return { row: opening }
}

const isAscending = (rows: ReadonlyArray<{ readonly sequence: number }>): boolean => {
  for (let index = 1; index < rows.length; index++) if (rows[index - 1]!.sequence >= rows[index]!.sequence) return false
  return true
}

/** The nearest row before `rows[at]` that `matches`. */
const findBefore = <R>(rows: ReadonlyArray<R>, at: number, matches: (row: R) => boolean): R | undefined => {
  for (let index = at - 1; index >= 0; index--) if (matches(rows[index]!)) return rows[index]
  return undefined
}

/** What `latestMain` reads of a row besides its event. */
type MainRow = Pick<Rows.Row, "sequence" | "eventId" | "invocationId" | "kind" | "operationId">

/**
 * docs/log-format.md §3.8, over the selection's rows (observations excluded) up to the high water.
 * `decode` gives a row's event, or undefined when it does not decode: rows the context read has
 * decoded already pass theirs, so the walk parses nothing twice.
 */
export const latestMain = <R extends MainRow>(
  rows: ReadonlyArray<R>,
  decode: (row: R) => Event.RuntimeEvent | undefined,
  /** A read's own rows, ascending by sequence: only the first `ascendingEnd` of them are walked. */
  ascendingEnd?: number,
): LatestMainContext => {
  // Walked from the newest row back. The log holds one request per step and one opening per
  // invocation (unique indexes), and a completion's trace needs both before it, so each is looked
  // for before the completion only: a walk of the last step, not a map of the session.
  const ordered = ascendingEnd !== undefined || isAscending(rows) ? rows : [...rows].sort((left, right) => left.sequence - right.sequence)
  const end = ascendingEnd ?? ordered.length
  for (let at = end - 1; at >= 0; at--) {
    const completion = ordered[at]!
    if (completion.kind !== "model_completed") continue
    const completed = decode(completion)
    const stepId = completion.operationId
    const requestRow = stepId === null ? undefined : findBefore(ordered, at, (row) => row.kind === "model_requested" && row.operationId === stepId)
    const openingRow = findBefore(ordered, at, (row) => row.kind === "invocation_opened" && row.invocationId === completion.invocationId)
    const requested = requestRow === undefined ? undefined : decode(requestRow)
    const opened = openingRow === undefined ? undefined : decode(openingRow)
    if (
      completed === undefined ||
      requested === undefined ||
      opened === undefined ||
      requestRow === undefined ||
      openingRow === undefined ||
      completed.fact.kind !== "model_completed" ||
      requested.fact.kind !== "model_requested" ||
      opened.fact.kind !== "invocation_opened" ||
      requestRow.invocationId !== completion.invocationId ||
      !(openingRow.sequence < requestRow.sequence && requestRow.sequence < completion.sequence) ||
      requested.fact.stepId !== completed.fact.stepId
    ) {
      return { kind: "trace_unavailable" }
    }
    if (requested.fact.purpose !== "main") continue
    const request = requested.fact
    let projectionCurrent = true
    // The archives after the request: the rows above it, walked from the newest down.
    for (let after = end - 1; after >= 0 && ordered[after]!.sequence > requestRow.sequence; after--) {
      const row = ordered[after]!
      if (row.kind !== "tool_result_archived") continue
      const archived = decode(row)?.fact
      if (archived?.kind !== "tool_result_archived") continue
      const targetId = archived.placeholder.identity.runtimeEventId
      const target = rows.find((candidate) => candidate.eventId === targetId)
      if (target !== undefined && target.sequence <= request.sourceHighWater) projectionCurrent = false
    }
    const binding = opened.fact.configuration.model
    return {
      kind: "selected",
      projectionCurrent,
      sequence: completion.sequence,
      recordedAt: completed.recordedAt,
      modelId: request.modelId,
      ...(binding === undefined ? {} : { connectionId: binding.connectionId }),
      ...(request.checkpointEventId === undefined ? {} : { checkpointEventId: request.checkpointEventId }),
      ...(request.context === undefined ? {} : { context: request.context }),
      usage: completed.fact.output.usage,
      routeIdentity: request.routeIdentity,
    }
  }
  return { kind: "no_completed_request" }
}

/**
 * `latestMain` read on its own (docs/log-format.md §3.8): the session's rows without observations, each decoded only
 * when the walk reaches it, so a damaged newest completion is `trace_unavailable` (never `Decode`,
 * never an older completion). It reads evidence and is not gated by the history-safety check.
 */
export const readLatestMain = async (tx: Rows.Tx, sessionId: string): Promise<LatestMainContext> =>
  latestMain(await Rows.ofSession(tx, sessionId, { withObservations: false }), decodeOrUndefined)

/**
 * A row of the context read with its event, decoded once, and its size in UTF-8 bytes. Its text is
 * kept only when the read hashes after the selection (see `materialise`).
 */
interface DecodedRow extends Omit<Rows.Row, "json" | "sessionId" | "turnId" | "runId"> {
  readonly json: string | undefined
  readonly bytes: number
  readonly stored: Event.StoredEvent
  /** The row as a tail item, made once: the sources of a batch that hold it share it. */
  canonical: TailItem | undefined
}

/** A context read with the session's running log-prefix hash over the very rows it read. */
export interface ModelContextRead {
  readonly source: ModelContextSource
  /**
   * The running hash of the session through `source.sourceEvidence.highWater`: equal to
   * `sessionHash(sessionId, highWater)`, ready to be extended by a live run (docs/log-format.md §3.5).
   */
  readonly hash: Digest.LogPrefixHash
}

/** The fence of a compaction source (docs/log-format.md §3.7 step 3). */
export type CompactionMode = ModelContext.CheckpointMode["kind"]

export interface CompactionOptions {
  /** The live invocation that compacts; it must be at a settled boundary. */
  readonly current: string
  readonly mode: CompactionMode
  readonly maxEvents: number
  readonly maxBytes: number
  /**
   * Over the limits, lower the fence to the highest clean cut whose context fits instead of failing
   * (for `mid_turn`, one at or above the current opening, which its checkpoint re-sends as anchor).
   */
  readonly fit?: boolean
}

/** What a compaction adds to a context read: its mode and whether the fence may be lowered. */
interface Fence {
  readonly mode: CompactionMode
  readonly fit: boolean
}

/** An observation as the core keeps it: hashed, never decoded (its text kept as a row's is). */
interface ObservationEntry {
  readonly sequence: number
  readonly kind: string
  readonly json: string | undefined
  readonly invocationId: string
  readonly stored?: undefined
}

/** A session row as the core keeps it: every row is hashed, every row but the observations decoded. */
type SessionEntry = DecodedRow | ObservationEntry

/**
 * `readModelContext` over a session selection, in one select of the session: every row is hashed
 * from its stored text, and every row but the observations is decoded once and shared by the gate,
 * the baseline, the archives, the tail and `latestMain`.
 */
export const readModelContext = (
  tx: Rows.Tx,
  dialect: Dialect,
  sessionId: string,
  options: ContextOptions,
): Promise<ModelContextRead> => materialise(tx, dialect, sessionId, options, undefined)

/**
 * `prepareContextCompaction` (docs/log-format.md §3.7): the context read of a compaction source.
 * `current` must be live and at a settled boundary; the source stops at the mode's fence, before
 * the current opening for `pre_turn` and `standalone`, at the read's high water for `mid_turn`;
 * with `fit`, over the limits, at the highest clean cut below it that fits (docs/log-format.md §3.7).
 */
export const prepareContextCompaction = (
  tx: Rows.Tx,
  dialect: Dialect,
  sessionId: string,
  options: CompactionOptions,
): Promise<ModelContextRead> =>
  materialise(
    tx,
    dialect,
    sessionId,
    { current: options.current, maxEvents: options.maxEvents, maxBytes: options.maxBytes },
    { mode: options.mode, fit: options.fit === true },
  )

/**
 * Whether the source may end at `entries[index]`: the next session row opens an invocation or
 * requests a main step. Before either, every local call at or below the cut has its result at or
 * below it, so a cut there never separates a call from its result.
 */
const isCleanCut = (entries: ReadonlyArray<SessionEntry>, index: number): boolean => {
  const next = entries[index + 1]
  if (next === undefined) return false
  if (next.kind === "invocation_opened") return true
  if (next.kind !== "model_requested" || next.stored === undefined) return false
  const fact = next.stored.event.fact
  return fact.kind === "model_requested" && fact.purpose === "main"
}

/**
 * Every row of the session as this transaction sees it: the rows the writer's index loaded for the
 * session in an earlier read (the engine's admission check), then the rows after them, so a session
 * met for the first time is read once (docs/architecture.md §12); otherwise one read. The index
 * serves only SQLite, whose one connection runs transactions one at a time: this one began after
 * the read that loaded the rows ended, so it sees all of them. The array is the caller's own.
 */
const sessionRowsOf = async (tx: Rows.Tx, sessionId: string): Promise<Array<Rows.SessionRow | undefined>> => {
  LogIndex.noteRowsRead(tx)
  const primed = LogIndex.of(tx)?.takePrimed(sessionId)
  if (primed === undefined) return Rows.sessionRows(tx, sessionId)
  const highWater = await Rows.sessionHighWater(tx, sessionId)
  if (highWater === primed.highWater) return primed.rows.slice()
  return [...primed.rows, ...(await Rows.sessionRowsBetween(tx, sessionId, primed.highWater, highWater))]
}

/**
 * Whether a context read may select fewer rows than the session's, or stop below its high water: a
 * compaction source (its fence), a sealed run's lineage, or a live run opened as a continuation or a
 * handoff successor (which may read its lineage, docs/log-format.md §3.6). Any other read's evidence
 * covers every row it reads, so it is hashed as the rows are read.
 */
const maySelect = (
  opening: { readonly row: Rows.Row; readonly fact?: Fact.InvocationOpened } | undefined,
  options: ContextOptions,
  fence: Fence | undefined,
): boolean => {
  if (fence !== undefined || options.lineageOf !== undefined) return true
  if (opening === undefined) return false
  const fact = opening.fact ?? decodeOrUndefined(opening.row)?.fact
  return fact?.kind !== "invocation_opened" || fact.input.kind === "continuation" || fact.input.kind === "handoff"
}

/**
 * `event` with the invocation of the row decoded before it when the two are equal: every event of a
 * run names the same four ids, and the parse of each row gives them their own object and strings,
 * all kept alive with the decoded events (what a young-generation collection during a long read
 * copies, once or twice). The event is the read's own fresh parse, seen by nobody yet.
 */
const sharedInvocation = (event: Event.RuntimeEvent, invocations: { last?: Identity.Invocation }): Event.RuntimeEvent => {
  const last = invocations.last
  if (last !== undefined && Identity.sameInvocation(event.invocation, last)) {
    ;(event as { invocation: Identity.Invocation }).invocation = last
    return event
  }
  invocations.last = event.invocation
  return event
}

/**
 * `readFrozenModelContext` (docs/log-format.md §3.7): the context an earlier read gave, rebuilt from
 * the rows at or below its evidence's high water (a later archive, checkpoint or run is above it and
 * changes nothing), in the selection its scope names. The history-safety gate is the one that held
 * at the high water: the invocation then live is excluded, and unknown outcomes sealed
 * `outcome_unknown` are tolerated (the read may have been a manual message's). The rows' digest must
 * be the evidence's: a source whose rows changed is refused, never rebuilt from other rows.
 */
export const readFrozenModelContext = async (
  tx: Rows.Tx,
  dialect: Dialect,
  evidence: SourceEvidence,
  limits: { readonly maxEvents: number; readonly maxBytes: number },
): Promise<ModelContextSource> => {
  const sessionId = checkFrozenEvidence(evidence)
  checkFrozenHighWater(evidence, await Rows.sessionHighWater(tx, sessionId))
  return frozenSource(tx, dialect, sessionId, evidence, limits, undefined)
}

/** The session a frozen read's evidence names; refuses a root scope or a high water that is no sequence. */
const checkFrozenEvidence = (evidence: SourceEvidence): string => {
  if (!Schema.is(Identity.LogScope)(evidence.scope) || evidence.scope.kind === "root") {
    throw EventLogError.invalidTransition("a frozen model context is read from a session or lineage scope")
  }
  if (!Number.isSafeInteger(evidence.highWater) || evidence.highWater < 0) {
    throw EventLogError.invalidTransition(`a frozen source's high water must be a sequence (an integer ≥ 0), got ${String(evidence.highWater)}`)
  }
  return evidence.scope.kind === "session" ? evidence.scope.id : evidence.scope.sessionId
}

const checkFrozenHighWater = (evidence: SourceEvidence, sessionHighWater: number): void => {
  if (evidence.highWater > sessionHighWater) {
    throw EventLogError.invalidTransition(
      `the frozen source's high water ${evidence.highWater} is past the session's last event (${sessionHighWater})`,
    )
  }
}

/** The source a frozen read rebuilds, refused when its rows no longer give the evidence's digest. */
const frozenSource = async (
  tx: Rows.Tx,
  dialect: Dialect,
  sessionId: string,
  evidence: SourceEvidence,
  limits: { readonly maxEvents: number; readonly maxBytes: number },
  shared: SharedRows | undefined,
): Promise<ModelContextSource> => {
  const { source } = await materialise(tx, dialect, sessionId, limits, undefined, evidence, shared)
  if (source.sourceEvidence.digest !== evidence.digest) {
    throw EventLogError.invalidTransition(
      `the frozen source changed: its rows through ${evidence.highWater} no longer give the digest it recorded`,
    )
  }
  return source
}

/**
 * `readLineageContext` (docs/log-format.md §3.7): the context of the sealed run a boundary names,
 * over that run's lineage (docs/log-format.md §3.6), as a continuation claiming the boundary replays
 * it. The boundary must be the run's whole sealed prefix: same invocation, the run's event count as
 * its high water and the run-prefix digest of those events (a claim's `source`).
 */
export const readLineageContext = async (
  tx: Rows.Tx,
  dialect: Dialect,
  boundary: FactLineage.RunBoundary,
  limits: { readonly maxEvents: number; readonly maxBytes: number },
): Promise<ModelContextSource> => {
  const { invocation } = boundary
  const prefix = await Lineage.runPrefix(tx, invocation.sessionId, invocation.runId)
  if (prefix === undefined || !Identity.sameInvocation(prefix.invocation, invocation)) {
    throw EventLogError.invalidTransition(`the boundary's run ${invocation.runId} of invocation ${invocation.invocationId} does not exist`)
  }
  if (prefix.events[prefix.events.length - 1]!.event.fact.kind !== "invocation_ended") {
    throw EventLogError.invalidTransition("the boundary's run is not sealed")
  }
  if (prefix.highWater !== boundary.highWater || prefix.digest !== boundary.digest) {
    throw EventLogError.invalidTransition(
      `the boundary is not its run's sealed prefix: the run has ${prefix.highWater} events under another digest than the boundary's ${boundary.highWater}`,
    )
  }
  const { source } = await materialise(tx, dialect, invocation.sessionId, { lineageOf: invocation.invocationId, ...limits }, undefined)
  return source
}

/**
 * The lineage a frozen lineage scope names: the lineage of the newest invocation of its run at or
 * below the high water (a handoff successor opened later adds no row at or below it).
 */
const frozenSelection = (decodedRows: ReadonlyArray<DecodedRow>, count: number, scope: Identity.LogScope): LineageSelection | undefined => {
  if (scope.kind !== "lineage") return undefined
  const rows = decodedRows.slice(0, count)
  const openings = openingsOf(rows)
  let newest: string | undefined
  for (const [invocationId, opening] of openings) if (opening.runId === scope.runId) newest = invocationId
  if (newest === undefined) throw EventLogError.invalidTransition(`the frozen source's run ${scope.runId} has no opening at or below its high water`)
  return sealedLineage(openings, newest, (sequence) => rows.filter((row) => row.sequence < sequence).at(-1)?.sequence ?? 0)
}

/** The invocations opened among the rows and not ended among them (at most one in a session). */
const liveAmong = (rows: ReadonlyArray<DecodedRow>): ReadonlyArray<string> => {
  const live = new Set<string>()
  for (const row of rows) {
    if (row.kind === "invocation_opened") live.add(row.invocationId)
    else if (row.kind === "invocation_ended") live.delete(row.invocationId)
  }
  return [...live]
}

/**
 * Decodes session rows in order into `entries` (when `deferred`: every row with its text, to hash
 * and cut later) and `decodedRows` (every row but the observations), hashing each into `streamed`
 * when given; returns the last row's sequence. An undecodable row ends the loop with `undecodable`.
 * The rows are released as they are read.
 */
const decodeRows = async (
  rows: Array<Rows.SessionRow | undefined>,
  streamed: Digest.LogPrefixHash | undefined,
  deferred: boolean,
  entries: Array<SessionEntry>,
  decodedRows: Array<DecodedRow>,
  undecodable: (sequence: number, failure: { readonly message: string }) => Promise<never>,
): Promise<number> => {
  let lastSequence = 0
  const invocations: { last?: Identity.Invocation } = {}
  for (let index = 0; index < rows.length; index++) {
    const [rowSequence, observedInvocationId, rowJson] = rows[index]!
    rows[index] = undefined
    const sequence = Rows.toNumber(rowSequence)
    const size = streamed === undefined ? -1 : streamed.append(sequence, rowJson)
    const json = deferred ? rowJson : undefined
    lastSequence = sequence
    if (observedInvocationId !== null) {
      // Which invocation wrote an observation (it is not decoded): its row carries it.
      if (deferred) entries.push({ sequence, kind: "model_observed", json, invocationId: observedInvocationId })
      continue
    }
    // The other ids come from the event itself (the columns are written from it).
    const decodedJson = Codec.decodeEventJson(rowJson)
    const parsed = Result.isSuccess(decodedJson) ? decodedJson.success : await undecodable(sequence, decodedJson.failure)
    const event = sharedInvocation(parsed, invocations)
    const decoded: DecodedRow = {
      sequence,
      eventId: event.id,
      invocationId: event.invocation.invocationId,
      kind: event.fact.kind,
      operationId: Fact.operationKey(event.fact) ?? null,
      json,
      bytes: size >= 0 ? size : Canonical.utf8Length(rowJson),
      stored: { sequence, event },
      canonical: undefined,
    }
    decodedRows.push(decoded)
    if (deferred) entries.push(decoded)
  }
  return lastSequence
}

/**
 * The rows of a frozen read that a batch already read and decoded (`readFrozenModelContexts`): the
 * session's rows at or below the read's high water, the read's own arrays, and what the batch keeps
 * between its reads (running hashes by selection, the gate's verdicts of sealed invocations).
 */
interface SharedRows {
  readonly entries: ReadonlyArray<SessionEntry>
  readonly decodedRows: ReadonlyArray<DecodedRow>
  /** How many of `entries`, and of `decodedRows`, lie at or below the read's high water: its own rows. */
  readonly entryCount: number
  readonly rowCount: number
  /**
   * The decoded rows the pass over a selection reads (checkpoints, openings, summary requests,
   * archives), in order: each read of the batch walks these, not every row below its high water.
   */
  readonly notable: ReadonlyArray<DecodedRow>
  readonly hashes: SelectionHashes
  readonly gate: FrozenGate
}

/** Whether the pass over a selection in `materialise` reads `row` (every other row passes it by). */
const isNotable = (row: DecodedRow): boolean => {
  switch (row.kind) {
    case "context_checkpoint_recorded":
    case "invocation_opened":
    case "tool_result_archived":
      return true
    case "model_requested":
      return row.stored.event.fact.kind === "model_requested" && row.stored.event.fact.purpose === "summary"
    default:
      return false
  }
}

/**
 * The safety gate of a batch of frozen reads in ascending high water (`frozenSafety` for each):
 * the batch's decoded rows grouped by invocation and the invocations open among them, both kept
 * current as the high water rises, and the verdicts of sealed invocations, so each read folds only
 * what is not sealed yet instead of the whole session.
 */
class FrozenGate {
  private readonly groups = new Map<string, Array<Event.StoredEvent>>()
  private readonly live = new Set<string>()
  private readonly sealed = new Map<string, Safety.InvocationStatus>()
  private through = 0

  constructor(private readonly rows: ReadonlyArray<DecodedRow>) {}

  /** The gate at the high water of the first `count` decoded rows (at or above the last call's). */
  check(tx: Rows.Tx, dialect: Dialect, count: number): Promise<Safety.SafetyResult> {
    for (; this.through < count; this.through++) {
      const row = this.rows[this.through]!
      const group = this.groups.get(row.invocationId)
      if (group === undefined) this.groups.set(row.invocationId, [row.stored])
      else group.push(row.stored)
      if (row.kind === "invocation_opened") this.live.add(row.invocationId)
      else if (row.kind === "invocation_ended") this.live.delete(row.invocationId)
    }
    const live = [...this.live]
    return Safety.checkGroups(tx, dialect, this.groups, { ...(live.length === 1 ? { exclude: live[0]! } : {}), manual: true }, this.sealed)
  }
}

/**
 * The shared core of the context reads; `fence` makes it a compaction source, `frozen` a frozen
 * read of an earlier read's evidence.
 */
const materialise = async (
  tx: Rows.Tx,
  dialect: Dialect,
  sessionId: string,
  options: ContextOptions,
  fence: Fence | undefined,
  frozen?: SourceEvidence,
  shared?: SharedRows,
): Promise<ModelContextRead> => {
  const live = options.current === undefined ? undefined : await liveOpening(tx, sessionId, options.current)
  const opening = live?.row
  let scope: Identity.LogScope = { kind: "session", id: sessionId }
  // The evidence of a read that covers every row it reads is hashed as the rows are read, and no
  // row's text outlives its turn of the loop: a long session's read then keeps its decoded events
  // alive, not their text as well (what a young-generation collection during the read copies).
  const deferred = frozen !== undefined || maySelect(live, options, fence)
  const streamed = deferred ? undefined : Digest.LogPrefixHash.start(scope)
  // The rows as entries, observations included, are kept only for a read that may select (what it
  // hashes, where it may cut); a read that hashes as it reads needs only its last sequence.
  const ownEntries: Array<SessionEntry> = []
  let lastSequence = 0
  // Every decoded row of the session: the safety gate reads them all, whatever the selection keeps.
  const ownRows: Array<DecodedRow> = []
  if (shared === undefined) {
    // A frozen read's rows stop at its high water: every fact above it is left out.
    const rows =
      frozen === undefined ? await sessionRowsOf(tx, sessionId) : [...(await Rows.sessionRowsBetween(tx, sessionId, 0, frozen.highWater))]
    lastSequence = await decodeRows(rows, streamed, deferred, ownEntries, ownRows, (sequence, failure) =>
      Rows.undecodableAt(tx, sequence, failure),
    )
  }
  // A batch's shared rows run past this read's high water: its own are the first `rowCount` (and
  // `entryCount`), never copied out.
  const decodedRows = shared?.decodedRows ?? ownRows
  const rowCount = shared?.rowCount ?? ownRows.length
  let entries: ReadonlyArray<SessionEntry> = shared?.entries ?? ownEntries
  let entryCount = shared?.entryCount ?? ownEntries.length
  const selection = frozen === undefined ? selectionOf(decodedRows, options) : frozenSelection(decodedRows, rowCount, frozen.scope)
  const selected = (row: { readonly sequence: number; readonly invocationId: string }) =>
    selection === undefined || row.sequence <= selection.base || selection.invocations.has(row.invocationId)
  let withoutObservations = decodedRows
  let rowsEnd = rowCount
  if (selection !== undefined) {
    // A lineage selection: the rows of later unrelated runs of the session are left out of the
    // context and its evidence (the safety gate still reads the whole session).
    scope = { kind: "lineage", sessionId, runId: selection.runId }
    withoutObservations = decodedRows.slice(0, rowCount).filter(selected)
    rowsEnd = withoutObservations.length
    entries = entries.slice(0, entryCount).filter(selected)
    entryCount = entries.length
  }
  const readHighWater = !deferred ? lastSequence : entryCount === 0 ? 0 : entries[entryCount - 1]!.sequence
  if (fence !== undefined && options.current !== undefined) {
    const own = decodedRows.filter((row) => row.invocationId === options.current).map((row) => row.stored)
    const reason = InvocationState.unsettledReason(InvocationState.fold(own), "main")
    if (reason !== undefined) throw EventLogError.invalidTransition(`the invocation is not at a settled boundary: ${reason}`)
  }
  const safety =
    frozen === undefined
      ? await Safety.checkEvents(
          tx,
          dialect,
          sessionId,
          () => decodedRows.map((row) => row.stored),
          {
            ...(options.current === undefined ? {} : { exclude: options.current }),
            ...(options.manual === true ? { manual: true } : {}),
          },
        )
      : await (shared === undefined ? frozenSafety(tx, dialect, decodedRows) : shared.gate.check(tx, dialect, rowCount))
  // Step 3: the selection's high water, the mode's fence of a compaction source, or a frozen read's.
  let highWater = frozen?.highWater ?? readHighWater
  if (fence !== undefined && fence.mode !== "mid_turn" && opening !== undefined) {
    highWater = 0
    for (const entry of entries) if (entry.sequence < opening.sequence) highWater = entry.sequence
  }
  // One pass over the selection: the checkpoints that count (a compaction source's own earlier
  // checkpoints count when they cover no more than the fence: a run compacting in passes goes on
  // from its last pass), and what keeps a row out of the tail or replaces its result. Each row's
  // kind is on the row, so only the rows these facts concern have their event read.
  const checkpoints: Array<DecodedRow> = []
  const compactInvocations = new Set<string>()
  const summarySteps = new Set<string>()
  const archives = new Map<string, { readonly placeholder: Archive.ArchivedPlaceholder; readonly eventId: string }>()
  // A batch's read walks the batch's notable rows through its own high water, in its selection.
  for (const row of shared?.notable ?? withoutObservations) {
    if (shared !== undefined) {
      if (row.sequence > readHighWater) break
      if (!selected(row)) continue
    }
    switch (row.kind) {
      case "context_checkpoint_recorded": {
        if (row.sequence <= highWater) checkpoints.push(row)
        else if (fence !== undefined && row.invocationId === options.current) {
          const fact = row.stored.event.fact
          if (fact.kind === "context_checkpoint_recorded" && fact.checkpoint.coveredThrough <= highWater) checkpoints.push(row)
        }
        break
      }
      case "invocation_opened": {
        const fact = row.stored.event.fact
        if (fact.kind === "invocation_opened" && fact.input.kind === "context_compact") compactInvocations.add(row.invocationId)
        break
      }
      case "model_requested": {
        const fact = row.stored.event.fact
        if (fact.kind === "model_requested" && fact.purpose === "summary") summarySteps.add(fact.stepId)
        break
      }
      case "tool_result_archived": {
        const fact = row.stored.event.fact
        if (fact.kind === "tool_result_archived") {
          archives.set(fact.placeholder.identity.runtimeEventId, { placeholder: fact.placeholder, eventId: row.eventId })
        }
        break
      }
    }
  }
  const checkpointIds = new Set(checkpoints.map((row) => row.eventId))
  const baselineRow = checkpoints[checkpoints.length - 1]
  let baseline: Baseline | undefined
  if (baselineRow !== undefined) {
    const fact = baselineRow.stored.event.fact
    if (fact.kind !== "context_checkpoint_recorded") throw EventLogError.make({ _tag: "Decode", message: "baseline" })
    const previous = fact.checkpoint.previousCheckpointId
    if (previous !== undefined && !checkpointIds.has(previous)) {
      throw EventLogError.invalidTransition("the baseline's predecessor chain is broken")
    }
    baseline = { eventId: baselineRow.eventId, sequence: baselineRow.sequence, checkpoint: fact.checkpoint }
  }
  const coveredThrough = baseline?.checkpoint.coveredThrough ?? 0
  let anchorEvents = 0
  let anchorBytes = 0
  let anchor: Event.StoredEvent | undefined
  if (baseline !== undefined && baseline.checkpoint.mode.kind === "mid_turn") {
    const anchorRow = await Rows.byEventId(tx, baseline.checkpoint.mode.anchorEventId)
    if (anchorRow === undefined) throw EventLogError.invalidTransition("the baseline's anchor is missing")
    anchor = Rows.stored(anchorRow)
    anchorEvents = 1
    anchorBytes = Canonical.utf8Length(anchorRow.json)
  }
  const isTail = (row: DecodedRow): boolean =>
    row.sequence > coveredThrough &&
    row.kind !== "context_checkpoint_recorded" &&
    row.kind !== "tool_result_archived" &&
    !compactInvocations.has(row.invocationId) &&
    !(row.operationId !== null && summarySteps.has(row.operationId) && row.kind.startsWith("model_"))
  const archiveOf = (row: DecodedRow) => (row.kind === "tool_settled" && archives.size > 0 ? archives.get(row.eventId) : undefined)
  const charge = (row: DecodedRow): number => {
    const archive = archiveOf(row)
    return archive === undefined ? row.bytes : replacementBytes(archive.placeholder)
  }
  // The tail through `through`, what it costs, and the newest summary attempt after the baseline
  // (and whether it was drained), in one pass.
  const tailThrough = (through: number) => {
    let events = anchorEvents
    let bytes = anchorBytes
    const replacements: Array<{ settledEventId: string; archiveEventId: string }> = []
    const tail: Array<TailItem> = []
    let latestSummary: LatestSummary | undefined
    // The rows the baseline covers are passed by: the walk starts after them.
    for (let index = countThrough(withoutObservations, coveredThrough); index < rowsEnd; index++) {
      const row = withoutObservations[index]!
      if (row.sequence > through) break
      if (row.sequence <= coveredThrough) continue
      if (row.kind === "model_requested" || row.kind === "model_interrupted") {
        const fact = row.stored.event.fact
        if (fact.kind === "model_requested" && fact.purpose === "summary") {
          latestSummary = { stepId: fact.stepId, sequence: row.sequence, drained: false }
        } else if (fact.kind === "model_interrupted" && latestSummary?.stepId === fact.stepId && fact.status === "cancelled") {
          latestSummary = { ...latestSummary, drained: true }
        }
      }
      if (!isTail(row)) continue
      const archive = archiveOf(row)
      events += 1
      const stored = row.stored
      if (archive === undefined) {
        bytes += row.bytes
        tail.push((row.canonical ??= { kind: "canonical", stored }))
        continue
      }
      const replacement = Archive.modelValue(archive.placeholder.identity, archive.placeholder.page)
      bytes += valueBytes(replacement)
      const fact = stored.event.fact
      replacements.push({ settledEventId: row.eventId, archiveEventId: archive.eventId })
      tail.push({
        kind: "archived",
        sequence: row.sequence,
        eventId: row.eventId,
        invocation: stored.event.invocation,
        operationId: row.operationId ?? "",
        replacement,
        archiveEventId: archive.eventId,
        isError: fact.kind === "tool_settled" && fact.outcome.kind === "failed",
      })
    }
    return { events, bytes, replacements, tail, latestSummary }
  }
  let built = tailThrough(highWater)
  if (built.events > options.maxEvents || built.bytes > options.maxBytes) {
    if (fence === undefined || !fence.fit || (fence.mode === "mid_turn" && opening === undefined)) throw EventLogError.prefixTooLarge()
    // A `mid_turn` checkpoint re-sends the current opening as its anchor: its cut covers the opening.
    const after = fence.mode === "mid_turn" ? Math.max(coveredThrough, opening!.sequence - 1) : coveredThrough
    const cut = CompactionCut.highestFittingCut(
      entries.map((entry, index): CompactionCut.CutRow => ({
        sequence: entry.sequence,
        isCleanCut: isCleanCut(entries, index),
        tailBytes: entry.stored !== undefined && isTail(entry) ? charge(entry) : undefined,
      })),
      { after, through: highWater, anchorEvents, anchorBytes, maxEvents: options.maxEvents, maxBytes: options.maxBytes },
    )
    if (cut === undefined) throw EventLogError.prefixTooLarge()
    highWater = cut
    built = tailThrough(highWater)
  }
  const { replacements, tail, latestSummary } = built
  // Step 7: the evidence streams every row of the selection up to the high water, observations included.
  const hash = streamed ?? (shared === undefined ? hashSelection(scope, entries, highWater) : shared.hashes.of(scope, selection, entries, highWater))
  if (hash === streamed && (scope.kind !== "session" || highWater !== readHighWater)) {
    throw new Error("a context read hashed as it read selected fewer rows than it read")
  }
  const sourceDigest = hash.digest(highWater)
  const source: ModelContextSource = {
    sourceEvidence: { scope, highWater, digest: sourceDigest },
    ...(baseline === undefined ? {} : { baseline }),
    ...(anchor === undefined ? {} : { anchor }),
    tail,
    effectiveSourceDigest: Digest.effectiveSource(sourceDigest, replacements),
    latestMain: latestMain(withoutObservations, (row) => row.stored.event, countThrough(withoutObservations, highWater)),
    unknownOperations: safety.unknownOperations,
    ...(latestSummary === undefined ? {} : { latestSummary }),
  }
  return { source, hash }
}

/**
 * The gate as it stood at a frozen read's high water, over the rows at or below it: the invocation
 * live there (the earlier read's `current`) is excluded, and the manual policy applies. Two live
 * invocations exclude neither, and fail the gate.
 */
const frozenSafety = (tx: Rows.Tx, dialect: Dialect, rows: ReadonlyArray<DecodedRow>): Promise<Safety.SafetyResult> => {
  const live = liveAmong(rows)
  return Safety.checkFolded(
    tx,
    dialect,
    rows.map((row) => row.stored),
    { ...(live.length === 1 ? { exclude: live[0]! } : {}), manual: true },
  )
}

/** The evidence of a selection through `highWater`, from the text its entries kept. */
const hashSelection = (scope: Identity.LogScope, entries: ReadonlyArray<SessionEntry>, highWater: number): Digest.LogPrefixHash => {
  const hash = Digest.LogPrefixHash.start(scope)
  hashEntries(hash, entries, 0, highWater)
  return hash
}

/** Hashes `entries` from `from` on through `highWater` into `hash`; returns the index it stopped at. */
const hashEntries = (hash: Digest.LogPrefixHash, entries: ReadonlyArray<SessionEntry>, from: number, highWater: number): number => {
  let index = from
  for (; index < entries.length; index++) {
    const entry = entries[index]!
    if (entry.sequence > highWater) break
    if (entry.json === undefined) throw new Error("a context read that selects kept no row text to hash")
    hash.update(entry.sequence, entry.json)
  }
  return index
}

/**
 * The running hashes of a batch of frozen reads over one session, one per selection (the scope and,
 * for a lineage, its base and invocations). The same selection of a session's rows through a higher
 * high water extends the one through a lower (the same rule over the same rows), so a batch asking
 * in ascending high water goes on hashing where the read before it stopped: each selected row is
 * hashed once per selection.
 */
class SelectionHashes {
  private readonly running = new Map<string, { readonly hash: Digest.LogPrefixHash; count: number }>()

  /** The hash of `entries` (the selection's rows) through `highWater`, at or above every earlier call's. */
  of(scope: Identity.LogScope, selection: LineageSelection | undefined, entries: ReadonlyArray<SessionEntry>, highWater: number): Digest.LogPrefixHash {
    const key =
      selection === undefined
        ? Canonical.stringify(scope)
        : `${Canonical.stringify(scope)} ${selection.base} ${[...selection.invocations].sort().join(" ")}`
    let kept = this.running.get(key)
    if (kept === undefined) {
      kept = { hash: Digest.LogPrefixHash.start(scope), count: 0 }
      this.running.set(key, kept)
    }
    kept.count = hashEntries(kept.hash, entries, kept.count, highWater)
    return kept.hash
  }
}

/** A frozen read of a batch: its source, or the store's refusal of it. */
export type FrozenRead = Result.Result<ModelContextSource, EventLogError.EventLogError>

/**
 * `readFrozenModelContext` of each evidence (docs/log-format.md §3.7), in one transaction: each
 * session's rows through its highest valid high water are read and decoded once and shared by its
 * reads (so their events are the same objects, and what is memoised by event serves them all), each
 * selection is hashed once, forwards, and a sealed invocation's gate verdict is reached once. Each
 * evidence gets the source or the refusal its own `readFrozenModelContext` gives, in the given order.
 */
export const readFrozenModelContexts = async (
  tx: Rows.Tx,
  dialect: Dialect,
  evidences: ReadonlyArray<SourceEvidence>,
  limits: { readonly maxEvents: number; readonly maxBytes: number },
): Promise<ReadonlyArray<FrozenRead>> => {
  const results: Array<FrozenRead | undefined> = evidences.map(() => undefined)
  const refuse = (index: number, error: unknown) => {
    if (!EventLogError.isEventLogError(error)) throw error
    results[index] = Result.fail(error)
  }
  const bySession = new Map<string, Array<number>>()
  evidences.forEach((evidence, index) => {
    let sessionId: string
    try {
      sessionId = checkFrozenEvidence(evidence)
    } catch (error) {
      return refuse(index, error)
    }
    const indexes = bySession.get(sessionId)
    if (indexes === undefined) bySession.set(sessionId, [index])
    else indexes.push(index)
  })
  for (const [sessionId, indexes] of bySession) {
    const sessionHighWater = await Rows.sessionHighWater(tx, sessionId)
    const valid: Array<number> = []
    for (const index of indexes) {
      try {
        checkFrozenHighWater(evidences[index]!, sessionHighWater)
        valid.push(index)
      } catch (error) {
        refuse(index, error)
      }
    }
    if (valid.length === 0) continue
    valid.sort((left, right) => evidences[left]!.highWater - evidences[right]!.highWater)
    const through = evidences[valid[valid.length - 1]!]!.highWater
    const entries: Array<SessionEntry> = []
    const decodedRows: Array<DecodedRow> = []
    // An undecodable row refuses the reads that reach it; the reads below it go on.
    let undecodable: { readonly sequence: number; readonly error: unknown } | undefined
    const rows = [...(await Rows.sessionRowsBetween(tx, sessionId, 0, through))]
    await decodeRows(rows, undefined, true, entries, decodedRows, (sequence, failure) =>
      Rows.undecodableAt(tx, sequence, failure).catch((error: unknown) => {
        undecodable = { sequence, error }
        throw STOP
      }),
    ).catch((error: unknown) => {
      if (error !== STOP) throw error
    })
    const hashes = new SelectionHashes()
    const gate = new FrozenGate(decodedRows)
    const notable = decodedRows.filter(isNotable)
    for (const index of valid) {
      const evidence = evidences[index]!
      if (undecodable !== undefined && evidence.highWater >= undecodable.sequence) {
        refuse(index, undecodable.error)
        continue
      }
      try {
        const shared: SharedRows = {
          entries,
          decodedRows,
          entryCount: countThrough(entries, evidence.highWater),
          rowCount: countThrough(decodedRows, evidence.highWater),
          notable,
          hashes,
          gate,
        }
        results[index] = Result.succeed(await frozenSource(tx, dialect, sessionId, evidence, limits, shared))
      } catch (error) {
        refuse(index, error)
      }
    }
  }
  return results.map((result) => result!)
}

/** What stops a batch's decoding at an undecodable row (the row's own error is kept aside). */
const STOP = Symbol("undecodable row")

/** How many of `rows` (ascending by sequence) lie at or below `highWater`. */
const countThrough = (rows: ReadonlyArray<{ readonly sequence: number }>, highWater: number): number => {
  let low = 0
  let high = rows.length
  while (low < high) {
    const middle = (low + high) >>> 1
    if (rows[middle]!.sequence <= highWater) low = middle + 1
    else high = middle
  }
  return low
}

/** The lineage a read selects: the one asked for, or the live current's own (docs/log-format.md §3.6). */
const selectionOf = (rows: ReadonlyArray<DecodedRow>, options: ContextOptions): LineageSelection | undefined => {
  if (options.lineageOf === undefined && options.current === undefined) return undefined
  const openings = openingsOf(rows)
  if (options.lineageOf === undefined) return liveLineage(openings, options.current!)
  return sealedLineage(openings, options.lineageOf, (sequence) => rows.filter((row) => row.sequence < sequence).at(-1)?.sequence ?? 0)
}

/** The openings among decoded rows, by invocation id, in log order. */
const openingsOf = (rows: ReadonlyArray<DecodedRow>): Openings => {
  const openings = new Map<string, Opening>()
  for (const row of rows) {
    if (row.kind !== "invocation_opened") continue
    const fact = row.stored.event.fact
    if (fact.kind === "invocation_opened") openings.set(row.invocationId, { runId: row.stored.event.invocation.runId, sequence: row.sequence, fact })
  }
  return openings
}

/** The UTF-8 size of a value's canonical JSON: what an archived result's replacement charges. */
const valueBytes = (value: unknown): number => Canonical.utf8Length(Canonical.stringify(value))

const replacementBytes = (placeholder: Archive.ArchivedPlaceholder): number =>
  valueBytes(Archive.modelValue(placeholder.identity, placeholder.page))

/** Whether the invocation is at a settled boundary (compaction and prune need it). */
export const requireSettledBoundary = async (tx: Rows.Tx, invocationId: string): Promise<void> => {
  // Settlements (a run's largest rows) are known by their operation ids: their payloads are not read.
  const state = InvocationState.fold((await Rows.ofInvocation(tx, invocationId, { settlements: false })).map(Rows.stored))
  const settled = new Set(await Rows.operationsOfKind(tx, invocationId, "tool_settled"))
  const reason = InvocationState.unsettledReason(state, undefined, (operationId) => settled.has(operationId))
  if (reason !== undefined) throw EventLogError.invalidTransition(`the invocation is not at a settled boundary: ${reason}`)
}
