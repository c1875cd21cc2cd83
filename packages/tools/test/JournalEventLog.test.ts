import { EventSink } from "@maka/facts"
import * as LogTesting from "@maka/event-log/testing"
import { Context, Effect, Layer } from "effect"
import { Committed, journalSuite } from "./journal-suite.ts"

/** The same journal cases against a real SQLite event log (`@maka/event-log/testing`). */
const eventLogLayer = (): Layer.Layer<EventSink.EventSink | Committed, unknown> =>
  Layer.effectContext(
    Effect.gen(function* () {
      const log = yield* LogTesting.EventLog.EventLog
      const sink = yield* EventSink.EventSink
      const events = Effect.map(log.events("session-1"), (stored) => stored.map((item) => item.event))
      return Context.make(EventSink.EventSink, sink).pipe(Context.add(Committed, { events }))
    }),
  ).pipe(Layer.provide(LogTesting.layerWithSink()))

journalSuite("a SQLite event log", eventLogLayer)
