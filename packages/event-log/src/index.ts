/**
 * @maka/event-log: the durable log of maka on SQLite and PostgreSQL. Checked appends with the
 * transition rules, prefix and model-context reads, recovery reads and commit signals.
 */
export * as EventLog from "./EventLog.ts"
export * as EventLogError from "./EventLogError.ts"
