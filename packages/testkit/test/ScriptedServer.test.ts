import { connect } from "node:net"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit } from "effect"
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

/** How `promise` stands after `ms`: its value, its error, or still pending (a wait that never settles). */
const within = <A>(promise: Promise<A>, ms = 1_000): Promise<{ value: A } | { error: unknown } | "pending"> =>
  Promise.race([
    promise.then((value) => ({ value }), (error: unknown) => ({ error })),
    new Promise<"pending">((resolve) => setTimeout(() => resolve("pending"), ms)),
  ])

/** Sends `head` (request line and headers, CRLF-separated) and `body` on a raw socket; resolves when it closes. */
const rawRequest = (port: number, head: string, body: string): Promise<string> =>
  new Promise((resolve) => {
    let received = ""
    const socket = connect(port, "127.0.0.1", () => socket.write(`${head}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`))
    socket.on("data", (chunk: Buffer) => (received += chunk.toString("utf8")))
    socket.on("error", () => undefined)
    socket.on("close", () => resolve(received))
  })

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

  it.effect("routes by request content and answers an unscripted request with a 404", () =>
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
      // Not a 5xx: a client's retry policy refuses it at once instead of retrying for minutes.
      assert.strictEqual(unscripted.status, 404)
      assert.deepStrictEqual(yield* Effect.promise(() => unscripted.json()), {
        // The repeated summary entry is still there: the request matched none of what is left.
        error: { message: "testkit: no scripted response for request 3; 1 script entry is left, none matched", type: "testkit_unscripted" },
      })
      const exchange = yield* ScriptedServer.awaitExchange(server, 3)
      assert.isFalse(exchange.matched)
      assert.strictEqual(exchange.status, 404)
      assert.strictEqual(exchange.outcome, "completed")
    }),
  )

  it("refuses a script entry that is neither a responder nor {match?, respond, repeat?}, naming its position", async () => {
    const misspelt = { match: () => true, response: Respond.json(200, {}) } as unknown as ScriptedServer.ScriptEntry
    for (const bad of [misspelt, { respond: { kind: "nope" } }, { respond: Respond.json(200, {}), match: "main" }, { respond: Respond.drop(), repeat: "yes" }, 42, null]) {
      const started = ScriptedServer.start({ script: [Respond.json(200, {}), bad as unknown as ScriptedServer.ScriptEntry] })
      await started.then(
        (server) => {
          void server.close()
          assert.fail(`${JSON.stringify(bad)} was taken`)
        },
        (error: unknown) => {
          assert.instanceOf(error, TypeError)
          assert.include((error as TypeError).message, "script entry 1 is neither a responder (Respond.*) nor {match?, respond, repeat?}")
        },
      )
    }
    const server = await ScriptedServer.start()
    try {
      assert.throws(() => server.push(Respond.json(200, {}), misspelt), TypeError, "script entry 1 is neither")
      // Nothing of a refused push was added.
      const response = await fetch(server.url, { method: "POST", body: "{}" })
      assert.strictEqual(response.status, 404)
    } finally {
      await server.close()
    }
  })

  it("refuses a responder that would answer nothing or break its socket, when it is made or scripted", async () => {
    // Made by the builders: data with no JSON form, a header Node cannot send, a hold of no responder.
    assert.throws(() => Respond.event(undefined), TypeError, "Respond.event's data has no JSON form (undefined)")
    assert.throws(() => Respond.json(429, {}, { "retry after": "1" }), TypeError, 'Respond.json: header "retry after"')
    assert.throws(() => Respond.sse([], { headers: { "x-note": "a\nb" } }), TypeError, 'Respond.sse: header "x-note"')
    assert.throws(() => Respond.hold(Respond.gate(), { kind: "nope" } as unknown as Respond.Responder), TypeError, "Respond.hold's responder is no responder")
    // Scripted as data: a block's steps not spread into the list, and the same made by hand.
    const unspread = Respond.sse([AnthropicSse.messageStart(), AnthropicSse.textBlock(0, ["hi"]) as unknown as Respond.SseStep])
    const handMade: ReadonlyArray<readonly [unknown, string]> = [
      [unspread, "script entry 0: step 1 is an array: spread a block's steps into the list"],
      [{ respond: unspread, repeat: true }, "script entry 0: step 1 is an array"],
      [{ kind: "sse", status: 200, headers: {}, steps: [{ kind: "event", data: undefined }], end: "close" }, "step 0 is no SSE step (Respond.event, comment, raw or waitFor): its data is no string"],
      [{ kind: "json", status: 429, headers: { "retry after": "1" }, body: {} }, 'script entry 0: header "retry after"'],
      [{ kind: "hold", gate: Respond.gate(), then: { kind: "nope" } }, "script entry 0: Respond.hold's responder is no responder"],
      [{ kind: "hold", gate: Respond.gate(), then: { kind: "sse", status: 200, headers: {}, steps: [7], end: "close" } }, "step 0 is no SSE step"],
      [{ kind: "json", status: 200, body: {} }, "script entry 0: a json responder needs headers, {} at least"],
    ]
    for (const [bad, message] of handMade) {
      const refused = await ScriptedServer.start({ script: [bad as ScriptedServer.ScriptEntry] }).then(
        (server) => server.close().then(() => undefined),
        (error: unknown) => error,
      )
      assert.instanceOf(refused, TypeError, message)
      assert.include((refused as TypeError).message, message)
    }
    // The options themselves: a misspelt key would answer every request 404; a script that is no list.
    for (const [options, message] of [
      [{ scrpt: [] }, "the server's options have no key 'scrpt' (the keys are script, onProgress)"],
      [{ script: 5 }, "script must be an array of entries or responders"],
    ] as const) {
      const refused = await ScriptedServer.start(options as unknown as ScriptedServer.ServerOptions).then(
        (server) => server.close().then(() => undefined),
        (error: unknown) => error,
      )
      assert.instanceOf(refused, TypeError, message)
      assert.include((refused as TypeError).message, message)
    }
  })

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

  it("answers a request whose match throws as unscripted, naming the error, and keeps the entry", async () => {
    const server = await ScriptedServer.start({
      script: [
        { match: (request) => (request.json as { model: string }).model === "a", respond: Respond.json(200, { who: "a" }) },
        Respond.json(200, { who: "fallback" }),
      ],
    })
    try {
      const signal = AbortSignal.timeout(5_000)
      const first = await fetch(server.url, { method: "POST", body: "not json", signal })
      assert.strictEqual(first.status, 404)
      const body = (await first.json()) as { error: { message: string; type: string } }
      assert.strictEqual(body.error.type, "testkit_unscripted")
      assert.match(body.error.message, /^testkit: no scripted response for request 0; the match of a script entry threw: /)
      assert.include(body.error.message, "'model'")
      const exchange = await server.exchange(0)
      assert.deepStrictEqual([exchange.matched, exchange.status, exchange.outcome], [false, 404, "completed"])
      const second = await fetch(server.url, { method: "POST", body: '{"model":"a"}', signal })
      assert.deepStrictEqual(await second.json(), { who: "a" })
    } finally {
      await server.close()
    }
  })

  for (const throwsOn of ["request", "chunk", "response", "every call"] as const) {
    it(`keeps what onProgress throws (on ${throwsOn}) out of the exchange and the client`, async () => {
      const steps = OpenAiSse.response({ text: ["a"] })
      const seen: Array<string> = []
      const server = await ScriptedServer.start({
        script: [Respond.sse(steps)],
        onProgress: (progress) => {
          seen.push(progress.type)
          if (throwsOn === "every call" || progress.type === throwsOn) {
            throw new Error(`assertion in onProgress(${progress.type})`)
          }
        },
      })
      try {
        const response = await fetch(server.url, { method: "POST", body: "{}", signal: AbortSignal.timeout(5_000) })
        assert.strictEqual(response.status, 200)
        assert.strictEqual(sseData(await response.text()).length, steps.length)
        const exchange = await server.exchange(0)
        assert.deepStrictEqual([exchange.outcome, exchange.chunksSent], ["completed", steps.length])
        assert.deepStrictEqual(seen, ["request", ...steps.map(() => "chunk"), "response"])
        assert.deepStrictEqual(
          server.progressErrors().map((error) => (error as Error).message),
          seen
            .filter((type) => throwsOn === "every call" || type === throwsOn)
            .map((type) => `assertion in onProgress(${type})`),
        )
      } finally {
        await server.close()
      }
    })
  }

  it("rejects waits for requests that never arrived once closed, and a bad index at once", async () => {
    const errorOf = async (promise: Promise<unknown>, ms?: number): Promise<unknown> => {
      const result = await within(promise, ms)
      return result !== "pending" && "error" in result ? result.error : result
    }
    const neverArrived = (index: number) => `testkit: the server closed after 1 request; request ${index} never arrived`
    const server = await ScriptedServer.start({ script: [Respond.json(200, {})] })
    for (const index of [-1, 1.5, Number.NaN]) {
      assert.instanceOf(await errorOf(server.request(index), 100), RangeError, `request(${index})`)
      assert.instanceOf(await errorOf(server.exchange(index), 100), RangeError, `exchange(${index})`)
    }
    const pendingRequest = errorOf(server.request(1), 2_000)
    const pendingExchange = errorOf(server.exchange(1), 2_000)
    // Looked at only after close has rejected it: no unhandled rejection in between.
    const lookedAtLater = server.request(3)
    await (await fetch(server.url, { method: "POST", body: "{}" })).text()
    await server.close()
    await new Promise((resolve) => setTimeout(resolve, 20))
    assert.strictEqual(((await errorOf(lookedAtLater)) as Error).message, neverArrived(3))
    assert.strictEqual(((await pendingRequest) as Error).message, neverArrived(1))
    assert.strictEqual(((await pendingExchange) as Error).message, neverArrived(1))
    assert.strictEqual(((await errorOf(server.request(1))) as Error).message, neverArrived(1))
    assert.strictEqual(((await errorOf(server.exchange(2))) as Error).message, neverArrived(2))
    assert.strictEqual((await server.request(0)).index, 0)
    assert.strictEqual((await server.exchange(0)).outcome, "completed")
  })

  it.live("the Effect waits die with the same errors instead of hanging", () =>
    Effect.gen(function* () {
      const server = yield* Effect.promise(() => ScriptedServer.start())
      const bad = yield* Effect.exit(ScriptedServer.awaitExchange(server, -1).pipe(Effect.timeout("1 second")))
      assert.isTrue(Exit.isFailure(bad) && Cause.squash(bad.cause) instanceof RangeError)
      yield* Effect.promise(() => server.close())
      const missing = yield* Effect.exit(ScriptedServer.awaitRequest(server, 0).pipe(Effect.timeout("1 second")))
      assert.isTrue(Exit.isFailure(missing))
      if (Exit.isFailure(missing)) {
        assert.strictEqual((Cause.squash(missing.cause) as Error).message, "testkit: the server closed after 0 requests; request 0 never arrived")
      }
    }),
  )

  it("lets a response header replace a default whatever its casing", async () => {
    const server = await ScriptedServer.start({
      script: [
        Respond.json(200, "plain", { "Content-Type": "text/plain", "CACHE-CONTROL": "max-age=5" }),
        Respond.sse([OpenAiSse.done()], { headers: { "Content-Type": "text/plain" } }),
      ],
    })
    try {
      for (const expected of [{ type: "text/plain", cache: "max-age=5" }, { type: "text/plain", cache: "no-cache" }]) {
        const response = await fetch(server.url)
        await response.text()
        assert.deepStrictEqual(
          { type: response.headers.get("content-type"), cache: response.headers.get("cache-control") },
          expected,
        )
      }
    } finally {
      await server.close()
    }
  })

  it("records a status only when headers went out, and refuses a bad status when the responder is made", async () => {
    assert.throws(() => Respond.json(99, {}), TypeError, "Respond.json needs an HTTP status from 200 to 599, got 99")
    // A 1xx is no final response: the client would wait on.
    assert.throws(() => Respond.json(103, {}), TypeError, "got 103")
    assert.throws(() => Respond.json(600, {}), TypeError, "got 600")
    assert.throws(() => Respond.json(200.5, {}), TypeError, "got 200.5")
    assert.throws(() => Respond.sse([], { status: 1000 }), TypeError, "Respond.sse needs an HTTP status from 200 to 599, got 1000")
    // A delay no timer waits (it would fire at once) is refused the same way.
    for (const delayMs of [Infinity, 2 ** 31, Number.NaN, -1]) {
      assert.throws(() => Respond.json(500, {}, {}, { delayMs }), TypeError, "a delay must be a finite number of milliseconds", String(delayMs))
      assert.throws(() => Respond.event("x", { delayMs }), TypeError, "a delay must be", String(delayMs))
      assert.throws(() => Respond.withDelay([Respond.comment()], delayMs), TypeError, "a delay must be", String(delayMs))
    }
    assert.strictEqual(Respond.json(500, {}, {}, { delayMs: 2 ** 31 - 1 }).kind, "json")
    assert.throws(() => Respond.dropAfter([], { status: 0 }), TypeError, "got 0")
    const handMade: Respond.Responder = { kind: "json", status: 99, headers: {}, body: {} }
    const server = await ScriptedServer.start({ script: [Respond.json(200, { n: 1n }), handMade] })
    try {
      for (const index of [0, 1]) {
        const result = await fetch(server.url).then((response) => response.text(), () => "failed")
        assert.strictEqual(result, "failed")
        const exchange = await server.exchange(index)
        assert.deepStrictEqual([exchange.matched, exchange.status, exchange.outcome], [true, undefined, "dropped"])
      }
    } finally {
      await server.close()
    }
  })

  it("joins every repeated request header with a comma", async () => {
    const server = await ScriptedServer.start({ script: [Respond.json(200, {})] })
    try {
      const head = [
        "POST /v1/x HTTP/1.1",
        "Host: a",
        "Authorization: Bearer sk-one",
        "Authorization: Bearer sk-two",
        "X-Api-Key: k1",
        "X-Api-Key: k2",
        "Content-Type: a",
        "Content-Type: b",
      ].join("\r\n")
      await rawRequest(server.port, head, "{}")
      const { headers } = await server.request(0)
      assert.strictEqual(headers["authorization"], "Bearer sk-one, Bearer sk-two")
      assert.strictEqual(headers["x-api-key"], "k1, k2")
      assert.strictEqual(headers["content-type"], "a, b")
      assert.strictEqual(headers["host"], "a")
    } finally {
      await server.close()
    }
  })

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
