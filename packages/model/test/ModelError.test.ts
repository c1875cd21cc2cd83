/** The retry predicate: one function that the engine asks, and the getter that delegates to it. */
import { assert, describe, it } from "@effect/vitest"
import { ModelError } from "@maka/model"

const provider = (reason: ModelError.ProviderReason, replaySafe: boolean, retryAfterMs?: number) =>
  ModelError.provider({ reason, message: "m", replaySafe, ...(retryAfterMs === undefined ? {} : { retryAfterMs }) })

describe("ModelError.isRetryable", () => {
  it("is true exactly for a transient, replay-safe Provider reason", () => {
    const cases: ReadonlyArray<readonly [ModelError.ModelError, boolean]> = [
      [provider("network", true), true],
      [provider("rate_limit", true), true],
      [provider("provider_unavailable", true), true],
      [provider("stream_truncated", true), true],
      [provider("network", false), false],
      [provider("stream_truncated", false), false],
      [provider("rejected", true), false],
      [provider("auth", true), false],
      [ModelError.contextOverflow(false), false],
      [ModelError.timedOut(), false],
      [ModelError.adapter("x"), false],
      [ModelError.cancelled(), false],
    ]
    for (const [error, expected] of cases) {
      assert.strictEqual(ModelError.isRetryable(error), expected, error.message)
      assert.strictEqual(error.isRetryable, expected, error.message)
    }
  })

  it("gives the provider's requested delay only for a retryable failure", () => {
    assert.strictEqual(ModelError.retryAfterMs(provider("rate_limit", true, 1_500)), 1_500)
    assert.isUndefined(ModelError.retryAfterMs(provider("rate_limit", true)))
    assert.isUndefined(ModelError.retryAfterMs(provider("rate_limit", false, 1_500)))
    assert.isUndefined(ModelError.retryAfterMs(provider("rejected", true, 1_500)))
  })
})
