/**
 * `LanguageModel`: the service the engine streams model requests through (docs/architecture.md §6). `make` binds a
 * `ProviderConfig` to an adapter (OpenAI-compatible chat completions or Anthropic Messages), a
 * concurrency limiter and an idle timeout; `stream(request)` yields the runtime-owned `ModelEvent`s
 * and fails with `ModelError`. Cancellation is fiber interruption, an `AbortSignal` only at the HTTP call.
 */
import type { Model, Prompt } from "@maka/facts"
import { Canonical } from "@maka/facts"
import { Context, Effect, Layer, Option, Redacted, Result, Scope, Stream } from "effect"
import { anthropicNormalizer } from "./internal/anthropic-normalizer.ts"
import { anthropicBody } from "./internal/anthropic-request.ts"
import { checkRequest } from "./internal/check-request.ts"
import type { Normalizer } from "./internal/normalizer.ts"
import { openAiNormalizer } from "./internal/openai-normalizer.ts"
import { openAiBody, openAiBodyParts } from "./internal/openai-request.ts"
import { formsOf } from "./internal/secrets.ts"
import * as HttpClient from "./internal/http-client.ts"
import * as Transport from "./internal/transport.ts"
import { ModelDefaults } from "./ModelDefaults.ts"
import * as ModelError from "./ModelError.ts"
import * as ModelLimiter from "./ModelLimiter.ts"
import { projectPrompt } from "./Projection.ts"
import * as ProviderConfig from "./ProviderConfig.ts"

export interface StreamOptions {
  /** Run on a background reservation's permit instead of a foreground one. */
  readonly reservation?: ModelLimiter.BackgroundReservation | undefined
}

export interface LanguageModelShape {
  readonly kind: ProviderConfig.ProviderKind
  readonly model: string
  /** The `maka.route.v1` digest of the configuration without secrets. */
  readonly routeIdentity: string
  readonly limiter: ModelLimiter.ModelLimiter
  /** Streams one request; the permit is held until the stream has drained. */
  readonly stream: (
    request: Prompt.ModelRequest,
    options?: StreamOptions,
  ) => Stream.Stream<Model.ModelEvent, ModelError.ModelError>
  /** A background reservation on this model's limiter (docs/model.md §4.2). */
  readonly tryReserveBackground: Effect.Effect<Option.Option<ModelLimiter.BackgroundReservation>, never, Scope.Scope>
  /**
   * The credentials this model sends (its API key, when not blank, and its Redacted header values),
   * for a host to keep out of what it stores: the engine scrubs them from every message of a run on
   * this model. A model made otherwise (a test double) may have none.
   */
  readonly secrets?: ReadonlyArray<Redacted.Redacted<string>> | undefined
}

export class LanguageModel extends Context.Service<LanguageModel, LanguageModelShape>()("@maka/model/LanguageModel") {}

export interface MakeOptions {
  /** Idle timeout per request in milliseconds, 1,000–300,000 (default 120,000). */
  readonly idleTimeoutMs?: number | undefined
  /** A limiter shared with other models; by default each model gets its own of `concurrency` permits. */
  readonly limiter?: ModelLimiter.ModelLimiter | undefined
  /** Size of the model's own limiter (default 4). */
  readonly concurrency?: number | undefined
}

const invalid = (message: string): ModelError.ModelError => ModelError.adapter(`invalid provider configuration: ${message}`)

/** Checks the options against their ranges. */
const checkOptions = (options: MakeOptions): string | undefined => {
  const idle = options.idleTimeoutMs
  if (idle !== undefined && (!Number.isSafeInteger(idle) || idle < ModelDefaults.minIdleTimeoutMs || idle > ModelDefaults.maxIdleTimeoutMs)) {
    return `idleTimeoutMs must be an integer in [${ModelDefaults.minIdleTimeoutMs}, ${ModelDefaults.maxIdleTimeoutMs}]`
  }
  const concurrency = options.concurrency
  if (concurrency !== undefined && (!Number.isSafeInteger(concurrency) || concurrency < 1)) return "concurrency must be ≥ 1"
  return undefined
}

/** What every request of a route shares: its URL, its headers and how its body is written. */
interface Route {
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: (request: Prompt.ModelRequest, prompt: Prompt.Prompt) => HttpClient.RequestBody
}

/** The route of `config`, worked out once per model rather than once per request. */
const routeOf = (config: ProviderConfig.ProviderConfig): Route => {
  const baseUrl = ProviderConfig.normalizeBaseUrl(config.baseUrl)
  const key = Redacted.value(config.apiKey)
  const extra: Record<string, string> = {}
  for (const [name, value] of Object.entries(config.headers ?? {})) {
    extra[name.toLowerCase()] = Redacted.isRedacted(value) ? Redacted.value(value) : value
  }
  const common = { "content-type": "application/json", accept: "text/event-stream" }
  if (config.kind === "anthropic") {
    return {
      url: `${baseUrl}/v1/messages`,
      headers: {
        ...common,
        ...(key === "" ? {} : { "x-api-key": key }),
        "anthropic-version": ModelDefaults.anthropicVersion,
        ...extra,
      },
      body: (request, prompt) => anthropicBody(config.model, request, prompt),
    }
  }
  const limitField = ProviderConfig.outputLimitFieldOf(config)
  return {
    url: `${baseUrl}/chat/completions`,
    headers: { ...common, ...(key === "" ? {} : { authorization: `Bearer ${key}` }), ...extra },
    // The adapter's own client sends bytes in parts (a step encodes only its new messages); a host's
    // `fetch` is given the body as text, as it always was.
    body:
      config.fetch === undefined
        ? (request, prompt) => openAiBodyParts(config.model, request, prompt, limitField)
        : (request, prompt) => openAiBody(config.model, request, prompt, limitField),
  }
}

/** Encodes one request for the route: URL, headers (a copy of its own) and the canonical JSON body. */
const encode = (
  config: ProviderConfig.ProviderConfig,
  route: Route,
  routeIdentity: string,
  request: Prompt.ModelRequest,
): Result.Result<{ readonly url: string; readonly headers: Record<string, string>; readonly body: HttpClient.RequestBody }, ModelError.ModelError> => {
  const body = route.body(request, projectPrompt(config.kind, routeIdentity, request.prompt))
  const tooLarge =
    typeof body === "string"
      ? body.length > ModelDefaults.maxRequestBytes / 3 && Canonical.utf8Length(body) > ModelDefaults.maxRequestBytes
      : body.byteLength > ModelDefaults.maxRequestBytes
  if (tooLarge) {
    return Result.fail(ModelError.adapter("model request exceeds 32 MiB"))
  }
  return Result.succeed({ url: route.url, headers: { ...route.headers }, body })
}

/** A `LanguageModel` for `config`; fails with an `Adapter` error when the configuration is invalid. */
export const make = (
  config: ProviderConfig.ProviderConfig,
  options: MakeOptions = {},
): Effect.Effect<LanguageModelShape, ModelError.ModelError> =>
  Effect.suspend(() => {
    // A configuration or options that are no object, or whose getter throws while read, are an
    // invalid configuration like any other, never a defect.
    if (typeof config !== "object" || config === null) return Effect.fail(invalid("the provider configuration must be an object"))
    if (typeof options !== "object" || options === null) return Effect.fail(invalid("the model's options must be an object"))
    try {
      const checked = ProviderConfig.validate(config)
      if (Result.isFailure(checked)) return Effect.fail(invalid(checked.failure))
      const optionsProblem = checkOptions(options)
      if (optionsProblem !== undefined) return Effect.fail(invalid(optionsProblem))
      return Effect.succeed(makeChecked(config, options))
    } catch (error) {
      return Effect.fail(invalid(`the provider configuration could not be read: ${error instanceof Error ? error.message : String(error)}`))
    }
  })

const makeChecked = (config: ProviderConfig.ProviderConfig, options: MakeOptions): LanguageModelShape => {
  const routeIdentity = ProviderConfig.routeIdentity(config)
  const route = routeOf(config)
  const limiter = options.limiter ?? ModelLimiter.makeUnsafe(options.concurrency ?? ModelDefaults.concurrency)
  const idleTimeoutMs = options.idleTimeoutMs ?? ModelDefaults.idleTimeoutMs
  // The host's `fetch` when it brings one (a proxy, a test double); the adapter's own client otherwise.
  const hostFetch = config.fetch
  // A host's `fetch` is asked not to follow redirects (Node's would re-send the key and the whole
  // prompt to wherever a 3xx points); the redirect itself is then classified (rule 8a).
  const send: Transport.TransportRequest["send"] =
    hostFetch === undefined
      ? HttpClient.send
      : (url, request) =>
          HttpClient.fetchAnswer(hostFetch(url, { ...request, body: HttpClient.textOf(request.body), redirect: "manual" })).then(HttpClient.fromFetchResponse)
  // An empty key (a local server needs none) sends no credential header and redacts nothing. Every
  // form the key and the Redacted header values can come back in is scrubbed from error messages.
  const credentials = ProviderConfig.secretsOf(config)
  const secrets = formsOf(credentials.map((secret) => Redacted.value(secret)))
  const normalizer = (): Normalizer =>
    config.kind === "anthropic" ? anthropicNormalizer(routeIdentity) : openAiNormalizer()

  const stream = (
    request: Prompt.ModelRequest,
    streamOptions: StreamOptions = {},
  ): Stream.Stream<Model.ModelEvent, ModelError.ModelError> =>
    Stream.unwrap(
      Effect.gen(function* () {
        const decoded = checkRequest(request)
        if (Result.isFailure(decoded)) return yield* Effect.fail(ModelError.adapter(`invalid model request: ${decoded.failure}`))
        const encoded = encode(config, route, routeIdentity, decoded.success)
        if (Result.isFailure(encoded)) return yield* Effect.fail(encoded.failure)
        yield* ModelLimiter.acquireFor(limiter, streamOptions.reservation)
        return yield* Transport.open({
          ...encoded.success,
          send,
          idleTimeoutMs,
          deadlineMs: config.requestDeadlineMs,
          cleanupGraceMs: ModelDefaults.cleanupGraceMs,
          afterFinishGraceMs: ModelDefaults.afterFinishGraceMs,
          maxDeltaChars: ModelDefaults.maxDeltaChars,
          maxOutputBytes: ModelDefaults.maxModelOutputBytes,
          maxEventBytes: ModelDefaults.maxStreamEventBytes,
          maxErrorBodyBytes: ModelDefaults.maxErrorBodyBytes,
          secrets,
          normalizer: normalizer(),
        })
      }),
    )

  return {
    kind: config.kind,
    model: config.model,
    routeIdentity,
    limiter,
    stream,
    tryReserveBackground: limiter.tryReserveBackground,
    secrets: credentials,
  }
}

/** A layer providing `LanguageModel` for `config`. */
export const layer = (
  config: ProviderConfig.ProviderConfig,
  options: MakeOptions = {},
): Layer.Layer<LanguageModel, ModelError.ModelError> => Layer.effect(LanguageModel, make(config, options))
