/**
 * The model's own credentials are scrubbed from every message of a run on it, whoever started the
 * run: through the Effect API without `secrets`, and a handoff's successor (docs/tools.md §2.12).
 * Real SQLite files and the scripted server on loopback.
 */
import { assert, describe, it } from "@effect/vitest"
import { OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Deferred, Effect, Fiber, Schema } from "effect"
import { factsOf } from "./support/harness.ts"
import { input, setup } from "./support/setup.ts"

/** The key support/setup.ts gives the scripted model. */
const KEY = "sk-test-secret"

const call = (id: string, name: string) =>
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id, name, arguments: ["{}"] }] }))

/** `leak` fails quoting the key; `wait` waits (uninterruptibly) for `release`, then succeeds. */
const catalogOf = (release: Deferred.Deferred<void>) =>
  ToolCatalog.make([
    Tool.make({
      name: "leak",
      description: "Fails quoting the key.",
      input: Schema.Struct({}),
      semantics: "parallel",
      execute: () => Tool.fail(`GET /v1/accounts?key=${KEY} -> 404`),
    }),
    Tool.make({
      name: "show",
      description: "Returns the key, as text and inside JSON.",
      input: Schema.Struct({}),
      semantics: "parallel",
      execute: () => Effect.succeed(Tool.json({ note: `key=${KEY}`, nested: [{ [KEY]: `${KEY}${KEY}` }] })),
    }),
    Tool.make({
      name: "print",
      description: "Prints the key.",
      input: Schema.Struct({}),
      semantics: "parallel",
      execute: () => Effect.succeed(Tool.text(`export API_KEY=${KEY}\n`)),
    }),
    Tool.make({
      name: "wait",
      description: "Waits for a release.",
      input: Schema.Struct({}),
      semantics: "parallel",
      execute: () => Effect.as(Effect.uninterruptible(Deferred.await(release)), Tool.text("waited")),
    }),
  ])

/** The failure messages of the session's settlements. */
const failures = (events: ReadonlyArray<import("@maka/facts").Event.StoredEvent>) =>
  factsOf(events, "tool_settled").flatMap((fact) => (fact.outcome.kind === "failed" ? [fact.outcome.message] : []))

describe("the model's credentials", () => {
  it.live("are scrubbed from a tool's failure in a run started without secrets, and never sent back", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [call("call-1", "leak"), Respond.sse(OpenAiSse.response({ text: ["Done."] }))] })
        const release = yield* Deferred.make<void>()
        const result = yield* context.engine.run(input(context, "Look it up.", catalogOf(release)))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(failures(events), ["GET /v1/accounts?key=[redacted] -> 404"])
        assert.notInclude(JSON.stringify(events), KEY)
        assert.notInclude(context.server.requests()[1]!.body, KEY)
      }),
    ),
  )

  it.live("are scrubbed from a tool's output, text or JSON, stored and sent to the model", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            Respond.sse(
              OpenAiSse.response({
                toolCalls: [
                  { id: "call-1", name: "show", arguments: ["{}"] },
                  { id: "call-2", name: "print", arguments: ["{}"] },
                ],
              }),
            ),
            Respond.sse(OpenAiSse.response({ text: ["Done."] })),
          ],
        })
        const release = yield* Deferred.make<void>()
        const result = yield* context.engine.run(input(context, "Show it.", catalogOf(release)))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        const outcomes = factsOf(events, "tool_settled").map((fact) => fact.outcome)
        assert.deepStrictEqual(
          outcomes.map((outcome) => (outcome.kind === "succeeded" ? outcome.projection : outcome.kind)),
          [
            { kind: "json", value: { nested: [{ "[redacted]": "[redacted][redacted]" }], note: "key=[redacted]" } },
            { kind: "text", text: "export API_KEY=[redacted]\n" },
          ],
        )
        assert.notInclude(JSON.stringify(events), KEY)
        assert.notInclude(context.server.requests()[1]!.body, KEY)
        assert.include(context.server.requests()[1]!.body, "key=[redacted]")
      }),
    ),
  )

  it.live("are scrubbed in a handoff's successor, which the host resumes without secrets", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [call("call-1", "wait"), call("call-2", "leak"), Respond.sse(OpenAiSse.response({ text: ["Done."] }))],
        })
        const release = yield* Deferred.make<void>()
        const catalog = catalogOf(release)
        const running = yield* context.engine.start(input(context, "Wait, then look it up.", catalog, { maxSteps: 6 }))
        yield* Effect.promise(() => context.server.exchange(0))
        const requested = yield* Effect.forkChild(running.handoff)
        yield* Effect.sleep("20 millis")
        yield* Deferred.succeed(release, undefined)
        const pause = yield* Fiber.join(requested)
        assert.isDefined(pause)
        const successor = yield* context.engine.resume({ paused: running.invocation, pause: pause!, model: context.model, tools: catalog })
        assert.deepStrictEqual((yield* successor.wait).outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(failures(events), ["GET /v1/accounts?key=[redacted] -> 404"])
        assert.notInclude(JSON.stringify(events), KEY)
        assert.isFalse(context.server.requests().some((request) => request.body.includes(KEY)))
      }),
    ),
  )
})
