/**
 * The live context (src/internal/live-context.ts) against fresh reads, through the spy of
 * `support/live-comparison.ts`: every commit of a live invocation compared with a fresh
 * `readModelContext`, and every request the model received with one rebuilt from a fresh read at its
 * cut.
 */
import { assert, describe, it } from "@effect/vitest"
import type { EventLog } from "@maka/event-log"
import type { LanguageModel } from "@maka/model"
import type { Prompt } from "@maka/facts"
import { FactBuilders, History, OpenAiSse, Respond } from "@maka/testkit"
import { Effect } from "effect"
import * as v8 from "node:v8"
import * as vm from "node:vm"
import type * as Engine from "../src/Engine.ts"
import { kinds, recording } from "./support/harness.ts"
import { comparedSetup, comparing, newComparison, type Comparison, type Settings } from "./support/live-comparison.ts"
import { catalog, input, setup, type Effects } from "./support/setup.ts"

const usage = (prompt: number, completion: number) => ({ prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion })

describe("the live context", () => {
  it.live("equals a fresh readModelContext after every commit of a multi-step run, across turns", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const gate = Respond.gate()
        const comparison: Comparison = newComparison()
        let settings: Settings | undefined
        const context = yield* setup(
          {
            script: [
              // Turn 1, step 1: text, a good call and a schema-invalid one; held so steering can queue.
              Respond.hold(
                gate,
                Respond.sse(
                  OpenAiSse.response({
                    text: ["Let me ", "look."],
                    toolCalls: [
                      { id: "call-1", name: "echo", arguments: ['{"value":"a"}'] },
                      { id: "call-2", name: "echo", arguments: ['{"value":5}'] },
                    ],
                    usage: usage(1_000, 100),
                  }),
                ),
              ),
              // Step 2: a replay-safe failure after partial text, then the retry calls again.
              Respond.dropAfter([OpenAiSse.role(), OpenAiSse.text("half an ans")]),
              Respond.sse(
                OpenAiSse.response({
                  toolCalls: [{ id: "call-3", name: "echo", arguments: ['{"value":"b"}'] }],
                  usage: usage(2_000, 200),
                }),
              ),
              // Step 3: the answer.
              Respond.sse(OpenAiSse.response({ text: ["Done: a, b."], usage: usage(3_000, 300) })),
              // Turn 2: one more call, then the answer.
              Respond.sse(
                OpenAiSse.response({
                  toolCalls: [{ id: "call-4", name: "echo", arguments: ['{"value":"c"}'] }],
                  usage: usage(4_000, 400),
                }),
              ),
              Respond.sse(OpenAiSse.response({ text: ["And c."], usage: usage(5_000, 500) })),
            ],
          },
          undefined,
          {},
          { wrapLog: (log) => comparing(comparison, "session-1", () => settings!, log) },
        )
        const effects: Effects = { ran: [] }
        const spy = recording(context.model)
        const overrides = {
          model: spy.model,
          mainOutputLimit: 16_000,
          context: { providerId: "provider-1", modelContextWindow: 20_000 },
        }
        const first = input(context, "Echo a, then b.", catalog(effects), overrides)
        settings = first
        const running = yield* context.engine.start(first)
        yield* Effect.promise(() => context.server.request(0))
        yield* running.steer("also say done")
        gate.release()
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "completed" })
        const second = input(context, "Now c.", catalog(effects), overrides)
        settings = second
        assert.deepStrictEqual((yield* context.engine.run(second)).outcome, { kind: "completed" })

        assert.deepStrictEqual(effects.ran, ["a", "b", "c"])
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(kinds(events).slice(0, 14), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_settled:succeeded",
          "tool_rejected:invalid_input",
          "message_steered",
          "model_requested",
          "model_interrupted:retryable_failure",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_settled:succeeded",
          "model_requested",
        ])
        assert.deepStrictEqual(comparison.mismatches, [])
        assert.strictEqual(comparison.retries, 1)
        // Every commit between an opening and its terminal was compared: requests, dispatches and
        // settlements alone are one commit each, except a turn's first request, which rides its
        // opening's commit (docs/engine.md §5.3) and starts the comparison anew.
        const single = events.filter((stored) =>
          ["model_requested", "tool_dispatched", "tool_settled"].includes(stored.event.fact.kind),
        )
        const openings = events.filter((stored) => stored.event.fact.kind === "invocation_opened").length
        assert.strictEqual(openings, 2)
        assert.isAtLeast(comparison.snapshots, single.length - openings)
        // The requests the model received are exactly those rebuilt from fresh reads at their cuts.
        assert.strictEqual(spy.requests.length, 6)
        assert.deepStrictEqual(spy.requests, comparison.expected)
        // The output limit followed the latest main's usage, which the live context tracks.
        assert.deepStrictEqual(
          spy.requests.map((request) => request.maxOutputTokens),
          [16_000, 10_900, 10_900, 9_800, 8_700, 8_000],
        )
      }),
    ))

  it.live("takes an answer's completion that rides the next request's commit (steering queued during the answer) as the latest main", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const gate = Respond.gate()
        const { context, comparison, current } = yield* comparedSetup([
          Respond.hold(gate, Respond.sse(OpenAiSse.response({ text: ["Done."], usage: usage(3_000, 300) }))),
          Respond.sse(OpenAiSse.response({ text: ["Done, as steered."], usage: usage(4_000, 400) })),
        ])
        const spy = recording(context.model)
        const start = input(context, "Answer.", catalog({ ran: [] }), {
          model: spy.model,
          mainOutputLimit: 16_000,
          context: { providerId: "provider-1", modelContextWindow: 20_000 },
        })
        current.settings = start
        const running = yield* context.engine.start(start)
        yield* Effect.promise(() => context.server.request(0))
        yield* running.steer("and say it was steered")
        gate.release()
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        // The answer's completion committed with the steering and the request that delivers it.
        const answered = kinds(events).indexOf("model_completed")
        assert.deepStrictEqual(kinds(events).slice(answered, answered + 3), ["model_completed", "message_steered", "model_requested"])
        assert.deepStrictEqual(comparison.mismatches, [])
        assert.deepStrictEqual(spy.requests, comparison.expected)
        // 20,000 − (3,000 + 300) − the 8,000 reserved for the output: the answer's usage, not none.
        assert.deepStrictEqual(
          spy.requests.map((request) => request.maxOutputTokens),
          [16_000, 8_700],
        )
      }),
    ))

  it.live("equals a fresh readManualMessageContext under the prior-unknown policy", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const comparison: Comparison = newComparison()
        let settings: Settings | undefined
        const context = yield* setup(
          {
            script: [
              Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-5", name: "echo", arguments: ['{"value":"state"}'] }] })),
              Respond.sse(OpenAiSse.response({ text: ["The state is known now."] })),
            ],
          },
          undefined,
          {},
          { wrapLog: (log) => comparing(comparison, "session-1", () => settings!, log) },
        )
        const history = new History.History()
        const crashed = history.open({ turnId: "crashed-turn", runId: "crashed-run", invocationId: "crashed-invocation" })
        const step = crashed.request()
        crashed.complete(step, FactBuilders.toolCallStep([{ id: "call-1", name: "echo", input: { value: "one" } }]))
        crashed.dispatch(step, "call-1")
        yield* context.log.appendBatch(history.writes)
        yield* context.engine.recover
        const effects: Effects = { ran: [] }
        const spy = recording(context.model)
        const start = input(context, "Check the state.", catalog(effects), { model: spy.model, allowPriorUnknown: true })
        settings = start
        assert.deepStrictEqual((yield* context.engine.run(start)).outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, ["state"])
        assert.deepStrictEqual(comparison.mismatches, [])
        assert.isAtLeast(comparison.snapshots, 3)
        assert.strictEqual(spy.requests.length, 2)
        assert.deepStrictEqual(spy.requests, comparison.expected)
      }),
    ))
})

/** The log with every context read the engine makes counted. */
const counting = (log: EventLog.EventLogShape, count: () => void, countEvents: () => void = () => {}): EventLog.EventLogShape => ({
  ...log,
  readModelContextWithHash: (sessionId, request) => {
    count()
    return log.readModelContextWithHash(sessionId, request)
  },
  events: (sessionId, after, limit) => {
    countEvents()
    return log.events(sessionId, after, limit)
  },
})

/** Runs one turn that must complete; `started` sees its input first (the comparison's settings). */
const completedTurn =
  (context: Awaited<Effect.Success<ReturnType<typeof setup>>>, effects: Effects, model: LanguageModel.LanguageModelShape, started: (start: Engine.StartInput) => void) =>
  (message: string) =>
    Effect.gen(function* () {
      const start = input(context, message, catalog(effects), { model })
      started(start)
      assert.deepStrictEqual((yield* context.engine.run(start)).outcome, { kind: "completed" })
    })

describe("the context an engine keeps across runs", () => {
  it.live("carries a session's context into its next run, and reads the log again after an append it did not make", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const comparison: Comparison = newComparison()
        let settings: Settings | undefined
        let reads = 0
        let eventReads = 0
        const context = yield* setup(
          {
            script: [
              Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "echo", arguments: ['{"value":"a"}'] }] })),
              Respond.sse(OpenAiSse.response({ text: ["One."] })),
              Respond.sse(OpenAiSse.response({ text: ["Two."] })),
              Respond.sse(OpenAiSse.response({ text: ["Three."] })),
            ],
          },
          undefined,
          {},
          {
            wrapLog: (log) =>
              counting(
                comparing(comparison, "session-1", () => settings!, log),
                () => reads++,
                () => eventReads++,
              ),
          },
        )
        const effects: Effects = { ran: [] }
        const spy = recording(context.model)
        const turn = completedTurn(context, effects, spy.model, (start) => {
          settings = start
        })
        yield* turn("Echo a.")
        assert.strictEqual(reads, 1)
        const eventReadsBefore = eventReads
        yield* turn("Again.")
        assert.strictEqual(reads, 1, "the second turn starts from the kept context")
        // Its opening came right after the kept context's last event: nothing to look up in the log.
        assert.strictEqual(eventReads, eventReadsBefore, "the second turn reads no event of the log")
        // Another writer seals a run in the session: the kept context is stale and read again.
        const other = new History.History({ sessionId: "session-1", firstId: 50_000 })
        const foreign = other.open({ turnId: "other-turn", runId: "other-run", invocationId: "other-invocation", message: "A note from elsewhere." })
        foreign.end()
        yield* context.log.appendBatch(other.writes)
        yield* turn("Once more.")
        assert.strictEqual(reads, 2, "an append the engine did not make invalidates the kept context")
        assert.isAbove(eventReads, eventReadsBefore, "an opening after a gap looks up what came in between")
        assert.deepStrictEqual(comparison.mismatches, [])
        assert.strictEqual(spy.requests.length, 4)
        assert.deepStrictEqual(spy.requests, comparison.expected)
        const last = spy.requests[3]!.prompt
        assert.isTrue(last.some((message) => message.role === "user" && message.content === "A note from elsewhere."))
      }),
    ))
})

describe("the kept contexts' bounds (engineOptions keptContexts, keptContextBytes)", () => {
  const turns = (engineOptions: Partial<Engine.EngineOptions>) =>
    Effect.gen(function* () {
      let reads = 0
      const context = yield* setup(
        { script: ["One.", "Two.", "Three."].map((text) => Respond.sse(OpenAiSse.response({ text: [text] }))) },
        engineOptions,
        {},
        { wrapLog: (log) => counting(log, () => reads++) },
      )
      const effects: Effects = { ran: [] }
      const turn = completedTurn(context, effects, context.model, () => {})
      for (const message of ["First.", "Second.", "Third."]) yield* turn(message)
      return reads
    })

  it.live("keep a session's context by default, none with keptContexts 0 or a byte bound below its size", () =>
    Effect.scoped(
      Effect.gen(function* () {
        assert.strictEqual(yield* turns({}), 1)
        assert.strictEqual(yield* turns({ keptContexts: 0 }), 3)
        assert.strictEqual(yield* turns({ keptContextBytes: 1 }), 3)
        assert.strictEqual(yield* turns({ keptContexts: 1, keptContextBytes: 8 * 1024 * 1024 }), 1)
      }),
    ))
})

describe("a run's handle, kept by its host", () => {
  it.live.each([
    ["while an engine that keeps no context runs on", 0],
    ["once an engine that kept the session's context has closed", undefined],
  ] as const)("pins nothing its run's requests were built from: an earlier run's prompt message goes %s", ([, keptContexts]) =>
    Effect.scoped(
      Effect.gen(function* () {
        v8.setFlagsFromString("--expose-gc")
        const gc = vm.runInNewContext("gc") as () => void
        const context = yield* setup(
          { script: ["One.", "Two."].map((text) => Respond.sse(OpenAiSse.response({ text: [text] }))) },
          keptContexts === undefined ? {} : { keptContexts },
        )
        // The first user message of each request, as the model is given it.
        let first: Prompt.PromptMessage | undefined
        const model: LanguageModel.LanguageModelShape = {
          ...context.model,
          stream: (request, options) => {
            first = request.prompt.find((message) => message.role === "user")
            return context.model.stream(request, options)
          },
        }
        const tools = catalog({ ran: [] })
        assert.deepStrictEqual((yield* context.engine.run(input(context, "First.", tools, { model }))).outcome, { kind: "completed" })
        // The second run's request carries the first run's message, read again; its handle is kept.
        const second = yield* context.engine.start(input(context, "Second.", tools, { model }))
        assert.deepStrictEqual((yield* second.wait).outcome, { kind: "completed" })
        const held = new WeakRef(first!)
        first = undefined
        if (keptContexts === undefined) {
          // The engine keeps the session's context, which holds the message, until it closes.
          gc()
          assert.isDefined(held.deref())
          yield* context.engine.close
        }
        for (let round = 0; round < 50 && held.deref() !== undefined; round++) {
          yield* Effect.sleep("20 millis")
          gc()
        }
        assert.isUndefined(held.deref())
        // Held to here.
        assert.strictEqual(second.invocation.sessionId, "session-1")
      }),
    ))
})

describe("prune (docs/engine.md §5.11)", () => {
  it.live("archives a result over one page before the next request, keeps the raw result readable, and the context equals a fresh read (scenario 47)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const comparison: Comparison = newComparison()
        let settings: Settings | undefined
        let reads = 0
        const big = "0123456789".repeat(2_000)
        const context = yield* setup(
          {
            script: [
              Respond.sse(
                OpenAiSse.response({
                  toolCalls: [
                    { id: "call-big", name: "echo", arguments: [JSON.stringify({ value: big })] },
                    { id: "call-small", name: "echo", arguments: ['{"value":"small"}'] },
                  ],
                }),
              ),
              Respond.sse(OpenAiSse.response({ text: ["Read it."] })),
              Respond.sse(OpenAiSse.response({ text: ["Again."] })),
            ],
          },
          undefined,
          {},
          { wrapLog: (log) => counting(comparing(comparison, "session-1", () => settings!, log), () => reads++) },
        )
        const effects: Effects = { ran: [] }
        const spy = recording(context.model)
        const turn = completedTurn(context, effects, spy.model, (start) => {
          settings = start
        })
        yield* turn("Echo a lot.")
        const events = yield* context.log.events("session-1")
        const settled = events.filter((stored) => stored.event.fact.kind === "tool_settled")
        const archives = events.flatMap((stored) => (stored.event.fact.kind === "tool_result_archived" ? [stored.event.fact] : []))
        assert.strictEqual(archives.length, 1, "only the result over one page is archived")
        const bigSettled = settled.find((stored) => stored.event.id === archives[0]!.placeholder.identity.runtimeEventId)!
        assert.isDefined(bigSettled)
        // The second request carries the placeholder, not the result.
        const tool = spy.requests[1]!.prompt.find((message) => message.role === "tool")
        assert.isTrue(tool !== undefined && tool.role === "tool")
        const results = tool!.role === "tool" ? tool!.results : []
        const archived = results.find((result) => result.toolCallId === "call-big")!.output
        assert.strictEqual(archived.type, "json")
        const value = archived.type === "json" ? (archived.value as Record<string, unknown>) : {}
        assert.strictEqual(value["kind"], "maka.archived_tool_result")
        assert.strictEqual(value["resourceRef"], `maka://tool-result/${bigSettled.event.id}`)
        assert.isAtMost(JSON.stringify(archived.value).length, 7_500)
        assert.notInclude(JSON.stringify(tool), big)
        assert.deepStrictEqual(results.find((result) => result.toolCallId === "call-small")!.output, { type: "text", value: "echo: small" })
        // A request whose source holds an archive binds the replacement in its effectiveSourceDigest.
        const requests = events.flatMap((stored) => (stored.event.fact.kind === "model_requested" ? [stored.event.fact] : []))
        assert.strictEqual(requests.length, 2)
        assert.isUndefined(requests[0]!.effectiveSourceDigest)
        assert.isDefined(requests[1]!.effectiveSourceDigest)
        assert.notStrictEqual(requests[1]!.effectiveSourceDigest, requests[1]!.sourceDigest)
        // The raw result stays in the log.
        const raw = yield* context.log.readToolResult("session-1", bigSettled.event.id)
        assert.include(JSON.stringify(raw.raw), big)
        // The archive made the run read its context again before its next step; that context is
        // kept, so the next turn reads nothing, and both turns' requests equal ones rebuilt from a fresh read.
        const before = reads
        yield* turn("And now?")
        assert.strictEqual(reads, before)
        assert.deepStrictEqual(comparison.mismatches, [])
        assert.deepStrictEqual(spy.requests, comparison.expected)
        assert.deepStrictEqual(effects.ran, [big, "small"])
      }),
    ))

  it.live("archives a large result of earlier history once after the opening, before the first request", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const big = "abcdefghij".repeat(1_500)
        const context = yield* setup({ script: [Respond.sse(OpenAiSse.response({ text: ["Seen."] }))] })
        const history = new History.History({ sessionId: "session-1", firstId: 70_000 })
        const earlier = history.open({ turnId: "earlier-turn", runId: "earlier-run", invocationId: "earlier-invocation" })
        const step = earlier.request()
        earlier.complete(step, FactBuilders.toolCallStep([{ id: "call-1", name: "echo", input: { value: "x" } }]))
        const operation = earlier.dispatch(step, "call-1")
        const settled = earlier.succeed(operation, FactBuilders.textOutput(big))
        earlier.complete(earlier.request(), FactBuilders.textStep("Done."))
        earlier.end()
        yield* context.log.appendBatch(history.writes)
        const effects: Effects = { ran: [] }
        const spy = recording(context.model)
        const result = yield* context.engine.run(input(context, "What did you see?", catalog(effects), { model: spy.model }))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const archives = (yield* context.log.events("session-1")).filter((stored) => stored.event.fact.kind === "tool_result_archived")
        assert.strictEqual(archives.length, 1)
        const tool = spy.requests[0]!.prompt.find((message) => message.role === "tool")
        assert.isTrue(tool !== undefined && tool.role === "tool")
        const output = tool!.role === "tool" ? tool!.results[0]!.output : undefined
        assert.isTrue(output?.type === "json" && (output.value as Record<string, unknown>)["resourceRef"] === `maka://tool-result/${settled.event.id}`)
        assert.notInclude(JSON.stringify(spy.requests[0]!.prompt), big)
      }),
    ))
})
