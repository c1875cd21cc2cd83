/**
 * The live run's model context, kept in memory (DESIGN.md §12): loaded once from the log, then
 * extended with every event the run commits, so a step costs O(new events). The log-prefix hash is
 * extended event by event (SEMANTICS.md §3.5); `snapshot()` equals a fresh `readModelContext`.
 */
import { Digest, type Configuration, type Event, type Fact } from "@maka/facts"
import { EventLog, type EventLogError } from "@maka/event-log"
import { Effect } from "effect"

type Source = EventLog.ModelContextSource
type TailItem = EventLog.TailItem

export class LiveContext {
  private readonly tail: Array<TailItem>
  private readonly summarySteps = new Set<string>()
  private readonly requests = new Map<string, { readonly fact: Fact.ModelRequested }>()
  private highWater: number
  private latestMain: EventLog.LatestMainContext

  private constructor(
    private readonly initial: Source,
    private readonly hash: Digest.LogPrefixHash,
    private readonly configuration: Configuration.InvocationConfiguration,
  ) {
    this.tail = [...initial.tail]
    this.highWater = initial.sourceEvidence.highWater
    this.latestMain = initial.latestMain
  }

  /** Reads the context of `current` and hashes the session once; `manual` is the §5.8 policy. */
  static load(
    log: EventLog.EventLogShape,
    sessionId: string,
    current: string,
    configuration: Configuration.InvocationConfiguration,
    manual: boolean,
  ): Effect.Effect<LiveContext, EventLogError.EventLogError> {
    return Effect.gen(function* () {
      const request = { current }
      const source = manual
        ? yield* log.readManualMessageContext(sessionId, request)
        : yield* log.readModelContext(sessionId, request)
      const hash = yield* log.sessionHash(sessionId, source.sourceEvidence.highWater)
      return new LiveContext(source, hash, configuration)
    })
  }

  /** Applies one event this run committed (in commit order), with its stored JSON. */
  apply(stored: Event.StoredEvent, json: string): void {
    if (stored.sequence <= this.highWater) return
    this.hash.update(stored.sequence, json)
    this.highWater = stored.sequence
    const fact = stored.event.fact
    if (fact.kind === "model_requested") {
      this.requests.set(fact.stepId, { fact })
      if (fact.purpose === "summary") this.summarySteps.add(fact.stepId)
    }
    const isSummaryFact =
      (fact.kind === "model_requested" || fact.kind === "model_completed" || fact.kind === "model_interrupted") &&
      this.summarySteps.has(fact.stepId)
    const excluded =
      fact.kind === "model_observed" ||
      fact.kind === "context_checkpoint_recorded" ||
      fact.kind === "tool_result_archived" ||
      isSummaryFact
    if (!excluded) this.tail.push({ kind: "canonical", stored })
    if (fact.kind === "model_completed") {
      const request = this.requests.get(fact.stepId)?.fact
      if (request !== undefined && request.purpose === "main") {
        const binding = this.configuration.model
        this.latestMain = {
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
    }
  }

  /** The context a fresh `readModelContext` would return now. */
  snapshot(): Source {
    const digest = this.hash.digest(this.highWater)
    const replacements = this.tail.flatMap((item) =>
      item.kind === "archived" ? [{ settledEventId: item.eventId, archiveEventId: item.archiveEventId }] : [],
    )
    return {
      ...this.initial,
      sourceEvidence: { ...this.initial.sourceEvidence, highWater: this.highWater, digest },
      tail: [...this.tail],
      effectiveSourceDigest: Digest.effectiveSource(digest, replacements),
      latestMain: this.latestMain,
    }
  }
}
