/**
 * The Promise facade (docs/architecture.md §9) for callers who do not use Effect: `createEngine` opens the log
 * (a SQLite file, or PostgreSQL) and an `Engine` over it in a `ManagedRuntime`; `start` builds a run
 * from plain options through `Agent.startInput`, the one home of their defaults. This module is the
 * Promise edge: every Effect is run here, and every failure crosses as an `EngineError`.
 */
import type { Event, Identity } from "@maka/facts"
import type { EventLog, EventLogError } from "@maka/event-log"
import { Ids, Workspace } from "@maka/tools"
import { Cause, Effect, Exit, ManagedRuntime, Option, Stream } from "effect"
import * as Agent from "./Agent.ts"
import * as Engine from "./Engine.ts"
import * as EngineError from "./EngineError.ts"
import type * as Recovery from "./Recovery.ts"

/** The defaults of `createEngine` and `start` (`Agent.defaults`). */
export const defaults = Agent.defaults

export type CreateEngineOptions = Agent.LogOptions
export type ProviderOptions = Agent.ProviderOptions
export type StartOptions = Agent.RunOptions
export type CompactOptions = Agent.CompactOptions
export type TextDelta = Agent.TextDelta

export type RunResult = Engine.RunResult

export interface Run {
  readonly invocation: Identity.Invocation
  readonly toolNames: ReadonlyArray<string>
  /** Every committed event of this invocation from its opening, live, ending after the terminal. */
  readonly events: () => AsyncIterable<Event.StoredEvent>
  /** The answer's text deltas as they become durable (thinking excluded), ending after the terminal. */
  readonly text: () => AsyncIterable<string>
  /** Text and thinking deltas in order, each `{kind: "text" | "thinking", text}`. */
  readonly textAndThinking: () => AsyncIterable<TextDelta>
  /** Resolves once the terminal is durable. */
  readonly wait: () => Promise<RunResult>
  /** Requests cancellation: dispatched effects finish and settle, the run seals `cancelled`. */
  readonly cancel: () => Promise<void>
  /** Queues a user message for the next step boundary (`message_steered`). */
  readonly steer: (text: string) => Promise<void>
}

export interface MakaEngine {
  /** Resolves once the opening is durable; invalid input rejects with `InvalidInput` and writes nothing. */
  readonly start: (options: StartOptions) => Promise<Run>
  /**
   * Compacts the session's history into a summary checkpoint (a `context_compact` invocation) and
   * resolves with its terminal: `context_compact_finished {compacted | unchanged | failed}`.
   */
  readonly compact: (options: CompactOptions) => Promise<RunResult>
  /** Seals every unfinished invocation (SQLite does this when the engine opens; PostgreSQL needs it). */
  readonly recover: () => Promise<Recovery.Report>
  /** The stored events of a session in sequence order. */
  readonly events: (
    sessionId: string,
    options?: { readonly after?: number | undefined; readonly limit?: number | undefined },
  ) => Promise<ReadonlyArray<Event.StoredEvent>>
  /** Cancels every live run, waits until each is sealed, and closes the log; idempotent. */
  readonly close: () => Promise<void>
}

type Services = Engine.Engine | EventLog.EventLog | Ids.Ids
type EdgeError = EngineError.EngineError | EventLogError.EventLogError

/** Any failure that reaches the edge, as an `EngineError`; a log failure keeps its reason and cause. */
const toEngineError = (error: EdgeError): EngineError.EngineError =>
  error._tag === "EngineError" ? error : Agent.storeError(error)

const failureOf = (cause: Cause.Cause<EdgeError>): EngineError.EngineError => {
  const error = Cause.findErrorOption(cause)
  if (Option.isSome(error)) return toEngineError(error.value)
  if (Cause.hasInterruptsOnly(cause)) return EngineError.cancelled()
  return EngineError.internal(Cause.pretty(cause))
}

const settle = <A>(exit: Exit.Exit<A, EdgeError>): Promise<A> =>
  Exit.isSuccess(exit) ? Promise.resolve(exit.value) : Promise.reject(failureOf(exit.cause))

const closedError = () => EngineError.internal("the engine is closed")

/** The provider configuration of a run: the key wrapped in `Redacted` at once. */
export const providerConfig = Agent.providerConfig

/** Opens a workspace (docs/architecture.md §7): the canonical root and its identity; `InvalidInput` when unusable. */
export const openWorkspace = (directory: string): Promise<Workspace.Workspace> =>
  Effect.runPromiseExit(
    Workspace.open(directory).pipe(
      Effect.mapError((error) => EngineError.invalidInput(`workspace: ${error.message}`)),
      Effect.provide(Ids.layer),
    ),
  ).then(settle)

/**
 * Opens the log and an engine over it. On SQLite the engine takes the writer lease and recovers what a
 * crashed host left open before it admits anything; on PostgreSQL call `recover()` explicitly.
 */
export const createEngine = async (options: CreateEngineOptions): Promise<MakaEngine> => {
  const runtime: ManagedRuntime.ManagedRuntime<Services, EdgeError> = ManagedRuntime.make(Agent.layer(options))
  const opened = await runtime.runPromiseExit(Effect.service(Engine.Engine))
  if (Exit.isFailure(opened)) {
    await runtime.dispose()
    throw failureOf(opened.cause)
  }
  const engine = opened.value
  /** Starts still admitting and runs not yet sealed: `close` waits for both. */
  const starting = new Set<Promise<unknown>>()
  const live = new Set<Promise<unknown>>()
  let closing: Promise<void> | undefined

  const run = <A>(effect: Effect.Effect<A, EdgeError, Services>): Promise<A> =>
    closing === undefined ? runtime.runPromiseExit(effect).then(settle) : Promise.reject(closedError())

  const wrap = (running: Agent.AgentRun, signal: AbortSignal | undefined): Run => {
    const cancel = (): Promise<void> => (closing === undefined ? runtime.runPromise(running.cancel) : Promise.resolve())
    const onAbort = (): void => void cancel()
    const settled = runtime.runPromiseExit(running.wait)
    const tracked = settled.finally(() => {
      signal?.removeEventListener("abort", onAbort)
      live.delete(tracked)
    })
    live.add(tracked)
    if (signal !== undefined) {
      // Aborted while `start` was admitting: the run is open, so it is cancelled now.
      if (signal.aborted) onAbort()
      else signal.addEventListener("abort", onAbort, { once: true })
    }
    return {
      invocation: running.invocation,
      toolNames: running.toolNames,
      events: () => Stream.toAsyncIterable(running.events),
      text: () => Stream.toAsyncIterable(running.text),
      textAndThinking: () => Stream.toAsyncIterable(running.textAndThinking),
      wait: () => settled.then(settle),
      cancel,
      steer: (text) => run(running.steer(text)),
    }
  }

  return {
    start: (startOptions) => {
      if (typeof startOptions === "object" && startOptions !== null && startOptions.signal?.aborted === true) return Promise.reject(EngineError.cancelled())
      const admitted = run(Agent.start(startOptions)).then((running) =>
        wrap(running, startOptions.signal),
      )
      const tracked: Promise<unknown> = admitted.then(
        () => starting.delete(tracked),
        () => starting.delete(tracked),
      )
      starting.add(tracked)
      return admitted
    },
    compact: (compactOptions) => {
      const done = run(Agent.compact(compactOptions))
      const tracked: Promise<unknown> = done.then(
        () => live.delete(tracked),
        () => live.delete(tracked),
      )
      live.add(tracked)
      return done
    },
    recover: () => run(engine.recover),
    events: (sessionId, range = {}) => run(engine.log.events(sessionId, range.after, range.limit)),
    close: () => {
      closing ??= (async () => {
        await Promise.allSettled([...starting])
        await runtime.runPromiseExit(engine.close)
        await Promise.allSettled([...live])
        await runtime.dispose()
      })()
      return closing
    },
  }
}
