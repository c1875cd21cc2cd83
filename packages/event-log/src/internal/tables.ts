/**
 * The SQL schema as Kysely sees it (docs/log-format.md §3.2). Both dialects use these names; `event_json`
 * is the canonical JSON text of the `RuntimeEvent` in both, never `jsonb`.
 */
import type { ColumnType, Generated } from "kysely"

/** Integers come back as numbers from SQLite and as strings (bigint) from PostgreSQL. */
type Integer = ColumnType<number | string, number, number>

export interface SessionsTable {
  readonly session_id: string
  readonly created_at: Integer
}

export interface EventLogTable {
  readonly sequence: Generated<number | string>
  readonly event_id: string
  readonly session_id: string
  readonly turn_id: string
  readonly run_id: string
  readonly invocation_id: string
  readonly kind: string
  readonly operation_id: string | null
  readonly event_json: string
}

export interface ToolResultPayloadsTable {
  readonly event_id: string
  readonly payload: string
}

export interface SchemaMigrationsTable {
  readonly version: Integer
  readonly applied_at: Integer
}

export interface Tables {
  readonly sessions: SessionsTable
  readonly event_log: EventLogTable
  readonly tool_result_payloads: ToolResultPayloadsTable
  readonly schema_migrations: SchemaMigrationsTable
}
