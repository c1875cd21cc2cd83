import { assert, describe, it } from "@effect/vitest"
import type { Model } from "@maka/facts"
import { ModelError } from "@maka/model"
import { coalesce, interruptionOf } from "../src/internal/attempt.ts"

/** The attempt's own rules, case by case: how a failed attempt is recorded, and which deltas merge. */

const provider = (reason: "network" | "rate_limit" | "provider_unavailable" | "stream_truncated" | "rejected" | "auth", replaySafe: boolean) =>
  ModelError.provider({ reason, message: "provider failed", status: 500, replaySafe })

describe("interruptionOf", () => {
  it("records each failure with its own status", () => {
    assert.strictEqual(interruptionOf(ModelError.cancelled()), "cancelled")
    assert.strictEqual(interruptionOf(ModelError.timedOut()), "timed_out")
    assert.strictEqual(interruptionOf(ModelError.deadlineExceeded(1_000)), "timed_out")
    assert.strictEqual(interruptionOf(ModelError.adapter("bad stream")), "failed")
    assert.strictEqual(interruptionOf(ModelError.contextOverflow(false)), "failed")
    assert.strictEqual(interruptionOf(ModelError.contextOverflow(true)), "failed")
  })

  it("records a provider failure retryable_failure only when it may be re-sent", () => {
    for (const reason of ["network", "rate_limit", "provider_unavailable", "stream_truncated"] as const) {
      assert.strictEqual(interruptionOf(provider(reason, true)), "retryable_failure", reason)
      assert.strictEqual(interruptionOf(provider(reason, false)), "failed", `${reason} not replay-safe`)
    }
    assert.strictEqual(interruptionOf(provider("rejected", true)), "failed")
    assert.strictEqual(interruptionOf(provider("auth", true)), "failed")
  })
})

const delta = (id: string, text: string, providerOptions?: Readonly<Record<string, string>>): Model.ModelEvent =>
  providerOptions === undefined
    ? { kind: "part_delta", id, text }
    : { kind: "part_delta", id, text, providerOptions }

describe("coalesce", () => {
  it("merges consecutive deltas of one part", () => {
    assert.deepStrictEqual(coalesce([delta("p1", "ab"), delta("p1", "cd"), delta("p1", "e")], 100), [delta("p1", "abcde")])
  })

  it("never merges deltas of different parts, nor across another event", () => {
    const started: Model.ModelEvent = { kind: "part_started", id: "p2", textKind: "text" }
    assert.deepStrictEqual(coalesce([delta("p1", "a"), delta("p2", "b")], 100), [delta("p1", "a"), delta("p2", "b")])
    assert.deepStrictEqual(coalesce([delta("p1", "a"), started, delta("p1", "b")], 100), [delta("p1", "a"), started, delta("p1", "b")])
    assert.deepStrictEqual(coalesce([started, delta("p2", "a")], 100), [started, delta("p2", "a")])
  })

  it("never merges a delta that carries provider options, on either side", () => {
    const withOptions = delta("p1", "b", { signature: "s" })
    assert.deepStrictEqual(coalesce([delta("p1", "a"), withOptions], 100), [delta("p1", "a"), withOptions])
    assert.deepStrictEqual(coalesce([withOptions, delta("p1", "c")], 100), [withOptions, delta("p1", "c")])
  })

  it("merges up to exactly maxChars, and starts a new delta beyond", () => {
    assert.deepStrictEqual(coalesce([delta("p1", "abc"), delta("p1", "de")], 5), [delta("p1", "abcde")])
    assert.deepStrictEqual(coalesce([delta("p1", "abc"), delta("p1", "def")], 5), [delta("p1", "abc"), delta("p1", "def")])
    assert.deepStrictEqual(coalesce([delta("p1", "abc"), delta("p1", "def"), delta("p1", "g")], 5), [
      delta("p1", "abc"),
      delta("p1", "defg"),
    ])
  })

  it("keeps every character and the order of the stream", () => {
    const events = [delta("p1", "x"), delta("p1", "y"), { kind: "part_finished", id: "p1" } satisfies Model.ModelEvent, delta("p3", "z")]
    assert.deepStrictEqual(coalesce(events, 1), events)
    assert.deepStrictEqual(coalesce([], 10), [])
  })
})
