/**
 * A configuration from a caller without types: a header value or key that is not text is refused by
 * `validate` with a message naming it, never thrown from the header check as a `TypeError`.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Redacted, Result } from "effect"
import { LanguageModel, ProviderConfig } from "@maka/model"

const base: ProviderConfig.ProviderConfig = {
  kind: "openai-compatible",
  baseUrl: "http://127.0.0.1:8080/v1",
  model: "m",
  apiKey: Redacted.make(""),
}

const problemOf = (config: ProviderConfig.ProviderConfig): string => {
  const checked = ProviderConfig.validate(config)
  return Result.isFailure(checked) ? checked.failure : assert.fail("expected a refusal")
}

/** A value the types forbid, as a host without types would pass it. */
const untyped = <A>(value: unknown): A => value as A

describe("header values that are not text", () => {
  it("refuses a header value that is a number, an object or a Redacted number, naming the header", () => {
    for (const value of [5, { a: 1 }, null, Redacted.make(5)]) {
      assert.strictEqual(
        problemOf({ ...base, headers: { "x-a": untyped(value) } }),
        "header x-a must be a string or a Redacted string",
        String(value),
      )
    }
  })

  it("refuses headers that are not an object, and an apiKey Redacted over a number", () => {
    assert.strictEqual(problemOf({ ...base, headers: untyped(null) }), "headers must be an object of header names to values")
    assert.strictEqual(problemOf({ ...base, headers: untyped("x-a: 1") }), "headers must be an object of header names to values")
    // A Headers or a Map has no fields of its own to read: it would send no header at all.
    for (const headers of [new Headers({ "x-a": "1" }), new Map([["x-a", "1"]])]) {
      assert.include(problemOf({ ...base, headers: untyped(headers) }), "headers must be a plain object of header names to values")
    }
    assert.isTrue(Result.isSuccess(ProviderConfig.validate({ ...base, headers: Object.assign(Object.create(null), { "x-a": "1" }) })))
    assert.strictEqual(problemOf({ ...base, apiKey: untyped(Redacted.make(42)) }), "apiKey must be a string")
  })

  it("still accepts string and Redacted string values", () => {
    assert.isTrue(Result.isSuccess(ProviderConfig.validate({ ...base, headers: { "x-a": "1", "x-b": Redacted.make("2") } })))
  })

  it.effect("makes LanguageModel.make fail with an Adapter error, not a defect", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(LanguageModel.make({ ...base, headers: { "x-a": untyped(5) } }))
      assert.strictEqual(error.reason._tag, "Adapter")
      assert.include(error.message, "header x-a must be a string or a Redacted string")
    }),
  )
})
