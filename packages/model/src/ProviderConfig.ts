/**
 * Provider configuration and its route identity (docs/architecture.md §6, docs/model.md §4.1). `routeIdentity` is
 * the `maka.route.v1` digest of `{kind, baseUrl, model, headers?}`: trailing slashes are removed from
 * `baseUrl`, header names are lowercased, a Redacted header value contributes only its name (as
 * `null`), absent headers are omitted; `outputLimitField` contributes only when set explicitly.
 * `apiKey`, `fetch` and `requestDeadlineMs` never contribute.
 */
import { Digest } from "@maka/facts"
import { Redacted, Result } from "effect"

export type ProviderKind = "openai-compatible" | "anthropic"

/** A `fetch`-compatible function: proxies, tests and the CLI's offline model. */
export type FetchFunction = (input: string, init: RequestInit) => Promise<Response>

export type HeaderValue = string | Redacted.Redacted<string>

/** The body field of the output limit of an OpenAI-compatible request. */
export type OutputLimitField = "max_tokens" | "max_completion_tokens"

/** The host whose models (the reasoning ones) refuse `max_tokens`. */
export const OPENAI_HOST = "api.openai.com"

export interface ProviderConfig {
  readonly kind: ProviderKind
  /** For example `https://api.openai.com/v1` or `https://api.anthropic.com`. */
  readonly baseUrl: string
  readonly model: string
  readonly apiKey: Redacted.Redacted<string>
  readonly headers?: Readonly<Record<string, HeaderValue>> | undefined
  readonly fetch?: FetchFunction | undefined
  /**
   * OpenAI-compatible only: the body field of the output limit. Absent, it is
   * `max_completion_tokens` for the host `api.openai.com` and `max_tokens` elsewhere.
   */
  readonly outputLimitField?: OutputLimitField | undefined
  /**
   * An overall deadline per request in milliseconds (1 to 2^31−1), from send to the end of the
   * response, besides the idle timeout: keep-alive comments do not extend it. Absent, a request
   * streams for as long as bytes keep arriving. Never part of the route identity.
   */
  readonly requestDeadlineMs?: number | undefined
}

/** The largest `requestDeadlineMs`. */
export const MAX_REQUEST_DEADLINE_MS = 2 ** 31 - 1

/** The output limit field a configuration sends: the explicit one, else the host's default. */
export const outputLimitFieldOf = (config: Pick<ProviderConfig, "baseUrl" | "outputLimitField">): OutputLimitField => {
  if (config.outputLimitField !== undefined) return config.outputLimitField
  const host = URL.canParse(config.baseUrl) ? new URL(config.baseUrl).hostname.toLowerCase() : ""
  return host === OPENAI_HOST ? "max_completion_tokens" : "max_tokens"
}

/** `baseUrl` without its trailing slashes. */
export const normalizeBaseUrl = (baseUrl: string): string => baseUrl.replace(/\/+$/, "")

/** The secret-free shape the route digest hashes. */
export const routeShape = (
  config: Pick<ProviderConfig, "kind" | "baseUrl" | "model" | "headers" | "outputLimitField">,
): {
  readonly kind: ProviderKind
  readonly baseUrl: string
  readonly model: string
  readonly headers?: Readonly<Record<string, string | null>>
  readonly outputLimitField?: OutputLimitField
} => {
  const base = {
    kind: config.kind,
    baseUrl: normalizeBaseUrl(config.baseUrl),
    model: config.model,
    ...(config.outputLimitField === undefined ? {} : { outputLimitField: config.outputLimitField }),
  }
  if (config.headers === undefined) return base
  const headers: Record<string, string | null> = {}
  for (const [name, value] of Object.entries(config.headers)) {
    headers[name.toLowerCase()] = Redacted.isRedacted(value) ? null : value
  }
  return { ...base, headers }
}

/** The route identity of a configuration: no key, no `fetch`, no Redacted header value. */
export const routeIdentity = (
  config: Pick<ProviderConfig, "kind" | "baseUrl" | "model" | "headers" | "outputLimitField">,
): string =>
  Digest.route(routeShape(config))

/**
 * The Fetch standard's "bad ports": Node's `fetch` refuses them before connecting (`fetch failed`,
 * cause `bad port`), which would fail every attempt as a network failure, retried for minutes. A
 * configuration with its own `fetch` may reach them.
 */
/** Header names whose value is a credential, whether it is given `Redacted` or as plain text. */
const CREDENTIAL_HEADERS: ReadonlySet<string> = new Set(["authorization", "proxy-authorization", "x-api-key", "api-key"])

/**
 * What must never reach a message, the log or the model of `config`: the key (when not empty),
 * every `Redacted` header value, and the value of a credential header (`authorization`, `x-api-key`,
 * …) given as plain text, which replaces the header built from the key.
 */
export const secretsOf = (config: Pick<ProviderConfig, "apiKey" | "headers">): ReadonlyArray<Redacted.Redacted<string>> =>
  [
    config.apiKey,
    ...Object.entries(config.headers ?? {}).flatMap(([name, value]) =>
      Redacted.isRedacted(value) ? [value] : CREDENTIAL_HEADERS.has(name.toLowerCase()) ? [Redacted.make(value)] : [],
    ),
  ].filter((secret) => Redacted.value(secret).trim() !== "")

export const FETCH_BAD_PORTS: ReadonlySet<number> = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110, 111,
  113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548,
  554, 556, 563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665,
  6666, 6667, 6668, 6669, 6679, 6697, 10080,
])

/** Checks a configuration before any request: an absolute http(s) base URL, a model, unique header names. */
export const validate = (config: ProviderConfig): Result.Result<ProviderConfig, string> => {
  if (config.kind !== "openai-compatible" && config.kind !== "anthropic") {
    return Result.fail(`unknown provider kind ${String(config.kind)}`)
  }
  if (!/^https?:\/\/[^/]/i.test(config.baseUrl) || !URL.canParse(config.baseUrl)) {
    return Result.fail("baseUrl must be an absolute http(s) URL")
  }
  // `fetch` trims what the route identity keeps: a run and its resume with the clean URL would differ.
  if (/\s$/.test(config.baseUrl)) return Result.fail("baseUrl must not end with a space, tab or line break")
  const url = new URL(config.baseUrl)
  if (url.username !== "" || url.password !== "") {
    return Result.fail("baseUrl must not carry credentials; pass the key as apiKey or a Redacted header")
  }
  // A query string may carry a key (`?key=`, `?api_key=`, `?token=`) and would enter the route
  // identity; it is refused whatever it holds, like a fragment (neither fits `{baseUrl}/path`).
  if (config.baseUrl.includes("?") || config.baseUrl.includes("#")) {
    return Result.fail(
      "baseUrl must not carry a query string or fragment; pass a key as apiKey or a Redacted header, other parameters as headers or providerOptions, or a query parameter (Azure's api-version) through a host fetch",
    )
  }
  // Any other value would fail every attempt as a transport failure, retried for minutes.
  if (config.fetch !== undefined && typeof config.fetch !== "function") return Result.fail("fetch must be a function")
  const port = Number(url.port)
  if (config.fetch === undefined && FETCH_BAD_PORTS.has(port)) {
    return Result.fail(`baseUrl port ${port} is one fetch never connects to (a bad port of the Fetch standard)`)
  }
  if (config.model.length === 0) return Result.fail("model must not be empty")
  const deadline = config.requestDeadlineMs
  if (deadline !== undefined && (!Number.isSafeInteger(deadline) || deadline < 1 || deadline > MAX_REQUEST_DEADLINE_MS)) {
    return Result.fail(`requestDeadlineMs must be an integer in [1, ${MAX_REQUEST_DEADLINE_MS}]`)
  }
  if (config.outputLimitField !== undefined) {
    if (config.kind !== "openai-compatible") return Result.fail("outputLimitField applies to openai-compatible providers only")
    if (config.outputLimitField !== "max_tokens" && config.outputLimitField !== "max_completion_tokens") {
      return Result.fail("outputLimitField must be max_tokens or max_completion_tokens")
    }
  }
  if (!Redacted.isRedacted(config.apiKey)) return Result.fail("apiKey must be Redacted")
  const key: unknown = Redacted.value(config.apiKey)
  if (typeof key !== "string") return Result.fail("apiKey must be a string")
  // A value `fetch` refuses would fail every attempt as a transport failure, retried for minutes.
  if (!isHeaderValue(key)) return Result.fail(`apiKey ${NOT_A_HEADER_VALUE}`)
  if (config.headers !== undefined) {
    if (typeof config.headers !== "object" || config.headers === null || Array.isArray(config.headers)) {
      return Result.fail("headers must be an object of header names to values")
    }
    // Its own fields are read: a `Headers` or a `Map` has none, and would send no header at all.
    const prototype: unknown = Object.getPrototypeOf(config.headers)
    if (prototype !== Object.prototype && prototype !== null) {
      return Result.fail("headers must be a plain object of header names to values (a Headers or a Map is not read: use Object.fromEntries)")
    }
    const names = Object.keys(config.headers).map((name) => name.toLowerCase())
    if (new Set(names).size !== names.length) return Result.fail("header names must be unique ignoring case")
    if (names.some((name) => !/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(name))) return Result.fail("invalid header name")
    for (const [name, value] of Object.entries(config.headers)) {
      // A caller without types may pass a number or an object: only text can be sent as a header.
      const text: unknown = Redacted.isRedacted(value) ? Redacted.value(value) : value
      if (typeof text !== "string") return Result.fail(`header ${name} must be a string or a Redacted string`)
      if (!isHeaderValue(text)) return Result.fail(`header ${name} ${NOT_A_HEADER_VALUE}`)
    }
  }
  return Result.succeed(config)
}

/** What is wrong with a value `isHeaderValue` refuses; the value itself is never shown. */
export const NOT_A_HEADER_VALUE =
  "holds a character an HTTP header cannot carry (a line break, NUL or another control character, or one beyond U+00FF)"

/**
 * Whether `fetch` and Node's client can send `value` as a header value: once the HTTP whitespace at
 * its ends is trimmed (as `fetch` does), only tabs, visible ASCII, spaces and U+0080–U+00FF (Node
 * refuses every other control character, DEL included, before sending).
 */
export const isHeaderValue = (value: string): boolean =>
  !/[^\t\u0020-\u007e\u0080-\u00ff]/.test(value.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, ""))
