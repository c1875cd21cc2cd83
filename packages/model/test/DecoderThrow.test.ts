/**
 * A decoder that throws on a chunk (an adapter defect) ends the stream with a typed adapter error:
 * the read runs in a callback outside any fiber, where a throw would otherwise leave the pull waiting
 * forever (docs/model.md §4.2).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Stream } from "effect"
import * as ModelError from "../src/ModelError.ts"
import { fromFetchResponse } from "../src/internal/http-client.ts"
import type { Normalizer } from "../src/internal/normalizer.ts"
import * as Transport from "../src/internal/transport.ts"

const sseBody = (): Response =>
  new Response('data: {"id":"x","choices":[]}\n\n', { status: 200, headers: { "content-type": "text/event-stream" } })

const throwing: Normalizer = {
  message: () => {
    throw new RangeError("Maximum call stack size exceeded")
  },
  end: () => undefined,
  isFinished: () => false,
  saysNothing: () => false,
  hasBufferedOutput: () => false,
}

describe("a decoder that throws", () => {
  it.effect("fails the stream as an adapter error instead of hanging", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const stream = yield* Transport.open({
          url: "http://127.0.0.1:9/v1/chat/completions",
          headers: {},
          body: "{}",
          send: async () => fromFetchResponse(sseBody()),
          idleTimeoutMs: 60_000,
          deadlineMs: undefined,
          cleanupGraceMs: 10,
          maxDeltaChars: 8_192,
          maxOutputBytes: 1 << 20,
          maxEventBytes: 1 << 20,
          maxErrorBodyBytes: 1 << 16,
          afterFinishGraceMs: 10,
          secrets: [],
          normalizer: throwing,
        })
        const exit = yield* Effect.exit(Stream.runCollect(stream).pipe(Effect.timeout("5 seconds")))
        assert.isTrue(Exit.isFailure(exit))
        const error = Exit.isFailure(exit) ? exit.cause.reasons.find((reason) => reason._tag === "Fail")?.error : undefined
        assert.instanceOf(error, ModelError.ModelError)
        assert.deepStrictEqual(error.reason, ModelError.adapter(ModelError.AdapterMessage.decoderFailed).reason)
      }),
    ))
})
