/**
 * The Promise facade (DESIGN.md §9) for callers who do not use Effect: `createEngine` opens the log
 * (a SQLite file, or PostgreSQL) and an `Engine` over it in a `ManagedRuntime`; `start` builds a run
 * from plain options (provider, workspace, connection and context defaults of DESIGN.md §10.1). This
 * module is the Promise edge: every Effect is run here, and every failure crosses as an `EngineError`.
 */
import type { Event, Identity, Input } from "@maka/facts"
import { Limits } from "@maka/facts"
import { EventLog, type EventLogError } from "@maka/event-log"
import { LanguageModel, ModelDefaults, ProviderConfig } from "@maka/model"
import { Ids, ToolCatalog, Workspace } from "@maka/tools"
import { Cause, Effect, Exit, Layer, ManagedRuntime, Option, Redacted, Stream } from "effect"
import * as Engine from "./Engine.ts"
import * as EngineError from "./EngineError.ts"
import type * as Recovery from "./Recovery.ts"

/** The defaults of `createEngine` and `start`. */
export const defaults = Object.freeze({
  synchronous: "FULL" as const,
  maxSteps: Limits.DEFAULT_MAX_STEPS,
  idleTimeoutMs: ModelDefaults.ModelDefaults.idleTimeoutMs,
  allowPriorUnknown: false,
})

export interface CreateEngineOptions {
  /** A SQLite file (created when absent); exactly one of `database` and `databaseUrl`. */
  readonly database?: string | undefined
  /** A PostgreSQL URL (`postgres://…`), for a log shared by several hosts. */
  readonly databaseUrl?: string | undefined
  /** SQLite only: `FULL` (default, durable across power loss) or `NORMAL` (across process crashes). */
  readonly synchronous?: "FULL" | "NORMAL" | undefined
  /** Retry backoff, attempts per step and observation coalescing (`Engine.defaults`). */
  readonly engineOptions?: Partial<Engine.EngineOptions> | undefined
}

export interface ProviderOptions {
  readonly kind: ProviderConfig.ProviderKind
  /** For example `https://api.openai.com/v1`; trailing slashes are ignored. */
  readonly baseUrl: string
  readonly model: string
  /** Wrapped in `Redacted` at once; never written to the log. Local servers need none. */
  readonly apiKey?: string | Redacted.Redacted<string> | undefined
  readonly headers?: Readonly<Record<string, ProviderConfig.HeaderValue>> | undefined
  /** A `fetch`-compatible function (proxies, tests, an in-process model); never part of the route. */
  readonly fetch?: ProviderConfig.FetchFunction | undefined
}

export interface StartOptions {
  readonly sessionId: string
  readonly provider: ProviderOptions
  /** The public model identity; defaults to `{id: kind + ":" + baseUrl (normalised), slug: kind}`. */
  readonly connection?: { readonly id: string; readonly slug: string } | undefined
  readonly message: string | Input.MessageInput
  /** Omitted or empty: the run advertises no tool at all. */
  readonly tools?: ToolCatalog.ToolCatalog | undefined
  /** A directory (resolved against the current directory) or the result of `openWorkspace`. */
  readonly workspace: string | Pick<Workspace.Workspace, "root" | "identity">
  readonly systemPrompt?: string | undefined
  /** `providerId` defaults to the provider's `kind`; absent windows are unknown. */
  readonly context?:
    | {
        readonly providerId?: string | undefined
        readonly contextWindow?: number | undefined
        readonly declaredWindow?: number | undefined
        readonly modelContextWindow?: number | undefined
      }
    | undefined
  /** 1–256, default 32. */
  readonly maxSteps?: number | undefined
  /** Per model request, 1,000–300,000 ms, default 120,000. */
  readonly idleTimeoutMs?: number | undefined
  /** Admit an explicit new message over unresolved history with the prior-unknown notice. */
  readonly allowPriorUnknown?: boolean | undefined
  /** Aborting it cancels the run (terminal `cancelled`); aborted before `start`, nothing is written. */
  readonly signal?: AbortSignal | undefined
}

export type RunResult = Engine.RunResult

export interface Run {
  readonly invocation: Identity.Invocation
  readonly toolNames: ReadonlyArray<string>
  /** Every committed event of this invocation from its opening, live, ending after the terminal. */
  readonly events: () => AsyncIterable<Event.StoredEvent>
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

/** Any failure that reaches the edge, as an `EngineError`. */
const toEngineError = (error: EdgeError): EngineError.EngineError =>
  error._tag === "EngineError" ? error : EngineError.store(error.message)

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
export const providerConfig = (provider: ProviderOptions): ProviderConfig.ProviderConfig => ({
  kind: provider.kind,
  baseUrl: provider.baseUrl,
  model: provider.model,
  apiKey: Redacted.isRedacted(provider.apiKey) ? provider.apiKey : Redacted.make(provider.apiKey ?? ""),
  ...(provider.headers === undefined ? {} : { headers: provider.headers }),
  ...(provider.fetch === undefined ? {} : { fetch: provider.fetch }),
})

/** Opens a workspace (DESIGN.md §7): the canonical root and its identity; `InvalidInput` when unusable. */
export const openWorkspace = (directory: string): Promise<Workspace.Workspace> =>
  Effect.runPromiseExit(
    Workspace.open(directory).pipe(
      Effect.mapError((error) => EngineError.invalidInput(`workspace: ${error.message}`)),
      Effect.provide(Ids.layer),
    ),
  ).then(settle)

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> => typeof value === "object" && value !== null

/** The shape checks a caller without types may miss; the value checks follow in admission. */
const shapeProblem = (options: StartOptions): string | undefined => {
  if (!isRecord(options)) return "start options must be an object"
  if (typeof options.sessionId !== "string") return "sessionId must be a string"
  const provider: unknown = options.provider
  if (!isRecord(provider) || typeof provider["baseUrl"] !== "string" || typeof provider["model"] !== "string") {
    return "provider must be {kind, baseUrl, model, apiKey?, headers?, fetch?}"
  }
  const apiKey = provider["apiKey"]
  if (apiKey !== undefined && typeof apiKey !== "string" && !Redacted.isRedacted(apiKey)) return "apiKey must be a string"
  const message: unknown = options.message
  if (typeof message !== "string" && !(isRecord(message) && typeof message["text"] === "string")) {
    return "message must be a string"
  }
  const workspace: unknown = options.workspace
  if (typeof workspace !== "string" && !(isRecord(workspace) && typeof workspace["root"] === "string")) {
    return "workspace must be a directory path or the result of openWorkspace"
  }
  const tools: unknown = options.tools
  if (tools !== undefined && !(isRecord(tools) && typeof tools["capture"] === "function")) return "tools must be a ToolCatalog"
  return undefined
}

/** Builds the `Engine.StartInput` of `options` with fresh ids, a bound model and the opened workspace. */
const startInput = (options: StartOptions) =>
  Effect.gen(function* () {
    const problem = shapeProblem(options)
    if (problem !== undefined) return yield* Effect.fail(EngineError.invalidInput(problem))
    const config = providerConfig(options.provider)
    const model = yield* Effect.mapError(
      LanguageModel.make(config, { idleTimeoutMs: options.idleTimeoutMs ?? defaults.idleTimeoutMs }),
      (error) => EngineError.invalidInput(error.reason.message),
    )
    const workspace =
      typeof options.workspace === "string"
        ? yield* Effect.mapError(Workspace.open(options.workspace), (error) =>
            EngineError.invalidInput(`workspace: ${error.message}`),
          )
        : options.workspace
    const connection = options.connection ?? {
      id: `${config.kind}:${ProviderConfig.normalizeBaseUrl(config.baseUrl)}`,
      slug: config.kind,
    }
    const context = options.context ?? {}
    const invocation: Identity.Invocation = {
      sessionId: options.sessionId,
      turnId: yield* Ids.next,
      runId: yield* Ids.next,
      invocationId: yield* Ids.next,
    }
    return {
      invocation,
      model,
      configuration: {
        ...(options.systemPrompt === undefined ? {} : { systemPrompt: { text: options.systemPrompt } }),
        cwd: workspace.root,
        workspaceIdentity: workspace.identity,
        model: { connectionId: connection.id, connectionSlug: connection.slug, model: config.model },
        toolMode: "direct",
      },
      message: typeof options.message === "string" ? { text: options.message } : options.message,
      tools: options.tools ?? ToolCatalog.empty,
      maxSteps: options.maxSteps ?? defaults.maxSteps,
      allowPriorUnknown: options.allowPriorUnknown ?? defaults.allowPriorUnknown,
      context: {
        providerId: context.providerId ?? config.kind,
        ...(context.contextWindow === undefined ? {} : { contextWindow: context.contextWindow }),
        ...(context.declaredWindow === undefined ? {} : { declaredWindow: context.declaredWindow }),
        ...(context.modelContextWindow === undefined ? {} : { modelContextWindow: context.modelContextWindow }),
      },
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    } satisfies Engine.StartInput
  })

const logLayer = (options: CreateEngineOptions) =>
  options.databaseUrl !== undefined
    ? EventLog.layerPostgres({ url: options.databaseUrl })
    : EventLog.layerSqlite({ path: options.database ?? "", synchronous: options.synchronous ?? defaults.synchronous })

/**
 * Opens the log and an engine over it. On SQLite the engine takes the writer lease and recovers what a
 * crashed host left open before it admits anything; on PostgreSQL call `recover()` explicitly.
 */
export const createEngine = async (options: CreateEngineOptions): Promise<MakaEngine> => {
  const hasFile = options.database !== undefined
  const hasUrl = options.databaseUrl !== undefined
  if (hasFile === hasUrl) {
    throw EngineError.invalidInput("pass exactly one of database (a SQLite file) and databaseUrl (PostgreSQL)")
  }
  const layer = Engine.layer(options.engineOptions ?? {}).pipe(Layer.provideMerge(Layer.merge(logLayer(options), Ids.layer)))
  const runtime: ManagedRuntime.ManagedRuntime<Services, EdgeError> = ManagedRuntime.make(layer)
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

  const wrap = (running: Engine.RunningInvocation, signal: AbortSignal | undefined): Run => {
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
      wait: () => settled.then(settle),
      cancel,
      steer: (text) => run(running.steer(text)),
    }
  }

  return {
    start: (startOptions) => {
      if (isRecord(startOptions) && startOptions.signal?.aborted === true) return Promise.reject(EngineError.cancelled())
      const admitted = run(Effect.flatMap(startInput(startOptions), engine.start)).then((running) =>
        wrap(running, startOptions.signal),
      )
      const tracked: Promise<unknown> = admitted.then(
        () => starting.delete(tracked),
        () => starting.delete(tracked),
      )
      starting.add(tracked)
      return admitted
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
