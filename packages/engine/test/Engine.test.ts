import { assert, describe, it } from "@effect/vitest"
import { Canonical, type Event, ToolCall } from "@maka/facts"
import { OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Deferred, Effect, Fiber, Schema, Stream } from "effect"
import { MAX_QUEUED_STEERING, MAX_QUEUED_STEERING_BYTES } from "../src/internal/options.ts"
import * as EngineError from "../src/EngineError.ts"
import { factsOf } from "./support/harness.ts"
import { catalog, input, setup, type Effects } from "./support/setup.ts"

const kinds = (events: ReadonlyArray<Event.StoredEvent>) =>
  events.filter((stored) => stored.event.fact.kind !== "model_observed").map((stored) => {
    const fact = stored.event.fact
    if (fact.kind === "model_interrupted") return `model_interrupted:${fact.status}`
    if (fact.kind === "invocation_ended") return `invocation_ended:${fact.outcome.kind}`
    if (fact.kind === "tool_settled") return `tool_settled:${fact.outcome.kind}`
    if (fact.kind === "tool_rejected") return `tool_rejected:${fact.reason.kind}`
    return fact.kind
  })

const toolThenAnswer = [
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "echo", arguments: ['{"value":', '"hi"}'] }] })),
  Respond.sse(OpenAiSse.response({ text: ["The echo ", "said hi."] })),
]

describe("Engine", () => {
  it.live("commits before each effect, runs the tool once, and completes; display text and the key stay out of requests (scenarios 11, 13)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: toolThenAnswer })
        const effects: Effects = { ran: [] }
        const message = { text: "Say hi through echo.", displayText: "Shown only: say hi" }
        const result = yield* context.engine.run(input(context, message.text, catalog(effects), { message }))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, ["hi"])
        const events = yield* context.engine.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_settled:succeeded",
          "model_requested",
          "model_completed",
          "invocation_ended:completed",
        ])
        const second = context.server.requests()[1]!.json as { messages: ReadonlyArray<{ role: string; content?: unknown }> }
        assert.deepStrictEqual(
          second.messages.map((message) => message.role),
          ["system", "user", "assistant", "tool"],
        )
        assert.isFalse(JSON.stringify(events).includes("sk-test-secret"))
        assert.isFalse(context.server.requests().some((request) => request.body.includes("sk-test-secret")))
        // The display text is stored in the opening, and no request carries it.
        const opening = events[0]!.event.fact
        assert.deepStrictEqual(opening.kind === "invocation_opened" ? opening.input : undefined, { kind: "message", content: message })
        assert.isTrue(context.server.requests().every((request) => request.body.includes(message.text)))
        assert.isFalse(context.server.requests().some((request) => request.body.includes("Shown only")))
      }),
    ))

  it.live("streams every committed event of the run from its opening to its terminal", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: toolThenAnswer })
        const running = yield* context.engine.start(input(context, "Say hi.", catalog({ ran: [] })))
        const streamed = yield* Stream.runCollect(running.events)
        yield* running.wait
        const stored = yield* context.engine.log.events("session-1")
        assert.deepStrictEqual(
          streamed.map((item) => Canonical.stringify(item)),
          stored.map((item) => Canonical.stringify(item)),
        )
        const late = yield* Stream.runCollect(running.events)
        assert.strictEqual(late.length, stored.length)
      }),
    ))

  it.live("refuses invalid input and a second live run on a session, writing nothing (scenarios 9, 10)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [Respond.hang()] })
        const tools = catalog({ ran: [] })
        for (const overrides of [{ maxSteps: 0 }, { maxSteps: 257 }]) {
          const refused = yield* Effect.flip(context.engine.start(input(context, "x", tools, overrides)))
          assert.strictEqual(refused.reason._tag, "InvalidInput")
        }
        const relative = input(context, "x", tools)
        for (const cwd of ["relative/path", `${context.workspace}/a\u0000b`]) {
          const badCwd = yield* Effect.flip(context.engine.start({ ...relative, configuration: { ...relative.configuration, cwd } }))
          assert.strictEqual(badCwd.reason._tag, "InvalidInput")
        }
        const otherModel = yield* Effect.flip(
          context.engine.start({
            ...relative,
            configuration: { ...relative.configuration, model: { connectionId: "c", connectionSlug: "c", model: "other" } },
          }),
        )
        assert.strictEqual(otherModel.reason._tag, "InvalidInput")
        // The invocation, the context and the provider options are decoded closed: each names its part.
        for (const [part, overrides] of [
          ["invocation", { invocation: { ...relative.invocation, runId: "" } }],
          ["invocation", { invocation: { ...relative.invocation, extra: "x" } }],
          ["context", { context: { declaredWindow: -1 } }],
          ["context", { context: { unknown: 1 } }],
          ["providerOptions", { providerOptions: { temperature: Number.NaN } }],
          // Data a JSON object would lose (a Date's `{}`, a class's getters) is refused, not coerced.
          ["providerOptions", { providerOptions: { metadata: { at: new Date(0) } } }],
          ["providerOptions", { providerOptions: { cache: new Map([["a", 1]]) } }],
        ] as const) {
          const refused = yield* Effect.flip(context.engine.start({ ...relative, ...(overrides as object) }))
          assert.strictEqual(refused.reason._tag, "InvalidInput")
          assert.include(refused.message, `${part}: `)
        }
        const dated = yield* Effect.flip(context.engine.start({ ...relative, providerOptions: { metadata: { at: new Date(0) } } as never }))
        assert.strictEqual(dated.message, "providerOptions: canonical JSON refuses a non-plain object (Date) at $.metadata.at")
        // Settings that fail to build past the checks (a catalog that throws, through a cast) are
        // Internal, before the session is taken: the start below still gets it.
        const throwing = { get: () => undefined, capture: () => undefined, get tools(): never { throw new Error("no tools here") } }
        const broken = yield* Effect.flip(context.engine.start({ ...relative, tools: throwing as unknown as typeof relative.tools }))
        assert.strictEqual(broken.reason._tag, "Internal")
        assert.strictEqual(broken.message, "the run's settings could not be built: no tools here")
        // The continuation check builds the same settings, and refuses the same way.
        const unchecked = yield* Effect.flip(
          context.engine.checkContinuation({
            source: relative.invocation,
            invocation: { ...relative.invocation, turnId: "turn-9", runId: "run-9", invocationId: "invocation-9" },
            model: relative.model,
            configuration: relative.configuration,
            tools: throwing as unknown as typeof relative.tools,
          }),
        )
        assert.strictEqual(unchecked.reason._tag, "Internal")
        assert.strictEqual(unchecked.message, "the run's settings could not be built: no tools here")
        assert.deepStrictEqual(yield* context.engine.log.events("session-1"), [])
        const first = yield* context.engine.start(input(context, "first", tools))
        const busy = yield* Effect.flip(context.engine.start(input(context, "second", tools)))
        assert.strictEqual(busy.reason._tag, "Busy")
        yield* Effect.promise(() => context.server.request(0))
        yield* first.cancel
        const result = yield* first.wait
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        assert.deepStrictEqual(
          kinds(yield* context.engine.log.events("session-1")),
          ["invocation_opened", "model_requested", "model_interrupted:cancelled", "invocation_ended:cancelled"],
        )
      }),
    ))

  it.live("re-sends a byte-identical request after a replay-safe failure, with a new step id (scenario 21)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            Respond.json(503, Respond.openAiError("overloaded")),
            Respond.json(429, Respond.openAiError("slow down"), { "retry-after-ms": "10" }),
            Respond.sse(OpenAiSse.response({ text: ["done"] })),
          ],
        })
        const result = yield* context.engine.run(input(context, "Answer.", catalog({ ran: [] })))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const bodies = context.server.requests().map((request) => request.body)
        assert.strictEqual(bodies.length, 3)
        assert.strictEqual(bodies[1], bodies[0])
        assert.strictEqual(bodies[2], bodies[0])
        const events = yield* context.engine.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_interrupted:retryable_failure",
          "model_requested",
          "model_interrupted:retryable_failure",
          "model_requested",
          "model_completed",
          "invocation_ended:completed",
        ])
        const requests = events.flatMap((stored) => (stored.event.fact.kind === "model_requested" ? [stored.event.fact] : []))
        assert.strictEqual(new Set(requests.map((request) => request.inputDigest)).size, 1)
        assert.strictEqual(new Set(requests.map((request) => request.stepId)).size, 3)
      }),
    ))

  it.live("fails model_provider after ten replay-safe failures and never retries a 401 (scenarios 21, 25)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [{ respond: Respond.json(503, Respond.openAiError("down")), repeat: true }] }, {
          backoffBaseMs: 1,
          backoffMaxMs: 2,
        })
        const result = yield* context.engine.run(input(context, "Answer.", catalog({ ran: [] })))
        assert.strictEqual(result.outcome.kind, "failed")
        assert.strictEqual(result.outcome.kind === "failed" && result.outcome.class, "model_provider")
        assert.strictEqual(context.server.requests().length, 10)
        const auth = yield* setup({ script: [Respond.json(401, Respond.openAiError("bad key"))] })
        const refused = yield* auth.engine.run(input(auth, "Answer.", catalog({ ran: [] })))
        assert.strictEqual(refused.outcome.kind === "failed" && refused.outcome.class, "model_provider")
        assert.strictEqual(auth.server.requests().length, 1)
        assert.deepStrictEqual(kinds(yield* auth.engine.log.events("session-1")).slice(1, 3), [
          "model_requested",
          "model_interrupted:failed",
        ])
      }),
    ))

  it.live("keeps partial text of a truncated stream as observation only and re-sends (scenario 23)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            Respond.dropAfter([OpenAiSse.role(), OpenAiSse.text("partial answer"), OpenAiSse.toolCall({ index: 0, id: "c", name: "echo", arguments: '{"val' })]),
            Respond.sse(OpenAiSse.response({ text: ["whole answer"] })),
          ],
        })
        const effects: Effects = { ran: [] }
        const result = yield* context.engine.run(input(context, "Answer.", catalog(effects)))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, [])
        const events = yield* context.engine.log.events("session-1")
        assert.isTrue(JSON.stringify(events).includes("partial answer"))
        const completions = events.flatMap((stored) => (stored.event.fact.kind === "model_completed" ? [stored.event.fact] : []))
        assert.strictEqual(completions.length, 1)
        assert.isFalse(JSON.stringify(completions).includes("partial"))
        assert.strictEqual(context.server.requests()[1]!.body, context.server.requests()[0]!.body)
      }),
    ))

  it.live("commits a length-cut main output with its calls rejected and fails model_incomplete (scenario 28)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            Respond.sse(
              OpenAiSse.response({
                text: ["I will call"],
                toolCalls: [{ id: "call-1", name: "echo", arguments: ['{"value":"x"}'] }],
                finishReason: "length",
              }),
            ),
            Respond.sse(OpenAiSse.response({ text: ["Carrying on."] })),
          ],
        })
        const effects: Effects = { ran: [] }
        const result = yield* context.engine.run(input(context, "Answer.", catalog(effects)))
        assert.strictEqual(result.outcome.kind === "failed" && result.outcome.class, "model_incomplete")
        assert.deepStrictEqual(effects.ran, [])
        const events = yield* context.engine.log.events("session-1")
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_rejected:preparation_failed",
          "invocation_ended:failed",
        ])
        // The next message still sees the cut text, and the call answered with its rejection.
        const [rejected] = factsOf(events, "tool_rejected")
        const next = yield* context.engine.run(input(context, "Go on.", catalog(effects)))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
        const body = context.server.requests()[1]!.json as { messages: ReadonlyArray<{ role: string; content?: unknown }> }
        assert.deepStrictEqual(
          body.messages.map((message) => message.role),
          ["system", "user", "assistant", "tool", "user"],
        )
        assert.include(JSON.stringify(body.messages[2]), "I will call")
        assert.include(JSON.stringify(body.messages[3]), ToolCall.rejectionText(rejected!.reason).slice(0, 40))
        assert.deepStrictEqual(effects.ran, [])
      }),
    ))

  it.live("delivers a queued steering message once at the next step boundary (scenario 12)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const gate = Respond.gate()
        const context = yield* setup({
          script: [
            Respond.hold(gate, Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "echo", arguments: ['{"value":"a"}'] }] }))),
            Respond.sse(OpenAiSse.response({ text: ["ok"] })),
          ],
        })
        const running = yield* context.engine.start(input(context, "Start.", catalog({ ran: [] })))
        yield* Effect.promise(() => context.server.request(0))
        yield* running.steer("also check the tests")
        gate.release()
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const second = context.server.requests()[1]!.body
        assert.strictEqual(second.split("<user_query>\\nalso check the tests\\n</user_query>").length, 2)
        const events = yield* context.engine.log.events("session-1")
        const steered = events.filter((stored) => stored.event.fact.kind === "message_steered")
        assert.strictEqual(steered.length, 1)
        // It is committed when step 2 starts: after step 1's tool settles, before step 2's request.
        assert.deepStrictEqual(kinds(events), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "tool_dispatched",
          "tool_settled:succeeded",
          "message_steered",
          "model_requested",
          "model_completed",
          "invocation_ended:completed",
        ])
        const secondRequest = events.filter((stored) => stored.event.fact.kind === "model_requested")[1]!
        assert.isBelow(steered[0]!.sequence, secondRequest.sequence)
      }),
    ))

  it.live("refuses steering that fails message validation with InvalidInput, bounds the queue, and lets the run go on", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const gate = Respond.gate()
        const context = yield* setup({
          script: [
            Respond.hold(gate, Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "echo", arguments: ['{"value":"a"}'] }] }))),
            Respond.sse(OpenAiSse.response({ text: ["ok"] })),
          ],
        })
        const running = yield* context.engine.start(input(context, "Start.", catalog({ ran: [] })))
        yield* Effect.promise(() => context.server.request(0))
        // 70 KiB is over the 64 KiB message limit: refused where it enters, never a failed run.
        const refused = yield* Effect.flip(running.steer("x".repeat(70 * 1024)))
        assert.strictEqual(refused.reason._tag, "InvalidInput")
        assert.include(refused.message, "message text exceeds")
        yield* running.steer("a real one")
        // The queue is bounded: 64 messages wait for the step boundary, the next one is refused.
        for (let index = 1; index < MAX_QUEUED_STEERING; index++) yield* running.steer(`more ${index}`)
        const full = yield* Effect.flip(running.steer("one too many"))
        assert.strictEqual(full.reason._tag, "Busy")
        // The exported text a host maps (to HTTP 429, say) without reading prose.
        assert.strictEqual(full.message, EngineError.STEERING_FULL_MESSAGE)
        gate.release()
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const steered = factsOf(yield* context.engine.log.events("session-1"), "message_steered")
        assert.deepStrictEqual(
          steered.map((fact) => fact.message.content.text),
          ["a real one", ...Array.from({ length: MAX_QUEUED_STEERING - 1 }, (_, index) => `more ${index + 1}`)],
        )
      }),
    ))

  it.live("bounds the steering queued for one step by its serialized bytes; the next step takes more", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const first = Respond.gate()
        const second = Respond.gate()
        const call = (id: string) => Respond.sse(OpenAiSse.response({ toolCalls: [{ id, name: "echo", arguments: [`{"value":"${id}"}`] }] }))
        const context = yield* setup({
          script: [Respond.hold(first, call("call-1")), Respond.hold(second, call("call-2")), Respond.sse(OpenAiSse.response({ text: ["ok"] }))],
        })
        const running = yield* context.engine.start(input(context, "Start.", catalog({ ran: [] })))
        yield* Effect.promise(() => context.server.request(0))
        // 65,000 escape characters are within the 64 KiB text limit, and about 390 KB serialized.
        const heavy = (tag: string) => `${tag}${"\u001b".repeat(65_000)}`
        const size = Canonical.utf8Length(JSON.stringify(heavy("a")))
        assert.isAbove(size, 380_000)
        yield* running.steer(heavy("a"))
        yield* running.steer(heavy("b"))
        const over = yield* Effect.flip(running.steer(heavy("c")))
        assert.strictEqual(over.reason._tag, "Busy")
        assert.include(over.message, `would pass ${MAX_QUEUED_STEERING_BYTES} serialized bytes`)
        assert.strictEqual(over.message, EngineError.STEERING_FULL_BYTES_MESSAGE)
        // A small one still fits beside them.
        yield* running.steer("small")
        first.release()
        // The second request carried the queue; the next step's queue starts empty.
        yield* Effect.promise(() => context.server.request(1))
        yield* running.steer(heavy("c"))
        second.release()
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "completed" })
        const steered = factsOf(yield* context.engine.log.events("session-1"), "message_steered")
        assert.deepStrictEqual(
          steered.map((fact) => fact.message.content.text.slice(0, 1)),
          ["a", "b", "s", "c"],
        )
      }),
    ))

  it.live("counts the steering a handoff preflight delivered toward the same bound: the request after it carries at most 1 MiB", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The preflight holds while two more messages are steered: the first two were delivered at
        // the boundary already (and committed by the preflight), the next request carries all of them.
        const inCheck = yield* Deferred.make<void>()
        const letCheck = yield* Deferred.make<void>()
        const slowCall = Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "slow", arguments: [JSON.stringify({ value: "a" })] }] }))
        const context = yield* setup(
          { script: [slowCall, Respond.sse(OpenAiSse.response({ text: ["Done."] })), Respond.sse(OpenAiSse.response({ text: ["Done."] }))] },
          undefined,
          {},
          {
            wrapLog: (log) => ({
              ...log,
              checkHandoff: (invocation, pause) =>
                Deferred.succeed(inCheck, undefined).pipe(Effect.andThen(Deferred.await(letCheck)), Effect.andThen(log.checkHandoff(invocation, pause))),
            }),
          },
        )
        const release = yield* Deferred.make<void>()
        const slow = Tool.make({
          name: "slow",
          description: "Waits until released.",
          input: Schema.Struct({ value: Schema.String }),
          semantics: "parallel",
          execute: () => Effect.as(Effect.uninterruptible(Deferred.await(release)), Tool.text("ok")),
        })
        const running = yield* context.engine.start(input(context, "Run slow.", ToolCatalog.make([slow]), { maxSteps: 4 }))
        yield* running.events.pipe(Stream.filter((stored) => stored.event.fact.kind === "tool_dispatched"), Stream.take(1), Stream.runDrain)
        const heavy = (tag: string) => `${tag}${"\u001b".repeat(65_000)}`
        yield* running.steer(heavy("a"))
        yield* running.steer(heavy("b"))
        const requested = yield* Effect.forkChild(running.handoff)
        yield* Effect.sleep("20 millis")
        yield* Deferred.succeed(release, undefined)
        yield* Deferred.await(inCheck)
        const over = yield* Effect.flip(running.steer(heavy("c")))
        assert.strictEqual(over.reason._tag, "Busy")
        assert.include(over.message, `would pass ${MAX_QUEUED_STEERING_BYTES} serialized bytes`)
        yield* running.steer("small")
        yield* Deferred.succeed(letCheck, undefined)
        yield* Fiber.join(requested)
        yield* running.wait
        const steered = factsOf(yield* context.log.events("session-1"), "message_steered")
        assert.deepStrictEqual(steered.map((fact) => fact.message.content.text.slice(0, 1)), ["a", "b", "s"])
        const bytes = steered.reduce((sum, fact) => sum + Canonical.utf8Length(Canonical.stringify(fact.message)), 0)
        assert.isAtMost(bytes, MAX_QUEUED_STEERING_BYTES)
      }),
    ),
  60_000)

  it.live("fails step_limit after maxSteps model steps (scenario 14)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const call = (id: string) =>
          Respond.sse(OpenAiSse.response({ toolCalls: [{ id, name: "echo", arguments: [`{"value":"${id}"}`] }] }))
        const context = yield* setup({ script: [call("a"), call("b"), call("c")] })
        const result = yield* context.engine.run(input(context, "Loop.", catalog({ ran: [] }), { maxSteps: 2 }))
        assert.strictEqual(result.outcome.kind === "failed" && result.outcome.class, "step_limit")
        assert.strictEqual(context.server.requests().length, 2)
        // The last step's settlement rode no request: the seal commits it before sealing (docs/engine.md §5.4).
        const facts = (yield* context.log.events("session-1")).map((stored) => stored.event.fact.kind)
        assert.strictEqual(facts.filter((kind) => kind === "tool_dispatched").length, 2)
        assert.strictEqual(facts.filter((kind) => kind === "tool_settled").length, 2)
      }),
    ))

  it.live("cancels during a backoff sleep without sending another request (scenario 24)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [{ respond: Respond.json(503, Respond.openAiError("down")), repeat: true }] }, {
          backoffBaseMs: 60_000,
          backoffMaxMs: 60_000,
        })
        const running = yield* context.engine.start(input(context, "Answer.", catalog({ ran: [] })))
        yield* Effect.promise(() => context.server.exchange(0))
        yield* Effect.sleep(50)
        yield* running.cancel
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        assert.strictEqual(context.server.requests().length, 1)
      }),
    ))
})

