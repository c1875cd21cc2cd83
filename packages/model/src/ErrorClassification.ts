/**
 * Provider failure classification (docs/model.md §4.5): HTTP status, headers, the parsed error body or an
 * in-stream error payload become one `ModelError`, first matching rule wins. Holds the overflow codes
 * and the free-text overflow patterns of common providers with their vetoes, and `Retry-After` parsing.
 * Pure functions: the caller passes the current time and what the stream already showed.
 */
import { scrub } from "./internal/secrets.ts"
import { Limits } from "@maka/facts"
import * as ModelError from "./ModelError.ts"

/** Codes or types that mean "the request does not fit the context window", whatever the status. */
export const OVERFLOW_CODES: ReadonlySet<string> = new Set([
  "context_length_exceeded",
  "model_context_window_exceeded",
  "request_too_large",
  // llama.cpp's llama-server (an addition to docs/model.md §4.5's list).
  "exceed_context_size_error",
])

/** Codes compare case-insensitively with `-` and `_` alike (`RESOURCE_EXHAUSTED` is `resource-exhausted`). */
export const normalizeCode = (code: string): string => code.toLowerCase().replace(/-/g, "_")

const normalizedSet = (codes: ReadonlySet<string>): ReadonlySet<string> => new Set([...codes].map(normalizeCode))

/** Codes that mean "the provider is unavailable right now". */
export const UNAVAILABLE_CODES: ReadonlySet<string> = new Set(["server_error", "overloaded_error", "resource-exhausted"])

/** Body types of a 429 that will not clear by waiting. */
export const QUOTA_CODES: ReadonlySet<string> = new Set(["insufficient_quota", "FreeUsageLimitError"])

/**
 * Free-text overflow phrases (lowercased), with the providers known to use them:
 * - `prompt is too long` — Anthropic ("prompt is too long: 210000 tokens > 200000 maximum"), OpenRouter;
 * - `exceeds the context window` — OpenAI Responses / Azure ("Your input exceeds the context window of this model");
 * - `maximum context length is` — OpenAI chat, DeepSeek, vLLM, OpenRouter ("This model's maximum context length is 8192 tokens");
 * - `context length exceeded` — Ollama and llama.cpp servers, LiteLLM ("context length exceeded");
 * - `exceeds the available context size` — llama.cpp's llama-server ("request (4476 tokens) exceeds
 *   the available context size (4096 tokens)"), an addition to docs/model.md §4.5's list;
 * - a subject word (`prompt`, `input`, `context`, `message`) followed later by `too many tokens` or
 *   `token limit exceeded` — Gemini through its OpenAI-compatible endpoint ("The input token count …
 *   exceeds … token limit exceeded"), Mistral ("Prompt contains too many tokens").
 */
export const OVERFLOW_PHRASES: ReadonlyArray<string> = [
  "prompt is too long",
  "exceeds the context window",
  "maximum context length is",
  "context length exceeded",
  "exceeds the available context size",
]

const SUBJECT_OVERFLOW = /\b(?:prompt|input|context|message)s?\b[\s\S]*?(?:too many tokens|token limit exceeded)/
/** Vetoes: rate limits and quotas, and an output limit ("max_tokens … too many tokens"). */
const VETO_PHRASES: ReadonlyArray<string> = ["rate limit", "too many requests", "quota"]
const OUTPUT_VETO = /(?:\boutput\b|\bcompletion\b|\bmax_tokens\b)[\s\S]*?(?:too many tokens|token limit exceeded)/

const ANTHROPIC_PROMPT_TOO_LONG = /^prompt is too long: (\d+) tokens > (\d+) maximum$/
/** Anthropic's prompt that fits the window but not with the request's `max_tokens` beside it. */
const ANTHROPIC_INPUT_AND_OUTPUT = /^input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+)\b/

/** In-stream error types that stand in for a status (Anthropic's `error` event, OpenAI-style codes). */
const STREAM_RATE_LIMIT = normalizedSet(new Set(["rate_limit_error", "rate_limit_exceeded"]))
const STREAM_AUTH = normalizedSet(new Set(["authentication_error", "permission_error", "invalid_api_key"]))
const STREAM_REJECTED = normalizedSet(new Set(["invalid_request_error", "not_found_error", "billing_error"]))

const OVERFLOW = normalizedSet(OVERFLOW_CODES)
const UNAVAILABLE = normalizedSet(UNAVAILABLE_CODES)
const QUOTA = normalizedSet(QUOTA_CODES)

/** Whether lowercased `text` reads as a context overflow and no veto applies (rule 5). */
export const isOverflowText = (text: string): boolean => {
  const lower = text.toLowerCase()
  if (VETO_PHRASES.some((phrase) => lower.includes(phrase)) || OUTPUT_VETO.test(lower)) return false
  return OVERFLOW_PHRASES.some((phrase) => lower.includes(phrase)) || SUBJECT_OVERFLOW.test(lower)
}

/** Something with a `get(name)` such as `Headers`. */
export interface HeaderReader {
  readonly get: (name: string) => string | null
}

const positiveDelay = (ms: number): number | undefined => {
  if (!Number.isFinite(ms) || ms <= 0) return undefined
  const rounded = Math.ceil(ms)
  return rounded <= Limits.MAX_RETRY_AFTER_MS ? rounded : undefined
}

const NUMBER = /^\s*\d+(?:\.\d+)?\s*$/

/**
 * The provider's requested delay in milliseconds: `retry-after-ms` first, then `retry-after` as
 * (possibly fractional) seconds or an HTTP date minus `nowMs`. The delay must be in (0, 2^31−1] ms and
 * is rounded up; an unusable value is ignored (undefined).
 */
export const parseRetryAfter = (headers: HeaderReader, nowMs: number): number | undefined => {
  const milliseconds = headers.get("retry-after-ms")
  if (milliseconds !== null && NUMBER.test(milliseconds)) {
    const delay = positiveDelay(Number(milliseconds))
    if (delay !== undefined) return delay
  }
  const value = headers.get("retry-after")
  if (value === null) return undefined
  if (NUMBER.test(value)) return positiveDelay(Number(value) * 1000)
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : positiveDelay(date - nowMs)
}

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** The error objects to inspect: the body itself, its `error`, and the first element of an array body. */
const errorObjects = (parsed: unknown): ReadonlyArray<Readonly<Record<string, unknown>>> => {
  const root = Array.isArray(parsed) ? parsed[0] : parsed
  if (!isRecord(root)) return []
  const nested = root["error"]
  return isRecord(nested) ? [root, nested] : [root]
}

const stringField = (object: Readonly<Record<string, unknown>>, key: string): string | undefined => {
  const value = object[key]
  return typeof value === "string" ? value : typeof value === "number" ? String(value) : undefined
}

/** Every `code` and `type` found on the error, its nested `error`, or the body. */
const codesOf = (objects: ReadonlyArray<Readonly<Record<string, unknown>>>): ReadonlyArray<string> =>
  objects.flatMap((object) =>
    [stringField(object, "code"), stringField(object, "type"), stringField(object, "status")].filter(
      (code): code is string => code !== undefined,
    ),
  )

/**
 * A validation error's list (FastAPI's `detail`, Mistral's `message.detail`): each item's `msg` and
 * where it points (`loc`), joined; undefined for anything else.
 */
const detailsOf = (value: unknown): string | undefined => {
  const list = isRecord(value) ? value["detail"] : value
  if (!Array.isArray(list)) return undefined
  const said = list.flatMap((item) => {
    if (!isRecord(item) || typeof item["msg"] !== "string") return []
    const at = Array.isArray(item["loc"]) ? item["loc"].filter((part) => typeof part === "string" || typeof part === "number").join(".") : ""
    return [at === "" ? item["msg"] : `${item["msg"]} at ${at}`]
  })
  return said.length === 0 ? undefined : said.join("; ")
}

/**
 * The provider's own message: the nested `error.message`, else the body's `message`, `detail`, or
 * `error` as a string (a TGI or LiteLLM server's), or a validation error's list.
 */
const messageOf = (objects: ReadonlyArray<Readonly<Record<string, unknown>>>): string | undefined => {
  for (const object of [...objects].reverse()) {
    const message = object["message"]
    if (typeof message === "string") return message
    const detail = object["detail"]
    if (typeof detail === "string") return detail
    const error = object["error"]
    if (typeof error === "string") return error
    const details = detailsOf(message) ?? detailsOf(detail)
    if (details !== undefined) return details
  }
  return undefined
}

export interface Evidence {
  /** HTTP status; absent for an in-stream error payload. */
  readonly status?: number | undefined
  readonly headers?: HeaderReader | undefined
  /** The first 64 KiB of the error body as text. */
  readonly body?: string | undefined
  /** An already parsed payload (an in-stream `error` event); otherwise `body` is parsed. */
  readonly payload?: unknown
  readonly nowMs: number
  /** What the stream showed so far (docs/model.md §4.5). */
  readonly replaySafe: boolean
  readonly observedOutput: boolean
  /** Every form of the secrets that must never appear in a message (`secrets.ts` `formsOf`), replaced by `[redacted]`. */
  readonly secrets?: ReadonlyArray<string> | undefined
}

/** The JSON value of an error body, or undefined when it is not JSON (it is then classified by its text). */
export const parsePayload = (body: string | undefined): unknown => {
  if (body === undefined || body.trim() === "") return undefined
  try {
    return JSON.parse(body.slice(0, Limits.MAX_ERROR_BODY_BYTES))
  } catch {
    return undefined
  }
}

/** Whether a parsed body carries an `error` (an OpenAI-style or Anthropic error object). */
export const hasErrorField = (payload: unknown): boolean =>
  isRecord(payload) && payload["error"] !== undefined && payload["error"] !== null


/**
 * A short summary: the HTTP status (an in-stream error has none: `provider error`), the code when it
 * says more than the status, and the start of the provider message; never headers or keys.
 */
const summary = (
  status: number | undefined,
  codes: ReadonlyArray<string>,
  message: string | undefined,
  secrets: ReadonlyArray<string>,
): string => {
  const code = codes[0] === String(status) ? undefined : codes[0]
  const head = [status === undefined ? "provider error" : `HTTP ${status}`, code].filter((part) => part !== undefined)
  // Scrub before cutting, so a secret split by the cut cannot leave a fragment behind.
  const said = message === undefined ? "" : scrub(message, secrets).replace(/\s+/g, " ").trim().slice(0, 1000)
  return scrub(head.join(" ") + (said === "" ? "" : `: ${said}`), secrets)
}

/** Classifies an HTTP error response or an in-stream error payload (rules 2–9; first match wins). */
export const classify = (evidence: Evidence): ModelError.ModelError => {
  const parsed = evidence.payload !== undefined ? evidence.payload : parsePayload(evidence.body)
  const objects = errorObjects(parsed)
  const codes = codesOf(objects)
  const normalized = codes.map(normalizeCode)
  const has = (set: ReadonlySet<string>): boolean => normalized.some((code) => set.has(code))
  const providerText = messageOf(objects)
  // An in-stream error often carries the HTTP status as a numeric `code` (OpenRouter), some gateways
  // as a string of its three digits.
  const numericCode = objects
    .map((object) => object["code"])
    .map((code) => (typeof code === "string" && /^[1-5][0-9]{2}$/.test(code) ? Number(code) : code))
    .find((code) => typeof code === "number")
  const status =
    evidence.status ??
    (typeof numericCode === "number" && Number.isInteger(numericCode) && numericCode >= 400 && numericCode <= 599
      ? numericCode
      : undefined)
  const secrets = evidence.secrets ?? []
  // The message names the most specific code: the nested error's (`overloaded_error`), not the
  // envelope's (`{type: "error", error: {…}}` of an Anthropic error).
  // The summary's status is the response's: a status an in-stream code stands for is the code.
  const message = summary(evidence.status, codesOf([...objects].reverse()), providerText ?? (parsed === undefined ? evidence.body : undefined), secrets)
  const fail = (reason: ModelError.ProviderReason, retryAfterMs?: number): ModelError.ModelError =>
    ModelError.provider({ reason, message, status, replaySafe: evidence.replaySafe, retryAfterMs })
  const retryAfter = (): number | undefined =>
    evidence.headers === undefined ? undefined : parseRetryAfter(evidence.headers, evidence.nowMs)

  // 2. Structured overflow codes outrank the status (proxies wrap overflows in 503).
  if (has(OVERFLOW)) return ModelError.contextOverflow(evidence.observedOutput, message)
  // 3. 413 Payload Too Large.
  if (status === 413) return ModelError.contextOverflow(evidence.observedOutput, message)
  // 4. Anthropic's exact "prompt is too long: N tokens > M maximum" with N > M.
  if (status === 400 && normalized.includes("invalid_request_error") && providerText !== undefined) {
    const match = ANTHROPIC_PROMPT_TOO_LONG.exec(providerText)
    if (match !== null && Number(match[1]) > Number(match[2])) return ModelError.contextOverflow(evidence.observedOutput, message)
    // The input and the output limit together pass the window: a shorter input fits, unless the
    // output limit alone fills the window (that request is refused whatever the history).
    const both = ANTHROPIC_INPUT_AND_OUTPUT.exec(providerText)
    if (both !== null) {
      const [input, output, window] = [Number(both[1]), Number(both[2]), Number(both[3])]
      if (input + output > window && output < window) return ModelError.contextOverflow(evidence.observedOutput, message)
    }
  }
  // 5. Free-text overflow, only with 400 or no status, and only without a veto.
  if (status === undefined || status === 400) {
    const text = `${providerText ?? ""}\n${evidence.body ?? ""}`
    if (isOverflowText(text)) return ModelError.contextOverflow(evidence.observedOutput, message)
  }
  // 6. Rate limits, except quotas that waiting will not clear.
  if (status === 429) return has(QUOTA) ? fail("rejected") : fail("rate_limit", retryAfter())
  // 7. Authentication.
  if (status === 401 || status === 403) return fail("auth")
  // 8. Unavailable: 408, 5xx and the unavailable codes.
  if (status === 408 || (status !== undefined && status >= 500) || has(UNAVAILABLE)) {
    return fail("provider_unavailable", retryAfter())
  }
  // 8a. A redirect (addition to rule 9): never followed, since the key and the prompt go to the
  // configured route only, and never transient, since the next attempt meets the same one.
  if (status !== undefined && status >= 300 && status < 400) {
    return ModelError.provider({
      reason: "rejected",
      message: `HTTP ${status}: the provider answered with a redirect, which is not followed; set the base URL to the address that answers`,
      status,
      replaySafe: evidence.replaySafe,
    })
  }
  // 9. Any other 4xx.
  if (status !== undefined && status >= 400 && status < 500) return fail("rejected")
  // Choice: an in-stream error has no status; its typed code stands in for one (Anthropic's `error`
  // event types), and an error with no recognisable code is treated as transient.
  if (status === undefined) {
    // A quota that waiting will not clear (rule 6's bodies), in a stream or a 200 body as in a 429.
    if (has(QUOTA)) return fail("rejected")
    if (has(STREAM_RATE_LIMIT)) return fail("rate_limit")
    if (has(STREAM_AUTH)) return fail("auth")
    if (has(STREAM_REJECTED)) return fail("rejected")
  }
  return fail("provider_unavailable", retryAfter())
}
