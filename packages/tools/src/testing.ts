/**
 * @maka/tools/testing: what tools' own tests and other packages' tests need to exercise the journal
 * without a store: an in-memory recording `EventSink` with fault injection, and deterministic `Ids`.
 */
export * as RecordingSink from "./RecordingSink.ts"
export * as TestIds from "./TestIds.ts"
