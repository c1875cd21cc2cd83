/**
 * The README's examples, run as written (only the "point your agent at it" step is filled in with a
 * minimal client that retries once), so the README cannot drift from what works.
 */
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { expect, test } from "vitest"
import { FactBuilders, History, OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"

/** One chat-completions request; its status once the body is read. */
const send = (url: string) =>
  fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "Hi" }], stream: true }),
  }).then(async (response) => (await response.text(), response.status))

/** The agent under test, reduced to a client that sends once more after a 429. */
const agent = async (url: string): Promise<void> => {
  if ((await send(url)) === 429) await send(url)
}

test("builds a small run and a custom history (README: Example)", () => {
  const history = History.smallRun() // 8 valid events of one completed run
  expect(history.events.map(({ event }) => event.fact.kind)).toEqual([
    "invocation_opened", "model_requested", "model_completed", "tool_dispatched",
    "tool_settled", "model_requested", "model_completed", "invocation_ended",
  ])

  const custom = new History.History({ sessionId: "session-7" })
  const run = custom.open({ message: "Summarise README.md" })
  const step = run.request() // bound to the session prefix digest built so far
  run.complete(step, FactBuilders.toolCallStep([{ id: "call-1", name: "read_file", input: { path: "README.md" } }]))
  run.succeed(run.dispatch(step, "call-1"), FactBuilders.textOutput("# Demo"))
  run.end({ kind: "failed", class: "step_limit" })
  expect(History.reread(custom.written[0]!)).toEqual(custom.events[0]!.event)
})

// README: ScriptedServer, plain vitest.
test("retries after a rate limit", async () => {
  const server = await ScriptedServer.start({
    script: [
      Respond.json(429, Respond.openAiError("Rate limit reached"), { "retry-after": "1" }),
      Respond.sse(OpenAiSse.response({ text: ["Hel", "lo"] })),
    ],
  })
  try {
    // … point your agent at `${server.url}/v1` and run it …
    await agent(server.url)
    expect(server.requests()).toHaveLength(2)
    expect(server.requests()[1]?.json).toEqual(server.requests()[0]?.json)
  } finally {
    await server.close()
  }
})

// README: ScriptedServer, @effect/vitest.
it.effect("retries after a rate limit (Effect)", () =>
  Effect.gen(function* () {
    const server = yield* ScriptedServer.make({ // closed with the test's scope
      script: [
        Respond.json(429, Respond.openAiError("Rate limit reached"), { "retry-after": "1" }),
        Respond.sse(OpenAiSse.response({ text: ["Hel", "lo"] })),
      ],
    })
    // … point your agent at `${server.url}/v1` and run it …
    yield* Effect.promise(async () => {
      await agent(server.url)
    })
    assert.strictEqual(server.requests().length, 2)
    assert.deepStrictEqual(server.requests()[1]?.json, server.requests()[0]?.json)
  }))
