/**
 * Identities of the durable format (docs/log-format.md §2.1): ids, event ids, digests, sequences, the
 * `Invocation` quadruple and log scopes. The constrained strings carry patterns, so schema-derived
 * generators produce valid values instead of mostly rejected ones.
 */
import { Schema } from "effect"
import { MAX_ID_UTF16, MAX_OPERATION_ID_UTF16 } from "./Limits.ts"

/** A non-empty string of at most 512 UTF-16 units: every session, turn, run, invocation and step id. */
export const Id = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(MAX_ID_UTF16)).annotate({
  identifier: "Id",
})
export type Id = typeof Id.Type

/** An operation id: `"{stepId}:{toolCallId}"` for provider calls, any id for standalone calls. */
export const OperationId = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(MAX_OPERATION_ID_UTF16))
export type OperationId = typeof OperationId.Type

export const EVENT_ID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

/** A lowercase UUIDv4, created once per write and reused on every retry of that write. */
export const EventId = Schema.String.check(Schema.isPattern(EVENT_ID_PATTERN)).annotate({ identifier: "EventId" })
export type EventId = typeof EventId.Type

export const DIGEST_PATTERN = /^sha256:[0-9a-f]{64}$/

/** `"sha256:"` followed by 64 lowercase hex digits. */
export const Digest = Schema.String.check(Schema.isPattern(DIGEST_PATTERN)).annotate({ identifier: "Digest" })
export type Digest = typeof Digest.Type

/** A bare 64-hex SHA-256 (archive bodies). */
export const Sha256Hex = Schema.String.check(Schema.isPattern(/^[0-9a-f]{64}$/))

/** A safe integer in `[minimum, maximum]`. */
export const IntBetween = (minimum: number, maximum: number) =>
  Schema.Int.check(Schema.isBetween({ minimum, maximum }))

export const NonNegativeInt = IntBetween(0, Number.MAX_SAFE_INTEGER)
export const PositiveInt = IntBetween(1, Number.MAX_SAFE_INTEGER)

/** A log sequence: `> 0`, the log's total order. */
export const Sequence = PositiveInt
export type Sequence = typeof Sequence.Type

/** Epoch milliseconds, informational only. */
export const EpochMillis = NonNegativeInt

export const Invocation = Schema.Struct({
  sessionId: Id,
  turnId: Id,
  runId: Id,
  invocationId: Id,
}).annotate({ identifier: "Invocation" })
export type Invocation = typeof Invocation.Type

export const sameInvocation = (left: Invocation, right: Invocation): boolean =>
  left.sessionId === right.sessionId &&
  left.turnId === right.turnId &&
  left.runId === right.runId &&
  left.invocationId === right.invocationId

export const RootScope = Schema.Struct({ kind: Schema.tag("root") })
export const SessionScope = Schema.Struct({ kind: Schema.tag("session"), id: Id })
export const LineageScope = Schema.Struct({ kind: Schema.tag("lineage"), sessionId: Id, runId: Id })

/** Which part of the log a prefix covers (docs/log-format.md §2.1, §3.6). */
export const LogScope = Schema.Union([RootScope, SessionScope, LineageScope]).annotate({ identifier: "LogScope" })
export type LogScope = typeof LogScope.Type

/** A JSON value with finite numbers only: the only data a fact carries. */
export type Json = null | boolean | number | string | ReadonlyArray<Json> | { readonly [key: string]: Json }

export const Json: Schema.Codec<Json> = Schema.Union([
  Schema.Null,
  Schema.Boolean,
  Schema.Finite,
  Schema.String,
  Schema.Array(Schema.suspend((): Schema.Codec<Json> => Json)),
  Schema.Record(Schema.String, Schema.suspend((): Schema.Codec<Json> => Json)),
]).annotate({ identifier: "Json" })

export const JsonObject = Schema.Record(Schema.String, Json)
export type JsonObject = typeof JsonObject.Type

/** Provider-specific options (a thinking signature, for example), deep-merged across observations. */
export const ProviderOptions = JsonObject
export type ProviderOptions = JsonObject
