/** Shared helpers of the model tests: models bound to a scripted server, requests, collected results. */
import type { Model, Prompt } from "@maka/facts"
import { assert } from "@effect/vitest"
import { Effect, Redacted, Result, Stream } from "effect"
import { TestClock } from "effect/testing"
import type { ScriptedServer } from "@maka/testkit"
import { LanguageModel, ModelError } from "@maka/model"

export const API_KEY = "sk-test-0123456789abcdef"

export const openAi = (server: ScriptedServer.ScriptedServer, options: LanguageModel.MakeOptions = {}) =>
  LanguageModel.make(
    { kind: "openai-compatible", baseUrl: `${server.url}/v1/`, model: "test-model", apiKey: Redacted.make(API_KEY) },
    options,
  )

export const anthropic = (server: ScriptedServer.ScriptedServer, options: LanguageModel.MakeOptions = {}) =>
  LanguageModel.make(
    { kind: "anthropic", baseUrl: server.url, model: "claude-test", apiKey: Redacted.make(API_KEY) },
    options,
  )

export const request = (overrides: Partial<Prompt.ModelRequest> = {}): Prompt.ModelRequest => ({
  prompt: [
    { role: "system", content: "You are terse." },
    { role: "user", content: "Hello" },
  ],
  tools: [],
  providerOptions: {},
  maxOutputTokens: 256,
  ...overrides,
})

/** Every event the stream yields before it ends, and how it ended. */
export const collect = (stream: Stream.Stream<Model.ModelEvent, ModelError.ModelError>) =>
  Effect.gen(function* () {
    const events: Array<Model.ModelEvent> = []
    const result = yield* Effect.result(Stream.runForEach(stream, (event) => Effect.sync(() => events.push(event))))
    return { events, error: Result.isFailure(result) ? result.failure : undefined }
  })

/** The stream's error; the test fails when the stream succeeds. */
export const failureOf = (stream: Stream.Stream<Model.ModelEvent, ModelError.ModelError>) =>
  Effect.flip(Stream.runDrain(stream))

/** The `Provider` reason of an error; fails the test otherwise. */
export const providerReason = (error: ModelError.ModelError): ModelError.Provider => {
  if (error.reason._tag !== "Provider") return assert.fail(`expected a Provider reason, got ${error.reason._tag}: ${error.message}`)
  return error.reason
}

/** Polls (real time, 1 ms apart) until `predicate` holds: for waits on another process's progress. */
export const waitUntil = (predicate: () => boolean) =>
  Effect.promise(
    () =>
      new Promise<void>((resolve) => {
        const poll = () => (predicate() ? resolve() : setTimeout(poll, 1))
        poll()
      }),
  )

/** Advances the test clock by `stepMs` until `fiber` is done; only virtual time passes. */
export const advanceUntilDone = (fiber: { readonly pollUnsafe: () => unknown }, stepMs: number) =>
  Effect.gen(function* () {
    while (fiber.pollUnsafe() === undefined) {
      yield* TestClock.adjust(stepMs)
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 1)))
    }
  })
