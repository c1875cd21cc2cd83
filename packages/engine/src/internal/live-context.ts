/**
 * The live run's model context, kept in memory (docs/architecture.md §12): loaded once from the log, then
 * extended with every event the run commits, so a step costs O(new events). The log-prefix hash is
 * extended event by event (docs/log-format.md §3.5), and the materialised events and bytes are counted as
 * the read counts them: `snapshot()` equals a fresh `readModelContext` with the same limits, and
 * fails `PrefixTooLarge` where that read would.
 */
import { Canonical, Digest, type Configuration, type Event, type EventWrite, type Fact } from "@maka/facts"
import { EventLog, EventLogError } from "@maka/event-log"
import { Effect, Result } from "effect"
import { HistoryProjector, type ProjectedHistory } from "./prompt-history.ts"

type Source = EventLog.ModelContextSource
type TailItem = EventLog.TailItem

/** The bounds of a materialised context (docs/log-format.md §3.7). */
export interface ContextLimits {
  readonly maxEvents: number
  readonly maxBytes: number
}

/** The bytes the read charges for a tail item: its stored JSON, or an archived result's replacement. */
const itemBytes = (item: TailItem): number =>
  Canonical.utf8Length(Canonical.stringify(item.kind === "archived" ? item.replacement : item.stored.event))

/** The bytes a source's anchor and tail hold, as the log's read limits count them. */
export const sourceBytes = (source: Source): number =>
  (source.anchor === undefined ? 0 : Canonical.utf8Length(Canonical.stringify(source.anchor.event))) +
  source.tail.reduce((sum, item) => sum + itemBytes(item), 0)

export class LiveContext {
  /** The limits of every materialising read of the log, which the engine's reads use. */
  static readonly defaultLimits: ContextLimits = Object.freeze({
    maxEvents: EventLog.defaults.maxEvents,
    maxBytes: EventLog.defaults.maxBytes,
  })

  private readonly tail: Array<TailItem>
  private readonly projector: HistoryProjector
  private readonly replacements: ReadonlyArray<{ readonly settledEventId: string; readonly archiveEventId: string }>
  private readonly summarySteps = new Set<string>()
  private readonly requests = new Map<string, { readonly fact: Fact.ModelRequested }>()
  private highWater: number
  private latestMain: EventLog.LatestMainContext
  /** The newest summary request after the baseline, as a fresh read reports it (`Source.latestSummary`). */
  private latestSummary: EventLog.LatestSummary | undefined
  /** The events and bytes the read would materialise: anchor and tail. */
  private events: number
  private bytes: number

  private constructor(
    private readonly initial: Source,
    private readonly hash: Digest.LogPrefixHash,
    private configuration: Configuration.InvocationConfiguration,
    private readonly limits: ContextLimits,
  ) {
    this.tail = [...initial.tail]
    const midTurnAnchor = initial.baseline?.checkpoint.mode.kind === "mid_turn" ? initial.anchor : undefined
    this.projector = new HistoryProjector(
      midTurnAnchor === undefined ? initial.tail : [{ kind: "canonical", stored: midTurnAnchor }, ...initial.tail],
    )
    // Archived items come only from the read: a run appends canonical events.
    this.replacements = initial.tail.flatMap((item) =>
      item.kind === "archived" ? [{ settledEventId: item.eventId, archiveEventId: item.archiveEventId }] : [],
    )
    // The requests the read holds (a read may follow a request that rode the opening's commit):
    // a completion applied later finds its request here.
    for (const item of initial.tail) {
      const fact = item.kind === "canonical" ? item.stored.event.fact : undefined
      if (fact?.kind === "model_requested") this.requests.set(fact.stepId, { fact })
    }
    this.highWater = initial.sourceEvidence.highWater
    this.latestMain = initial.latestMain
    this.latestSummary = initial.latestSummary
    const anchor = initial.anchor === undefined ? [] : [Canonical.utf8Length(Canonical.stringify(initial.anchor.event))]
    this.events = anchor.length + initial.tail.length
    this.bytes = [...anchor, ...initial.tail.map(itemBytes)].reduce((sum, bytes) => sum + bytes, 0)
  }

  /**
   * Reads the context of `current` with its running hash, in one read; `manual` is the
   * docs/engine.md §5.8 policy. With `current` undefined, the session as it stands before a run
   * whose opening is not committed yet (it rides the run's first commit).
   */
  static load(
    log: EventLog.EventLogShape,
    sessionId: string,
    current: string | undefined,
    configuration: Configuration.InvocationConfiguration,
    manual: boolean,
    limits: ContextLimits = LiveContext.defaultLimits,
  ): Effect.Effect<LiveContext, EventLogError.EventLogError> {
    return Effect.gen(function* () {
      const request = current === undefined ? { ...limits } : { current, ...limits }
      // One read of the session: the context and the running hash through its high water.
      const { source, hash } = manual
        ? yield* log.readManualMessageContextWithHash(sessionId, request)
        : yield* log.readModelContextWithHash(sessionId, request)
      return new LiveContext(source, hash, configuration, limits)
    })
  }

  /**
   * An archive was applied: a fresh read replaces the archived result in the tail and changes the
   * effective source; the context is read again before it is used (docs/engine.md §5.11).
   */
  get stale(): boolean {
    return this.archived || this.reshaped
  }

  private archived = false
  private reshaped = false

  /**
   * Whether the tail holds an archived result (`snapshot`'s, whatever it carries): archived items come
   * only from the read, a run appends canonical events.
   */
  get holdsArchived(): boolean {
    return this.replacements.length > 0
  }

  /** The run that kept this context owed a prune (a summary was pending, or a pass did not end): its next run prunes. */
  pruneOwed = false

  /** A checkpoint was adopted: the covered history leaves the context, which is read again before it is used. */
  markStale(): void {
    this.reshaped = true
  }

  /** The events and bytes a fresh read would materialise with `pending` committed (docs/log-format.md §3.7 step 6). */
  size(pending: ReadonlyArray<EventWrite.EventWrite> = []): { readonly events: number; readonly bytes: number } {
    let events = this.events
    let bytes = this.bytes
    for (const write of pending) {
      if (this.excluded(write.event.fact)) continue
      events += 1
      bytes += Canonical.utf8Length(write.json)
    }
    return { events, bytes }
  }

  /**
   * Whether the tail holds a settled result that `isArchivable` accepts, not archived yet: the only
   * kind of prune candidate (docs/engine.md §5.11), found without reading the log.
   */
  holdsArchivable(isArchivable: (write: { readonly event: Event.RuntimeEvent }) => boolean): boolean {
    return this.tail.some((item) => item.kind === "canonical" && isArchivable({ event: item.stored.event }))
  }

  /**
   * Whether this is the session's context: not a lineage (a continuation's, or a successor's that
   * replays one, docs/log-format.md §3.6), which leaves out the session's other runs. Only the
   * session's context can be carried into the session's next run.
   */
  get isSessionWide(): boolean {
    return this.initial.sourceEvidence.scope.kind === "session"
  }

  /** The last sequence applied. */
  get highWaterMark(): number {
    return this.highWater
  }

  /**
   * Carries the context into the next run of its session (docs/architecture.md §12): `opening` is that
   * run's opening, the only event after this context's high water (the caller checked it), and
   * `configuration` the new run's, for the completions it will apply.
   */
  continueWith(opening: Event.StoredEvent, json: string, configuration: Configuration.InvocationConfiguration): void {
    this.beginRun(configuration)
    this.apply(opening, json)
  }

  /**
   * Goes on with a run whose opening is not committed yet (it rides the run's first commit, which
   * applies it): the run's configuration, and the session just before it as the fence of its
   * `pre_turn` compaction source.
   */
  beginRun(configuration: Configuration.InvocationConfiguration): void {
    this.configuration = configuration
    this.preOpening = { hash: this.hash.copy(), highWater: this.highWater, latestSummary: this.latestSummary }
  }

  /** The running hash and high water just before the current run's opening, when this context saw it applied. */
  private preOpening:
    | { readonly hash: Digest.LogPrefixHash; readonly highWater: number; readonly latestSummary: EventLog.LatestSummary | undefined }
    | undefined

  /**
   * The source of a compaction of `mode` built from memory (docs/log-format.md §3.7 with the mode's
   * fence), equal to what `prepareContextCompaction` reads; `undefined` when this context cannot tell
   * (a `pre_turn` fence it did not see, a baseline beyond the fence), and the caller reads the log.
   * What the run carries must have been committed first.
   */
  compactionSource(mode: "pre_turn" | "mid_turn"): Source | undefined {
    if (mode === "mid_turn") {
      const snapshot = this.snapshot()
      return Result.isSuccess(snapshot) ? snapshot.success : undefined
    }
    const before = this.preOpening
    const baseline = this.initial.baseline
    if (before === undefined || (baseline !== undefined && baseline.checkpoint.coveredThrough > before.highWater)) return undefined
    const fence = before.highWater
    const tail = this.tail.filter((item) => (item.kind === "archived" ? item.sequence : item.stored.sequence) <= fence)
    const anchor = this.initial.anchor === undefined ? [] : [Canonical.utf8Length(Canonical.stringify(this.initial.anchor.event))]
    const bytes = [...anchor, ...tail.map(itemBytes)].reduce((sum, count) => sum + count, 0)
    if (anchor.length + tail.length > this.limits.maxEvents || bytes > this.limits.maxBytes) return undefined
    const digest = before.hash.digest(fence)
    const kept = new Set(tail.flatMap((item) => (item.kind === "archived" ? [item.eventId] : [])))
    return withLatestSummary(
      {
        ...this.initial,
        sourceEvidence: { ...this.initial.sourceEvidence, highWater: fence, digest },
        tail,
        effectiveSourceDigest: Digest.effectiveSource(
          digest,
          this.replacements.filter((replacement) => kept.has(replacement.settledEventId)),
        ),
        latestMain: this.latestMain,
      },
      before.latestSummary,
    )
  }

  /**
   * The context after `checkpoint` (committed at `stored`) was adopted, built from memory as a fresh
   * read would return it (docs/log-format.md §3.7): the checkpoint is the baseline, the covered
   * history leaves the tail, and a `mid_turn` anchor is re-sent. `undefined` when this context does
   * not hold the anchor; the caller reads the log.
   */
  rebase(stored: Event.StoredEvent): LiveContext | undefined {
    const fact = stored.event.fact
    if (fact.kind !== "context_checkpoint_recorded" || this.archived || this.reshaped) return undefined
    const checkpoint = fact.checkpoint
    const covered = checkpoint.coveredThrough
    let anchor: Event.StoredEvent | undefined
    if (checkpoint.mode.kind === "mid_turn") {
      const anchorId = checkpoint.mode.anchorEventId
      const held = this.tail.find((item) => item.kind === "canonical" && item.stored.event.id === anchorId)
      anchor = held?.kind === "canonical" ? held.stored : this.initial.anchor?.event.id === anchorId ? this.initial.anchor : undefined
      if (anchor === undefined) return undefined
    }
    const { highWater, digest, effectiveSourceDigest } = this.evidence()
    const tail = this.tail.filter((item) => (item.kind === "archived" ? item.sequence : item.stored.sequence) > covered)
    const { anchor: _previous, ...rest } = this.initial
    const source: Source = {
      ...rest,
      sourceEvidence: { ...this.initial.sourceEvidence, highWater, digest },
      baseline: { eventId: stored.event.id, sequence: stored.sequence, checkpoint },
      ...(anchor === undefined ? {} : { anchor }),
      tail,
      effectiveSourceDigest,
      latestMain: this.latestMain,
    }
    // A fresh read reports the newest summary request after the new baseline's coverage.
    const summary = this.latestSummary !== undefined && this.latestSummary.sequence > covered ? this.latestSummary : undefined
    const next = new LiveContext(withLatestSummary(source, summary), this.hash, this.configuration, this.limits)
    for (const [stepId, request] of this.requests) next.requests.set(stepId, request)
    for (const stepId of this.summarySteps) next.summarySteps.add(stepId)
    next.preOpening = this.preOpening
    next.pruneOwed = this.pruneOwed
    return next
  }

  /** Whether the read leaves `fact` out of the tail (docs/log-format.md §3.7 step 6). */
  private excluded(fact: Fact.Fact): boolean {
    const isSummaryFact =
      (fact.kind === "model_requested" || fact.kind === "model_completed" || fact.kind === "model_interrupted") &&
      (this.summarySteps.has(fact.stepId) || (fact.kind === "model_requested" && fact.purpose === "summary"))
    return (
      fact.kind === "model_observed" ||
      fact.kind === "context_checkpoint_recorded" ||
      fact.kind === "tool_result_archived" ||
      isSummaryFact
    )
  }

  /** Applies one event this run committed (in commit order), with its stored JSON. */
  apply(stored: Event.StoredEvent, json: string): void {
    if (stored.sequence <= this.highWater) return
    this.hash.update(stored.sequence, json)
    this.highWater = stored.sequence
    const fact = stored.event.fact
    if (fact.kind === "model_requested") {
      this.requests.set(fact.stepId, { fact })
      if (fact.purpose === "summary") {
        this.summarySteps.add(fact.stepId)
        this.latestSummary = { stepId: fact.stepId, sequence: stored.sequence, drained: false }
      }
    }
    if (fact.kind === "model_interrupted" && this.latestSummary?.stepId === fact.stepId && fact.status === "cancelled") {
      this.latestSummary = { ...this.latestSummary, drained: true }
    }
    if (fact.kind === "tool_result_archived") this.archived = true
    if (!this.excluded(fact)) {
      const item: TailItem = { kind: "canonical", stored }
      this.tail.push(item)
      this.projector.add(item)
      this.events += 1
      this.bytes += Canonical.utf8Length(json)
    }
    this.latestMain = this.mainAfter(this.latestMain, stored)
  }

  /**
   * The latest main completion once `stored` is in the context: `stored` itself when it completes a
   * main request of the context, `latest` otherwise.
   */
  private mainAfter(latest: EventLog.LatestMainContext, stored: Event.StoredEvent): EventLog.LatestMainContext {
    const fact = stored.event.fact
    if (fact.kind !== "model_completed") return latest
    const request = this.requests.get(fact.stepId)?.fact
    if (request === undefined || request.purpose !== "main") return latest
    const binding = this.configuration.model
    return {
      kind: "selected",
      projectionCurrent: true,
      sequence: stored.sequence,
      recordedAt: stored.event.recordedAt,
      modelId: request.modelId,
      ...(binding === undefined ? {} : { connectionId: binding.connectionId }),
      ...(request.checkpointEventId === undefined ? {} : { checkpointEventId: request.checkpointEventId }),
      ...(request.context === undefined ? {} : { context: request.context }),
      usage: fact.output.usage,
      routeIdentity: request.routeIdentity,
    }
  }

  /**
   * The context a fresh `readModelContext` would return now, or its `PrefixTooLarge`. With
   * `pending` (writes that ride the next commit, docs/engine.md §5.4), their events are in the tail
   * as they will be once committed, and a pending completion of a main request is the latest main
   * (an answer's, when steering queued during it makes the run ask again); their sequences are not
   * known yet (0), so the evidence then is the committed part's, and `evidence` gives the final one
   * inside the commit.
   */
  snapshot(pending: ReadonlyArray<EventWrite.EventWrite> = []): Result.Result<Source, EventLogError.EventLogError> {
    const { events, bytes } = this.size(pending)
    const added: Array<TailItem> = []
    let latestMain = this.latestMain
    for (const write of pending) {
      const stored = { sequence: 0, event: write.event }
      latestMain = this.mainAfter(latestMain, stored)
      if (this.excluded(write.event.fact)) continue
      added.push({ kind: "canonical", stored })
    }
    if (events > this.limits.maxEvents || bytes > this.limits.maxBytes) {
      return Result.fail(EventLogError.prefixTooLarge())
    }
    // The digests are computed when first read, from the hash as it stands now: a step's request
    // computes its own evidence at its commit (over what it carries), so a snapshot's are read only
    // by a compaction that starts from it.
    const evidence = this.deferredEvidence()
    const { latestSummary: _summary, effectiveSourceDigest: _effective, sourceEvidence: read, tail: _tail, ...initial } = this.initial
    const { digest: _digest, ...scope } = read
    const sourceEvidence = lazily({ ...scope, highWater: this.highWater }, "digest", () => evidence().digest)
    const source = lazily(
      lazily(
        {
          ...initial,
          sourceEvidence,
          latestMain,
          ...(this.latestSummary === undefined ? {} : { latestSummary: this.latestSummary }),
        },
        "tail",
        tailAt(this.tail, added),
      ),
      "effectiveSourceDigest",
      () => evidence().effectiveSourceDigest,
    )
    return Result.succeed(source)
  }

  /** `evidence()` of the context as it stands now, computed at the first call of the function returned. */
  private deferredEvidence(): () => Evidence {
    const hash = this.hash.copy()
    const highWater = this.highWater
    const replacements = this.replacements
    let computed: Evidence | undefined
    return () => (computed ??= evidenceOf(hash, highWater, replacements))
  }

  /** The history projection of `snapshot(pending)`'s source (docs/engine.md §5.5), kept current incrementally. */
  projection(pending: ReadonlyArray<EventWrite.EventWrite> = []): ProjectedHistory {
    const items = pending.flatMap((write): ReadonlyArray<TailItem> =>
      this.excluded(write.event.fact) ? [] : [{ kind: "canonical", stored: { sequence: 0, event: write.event } }],
    )
    return this.projector.project(items)
  }

  /** The source evidence of the context extended by `leading` (events about to commit, in order). */
  evidence(leading: ReadonlyArray<{ readonly sequence: number; readonly json: string }> = []): Evidence {
    let hash = this.hash
    let highWater = this.highWater
    for (const event of leading) {
      if (event.sequence <= highWater) continue
      if (hash === this.hash) hash = this.hash.copy()
      hash.update(event.sequence, event.json)
      highWater = event.sequence
    }
    return evidenceOf(hash, highWater, this.replacements)
  }
}

/** Where a request's source ends and what it digests to (docs/log-format.md §3.7 step 7). */
export interface Evidence {
  readonly highWater: number
  readonly digest: string
  readonly effectiveSourceDigest: string
}

/** The source evidence of a context whose running hash is `hash` through `highWater`. */
const evidenceOf = (hash: Digest.LogPrefixHash, highWater: number, replacements: LiveContext["replacements"]): Evidence => {
  const digest = hash.digest(highWater)
  return { highWater, digest, effectiveSourceDigest: Digest.effectiveSource(digest, replacements) }
}

/**
 * `value` with `key` computed when first read (then kept), as an enumerable read-only property (a
 * spread or a deep comparison reads it as any other field): a snapshot's digests and its tail, which
 * a step most often never reads.
 */
const lazily = <A extends object, K extends string, V>(value: A, key: K, compute: () => V): A & { readonly [P in K]: V } => {
  let computed: { readonly value: V } | undefined
  return Object.defineProperty(value, key, {
    get: () => (computed ??= { value: compute() }).value,
    enumerable: true,
    configurable: false,
  }) as A & { readonly [P in K]: V }
}

/**
 * The tail a snapshot saw: the first `length` items of the live tail, then `added`. Copying the
 * whole tail each step cost a long session's step its largest allocation (143 KB a step at 10,000
 * events), so the copy is made when read; the live context only appends to its tail, so a later
 * copy of that many items is the one the snapshot saw.
 */
const tailAt = (tail: ReadonlyArray<TailItem>, added: ReadonlyArray<TailItem>): (() => ReadonlyArray<TailItem>) => {
  const length = tail.length
  return () => (added.length === 0 ? tail.slice(0, length) : [...tail.slice(0, length), ...added])
}

/** `source` with `latestSummary` as given: set when defined, absent otherwise (as a fresh read returns it). */
const withLatestSummary = (source: Source, latestSummary: EventLog.LatestSummary | undefined): Source => {
  const { latestSummary: _previous, ...rest } = source
  return latestSummary === undefined ? rest : { ...rest, latestSummary }
}
