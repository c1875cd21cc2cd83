/**
 * `EventSink`, the interface `@maka/tools` journals through and `@maka/event-log` implements
 * (docs/architecture.md §1.1, docs/log-format.md §2.3). A successful commit proves durability; `CommitError` says whether the
 * write was refused (`rejected`) or its outcome is unknown (`outcome_unknown`): never assume success.
 */
import { Context, Data, type Effect } from "effect"
import type { EventWrite } from "./EventWrite.ts"

export class CommitError extends Data.TaggedError("CommitError")<{
  readonly kind: "rejected" | "outcome_unknown"
  readonly reason: string
}> {
  get isRejected(): boolean {
    return this.kind === "rejected"
  }
}

export const rejected = (reason: string): CommitError => new CommitError({ kind: "rejected", reason })
export const outcomeUnknown = (reason: string): CommitError => new CommitError({ kind: "outcome_unknown", reason })

export interface EventSinkShape {
  /** Commits one write; resolves with its sequence (the original one on an exact replay). */
  readonly commit: (write: EventWrite) => Effect.Effect<number, CommitError>
  /** Commits writes in one transaction, all or nothing. */
  readonly commitBatch: (writes: ReadonlyArray<EventWrite>) => Effect.Effect<ReadonlyArray<number>, CommitError>
}

export class EventSink extends Context.Service<EventSink, EventSinkShape>()("@maka/facts/EventSink") {}
