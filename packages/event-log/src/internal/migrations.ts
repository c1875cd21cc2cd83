/**
 * The numbered schema migrations of both dialects (docs/log-format.md §3.1, §3.2) and the open-order check
 * that runs before them: a store is either empty or a maka log of a known version, anything else is
 * `UnsupportedDatabase`. Version 1 is the whole schema; a release that adds a field or a kind adds a
 * number, so older code refuses the database instead of failing to decode its rows.
 */
import { sql, type Transaction } from "kysely"
import * as EventLogError from "../EventLogError.ts"
import type { Dialect } from "./database.ts"
import { errorMessage } from "./store-error.ts"
import type { Tables } from "./tables.ts"

export interface Migration {
  readonly version: number
  readonly description: string
  readonly sqlite: ReadonlyArray<string>
  readonly postgres: ReadonlyArray<string>
}

/** The JSON paths the unique indexes read, in SQLite's `json_extract` spelling. */
const path = {
  steeringMessageId: "$.fact.message.messageId",
  archivedEventId: "$.fact.placeholder.identity.runtimeEventId",
  claimId: "$.fact.input.claim.id",
  claimSourceRunId: "$.fact.input.claim.source.invocation.runId",
  claimSourceHighWater: "$.fact.input.claim.source.highWater",
  successorRunId: "$.fact.outcome.pause.intent.successorRunId",
  successorInvocationId: "$.fact.outcome.pause.intent.successorInvocationId",
  handoffClaimId: "$.fact.outcome.pause.intent.claimId",
} as const

/** The same path as a PostgreSQL text array for `#>>`: `$.fact.input.claim.id` → `{fact,input,claim,id}`. */
const postgresPath = (jsonPath: string): string => `'{${jsonPath.slice(2).split(".").join(",")}}'`

const json = (jsonPath: string): string => `json_extract(event_json, '${jsonPath}')`

/**
 * `event_json` made safe for PostgreSQL's JSON parser: every `\u` escape (one preceded by an even
 * run of backslashes) becomes an escaped backslash, so `\u0000` and lone-surrogate escapes, which
 * `jsonb` refuses, read as the plain text `\u0000` instead of failing the insert. Ids without such
 * escapes extract unchanged; an id with a control character could only collide with one spelling
 * that escape out literally, and a collision refuses a write, never admits one. Dollar quotes keep
 * the backslashes literal whatever `standard_conforming_strings` says.
 */
const SAFE_EVENT_JSON = String.raw`regexp_replace(event_json, $p$(?<!\\)((?:\\\\)*)\\u$p$, $r$\1\\\\u$r$, 'g')`

/**
 * A PostgreSQL generated column computed from `event_json::jsonb`: the value at `jsonPath` for rows
 * of `kind`, null for every other row (so most rows are never parsed). The stored `event_json`
 * stays the canonical text; only the index columns go through `jsonb`.
 */
const generated = (column: string, type: string, kind: string, jsonPath: string): string => {
  const value = `((${SAFE_EVENT_JSON})::jsonb #>> ${postgresPath(jsonPath)})`
  return `${column} ${type} GENERATED ALWAYS AS (CASE WHEN kind = '${kind}' THEN ${
    type === "text" ? value : `${value}::${type}`
  } END) STORED`
}

const SQLITE_V1: ReadonlyArray<string> = [
  `CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY NOT NULL,
    created_at INTEGER NOT NULL
  ) STRICT`,
  `CREATE TABLE event_log (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT CHECK (sequence > 0),
    event_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    invocation_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    operation_id TEXT,
    event_json TEXT NOT NULL
  ) STRICT`,
  `CREATE TABLE tool_result_payloads (
    event_id TEXT PRIMARY KEY NOT NULL REFERENCES event_log (event_id),
    payload TEXT NOT NULL
  ) STRICT`,
  `CREATE TABLE schema_migrations (
    version INTEGER PRIMARY KEY NOT NULL,
    applied_at INTEGER NOT NULL
  ) STRICT`,
  `CREATE UNIQUE INDEX event_log_event_id ON event_log (event_id)`,
  `CREATE UNIQUE INDEX event_log_invocation_boundary ON event_log (invocation_id, kind)
    WHERE kind IN ('invocation_opened', 'invocation_ended')`,
  `CREATE UNIQUE INDEX event_log_operation_fact ON event_log (operation_id, kind)
    WHERE operation_id IS NOT NULL AND kind <> 'model_observed'`,
  `CREATE UNIQUE INDEX event_log_steering_identity ON event_log (session_id, ${json(path.steeringMessageId)})
    WHERE kind = 'message_steered'`,
  `CREATE UNIQUE INDEX event_log_archived_result ON event_log (session_id, ${json(path.archivedEventId)})
    WHERE kind = 'tool_result_archived'`,
  `CREATE UNIQUE INDEX event_log_claim_id ON event_log (${json(path.claimId)})
    WHERE kind = 'invocation_opened'`,
  `CREATE UNIQUE INDEX event_log_source_boundary
    ON event_log (session_id, ${json(path.claimSourceRunId)}, ${json(path.claimSourceHighWater)})
    WHERE kind = 'invocation_opened'`,
  `CREATE UNIQUE INDEX event_log_successor_run ON event_log (${json(path.successorRunId)})
    WHERE kind = 'invocation_ended'`,
  `CREATE UNIQUE INDEX event_log_successor_invocation ON event_log (${json(path.successorInvocationId)})
    WHERE kind = 'invocation_ended'`,
  `CREATE UNIQUE INDEX event_log_successor_claim ON event_log (${json(path.handoffClaimId)})
    WHERE kind = 'invocation_ended'`,
  `CREATE INDEX event_log_invocation_sequence ON event_log (invocation_id, sequence)`,
  `CREATE INDEX event_log_session_sequence ON event_log (session_id, sequence)`,
  `CREATE INDEX event_log_session_turn_openings ON event_log (session_id, turn_id, sequence)
    WHERE kind = 'invocation_opened'`,
]

const POSTGRES_V1: ReadonlyArray<string> = [
  `CREATE TABLE sessions (
    session_id text PRIMARY KEY,
    created_at bigint NOT NULL
  )`,
  `CREATE TABLE event_log (
    sequence bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY CHECK (sequence > 0),
    event_id text NOT NULL,
    session_id text NOT NULL,
    turn_id text NOT NULL,
    run_id text NOT NULL,
    invocation_id text NOT NULL,
    kind text NOT NULL,
    operation_id text,
    event_json text NOT NULL,
    ${generated("steering_message_id", "text", "message_steered", path.steeringMessageId)},
    ${generated("archived_event_id", "text", "tool_result_archived", path.archivedEventId)},
    ${generated("claim_id", "text", "invocation_opened", path.claimId)},
    ${generated("claim_source_run_id", "text", "invocation_opened", path.claimSourceRunId)},
    ${generated("claim_source_high_water", "bigint", "invocation_opened", path.claimSourceHighWater)},
    ${generated("successor_run_id", "text", "invocation_ended", path.successorRunId)},
    ${generated("successor_invocation_id", "text", "invocation_ended", path.successorInvocationId)},
    ${generated("handoff_claim_id", "text", "invocation_ended", path.handoffClaimId)},
    CONSTRAINT event_log_event_id UNIQUE (event_id)
  )`,
  `CREATE TABLE tool_result_payloads (
    event_id text PRIMARY KEY REFERENCES event_log (event_id),
    payload text NOT NULL
  )`,
  `CREATE TABLE schema_migrations (
    version integer PRIMARY KEY,
    applied_at bigint NOT NULL
  )`,
  `CREATE UNIQUE INDEX event_log_invocation_boundary ON event_log (invocation_id, kind)
    WHERE kind IN ('invocation_opened', 'invocation_ended')`,
  `CREATE UNIQUE INDEX event_log_operation_fact ON event_log (operation_id, kind)
    WHERE operation_id IS NOT NULL AND kind <> 'model_observed'`,
  `CREATE UNIQUE INDEX event_log_steering_identity ON event_log (session_id, steering_message_id)
    WHERE steering_message_id IS NOT NULL`,
  `CREATE UNIQUE INDEX event_log_archived_result ON event_log (session_id, archived_event_id)
    WHERE archived_event_id IS NOT NULL`,
  `CREATE UNIQUE INDEX event_log_claim_id ON event_log (claim_id) WHERE claim_id IS NOT NULL`,
  `CREATE UNIQUE INDEX event_log_source_boundary
    ON event_log (session_id, claim_source_run_id, claim_source_high_water)
    WHERE claim_source_run_id IS NOT NULL`,
  `CREATE UNIQUE INDEX event_log_successor_run ON event_log (successor_run_id)
    WHERE successor_run_id IS NOT NULL`,
  `CREATE UNIQUE INDEX event_log_successor_invocation ON event_log (successor_invocation_id)
    WHERE successor_invocation_id IS NOT NULL`,
  `CREATE UNIQUE INDEX event_log_successor_claim ON event_log (handoff_claim_id)
    WHERE handoff_claim_id IS NOT NULL`,
  `CREATE INDEX event_log_invocation_sequence ON event_log (invocation_id, sequence)`,
  `CREATE INDEX event_log_session_sequence ON event_log (session_id, sequence)`,
  `CREATE INDEX event_log_session_turn_openings ON event_log (session_id, turn_id, sequence)
    WHERE kind = 'invocation_opened'`,
]

/**
 * Version 2: the openings as partial indexes the safety and recovery reads name with literal kinds
 * (docs/log-format.md §3.2). `event_log_openings` walks the log's openings in sequence order (the
 * unfinished-invocation scan at open and its pages); `event_log_session_openings` walks one session's
 * (the busy check, the latest opening, the claims and continuations), where the version-1 index on
 * `(session_id, turn_id, sequence)` gave no sequence order and no query names a turn with it, so it
 * goes. Both hold one row per invocation, so a commit without an opening writes neither.
 */
const V2: ReadonlyArray<string> = [
  `CREATE INDEX event_log_openings ON event_log (sequence) WHERE kind = 'invocation_opened'`,
  `CREATE INDEX event_log_session_openings ON event_log (session_id, sequence) WHERE kind = 'invocation_opened'`,
  `DROP INDEX event_log_session_turn_openings`,
]

export const MIGRATIONS: ReadonlyArray<Migration> = [
  { version: 1, description: "the event log schema", sqlite: SQLITE_V1, postgres: POSTGRES_V1 },
  { version: 2, description: "partial indexes of the openings", sqlite: V2, postgres: V2 },
]

/** The schema version this code reads and writes. */
export const LATEST_VERSION = 2

/** Tables a maka log of version ≥ 1 has, in both dialects. */
export const REQUIRED_TABLES: ReadonlyArray<string> = ["sessions", "event_log", "tool_result_payloads", "schema_migrations"]

/** The unique and plain indexes of the latest version (PostgreSQL also has `event_log_event_id` as a constraint). */
export const INDEXES: ReadonlyArray<string> = [
  "event_log_event_id",
  "event_log_invocation_boundary",
  "event_log_operation_fact",
  "event_log_steering_identity",
  "event_log_archived_result",
  "event_log_claim_id",
  "event_log_source_boundary",
  "event_log_successor_run",
  "event_log_successor_invocation",
  "event_log_successor_claim",
  "event_log_invocation_sequence",
  "event_log_session_sequence",
  "event_log_openings",
  "event_log_session_openings",
]

export type SchemaState = { readonly kind: "empty" } | { readonly kind: "maka"; readonly version: number }

/** What the open-order check reads from a store, before anything is changed. */
export interface SchemaSurvey {
  /** A human-readable location for messages. */
  readonly location: string
  /** Names of the user objects (tables, views, indexes, sequences); internal ones excluded. */
  readonly objects: ReadonlyArray<string>
  /** Names of the tables among them. */
  readonly tables: ReadonlyArray<string>
  /** Columns of `schema_migrations`, when it exists. */
  readonly migrationColumns: ReadonlyArray<string>
  /** `schema_migrations.version` values as read (undecoded), when the columns are there. */
  readonly versions: ReadonlyArray<unknown>
}

const notMaka = (location: string, why: string): EventLogError.EventLogError =>
  EventLogError.make({ _tag: "UnsupportedDatabase", message: `${location} is not a maka event log: ${why}` })

const list = (names: ReadonlyArray<string>): string => (names.length === 0 ? "none" : names.join(", "))

/**
 * Classifies a surveyed store: `empty`, or a maka log with its version. Anything else throws
 * `UnsupportedDatabase` with a message that says why ("not a maka event log: …", or "created by a
 * newer maka (schema N > M)").
 */
export const classifySchema = (survey: SchemaSurvey): SchemaState => {
  const { location, objects, tables } = survey
  if (objects.length === 0) return { kind: "empty" }
  if (!tables.includes("schema_migrations") || !tables.includes("event_log")) {
    throw notMaka(location, `it has no schema_migrations and event_log tables (tables: ${list(tables)})`)
  }
  if (!survey.migrationColumns.includes("version") || !survey.migrationColumns.includes("applied_at")) {
    throw notMaka(location, `its schema_migrations table has columns ${list(survey.migrationColumns)}`)
  }
  const versions: Array<number> = []
  for (const value of survey.versions) {
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
      throw notMaka(location, `schema_migrations holds the version ${JSON.stringify(value) ?? String(value)}`)
    }
    versions.push(value)
  }
  if (versions.length === 0) throw notMaka(location, "schema_migrations is empty")
  versions.sort((left, right) => left - right)
  const version = versions[versions.length - 1] ?? 0
  if (version > LATEST_VERSION) {
    throw EventLogError.make({
      _tag: "UnsupportedDatabase",
      message: `${location} was created by a newer maka (schema ${version} > ${LATEST_VERSION}); upgrade maka to open it`,
    })
  }
  if (versions.some((applied, index) => applied !== index + 1)) {
    throw notMaka(location, `its migration history ${versions.join(", ")} is not 1..${version}`)
  }
  const missing = REQUIRED_TABLES.filter((table) => !tables.includes(table))
  if (missing.length > 0) throw notMaka(location, `it lacks the tables ${list(missing)}`)
  return { kind: "maka", version }
}

/** The SQL expression of "now" in epoch milliseconds, taken from the database's clock. */
const NOW_MILLISECONDS: Record<Dialect, string> = {
  sqlite: "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
  postgres: "(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
}

/**
 * Applies every migration above `state` inside `transaction` (the caller's one migration
 * transaction) and records each in `schema_migrations`. Returns the versions applied. A failure is
 * `Migration`; the caller's transaction rolls everything back.
 */
export const migrate = async (
  transaction: Transaction<Tables>,
  dialect: Dialect,
  state: SchemaState,
): Promise<ReadonlyArray<number>> => {
  const current = state.kind === "empty" ? 0 : state.version
  const applied: Array<number> = []
  for (const migration of MIGRATIONS) {
    if (migration.version <= current) continue
    try {
      for (const statement of dialect === "sqlite" ? migration.sqlite : migration.postgres) {
        await sql.raw(statement).execute(transaction)
      }
      await sql`INSERT INTO schema_migrations (version, applied_at) VALUES (${migration.version}, ${sql.raw(
        NOW_MILLISECONDS[dialect],
      )})`.execute(transaction)
    } catch (error) {
      throw EventLogError.make({
        _tag: "Migration",
        message: `migration ${migration.version} (${migration.description}) failed: ${errorMessage(error)}`,
      })
    }
    applied.push(migration.version)
  }
  return applied
}
