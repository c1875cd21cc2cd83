/**
 * Shared helpers of the engine's scenario suites, beside `setup.ts`: fact summaries for exact-order
 * assertions, a recording wrapper around the real (socket) model so a test can read the `Prompt` it
 * was sent, the OpenAI wire messages of a recorded request, and `reopen`, which opens a log file with
 * a new engine through `Engine.layer` (so SQLite recovery runs) in the current scope, and the
 * `EngineError` a facade promise rejects with.
 */
import { Canonical, type Event, type Fact, type Prompt } from "@maka/facts"
import { EventLog } from "@maka/event-log"
import type { LanguageModel } from "@maka/model"
import type { ScriptedServer } from "@maka/testkit"
import { Ids, Tool } from "@maka/tools"
import { Context, Deferred, Effect, Layer, Result, Schema } from "effect"
import { assert } from "vitest"
import * as Engine from "../../src/Engine.ts"
import * as EngineError from "../../src/EngineError.ts"
import * as PromptBuilder from "../../src/PromptBuilder.ts"

/** One label per fact, `model_observed` left out: kind plus status, outcome or reason where it has one. */
export const kinds = (events: ReadonlyArray<Event.StoredEvent>): ReadonlyArray<string> =>
  events.filter((stored) => stored.event.fact.kind !== "model_observed").map((stored) => label(stored.event.fact))

export const label = (fact: Fact.Fact): string => {
  switch (fact.kind) {
    case "model_interrupted":
      return `model_interrupted:${fact.status}`
    case "invocation_ended":
      return fact.outcome.kind === "failed"
        ? `invocation_ended:failed:${fact.outcome.class}`
        : `invocation_ended:${fact.outcome.kind}`
    case "tool_settled":
      return `tool_settled:${fact.outcome.kind}`
    case "tool_rejected":
      return `tool_rejected:${fact.reason.kind}`
    default:
      return fact.kind
  }
}

/** The facts of one kind, narrowed. */
export const factsOf = <K extends Fact.Fact["kind"]>(events: ReadonlyArray<Event.StoredEvent>, kind: K) =>
  events.flatMap((stored) => (stored.event.fact.kind === kind ? [stored.event.fact as Extract<Fact.Fact, { kind: K }>] : []))

/**
 * Re-reads the source of every model request of `events` through `readFrozenModelContext`
 * (docs/log-format.md §3.7) and checks it against what the request recorded: the baseline it named,
 * and the effective source it bound (when it bound one). Returns how many requests were checked.
 */
export const expectFrozenSources = (log: EventLog.EventLogShape, events: ReadonlyArray<Event.StoredEvent>) =>
  Effect.gen(function* () {
    const requests = factsOf(events, "model_requested")
    for (const request of requests) {
      const frozen = yield* log.readFrozenModelContext({ scope: request.sourceScope, highWater: request.sourceHighWater, digest: request.sourceDigest })
      assert.strictEqual(frozen.baseline?.eventId, request.checkpointEventId, `the baseline of ${request.purpose} request ${request.stepId}`)
      if (request.effectiveSourceDigest !== undefined) {
        assert.strictEqual(frozen.effectiveSourceDigest, request.effectiveSourceDigest, `the effective source of ${request.purpose} request ${request.stepId}`)
      }
    }
    // Read together, as `maka inspect --html` reads them, the main requests' sources share their
    // events: the projector extends each projection from the one before, and must give what a
    // projection of the source alone gives.
    const main = requests.filter((request) => request.purpose === "main")
    const sources = yield* log.readFrozenModelContexts(
      main.map((request) => ({ scope: request.sourceScope, highWater: request.sourceHighWater, digest: request.sourceDigest })),
    )
    const projector = new PromptBuilder.SourceProjector()
    sources.forEach((read, index) => {
      if (Result.isFailure(read)) throw new Error(`main request ${main[index]!.stepId}: ${read.failure.message}`)
      const kept = projector.project(read.success)
      const alone = PromptBuilder.projectSource(read.success)
      assert.strictEqual(Canonical.stringify(kept.messages), Canonical.stringify(alone.messages), `the projection of main request ${index + 1}`)
      assert.deepStrictEqual(kept.unresolvedOperations, alone.unresolvedOperations)
    })
    return requests.length
  })

export interface Recording {
  readonly model: LanguageModel.LanguageModelShape
  /** Every request the engine streamed through `model`, in order, as the engine built it. */
  readonly requests: Array<Prompt.ModelRequest>
}

/** The same model (real sockets), recording each `ModelRequest` before it is sent. */
export const recording = (model: LanguageModel.LanguageModelShape): Recording => {
  const requests: Array<Prompt.ModelRequest> = []
  return {
    requests,
    model: {
      ...model,
      stream: (request, options) => {
        requests.push(request)
        return model.stream(request, options)
      },
    },
  }
}

export interface WireMessage {
  readonly role: string
  readonly content?: string
  readonly tool_call_id?: string
  readonly tool_calls?: ReadonlyArray<{ readonly id: string; readonly function: { readonly name: string; readonly arguments: string } }>
}

/** The chat-completions messages of the `index`-th request the server received. */
export const wireMessages = (server: ScriptedServer.ScriptedServer, index: number): ReadonlyArray<WireMessage> => {
  const request = server.requests()[index]
  if (request === undefined) throw new Error(`the server received no request ${index}`)
  return (request.json as { readonly messages: ReadonlyArray<WireMessage> }).messages
}

/**
 * Opens the SQLite log at `file` with a new engine through `Engine.layer` (recovery runs on open),
 * for the rest of the current scope. The log must not be open elsewhere (the writer lease).
 */
export const reopen = (file: string, options: Partial<Engine.EngineOptions> = { backoffBaseMs: 5, backoffMaxMs: 40 }) =>
  Effect.map(
    Layer.build(
      Engine.layer(options).pipe(Layer.provide(Layer.mergeAll(EventLog.layerSqlite({ path: file }), Ids.layer))),
    ),
    (context) => Context.get(context, Engine.Engine),
  )

/** The `EngineError` a facade promise rejects with; fails the test when it resolves or rejects otherwise. */
export const rejection = async (promise: Promise<unknown>): Promise<EngineError.EngineError> => {
  try {
    await promise
  } catch (error) {
    assert.instanceOf(error, EngineError.EngineError)
    return error as EngineError.EngineError
  }
  return assert.fail("expected a rejection")
}

/** A `slow` tool that signals `started`, then waits for `release` and answers `slow done`. */
export const slowTool = (started: Deferred.Deferred<void>, release: Deferred.Deferred<void>) =>
  Tool.make({
    name: "slow",
    description: "Waits until released.",
    input: Schema.Struct({ value: Schema.String }),
    semantics: "parallel",
    execute: () => Effect.andThen(Deferred.succeed(started, undefined), Effect.as(Deferred.await(release), Tool.text("slow done"))),
  })
