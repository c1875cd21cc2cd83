/**
 * Continuation scenarios of docs/engine.md §5.9 (SEMANTICS scenarios 52–55): a new turn claims a
 * sealed run's exact boundary and replays only its lineage; the claim is checked without writing,
 * one claim per boundary, and refused with a reason a caller can act on. Real SQLite files and the
 * scripted server on loopback.
 */
import { assert, describe, it } from "@effect/vitest"
import { Codec, Digest } from "@maka/facts"
import { FactBuilders, History, OpenAiSse, Respond, type ScriptedServer } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Effect, Result } from "effect"
import * as EngineError from "../src/EngineError.ts"
import type * as Engine from "../src/Engine.ts"
import * as fs from "node:fs"
import * as path from "node:path"
import { answer, echoCall, mainEntry, summaryAnswer, summaryEntry, summaryText } from "./support/compaction.ts"
import { expectFrozenSources, factsOf, kinds, reopen } from "./support/harness.ts"
import { catalog, echoTool, input, setup, type Effects, type Setup } from "./support/setup.ts"
import type { EventLog } from "@maka/event-log"

type Shape = EventLog.EventLogShape

/** A stream that shows some text, then fails with a provider error no retry fixes. */
const failsAfterText = (text: string) =>
  Respond.sse([
    OpenAiSse.role(),
    OpenAiSse.text(text),
    OpenAiSse.error("The request is invalid.", { type: "invalid_request_error", code: "invalid_request" }),
  ])

/**
 * The `inputDigest` of a request recomputed from what went on the wire (an OpenAI-compatible body)
 * over the documented input (docs/log-format.md §2.1, docs/engine.md §5.5): the tagged digest
 * `maka.model-input.v1` of `{projection: "maka.model-history.v1", prompt, tools, providerOptions,
 * maxOutputTokens}`. The wire does not say a tool result's output type, so `outputType` gives it
 * (from the log's facts, by the projection table of docs/engine.md §5.5).
 */
const wireInputDigest = (
  request: ScriptedServer.RecordedRequest,
  outputType: (toolCallId: string) => "text" | "json" | "error-text",
): string => {
  interface WireCall {
    readonly id: string
    readonly function: { readonly name: string; readonly arguments: string }
  }
  interface WireMessage {
    readonly role: string
    readonly content?: string | null
    readonly reasoning_content?: string
    readonly tool_calls?: ReadonlyArray<WireCall>
    readonly tool_call_id?: string
  }
  interface WireTool {
    readonly function: { readonly name: string; readonly description: string; readonly parameters: unknown }
  }
  const { model: _model, messages, max_tokens, stream: _stream, stream_options: _options, tools, ...providerOptions } = request.json as {
    readonly model: string
    readonly messages: ReadonlyArray<WireMessage>
    readonly max_tokens: number
    readonly stream: boolean
    readonly stream_options: unknown
    readonly tools?: ReadonlyArray<WireTool>
  }
  const names = new Map<string, string>()
  const prompt: Array<unknown> = []
  for (const message of messages) {
    if (message.role === "system" || message.role === "user") {
      prompt.push({ role: message.role, content: message.content })
    } else if (message.role === "assistant") {
      // No thinking in these runs: its order among the text parts is not on the wire.
      assert.isUndefined(message.reasoning_content)
      const calls = message.tool_calls ?? []
      for (const call of calls) names.set(call.id, call.function.name)
      prompt.push({
        role: "assistant",
        parts: [
          ...(message.content === "" || message.content == null ? [] : [{ kind: "text", text: message.content }]),
          ...calls.map((call) => ({
            kind: "tool_call",
            toolCallId: call.id,
            toolName: call.function.name,
            input: JSON.parse(call.function.arguments) as unknown,
            providerExecuted: false,
          })),
        ],
      })
    } else {
      const toolCallId = message.tool_call_id!
      const type = outputType(toolCallId)
      const result = { toolCallId, toolName: names.get(toolCallId), output: { type, value: type === "json" ? JSON.parse(message.content!) : message.content } }
      const last = prompt[prompt.length - 1] as { role?: string; results?: Array<unknown> } | undefined
      if (last?.role === "tool") last.results!.push(result)
      else prompt.push({ role: "tool", results: [result] })
    }
  }
  return Digest.tagged("maka.model-input.v1", {
    projection: "maka.model-history.v1",
    prompt,
    tools: (tools ?? []).map((tool) => ({ name: tool.function.name, description: tool.function.description, inputSchema: tool.function.parameters })),
    providerOptions,
    maxOutputTokens: max_tokens,
  })
}

let continuations = 0
const continueInput = (context: Setup, source: Engine.RunResult["invocation"], tools: ToolCatalog.ToolCatalog): Engine.ContinueInput => {
  continuations++
  return {
    source,
    invocation: FactBuilders.invocation({
      turnId: `continued-turn-${continuations}`,
      runId: `continued-run-${continuations}`,
      invocationId: `continued-invocation-${continuations}`,
    }),
    model: context.model,
    configuration: FactBuilders.configuration({ cwd: context.workspace, model: FactBuilders.modelBinding({ model: "test-model" }) }),
    tools,
  }
}

/** A source run that echoes once, then fails after showing partial text; then an unrelated run. */
const failedSourceThenAnother = (context: Setup, effects: Effects) =>
  Effect.gen(function* () {
    const source = yield* context.engine.run(input(context, "Echo alpha.", catalog(effects)))
    assert.strictEqual(source.outcome.kind, "failed")
    yield* context.engine.run(input(context, "UNRELATED-LATER-RUN", catalog(effects)))
    return source
  })

/**
 * The source of `failedSourceThenAnother` with the server ready to answer one continuation, and the
 * session's event count before anything continues it.
 */
const sourceToContinue = Effect.gen(function* () {
  const context = yield* setup({
    script: [mainEntry(echoCall("call-1", "alpha")), mainEntry(failsAfterText("x")), mainEntry(answer("Unrelated.")), mainEntry(answer("Continued."))],
  })
  const effects: Effects = { ran: [] }
  const source = yield* failedSourceThenAnother(context, effects)
  const before = (yield* context.log.events("session-1")).length
  return { context, effects, source, before }
})

/**
 * The source of `failedSourceThenAnother` continued to completion, the server answering its
 * continuation's request (and then `after`'s entries).
 */
const continuedSource = (after: ReadonlyArray<ReturnType<typeof mainEntry>> = []) =>
  Effect.gen(function* () {
    const context = yield* setup({
      script: [
        mainEntry(echoCall("call-1", "alpha")),
        mainEntry(failsAfterText("PARTIAL-INTERRUPTED-TEXT")),
        mainEntry(answer("Unrelated answer.")),
        mainEntry(answer("Continued: alpha was echoed.")),
        ...after,
      ],
    })
    const effects: Effects = { ran: [] }
    const source = yield* failedSourceThenAnother(context, effects)
    const running = yield* context.engine.continueRun(continueInput(context, source.invocation, catalog(effects)))
    assert.deepStrictEqual((yield* running.wait).outcome, { kind: "completed" })
    return { context, effects, source, running }
  })

describe("a continuation's retry (docs/engine.md §5.6)", () => {
  /** The source, then a continuation whose first attempt the provider refuses for now (503), with `wrapLog` around the log. */
  const continuedThroughRetry = (wrapLog?: (log: Shape) => Shape) =>
    Effect.gen(function* () {
      const context = yield* setup(
        {
          script: [
            mainEntry(echoCall("call-1", "alpha")),
            mainEntry(failsAfterText("x")),
            mainEntry(answer("Unrelated.")),
            mainEntry(Respond.json(503, Respond.openAiError("The server is busy.", { type: "server_error" }))),
            mainEntry(answer("Continued after a retry.")),
          ],
        },
        { backoffBaseMs: 5, backoffMaxMs: 40 },
        {},
        wrapLog === undefined ? {} : { wrapLog },
      )
      const effects: Effects = { ran: [] }
      const source = yield* failedSourceThenAnother(context, effects)
      const running = yield* context.engine.continueRun(continueInput(context, source.invocation, catalog(effects)))
      return { context, result: yield* Effect.result(running.wait) }
    })

  it.live("re-reads its context before the retry and re-sends the frozen request when the log still gives it", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { context, result } = yield* continuedThroughRetry()
        assert.deepStrictEqual(Result.isSuccess(result) ? result.success.outcome : result.failure.message, { kind: "completed" })
        const requests = context.server.requests()
        assert.strictEqual(requests.length, 5)
        assert.strictEqual(requests[4]!.body, requests[3]!.body)
      }),
    ))

  it.live("is refused ReconciliationRequired when its context, read again, no longer gives its frozen request", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The log's re-read of a request's source, from its evidence, loses the opening message of
        // the source run: the log no longer gives the request the continuation froze.
        const { context, result } = yield* continuedThroughRetry((log) => ({
          ...log,
          readFrozenModelContext: (evidence, limits) =>
            Effect.map(log.readFrozenModelContext(evidence, limits), (source) => ({
              ...source,
              tail: source.tail.filter((item) => !(item.kind === "canonical" && item.stored.event.fact.kind === "invocation_opened")),
            })),
        }))
        assert.deepStrictEqual(Result.isSuccess(result) ? result.success.outcome : result.failure.message, {
          kind: "failed",
          class: "reconciliation_required",
          message: EngineError.RETRY_CHANGED_INPUT_MESSAGE,
        })
        // The retry was never sent.
        assert.strictEqual(context.server.requests().length, 4)
      }),
    ))
})

describe("continuation", () => {
  it.live("replays only the source's lineage, without later runs or interrupted text, and its claim matches the first request (scenario 52)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { context, effects, source, running } = yield* continuedSource()
        assert.deepStrictEqual(effects.ran, ["alpha"])
        const body = context.server.requests()[3]!.body
        assert.include(body, "Echo alpha.")
        assert.include(body, "echo: alpha")
        assert.notInclude(body, "UNRELATED-LATER-RUN")
        assert.notInclude(body, "PARTIAL-INTERRUPTED-TEXT")
        const events = yield* context.log.events("session-1")
        const own = events.filter((stored) => stored.event.invocation.invocationId === running.invocation.invocationId)
        const opening = own[0]!.event.fact
        if (opening.kind !== "invocation_opened" || opening.input.kind !== "continuation") return assert.fail("a continuation opening")
        assert.deepStrictEqual(opening.input.claim.source.invocation, source.invocation)
        // A new turn, run and invocation in the same session.
        const identity = own[0]!.event.invocation
        assert.strictEqual(identity.sessionId, source.invocation.sessionId)
        assert.notStrictEqual(identity.turnId, source.invocation.turnId)
        assert.notStrictEqual(identity.runId, source.invocation.runId)
        assert.notStrictEqual(identity.invocationId, source.invocation.invocationId)
        assert.strictEqual(factsOf(own, "model_requested")[0]!.inputDigest, opening.input.claim.replay.digest)
        assert.strictEqual(factsOf(own, "model_requested")[0]!.sourceScope.kind, "lineage")
        // A lineage-scoped request binds its effective source, also with no archive applied (docs/engine.md §5.4).
        const request = factsOf(own, "model_requested")[0]!
        assert.strictEqual(request.effectiveSourceDigest, Digest.effectiveSource(request.sourceDigest, []))
      }),
    ),
  )

  it.live("sends the claim's replay as its first request over a large result its source never archived: no prune before it", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [mainEntry(echoCall("call-1", "one")), mainEntry(echoCall("call-2", "small")), mainEntry(answer("Continued."))],
        })
        const effects: Effects = { ran: [] }
        // The source is cancelled while its tool makes a result over a page: the source's next step,
        // which would archive it, never comes.
        const big = ToolCatalog.make([
          echoTool(effects, (value) =>
            value === "one" ? Effect.as(Effect.sleep("300 millis"), Tool.text(`${value} ${"x".repeat(200_000)}`)) : Effect.succeed(Tool.text(value)),
          ),
        ])
        const source = yield* context.engine.start(input(context, "Make it big.", big))
        yield* Effect.promise(() => context.server.request(0))
        yield* Effect.sleep("100 millis")
        yield* source.cancel
        const sealed = yield* source.wait
        assert.strictEqual(sealed.outcome.kind, "cancelled")
        assert.deepStrictEqual(factsOf(yield* context.log.events("session-1"), "tool_result_archived"), [])
        const checked = yield* context.engine.checkContinuation(continueInput(context, sealed.invocation, big))
        const running = yield* context.engine.continueRun(continueInput(context, sealed.invocation, big))
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "completed" })
        const own = (yield* context.log.events("session-1")).filter((stored) => stored.event.invocation.invocationId === running.invocation.invocationId)
        const opening = own[0]!.event.fact
        if (opening.kind !== "invocation_opened" || opening.input.kind !== "continuation") return assert.fail("a continuation opening")
        const first = factsOf(own, "model_requested")[0]!
        assert.strictEqual(first.inputDigest, opening.input.claim.replay.digest)
        assert.strictEqual(first.inputDigest, checked.replay.digest)
        // The steps after it carry the result archived: the prune it owed comes after its first request.
        assert.strictEqual(factsOf(own, "tool_result_archived").length, 1)
        const sizes = context.server.requests().slice(1).map((request) => request.body.length)
        assert.isAbove(sizes[0]!, 200_000)
        assert.isBelow(sizes.at(-1)!, 50_000)
      }),
    ),
  )

  it.live("holds steering queued before its first request for the next step: that request stays the claim's replay", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [mainEntry(echoCall("call-1", "one")), mainEntry(answer("Replayed.")), mainEntry(answer("Steered."))],
        })
        const effects: Effects = { ran: [] }
        // One step: the source ends at its step limit after its tool, a boundary a continuation takes.
        const source = yield* context.engine.run(input(context, "Echo one.", catalog(effects), { maxSteps: 1 }))
        assert.strictEqual(source.outcome.kind, "failed")
        const running = yield* context.engine.continueRun(continueInput(context, source.invocation, catalog(effects)))
        yield* running.steer("STEER-ONE")
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "completed" })
        const own = (yield* context.log.events("session-1")).filter((stored) => stored.event.invocation.invocationId === running.invocation.invocationId)
        const opening = own[0]!.event.fact
        if (opening.kind !== "invocation_opened" || opening.input.kind !== "continuation") return assert.fail("a continuation opening")
        const requests = factsOf(own, "model_requested")
        assert.strictEqual(requests.length, 2)
        assert.strictEqual(requests[0]!.inputDigest, opening.input.claim.replay.digest)
        assert.notInclude(context.server.requests()[1]!.body, "STEER-ONE")
        assert.include(context.server.requests()[2]!.body, "STEER-ONE")
        assert.strictEqual(factsOf(own, "message_steered").length, 1)
      }),
    ),
  )

  it.live("refuses steering from the start when its first step is its last, and completes", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(echoCall("call-1", "one")), mainEntry(answer("Replayed."))] })
        const effects: Effects = { ran: [] }
        const source = yield* context.engine.run(input(context, "Echo one.", catalog(effects), { maxSteps: 1 }))
        assert.strictEqual(source.outcome.kind, "failed")
        const running = yield* context.engine.continueRun({ ...continueInput(context, source.invocation, catalog(effects)), maxSteps: 1 })
        const refused = yield* Effect.flip(running.steer("STEER-ONE"))
        assert.strictEqual(refused.reason._tag, "Busy")
        assert.strictEqual(refused.message, "the run is in its last step (maxSteps): no later step could deliver steering")
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "completed" })
      }),
    ),
  )

  it.live("a message run after a continuation reads the whole session again, not the continuation's lineage", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { context, effects } = yield* continuedSource([mainEntry(answer("The next turn."))])
        // The engine keeps a run's context for the session's next run only when it is the session's.
        const next = yield* context.engine.run(input(context, "THE-NEXT-MESSAGE", catalog(effects)))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
        const body = context.server.requests()[4]!.body
        assert.include(body, "UNRELATED-LATER-RUN")
        assert.include(body, "Continued: alpha was echoed.")
        assert.include(body, "THE-NEXT-MESSAGE")
        const events = yield* context.log.events("session-1")
        const request = factsOf(
          events.filter((stored) => stored.event.invocation.invocationId === next.invocation.invocationId),
          "model_requested",
        )[0]!
        assert.deepStrictEqual(request.sourceScope, { kind: "session", id: "session-1" })
        const hash = yield* context.log.sessionHash("session-1", request.sourceHighWater)
        assert.strictEqual(request.sourceDigest, hash.digest(request.sourceHighWater))
      }),
    ),
  )

  it.live("refuses a continuation that reuses the source's turn, run or invocation, or names another session or an invalid source, writing nothing (scenario 52)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { context, effects, source, before } = yield* sourceToContinue
        const { turnId, runId, invocationId } = source.invocation
        for (const [reuse, message] of [
          [{ turnId }, "a continuation opens a new turn, run and invocation"],
          [{ runId }, "a continuation opens a new turn, run and invocation"],
          [{ invocationId }, "a continuation opens a new turn, run and invocation"],
        ] as const) {
          const base = continueInput(context, source.invocation, catalog(effects))
          const refused = yield* Effect.flip(context.engine.continueRun({ ...base, invocation: { ...base.invocation, ...reuse } }))
          assert.strictEqual(refused.reason._tag, "ReconciliationRequired")
          assert.strictEqual(refused.message, message)
        }
        // A source in another session, or with an invalid id, is refused as input by the check and
        // the start alike (docs/engine.md §5.2).
        const other = continueInput(context, source.invocation, catalog(effects))
        for (const [input, message] of [
          [{ ...other, invocation: { ...other.invocation, sessionId: "session-2" } }, "source: a continuation continues a run of its own session"],
          [{ ...other, source: { ...source.invocation, sessionId: "session-2" } }, "source: a continuation continues a run of its own session"],
          [{ ...other, source: { ...source.invocation, runId: "" } }, undefined],
        ] as const) {
          for (const refused of [yield* Effect.flip(context.engine.checkContinuation(input)), yield* Effect.flip(context.engine.continueRun(input))]) {
            assert.strictEqual(refused.reason._tag, "InvalidInput", refused.message)
            if (message !== undefined) assert.strictEqual(refused.message, message)
            else assert.match(refused.message, /^source: [^]*runId/)
          }
        }
        // A request fingerprint that is not a digest, refused by the check and the start alike.
        for (const requestFingerprint of ["hello", ""]) {
          const named = { ...continueInput(context, source.invocation, catalog(effects)), requestFingerprint }
          for (const refused of [yield* Effect.flip(context.engine.checkContinuation(named)), yield* Effect.flip(context.engine.continueRun(named))]) {
            assert.strictEqual(refused.reason._tag, "InvalidInput")
            assert.strictEqual(refused.message, "requestFingerprint: a continuation's must be a digest (sha256: and 64 lowercase hex digits)")
          }
        }
        assert.strictEqual((yield* context.log.events("session-1")).length, before)
        assert.deepStrictEqual(yield* context.log.events("session-2"), [])
        // A new turn, run and invocation continue it.
        const continued = yield* context.engine.continueRun(continueInput(context, source.invocation, catalog(effects)))
        assert.deepStrictEqual((yield* continued.wait).outcome, { kind: "completed" })
      }),
    ),
  )

  it.live("checks without writing, lets one claim take a boundary, and refuses another workspace (scenario 53)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { context, effects, source, before } = yield* sourceToContinue
        // Another workspace is refused on a boundary no one has claimed, by the check and the start,
        // writing nothing.
        const elsewhere = continueInput(context, source.invocation, catalog(effects))
        const foreign = { ...elsewhere, configuration: { ...elsewhere.configuration, workspaceIdentity: "workspace:v1:00000000-0000-4000-8000-000000000000" } }
        for (const refused of [yield* Effect.flip(context.engine.checkContinuation(foreign)), yield* Effect.flip(context.engine.continueRun(foreign))]) {
          assert.strictEqual(refused.reason._tag, "ReconciliationRequired")
          assert.strictEqual(refused.message, "a continuation runs in the source's workspace")
        }
        assert.strictEqual((yield* context.log.events("session-1")).length, before)
        const claim = yield* context.engine.checkContinuation(continueInput(context, source.invocation, catalog(effects)))
        assert.deepStrictEqual(claim.source.invocation, source.invocation)
        assert.strictEqual((yield* context.log.events("session-1")).length, before)
        const first = yield* context.engine.continueRun(continueInput(context, source.invocation, catalog(effects)))
        assert.deepStrictEqual((yield* first.wait).outcome, { kind: "completed" })
        const after = (yield* context.log.events("session-1")).length
        // Without a caller's fingerprint the opening carries the claim's own (docs/engine.md §5.9).
        const opening = factsOf((yield* context.log.events("session-1")).slice(before), "invocation_opened")[0]!
        assert.isTrue(opening.input.kind === "continuation")
        if (opening.input.kind === "continuation") {
          assert.strictEqual(opening.input.requestFingerprint, Digest.tagged("maka.continuation-request.v1", opening.input.claim))
        }
        const second = yield* Effect.flip(context.engine.continueRun(continueInput(context, source.invocation, catalog(effects))))
        assert.strictEqual(second.reason._tag, "ReconciliationRequired")
        assert.strictEqual((yield* context.log.events("session-1")).length, after)
        // The check says so too: a checked claim is one the append would take.
        const checkedAgain = yield* Effect.flip(context.engine.checkContinuation(continueInput(context, source.invocation, catalog(effects))))
        assert.strictEqual(checkedAgain.reason._tag, "ReconciliationRequired")
        assert.strictEqual(checkedAgain.message, "the source boundary is already claimed")
      }),
    ),
  )

  it.live("refuses a source that ends with assistant text, and a replay that calls a tool the catalog lacks (scenario 54)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(answer("All done.")), mainEntry(echoCall("call-1", "alpha")), mainEntry(failsAfterText("x"))] })
        const effects: Effects = { ran: [] }
        const completed = yield* context.engine.run(input(context, "Say done.", catalog(effects)))
        const unstable = yield* Effect.flip(context.engine.checkContinuation(continueInput(context, completed.invocation, catalog(effects))))
        // The wording of docs/engine.md §5.9 steps 5 and 6, exactly.
        assert.strictEqual(unstable.reason._tag, "ReconciliationRequired")
        assert.strictEqual(unstable.message, "continuation requires stable user/tool replay boundaries")
        const failed = yield* context.engine.run(input(context, "Echo alpha.", catalog(effects)))
        const missing = yield* Effect.flip(context.engine.checkContinuation(continueInput(context, failed.invocation, ToolCatalog.make([]))))
        assert.strictEqual(missing.reason._tag, "ReconciliationRequired")
        assert.strictEqual(missing.message, "continuation requires an unavailable tool")
      }),
    ),
  )

  it.live("refuses to continue a compaction run, which has no boundary, naming it and writing nothing", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(echoCall("call-1", "one")), summaryEntry(summaryAnswer(summaryText("compacted")))] })
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "Echo one.", catalog(effects), { maxSteps: 1 }))
        const compaction = FactBuilders.invocation({ turnId: "compact-turn", runId: "compact-run", invocationId: "compact-invocation" })
        const compacted = yield* context.engine.compact({
          invocation: compaction,
          model: context.model,
          configuration: FactBuilders.configuration({ cwd: context.workspace, model: FactBuilders.modelBinding({ model: "test-model" }) }),
        })
        assert.strictEqual(compacted.outcome.kind, "context_compact_finished")
        const before = (yield* context.log.events("session-1")).length
        const continued = continueInput(context, compaction, catalog(effects))
        for (const refused of [yield* Effect.flip(context.engine.checkContinuation(continued)), yield* Effect.flip(context.engine.continueRun(continued))]) {
          assert.strictEqual(refused.reason._tag, "ReconciliationRequired")
          assert.strictEqual(refused.message, "a compaction run has no boundary to continue: continue the run before it")
        }
        assert.strictEqual((yield* context.log.events("session-1")).length, before)
      }),
    ),
  )

  it.live("refuses a check while a later unknown effect stands in the session (scenario 55)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(echoCall("call-1", "alpha")), mainEntry(failsAfterText("x"))] })
        const effects: Effects = { ran: [] }
        const failed = yield* context.engine.run(input(context, "Echo alpha.", catalog(effects)))
        const high = (yield* context.log.events("session-1")).at(-1)!.sequence
        // A later run whose dispatch was never settled: sealed outcome_unknown.
        const history = new History.History({ sessionId: "session-1", firstSequence: high + 1, firstId: 9_000 })
        const later = history.open({ message: "Later.", turnId: "later-turn", runId: "later-run", invocationId: "later-invocation" })
        const step = later.request()
        later.complete(step, FactBuilders.toolCallStep([{ id: "call-9", name: "echo", input: { value: "z" } }]))
        later.dispatch(step, "call-9")
        later.end({ kind: "failed", class: "outcome_unknown" })
        yield* context.log.appendBatch(history.written.map((written) => written.write))
        const refused = yield* Effect.flip(context.engine.checkContinuation(continueInput(context, failed.invocation, catalog(effects))))
        assert.strictEqual(refused.reason._tag, "ReconciliationRequired")
        assert.deepStrictEqual(kinds(yield* context.log.events("session-1")).filter((kind) => kind === "invocation_opened").length, 2)
      }),
    ),
  )

  it.live("on a backup of the log, every request's sourceDigest is recomputed from its scope cut at its high water, and its inputDigest from the request sent (scenario 8)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // Session-scoped main requests (one after a checkpoint), a summary request, and a lineage-scoped continuation.
        const { context, effects } = yield* continuedSource([summaryEntry(summaryAnswer(summaryText("all of it"))), mainEntry(answer("After."))])
        const compacted = yield* context.engine.compact({
          invocation: FactBuilders.invocation({ turnId: "compact-turn", runId: "compact-run", invocationId: "compact-invocation" }),
          model: context.model,
          configuration: FactBuilders.configuration({ cwd: context.workspace, model: FactBuilders.modelBinding({ model: "test-model" }) }),
        })
        assert.strictEqual(compacted.outcome.kind === "context_compact_finished" ? compacted.outcome.outcome.kind : "", "compacted")
        yield* context.engine.run(input(context, "And after the checkpoint?", catalog(effects)))
        const copy = path.join(path.dirname(context.file), "copy.sqlite")
        yield* context.log.backup(copy)
        assert.isTrue(fs.existsSync(copy))
        const reopened = yield* reopen(copy)
        const events = yield* reopened.log.events("session-1")
        const requests = factsOf(events, "model_requested")
        assert.deepStrictEqual(
          [...new Set(requests.map((fact) => `${fact.purpose}:${fact.sourceScope.kind}:${fact.checkpointEventId === undefined ? "" : "baseline"}`))].sort(),
          ["main:lineage:", "main:session:", "main:session:baseline", "summary:session:"],
        )
        // The selections of docs/log-format.md §3.6: a session's every event; a continuation's lineage
        // keeps what is at or below its claim's base and the events of its own and its source's runs.
        const lineageOf = (runId: string) => {
          const opening = events.find((stored) => stored.event.invocation.runId === runId && stored.event.fact.kind === "invocation_opened")!
          const fact = opening.event.fact
          if (fact.kind !== "invocation_opened" || fact.input.kind !== "continuation") return assert.fail("a continuation opening")
          const { claim } = fact.input
          const runs = new Set([runId, claim.source.invocation.runId])
          return (stored: (typeof events)[number]) => stored.sequence <= claim.base.highWater || runs.has(stored.event.invocation.runId)
        }
        for (const fact of requests) {
          const scope = fact.sourceScope
          const selected = scope.kind === "lineage" ? lineageOf(scope.runId) : () => true
          const hash = Digest.LogPrefixHash.start(scope)
          for (const stored of events) {
            if (stored.sequence <= fact.sourceHighWater && selected(stored)) hash.update(stored.sequence, Codec.encodeEventJson(stored.event))
          }
          assert.strictEqual(hash.digest(fact.sourceHighWater), fact.sourceDigest, `${fact.purpose} request ${fact.stepId}`)
        }
        // And the copy's log re-reads each request's source from its evidence, lineage included.
        assert.strictEqual(yield* expectFrozenSources(reopened.log, events), requests.length)
        // Each recorded inputDigest is the documented digest of the request that went on the wire
        // (the server saw the requests in the order they were recorded: no retry here).
        const outputType = (toolCallId: string): "text" | "json" | "error-text" => {
          const operations = factsOf(events, "tool_dispatched").filter((fact) => fact.call.toolCallId === toolCallId)
          assert.strictEqual(operations.length, 1, `one call ${toolCallId}`)
          const settled = factsOf(events, "tool_settled").find((fact) => fact.operationId === operations[0]!.operationId)!
          if (settled.outcome.kind === "failed" || settled.outcome.projection.kind === "failure") return "error-text"
          return settled.outcome.projection.kind
        }
        const wire = context.server.requests()
        assert.strictEqual(wire.length, requests.length)
        requests.forEach((fact, index) => {
          assert.strictEqual(wireInputDigest(wire[index]!, outputType), fact.inputDigest, `${fact.purpose} request ${fact.stepId}`)
        })
      }),
    ),
  )
})
