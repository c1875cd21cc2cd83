import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { createParser } from "eventsource-parser"
import { AnthropicSse, OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"

const post = (url: string, body: string, signal?: AbortSignal) =>
  Effect.promise(() =>
    fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
      ...(signal === undefined ? {} : { signal }),
    }),
  )

const text = (response: Response) => Effect.promise(() => response.text())

/** The `data` of every SSE event in `body`. */
const sseData = (body: string): ReadonlyArray<string> => {
  const data: Array<string> = []
  const parser = createParser({ onEvent: (event) => data.push(event.data) })
  parser.feed(body)
  return data
}

describe("ScriptedServer", () => {
  it.effect("records every request with its raw body and answers in script order", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [Respond.json(200, { first: true }), Respond.json(201, "plain text", { "x-extra": "yes" })],
      })
      const first = yield* post(server.url, '{"b":1,"a":"é"}')
      assert.deepStrictEqual(yield* Effect.promise(() => first.json()), { first: true })
      const second = yield* post(server.url, "not json")
      assert.strictEqual(second.status, 201)
      assert.strictEqual(second.headers.get("x-extra"), "yes")
      assert.strictEqual(yield* text(second), "plain text")
      const [one, two] = server.requests()
      assert.strictEqual(one?.body, '{"b":1,"a":"é"}')
      assert.deepStrictEqual(one?.rawBody, new Uint8Array(Buffer.from('{"b":1,"a":"é"}', "utf8")))
      assert.deepStrictEqual(one?.json, { b: 1, a: "é" })
      assert.strictEqual(one?.path, "/v1/chat/completions")
      assert.strictEqual(one?.headers["content-type"], "application/json")
      assert.strictEqual(two?.json, undefined)
    }),
  )

  it.effect("routes by request content and answers an unscripted request with a 500", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [
          ScriptedServer.whenBodyIncludes("summary", Respond.json(200, { route: "summary" }), true),
          Respond.json(200, { route: "main" }),
        ],
      })
      const main = yield* post(server.url, '{"purpose":"main"}')
      const summary = yield* post(server.url, '{"purpose":"summary"}')
      const again = yield* post(server.url, '{"purpose":"summary"}')
      const unscripted = yield* post(server.url, '{"purpose":"main"}')
      assert.deepStrictEqual(yield* Effect.promise(() => main.json()), { route: "main" })
      assert.deepStrictEqual(yield* Effect.promise(() => summary.json()), { route: "summary" })
      assert.deepStrictEqual(yield* Effect.promise(() => again.json()), { route: "summary" })
      assert.strictEqual(unscripted.status, 500)
      yield* text(unscripted)
      const exchange = yield* ScriptedServer.awaitExchange(server, 3)
      assert.isFalse(exchange.matched)
      assert.strictEqual(exchange.outcome, "completed")
    }),
  )

  it.effect("streams OpenAI-compatible chunks that parse back into the same deltas", () =>
    Effect.gen(function* () {
      const steps = OpenAiSse.response({
        reasoning: ["think"],
        text: ["Hel", "lo"],
        toolCalls: [{ id: "call-1", name: "read", arguments: ['{"pa', 'th":"a"}'] }],
      })
      const server = yield* ScriptedServer.make({ script: [Respond.sse(Respond.withDelay(steps, 1))] })
      const response = yield* post(server.url, "{}")
      assert.strictEqual(response.headers.get("content-type"), "text/event-stream")
      const data = sseData(yield* text(response))
      assert.strictEqual(data.length, steps.length)
      assert.strictEqual(data[data.length - 1], "[DONE]")
      const chunks = data.slice(0, -1).map((item) => JSON.parse(item))
      assert.deepStrictEqual(chunks[1].choices[0].delta, { reasoning_content: "think" })
      assert.deepStrictEqual(chunks[2].choices[0].delta, { content: "Hel" })
      assert.strictEqual(chunks[4].choices[0].delta.tool_calls[0].id, "call-1")
      assert.strictEqual(chunks[6].choices[0].finish_reason, "tool_calls")
      assert.deepStrictEqual(chunks[7].choices, [])
      const exchange = yield* ScriptedServer.awaitExchange(server, 0)
      assert.strictEqual(exchange.chunksSent, steps.length)
      assert.strictEqual(exchange.outcome, "completed")
    }),
  )

  it.effect("names Anthropic events in the event field and the payload type", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({
        script: [Respond.sse(AnthropicSse.response({ thinking: { chunks: ["a"], signature: "sig" }, text: ["b"] }))],
      })
      const body = yield* text(yield* post(server.url, "{}"))
      const events: Array<string | undefined> = []
      createParser({ onEvent: (event) => events.push(event.event) }).feed(body)
      assert.deepStrictEqual(events, [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
      ])
    }),
  )

  it.effect("sees the client abort a hanging request as a closed connection", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({ script: [Respond.hang()] })
      const controller = new AbortController()
      const pending = Effect.runPromiseExit(post(server.url, "{}", controller.signal))
      yield* ScriptedServer.awaitRequest(server, 0)
      controller.abort()
      const exchange = yield* ScriptedServer.awaitExchange(server, 0)
      assert.strictEqual(exchange.outcome, "client_closed")
      assert.strictEqual(exchange.status, undefined)
      yield* Effect.promise(() => pending)
    }),
  )

  it.effect("drops the socket mid-stream after the written chunks reach the client", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({ script: [Respond.dropAfter([OpenAiSse.text("partial")])] })
      const response = yield* post(server.url, "{}")
      const read = yield* Effect.promise(() => response.text().then((body) => ({ body }), (error: unknown) => ({ error })))
      assert.isTrue("error" in read)
      const exchange = yield* ScriptedServer.awaitExchange(server, 0)
      assert.strictEqual(exchange.outcome, "dropped")
      assert.strictEqual(exchange.chunksSent, 1)
    }),
  )

  it.effect("drops the socket before any response byte", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({ script: [Respond.drop()] })
      const result = yield* Effect.promise(() =>
        fetch(`${server.url}/x`, { method: "POST", body: "{}" }).then(() => "answered", () => "failed"),
      )
      assert.strictEqual(result, "failed")
      assert.strictEqual((yield* ScriptedServer.awaitExchange(server, 0)).outcome, "dropped")
    }),
  )

  it.effect("holds a response, and a stream mid-way, until the gate is released", () =>
    Effect.gen(function* () {
      const before = Respond.gate()
      const middle = Respond.gate()
      const progress: Array<string> = []
      const server = yield* ScriptedServer.make({
        script: [Respond.hold(before, Respond.sse([OpenAiSse.text("a"), Respond.waitFor(middle), OpenAiSse.text("b")]))],
        onProgress: (event) => progress.push(event.type === "chunk" ? `chunk ${event.chunk}` : event.type),
      })
      const pending = Effect.runPromise(Effect.flatMap(post(server.url, "{}"), text))
      yield* ScriptedServer.awaitRequest(server, 0)
      assert.deepStrictEqual(progress, ["request"])
      before.release()
      middle.release()
      const body = yield* Effect.promise(() => pending)
      assert.strictEqual(sseData(body).length, 2)
      yield* ScriptedServer.awaitExchange(server, 0)
      assert.deepStrictEqual(progress, ["request", "chunk 1", "chunk 2", "response"])
    }),
  )

  it.effect("stalls an open stream until the client leaves", () =>
    Effect.gen(function* () {
      const server = yield* ScriptedServer.make({ script: [Respond.stallAfter([OpenAiSse.text("a")])] })
      const controller = new AbortController()
      const response = yield* post(server.url, "{}", controller.signal)
      const reader = response.body!.getReader()
      const first = yield* Effect.promise(() => reader.read())
      assert.isFalse(first.done)
      controller.abort()
      const exchange = yield* ScriptedServer.awaitExchange(server, 0)
      assert.strictEqual(exchange.outcome, "client_closed")
      assert.strictEqual(exchange.status, 200)
    }),
  )

  it("starts and closes without Effect, and closing twice is harmless", async () => {
    const server = await ScriptedServer.start({ script: [Respond.json(200, { ok: true })] })
    const response = await fetch(`${server.url}/ping`, { method: "POST", body: "" })
    assert.deepStrictEqual(await response.json(), { ok: true })
    await server.close()
    await server.close()
    const after = await fetch(`${server.url}/ping`, { method: "POST", body: "" }).then(() => "answered", () => "refused")
    assert.strictEqual(after, "refused")
  })
})
