import { assert, describe, it } from "@effect/vitest"
import { Codec, Digest } from "@maka/facts"
import { Result } from "effect"
import { FactBuilders, History } from "@maka/testkit"

describe("History", () => {
  it("builds a small run whose every event decodes back to itself", () => {
    const history = History.smallRun()
    assert.deepStrictEqual(
      history.events.map((stored) => stored.event.fact.kind),
      [
        "invocation_opened",
        "model_requested",
        "model_completed",
        "tool_dispatched",
        "tool_settled",
        "model_requested",
        "model_completed",
        "invocation_ended",
      ],
    )
    for (const written of history.written) {
      const decoded = Codec.decodeEventJson(written.write.json)
      assert.isTrue(Result.isSuccess(decoded))
      assert.strictEqual(Codec.encodeEventJson(History.reread(written)), written.write.json)
    }
    assert.deepStrictEqual(
      history.events.map((stored) => stored.sequence),
      [1, 2, 3, 4, 5, 6, 7, 8],
    )
  })

  it("binds each request to the session prefix before it", () => {
    const history = History.smallRun()
    for (const [index, stored] of history.events.entries()) {
      const fact = stored.event.fact
      if (fact.kind !== "model_requested") continue
      const before = history.written.slice(0, index)
      assert.strictEqual(fact.sourceHighWater, index)
      assert.strictEqual(
        fact.sourceDigest,
        Digest.logPrefix(
          { kind: "session", id: "session-1" },
          before.map((item) => ({ sequence: item.stored.sequence, json: item.write.json })),
          index,
        ),
      )
    }
  })

  it("is deterministic: the same run twice gives the same bytes, pinned by its prefix digest", () => {
    const first = History.smallRun()
    const second = History.smallRun()
    assert.deepStrictEqual(
      first.writes.map((write) => write.json),
      second.writes.map((write) => write.json),
    )
    // Pinned: a change to the wire format, the serializer or a digest tag changes this value.
    assert.strictEqual(first.prefixDigest(), PINNED_SMALL_RUN_DIGEST)
  })

  it("refuses event id numbers and first sequences that build no valid event", () => {
    assert.strictEqual(FactBuilders.eventId(0), "00000000-0000-4000-8000-000000000000")
    assert.strictEqual(FactBuilders.eventId(2 ** 48 - 1), "00000000-0000-4000-8000-ffffffffffff")
    for (const n of [-1, 1.5, 2 ** 48, Number.NaN, Number.POSITIVE_INFINITY]) {
      assert.throws(() => FactBuilders.eventId(n), RangeError, `eventId(n) needs an integer n from 0 to 2^48 - 1, got ${n}`)
      assert.throws(() => FactBuilders.workspaceUuid(n), RangeError, "workspaceUuid(n)")
      assert.throws(() => new History.History({ firstId: n }), RangeError, `History firstId needs an integer`)
    }
    for (const firstSequence of [0, -3, 1.5, Number.NaN]) {
      assert.throws(
        () => new History.History({ firstSequence }),
        RangeError,
        `History firstSequence needs a positive integer, got ${firstSequence}`,
      )
    }
    const last = new History.History({ firstId: 2 ** 48 - 1 })
    last.open()
    assert.throws(() => last.open(), RangeError, "got 281474976710656")
    assert.strictEqual(new History.History({ firstSequence: 5 }).highWater, 4)
  })

  it("takes undefined for an override as absent, keeping the default (under exactOptionalPropertyTypes)", () => {
    assert.deepStrictEqual(FactBuilders.invocation({ runId: undefined, turnId: "turn-9" }), {
      sessionId: "session-1",
      turnId: "turn-9",
      runId: "run-1",
      invocationId: "invocation-1",
    })
    assert.strictEqual(FactBuilders.configuration({ cwd: undefined }).cwd, "/workspace")
    assert.strictEqual(FactBuilders.modelBinding({ model: undefined }).model, "test-model")
  })

  it("refuses to build an invalid event", () => {
    const history = new History.History()
    const run = history.open()
    assert.throws(() => run.dispatch("missing-step", "call-1"))
  })
})

const PINNED_SMALL_RUN_DIGEST = "sha256:38f2f6110009b97a990a23c05586d0df5b6639a69c53dadeede15a6b6c432f9a"
