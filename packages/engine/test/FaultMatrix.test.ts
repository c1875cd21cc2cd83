/**
 * The fault matrix: every provider failure mode of docs/model.md §4.5, served by the scripted server
 * over real sockets, at every stage of a run (docs/engine.md §5.4, §5.6, §5.10, §5.12):
 *
 * - (a) the first step of a run, the fault answering once; (a*) the same, the fault answering every
 *   attempt, for the failures a re-send or a recovery meets again;
 * - (b) mid-loop, the step after a settled tool step;
 * - (c) a background summary beside a main step (a small declared window makes it due);
 * - (d) a background summary, failed and still pending, that a handoff preflight drains.
 *
 * The table below is the single source: each row names the failure, how the model package classifies
 * it, and each stage's expected fate. A main stage's fate is `retry` (one `retryable_failure`, the
 * frozen request re-sent after the backoff or Retry-After, then the answer; persistently: ten
 * attempts, then `failed {model_provider}`), `recover` (the overflow interrupts the request `failed`,
 * one summary is adopted as a checkpoint and the step is asked again; persistently the second
 * overflow fails the run `context_overflow`), or the interruption status and failure class the run
 * ends with. A summary stage's fate is the summary's `model_interrupted` status: a summary is sent
 * once, never re-sent, adopted by nobody; the run then answers (c) or seals `handoff_paused` and its
 * successor answers (d). The drivers (support/fault-matrix.ts) expand each fate into the exact facts.
 */
import { assert, describe, it } from "@effect/vitest"
import { AnthropicSse, OpenAiSse, Respond } from "@maka/testkit"
import { Effect } from "effect"
import { isSummaryRequest } from "./support/compaction.ts"
import {
  backgroundSummary,
  cell,
  classifications,
  firstStep,
  handoffDrain,
  midLoop,
  overflow,
  provider,
  timedOut,
  type Classified,
  type Dialect,
  type MainFate,
  type Mode,
  type SummaryFate,
} from "./support/fault-matrix.ts"

interface Row extends Mode {
  /** (a) first step (and (a*), the fault on every attempt), (b) mid-loop. */
  readonly first: MainFate
  readonly midLoop: MainFate
  /** (c) background summary, (d) background summary drained by a handoff preflight. */
  readonly summary: SummaryFate
  readonly handoff: SummaryFate
}

const row = (
  name: string,
  fault: Respond.Responder,
  classified: Classified,
  fates: readonly [first: MainFate, midLoop: MainFate, summary: SummaryFate, handoff: SummaryFate],
  extra: { readonly dialect?: Dialect; readonly stalls?: boolean; readonly minGapMs?: number } = {},
): Row => ({
  name,
  fault,
  classified,
  dialect: extra.dialect ?? "openai",
  ...(extra.stalls === undefined ? {} : { stalls: extra.stalls }),
  ...(extra.minGapMs === undefined ? {} : { minGapMs: extra.minGapMs }),
  first: fates[0],
  midLoop: fates[1],
  summary: fates[2],
  handoff: fates[3],
})

const error = (message: string, type = "invalid_request_error", code: string | null = null) => Respond.openAiError(message, { type, code })
const partial = [OpenAiSse.role(), OpenAiSse.text("Hel")]

// The fates of the common kinds of failure, by stage: (a) and (a*), (b), (c), (d).
const RECOVERED = ["recover", "recover", "failed", "failed"] as const
const RETRIED = ["retry", "retry", "retryable_failure", "retryable_failure"] as const
const PROVIDER_FAILED = ["failed model_provider", "failed model_provider", "failed", "failed"] as const
const OVERFLOW_FAILED = ["failed context_overflow", "failed context_overflow", "failed", "failed"] as const
const TIMED_OUT = ["timed_out model_timeout", "timed_out model_timeout", "timed_out", "timed_out"] as const

const MATRIX: ReadonlyArray<Row> = [
  // Rule 2: structured overflow codes, whatever the status.
  row("400 with code context_length_exceeded", Respond.json(400, error("Request rejected.", "invalid_request_error", "context_length_exceeded")), overflow(), RECOVERED),
  row("503 whose body is typed model_context_window_exceeded", Respond.json(503, error("Upstream failed.", "model_context_window_exceeded")), overflow(), RECOVERED),
  row("500 whose body's own code is request_too_large", Respond.json(500, { code: "request_too_large", message: "Upstream failed." }), overflow(), RECOVERED),
  // Rule 3.
  row("413 Payload Too Large", Respond.json(413, "Payload Too Large"), overflow(), RECOVERED),
  // Rule 4 (Anthropic).
  row(
    "Anthropic 400 prompt is too long: N tokens > M maximum",
    Respond.json(400, Respond.anthropicError("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")),
    overflow(),
    RECOVERED,
    { dialect: "anthropic" },
  ),
  // Rule 5: overflow in prose, and its vetoes.
  row("400 saying maximum context length is", Respond.json(400, error("This model's maximum context length is 8192 tokens. However, you requested 9000 tokens.")), overflow(), RECOVERED),
  row("400 saying input … token limit exceeded", Respond.json(400, error("The input token count exceeds the maximum: token limit exceeded.")), overflow(), RECOVERED),
  row("in-stream error saying prompt is too long, before any output", Respond.sse([OpenAiSse.role(), OpenAiSse.error("The prompt is too long for this model.", { type: "invalid_request_error" })]), overflow(), RECOVERED),
  row("400 prose overflow vetoed by rate limit", Respond.json(400, error("Rate limit reached: the prompt has too many tokens per minute.")), provider("rejected", false), PROVIDER_FAILED),
  row("400 prose overflow vetoed by an output word", Respond.json(400, error("Input accepted, but max_tokens asks for too many tokens.")), provider("rejected", false), PROVIDER_FAILED),
  row("429 saying maximum context length is", Respond.json(429, error("This model's maximum context length is 8192 tokens.", "requests")), provider("rate_limit", true), RETRIED),
  row("500 saying maximum context length is", Respond.json(500, error("This model's maximum context length is 8192 tokens.", "server_error")), provider("provider_unavailable", true), RETRIED),
  // Rule 6: rate limits and quotas.
  row("429 with retry-after in seconds", Respond.json(429, error("Rate limit reached.", "requests"), { "retry-after": "0.12" }), provider("rate_limit", true, 120), RETRIED, { minGapMs: 120 }),
  row(
    "429 with retry-after-ms (before retry-after)",
    Respond.json(429, error("Rate limit reached.", "requests"), { "retry-after-ms": "150", "retry-after": "30" }),
    provider("rate_limit", true, 150),
    RETRIED,
    { minGapMs: 150 },
  ),
  row("429 without retry-after", Respond.json(429, error("Rate limit reached.", "requests")), provider("rate_limit", true), RETRIED),
  row("429 with an unusable retry-after", Respond.json(429, error("Rate limit reached.", "requests"), { "retry-after": "soon" }), provider("rate_limit", true), RETRIED),
  row(
    "429 with a retry-after date already past",
    Respond.json(429, error("Rate limit reached.", "requests"), { "retry-after": new Date(Date.now() - 60_000).toUTCString() }),
    provider("rate_limit", true),
    RETRIED,
  ),
  row("429 insufficient_quota", Respond.json(429, error("You exceeded your current quota.", "insufficient_quota", "insufficient_quota")), provider("rejected", false), PROVIDER_FAILED),
  row("429 FreeUsageLimitError", Respond.json(429, { error: { type: "FreeUsageLimitError", message: "Free usage exhausted." } }), provider("rejected", false), PROVIDER_FAILED),
  // Rule 7.
  row("401", Respond.json(401, error("Incorrect API key provided.", "invalid_request_error", "invalid_api_key")), provider("auth", false), PROVIDER_FAILED),
  row("403", Respond.json(403, error("Forbidden.", "permission_error")), provider("auth", false), PROVIDER_FAILED),
  // Rule 8.
  row("408", Respond.json(408, error("Request timed out.", "timeout")), provider("provider_unavailable", true), RETRIED),
  row("500", Respond.json(500, error("The server had an error.", "server_error")), provider("provider_unavailable", true), RETRIED),
  row("503", Respond.json(503, "Service Unavailable"), provider("provider_unavailable", true), RETRIED),
  row("400 with code resource-exhausted", Respond.json(400, error("Resource has been exhausted.", "invalid_request_error", "resource-exhausted")), provider("provider_unavailable", true), RETRIED),
  row("in-stream server_error before any output", Respond.sse([OpenAiSse.role(), OpenAiSse.error("The server had an error.")]), provider("provider_unavailable", true), RETRIED),
  row("in-stream server_error after text", Respond.sse([...partial, OpenAiSse.error("The server had an error.")]), provider("provider_unavailable", true), RETRIED),
  row(
    "Anthropic 529 overloaded_error",
    Respond.json(529, Respond.anthropicError("overloaded_error", "Overloaded")),
    provider("provider_unavailable", true),
    RETRIED,
    { dialect: "anthropic" },
  ),
  row(
    "Anthropic in-stream overloaded_error",
    Respond.sse([AnthropicSse.messageStart(), AnthropicSse.ping(), AnthropicSse.error("overloaded_error", "Overloaded")]),
    provider("provider_unavailable", true),
    RETRIED,
    { dialect: "anthropic" },
  ),
  // Rule 9.
  row("402", Respond.json(402, error("Payment required.")), provider("rejected", false), PROVIDER_FAILED),
  row("409", Respond.json(409, error("Conflict.")), provider("rejected", false), PROVIDER_FAILED),
  row("in-stream error whose numeric code is 402", Respond.sse([OpenAiSse.role(), OpenAiSse.error("Insufficient credits.", { type: "billing", code: 402 })]), provider("rejected", false), PROVIDER_FAILED),
  // Rule 10.
  row("connection dropped before any response byte", Respond.drop(), provider("network", true), RETRIED),
  // Rule 11, and replay safety.
  row("connection reset mid-stream after text", Respond.dropAfter(partial), provider("stream_truncated", true), RETRIED),
  row("body ends without a finish", Respond.sse(partial), provider("stream_truncated", true), RETRIED),
  row(
    "Anthropic stream dropped after a signed thinking block (scenario 25)",
    Respond.dropAfter([AnthropicSse.messageStart(), ...AnthropicSse.thinkingBlock(0, ["plan"], "sig-1"), ...AnthropicSse.textBlock(1, ["Hel"]).slice(0, 2)]),
    provider("stream_truncated", false),
    PROVIDER_FAILED,
    { dialect: "anthropic" },
  ),
  // An overflow after output is not recovered.
  row(
    "in-stream context_length_exceeded after text (scenario 45)",
    Respond.sse([...partial, OpenAiSse.error("Too long.", { type: "invalid_request_error", code: "context_length_exceeded" })]),
    overflow(true),
    OVERFLOW_FAILED,
  ),
  // Idle timeout (docs/model.md §4.2): not a provider failure, never re-sent.
  row("stream stalls after text", Respond.stallAfter(partial), timedOut, TIMED_OUT, { stalls: true }),
]


/** The classification every attempt of a cell met: one per failed request. */
const assertClassified = (errors: ReadonlyArray<unknown>, row: Row, count: number) =>
  assert.deepStrictEqual(errors, Array.from({ length: count }, () => row.classified))

/**
 * The rows whose fate changes when the fault answers every attempt: a re-send meets it again (ten
 * attempts, then the run fails), and so does the step asked again after a recovery. Any other fate
 * sends one request either way, which (a) already shows: a second one would take the next answer.
 */
const PERSISTENT_ROWS = MATRIX.filter((row) => row.first === "retry" || row.first === "recover")

/** The failed requests of a fault on every attempt: ten re-sends, or the overflow before and after its recovery. */
const persistentAttempts = (fate: MainFate) => (fate === "retry" ? 10 : 2)

/** The cells of a stage: each row with its title, `{failure} → {expected fate}`. */
const cells = (rows: ReadonlyArray<Row>, fate: (row: Row) => string) => rows.map((row) => [`${row.name} → ${fate(row)}`, row] as const)

describe.concurrent("fault matrix", () => {
  describe("(a) the first step of a run", () => {
    it.live.each(cells(MATRIX, (row) => row.first))("%s", ([, row]) =>
      Effect.scoped(
        Effect.gen(function* () {
          const matrixCell = yield* cell(row)
          yield* firstStep(matrixCell, row.first, false)
          assertClassified(classifications(matrixCell), row, 1)
        }),
      ))
  })

  describe("(a*) the first step of a run, the fault on every attempt", () => {
    it.live.each(cells(PERSISTENT_ROWS, (row) => `${row.first}, every attempt`))("%s", ([, row]) =>
      Effect.scoped(
        Effect.gen(function* () {
          const matrixCell = yield* cell(row)
          yield* firstStep(matrixCell, row.first, true)
          assertClassified(classifications(matrixCell), row, persistentAttempts(row.first))
        }),
      ))
  })

  describe("(b) mid-loop, after a settled tool step", () => {
    it.live.each(cells(MATRIX, (row) => row.midLoop))("%s", ([, row]) =>
      Effect.scoped(
        Effect.gen(function* () {
          const matrixCell = yield* cell(row)
          yield* midLoop(matrixCell, row.midLoop, false)
          assertClassified(classifications(matrixCell), row, 1)
        }),
      ))
  })

  describe("(c) a background summary beside a main step", () => {
    it.live.each(cells(MATRIX, (row) => `summary ${row.summary}, run completed`))("%s", ([, row]) =>
      Effect.scoped(
        Effect.gen(function* () {
          const matrixCell = yield* cell(row)
          yield* backgroundSummary(matrixCell, row.summary)
          assertClassified(classifications(matrixCell), row, 1)
        }),
      ))
  })

  describe("(d) a failed background summary drained by a handoff preflight", () => {
    it.live.each(cells(MATRIX, (row) => `summary ${row.handoff}, handoff_paused, successor completed`))("%s", ([, row]) =>
      Effect.scoped(
        Effect.gen(function* () {
          const matrixCell = yield* cell(row)
          yield* handoffDrain(matrixCell, row.handoff)
          assertClassified(classifications(matrixCell), row, 1)
        }),
      ))
  })

  describe("(d) a background summary still streaming when a handoff preflight drains it", () => {
    it.live("is interrupted cancelled, whatever its fault would have been; the pause seals and the successor answers", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const gate = Respond.gate()
          const matrixCell = yield* cell({ name: "held 500", dialect: "openai", fault: Respond.hold(gate, Respond.json(500, "late")), classified: provider("provider_unavailable", true) })
          yield* handoffDrain(matrixCell, "cancelled", true)
          assert.isFalse(gate.isReleased())
          // The drain interrupts the stream: no provider failure was ever classified.
          assert.deepStrictEqual(classifications(matrixCell), [])
          const summary = matrixCell.context.server.exchanges().find((exchange) => isSummaryRequest(exchange.request))
          assert.strictEqual(summary?.outcome, "client_closed")
        }),
      ))
  })
})
