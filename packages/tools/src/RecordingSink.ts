/**
 * An in-memory `EventSink` for tests (`@maka/tools/testing`): it checks nothing beyond what
 * `EventWrite` already checked, records committed writes in order with their sequences, replays an
 * identical write idempotently, and can be told to fail chosen commits as `rejected` or
 * `outcome_unknown`. `withFaults` adds the same fault plan to any other sink.
 */
import { EventSink, type Event, type EventWrite } from "@maka/facts"
import { Context, Effect, Layer } from "effect"

/** Makes the n-th commit call (1-based; `commit` and `commitBatch` each count one) fail. */
export interface Fault {
  readonly commit: number
  readonly kind: "rejected" | "outcome_unknown"
  /** For `outcome_unknown`: the write is committed, then its acknowledgement is lost. */
  readonly persisted?: boolean | undefined
  readonly reason?: string | undefined
}

export interface Options {
  readonly faults?: ReadonlyArray<Fault> | undefined
  /** The first sequence handed out (default 1). */
  readonly firstSequence?: number | undefined
}

export interface Recorded {
  readonly sequence: number
  readonly write: EventWrite.EventWrite
}

export interface RecordingSinkShape {
  readonly sink: EventSink.EventSinkShape
  /** Every committed write in commit order. */
  readonly records: Effect.Effect<ReadonlyArray<Recorded>>
  /** The committed events in commit order. */
  readonly events: Effect.Effect<ReadonlyArray<Event.RuntimeEvent>>
  /** How many commit calls were made, failed ones included. */
  readonly commitCalls: Effect.Effect<number>
}

export class RecordingSink extends Context.Service<RecordingSink, RecordingSinkShape>()(
  "@maka/tools/testing/RecordingSink",
) {}

const faultError = (fault: Fault): EventSink.CommitError =>
  fault.kind === "rejected"
    ? EventSink.rejected(fault.reason ?? "injected rejection")
    : EventSink.outcomeUnknown(fault.reason ?? "injected unknown outcome")

/** Wraps `inner` so the commits named in `faults` fail; the others go through unchanged. */
export const withFaults = (inner: EventSink.EventSinkShape, faults: ReadonlyArray<Fault>): Effect.Effect<EventSink.EventSinkShape> =>
  Effect.sync(() => {
    let calls = 0
    const guarded = <A>(run: Effect.Effect<A, EventSink.CommitError>): Effect.Effect<A, EventSink.CommitError> =>
      Effect.suspend(() => {
        calls++
        const fault = faults.find((candidate) => candidate.commit === calls)
        if (fault === undefined) return run
        if (fault.kind === "outcome_unknown" && fault.persisted === true) {
          return Effect.andThen(run, Effect.fail(faultError(fault)))
        }
        return Effect.fail(faultError(fault))
      })
    return {
      commit: (write) => guarded(inner.commit(write)),
      commitBatch: (writes) => guarded(inner.commitBatch(writes)),
    } satisfies EventSink.EventSinkShape
  })

/** A new recording sink; its faults count every commit call it receives. */
export const make = (options: Options = {}): Effect.Effect<RecordingSinkShape> =>
  Effect.gen(function* () {
    const records: Array<Recorded> = []
    const byId = new Map<string, Recorded>()
    let nextSequence = options.firstSequence ?? 1
    let calls = 0

    /** Exact replay returns the original sequence; a different body under a used id is a conflict. */
    const apply = (writes: ReadonlyArray<EventWrite.EventWrite>): Effect.Effect<ReadonlyArray<number>, EventSink.CommitError> =>
      Effect.suspend(() => {
        const pending = new Map<string, Recorded>()
        const sequences: Array<number> = []
        let next = nextSequence
        for (const write of writes) {
          const previous = byId.get(write.event.id) ?? pending.get(write.event.id)
          if (previous !== undefined) {
            if (previous.write.json !== write.json || previous.write.rawPayload !== write.rawPayload) {
              return Effect.fail(EventSink.rejected(`EventConflict: event ${write.event.id} exists with a different body`))
            }
            sequences.push(previous.sequence)
            continue
          }
          const recorded = { sequence: next++, write }
          pending.set(write.event.id, recorded)
          sequences.push(recorded.sequence)
        }
        for (const recorded of pending.values()) {
          records.push(recorded)
          byId.set(recorded.write.event.id, recorded)
        }
        nextSequence = next
        return Effect.succeed(sequences)
      })

    const plain: EventSink.EventSinkShape = {
      commit: (write) => Effect.map(apply([write]), (sequences) => sequences[0]!),
      commitBatch: apply,
    }
    const faulty = yield* withFaults(plain, options.faults ?? [])
    const sink: EventSink.EventSinkShape = {
      commit: (write) => Effect.andThen(Effect.sync(() => calls++), faulty.commit(write)),
      commitBatch: (writes) => Effect.andThen(Effect.sync(() => calls++), faulty.commitBatch(writes)),
    }
    return {
      sink,
      records: Effect.sync(() => [...records]),
      events: Effect.sync(() => records.map((recorded) => recorded.write.event)),
      commitCalls: Effect.sync(() => calls),
    } satisfies RecordingSinkShape
  })

/** Provides `EventSink` and the `RecordingSink` that observes it. */
export const layer = (options: Options = {}): Layer.Layer<RecordingSink | EventSink.EventSink> =>
  Layer.effectContext(
    Effect.map(make(options), (recording) =>
      Context.make(RecordingSink, recording).pipe(Context.add(EventSink.EventSink, recording.sink)),
    ),
  )
