/**
 * `@maka/model/testing`: a fake `LanguageModel` that answers each `stream` call with the next scripted
 * response (a list of `ModelEvent`s, optionally ending in a `ModelError`) and records every request.
 * No network, no limiter wait beyond its own permits; the engine's tests use it.
 */
import type { Model, Prompt } from "@maka/facts"
import { Effect, Layer, Stream } from "effect"
import * as LanguageModel from "./LanguageModel.ts"
import * as ModelError from "./ModelError.ts"
import * as ModelLimiter from "./ModelLimiter.ts"
import type { ProviderKind } from "./ProviderConfig.ts"
import { routeIdentity } from "./ProviderConfig.ts"

export interface ScriptedResponse {
  readonly events: ReadonlyArray<Model.ModelEvent>
  /** Raised after the events. */
  readonly error?: ModelError.ModelError | undefined
}

export interface FakeOptions {
  readonly kind?: ProviderKind
  readonly model?: string
  readonly concurrency?: number
}

export interface FakeLanguageModel extends LanguageModel.LanguageModelShape {
  /** Every request streamed so far, in call order. */
  readonly requests: () => ReadonlyArray<Prompt.ModelRequest>
}

/** The events of a text answer. */
export const textResponse = (text: string, usage: Model.ModelUsage = { inputTokens: 10, outputTokens: 5 }): ScriptedResponse => ({
  events: [
    { kind: "part_started", id: "text-0", textKind: "text" },
    { kind: "part_delta", id: "text-0", text },
    { kind: "part_finished", id: "text-0" },
    { kind: "finished", reason: "stop", usage },
  ],
})

/** The events of an answer that calls tools. */
export const toolCallResponse = (
  calls: ReadonlyArray<{ readonly id: string; readonly name: string; readonly input: Model.ToolCallPart["input"] }>,
  usage: Model.ModelUsage = { inputTokens: 10, outputTokens: 5 },
): ScriptedResponse => ({
  events: [
    ...calls.map((call): Model.ModelEvent => ({ kind: "tool_call", ...call, providerExecuted: false })),
    { kind: "finished", reason: "tool-calls", usage },
  ],
})

/** A response that fails with `error` before any event. */
export const failure = (error: ModelError.ModelError): ScriptedResponse => ({ events: [], error })

/** A fake model answering with `responses` in order; a call past the end fails with an `Adapter` error. */
export const make = (responses: ReadonlyArray<ScriptedResponse>, options: FakeOptions = {}): FakeLanguageModel => {
  const kind = options.kind ?? "openai-compatible"
  const model = options.model ?? "fake-model"
  const limiter = ModelLimiter.makeUnsafe(options.concurrency ?? 4)
  const queue = [...responses]
  const requests: Array<Prompt.ModelRequest> = []
  const stream = (
    request: Prompt.ModelRequest,
    streamOptions: LanguageModel.StreamOptions = {},
  ): Stream.Stream<Model.ModelEvent, ModelError.ModelError> =>
    Stream.unwrap(
      Effect.gen(function* () {
        yield* ModelLimiter.acquireFor(limiter, streamOptions.reservation)
        requests.push(request)
        const next = queue.shift()
        if (next === undefined) return Stream.fail(ModelError.adapter("fake model has no scripted response left"))
        const events = Stream.fromIterable(next.events)
        return next.error === undefined ? events : Stream.concat(events, Stream.fail(next.error))
      }),
    )
  return {
    kind,
    model,
    routeIdentity: routeIdentity({ kind, baseUrl: "fake://model", model }),
    limiter,
    stream,
    tryReserveBackground: limiter.tryReserveBackground,
    requests: () => [...requests],
  }
}

/** A layer providing the fake as `LanguageModel`. */
export const layer = (responses: ReadonlyArray<ScriptedResponse>, options: FakeOptions = {}): Layer.Layer<LanguageModel.LanguageModel> =>
  Layer.succeed(LanguageModel.LanguageModel, make(responses, options))
