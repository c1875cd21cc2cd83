/**
 * Drivers of the fault matrix (FaultMatrix.test.ts): one provider failure, served by the scripted
 * server over real sockets, placed at one stage of a run over a real SQLite log, and the facts the run
 * left read back per invocation. The stages: the first step of a run, a step after a settled tool
 * step, a background summary beside a main step, and a background summary a handoff preflight drains.
 * Every model error the engine met is recorded on the way, so a cell can also state how the failure
 * was classified.
 */
import { assert } from "@effect/vitest"
import type { Event, Lineage, Outcome } from "@maka/facts"
import { Prompts } from "@maka/facts"
import { LanguageModel, type ModelError } from "@maka/model"
import { AnthropicSse, OpenAiSse, Respond } from "@maka/testkit"
import { Effect, Fiber, Redacted, Stream } from "effect"
import { isSummaryRequest, mainEntry, summaryEntry, summaryText, usage } from "./compaction.ts"
import { catalog, input, setup, type Effects, type Setup } from "./setup.ts"

// --- what a cell expects -------------------------------------------------------------------------

/** How the model package classified the failure (docs/model.md §4.5), as a cell states it. */
export type Classified =
  | { readonly tag: "ContextOverflow"; readonly observedOutput: boolean }
  | {
      readonly tag: "Provider"
      readonly reason: ModelError.ProviderReason
      readonly replaySafe: boolean
      readonly retryAfterMs?: number
    }
  | { readonly tag: "TimedOut" }

export const overflow = (observedOutput = false): Classified => ({ tag: "ContextOverflow", observedOutput })
export const provider = (reason: ModelError.ProviderReason, replaySafe: boolean, retryAfterMs?: number): Classified =>
  retryAfterMs === undefined ? { tag: "Provider", reason, replaySafe } : { tag: "Provider", reason, replaySafe, retryAfterMs }
export const timedOut: Classified = { tag: "TimedOut" }

/**
 * A main step's fate: re-sent once and answered (`retry`), recovered by one summary and re-asked
 * (`recover`), or the run failed with the interruption status and failure class given.
 */
export type MainFate = "retry" | "recover" | `${"failed" | "timed_out"} ${"model_provider" | "model_timeout" | "context_overflow"}`

/** The `model_interrupted` status of a failed summary attempt (summaries are never re-sent). */
export type SummaryFate = "retryable_failure" | "failed" | "timed_out"

export type Dialect = "openai" | "anthropic"

export interface Mode {
  readonly name: string
  readonly dialect: Dialect
  /** The failing response. */
  readonly fault: Respond.Responder
  readonly classified: Classified
  /** The fault stalls the stream until the idle timeout: held responses beside it send keep-alives. */
  readonly stalls?: boolean
  /** The least delay before a re-send, in ms (the Retry-After the fault names). */
  readonly minGapMs?: number
}

// --- facts ---------------------------------------------------------------------------------------

/**
 * One label per fact of `events` (observations left out), with the purpose of every model fact:
 * `model_requested:main`, `model_interrupted:retryable_failure:summary`,
 * `context_checkpoint_recorded:mid_turn`, `invocation_ended:failed:model_provider`, …
 */
export const labels = (events: ReadonlyArray<Event.StoredEvent>): ReadonlyArray<string> => {
  const purposes = new Map<string, string>()
  const out: Array<string> = []
  for (const stored of events) {
    const fact = stored.event.fact
    switch (fact.kind) {
      case "model_observed":
        break
      case "model_requested":
        purposes.set(fact.stepId, fact.purpose)
        out.push(`model_requested:${fact.purpose}`)
        break
      case "model_completed":
        out.push(`model_completed:${purposes.get(fact.stepId) ?? "?"}`)
        break
      case "model_interrupted":
        out.push(`model_interrupted:${fact.status}:${purposes.get(fact.stepId) ?? "?"}`)
        break
      case "context_checkpoint_recorded":
        out.push(`context_checkpoint_recorded:${fact.checkpoint.mode.kind}`)
        break
      case "tool_settled":
        out.push(`tool_settled:${fact.outcome.kind}`)
        break
      case "tool_rejected":
        out.push(`tool_rejected:${fact.reason.kind}`)
        break
      case "invocation_ended":
        out.push(
          fact.outcome.kind === "failed" ? `invocation_ended:failed:${fact.outcome.class}` : `invocation_ended:${fact.outcome.kind}`,
        )
        break
      default:
        out.push(fact.kind)
    }
  }
  return out
}

/** The facts a failed main step leaves, from its first request to the run's end (docs/engine.md §5.4, §5.6). */
export const mainTail = (fate: MainFate, mode: "pre_turn" | "mid_turn", persistent: boolean): ReadonlyArray<string> => {
  const asked = ["model_requested:main", "model_completed:main"]
  if (fate === "retry") {
    return persistent
      ? [...Array.from({ length: 10 }, () => ["model_requested:main", "model_interrupted:retryable_failure:main"]).flat(), "invocation_ended:failed:model_provider"]
      : ["model_requested:main", "model_interrupted:retryable_failure:main", ...asked, "invocation_ended:completed"]
  }
  if (fate === "recover") {
    const recovered = [
      "model_requested:main",
      "model_interrupted:failed:main",
      "model_requested:summary",
      "model_completed:summary",
      `context_checkpoint_recorded:${mode}`,
    ]
    // The recovery reshaped the budget: a second overflow is not recovered (docs/engine.md §5.4 step 11).
    return persistent
      ? [...recovered, "model_requested:main", "model_interrupted:failed:main", "invocation_ended:failed:context_overflow"]
      : [...recovered, ...asked, "invocation_ended:completed"]
  }
  const [status, failureClass] = fate.split(" ")
  return ["model_requested:main", `model_interrupted:${status}:main`, `invocation_ended:failed:${failureClass}`]
}

// --- the model and its answers -------------------------------------------------------------------

/** A recorded model error: what a cell's `classified` states. */
const classifiedOf = (error: ModelError.ModelError): Classified | { readonly tag: string } => {
  const reason = error.reason
  switch (reason._tag) {
    case "ContextOverflow":
      return overflow(reason.observedOutput)
    case "Provider":
      return provider(reason.reason, reason.replaySafe, reason.retryAfterMs)
    case "TimedOut":
      return timedOut
    default:
      return { tag: reason._tag }
  }
}

interface Answers {
  readonly answer: (text: string, input?: number) => ReadonlyArray<Respond.SseStep>
  readonly echo: (id: string, value: string, input?: number) => ReadonlyArray<Respond.SseStep>
  readonly summary: (text: string) => ReadonlyArray<Respond.SseStep>
}

const ANSWERS: Readonly<Record<Dialect, Answers>> = {
  openai: {
    answer: (text, input = 10) => OpenAiSse.response({ text: [text], usage: usage(input) }),
    echo: (id, value, input = 10) =>
      OpenAiSse.response({ toolCalls: [{ id, name: "echo", arguments: [JSON.stringify({ value })] }], usage: usage(input) }),
    summary: (text) => OpenAiSse.response({ text: [text], usage: usage(100, 50) }),
  },
  anthropic: {
    answer: (text, input = 10) => AnthropicSse.response({ text: [text], inputUsage: { input_tokens: input, output_tokens: 1 } }),
    echo: (id, value, input = 10) =>
      AnthropicSse.response({ toolUses: [{ id, name: "echo", json: [JSON.stringify({ value })] }], inputUsage: { input_tokens: input, output_tokens: 1 } }),
    summary: (text) => AnthropicSse.response({ text: [text], inputUsage: { input_tokens: 100, output_tokens: 1 } }),
  },
}

/** The declared window of the background stages: a last main of 5,000 input tokens makes a summary due. */
const windowed = (dialect: Dialect) => ({ context: { providerId: dialect === "openai" ? "openai-compatible" : "anthropic", declaredWindow: 1_000 } })

export interface Cell {
  readonly context: Setup
  readonly model: LanguageModel.LanguageModelShape
  readonly effects: Effects
  readonly answers: Answers
  /** Every model error the engine met, in order. */
  readonly errors: Array<ModelError.ModelError>
  /** When each request reached the server (ms since the epoch), by request index. */
  readonly arrivals: Array<number>
  readonly mode: Mode
}

/**
 * Engine, log and scripted server for one cell, with backoff from 5 ms. The idle timeout is the
 * least (1 s) when the fault stalls, and otherwise long enough that a response held while a summary
 * fails never times out on a loaded machine.
 */
export const cell = (mode: Mode) =>
  Effect.gen(function* () {
    const arrivals: Array<number> = []
    const idleTimeoutMs = mode.stalls === true ? 1_000 : 10_000
    const context = yield* setup(
      { onProgress: (progress) => (progress.type === "request" ? arrivals.push(Date.now()) : undefined) },
      { backoffBaseMs: 5, backoffMaxMs: 40 },
      { idleTimeoutMs },
    )
    const base =
      mode.dialect === "openai"
        ? context.model
        : yield* LanguageModel.make(
            { kind: "anthropic", baseUrl: context.server.url, model: "test-model", apiKey: Redacted.make("sk-ant-test-secret") },
            { idleTimeoutMs },
          )
    const errors: Array<ModelError.ModelError> = []
    const model: LanguageModel.LanguageModelShape = {
      ...base,
      stream: (request, options) =>
        base.stream(request, options).pipe(Stream.tapError((error) => Effect.sync(() => errors.push(error)))),
    }
    return { context, model, effects: { ran: [] }, answers: ANSWERS[mode.dialect], errors, arrivals, mode } satisfies Cell
  })

const sse = (steps: ReadonlyArray<Respond.SseStep>) => Respond.sse(steps)

/** `steps` held until `gate` opens, with keep-alive comments first when the cell's fault stalls. */
const held = (cellOf: Cell, gate: Respond.Gate, steps: ReadonlyArray<Respond.SseStep>) =>
  Respond.sse([
    ...(cellOf.mode.stalls === true ? Array.from({ length: 5 }, () => Respond.comment("keep-alive", { delayMs: 300 })) : []),
    Respond.waitFor(gate),
    ...steps,
  ])

const run = (cellOf: Cell, text: string, overrides: Parameters<typeof input>[3] = {}) =>
  input(cellOf.context, text, catalog(cellOf.effects), { model: cellOf.model, ...overrides })

const own = (cellOf: Cell, invocationId: string) =>
  Effect.map(cellOf.context.log.events("session-1"), (events) =>
    events.filter((stored) => stored.event.invocation.invocationId === invocationId),
  )

/** The recorded errors, as a cell states them. */
export const classifications = (cellOf: Cell) => cellOf.errors.map(classifiedOf)

/** The `inputDigest`s of the main requests in `events`. */
const mainDigests = (events: ReadonlyArray<Event.StoredEvent>) =>
  events.flatMap((stored) =>
    stored.event.fact.kind === "model_requested" && stored.event.fact.purpose === "main" ? [stored.event.fact.inputDigest] : [],
  )

/** A re-send goes out no sooner than the Retry-After (or the 5 ms backoff base) after the failed request. */
const assertGap = (cellOf: Cell, failedIndex: number) => {
  const gap = cellOf.arrivals[failedIndex + 1]! - cellOf.arrivals[failedIndex]!
  assert.isAtLeast(gap, cellOf.mode.minGapMs ?? 5, `re-sent after ${gap} ms`)
}

/** The provider keys of both dialects: no fact may hold them. */
const KEYS = ["sk-test-secret", "sk-ant-test-secret"]

/** No event of the session holds a provider key, not even a failure's message. */
const assertNoKey = (cellOf: Cell) =>
  Effect.map(cellOf.context.log.events("session-1"), (events) => {
    const text = JSON.stringify(events)
    for (const key of KEYS) assert.notInclude(text, key)
  })

export interface FailedStep {
  /** The `inputDigest`s of the failing step's main requests. */
  readonly digests: ReadonlyArray<string>
  /** The server's index of the step's first request. */
  readonly failedIndex: number
  /** Text of the history a recovery's summary covers: gone from the request asked again. */
  readonly covered: string
  /** The marker of the recovery's summary. */
  readonly summary: string
  readonly outcome: Outcome.InvocationOutcome
}

/**
 * What a failed main step shows beyond its facts: a re-send is the frozen request (identical
 * `inputDigest`) sent no sooner than the backoff or Retry-After; a recovered step is asked again from
 * the summary, without the history it covers; a timeout names the idle timeout.
 */
const assertFailedStep = (cellOf: Cell, fate: MainFate, step: FailedStep) => {
  if (fate === "retry") {
    assert.strictEqual(new Set(step.digests).size, 1)
    assertGap(cellOf, step.failedIndex)
  }
  if (fate === "recover") {
    const main = cellOf.context.server.requests().filter((request) => !isSummaryRequest(request))
    const again = main[main.length - 1]!.body
    assert.include(again, Prompts.CONTINUATION_SUMMARY_PREFIX.trim())
    assert.include(again, step.summary)
    assert.notInclude(again, step.covered)
    assert.notStrictEqual(step.digests[0], step.digests[1])
  }
  if (fate === "timed_out model_timeout") {
    assert.deepStrictEqual(step.outcome, { kind: "failed", class: "model_timeout", message: Prompts.MODEL_IDLE_TIMEOUT_MESSAGE })
  }
}

// --- stages --------------------------------------------------------------------------------------

/**
 * (a) The first step of a run, in a session with one earlier turn (so an overflow has history to
 * summarise): the fault answers the run's first main request, once or (`persistent`) every time.
 */
export const firstStep = (cellOf: Cell, fate: MainFate, persistent: boolean) =>
  Effect.gen(function* () {
    const { context, answers, mode } = cellOf
    context.server.push(mainEntry(sse(answers.answer("Noted: the code is 4417."))))
    yield* context.engine.run(run(cellOf, "Remember: the code is 4417."))
    context.server.push(
      { match: (request) => !isSummaryRequest(request), respond: mode.fault, repeat: persistent },
      summaryEntry(sse(answers.summary(summaryText("code noted")))),
      mainEntry(sse(answers.answer("Recovered."))),
    )
    const second = run(cellOf, "What is the code?")
    const result = yield* context.engine.run(second)
    const events = yield* own(cellOf, second.invocation.invocationId)
    assert.deepStrictEqual(labels(events), ["invocation_opened", ...mainTail(fate, "pre_turn", persistent)])
    assertFailedStep(cellOf, fate, {
      digests: mainDigests(events),
      failedIndex: 1,
      covered: "Noted: the code is 4417.",
      summary: "code noted",
      outcome: result.outcome,
    })
    yield* assertNoKey(cellOf)
  })

/**
 * (b) Mid-loop: the run's first step calls `echo`, which settles; the fault answers the second
 * step's request, once or (`persistent`) every time.
 */
export const midLoop = (cellOf: Cell, fate: MainFate, persistent: boolean) =>
  Effect.gen(function* () {
    const { context, answers, mode } = cellOf
    context.server.push(
      mainEntry(sse(answers.echo("call-1", "alpha"))),
      { match: (request) => !isSummaryRequest(request), respond: mode.fault, repeat: persistent },
      summaryEntry(sse(answers.summary(summaryText("alpha echoed")))),
      mainEntry(sse(answers.answer("Done."))),
    )
    const first = run(cellOf, "Echo alpha, then answer.")
    const result = yield* context.engine.run(first)
    const events = yield* own(cellOf, first.invocation.invocationId)
    assert.deepStrictEqual(labels(events), [
      "invocation_opened",
      "model_requested:main",
      "model_completed:main",
      "tool_dispatched",
      "tool_settled:succeeded",
      ...mainTail(fate, "mid_turn", persistent),
    ])
    // Retries and recovery never re-run a settled effect.
    assert.deepStrictEqual(cellOf.effects.ran, ["alpha"])
    assertFailedStep(cellOf, fate, {
      digests: mainDigests(events).slice(1),
      failedIndex: 1,
      covered: "echo: alpha",
      summary: "alpha echoed",
      outcome: result.outcome,
    })
    yield* assertNoKey(cellOf)
  })

/** Waits until the session's log holds the `model_interrupted` of a summary request. */
const summaryInterrupted = (cellOf: Cell) =>
  Effect.gen(function* () {
    for (;;) {
      const events = yield* cellOf.context.log.events("session-1")
      if (labels(events).some((label) => label.startsWith("model_interrupted:") && label.endsWith(":summary"))) return
      yield* Effect.sleep("10 millis")
    }
  })

/**
 * The background stages' opening: an earlier turn whose main request used 5,000 input tokens of a
 * 1,000-token declared window, then a run whose first step finds a summary due and starts it in the
 * background (the model's limiter has spare permits) while its main request, which calls `echo`, is
 * held until the summary's failure is durable.
 */
const backgroundSummaryFails = (cellOf: Cell, maxSteps: number, until: "interrupted" | "sent") =>
  Effect.gen(function* () {
    const { context, answers, mode } = cellOf
    const gate = Respond.gate()
    context.server.push(mainEntry(sse(answers.answer("Noted: the code is 4417.", 5_000))))
    yield* context.engine.run(run(cellOf, "Remember: the code is 4417.", windowed(mode.dialect)))
    context.server.push(
      summaryEntry(mode.fault),
      mainEntry(held(cellOf, gate, answers.echo("call-1", "alpha"))),
      mainEntry(sse(answers.answer("Done."))),
    )
    const second = run(cellOf, "Echo alpha.", { ...windowed(mode.dialect), maxSteps })
    const running = yield* context.engine.start(second)
    if (until === "interrupted") yield* summaryInterrupted(cellOf)
    else yield* summarySent(cellOf)
    return { running, gate, second } as const
  })

/** Waits until the server has received a summary request. */
const summarySent = (cellOf: Cell) =>
  Effect.gen(function* () {
    while (!cellOf.context.server.requests().some(isSummaryRequest)) yield* Effect.sleep("10 millis")
  })

const summaryLabels = (all: ReadonlyArray<string>) => all.filter((label) => label.endsWith(":summary"))
const mainLabels = (all: ReadonlyArray<string>) => all.filter((label) => !label.endsWith(":summary"))

/**
 * (c) A background summary fails (once: summaries are never re-sent) beside a main step that calls
 * `echo`; the next boundary adopts nothing, and the run answers without a checkpoint.
 */
export const backgroundSummary = (cellOf: Cell, fate: SummaryFate) =>
  Effect.gen(function* () {
    const { running, gate, second } = yield* backgroundSummaryFails(cellOf, 8, "interrupted")
    assert.isFalse(gate.isReleased())
    gate.release()
    const result = yield* running.wait
    assert.deepStrictEqual(result.outcome, { kind: "completed" })
    const all = labels(yield* own(cellOf, second.invocation.invocationId))
    assert.deepStrictEqual(summaryLabels(all), ["model_requested:summary", `model_interrupted:${fate}:summary`])
    assert.deepStrictEqual(mainLabels(all), [
      "invocation_opened",
      "model_requested:main",
      "model_completed:main",
      "tool_dispatched",
      "tool_settled:succeeded",
      "model_requested:main",
      "model_completed:main",
      "invocation_ended:completed",
    ])
    assert.deepStrictEqual(cellOf.effects.ran, ["alpha"])
    assert.strictEqual(cellOf.context.server.requests().filter(isSummaryRequest).length, 1)
    yield* assertNoKey(cellOf)
  })

/**
 * (d) A background summary has failed and is still pending when a handoff is requested; the main
 * step calls `echo`, and at the next boundary the handoff preflight drains the summary and seals the
 * pause (no checkpoint; the budget an accepted step renewed travels with it). The successor then
 * replays the pause and answers. With `inFlight`, the summary's response has not begun when the
 * preflight drains it: the drain cancels it, whatever the fault would have been.
 */
export const handoffDrain = (cellOf: Cell, fate: SummaryFate | "cancelled", inFlight = false) =>
  Effect.gen(function* () {
    const { context } = cellOf
    const { running, gate, second } = yield* backgroundSummaryFails(cellOf, 6, inFlight ? "sent" : "interrupted")
    const requested = yield* Effect.forkChild(running.handoff)
    yield* Effect.sleep("20 millis")
    assert.isFalse(gate.isReleased())
    gate.release()
    const pause = yield* Fiber.join(requested)
    const result = yield* running.wait
    assert.isDefined(pause)
    assert.deepStrictEqual(result.outcome, { kind: "handoff_paused", pause: pause! })
    const sealed: Lineage.HandoffPause = pause!
    assert.strictEqual(sealed.remainingSteps, 5)
    assert.strictEqual(sealed.execution.compaction, "available")
    const all = labels(yield* own(cellOf, second.invocation.invocationId))
    assert.deepStrictEqual(summaryLabels(all), ["model_requested:summary", `model_interrupted:${fate}:summary`])
    assert.deepStrictEqual(mainLabels(all), [
      "invocation_opened",
      "model_requested:main",
      "model_completed:main",
      "tool_dispatched",
      "tool_settled:succeeded",
      "invocation_ended:handoff_paused",
    ])
    // The successor replays the pause: its first request is the sealed replay, and it answers.
    const successor = yield* context.engine.resume({ paused: running.invocation, pause: sealed, model: cellOf.model, tools: catalog(cellOf.effects) })
    const resumed = yield* successor.wait
    assert.deepStrictEqual(resumed.outcome, { kind: "completed" })
    const after = yield* own(cellOf, successor.invocation.invocationId)
    assert.deepStrictEqual(labels(after), ["invocation_opened", "model_requested:main", "model_completed:main", "invocation_ended:completed"])
    assert.strictEqual(mainDigests(after)[0], sealed.execution.replay.digest)
    assert.deepStrictEqual(cellOf.effects.ran, ["alpha"])
    yield* assertNoKey(cellOf)
  })
