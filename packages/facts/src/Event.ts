/**
 * The event envelope (docs/log-format.md §2.1): `RuntimeEvent` wraps one fact with its id, informational
 * time and invocation; `StoredEvent` adds the log sequence; `LogPrefix` is a complete bounded prefix.
 */
import { Schema } from "effect"
import { Digest, EpochMillis, EventId, Invocation, LogScope, NonNegativeInt, Sequence } from "./Identity.ts"
import { Fact } from "./Fact.ts"

export const RuntimeEvent = Schema.Struct({
  id: EventId,
  recordedAt: EpochMillis,
  invocation: Invocation,
  fact: Fact,
}).annotate({ identifier: "RuntimeEvent" })
export type RuntimeEvent = typeof RuntimeEvent.Type

export const StoredEvent = Schema.Struct({
  sequence: Sequence,
  event: RuntimeEvent,
}).annotate({ identifier: "StoredEvent" })
export type StoredEvent = typeof StoredEvent.Type

/** A complete bounded prefix of a scope; `highWater` is the last sequence in scope (0 if empty). */
export const LogPrefix = Schema.Struct({
  scope: LogScope,
  highWater: NonNegativeInt,
  digest: Digest,
  events: Schema.Array(StoredEvent),
}).annotate({ identifier: "LogPrefix" })
export type LogPrefix = typeof LogPrefix.Type
