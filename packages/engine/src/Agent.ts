/**
 * The short Effect API (docs/architecture.md §9): a run from the same plain options as the Promise facade.
 * `startInput` is the one home of their defaults (fresh ids from `Ids`, the bound model, the
 * workspace or the process's directory, the connection and context defaults, the output limit);
 * `start` and `run` admit on the `Engine` in context; `text` and `textAndThinking` render a run's
 * committed events; `layer` opens the log and an engine over it from `createEngine`'s options.
 */
import type { Event, Identity, Input, Model } from "@maka/facts"
import { Limits } from "@maka/facts"
import { EventLog, type EventLogError } from "@maka/event-log"
import { LanguageModel, ModelDefaults, ProviderConfig } from "@maka/model"
import { Ids, ToolCatalog, Workspace } from "@maka/tools"
import { Effect, Layer, Redacted, Stream } from "effect"
import * as nodePath from "node:path"
import * as Engine from "./Engine.ts"
import * as EngineError from "./EngineError.ts"
import * as Hints from "./Hints.ts"
import * as EventFeed from "./internal/event-feed.ts"
import type { TextDelta } from "./internal/event-feed.ts"
import { describeThrown, readOptions } from "./internal/start-options.ts"
import { optionsProblem } from "./internal/options.ts"

/** The defaults of `createEngine`, `start` and `Agent.start`. */
export const defaults = Object.freeze({
  synchronous: "FULL" as const,
  maxSteps: Limits.DEFAULT_MAX_STEPS,
  idleTimeoutMs: ModelDefaults.ModelDefaults.idleTimeoutMs,
  allowPriorUnknown: false,
  /** The main output limit (docs/engine.md §5.12). */
  maxOutputTokens: Limits.DEFAULT_OUTPUT_LIMIT,
})

/** Where the log lives and how the engine over it retries. */
export interface LogOptions {
  /** A SQLite file (created when absent); exactly one of `database` and `databaseUrl`. */
  readonly database?: string | undefined
  /** A PostgreSQL URL (`postgres://…`), for a log shared by several hosts. */
  readonly databaseUrl?: string | undefined
  /** SQLite only: `FULL` (default, durable across power loss) or `NORMAL` (across process crashes). */
  readonly synchronous?: "FULL" | "NORMAL" | undefined
  /** Retry backoff, attempts per step and observation coalescing (`Engine.defaults`). */
  readonly engineOptions?: Engine.EngineOptionsInput | undefined
}

/** The body field of the output limit on OpenAI-compatible endpoints. */
export type OutputLimitField = ProviderConfig.OutputLimitField

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
  /** OpenAI-compatible only: `max_completion_tokens` for `api.openai.com`, `max_tokens` elsewhere. */
  readonly outputLimitField?: OutputLimitField | undefined
  /** An overall deadline per request in ms, besides the idle timeout; keep-alive comments do not extend it. */
  readonly requestDeadlineMs?: number | undefined
}

/** A catalog, or a plain array of tools (`[]` is none). */
export type Tools = ToolCatalog.Tools

export interface RunOptions {
  readonly sessionId: string
  readonly provider: ProviderOptions
  /** The public model identity; defaults to `{id: kind + ":" + baseUrl (normalised), slug: kind}`. */
  readonly connection?: { readonly id: string; readonly slug: string } | undefined
  readonly message: string | Input.MessageInput
  /** Omitted or empty: the run advertises no tool at all. */
  readonly tools?: Tools | undefined
  /**
   * A directory (resolved against the current directory) or an opened `Workspace`. Omitted: the run's
   * `cwd` is the process's working directory, it has no workspace identity and no marker is written.
   */
  readonly workspace?: string | Pick<Workspace.Workspace, "root" | "identity"> | undefined
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
  /** The main output limit, default 8,000; sent as the provider's output limit field. */
  readonly maxOutputTokens?: number | undefined
  /** Merged into every request body (temperature, reasoning effort, Anthropic `thinking`, …); never `model`, `messages` or `stream`. */
  readonly providerOptions?: Identity.JsonObject | undefined
  /** 1–256, default 32. */
  readonly maxSteps?: number | undefined
  /** Per model request, 1,000–300,000 ms, default 120,000. */
  readonly idleTimeoutMs?: number | undefined
  /** Admit an explicit new message over unresolved history with the prior-unknown notice. */
  readonly allowPriorUnknown?: boolean | undefined
  /** Aborting it cancels the run (terminal `cancelled`); aborted before `start`, nothing is written. */
  readonly signal?: AbortSignal | undefined
}

/**
 * One piece of a rendered answer: visible text or the model's thinking. Re-exported by name (not an
 * alias), so a library's declarations that name it reach it through this module, never `internal/`.
 */
export type { TextDelta }

/** A running invocation with its answer as text. */
export interface AgentRun extends Engine.RunningInvocation {
  /** The answer's text deltas as they become durable; thinking excluded. */
  readonly text: Stream.Stream<string>
  /** Text and thinking deltas in order, each with its kind. */
  readonly textAndThinking: Stream.Stream<TextDelta>
}

/** The provider configuration of a run: the key wrapped in `Redacted` at once. */
export const providerConfig = (provider: ProviderOptions): ProviderConfig.ProviderConfig => ({
  kind: provider.kind,
  baseUrl: provider.baseUrl,
  model: provider.model,
  apiKey: Redacted.isRedacted(provider.apiKey) ? provider.apiKey : Redacted.make(provider.apiKey ?? ""),
  ...(provider.headers === undefined ? {} : { headers: provider.headers }),
  ...(provider.fetch === undefined ? {} : { fetch: provider.fetch }),
  ...(provider.outputLimitField === undefined ? {} : { outputLimitField: provider.outputLimitField }),
  ...(provider.requestDeadlineMs === undefined ? {} : { requestDeadlineMs: provider.requestDeadlineMs }),
})

/**
 * What a tool's output or failure message must never carry: the provider's secrets (its key, its
 * `Redacted` header values, a credential header given as plain text).
 */
export const secretsOf = (config: ProviderConfig.ProviderConfig): ReadonlyArray<Redacted.Redacted<string>> => ProviderConfig.secretsOf(config)

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> => typeof value === "object" && value !== null

/**
 * Whether `value` can be used as the run's `AbortSignal`: its `aborted` flag and listener methods.
 * Not `instanceof AbortSignal`, which refuses a signal made in another realm (a vm context, a test
 * environment's own globals).
 */
export const isSignal = (value: unknown): value is AbortSignal =>
  isRecord(value) &&
  typeof value["aborted"] === "boolean" &&
  typeof value["addEventListener"] === "function" &&
  typeof value["removeEventListener"] === "function"

/**
 * What is wrong with a workspace path, or `undefined`. An empty path would open the process's
 * directory (`path.resolve("")`) and write a marker there, as an unset environment variable passed
 * as the path would: it is refused instead.
 */
const workspacePathProblem = (directory: unknown): string | undefined =>
  typeof directory !== "string"
    ? "workspace must be a directory path or an opened Workspace"
    : directory === ""
      ? "workspace must not be an empty path"
      : undefined

/**
 * Opens the workspace at `directory` (docs/architecture.md §7): the canonical root and its identity,
 * its marker created when missing. A path that is not a non-empty string, or a directory that is
 * unusable, is `InvalidInput`.
 */
export const openWorkspace = (directory: string): Effect.Effect<Workspace.Workspace, EngineError.EngineError, Ids.Ids> => {
  const problem = workspacePathProblem(directory)
  return problem !== undefined
    ? Effect.fail(EngineError.invalidInput(problem))
    : Effect.mapError(Workspace.open(directory), (error) => EngineError.invalidInput(error.message))
}

/** Every key of `ProviderOptions`: a misspelt `apiKey` would send no key at all, unseen. */
const PROVIDER_KEYS: ReadonlyArray<string> = Object.keys({
  kind: true,
  baseUrl: true,
  model: true,
  apiKey: true,
  headers: true,
  fetch: true,
  outputLimitField: true,
  requestDeadlineMs: true,
} satisfies Record<keyof ProviderOptions, true>)

/** A key of `provider` that names no option, as the refusal's message. */
const providerKeyProblem = (provider: Readonly<Record<string, unknown>>): string | undefined => {
  const unknownKey = Object.keys(provider).find((key) => !PROVIDER_KEYS.includes(key))
  return unknownKey === undefined ? undefined : `provider has no key '${unknownKey}' (the keys are ${PROVIDER_KEYS.join(", ")})`
}

/** The keys of a start's `context`. */
const CONTEXT_KEYS: ReadonlyArray<string> = ["providerId", "contextWindow", "declaredWindow", "modelContextWindow"]

/** Every key of `RunOptions`: any other is refused, as a misspelt option would leave its default in force unseen. */
const RUN_KEYS: ReadonlyArray<string> = Object.keys({
  sessionId: true,
  provider: true,
  connection: true,
  message: true,
  tools: true,
  workspace: true,
  systemPrompt: true,
  context: true,
  maxOutputTokens: true,
  providerOptions: true,
  maxSteps: true,
  idleTimeoutMs: true,
  allowPriorUnknown: true,
  signal: true,
} satisfies Record<keyof RunOptions, true>)

/** `shapeProblem`, with a throw while a nested value is read as the refusal it is. */
const startOptionsProblem = (options: RunOptions): string | undefined => {
  try {
    return shapeProblem(options)
  } catch (error) {
    return `start options could not be read: ${describeThrown(error)}`
  }
}

/** The shape checks a caller without types may miss; the value checks follow in admission. */
const shapeProblem = (options: RunOptions): string | undefined => {
  if (!isRecord(options)) return "start options must be an object"
  const unknownKey = Object.keys(options).find((key) => !RUN_KEYS.includes(key))
  if (unknownKey !== undefined) return `start options have no key '${unknownKey}' (the keys are ${RUN_KEYS.join(", ")})`
  if (typeof options.sessionId !== "string") return "sessionId must be a string"
  const provider: unknown = options.provider
  if (!isRecord(provider) || typeof provider["baseUrl"] !== "string" || typeof provider["model"] !== "string") {
    return "provider must be {kind, baseUrl, model, apiKey?, headers?, fetch?, outputLimitField?}"
  }
  const keyProblem = providerKeyProblem(provider)
  if (keyProblem !== undefined) return keyProblem
  const apiKey = provider["apiKey"]
  if (apiKey !== undefined && typeof apiKey !== "string" && !Redacted.isRedacted(apiKey)) return "apiKey must be a string"
  const limitField = provider["outputLimitField"]
  if (limitField !== undefined && limitField !== "max_tokens" && limitField !== "max_completion_tokens") {
    return "outputLimitField must be max_tokens or max_completion_tokens"
  }
  const message: unknown = options.message
  if (typeof message !== "string" && !(isRecord(message) && typeof message["text"] === "string")) {
    return "message must be a string or {text, displayText?}"
  }
  // Checked here, so the refusal names the option rather than the opening's field it becomes.
  if (options.systemPrompt !== undefined && typeof options.systemPrompt !== "string") return "systemPrompt must be a string"
  const connection: unknown = options.connection
  if (connection !== undefined) {
    if (!isRecord(connection) || typeof connection["id"] !== "string" || typeof connection["slug"] !== "string") {
      return "connection must be {id, slug}, two strings"
    }
    const unknownKey = Object.keys(connection).find((key) => key !== "id" && key !== "slug")
    if (unknownKey !== undefined) return `connection has no key '${unknownKey}' (the keys are id, slug)`
  }
  const workspace: unknown = options.workspace
  if (workspace !== undefined && !(isRecord(workspace) && typeof workspace["root"] === "string")) {
    const problem = workspacePathProblem(workspace)
    if (problem !== undefined) return problem
  }
  const tools: unknown = options.tools
  if (tools !== undefined && !Array.isArray(tools) && !(isRecord(tools) && typeof tools["capture"] === "function")) {
    return "tools must be a ToolCatalog or an array of tools"
  }
  // A misspelt window key would leave the window unknown unseen: automatic compaction off.
  const context: unknown = options.context
  if (context !== undefined) {
    if (!isRecord(context)) return "context must be an object"
    const unknownKey = Object.keys(context).find((key) => !CONTEXT_KEYS.includes(key))
    if (unknownKey !== undefined) return `context has no key '${unknownKey}' (the keys are ${CONTEXT_KEYS.join(", ")})`
  }
  // Admission checks the same range as `mainOutputLimit` (docs/engine.md §5.2); here it is named
  // as the caller passed it.
  const limit: unknown = options.maxOutputTokens
  if (
    limit !== undefined &&
    (typeof limit !== "number" || !Number.isSafeInteger(limit) || limit < 1 || limit > Limits.MAX_MAIN_OUTPUT_LIMIT)
  ) {
    return `maxOutputTokens must be an integer in 1..${Limits.MAX_MAIN_OUTPUT_LIMIT}`
  }
  // `null` (a config file's empty value) is no number: left to `??`, it would be the default unseen.
  if (options.maxSteps === null) return `maxSteps must be an integer in 1..${Limits.MAX_STEPS}`
  if (options.idleTimeoutMs === null) {
    return `idleTimeoutMs must be an integer in [${ModelDefaults.ModelDefaults.minIdleTimeoutMs}, ${ModelDefaults.ModelDefaults.maxIdleTimeoutMs}]`
  }
  // A string such as "false" is truthy: it would admit a run over an unknown outcome.
  if (options.allowPriorUnknown !== undefined && typeof options.allowPriorUnknown !== "boolean") {
    return "allowPriorUnknown must be a boolean"
  }
  if (options.signal !== undefined) {
    // A getter of the caller's object runs here: one that throws is the same refusal, with its message.
    try {
      if (!isSignal(options.signal)) return "signal must be an AbortSignal"
    } catch (error) {
      return `signal must be an AbortSignal: reading it threw: ${error instanceof Error ? error.message : String(error)}`
    }
  }
  return undefined
}

/** The catalog of `tools`: a plain array becomes a catalog; a repeated name is `InvalidInput`. */
const catalogOf = (tools: Tools | undefined): Effect.Effect<ToolCatalog.ToolCatalog, EngineError.EngineError> => {
  if (tools === undefined) return Effect.succeed(ToolCatalog.empty)
  return Effect.try({
    try: () => ToolCatalog.from(tools),
    catch: (error) => EngineError.invalidInput(`tools: ${error instanceof Error ? error.message : String(error)}`),
  })
}

/** `configuration.cwd` and `workspaceIdentity`. */
interface Place {
  readonly cwd: string
  readonly workspaceIdentity?: string
}

/**
 * The place of a run as the admission checks see it before a directory is opened (opening creates
 * its marker, so it comes last): an opened `Workspace` is itself and no workspace is the process's
 * directory, as the run will have them; a path stands in resolved, not yet canonical.
 */
const placeBeforeOpening = (workspace: RunOptions["workspace"]): Place =>
  workspace === undefined
    ? { cwd: process.cwd() }
    : typeof workspace === "string"
      ? { cwd: nodePath.resolve(workspace) }
      : { cwd: workspace.root, workspaceIdentity: workspace.identity }

/** The detailed `Engine.StartInput` of plain options: fresh ids, a bound model, the place and the defaults. */
export const startInput = (given: RunOptions): Effect.Effect<Engine.StartInput, EngineError.EngineError, Ids.Ids> =>
  Effect.gen(function* () {
    const options = readOptions(given)
    if (typeof options === "string") return yield* Effect.fail(EngineError.invalidInput(options))
    const problem = startOptionsProblem(options)
    if (problem !== undefined) return yield* Effect.fail(EngineError.invalidInput(problem))
    const config = providerConfig(options.provider)
    const model = yield* Effect.mapError(
      LanguageModel.make(config, { idleTimeoutMs: options.idleTimeoutMs ?? defaults.idleTimeoutMs }),
      (error) => EngineError.invalidInput(error.reason.message),
    )
    const tools = yield* catalogOf(options.tools)
    const invocation: Identity.Invocation = {
      sessionId: options.sessionId,
      turnId: yield* Ids.next,
      runId: yield* Ids.next,
      invocationId: yield* Ids.next,
    }
    // Every admission check runs on the input before the workspace is opened: a start refused for
    // its input writes nothing, not even a marker (docs/engine.md §5.2). Only a problem of the
    // opened place itself (a canonical root over the path limit) can still be met after it.
    const checked = inputOf(options, config, model, tools, invocation, placeBeforeOpening(options.workspace))
    const invalid = Engine.validateInput(checked)
    if (invalid !== undefined) return yield* Effect.fail(EngineError.invalidInput(invalid))
    if (typeof options.workspace !== "string") return checked
    const opened = yield* openWorkspace(options.workspace)
    return inputOf(options, config, model, tools, invocation, { cwd: opened.root, workspaceIdentity: opened.identity })
  })

/** The `Engine.StartInput` of checked plain options in `place`. */
const inputOf = (
  options: RunOptions,
  config: ProviderConfig.ProviderConfig,
  model: Engine.StartInput["model"],
  tools: ToolCatalog.ToolCatalog,
  invocation: Identity.Invocation,
  place: Place,
): Engine.StartInput => {
  const connection = options.connection ?? {
    id: `${config.kind}:${ProviderConfig.normalizeBaseUrl(config.baseUrl)}`,
    slug: config.kind,
  }
  const context = options.context ?? {}
  return {
    invocation,
    model,
    configuration: {
      ...(options.systemPrompt === undefined ? {} : { systemPrompt: { text: options.systemPrompt } }),
      ...place,
      model: { connectionId: connection.id, connectionSlug: connection.slug, model: config.model },
      toolMode: "direct",
    },
    message: typeof options.message === "string" ? { text: options.message } : options.message,
    tools,
    maxSteps: options.maxSteps ?? defaults.maxSteps,
    allowPriorUnknown: options.allowPriorUnknown ?? defaults.allowPriorUnknown,
    mainOutputLimit: options.maxOutputTokens ?? defaults.maxOutputTokens,
    ...(options.providerOptions === undefined ? {} : { providerOptions: options.providerOptions }),
    context: {
      providerId: context.providerId ?? config.kind,
      ...(context.contextWindow === undefined ? {} : { contextWindow: context.contextWindow }),
      ...(context.declaredWindow === undefined ? {} : { declaredWindow: context.declaredWindow }),
      ...(context.modelContextWindow === undefined ? {} : { modelContextWindow: context.modelContextWindow }),
    },
    secrets: secretsOf(config),
    ...(options.signal === undefined ? {} : { signal: options.signal }),
  } satisfies Engine.StartInput
}

/**
 * The text and thinking deltas of committed events in order; parts are told apart by their step.
 * A summary request's stream (compaction, docs/engine.md §5.12) is not the answer: it is left out.
 */
export const textAndThinking = <E, R>(events: Stream.Stream<Event.StoredEvent, E, R>): Stream.Stream<TextDelta, E, R> =>
  Stream.mapAccum(events, EventFeed.textState, (state, stored): readonly [EventFeed.TextState, ReadonlyArray<TextDelta>] => {
    const delta = EventFeed.textDeltaOf(state, stored)
    return [state, delta === undefined ? [] : [delta]]
  })

/** The answer's text deltas of committed events, thinking excluded. */
export const text = <E, R>(events: Stream.Stream<Event.StoredEvent, E, R>): Stream.Stream<string, E, R> =>
  textAndThinking(events).pipe(
    Stream.filter((delta) => delta.kind === "text"),
    Stream.map((delta) => delta.text),
  )

/** An admission refusal with the way out added to its message. */
const withHint =
  (allowedPriorUnknown: unknown) =>
  (error: EngineError.EngineError): EngineError.EngineError =>
    error.reason._tag === "ReconciliationRequired"
      ? EngineError.reconciliation(
          Hints.append(error.reason.message, Hints.forReconciliation(error.reason.message, allowedPriorUnknown === true)),
        )
      : error

/** Whether `options` asked for `allowPriorUnknown`, read without trusting their shape (`startInput` checks it). */
const allowsPriorUnknown = (options: unknown): unknown => {
  try {
    return typeof options === "object" && options !== null ? Reflect.get(options, "allowPriorUnknown") : undefined
  } catch {
    return undefined
  }
}

/** Admits a run from plain options on the `Engine` in context; resolves once the opening is durable. */
export const start = (options: RunOptions): Effect.Effect<AgentRun, EngineError.EngineError, Engine.Engine | Ids.Ids> =>
  Effect.gen(function* () {
    const engine = yield* Engine.Engine
    const running = yield* Effect.mapError(Effect.flatMap(startInput(options), engine.start), withHint(allowsPriorUnknown(options)))
    return { ...running, text: text(running.events), textAndThinking: textAndThinking(running.events) }
  })

/** `start`, then the terminal: `{invocation, outcome}`; a caller interrupted meanwhile cancels the run (docs/engine.md §5.14). */
export const run = (options: RunOptions): Effect.Effect<Engine.RunResult, EngineError.EngineError, Engine.Engine | Ids.Ids> =>
  Effect.gen(function* () {
    const engine = yield* Engine.Engine
    return yield* Effect.mapError(Effect.flatMap(startInput(options), engine.run), withHint(allowsPriorUnknown(options)))
  })

/** What `compact` gives `startInput` as a message: never written or sent. */
const COMPACTION_STAND_IN = "(compaction)"

/** The options of a standalone compaction: a run's, without the message, tools and step budget. */
export type CompactOptions = Omit<RunOptions, "message" | "tools" | "maxSteps" | "allowPriorUnknown">

/**
 * Compacts the session's history into a checkpoint (docs/engine.md §5.12 "Standalone") on the
 * `Engine` in context: `{invocation, outcome}` with `context_compact_finished` when it ran.
 */
export const compact = (options: CompactOptions): Effect.Effect<Engine.RunResult, EngineError.EngineError, Engine.Engine | Ids.Ids> =>
  Effect.gen(function* () {
    const engine = yield* Engine.Engine
    const read = readOptions(options)
    if (typeof read === "string") return yield* Effect.fail(EngineError.invalidInput(read.replace("start options", "compact options")))
    // A compaction has no step budget of its own and no prior-unknown choice: whatever a caller
    // without types passes for them is not checked, as it is not used. Nor has it a message: the
    // one `startInput` checks is a stand-in, dropped, and visible (a blank one is refused on the
    // Anthropic route, for a message that would be sent).
    const { message: _message, tools: _tools, maxSteps: _maxSteps, allowPriorUnknown: _allow, ...input } = yield* startInput({
      ...read,
      maxSteps: undefined,
      allowPriorUnknown: undefined,
      message: COMPACTION_STAND_IN,
    })
    return yield* Effect.mapError(engine.compact(input), withHint(false))
  })

/**
 * The model of a provider's plain options, as `start` builds it; a key that names no option is
 * refused here too (a resume resolver's provider: a misspelt `apikey` would send no key).
 */
export const modelOf = (provider: ProviderOptions, idleTimeoutMs?: number) => {
  const problem = isRecord(provider) ? providerKeyProblem(provider) : undefined
  if (problem !== undefined) return Effect.fail(EngineError.invalidInput(problem))
  return Effect.mapError(
    LanguageModel.make(providerConfig(provider), { idleTimeoutMs: idleTimeoutMs ?? defaults.idleTimeoutMs }),
    (error) => EngineError.invalidInput(error.reason.message),
  )
}

/** A log failure as an `EngineError` `Store` with its reason and cause kept. */
export const storeError = (error: EventLogError.EventLogError): EngineError.EngineError => EngineError.fromStore(error)

/** Every key of `LogOptions`: any other is refused, as a misspelt option would leave its default in force unseen. */
const LOG_KEYS: ReadonlyArray<string> = Object.keys({
  database: true,
  databaseUrl: true,
  synchronous: true,
  engineOptions: true,
} satisfies Record<keyof LogOptions, true>)

/**
 * The caller's log options read once into a plain copy, or why they cannot be: a getter or proxy
 * trap that throws is a refusal of the input (`InvalidInput`), never a raw throw.
 */
const readLogOptions = (options: unknown): LogOptions | string => {
  if (!isRecord(options)) return "pass exactly one of database (a SQLite file) and databaseUrl (PostgreSQL)"
  try {
    const read = { ...options } as { engineOptions?: unknown }
    // The engine's options are checked, then used: read once too.
    if (isRecord(read.engineOptions)) read.engineOptions = { ...read.engineOptions }
    return read as LogOptions
  } catch (error) {
    return `the engine's options could not be read: ${describeThrown(error)}`
  }
}

/** What is wrong with `createEngine`'s options, found before anything is opened or created. */
const logOptionsProblem = (options: LogOptions): string | undefined => {
  const unknownKey = Object.keys(options).find((key) => !LOG_KEYS.includes(key))
  if (unknownKey !== undefined) return `the engine's options have no key '${unknownKey}' (the keys are ${LOG_KEYS.join(", ")})`
  if ((options.database !== undefined) === (options.databaseUrl !== undefined)) {
    return "pass exactly one of database (a SQLite file) and databaseUrl (PostgreSQL)"
  }
  // An empty path would open the current folder, an empty URL whatever database the PG* variables name.
  for (const key of ["database", "databaseUrl"] as const) {
    const value: unknown = options[key]
    if (value !== undefined && (typeof value !== "string" || value.trim() === "")) return `${key} must be a non-empty string`
  }
  if (options.synchronous !== undefined && !EventLog.isSynchronous(options.synchronous)) {
    return `synchronous must be one of ${EventLog.SYNCHRONOUS_LEVELS.join(", ")}`
  }
  return optionsProblem(options.engineOptions)
}

const logLayer = (options: LogOptions): Layer.Layer<EventLog.EventLog, EngineError.EngineError> =>
  (options.databaseUrl !== undefined
    ? EventLog.layerPostgres({ url: options.databaseUrl })
    : EventLog.layerSqlite({ path: options.database ?? "", synchronous: options.synchronous ?? defaults.synchronous })
  ).pipe(Layer.catchTag("EventLogError", (error) => Layer.effect(EventLog.EventLog, Effect.fail(storeError(error)))))

/**
 * The log of `options`, `Ids` and an engine over them. On SQLite the engine takes the writer lease and
 * recovers what a crashed host left open before it admits anything; on PostgreSQL call `recover`.
 */
export const layer = (given: LogOptions): Layer.Layer<Engine.Engine | EventLog.EventLog | Ids.Ids, EngineError.EngineError> => {
  const refused = (problem: string) => Layer.effectContext(Effect.fail(EngineError.invalidInput(problem)))
  const options = readLogOptions(given)
  if (typeof options === "string") return refused(options)
  const problem = logOptionsProblem(options)
  if (problem !== undefined) return refused(problem)
  return Engine.layer(options.engineOptions ?? {}).pipe(Layer.provideMerge(Layer.merge(logLayer(options), Ids.layer)))
}
