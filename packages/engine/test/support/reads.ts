/**
 * A counting wrapper around the real `EventLog` for the suites that assert how the engine reads the
 * log: each context read (the model read, the manual read under the prior-unknown policy), each
 * compaction source read and each page of prune candidates is counted, then answered by the log.
 */
import type { EventLog } from "@maka/event-log"

export interface ReadCounts {
  model: number
  manual: number
  compaction: number
  prune: number
}

export interface CountingLog {
  readonly counts: ReadCounts
  readonly wrap: (log: EventLog.EventLogShape) => EventLog.EventLogShape
}

/** A wrapper for `setup`'s `wrapLog`, with the counts it keeps. */
export const countingLog = (): CountingLog => {
  const counts: ReadCounts = { model: 0, manual: 0, compaction: 0, prune: 0 }
  return {
    counts,
    wrap: (log) => ({
      ...log,
      readModelContextWithHash: (sessionId, request) => {
        counts.model++
        return log.readModelContextWithHash(sessionId, request)
      },
      readManualMessageContextWithHash: (sessionId, request) => {
        counts.manual++
        return log.readManualMessageContextWithHash(sessionId, request)
      },
      prepareContextCompaction: (sessionId, request) => {
        counts.compaction++
        return log.prepareContextCompaction(sessionId, request)
      },
      preparePruneCandidates: (sessionId, request) => {
        counts.prune++
        return log.preparePruneCandidates(sessionId, request)
      },
    }),
  }
}
