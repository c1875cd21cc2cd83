/**
 * The Promise facade (docs/architecture.md §9) for callers who do not use Effect: `createEngine` opens the log
 * (a SQLite file, or PostgreSQL) and an `Engine` over it in a `ManagedRuntime`; `start` builds a run
 * from plain options through `Agent.startInput`, the one home of their defaults. This module is the
 * Promise edge: every Effect is run here, and every failure crosses as an `EngineError`.
 */
import type { Configuration, Event, Identity, Lineage } from "@maka/facts"
import type { EventLog, EventLogError } from "@maka/event-log"
import { ModelDefaults } from "@maka/model"
import { Ids, ToolCatalog, Workspace } from "@maka/tools"
import { Cause, Effect, Exit, ManagedRuntime, Option, Stream } from "effect"
import * as Agent from "./Agent.ts"
import type { TextDelta } from "./Agent.ts"
import * as Engine from "./Engine.ts"
import * as EngineError from "./EngineError.ts"
import * as AbortFanout from "./internal/abort-fanout.ts"
import * as EventFeed from "./internal/event-feed.ts"
import * as Handoff from "./internal/handoff.ts"
import { describeThrown, readOptions } from "./internal/start-options.ts"
import type * as Recovery from "./Recovery.ts"

/** The defaults of `createEngine` and `start` (`Agent.defaults`). */
export const defaults = Agent.defaults

export type CreateEngineOptions = Agent.LogOptions
export type ProviderOptions = Agent.ProviderOptions
export type StartOptions = Agent.RunOptions
export type CompactOptions = Agent.CompactOptions
export type { TextDelta }

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
  /** Queues a user message for the next step boundary (`message_steered`); `Busy` when no later step could deliver it. */
  readonly steer: (text: string) => Promise<void>
  /**
   * Requests a pause at the next step boundary (the in-flight step settles first) and resolves with
   * the sealed pause, or `null` when the run ended first or the pause could not be taken.
   */
  readonly handoff: () => Promise<Lineage.HandoffPause | null>
}

/** How this host serves the sealed pauses it finds. */
export interface ResumeResolvers {
  /** The provider of a pause's route (its identity and the paused run's model binding), or `undefined`. */
  readonly provider: (
    routeIdentity: string,
    binding: Configuration.InvocationConfiguration["model"],
    paused: Engine.PausedRun,
  ) => ProviderOptions | undefined
  /** The tools of the pause's catalog (its names include the engine's `read_tool_result`), or `undefined`. */
  readonly tools: (names: ReadonlyArray<string>, catalogDigest: string, paused: Engine.PausedRun) => Agent.Tools | undefined
  /**
   * The idle timeout of each resumed run's model requests, as `start`'s (default 120,000 ms, within
   * 1,000–300,000): the log does not hold the paused run's, so the resuming host sets it.
   */
  readonly idleTimeoutMs?: number | undefined
}

export type ResumeReport =
  | { readonly sessionId: string; readonly invocation: Identity.Invocation; readonly started: Run }
  | { readonly sessionId: string; readonly invocation: Identity.Invocation; readonly skipped: string }

export type ClosedRun = Engine.ClosedRun
export type PausedRun = Engine.PausedRun

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
  /**
   * What the recovery run as a SQLite log was opened sealed (runs a crashed process had left open),
   * or `undefined` on PostgreSQL, where only `recover()` recovers.
   */
  readonly recoveredOnOpen: Recovery.Report | undefined
  /** The stored events of a session in sequence order. */
  readonly events: (
    sessionId: string,
    options?: { readonly after?: number | undefined; readonly limit?: number | undefined },
  ) => Promise<ReadonlyArray<Event.StoredEvent>>
  /** Starts the successor of every sealed pause this host can serve; says why it skipped the others. */
  readonly resumePending: (resolvers: ResumeResolvers) => Promise<ReadonlyArray<ResumeReport>>
  /** Releases a pause that can never be resumed: its successor is sealed `cancelled {handoff_abandoned}`. */
  readonly abandonHandoff: (sessionId: string) => Promise<Identity.Invocation>
  /**
   * Cancels every live run (with `handoff: true`, hands off each it can at its next step boundary and
   * cancels the others), waits until each is sealed, and closes the log; idempotent. Resolves with
   * what became of each live run.
   */
  readonly close: Close
}

/**
 * Why what a `resumePending` resolver returned cannot be used, or `undefined`: a Promise (resolvers
 * answer synchronously), or a value that is not what `isUsable` expects.
 */
const resolvedProblem = (resolver: "provider" | "tools", value: unknown, isUsable: (value: unknown) => boolean): string | undefined => {
  if (typeof value === "object" && value !== null && typeof Reflect.get(value, "then") === "function") {
    return `the ${resolver} resolver returned a Promise; resolvers answer synchronously (read what they need before resumePending)`
  }
  if (isUsable(value)) return undefined
  const given = value === null ? "null" : typeof value
  return `the ${resolver} resolver returned ${given}, not ${resolver === "provider" ? "provider options" : "a list of tools"} or undefined`
}

/** `close()` resolves once everything is closed; `close({handoff: true})` with what became of each live run. */
export interface Close {
  (): Promise<void>
  (options: { readonly handoff?: boolean | undefined } | undefined): Promise<ReadonlyArray<ClosedRun>>
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

const closedError = () => EngineError.internal(EngineError.ENGINE_CLOSED_MESSAGE)

/** The provider configuration of a run: the key wrapped in `Redacted` at once. */
export const providerConfig = Agent.providerConfig

/**
 * Opens a workspace (docs/architecture.md §7): the canonical root and its identity; `InvalidInput`
 * when unusable, or when `directory` is not a string or is empty (which would open the process's directory).
 */
export const openWorkspace = (directory: string): Promise<Workspace.Workspace> =>
  Effect.runPromiseExit(Agent.openWorkspace(directory).pipe(Effect.provide(Ids.layer))).then(settle)

/**
 * Whether the caller's signal has aborted, read without letting its getter throw through `start`: a
 * getter that throws reads as not aborted here, and the option checks refuse the signal
 * `InvalidInput` (an engine that admitted the run has read it already).
 */
const hasAborted = (signal: AbortSignal | undefined): boolean => {
  try {
    // Only a signal aborts: anything else (`{aborted: true}`) is left to the checks, `InvalidInput`.
    return Agent.isSignal(signal) && signal.aborted
  } catch {
    return false
  }
}

/**
 * `read()`, or the refusal saying that `what` could not be read (a getter or a proxy of the caller's
 * that throws): a facade call rejects with it, never throws.
 */
const readOrRefusal = <A>(what: string, read: () => A | string): A | string => {
  try {
    return read()
  } catch (error) {
    return `${what} could not be read: ${describeThrown(error)}`
  }
}

/** `resumePending`'s resolvers, each read once, or what is wrong with them: both must be functions. */
const resolversOf = (resolvers: unknown): ResumeResolvers | string =>
  readOrRefusal("resumePending's resolvers", () => {
    if (typeof resolvers !== "object" || resolvers === null) return "resumePending takes {provider, tools}, each a function"
    const { provider, tools } = resolvers as { readonly provider?: unknown; readonly tools?: unknown }
    if (typeof provider !== "function") return "resumePending's provider resolver must be a function"
    if (typeof tools !== "function") return "resumePending's tools resolver must be a function"
    const { idleTimeoutMs } = resolvers as { readonly idleTimeoutMs?: unknown }
    const { minIdleTimeoutMs, maxIdleTimeoutMs } = ModelDefaults.ModelDefaults
    if (
      idleTimeoutMs !== undefined &&
      !(Number.isSafeInteger(idleTimeoutMs) && (idleTimeoutMs as number) >= minIdleTimeoutMs && (idleTimeoutMs as number) <= maxIdleTimeoutMs)
    ) {
      return `resumePending's idleTimeoutMs must be an integer in [${minIdleTimeoutMs}, ${maxIdleTimeoutMs}]`
    }
    // Called on the host's own object, as methods: a resolver of a class keeps its `this`.
    const self = resolvers as ResumeResolvers
    const asProvider = provider as ResumeResolvers["provider"]
    const asTools = tools as ResumeResolvers["tools"]
    return {
      provider: (...args: Parameters<ResumeResolvers["provider"]>) => asProvider.apply(self, args),
      tools: (...args: Parameters<ResumeResolvers["tools"]>) => asTools.apply(self, args),
      ...(idleTimeoutMs === undefined ? {} : { idleTimeoutMs: idleTimeoutMs as number }),
    }
  })

/** `events`' range, each field read once, or what is wrong with it: `after` a sequence (0 or more), `limit` 1 or more. */
const rangeOf = (range: unknown): { readonly after?: number | undefined; readonly limit?: number | undefined } | string =>
  readOrRefusal("the range", () => {
    if (range === undefined) return {}
    if (typeof range !== "object" || range === null) return "the range must be an object {after?, limit?}"
    // A misspelt `after` would read from the first event, unseen.
    const unknownKey = Object.keys(range).find((key) => key !== "after" && key !== "limit")
    if (unknownKey !== undefined) return `the range has no key '${unknownKey}' (the keys are after, limit)`
    const { after, limit } = range as { readonly after?: unknown; readonly limit?: unknown }
    if (after !== undefined && !(Number.isSafeInteger(after) && (after as number) >= 0)) return "after must be an integer of 0 or more"
    if (limit !== undefined && !(Number.isSafeInteger(limit) && (limit as number) >= 1)) return "limit must be an integer of 1 or more"
    return { after: after as number | undefined, limit: limit as number | undefined }
  })

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
  /** Each wrapped run's settlement until it settles, by invocation id: what `close` reports of it. */
  const settling = new Map<string, Promise<Exit.Exit<Engine.RunResult, EdgeError>>>()
  let closing: Promise<ReadonlyArray<ClosedRun>> | undefined
  /** Set as the runtime is disposed, at the end of `close`. */
  let disposed = false

  const run = <A>(effect: Effect.Effect<A, EdgeError, Services>): Promise<A> =>
    closing === undefined ? runtime.runPromiseExit(effect).then(settle) : Promise.reject(closedError())
  /**
   * A call on a live run: heard while the engine closes, until its runtime is gone (a shutdown
   * handler's `handoff()` after `close({handoff: true})` began joins the pause that close takes; a
   * `steer` gets the run's own answer, `Busy` once it is handing off or cancelled).
   */
  const onRun = <A>(effect: Effect.Effect<A, EdgeError, Services>): Promise<A> =>
    disposed ? Promise.reject(closedError()) : runtime.runPromiseExit(effect).then(settle)

  const feedOf = (running: Agent.AgentRun): EventFeed.EventFeed | undefined => EventFeed.of(running.events)

  const wrap = (running: Agent.AgentRun, signal: AbortSignal | undefined): Run => {
    // Still heard while the engine closes (a host may cancel a run `close({handoff: true})` would
    // pause); once the runtime is gone every run is sealed, and there is nothing left to cancel.
    const cancel = (): Promise<void> => (disposed ? Promise.resolve() : runtime.runPromise(running.cancel))
    const onAbort = (): void => void cancel()
    let unsubscribe: (() => void) | undefined
    /** The pending `handoff()`, which a second call shares. */
    let handing: Promise<Lineage.HandoffPause | null> | undefined
    const settled = runtime.runPromiseExit(running.wait)
    const invocationId = running.invocation.invocationId
    const tracked = settled.finally(() => {
      unsubscribe?.()
      live.delete(tracked)
      settling.delete(invocationId)
    })
    live.add(tracked)
    settling.set(invocationId, settled)
    if (signal !== undefined) {
      // Aborted while `start` was admitting: the run is open, so it is cancelled now.
      if (hasAborted(signal)) onAbort()
      else unsubscribe = AbortFanout.subscribe(signal, onAbort)
    }
    return {
      invocation: running.invocation,
      toolNames: running.toolNames,
      // The engine's runs are read from their feed, with no fiber per event.
      events: () => feedOf(running)?.events() ?? Stream.toAsyncIterable(running.events),
      text: () => {
        const feed = feedOf(running)
        return feed === undefined ? Stream.toAsyncIterable(running.text) : EventFeed.textOf(feed.events())
      },
      textAndThinking: () => {
        const feed = feedOf(running)
        return feed === undefined ? Stream.toAsyncIterable(running.textAndThinking) : EventFeed.textAndThinkingOf(feed.events())
      },
      wait: () => settled.then(settle),
      cancel,
      steer: (text) => onRun(running.steer(text)),
      // A run that has ended has nothing to hand off: `null`, as when it ends while the request waits.
      // A second call while one is pending shares it (a host's shutdown handler may fire twice).
      handoff: () =>
        (handing ??= onRun(running.handoff)
          .then(
            (pause) => pause ?? null,
            (error: unknown) => {
              if (error instanceof EngineError.EngineError && error.reason._tag === "Busy") {
                // The handoff `close({handoff: true})` asked for: its pause, or null when it took none.
                const closingNow = closing
                if (closingNow !== undefined && Handoff.refusedAsTaken(error.reason.message)) {
                  return closingNow.then((closed) => {
                    const own = closed.find((item) => item.invocation.invocationId === running.invocation.invocationId)
                    return (own?.outcome === "paused" ? own.pause : undefined) ?? null
                  })
                }
                if (Handoff.refusedAsEnded(error.reason.message)) return null
              }
              throw error
            },
          )
          .finally(() => {
            handing = undefined
          })),
    }
  }

  const agentRun = (running: Engine.RunningInvocation): Agent.AgentRun => ({
    ...running,
    text: Agent.text(running.events),
    textAndThinking: Agent.textAndThinking(running.events),
  })

  return {
    recoveredOnOpen: Engine.recoveredOnOpen(engine),
    start: (given) => {
      // Read once: the signal and every option the engine reads come from this copy.
      const startOptions = readOptions(given)
      if (typeof startOptions === "string") return Promise.reject(EngineError.invalidInput(startOptions))
      const signal = startOptions.signal
      if (hasAborted(signal)) return Promise.reject(EngineError.cancelled())
      // Resolved on the next turn of the event loop: the opening rides the first request's commit,
      // so the engine writes that request to its socket before the caller's code after `start` runs.
      const admitted = run(Agent.start(startOptions)).then((running) => {
        const wrapped = wrap(running, signal)
        return new Promise<Run>((resolve) => setImmediate(() => resolve(wrapped)))
      })
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
    resumePending: (given) => {
      const resolvers = resolversOf(given)
      if (typeof resolvers === "string") return Promise.reject(EngineError.invalidInput(resolvers))
      return run(
        engine.resumePending({
          provider: (routeIdentity, binding, paused) => {
            const provider = resolvers.provider(routeIdentity, binding, paused)
            if (provider === undefined) return Effect.succeed(undefined)
            const problem = resolvedProblem("provider", provider, (value) => typeof value === "object" && value !== null)
            return problem === undefined ? Agent.modelOf(provider, resolvers.idleTimeoutMs) : Effect.fail(EngineError.invalidInput(problem))
          },
          tools: (names, catalogDigest, paused) => {
            const tools = resolvers.tools(names, catalogDigest, paused)
            if (tools === undefined) return undefined
            const problem = resolvedProblem("tools", tools, (value) => typeof value === "object" && value !== null && Symbol.iterator in value)
            if (problem !== undefined) throw EngineError.invalidInput(problem)
            return ToolCatalog.from(tools)
          },
        }),
      ).then((reports) =>
        reports.map((report): ResumeReport =>
          "started" in report
            ? { sessionId: report.sessionId, invocation: report.invocation, started: wrap(agentRun(report.started), undefined) }
            : report,
        ),
      )
    },
    abandonHandoff: (sessionId) =>
      typeof sessionId === "string"
        ? run(engine.abandonHandoff(sessionId))
        : Promise.reject(EngineError.invalidInput("sessionId must be a string")),
    recover: () => run(engine.recover),
    events: (sessionId, given) => {
      const range = typeof sessionId === "string" ? rangeOf(given) : "sessionId must be a string"
      return typeof range === "string"
        ? Promise.reject(EngineError.invalidInput(range))
        : run(engine.log.events(sessionId, range.after, range.limit))
    },
    close: ((closeOptions?: { readonly handoff?: boolean } | null) => {
      // Anything but `{handoff: true}` closes without handing off (`null` too): a close never fails
      // on its options, and never leaves the log's lease held.
      let handoff = false
      try {
        handoff = typeof closeOptions === "object" && closeOptions !== null && closeOptions.handoff === true
      } catch {
        // A getter that throws closes without handing off, as any other value but `true` does.
      }
      closing ??= (async () => {
        try {
          await Promise.allSettled([...starting])
          const handedOff = handoff ? await runtime.runPromise(engine.handOffAll) : []
          // Each run still live is cancelled; one that reached its own terminal first is told as that.
          const cancelled = engine.liveInvocations().map((invocation) => ({ invocation, settled: settling.get(invocation.invocationId) }))
          await runtime.runPromiseExit(engine.close)
          await Promise.allSettled([...live])
          const closed = await Promise.all(
            cancelled.map(async ({ invocation, settled }) => {
              const exit = await settled
              return Engine.closedRunOf(invocation, exit !== undefined && Exit.isSuccess(exit) ? exit.value.outcome : undefined)
            }),
          )
          return [...handedOff, ...closed]
        } finally {
          disposed = true
          await runtime.dispose()
        }
      })()
      return closing
    }) as Close,
  }
}
