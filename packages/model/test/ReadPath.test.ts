/**
 * The lean read path (docs/model.md §4.2): every network chunk's events are delivered together and in
 * order, an SSE event split across chunks (a multi-byte character too) is reassembled, the idle timer
 * runs between chunks, and interrupting the stream in the middle of a chunk's events releases the
 * response. Chunk boundaries come from the loopback server's separate writes, or from a body the
 * test feeds itself through the configured `fetch`.
 */
import { Readable } from "node:stream"
import { assert, describe, it } from "@effect/vitest"
import type { Model } from "@maka/facts"
import { Effect, Fiber, Queue, Redacted, Stream } from "effect"
import { TestClock } from "effect/testing"
import { Respond, ScriptedServer } from "@maka/testkit"
import { LanguageModel } from "@maka/model"
import { advanceUntilDone, API_KEY, collect, openAi, request, waitUntil } from "./support.ts"

/** One OpenAI-compatible chunk as SSE text. */
const frame = (delta: Readonly<Record<string, unknown>>, finishReason: string | null = null): string =>
  `data: ${JSON.stringify({
    id: "chatcmpl-read",
    object: "chat.completion.chunk",
    created: 1_767_225_600,
    model: "test-model",
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
  })}\n\n`

const opening = frame({ role: "assistant", content: "" })
const texts = (pieces: ReadonlyArray<string>): string => pieces.map((piece) => frame({ content: piece })).join("")
const closing = `${frame({}, "stop")}data: [DONE]\n\n`

/** Delivered arrays of events as the stream's consumer sees them (one per pull). */
const batchesOf = (stream: Stream.Stream<Model.ModelEvent, import("@maka/model").ModelError.ModelError>) =>
  Effect.map(Stream.runCollect(Stream.chunks(stream)), (batches) => batches.map((batch) => [...batch]))

const deltasOf = (events: ReadonlyArray<Model.ModelEvent>): Array<string> =>
  events.flatMap((event) => (event.kind === "part_delta" ? [event.text] : []))

/** A response body fed by the test: `push` is one network chunk; cancelling it is recorded. */
const feedableBody = () => {
  let controller: ReadableStreamDefaultController<Uint8Array> | undefined
  let cancelled = false
  const body = new ReadableStream<Uint8Array>({
    start: (given) => {
      controller = given
    },
    cancel: () => {
      cancelled = true
    },
  })
  const encoder = new TextEncoder()
  return {
    body,
    push: (text: string) => controller?.enqueue(encoder.encode(text)),
    pushBytes: (bytes: Uint8Array) => controller?.enqueue(bytes),
    close: () => controller?.close(),
    fail: (error: unknown) => controller?.error(error),
    isCancelled: () => cancelled,
  }
}

/** A model whose `fetch` answers with `body` (and records the signal it was given). */
const fedModel = (body: ReadableStream<Uint8Array>, idleTimeoutMs = 1_000) => {
  const signals: Array<AbortSignal> = []
  const model = LanguageModel.make(
    {
      kind: "openai-compatible",
      baseUrl: "http://127.0.0.1:9/v1",
      model: "test-model",
      apiKey: Redacted.make(""),
      fetch: (_input, init) => {
        if (init.signal !== undefined && init.signal !== null) signals.push(init.signal)
        return Promise.resolve(new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } }))
      },
    },
    { idleTimeoutMs },
  )
  return { model, signals }
}

/** Lets the promises of a fed body settle (real time; nothing is asserted on its length). */
const settle = Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 5)))

describe("one network chunk, one delivery", () => {
  it.effect("delivers all events of one network chunk together and in order", () =>
    Effect.gen(function* () {
      const pieces = Array.from({ length: 50 }, (_, index) => `t${index} `)
      const server = yield* ScriptedServer.make({
        script: [Respond.sse([Respond.raw(opening + texts(pieces)), Respond.raw(closing, { delayMs: 30 })])],
      })
      const batches = yield* batchesOf((yield* openAi(server)).stream(request()))
      // The first write carries the metadata, the part's start and its 50 deltas: one delivery.
      const first = batches[0] ?? []
      assert.deepStrictEqual(
        first.map((event) => event.kind),
        ["response_metadata", "part_started", ...pieces.map(() => "part_delta")],
      )
      assert.deepStrictEqual(deltasOf(first), pieces)
      // The second write (the finish and [DONE]) is one more delivery.
      assert.strictEqual(batches.length, 2)
      assert.deepStrictEqual(
        batches[1]?.map((event) => event.kind),
        ["part_finished", "finished"],
      )
    }),
  )

  it.effect("the engine's way of reading (a queue, taking all) sees a chunk's events at once", () =>
    Effect.gen(function* () {
      const fed = feedableBody()
      const { model } = fedModel(fed.body)
      const stream = (yield* model).stream(request())
      const queue = yield* Stream.toQueue(stream, { capacity: 256 })
      fed.push(opening + texts(["a", "b", "c"]))
      const firstTake = yield* Queue.takeAll(queue)
      assert.deepStrictEqual(deltasOf([...firstTake]), ["a", "b", "c"])
      fed.push(texts(["d"]) + closing)
      fed.close()
      const rest = yield* Queue.takeAll(queue)
      assert.deepStrictEqual(deltasOf([...rest]), ["d"])
    }).pipe(Effect.scoped),
  )
})

describe("events split across network chunks", () => {
  it.effect("reassembles an event split across chunks, a four-byte character split between its bytes too", () =>
    Effect.gen(function* () {
      const text = "héllo 😀 wörld"
      const bytes = new TextEncoder().encode(opening + frame({ content: text }) + closing)
      const emoji = new TextEncoder().encode("😀")
      // Cut inside the JSON of the delta, then between the second and third byte of the emoji.
      const whole = new TextDecoder().decode(bytes)
      const emojiAt = bytes.findIndex((_, index) => emoji.every((byte, offset) => bytes[index + offset] === byte))
      const cuts = [whole.indexOf("héllo") + 2, emojiAt + 2, bytes.length - 3]
      const fed = feedableBody()
      const { model } = fedModel(fed.body)
      const fiber = yield* Effect.forkChild(collect((yield* model).stream(request())))
      let from = 0
      for (const cut of [...cuts, bytes.length]) {
        fed.pushBytes(bytes.slice(from, cut))
        from = cut
        yield* settle
      }
      fed.close()
      const { events, error } = yield* Fiber.join(fiber)
      assert.strictEqual(error, undefined, error?.message)
      assert.deepStrictEqual(deltasOf(events), [text])
      assert.strictEqual(events.at(-1)?.kind, "finished")
    }),
  )

  it.effect("decodes a chunk of more than 64 KiB in slices, a character split at a slice's end included", () =>
    Effect.gen(function* () {
      // The delta's emoji starts 2 bytes before 64 KiB, so the first slice ends inside it.
      const encoder = new TextEncoder()
      const emoji = encoder.encode("😀")
      const bodyOf = (fillerLength: number) => {
        const text = `${"x".repeat(fillerLength)}😀${"é".repeat(40_000)}`
        return { text, bytes: encoder.encode(opening + frame({ content: text }) + closing) }
      }
      const emojiAt = (bytes: Uint8Array) => bytes.findIndex((_, index) => emoji.every((byte, offset) => bytes[index + offset] === byte))
      const probe = bodyOf(0)
      const { text, bytes } = bodyOf(64 * 1024 - 2 - emojiAt(probe.bytes))
      assert.strictEqual(emojiAt(bytes), 64 * 1024 - 2)
      const fed = feedableBody()
      const { model } = fedModel(fed.body)
      const fiber = yield* Effect.forkChild(collect((yield* model).stream(request())))
      fed.pushBytes(bytes)
      fed.close()
      const { events, error } = yield* Fiber.join(fiber)
      assert.strictEqual(error, undefined, error?.message)
      assert.strictEqual(deltasOf(events).join(""), text)
    }),
  )

  it.effect("reassembles events the server writes in pieces, with a pause between them", () =>
    Effect.gen(function* () {
      const body = opening + texts(["ä", "😀x"]) + closing
      const pieces = [body.slice(0, 30), body.slice(30, opening.length + 40), body.slice(opening.length + 40)]
      const server = yield* ScriptedServer.make({
        script: [Respond.sse(pieces.map((piece) => Respond.raw(piece, { delayMs: 20 })))],
      })
      const { events, error } = yield* collect((yield* openAi(server)).stream(request()))
      assert.strictEqual(error, undefined, error?.message)
      assert.deepStrictEqual(deltasOf(events), ["ä", "😀x"])
    }),
  )
})

describe("line endings at a chunk's end and at the body's end", () => {
  /** SSE text with every line ending a lone CR. */
  const lonely = (text: string): string => text.replace(/\n/g, "\r")

  it.effect("a lone CR ending a chunk ends its line: the event is delivered with its chunk, the body's last one too", () =>
    Effect.gen(function* () {
      const fed = feedableBody()
      const { model } = fedModel(fed.body)
      const queue = yield* Stream.toQueue((yield* model).stream(request()), { capacity: 256 })
      fed.push(lonely(opening + texts(["first"])))
      // Delivered before anything else is sent (the parser waited for an LF that never came).
      assert.deepStrictEqual(deltasOf([...(yield* Queue.takeAll(queue))]), ["first"])
      fed.push(lonely(texts(["second"]) + `${frame({}, "stop")}`))
      fed.close()
      const rest = [...(yield* Queue.takeAll(queue))]
      assert.deepStrictEqual(deltasOf(rest), ["second"])
      assert.strictEqual(rest.at(-1)?.kind, "finished")
    }).pipe(Effect.scoped),
  )

  it.effect("a CRLF split between two chunks is one line ending: an event's data lines stay one event", () =>
    Effect.gen(function* () {
      // One chunk's JSON over two data lines, the CRLF between them split across the reads.
      const json = JSON.stringify({ id: "chatcmpl-read", model: "test-model", choices: [{ index: 0, delta: { content: "joined" }, finish_reason: null }] })
      const cut = json.indexOf(",\"choices\"") + 1
      const fed = feedableBody()
      const { model } = fedModel(fed.body)
      const fiber = yield* Effect.forkChild(collect((yield* model).stream(request())))
      fed.push(`${opening}data: ${json.slice(0, cut)}\r`)
      yield* settle
      fed.push(`\ndata: ${json.slice(cut)}\r\n\r\n${closing}`)
      fed.close()
      const { events, error } = yield* Fiber.join(fiber)
      assert.strictEqual(error, undefined, error?.message)
      assert.deepStrictEqual(deltasOf(events), ["joined"])
    }),
  )

  it.effect("the body's last event without its blank line is kept when complete, dropped when cut", () =>
    Effect.gen(function* () {
      for (const ending of ["\n", "\r\n", "", "\r"]) {
        const fed = feedableBody()
        const { model } = fedModel(fed.body)
        const fiber = yield* Effect.forkChild(collect((yield* model).stream(request())))
        // No [DONE]: the finish reason is in the last event, whose blank line never came.
        fed.push(opening + texts(["done"]) + frame({}, "stop").replace(/\n\n$/, ending))
        fed.close()
        const { events, error } = yield* Fiber.join(fiber)
        assert.strictEqual(error, undefined, `ending ${JSON.stringify(ending)}: ${error?.message}`)
        assert.strictEqual(events.at(-1)?.kind, "finished")
      }
      // A complete last event of more than 64 KiB (a large final chunk) is kept too.
      {
        const fed = feedableBody()
        const { model } = fedModel(fed.body)
        const fiber = yield* Effect.forkChild(collect((yield* model).stream(request())))
        const large = "x".repeat(70_000)
        fed.push(opening + frame({ content: large }, "stop").replace(/\n\n$/, "\n"))
        fed.close()
        const { events, error } = yield* Fiber.join(fiber)
        assert.strictEqual(error, undefined, error?.message)
        assert.strictEqual(deltasOf(events).join(""), large)
      }
      // A last event cut inside its JSON is not an event: the body ended before its finish.
      const fed = feedableBody()
      const { model } = fedModel(fed.body)
      const fiber = yield* Effect.forkChild(collect((yield* model).stream(request())))
      fed.push(opening + texts(["done"]) + frame({}, "stop").slice(0, -12))
      fed.close()
      const { error } = yield* Fiber.join(fiber)
      assert.match(error?.message ?? "", /stream ended without a finish reason/)
    }),
  )
})

describe("after the finish, chunk by chunk", () => {
  it.effect("an event in a chunk after the finish's chunk fails the step and yields nothing of the finished stream", () =>
    Effect.gen(function* () {
      const fed = feedableBody()
      const { model } = fedModel(fed.body)
      const fiber = yield* Effect.forkChild(collect((yield* model).stream(request())))
      yield* settle
      fed.push(opening + texts(["a"]) + closing)
      yield* settle
      fed.push(texts(["late"]))
      fed.close()
      const { events, error } = yield* Fiber.join(fiber)
      assert.strictEqual(error?.reason._tag, "Adapter")
      assert.strictEqual(error?.reason.message, "event after model finish")
      assert.isFalse(events.some((event) => event.kind === "finished"))
    }),
  )

  it.effect("the finish's events wait for the body's end in a later chunk, then come together", () =>
    Effect.gen(function* () {
      const fed = feedableBody()
      const { model } = fedModel(fed.body)
      const fiber = yield* Effect.forkChild(batchesOf((yield* model).stream(request())))
      yield* settle
      fed.push(opening + texts(["a"]))
      yield* settle
      fed.push(closing)
      yield* settle
      fed.push(": keep-alive\n\n")
      yield* settle
      assert.isUndefined(fiber.pollUnsafe())
      fed.close()
      const batches = yield* Fiber.join(fiber)
      assert.deepStrictEqual(batches.at(-1)?.map((event) => event.kind), ["part_finished", "finished"])
    }),
  )
})

describe("the idle timer between chunks", () => {
  it.effect("each chunk restarts the timer; a silence of the idle timeout after one ends the attempt", () =>
    Effect.gen(function* () {
      const fed = feedableBody()
      const { model } = fedModel(fed.body, 1_000)
      const seen: Array<Model.ModelEvent> = []
      const fiber = yield* Effect.forkChild(
        Effect.flip(Stream.runForEach((yield* model).stream(request()), (event) => Effect.sync(() => seen.push(event)))),
      )
      yield* settle
      fed.push(opening + texts(["a"]))
      yield* waitUntil(() => seen.length === 3)
      // 600 ms, a chunk, 600 ms: never 1,000 ms without a byte, so the attempt goes on.
      yield* TestClock.adjust(600)
      yield* settle
      fed.push(texts(["b"]))
      yield* waitUntil(() => seen.length === 4)
      yield* TestClock.adjust(600)
      yield* settle
      assert.isUndefined(fiber.pollUnsafe())
      // Then silence: the timer expires 1,000 ms after the last byte.
      yield* advanceUntilDone(fiber, 200)
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error.reason._tag, "TimedOut")
      assert.deepStrictEqual(deltasOf(seen), ["a", "b"])
    }),
  )

  it.effect("the timer does not count while the consumer holds a delivered chunk", () =>
    Effect.gen(function* () {
      const fed = feedableBody()
      const { model } = fedModel(fed.body, 1_000)
      const fiber = yield* Effect.forkChild(
        collect(
          Stream.mapEffect((yield* model).stream(request()), (event) =>
            // The consumer takes 5 s over the first delta: time the adapter spends waiting for nobody.
            event.kind === "part_delta" && event.text === "slow" ? Effect.as(Effect.sleep(5_000), event) : Effect.succeed(event),
          ),
        ),
      )
      yield* settle
      fed.push(opening + texts(["slow"]))
      yield* settle
      yield* TestClock.adjust(5_000)
      yield* settle
      fed.push(closing)
      fed.close()
      yield* settle
      yield* advanceUntilDone(fiber, 100)
      const { events, error } = yield* Fiber.join(fiber)
      assert.strictEqual(error, undefined, error?.message)
      assert.strictEqual(events.at(-1)?.kind, "finished")
    }),
  )
})

describe("cancellation in the middle of a chunk", () => {
  it.effect("interrupting after part of a chunk's events aborts the request and cancels the body", () =>
    Effect.gen(function* () {
      const fed = feedableBody()
      const { model, signals } = fedModel(fed.body)
      const seen: Array<string> = []
      const fiber = yield* Effect.forkChild(
        Stream.runForEach((yield* model).stream(request()), (event) =>
          Effect.sync(() => {
            if (event.kind === "part_delta") seen.push(event.text)
          }).pipe(Effect.andThen(event.kind === "part_delta" && event.text === "b" ? Effect.never : Effect.void)),
        ),
      )
      yield* settle
      fed.push(opening + texts(["a", "b", "c", "d"]))
      yield* waitUntil(() => seen.includes("b"))
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(seen, ["a", "b"])
      assert.isTrue(signals[0]?.aborted)
      assert.isTrue(fed.isCancelled())
    }),
  )

  it.effect("interrupting mid-chunk over a socket closes it and frees the permit", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [
          Respond.stallAfter([Respond.raw(opening + texts(["a", "b", "c", "d"]))]),
          Respond.sse([Respond.raw(opening + texts(["next"]) + closing)]),
        ],
      })
      const model = yield* openAi(server, { concurrency: 1 })
      const seen: Array<string> = []
      const fiber = yield* Effect.forkChild(
        Stream.runForEach(model.stream(request()), (event) =>
          Effect.sync(() => {
            if (event.kind === "part_delta") seen.push(event.text)
          }).pipe(Effect.andThen(event.kind === "part_delta" && event.text === "b" ? Effect.never : Effect.void)),
        ),
      )
      yield* waitUntil(() => seen.includes("b"))
      yield* Fiber.interrupt(fiber)
      assert.strictEqual((yield* ScriptedServer.awaitExchange(server, 0)).outcome, "client_closed")
      const { events, error } = yield* collect(model.stream(request()))
      assert.strictEqual(error, undefined, error?.message)
      assert.deepStrictEqual(deltasOf(events), ["next"])
    }),
  )
})

describe("failures on the read path", () => {
  const failingModel = (fetch: (input: string, init: RequestInit) => Promise<Response>) =>
    LanguageModel.make({ kind: "openai-compatible", baseUrl: "http://127.0.0.1:9/v1", model: "test-model", apiKey: Redacted.make(API_KEY), fetch })

  it.effect("a fetch that fails is a network error whose message never carries the key", () =>
    Effect.gen(function* () {
      const model = yield* failingModel(() => Promise.reject(new Error(`connect refused for Bearer ${API_KEY}`)))
      const { error } = yield* collect(model.stream(request()))
      assert.strictEqual(error?.reason._tag, "Provider")
      assert.isTrue(error?.reason._tag === "Provider" && error.reason.reason === "network")
      assert.include(error?.message ?? "", "request failed")
      assert.notInclude(error?.message ?? "", API_KEY)
    }),
  )

  it.effect("a fetch that throws instead of rejecting is a network error too", () =>
    Effect.gen(function* () {
      const model = yield* failingModel(() => {
        throw new TypeError(`invalid header for ${API_KEY}`)
      })
      const { error } = yield* collect(model.stream(request()))
      assert.isTrue(error?.reason._tag === "Provider" && error.reason.reason === "network")
      assert.notInclude(error?.message ?? "", API_KEY)
    }),
  )

  it.effect("a fetch that returns no Promise, or resolves with no Response, is an adapter error naming it", () =>
    Effect.gen(function* () {
      for (const [answer, said] of [
        [() => "a response", "returned string, not a Promise of a Response"],
        [() => undefined, "returned undefined, not a Promise of a Response"],
        [() => Promise.resolve({ ok: true }), "resolved with object, not a Response"],
        // node-fetch's Response: its body is a Node stream.
        [
          () => Promise.resolve({ status: 200, ok: true, headers: new Headers(), body: Readable.from(["data: [DONE]\n\n"]) }),
          "resolved with a Response whose body is not a web ReadableStream (no getReader)",
        ],
      ] as const) {
        const model = yield* failingModel(answer as unknown as () => Promise<Response>)
        const { error } = yield* collect(model.stream(request()))
        assert.strictEqual(error?.reason._tag, "Adapter", said)
        assert.include(error?.message ?? "", said)
      }
    }),
  )

  it.effect("a body that fails mid-stream is a truncated stream whose message never carries the key", () =>
    Effect.gen(function* () {
      const fed = feedableBody()
      const model = yield* failingModel(() =>
        Promise.resolve(new Response(fed.body, { status: 200, headers: { "content-type": "text/event-stream" } })),
      )
      const fiber = yield* Effect.forkChild(collect(model.stream(request())))
      yield* settle
      fed.push(opening + texts(["a"]))
      yield* settle
      fed.fail(new Error(`socket reset while sending ${API_KEY}`))
      const { events, error } = yield* Fiber.join(fiber)
      assert.deepStrictEqual(deltasOf(events), ["a"])
      assert.isTrue(error?.reason._tag === "Provider" && error.reason.reason === "stream_truncated")
      assert.include(error?.message ?? "", "response body failed")
      assert.notInclude(error?.message ?? "", API_KEY)
    }),
  )

  it.effect("an abort that does not come from the adapter is a cancellation, at the fetch and in the body", () =>
    Effect.gen(function* () {
      const aborted = () => new DOMException("The operation was aborted.", "AbortError")
      const atFetch = yield* failingModel(() => Promise.reject(aborted()))
      assert.strictEqual((yield* collect(atFetch.stream(request()))).error?.reason._tag, "Cancelled")
      const fed = feedableBody()
      const inBody = yield* failingModel(() =>
        Promise.resolve(new Response(fed.body, { status: 200, headers: { "content-type": "text/event-stream" } })),
      )
      const fiber = yield* Effect.forkChild(collect(inBody.stream(request())))
      yield* settle
      fed.push(opening)
      yield* settle
      fed.fail(aborted())
      assert.strictEqual((yield* Fiber.join(fiber)).error?.reason._tag, "Cancelled")
    }),
  )
})
