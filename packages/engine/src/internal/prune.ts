/**
 * Prune (docs/engine.md §5.11): settled tool results over one page are archived out of the model
 * context, each replaced by a placeholder with its first page and a `resourceRef`; the raw result
 * stays in the log. Archives belong to the current invocation and are committed a page of
 * candidates at a time; the live context then reads the log again, once (docs/architecture.md §12).
 */
import { Archive, Limits, type EventWrite, type Fact } from "@maka/facts"
import type { Ids } from "@maka/tools"
import { Effect } from "effect"
import * as EngineError from "../EngineError.ts"
import { commitFacts, flushCarry, isCancelled, storeError, type Run } from "./run-context.ts"

/** The candidates one page of the prune loop reads (docs/log-format.md §3.9). */
export const PRUNE_PAGE = { maxCandidates: 128, maxBytes: 4 * 1024 * 1024 } as const

/** The archives of one page of candidates; candidates that need none (small, already archived) are skipped. */
const archivesOf = (page: ReadonlyArray<{ readonly eventId: string; readonly toolCallId: string; readonly toolName: string; readonly source: Archive.ArchiveSource }>) =>
  page.flatMap((candidate): ReadonlyArray<Fact.Fact> => {
    const placeholder = Archive.prepare(candidate.eventId, candidate.toolCallId, candidate.toolName, candidate.source)
    return placeholder === undefined ? [] : [{ kind: "tool_result_archived", placeholder }]
  })

/**
 * Runs the prune loop to its end, or until cancellation is requested; returns whether it reached the
 * end (a pass cancellation stopped is still owed, by the kept context to the session's next run).
 */
export const prune = (run: Run): Effect.Effect<boolean, EngineError.EngineError, Ids.Ids> =>
  Effect.gen(function* () {
    const { sessionId, invocationId } = run.settings.invocation
    // The candidates are read from the log: what the run carries is committed first.
    yield* Effect.mapError(flushCarry(run), (error) => EngineError.commit(error.message))
    let cursor: { readonly through: number; readonly afterSequence: number } | undefined
    while (true) {
      const page = yield* Effect.mapError(
        run.log.preparePruneCandidates(sessionId, { current: invocationId, ...PRUNE_PAGE, ...(cursor === undefined ? {} : { cursor }) }),
        storeError,
      )
      const archives = archivesOf(page.candidates)
      if (archives.length > 0) {
        if (yield* isCancelled(run)) return false
        yield* commitFacts(run, archives)
      }
      if (page.next === undefined) return true
      cursor = page.next
    }
  })

/** Whether a settlement holds a result large enough to archive (over one page). */
export const isArchivable = (write: { readonly event: EventWrite.EventWrite["event"] }): boolean => {
  const fact = write.event.fact
  if (fact.kind !== "tool_settled") return false
  const source: Archive.ArchiveSource =
    fact.outcome.kind === "succeeded"
      ? { kind: "projection", projection: fact.outcome.projection }
      : { kind: "failed", message: fact.outcome.message }
  return Archive.body(source).length > Limits.MAX_PAGE_CHARS
}
