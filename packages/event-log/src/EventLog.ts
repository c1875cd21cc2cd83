/**
 * The `EventLog` service: checked appends and every read the engine derives state from, on SQLite
 * or PostgreSQL through one Kysely code path (docs/architecture.md §5, docs/log-format.md §3). Each operation is one
 * transaction; appends are uninterruptible, so a commit is never hidden from its caller.
 */
import { Clock, Context, Effect, Layer, PubSub, Result, Stream } from "effect"
import { EventSink, EventWrite as FactEventWrite, Limits, type Digest, type Event, type EventWrite, type Identity, type Lineage as FactLineage, type ToolCall } from "@maka/facts"
import * as EventLogError from "./EventLogError.ts"
import * as Append from "./internal/append.ts"
import * as ContextReads from "./internal/context.ts"
import type { Database } from "./internal/database.ts"
import * as Lineage from "./internal/lineage.ts"
import { openPostgres } from "./internal/open-postgres.ts"
import { openSqlite } from "./internal/open-sqlite.ts"
import * as Reads from "./internal/reads.ts"
import { storeError } from "./internal/store-error.ts"
import * as Rows from "./internal/rows.ts"

export type {
  Baseline,
  CompactionMode,
  FrozenRead,
  LatestMainContext,
  LatestSummary,
  ModelContextRead,
  ModelContextSource,
  SourceEvidence,
  TailItem,
} from "./internal/context.ts"
// Every type a public declaration names is exported from here by name, so a library's own
// declarations built on this package name it through this module, never through `internal/`.
export type { Database, Dialect } from "./internal/database.ts"
export type { Synchronous } from "./internal/synchronous.ts"
export type {
  LogPrefix,
  PruneCandidate,
  PruneCursor,
  PruneOptions,
  PrunePage,
  InvocationRecovery,
  SessionSummary,
  UndispatchedCall,
  UnfinishedPage,
} from "./internal/reads.ts"
export type { PendingHandoff, RunPrefix } from "./internal/lineage.ts"

/** The history limits every materialising read defaults to. */
export const defaults = Object.freeze({
  maxEvents: Limits.MAX_HISTORY_EVENTS,
  maxBytes: Limits.MAX_HISTORY_BYTES,
})

export interface ContextRequest {
  readonly current?: string
  readonly maxEvents?: number
  readonly maxBytes?: number
  /**
   * Read the lineage of this sealed invocation (docs/log-format.md §3.6): the replay a continuation of
   * it claims. A live `current` opened by a continuation reads its own lineage without it.
   */
  readonly lineageOf?: string
}

export interface CompactionRequest {
  /** The live invocation that compacts; it must be at a settled boundary. */
  readonly current: string
  /** `pre_turn` and `standalone` sources stop before the current opening; `mid_turn` covers through the read (or a `fit` cut). */
  readonly mode: ContextReads.CompactionMode
  readonly maxEvents?: number
  readonly maxBytes?: number
  /**
   * Over the limits, lower the fence to the highest clean cut above the baseline whose context fits
   * instead of failing `PrefixTooLarge`; a `mid_turn` cut also covers the current opening, its anchor.
   */
  readonly fit?: boolean
}

/**
 * Builds the trailing writes of a batch from the sequences of its leading writes (see `appendBatch`).
 * `priorHighWater(session)` is a leading write's session's last sequence before the batch, where the
 * writer's in-memory index knows it (SQLite); undefined otherwise (PostgreSQL). A wrapper of the log
 * that forwards `complete` should pass it on; a `complete` must expect it to be absent.
 */
export type CompleteBatch = (
  sequences: ReadonlyArray<number>,
  priorHighWater?: (sessionId: string) => number | undefined,
) => ReadonlyArray<EventWrite.EventWrite>

export interface EventLogShape {
  readonly dialect: Database["dialect"]
  readonly location: string
  /** Appends one write; returns its sequence (the original one on an exact replay). */
  readonly append: (write: EventWrite.EventWrite) => Effect.Effect<number, EventLogError.EventLogError>
  /**
   * Appends writes in one transaction, all or nothing. With `complete`, the writes it builds from
   * the sequences of `writes` are appended after them in the same transaction (a request whose
   * source evidence covers the settlements it commits with); the sequences returned cover both.
   */
  readonly appendBatch: (
    writes: ReadonlyArray<EventWrite.EventWrite>,
    complete?: CompleteBatch,
  ) => Effect.Effect<ReadonlyArray<number>, EventLogError.EventLogError>
  readonly prefix: (
    scope: Identity.LogScope,
    maxEvents?: number,
    maxBytes?: number,
  ) => Effect.Effect<Reads.LogPrefix, EventLogError.EventLogError>
  readonly runPrefix: (
    sessionId: string,
    runId: string,
    upTo?: number,
  ) => Effect.Effect<Lineage.RunPrefix | undefined, EventLogError.EventLogError>
  readonly readModelContext: (
    sessionId: string,
    request?: ContextRequest,
  ) => Effect.Effect<ContextReads.ModelContextSource, EventLogError.EventLogError>
  /** `readModelContext` under the manual-message policy (docs/engine.md §5.8). */
  readonly readManualMessageContext: (
    sessionId: string,
    request?: ContextRequest,
  ) => Effect.Effect<ContextReads.ModelContextSource, EventLogError.EventLogError>
  /**
   * `readModelContext` with the session's running log-prefix hash through the context's high water,
   * computed over the same rows in the same read: the hash `sessionHash(sessionId, highWater)` would
   * return, without reading the session a second time.
   */
  readonly readModelContextWithHash: (
    sessionId: string,
    request?: ContextRequest,
  ) => Effect.Effect<ContextReads.ModelContextRead, EventLogError.EventLogError>
  /**
   * The source of a compaction (docs/log-format.md §3.7): `readModelContextWithHash` fenced by the
   * mode, for a `current` invocation that is live and at a settled boundary. Its evidence and
   * running hash stop at the fence, which a `context_checkpoint_recorded` built from it covers.
   */
  readonly prepareContextCompaction: (
    sessionId: string,
    request: CompactionRequest,
  ) => Effect.Effect<ContextReads.ModelContextRead, EventLogError.EventLogError>
  /**
   * Re-reads exactly the context an earlier read gave (docs/log-format.md §3.7), from its
   * `sourceEvidence` (a request's `sourceScope`, `sourceHighWater` and `sourceDigest`): the rows at
   * or below its high water in the selection its scope names, with the checkpoint, archives and
   * `latestMain` that held there. Later archives never shrink it (its original bytes are charged
   * against `maxBytes`). Rows whose digest is no longer the evidence's are `InvalidTransition`.
   */
  readonly readFrozenModelContext: (
    sourceEvidence: ContextReads.SourceEvidence,
    limits?: { readonly maxEvents?: number; readonly maxBytes?: number },
  ) => Effect.Effect<ContextReads.ModelContextSource, EventLogError.EventLogError>
  /**
   * `readFrozenModelContext` of many evidences in one read (docs/log-format.md §3.7), each with the
   * source or the refusal its own read gives, in order: a session's rows are read and decoded once
   * for all its evidences (their sources share the same event objects), so rebuilding every request
   * of a session costs one read of it, not one per request. Only a failure of the read itself fails
   * the whole.
   */
  readonly readFrozenModelContexts: (
    sourceEvidences: ReadonlyArray<ContextReads.SourceEvidence>,
    limits?: { readonly maxEvents?: number; readonly maxBytes?: number },
  ) => Effect.Effect<ReadonlyArray<ContextReads.FrozenRead>, EventLogError.EventLogError>
  /**
   * The context of the sealed run a boundary names (a claim's `source`), over that run's lineage
   * (docs/log-format.md §3.6, §3.7): what a continuation claiming the boundary replays. A boundary
   * that is not its run's whole sealed prefix (invocation, event count and run-prefix digest) is
   * `InvalidTransition`.
   */
  readonly readLineageContext: (
    boundary: FactLineage.RunBoundary,
    limits?: { readonly maxEvents?: number; readonly maxBytes?: number },
  ) => Effect.Effect<ContextReads.ModelContextSource, EventLogError.EventLogError>
  /** `readManualMessageContext` with the running hash, as `readModelContextWithHash`. */
  readonly readManualMessageContextWithHash: (
    sessionId: string,
    request?: ContextRequest,
  ) => Effect.Effect<ContextReads.ModelContextRead, EventLogError.EventLogError>
  /**
   * The newest main completion of the session (docs/log-format.md §3.8), read on its own: not gated by the
   * history-safety check, and a damaged newest completion is `trace_unavailable`.
   */
  readonly latestMainContext: (sessionId: string) => Effect.Effect<ContextReads.LatestMainContext, EventLogError.EventLogError>
  /**
   * The history-safety gate (docs/log-format.md §3.7 step 2) by its own name: succeeds when every
   * invocation of the session except `current` is sealed and resolved, else `InvalidTransition`.
   * The admission preflight; `preparePruneCandidates` with `maxCandidates: 0` still runs the same gate.
   */
  readonly checkHistorySafety: (
    sessionId: string,
    options?: { readonly current?: string },
  ) => Effect.Effect<void, EventLogError.EventLogError>
  readonly preparePruneCandidates: (
    sessionId: string,
    options: Reads.PruneOptions,
  ) => Effect.Effect<Reads.PrunePage, EventLogError.EventLogError>
  readonly unfinishedInvocations: (
    limit: number,
  ) => Effect.Effect<ReadonlyArray<Identity.Invocation>, EventLogError.EventLogError>
  /**
   * Pages through every unfinished invocation (openings without a terminal), however many there are:
   * pass `next` back as `after` until it is absent. `limit` defaults to 10,000.
   */
  readonly unfinishedInvocationPage: (options?: {
    readonly after?: number
    readonly limit?: number
  }) => Effect.Effect<Reads.UnfinishedPage, EventLogError.EventLogError>
  readonly invocationRecovery: (
    invocation: Identity.Invocation,
    maxEvents?: number,
    maxBytes?: number,
  ) => Effect.Effect<Reads.InvocationRecovery, EventLogError.EventLogError>
  readonly checkManualMessageHistory: (sessionId: string) => Effect.Effect<boolean, EventLogError.EventLogError>
  readonly hasPendingHandoff: (sessionId: string) => Effect.Effect<boolean, EventLogError.EventLogError>
  /**
   * Every session of the log, in the order of its first event, summarised from the columns and the
   * indexes without decoding its events (docs/log-format.md §3.10): what `maka sessions` lists.
   */
  readonly sessionSummaries: () => Effect.Effect<ReadonlyArray<Reads.SessionSummary>, EventLogError.EventLogError>
  /**
   * Up to 64 sealed `handoff_paused` terminals after `afterSequence` (default 0) whose successor has
   * not opened, across the log, in sequence order (docs/log-format.md §3.10). Page with the last
   * sequence seen; restart from 0 after each full pass and never persist the cursor.
   */
  readonly pendingHandoffs: (afterSequence?: number) => Effect.Effect<ReadonlyArray<Lineage.PendingHandoff>, EventLogError.EventLogError>
  /**
   * The dry run of `invocation_ended {handoff_paused: pause}` for `invocation`: the checks its
   * append would run, with the same error, in a read transaction that writes nothing.
   */
  readonly checkHandoff: (
    invocation: Identity.Invocation,
    pause: FactLineage.HandoffPause,
  ) => Effect.Effect<void, EventLogError.EventLogError>
  /**
   * The session position just before a message-opened run's opening and the session prefix digest
   * there: the base a continuation of that run inherits.
   */
  readonly contextBeforeRun: (
    invocation: Identity.Invocation,
  ) => Effect.Effect<FactLineage.SessionBase, EventLogError.EventLogError>
  readonly continuationForSource: (
    boundary: FactLineage.RunBoundary,
  ) => Effect.Effect<Event.StoredEvent | undefined, EventLogError.EventLogError>
  readonly readToolResult: (
    sessionId: string,
    eventId: string,
  ) => Effect.Effect<{ readonly toolName: string; readonly raw: ToolCall.ToolOutput }, EventLogError.EventLogError>
  readonly events: (
    sessionId: string,
    after?: number,
    limit?: number,
  ) => Effect.Effect<ReadonlyArray<Event.StoredEvent>, EventLogError.EventLogError>
  /**
   * The highest sequence of the session (0 when it has none), from one index look-up: whether a
   * context read earlier is still current.
   */
  readonly sessionHighWater: (sessionId: string) => Effect.Effect<number, EventLogError.EventLogError>
  /** The session's running prefix hash through `through`, to be extended by a live run. */
  readonly sessionHash: (sessionId: string, through: number) => Effect.Effect<Digest.LogPrefixHash, EventLogError.EventLogError>
  /**
   * Copies a live SQLite log to the new file `destination` with SQLite's online backup API, while
   * writes go on: the copy is a valid log holding every event committed before the backup finished.
   * `destination` must not exist. A PostgreSQL log is refused (`Database`): use the server's tools.
   * Interrupted, the copy stops between two steps (or before it is put in place) and leaves nothing
   * at `destination` once the log is closed; a copy put in place before the interruption stays.
   */
  readonly backup: (destination: string) => Effect.Effect<void, EventLogError.EventLogError>
  /** A coalescing wake-up signal of the last committed sequence: subscribe, then catch up by reading. */
  readonly commits: Stream.Stream<number>
  readonly close: Effect.Effect<void>
}

export class EventLog extends Context.Service<EventLog, EventLogShape>()("@maka/event-log/EventLog") {}

const isUniqueViolation = (cause: unknown): boolean => {
  if (typeof cause !== "object" || cause === null) return false
  const code = "code" in cause ? cause.code : undefined
  return code === "SQLITE_CONSTRAINT_UNIQUE" || code === "SQLITE_CONSTRAINT_PRIMARYKEY" || code === "23505"
}

const describeCause = (cause: unknown): string => (cause instanceof Error ? cause.message : String(cause))

/**
 * Maps a failure of a write. The transaction maps a failure of its own COMMIT to `OutcomeUnknown`
 * (never assume success); anything else was thrown before COMMIT was sent, so the transaction was
 * rolled back: a unique index is a refusal, any other error a store error (`Database` or `Io`).
 */
const writeError = (cause: unknown): EventLogError.EventLogError => {
  if (EventLogError.isEventLogError(cause)) return cause
  if (isUniqueViolation(cause)) return EventLogError.invalidTransition(`a unique index refused the write: ${describeCause(cause)}`)
  return storeError(cause)
}

/** The event id of a dry-run write: never stored, only validated. */
const DRY_RUN_EVENT_ID = "00000000-0000-4000-8000-000000000000"

const readError = (cause: unknown): EventLogError.EventLogError =>
  EventLogError.isEventLogError(cause) ? cause : EventLogError.make({ _tag: "Database", message: describeCause(cause) })

/** Builds the service over an open database; `close` closes it. */
export const make = (database: Database): Effect.Effect<EventLogShape> =>
  Effect.gen(function* () {
    // The last committed sequence; a subscriber of `commits` first sees the latest (replay 1): the
    // log's high water at opening before any commit of this handle's.
    const committed = yield* PubSub.unbounded<number>({ replay: 1 })
    let lastCommitted = yield* Effect.orElseSucceed(
      Effect.tryPromise(() => database.read((tx) => Rows.logHighWater(tx))),
      () => 0,
    )
    PubSub.publishUnsafe(committed, lastCommitted)
    let closed = false
    const inFlight = new Set<Promise<unknown>>()
    const track = <A>(run: () => Promise<A>): Promise<A> => {
      if (closed) return Promise.reject(EventLogError.make({ _tag: "ConnectionClosed" }))
      const promise = run()
      inFlight.add(promise)
      const forget = () => inFlight.delete(promise)
      promise.then(forget, forget)
      return promise
    }
    const read = <A>(body: (tx: Rows.Tx) => Promise<A>) =>
      Effect.tryPromise({ try: () => track(() => database.read(body)), catch: readError })

    const appendTo = (writes: ReadonlyArray<EventWrite.EventWrite>, complete: CompleteBatch | undefined, now: number) =>
      Effect.tryPromise({
        try: () =>
          track(() => Append.appendBatch(database, writes, now, { complete })).then((result) => {
            if (result.inserted) {
              const last = Math.max(...result.sequences)
              if (last > lastCommitted) {
                lastCommitted = last
                PubSub.publishUnsafe(committed, last)
              }
            }
            return result.sequences
          }),
        catch: writeError,
      })
    const appendBatch = (
      writes: ReadonlyArray<EventWrite.EventWrite>,
      complete?: CompleteBatch,
    ): Effect.Effect<ReadonlyArray<number>, EventLogError.EventLogError> =>
      // A batch that is no list is refused as a write that is none is, never a defect.
      !Array.isArray(writes)
        ? Effect.fail(EventLogError.invalidTransition("the batch is not a list of checked EventWrites"))
        : complete !== undefined && typeof complete !== "function"
          ? Effect.fail(EventLogError.invalidTransition("the batch's complete is not a function"))
          : writes.length === 0 && complete === undefined
            ? Effect.succeed([])
            : Effect.uninterruptible(Effect.flatMap(Clock.currentTimeMillis, (now) => appendTo(writes, complete, now)))

    const context = (sessionId: string, request: ContextRequest, manual: boolean) =>
      read((tx) =>
        ContextReads.readModelContext(tx, database.dialect, sessionId, {
          ...(request.current === undefined ? {} : { current: request.current }),
          ...(request.lineageOf === undefined ? {} : { lineageOf: request.lineageOf }),
          maxEvents: request.maxEvents ?? defaults.maxEvents,
          maxBytes: request.maxBytes ?? defaults.maxBytes,
          manual,
        }),
      )

    return {
      dialect: database.dialect,
      location: database.location,
      append: (write) => Effect.map(appendBatch([write]), (sequences) => sequences[0]!),
      appendBatch,
      prefix: (scope, maxEvents = defaults.maxEvents, maxBytes = defaults.maxBytes) =>
        read((tx) => Reads.prefix(tx, database.dialect, scope, maxEvents, maxBytes)),
      runPrefix: (sessionId, runId, upTo) => read((tx) => Lineage.runPrefix(tx, sessionId, runId, upTo)),
      readModelContext: (sessionId, request = {}) => Effect.map(context(sessionId, request, false), (read) => read.source),
      readManualMessageContext: (sessionId, request = {}) =>
        Effect.map(context(sessionId, request, true), (read) => read.source),
      readModelContextWithHash: (sessionId, request = {}) => context(sessionId, request, false),
      readManualMessageContextWithHash: (sessionId, request = {}) => context(sessionId, request, true),
      prepareContextCompaction: (sessionId, request) =>
        read((tx) =>
          ContextReads.prepareContextCompaction(tx, database.dialect, sessionId, {
            current: request.current,
            mode: request.mode,
            maxEvents: request.maxEvents ?? defaults.maxEvents,
            maxBytes: request.maxBytes ?? defaults.maxBytes,
            ...(request.fit === undefined ? {} : { fit: request.fit }),
          }),
        ),
      readFrozenModelContext: (sourceEvidence, limits = {}) =>
        read((tx) =>
          ContextReads.readFrozenModelContext(tx, database.dialect, sourceEvidence, {
            maxEvents: limits.maxEvents ?? defaults.maxEvents,
            maxBytes: limits.maxBytes ?? defaults.maxBytes,
          }),
        ),
      readFrozenModelContexts: (sourceEvidences, limits = {}) =>
        read((tx) =>
          ContextReads.readFrozenModelContexts(tx, database.dialect, sourceEvidences, {
            maxEvents: limits.maxEvents ?? defaults.maxEvents,
            maxBytes: limits.maxBytes ?? defaults.maxBytes,
          }),
        ),
      readLineageContext: (boundary, limits = {}) =>
        read((tx) =>
          ContextReads.readLineageContext(tx, database.dialect, boundary, {
            maxEvents: limits.maxEvents ?? defaults.maxEvents,
            maxBytes: limits.maxBytes ?? defaults.maxBytes,
          }),
        ),
      latestMainContext: (sessionId) => read((tx) => ContextReads.readLatestMain(tx, sessionId)),
      checkHistorySafety: (sessionId, options = {}) =>
        read((tx) => Reads.checkHistorySafety(tx, database.dialect, sessionId, options.current)),
      preparePruneCandidates: (sessionId, options) =>
        read((tx) => Reads.preparePruneCandidates(tx, database.dialect, sessionId, options)),
      unfinishedInvocations: (limit) => read((tx) => Reads.unfinishedInvocations(tx, limit)),
      unfinishedInvocationPage: (options = {}) =>
        read((tx) => Reads.unfinishedInvocationPage(tx, options.after ?? 0, options.limit ?? defaults.maxEvents)),
      invocationRecovery: (invocation, maxEvents = defaults.maxEvents, maxBytes = defaults.maxBytes) =>
        read((tx) => Reads.invocationRecovery(tx, invocation, maxEvents, maxBytes)),
      checkManualMessageHistory: (sessionId) =>
        read((tx) => Reads.checkManualMessageHistory(tx, database.dialect, sessionId)),
      hasPendingHandoff: (sessionId) => read((tx) => Reads.hasPendingHandoff(tx, database.dialect, sessionId)),
      sessionSummaries: () => read((tx) => Reads.sessionSummaries(tx)),
      pendingHandoffs: (afterSequence = 0) => read((tx) => Lineage.pendingHandoffs(tx, database.dialect, afterSequence)),
      checkHandoff: (invocation, pause) =>
        Effect.gen(function* () {
          const recordedAt = yield* Clock.currentTimeMillis
          const built = FactEventWrite.plain({
            id: DRY_RUN_EVENT_ID,
            recordedAt,
            invocation,
            fact: { kind: "invocation_ended", outcome: { kind: "handoff_paused", pause } },
          })
          if (Result.isFailure(built)) {
            return yield* EventLogError.invalidTransition(`the write is not a checked EventWrite: ${built.failure.message}`)
          }
          yield* read((tx) => Append.checkWrite(tx, database.dialect, built.success))
        }),
      contextBeforeRun: (invocation) => read((tx) => Lineage.contextBeforeRun(tx, invocation)),
      continuationForSource: (boundary) => read((tx) => Reads.continuationForSource(tx, boundary)),
      readToolResult: (sessionId, eventId) => read((tx) => Reads.readToolResult(tx, sessionId, eventId)),
      events: (sessionId, after, limit) => read((tx) => Reads.events(tx, sessionId, after, limit)),
      sessionHighWater: (sessionId) => read((tx) => Rows.sessionHighWater(tx, sessionId)),
      sessionHash: (sessionId, through) => read((tx) => Reads.sessionHash(tx, sessionId, through)),
      backup: (destination) =>
        // An interruption stops the copy between two steps; closing the log waits until it has.
        Effect.tryPromise({ try: (signal) => track(() => database.backup(destination, signal)), catch: readError }),
      commits: Stream.fromPubSub(committed),
      close: Effect.suspend(() => {
        if (closed) return Effect.void
        closed = true
        // Its followers end: nothing more is committed through this handle.
        return Effect.andThen(
          PubSub.shutdown(committed),
          Effect.promise(async () => {
            await Promise.allSettled([...inFlight])
            await database.close()
          }),
        )
      }),
    }
  })

/** Opens `database` for the life of the scope. */
export const fromDatabase = (open: () => Promise<Database>) =>
  Effect.acquireRelease(
    Effect.flatMap(
      Effect.tryPromise({
        try: open,
        catch: (cause) =>
          EventLogError.isEventLogError(cause) ? cause : EventLogError.make({ _tag: "Io", message: describeCause(cause) }),
      }),
      make,
    ),
    (log) => log.close,
  )

export interface SqliteOptions {
  readonly path: string
  /** One of `SYNCHRONOUS_LEVELS`; anything else fails the open with `UnsupportedDatabase`, touching nothing. */
  readonly synchronous?: "FULL" | "NORMAL"
}

export { isSynchronous, SYNCHRONOUS_LEVELS } from "./internal/synchronous.ts"

/**
 * The embedded default: a SQLite file in WAL mode, `synchronous=FULL`, with the writer lease. The
 * path `":memory:"` opens an in-memory log instead (no file, no lease, gone at close) for tests and
 * notebooks.
 */
/**
 * What a caller without types passes where options or a location belong is refused as
 * `UnsupportedDatabase` naming it, before anything is opened, never a bare `TypeError` as `Io`.
 */
const givenOptions = <A extends object>(options: A, layer: string): A => {
  if (typeof options !== "object" || options === null) {
    throw EventLogError.make({ _tag: "UnsupportedDatabase", message: `${layer} takes an options object, not ${describeGiven(options)}` })
  }
  return options
}
const givenLocation = (value: unknown, field: string): string => {
  if (typeof value !== "string" || value === "") {
    throw EventLogError.make({ _tag: "UnsupportedDatabase", message: `${field} must be a non-empty string, not ${describeGiven(value)}` })
  }
  return value
}
const describeGiven = (value: unknown): string => (value === "" ? "an empty string" : value === null ? "null" : typeof value)

export const layerSqlite = (options: SqliteOptions) =>
  Layer.effect(
    EventLog,
    fromDatabase(() => {
      const { path, synchronous } = givenOptions(options, "layerSqlite")
      return openSqlite(givenLocation(path, "path"), synchronous === undefined ? {} : { synchronous })
    }),
  )

/** A read-only SQLite log for inspection: no lease, never creates, migrates or changes the file. */
export const layerSqliteReadOnly = (path: string) =>
  Layer.effect(EventLog, fromDatabase(() => openSqlite(givenLocation(path, "path"), { readOnly: true })))

/** A PostgreSQL log shared by several hosts. */
export const layerPostgres = (options: { readonly url: string; readonly schema?: string }) =>
  Layer.effect(
    EventLog,
    fromDatabase(() => {
      const { url, schema } = givenOptions(options, "layerPostgres")
      return openPostgres({ url: givenLocation(url, "url") }, schema === undefined ? {} : { schema })
    }),
  )

/**
 * A read-only PostgreSQL log for inspection: no lock, only READ ONLY transactions; never creates,
 * migrates or changes the schema. Anything but a maka log of the current version is refused with
 * `UnsupportedDatabase` (docs/log-format.md §3.1).
 */
export const layerPostgresReadOnly = (options: { readonly url: string; readonly schema?: string }) =>
  Layer.effect(
    EventLog,
    fromDatabase(() => {
      const { url, schema } = givenOptions(options, "layerPostgresReadOnly")
      return openPostgres({ url: givenLocation(url, "url") }, { readOnly: true, ...(schema === undefined ? {} : { schema }) })
    }),
  )

/** `EventSink` over the `EventLog`: refusals are `rejected`, every other failure `outcome_unknown`. */
export const layerEventSink = Layer.effect(
  EventSink.EventSink,
  Effect.gen(function* () {
    const log = yield* EventLog
    const toCommitError = (error: EventLogError.EventLogError) =>
      error.reason._tag === "Rejected" || error.reason._tag === "ConnectionClosed"
        ? EventSink.rejected(error.message)
        : EventSink.outcomeUnknown(error.message)
    return {
      commit: (write: EventWrite.EventWrite) => Effect.mapError(log.append(write), toCommitError),
      commitBatch: (writes: ReadonlyArray<EventWrite.EventWrite>) => Effect.mapError(log.appendBatch(writes), toCommitError),
    }
  }),
)
