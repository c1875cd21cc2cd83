/**
 * The live context (src/internal/live-context.ts) against fresh reads. A spy wraps the log the
 * engine writes through: after every commit of a live invocation it applies the batch to its own
 * `LiveContext` (loaded when the opening commits, as the runner does) and compares the whole
 * `snapshot()` with a fresh `readModelContext(session, {current})`; before every `model_requested`
 * it reads the context fresh at that cut and rebuilds the request the runner must have sent from it
 * (prompt, output limit, tools, digest), which the test then compares with what the model received.
 */
import { assert, describe, it } from "@effect/vitest"
import { Digest, type Configuration, type EventWrite, type Fact, type Prompt } from "@maka/facts"
import type { EventLog } from "@maka/event-log"
import { projectPrompt, type LanguageModel } from "@maka/model"
import { FactBuilders, History, OpenAiSse, Respond } from "@maka/testkit"
import { ReadToolResult } from "@maka/tools"
import { Effect, Result } from "effect"
import { isDeepStrictEqual } from "node:util"
import * as PromptBuilder from "../src/PromptBuilder.ts"
import { LiveContext } from "../src/internal/live-context.ts"
import type * as Engine from "../src/Engine.ts"
import { kinds, recording } from "./support/harness.ts"
import { catalog, input, setup, type Effects } from "./support/setup.ts"

interface Comparison {
  /** Whole-context comparisons made after commits. */
  snapshots: number
  /** Requests rebuilt from a fresh read at their cut. */
  readonly expected: Array<Prompt.ModelRequest>
  /** The `model_requested` facts seen, in order. */
  readonly requests: Array<Fact.ModelRequested>
  /** Retries whose evidence is their first attempt's, not a fresh read at their own cut. */
  retries: number
  readonly mismatches: Array<string>
}

interface Current {
  readonly invocationId: string
  readonly configuration: Configuration.InvocationConfiguration
  live: LiveContext
}

/** What the runner needs to rebuild a request: the run's input, as the test started it. */
type Settings = Pick<Engine.StartInput, "model" | "mainOutputLimit" | "context" | "tools" | "allowPriorUnknown">

const rebuild = (
  settings: Settings,
  configuration: Configuration.InvocationConfiguration,
  source: EventLog.ModelContextSource,
): Prompt.ModelRequest => {
  const model: LanguageModel.LanguageModelShape = settings.model
  const notice = settings.allowPriorUnknown === true ? PromptBuilder.priorUnknownNotice(source) : undefined
  const prompt = PromptBuilder.buildMainPrompt({
    systemPrompt: configuration.systemPrompt?.text,
    notice,
    source,
  })
  const maxOutputTokens = PromptBuilder.outputLimit({
    mainOutputLimit: settings.mainOutputLimit,
    context: settings.context,
    latestMain: source.latestMain,
    routeIdentity: model.routeIdentity,
    ...(configuration.model === undefined ? {} : { connectionId: configuration.model.connectionId }),
    modelId: model.model,
    ...(source.baseline === undefined ? {} : { baselineId: source.baseline.eventId }),
  })
  // A run with tools also offers `read_tool_result`, whose definition does not depend on its reader.
  const tools = ReadToolResult.offer(settings.tools, () => Effect.die("the rebuilt request never runs a tool"))
  return {
    prompt: projectPrompt(model.kind, model.routeIdentity, prompt),
    tools: tools.capture().definitions,
    providerOptions: {},
    maxOutputTokens,
  }
}

/** The spy: wraps `appendBatch` of the log the engine writes through. */
const comparing = (
  comparison: Comparison,
  sessionId: string,
  settings: () => Settings,
  log: EventLog.EventLogShape,
): EventLog.EventLogShape => {
  let current: Current | undefined
  const read = (invocationId: string) =>
    settings().allowPriorUnknown === true
      ? log.readManualMessageContext(sessionId, { current: invocationId })
      : log.readModelContext(sessionId, { current: invocationId })
  let lastSequence = 0
  // A snapshot whose digests and tail nobody read yet, and the fresh read they must equal once read
  // (after the next commit moved the live context's hash and tail on).
  let unread: { readonly source: EventLog.ModelContextSource; readonly fresh: EventLog.ModelContextSource } | undefined
  const appendBatch: EventLog.EventLogShape["appendBatch"] = (leading, complete) =>
    Effect.gen(function* () {
      // A request is built inside its commit, after the settlements and steering that ride it.
      let trailing: ReadonlyArray<EventWrite.EventWrite> = []
      const spied = complete === undefined ? undefined : (sequences: ReadonlyArray<number>) => (trailing = complete(sequences))
      const sequences = yield* log.appendBatch(leading, spied)
      const writes = [...leading, ...trailing]
      // An opening starts the comparison of its run, before a request that rides its commit.
      const opening = writes.find((write) => write.event.fact.kind === "invocation_opened")
      if (opening !== undefined && opening.event.fact.kind === "invocation_opened") {
        const { invocationId } = opening.event.invocation
        const configuration = opening.event.fact.configuration
        const live = yield* LiveContext.load(log, sessionId, invocationId, configuration, settings().allowPriorUnknown === true)
        current = { invocationId, configuration, live }
      }
      for (const [index, write] of writes.entries()) {
        const fact: Fact.Fact = write.event.fact
        if (fact.kind !== "model_requested" || current === undefined) continue
        // What precedes the request (this batch's settlements and steering included) is its source:
        // a read now sees the request itself too, which projects to nothing in the prompt.
        const fresh = yield* read(current.invocationId)
        const previous = comparison.requests.at(-1)
        const request = rebuild(settings(), current.configuration, fresh)
        comparison.expected.push(request)
        comparison.requests.push(fact)
        if (Digest.modelInput(request) !== fact.inputDigest) {
          comparison.mismatches.push(`request ${fact.stepId}: inputDigest differs from one rebuilt from a fresh read`)
        }
        const before = index > 0 ? sequences[index - 1]! : lastSequence
        const hash = yield* log.sessionHash(sessionId, fact.sourceHighWater)
        if (fact.sourceHighWater === before && hash.digest(before) === fact.sourceDigest) continue
        // A physical retry re-sends the frozen request of its logical step, with that step's evidence.
        const isRetry =
          previous !== undefined &&
          previous.inputDigest === fact.inputDigest &&
          previous.sourceHighWater === fact.sourceHighWater &&
          previous.sourceDigest === fact.sourceDigest
        if (isRetry) comparison.retries++
        else comparison.mismatches.push(`request ${fact.stepId}: source evidence differs from the log before it`)
      }
      if (sequences.length > 0) lastSequence = sequences[sequences.length - 1]!
      if (opening === undefined && current !== undefined) {
        for (const [index, write] of writes.entries()) {
          current.live.apply({ sequence: sequences[index]!, event: write.event }, write.json)
        }
        if (unread !== undefined) {
          const { source, fresh } = unread
          unread = undefined
          if (
            source.sourceEvidence.digest !== fresh.sourceEvidence.digest ||
            source.effectiveSourceDigest !== fresh.effectiveSourceDigest
          ) {
            comparison.mismatches.push(`a snapshot's digests read after the next commit differ from a fresh read at its own cut`)
          }
          // Its tail too is the one it saw, not the live context's as it stands after the commit.
          if (!isDeepStrictEqual(source.tail, fresh.tail)) {
            comparison.mismatches.push(`a snapshot's tail read after the next commit differs from a fresh read at its own cut`)
          }
        }
        // An archive makes the live context read the log again, as the engine's does.
        if (current.live.stale) {
          current.live = yield* LiveContext.load(log, sessionId, current.invocationId, current.configuration, settings().allowPriorUnknown === true)
        }
        if (writes.some((write) => write.event.fact.kind === "invocation_ended")) {
          current = undefined
        } else {
          const fresh = yield* read(current.invocationId)
          comparison.snapshots++
          const cached = current.live.snapshot()
          if (!Result.isSuccess(cached) || !isDeepStrictEqual(cached.success, fresh)) {
            comparison.mismatches.push(
              `after ${writes.map((write) => write.event.fact.kind).join("+")} at ${sequences.join(",")}: ` +
                `live ${JSON.stringify(cached)} != fresh ${JSON.stringify(fresh)}`,
            )
          }
          const deferred = current.live.snapshot()
          if (Result.isSuccess(deferred)) unread = { source: deferred.success, fresh }
        }
      }
      return sequences
    })
  return { ...log, appendBatch, append: (write) => Effect.map(appendBatch([write]), (sequences) => sequences[0]!) }
}

const usage = (prompt: number, completion: number) => ({ prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion })

describe("the live context", () => {
  it.live("equals a fresh readModelContext after every commit of a multi-step run, across turns", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const gate = Respond.gate()
        const comparison: Comparison = { snapshots: 0, expected: [], requests: [], retries: 0, mismatches: [] }
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

  it.live("equals a fresh readManualMessageContext under the prior-unknown policy", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const comparison: Comparison = { snapshots: 0, expected: [], requests: [], retries: 0, mismatches: [] }
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
        const comparison: Comparison = { snapshots: 0, expected: [], requests: [], retries: 0, mismatches: [] }
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

describe("prune (docs/engine.md §5.11)", () => {
  it.live("archives a result over one page before the next request, keeps the raw result readable, and the context equals a fresh read (scenario 47)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const comparison: Comparison = { snapshots: 0, expected: [], requests: [], retries: 0, mismatches: [] }
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
