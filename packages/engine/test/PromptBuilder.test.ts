import { Archive, Canonical, Digest, Prompts, type Event, type Prompt } from "@maka/facts"
import type { EventLog } from "@maka/event-log"
import { makeTemporary } from "@maka/event-log/testing"
import { projectPrompt } from "@maka/model"
import { FactBuilders, History } from "@maka/testkit"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import {
  buildMainPrompt,
  buildSummaryPrompt,
  compactionDue,
  inputDigest,
  outputLimit,
  priorUnknownNotice,
  projectSource,
  SourceProjector,
  unresolvedOperations,
} from "../src/PromptBuilder.ts"

const SYSTEM = FactBuilders.SYSTEM_PROMPT
const ROUTE = FactBuilders.digestOf("route")
const system: Prompt.PromptMessage = { role: "system", content: SYSTEM }
const user = (content: string): Prompt.PromptMessage => ({ role: "user", content })
const assistantText = (text: string): Prompt.PromptMessage => ({ role: "assistant", parts: [{ kind: "text", text }] })

interface ReadOptions {
  readonly current?: string
  readonly manual?: boolean
}

/** Appends the history to a fresh temporary SQLite log and reads its model context. */
const readSource = (history: History.History, options: ReadOptions = {}) =>
  Effect.gen(function* () {
    const { log } = yield* makeTemporary()
    for (const write of history.writes) yield* log.append(write)
    const request = options.current === undefined ? {} : { current: options.current }
    return options.manual === true
      ? yield* log.readManualMessageContext(history.sessionId, request)
      : yield* log.readModelContext(history.sessionId, request)
  })

/** A source built by hand over the given events, for shapes the log never materialises. */
const handSource = (
  events: ReadonlyArray<Event.StoredEvent>,
  overrides: Partial<EventLog.ModelContextSource> = {},
): EventLog.ModelContextSource => ({
  sourceEvidence: { scope: { kind: "session", id: "session-1" }, highWater: events.length, digest: FactBuilders.digestOf("source") },
  tail: events.map((stored) => ({ kind: "canonical", stored })),
  effectiveSourceDigest: FactBuilders.digestOf("effective"),
  latestMain: { kind: "no_completed_request" },
  unknownOperations: [],
  ...overrides,
})

describe("buildMainPrompt", () => {
  it.live("projects the small run as user, assistant call, JSON tool result and assistant text", () =>
    Effect.gen(function* () {
      const source = yield* readSource(History.smallRun())
      expect(buildMainPrompt({ systemPrompt: SYSTEM, source })).toEqual([
        system,
        user("What is in this repository?"),
        {
          role: "assistant",
          parts: [{ kind: "tool_call", toolCallId: "call-1", toolName: "list_files", input: { path: "." }, providerExecuted: false }],
        },
        {
          role: "tool",
          results: [
            {
              toolCallId: "call-1",
              toolName: "list_files",
              output: {
                type: "json",
                value: [
                  { name: "README.md", type: "file", size: 120 },
                  { name: "src", type: "directory", size: 4096 },
                ],
              },
            },
          ],
        },
        assistantText("The repository holds README.md and a src folder."),
      ])
      expect(unresolvedOperations(source)).toEqual([])
    }))

  it.live("builds every message sealed, the system message the same object step after step, so the request digest extends", () =>
    Effect.gen(function* () {
      const source = yield* readSource(History.smallRun())
      const first = buildMainPrompt({ systemPrompt: SYSTEM, source })
      const second = buildMainPrompt({ systemPrompt: SYSTEM, source })
      for (const message of first) expect(Canonical.isSealed(message)).toBe(true)
      first.forEach((message, index) => expect(second[index]).toBe(message))
      // Another system prompt is another message.
      expect(buildMainPrompt({ systemPrompt: `${SYSTEM} Be brief.`, source })[0]).not.toBe(first[0])
    }))

  it.live("sends the message text, never its displayText, and wraps steering exactly once", () =>
    Effect.gen(function* () {
      const history = new History.History()
      const run = history.open({ message: FactBuilders.message("Fix the failing test in src/main.ts", "📎 fix it") })
      const first = run.request()
      run.complete(first, FactBuilders.toolCallStep([{ id: "a", name: "read_file", input: { path: "src/main.ts" } }]))
      run.succeed(run.dispatch(first, "a"), FactBuilders.textOutput("export const main = 1"))
      run.steer("message-1", "also run the linter")
      const second = run.request()
      run.complete(second, FactBuilders.textStep("Fixed."))
      run.end()
      const source = yield* readSource(history)
      const prompt = buildMainPrompt({ systemPrompt: SYSTEM, source })
      expect(prompt).toEqual([
        system,
        user("Fix the failing test in src/main.ts"),
        {
          role: "assistant",
          parts: [{ kind: "tool_call", toolCallId: "a", toolName: "read_file", input: { path: "src/main.ts" }, providerExecuted: false }],
        },
        { role: "tool", results: [{ toolCallId: "a", toolName: "read_file", output: { type: "text", value: "export const main = 1" } }] },
        user("<user_query>\nalso run the linter\n</user_query>"),
        assistantText("Fixed."),
      ])
      const serialized = JSON.stringify(prompt)
      expect(serialized).not.toContain("📎 fix it")
      expect(serialized.split("<user_query>").length - 1).toBe(1)
    }))

  it.live("shows rejected and failed calls as error-text with their exact texts, in call order", () =>
    Effect.gen(function* () {
      const history = new History.History()
      const run = history.open()
      const step = run.request()
      const names = ["a", "b", "c", "d", "e", "f", "g"]
      run.complete(step, FactBuilders.toolCallStep(names.map((id) => ({ id, name: "write_file", input: { path: id } }))))
      run.reject(step, "a", { kind: "unavailable" })
      run.reject(step, "b", { kind: "invalid_input", message: "path: Expected string, got 3" })
      run.reject(step, "c", { kind: "policy_denied", message: "writes outside the workspace are denied" })
      run.reject(step, "d", { kind: "preparation_failed", message: "approval request failed" })
      run.reject(step, "e", { kind: "exclusive_conflict" })
      run.fail(run.dispatch(step, "f"), "EACCES: permission denied")
      run.reject(step, "g", { kind: "cancelled" })
      const answer = run.request()
      run.complete(answer, FactBuilders.textStep("Nothing was written."))
      run.end()
      const prompt = buildMainPrompt({ systemPrompt: SYSTEM, source: yield* readSource(history) })
      const texts = [
        "tool is unavailable",
        "path: Expected string, got 3",
        "writes outside the workspace are denied",
        "approval request failed",
        "tool conflicts with exclusive step execution",
        "EACCES: permission denied",
        "tool cancelled before dispatch; tool was not executed",
      ]
      expect(prompt[3]).toEqual({
        role: "tool",
        results: names.map((id, index) => ({
          toolCallId: id,
          toolName: "write_file",
          output: { type: "error-text", value: texts[index] },
        })),
      })
      expect(prompt).toHaveLength(5)
    }))

  it.live("reads a 300 KiB result frozen as failure as the projection failure text", () =>
    Effect.gen(function* () {
      const history = new History.History()
      const run = history.open()
      const step = run.request()
      run.complete(step, FactBuilders.toolCallStep([{ id: "big", name: "read_file" }, { id: "word", name: "read_file" }]))
      run.succeed(run.dispatch(step, "big"), FactBuilders.textOutput("x".repeat(300 * 1024)))
      run.succeed(run.dispatch(step, "word"), FactBuilders.jsonOutput("a JSON string reads as text"))
      run.end({ kind: "failed", class: "step_limit" })
      const prompt = buildMainPrompt({ systemPrompt: SYSTEM, source: yield* readSource(history) })
      expect(prompt[3]).toEqual({
        role: "tool",
        results: [
          {
            toolCallId: "big",
            toolName: "read_file",
            output: { type: "error-text", value: "The tool completed, but its model-visible result could not be projected safely." },
          },
          { toolCallId: "word", toolName: "read_file", output: { type: "text", value: "a JSON string reads as text" } },
        ],
      })
      expect(JSON.stringify(prompt)).not.toContain("xxxxxxxx")
    }))

  it.live("replaces archived results with the placeholder's model value, as error-text JSON for failures", () =>
    Effect.gen(function* () {
      const history = new History.History()
      const run = history.open()
      const step = run.request()
      run.complete(step, FactBuilders.toolCallStep([{ id: "ok", name: "read_file" }, { id: "bad", name: "run_command" }]))
      const settled = run.succeed(run.dispatch(step, "ok"), FactBuilders.textOutput("row\n".repeat(5_000)))
      const failedMessage = "error: ".repeat(2_000)
      const failed = run.fail(run.dispatch(step, "bad"), failedMessage)
      const settledFact = settled.event.fact
      if (settledFact.kind !== "tool_settled" || settledFact.outcome.kind !== "succeeded") throw new Error("expected a success")
      const okPlaceholder = Archive.prepare(settled.event.id, "ok", "read_file", {
        kind: "projection",
        projection: settledFact.outcome.projection,
      })
      const badPlaceholder = Archive.prepare(failed.event.id, "bad", "run_command", { kind: "failed", message: failedMessage })
      if (okPlaceholder === undefined || badPlaceholder === undefined) throw new Error("expected archivable results")
      run.archive(okPlaceholder)
      run.archive(badPlaceholder)
      const answer = run.request()
      run.complete(answer, FactBuilders.textStep("Read it."))
      run.end()
      const source = yield* readSource(history)
      expect(source.tail.filter((item) => item.kind === "archived")).toHaveLength(2)
      const prompt = buildMainPrompt({ systemPrompt: SYSTEM, source })
      const okValue = Archive.modelValue(okPlaceholder.identity, okPlaceholder.page)
      const badValue = Archive.modelValue(badPlaceholder.identity, badPlaceholder.page)
      expect(prompt[3]).toEqual({
        role: "tool",
        results: [
          { toolCallId: "ok", toolName: "read_file", output: { type: "json", value: okValue } },
          { toolCallId: "bad", toolName: "run_command", output: { type: "error-text", value: Canonical.stringify(badValue) } },
        ],
      })
      expect(okValue.kind).toBe("maka.archived_tool_result")
      expect(okValue.resourceRef).toBe(`maka://tool-result/${settled.event.id}`)
      expect(prompt[4]).toEqual(assistantText("Read it."))
    }))

  it.live("leaves out an interrupted step and its partial observed text", () =>
    Effect.gen(function* () {
      const history = new History.History()
      const run = history.open({ message: "Clean up the build folder." })
      const interrupted = run.request()
      run.observe(interrupted, { kind: "part_started", id: "0", textKind: "text" })
      run.observe(interrupted, { kind: "part_delta", id: "0", text: "I will now delete every" })
      run.interrupt(interrupted, "retryable_failure")
      const retried = run.request()
      run.complete(retried, FactBuilders.textStep("Which build folder?"))
      run.end()
      const prompt = buildMainPrompt({ systemPrompt: SYSTEM, source: yield* readSource(history) })
      expect(prompt).toEqual([system, user("Clean up the build folder."), assistantText("Which build folder?")])
      expect(JSON.stringify(prompt)).not.toContain("delete every")
    }))

  it.live("sends a mid-turn baseline as system, summary, the anchor opening verbatim, then the tail after coverage", () =>
    Effect.gen(function* () {
      const history = History.smallRun()
      const run = history.open({ message: "Now read the README." })
      const first = run.request()
      run.complete(first, FactBuilders.toolCallStep([{ id: "r", name: "read_file", input: { path: "README.md" } }]))
      run.succeed(run.dispatch(first, "r"), FactBuilders.textOutput("# Covered project title"))
      const summary = run.request({ purpose: "summary", stepId: "summary-1" })
      const summaryRequest = history.events[history.events.length - 1]!.event.fact
      if (summaryRequest.kind !== "model_requested") throw new Error("expected a request")
      run.complete(summary, FactBuilders.textStep(FactBuilders.VALID_SUMMARY))
      const second = run.request()
      run.complete(second, FactBuilders.toolCallStep([{ id: "t", name: "list_files", input: { path: "test" } }]))
      run.succeed(run.dispatch(second, "t"), FactBuilders.jsonOutput(["main.test.ts"]))
      run.checkpoint({
        mode: { kind: "mid_turn", anchorEventId: run.opening.event.id },
        coveredThrough: summaryRequest.sourceHighWater,
        sourceDigest: summaryRequest.sourceDigest,
        summary: { format: "sections_v1", text: FactBuilders.VALID_SUMMARY },
        summaryStepId: summary,
      })
      run.steer("message-1", "and the tests")
      const source = yield* readSource(history, { current: run.invocation.invocationId })
      const tail: ReadonlyArray<Prompt.PromptMessage> = [
        user("Now read the README."),
        {
          role: "assistant",
          parts: [{ kind: "tool_call", toolCallId: "t", toolName: "list_files", input: { path: "test" }, providerExecuted: false }],
        },
        { role: "tool", results: [{ toolCallId: "t", toolName: "list_files", output: { type: "json", value: ["main.test.ts"] } }] },
        user("<user_query>\nand the tests\n</user_query>"),
      ]
      const main = buildMainPrompt({ systemPrompt: SYSTEM, source })
      expect(main).toEqual([system, user(`Continuation summary:\n${FactBuilders.VALID_SUMMARY}`), ...tail])
      // The summary message is sealed and the same object at the next step, as the system message is.
      expect(Canonical.isSealed(main[1])).toBe(true)
      expect(buildMainPrompt({ systemPrompt: SYSTEM, source })[1]).toBe(main[1])
      expect(JSON.stringify(main)).not.toContain("Covered project title")
      expect(buildSummaryPrompt({ source })).toEqual([
        user(
          `Previous continuation summary:\n${FactBuilders.VALID_SUMMARY}\n\nUpdate it using the newer conversation events that follow.`,
        ),
        ...tail,
      ])
    }))

  it.live("appends the prior-unknown notice and shows the unknown call as outcome_unknown error-text", () =>
    Effect.gen(function* () {
      const history = new History.History()
      const crashed = history.open({ message: "Deploy the site." })
      const step = crashed.request()
      crashed.complete(
        step,
        FactBuilders.toolCallStep([
          { id: "deploy", name: "run_command", input: { command: "deploy" } },
          { id: "notify", name: "send_message" },
        ]),
      )
      const operation = crashed.dispatch(step, "deploy")
      crashed.reject(step, "notify", { kind: "cancelled" })
      crashed.end({ kind: "failed", class: "outcome_unknown" })
      const next = history.open({ message: "Did the deploy happen?" })
      const source = yield* readSource(history, { current: next.invocation.invocationId, manual: true })
      expect(source.unknownOperations).toEqual([{ name: "run_command", operationId: operation }])
      const notice =
        "Prior execution was interrupted after these tools were dispatched. Their results were never recorded; effects may or may not have happened. Inspect current state before repeating any action. This is historical uncertainty, not a new tool result:" +
        `\n- run_command (operation ${operation})`
      expect(priorUnknownNotice(source)).toBe(notice)
      const prompt = buildMainPrompt({ systemPrompt: SYSTEM, priorUnknown: true, source })
      expect(prompt).toEqual([
        { role: "system", content: `${SYSTEM}\n\n${notice}` },
        user("Deploy the site."),
        {
          role: "assistant",
          parts: [
            { kind: "tool_call", toolCallId: "deploy", toolName: "run_command", input: { command: "deploy" }, providerExecuted: false },
            { kind: "tool_call", toolCallId: "notify", toolName: "send_message", input: {}, providerExecuted: false },
          ],
        },
        {
          role: "tool",
          results: [
            {
              toolCallId: "deploy",
              toolName: "run_command",
              output: {
                type: "error-text",
                value:
                  "outcome_unknown: this tool was dispatched but its result was never recorded; its effects may or may not have happened.",
              },
            },
            {
              toolCallId: "notify",
              toolName: "send_message",
              output: { type: "error-text", value: "tool cancelled before dispatch; tool was not executed" },
            },
          ],
        },
        user("Did the deploy happen?"),
      ])
      expect(buildMainPrompt({ notice, source })[0]).toEqual({ role: "system", content: notice })
    }))

  it.live("invents no result for a dispatched call whose invocation was not sealed outcome_unknown", () =>
    Effect.gen(function* () {
      const history = new History.History()
      const run = history.open()
      const step = run.request()
      run.complete(step, FactBuilders.toolCallStep([{ id: "slow", name: "run_command" }]))
      const operation = run.dispatch(step, "slow")
      const source = yield* readSource(history, { current: run.invocation.invocationId })
      expect(buildMainPrompt({ source })).toEqual([
        user("Describe this repository."),
        {
          role: "assistant",
          parts: [{ kind: "tool_call", toolCallId: "slow", toolName: "run_command", input: {}, providerExecuted: false }],
        },
      ])
      expect(unresolvedOperations(source)).toEqual([operation])
    }))

  it.live("keeps thinking and text parts in order, drops empty texts, and puts tool calls last", () =>
    Effect.gen(function* () {
      const signed = { anthropic: { signature: "signature-1" }, maka: { routeIdentity: ROUTE } }
      const redacted = { anthropic: { redactedData: "opaque" }, maka: { routeIdentity: ROUTE } }
      const history = new History.History()
      const run = history.open()
      const step = run.request()
      run.complete(step, {
        parts: [
          { kind: "text", textKind: "thinking", text: "First list the files.", providerOptions: signed },
          { kind: "text", textKind: "text", text: "" },
          { kind: "text", textKind: "text", text: "Listing." },
          FactBuilders.toolCallPart({ id: "c", name: "list_files" }),
          { kind: "text", textKind: "thinking", text: "" },
          { kind: "text", textKind: "thinking", text: "", providerOptions: redacted },
          { kind: "text", textKind: "text", text: "Then read." },
          { kind: "text", textKind: "thinking", text: "Unsigned reasoning." },
        ],
        finishReason: "tool-calls",
        usage: FactBuilders.usage(30, 9),
      })
      run.succeed(run.dispatch(step, "c"), FactBuilders.textOutput("README.md"))
      run.end({ kind: "failed", class: "step_limit" })
      const prompt = buildMainPrompt({ source: yield* readSource(history) })
      expect(prompt[1]).toEqual({
        role: "assistant",
        parts: [
          { kind: "thinking", text: "First list the files.", providerOptions: signed },
          { kind: "text", text: "Listing." },
          { kind: "thinking", text: "", providerOptions: redacted },
          { kind: "text", text: "Then read." },
          { kind: "thinking", text: "Unsigned reasoning." },
          { kind: "tool_call", toolCallId: "c", toolName: "list_files", input: {}, providerExecuted: false },
        ],
      })
      expect(prompt[2]).toEqual({ role: "tool", results: [{ toolCallId: "c", toolName: "list_files", output: { type: "text", value: "README.md" } }] })
    }))

  it("projects nothing for openings other than messages, and omits an empty completion", () => {
    const history = new History.History()
    const source = History.smallRun()
    const sourceRun = source.events[0]!.event.invocation
    const run = history.open({
      input: {
        kind: "continuation",
        claim: {
          id: "claim-1",
          source: { invocation: sourceRun, highWater: 8, digest: FactBuilders.digestOf("run") },
          base: { highWater: 0, digest: FactBuilders.digestOf("base") },
          replay: { version: 1, digest: FactBuilders.digestOf("replay"), routeIdentity: ROUTE },
        },
        requestFingerprint: FactBuilders.digestOf("fingerprint"),
      },
      turnId: "turn-9",
      runId: "run-9",
      invocationId: "invocation-9",
    })
    const step = run.request()
    run.complete(step, { parts: [{ kind: "text", textKind: "text", text: "" }], finishReason: "stop", usage: {} })
    const last = run.request()
    run.complete(last, FactBuilders.textStep("Continuing."))
    expect(buildMainPrompt({ systemPrompt: SYSTEM, source: handSource(history.events) })).toEqual([
      system,
      assistantText("Continuing."),
    ])
  })
})

describe("buildSummaryPrompt", () => {
  it.live("has no system message and starts with the conversation when there is no baseline", () =>
    Effect.gen(function* () {
      const source = yield* readSource(History.smallRun())
      const prompt = buildSummaryPrompt({ source })
      expect(prompt.some((message) => message.role === "system")).toBe(false)
      expect(prompt).toEqual(buildMainPrompt({ source }))
      expect(prompt[0]).toEqual(user("What is in this repository?"))
    }))
})

const selected = (
  usage: { readonly inputTokens?: number; readonly outputTokens?: number },
  overrides: Partial<Extract<EventLog.LatestMainContext, { readonly kind: "selected" }>> = {},
): EventLog.LatestMainContext => ({
  kind: "selected",
  projectionCurrent: true,
  sequence: 7,
  recordedAt: 1,
  modelId: "test-model",
  connectionId: "connection-1",
  usage,
  routeIdentity: ROUTE,
  ...overrides,
})

const route = { routeIdentity: ROUTE, connectionId: "connection-1", modelId: "test-model" } as const
const windowContext = (modelContextWindow: number) => ({ providerId: "provider-1", modelContextWindow })

describe("outputLimit", () => {
  it("caps the limit by the window left after the retained usage and the reserve", () => {
    expect(
      outputLimit({ ...route, mainOutputLimit: 200_000, context: windowContext(200_000), latestMain: selected({ inputTokens: 60, outputTokens: 10 }) }),
    ).toBe(191_930)
    const retained = selected({ inputTokens: 90_000, outputTokens: 10_000 })
    expect(outputLimit({ ...route, mainOutputLimit: 128_000, context: windowContext(200_000), latestMain: retained })).toBe(92_000)
    expect(
      outputLimit({ ...route, mainOutputLimit: 128_000, context: windowContext(200_000), latestMain: retained, thinkingBudget: 1_024 }),
    ).toBe(90_976)
  })

  it("never goes above the limit nor below min(limit, 8,000)", () => {
    const small = selected({ inputTokens: 10 })
    expect(outputLimit({ ...route, mainOutputLimit: 4_000, context: windowContext(200_000), latestMain: small })).toBe(4_000)
    const full = selected({ inputTokens: 199_000, outputTokens: 500 })
    expect(outputLimit({ ...route, mainOutputLimit: 64_000, context: windowContext(200_000), latestMain: full })).toBe(8_000)
    expect(outputLimit({ ...route, mainOutputLimit: 3_000, context: windowContext(200_000), latestMain: full })).toBe(3_000)
  })

  it("never goes at or below a thinking budget the limit is above: Anthropic refuses such a request", () => {
    const full = selected({ inputTokens: 180_000 })
    // What the window leaves (12,000 less the 12,000 budget) is below the budget: the floor is the budget + 1.
    expect(outputLimit({ ...route, mainOutputLimit: 16_000, context: windowContext(200_000), latestMain: full, thinkingBudget: 12_000 })).toBe(12_001)
    // A budget below 8,000 leaves the floor of min(limit, 8,000).
    const fuller = selected({ inputTokens: 195_000 })
    expect(outputLimit({ ...route, mainOutputLimit: 16_000, context: windowContext(200_000), latestMain: fuller, thinkingBudget: 1_024 })).toBe(8_000)
    // Never above the limit.
    expect(outputLimit({ ...route, mainOutputLimit: 9_000, context: windowContext(200_000), latestMain: full, thinkingBudget: 12_000 })).toBe(9_000)
  })

  it("is the configured limit, or 8,000, without a window, a known input or a matching latest main", () => {
    const latestMain = selected({ inputTokens: 150_000, outputTokens: 1_000 })
    expect(outputLimit({ ...route, latestMain })).toBe(8_000)
    expect(outputLimit({ ...route, mainOutputLimit: 100_000, latestMain })).toBe(100_000)
    const context = windowContext(200_000)
    expect(outputLimit({ ...route, mainOutputLimit: 100_000, context, latestMain: selected({ outputTokens: 10 }) })).toBe(100_000)
    expect(outputLimit({ ...route, mainOutputLimit: 100_000, context, latestMain: { kind: "trace_unavailable" } })).toBe(100_000)
    expect(outputLimit({ ...route, routeIdentity: FactBuilders.digestOf("other"), mainOutputLimit: 100_000, context, latestMain })).toBe(100_000)
    expect(outputLimit({ ...route, modelId: "other-model", mainOutputLimit: 100_000, context, latestMain })).toBe(100_000)
    expect(outputLimit({ ...route, connectionId: "connection-2", mainOutputLimit: 100_000, context, latestMain })).toBe(100_000)
    expect(outputLimit({ ...route, baselineId: FactBuilders.eventId(9), mainOutputLimit: 100_000, context, latestMain })).toBe(100_000)
    const stale = selected({ inputTokens: 150_000 }, { projectionCurrent: false })
    expect(outputLimit({ ...route, mainOutputLimit: 100_000, context, latestMain: stale })).toBe(100_000)
    expect(outputLimit({ ...route, mainOutputLimit: 100_000, context, latestMain })).toBe(41_000)
  })
})

describe("compactionDue", () => {
  const declared = { providerId: "provider-1", declaredWindow: 100_000 }

  it("is due when a matching latest main's input, or input plus known output, reaches the declared window", () => {
    expect(compactionDue({ ...route, context: declared, latestMain: selected({ inputTokens: 100_000 }) })).toBe(true)
    expect(compactionDue({ ...route, context: declared, latestMain: selected({ inputTokens: 99_000, outputTokens: 1_000 }) })).toBe(true)
    expect(compactionDue({ ...route, context: declared, latestMain: selected({ inputTokens: 99_000, outputTokens: 999 }) })).toBe(false)
    expect(compactionDue({ ...route, context: declared, latestMain: selected({ inputTokens: 99_999 }) })).toBe(false)
    const baselineId = FactBuilders.eventId(4)
    const onBaseline = selected({ inputTokens: 120_000 }, { checkpointEventId: baselineId })
    expect(compactionDue({ ...route, baselineId, context: declared, latestMain: onBaseline })).toBe(true)
  })

  it("is never due without a declared window, a positive input or a matching latest main", () => {
    const latestMain = selected({ inputTokens: 500_000 })
    expect(compactionDue({ ...route, latestMain })).toBe(false)
    expect(compactionDue({ ...route, context: windowContext(1_000), latestMain })).toBe(false)
    expect(compactionDue({ ...route, context: { ...declared, declaredWindow: 1 }, latestMain: selected({ inputTokens: 0, outputTokens: 5 }) })).toBe(false)
    expect(compactionDue({ ...route, context: declared, latestMain: selected({ outputTokens: 200_000 }) })).toBe(false)
    expect(compactionDue({ ...route, context: declared, latestMain: { kind: "no_completed_request" } })).toBe(false)
    expect(compactionDue({ ...route, routeIdentity: FactBuilders.digestOf("other"), context: declared, latestMain })).toBe(false)
    expect(compactionDue({ ...route, baselineId: FactBuilders.eventId(4), context: declared, latestMain })).toBe(false)
    expect(compactionDue({ ...route, context: declared, latestMain: selected({ inputTokens: 500_000 }, { projectionCurrent: false }) })).toBe(false)
  })
})

describe("inputDigest", () => {
  it("digests the route-projected prompt exactly as Digest.modelInput does", () => {
    const signed = { anthropic: { signature: "signature-1" }, maka: { routeIdentity: ROUTE } }
    const prompt: Prompt.Prompt = [
      system,
      user("Think first."),
      { role: "assistant", parts: [{ kind: "thinking", text: "Reasoning.", providerOptions: signed }, { kind: "text", text: "Done." }] },
    ]
    const tools: ReadonlyArray<Prompt.ToolDefinition> = [{ name: "list_files", description: "Lists files.", inputSchema: { type: "object" } }]
    const sameRoute = projectPrompt("anthropic", ROUTE, prompt)
    const otherRoute = projectPrompt("anthropic", FactBuilders.digestOf("other"), prompt)
    expect(sameRoute).toEqual(prompt)
    expect(otherRoute[2]).toEqual(assistantText("Done."))
    const digest = inputDigest(sameRoute, tools, { temperature: 0 }, 8_000)
    expect(digest).toBe(
      Digest.modelInput({ prompt: sameRoute, tools, providerOptions: { temperature: 0 }, maxOutputTokens: 8_000 }),
    )
    expect(digest).toBe(
      Digest.tagged("maka.model-input.v1", {
        projection: "maka.model-history.v1",
        prompt: sameRoute,
        tools,
        providerOptions: { temperature: 0 },
        maxOutputTokens: 8_000,
      }),
    )
    expect(inputDigest(otherRoute, tools, { temperature: 0 }, 8_000)).not.toBe(digest)
    expect(inputDigest(sameRoute, tools, { temperature: 0 }, 8_001)).not.toBe(digest)
    expect(Prompts.CONTINUATION_SUMMARY_PREFIX).toBe("Continuation summary:\n")
  })
})

describe("SourceProjector", () => {
  const events = History.smallRun().events
  const projected = (source: EventLog.ModelContextSource) => Canonical.stringify(projectSource(source).messages)
  const through = (count: number, overrides: Partial<EventLog.ModelContextSource> = {}) => handSource(events.slice(0, count), overrides)

  it("extends a projection with what the next source adds, and projects whole a source that does not extend it", () => {
    const projector = new SourceProjector()
    // Sources of consecutive requests: each one's tail the one before's (the same items), then more.
    const grown = [2, 4, events.length].map((count) => {
      const source = through(count)
      return { source, messages: Canonical.stringify(projector.project(source).messages) }
    })
    for (const { source, messages } of grown) expect(messages).toBe(projected(source))
    expect(JSON.parse(grown[0]!.messages)).toHaveLength(1)
    expect(JSON.parse(grown[2]!.messages).length).toBeGreaterThan(JSON.parse(grown[1]!.messages).length)
    // A shorter tail: a new baseline covered the start of the history; or a source read to an
    // earlier high water, whose tail is the start of the one before.
    const shorter = handSource(events.slice(2))
    expect(Canonical.stringify(projector.project(shorter).messages)).toBe(projected(shorter))
    projector.project(through(events.length))
    expect(Canonical.stringify(projector.project(through(3)).messages)).toBe(projected(through(3)))
  })

  it("projects whole a source with the same tail under a mid-turn baseline, whose anchor comes first", () => {
    const projector = new SourceProjector()
    const tail = through(events.length)
    projector.project(tail)
    const anchor = events[0]!
    const checkpoint = {
      mode: { kind: "mid_turn" as const, anchorEventId: anchor.event.id },
      coveredThrough: 0,
      sourceDigest: FactBuilders.digestOf("covered"),
      summary: { format: "sections_v1" as const, text: FactBuilders.VALID_SUMMARY },
      summaryStepId: "summary-step",
    }
    const anchored = { ...tail, baseline: { eventId: "checkpoint-1", sequence: 0, checkpoint }, anchor }
    const messages = projector.project(anchored).messages
    expect(Canonical.stringify(messages)).toBe(projected(anchored))
    expect(messages.length).toBe(projectSource(tail).messages.length + 1)
  })
})
