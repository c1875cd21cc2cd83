import type { Event } from "@maka/facts"
import { EventLogError } from "@maka/event-log"
import { AnthropicSse, FactBuilders, OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Builtins, Tool, ToolCatalog } from "@maka/tools"
import { Effect, Schema } from "effect"
import * as diagnostics from "node:diagnostics_channel"
import { getEventListeners } from "node:events"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as v8 from "node:v8"
import * as vm from "node:vm"
import { afterEach, assert, describe, it } from "vitest"
import * as EngineError from "../src/EngineError.ts"
import { createEngine, openWorkspace, providerConfig, type MakaEngine, type Run, type StartOptions } from "../src/Facade.ts"
import * as Hints from "../src/Hints.ts"
import { rejection } from "./support/harness.ts"

const API_KEY = "sk-facade-secret-4f1c"

const cleanups: Array<() => Promise<void> | void> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

interface Context {
  readonly folder: string
  readonly database: string
  readonly workspace: string
  readonly server: ScriptedServer.ScriptedServer
  readonly engine: MakaEngine
}

const setup = async (script: ReadonlyArray<Respond.Responder>): Promise<Context> => {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "maka-facade-"))
  cleanups.push(() => fs.rmSync(folder, { recursive: true, force: true }))
  const workspace = path.join(folder, "workspace")
  fs.mkdirSync(workspace)
  fs.writeFileSync(path.join(workspace, "README.md"), "# Demo\n\nA demo project.\n")
  const server = await ScriptedServer.start({ script })
  cleanups.push(() => server.close())
  const database = path.join(folder, "events.sqlite")
  const engine = await createEngine({ database, engineOptions: { backoffBaseMs: 5, backoffMaxMs: 40 } })
  cleanups.push(() => engine.close())
  return { folder, database, workspace, server, engine }
}

const options = (context: Context, overrides: Partial<StartOptions> = {}): StartOptions => ({
  sessionId: "session-1",
  provider: { kind: "openai-compatible", baseUrl: `${context.server.url}/v1/`, model: "test-model", apiKey: API_KEY },
  message: "What is in this workspace?",
  tools: ToolCatalog.make(Builtins.read({ root: fs.realpathSync(context.workspace) })),
  workspace: context.workspace,
  ...overrides,
})

const listThenAnswer = [
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "list_files", arguments: ['{"path":', '"."}'] }] })),
  Respond.sse(OpenAiSse.response({ text: ["A README ", "and nothing else."] })),
]

const kinds = (events: ReadonlyArray<Event.StoredEvent>) =>
  events.filter((stored) => stored.event.fact.kind !== "model_observed").map((stored) => stored.event.fact.kind)

const collect = async <A>(iterable: AsyncIterable<A>) => {
  const items: Array<A> = []
  for await (const item of iterable) items.push(item)
  return items
}


describe("Facade", () => {
  it("runs a two-step tool loop to completion with the connection and context defaults", async () => {
    const context = await setup(listThenAnswer)
    const run = await context.engine.start(options(context))
    for (const name of ["list_files", "read_file", "search_text"]) assert.include(run.toolNames, name)
    const result = await run.wait()
    assert.deepStrictEqual(result.outcome, { kind: "completed" })
    assert.deepStrictEqual(result.invocation, run.invocation)
    const events = await context.engine.events("session-1")
    assert.deepStrictEqual(kinds(events), [
      "invocation_opened",
      "model_requested",
      "model_completed",
      "tool_dispatched",
      "tool_settled",
      "model_requested",
      "model_completed",
      "invocation_ended",
    ])
    const opening = events[0]!.event.fact
    assert.strictEqual(opening.kind, "invocation_opened")
    if (opening.kind !== "invocation_opened") return
    assert.deepStrictEqual(opening.configuration.model, {
      connectionId: `openai-compatible:${context.server.url}/v1`,
      connectionSlug: "openai-compatible",
      model: "test-model",
    })
    assert.strictEqual(opening.configuration.cwd, fs.realpathSync(context.workspace))
    assert.match(opening.configuration.workspaceIdentity ?? "", /^workspace:v1:[0-9a-f-]{36}$/)
    const requested = events[1]!.event.fact
    assert.deepStrictEqual(requested.kind === "model_requested" ? requested.context : undefined, { providerId: "openai-compatible" })
    const ids = [run.invocation.turnId, run.invocation.runId, run.invocation.invocationId]
    for (const id of ids) assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    assert.strictEqual(new Set(ids).size, 3)
    assert.strictEqual(context.server.requests()[0]!.headers["authorization"], `Bearer ${API_KEY}`)
  })

  it("yields every committed event from the opening to the terminal, also when called after wait()", async () => {
    const context = await setup(listThenAnswer)
    const run = await context.engine.start(options(context))
    const live = await collect(run.events())
    const result = await run.wait()
    const late = await collect(run.events())
    const stored = await context.engine.events("session-1")
    assert.deepStrictEqual(live, stored)
    assert.deepStrictEqual(late, stored)
    assert.strictEqual(live[0]!.event.fact.kind, "invocation_opened")
    assert.strictEqual(live.at(-1)!.event.fact.kind, "invocation_ended")
    assert.deepStrictEqual(
      live.map((item) => item.sequence),
      live.map((_, index) => index + 1),
    )
    assert.deepStrictEqual(result.outcome, { kind: "completed" })
    assert.isTrue(live.some((item) => item.event.fact.kind === "model_observed"))
  })

  it("serves several readers of events() at once, each from the opening, and a reader that stops early stops alone", async () => {
    const context = await setup(listThenAnswer)
    const run = await context.engine.start(options(context))
    const stopper = run.events()[Symbol.asyncIterator]()
    const first = await stopper.next()
    const [whole, again] = await Promise.all([collect(run.events()), collect(run.events())])
    assert.deepStrictEqual(await stopper.return!(), { done: true, value: undefined })
    assert.isTrue((await stopper.next()).done)
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    const stored = await context.engine.events("session-1")
    assert.deepStrictEqual(whole, stored)
    assert.deepStrictEqual(again, stored)
    assert.deepStrictEqual(first.value, stored[0])
  })

  it("writes a committed request to its socket before start() resolves or events() hands it to a waiting reader", async () => {
    const context = await setup(listThenAnswer)
    // Published once a request's bytes are handed to its socket (Node's `ClientRequest` finish).
    let written = 0
    const onWritten = () => {
      written++
    }
    diagnostics.subscribe("http.client.request.start", onWritten)
    cleanups.push(() => {
      diagnostics.unsubscribe("http.client.request.start", onWritten)
    })
    const run = await context.engine.start(options(context))
    // The opening rides the first request's commit: start() resolves once that request is written.
    assert.strictEqual(written, 1)
    const writtenAtDelivery: Array<number> = []
    for await (const stored of run.events()) if (stored.event.fact.kind === "model_requested") writtenAtDelivery.push(written)
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    // The second request commits while the reader waits, and reaches it after its bytes reached the socket.
    assert.deepStrictEqual(writtenAtDelivery, [1, 2])
  })

  it("cancels a run when its AbortSignal aborts, and writes nothing when it aborted before start", async () => {
    const context = await setup([Respond.hang()])
    const controller = new AbortController()
    const run = await context.engine.start(options(context, { signal: controller.signal }))
    await context.server.request(0)
    controller.abort()
    const result = await run.wait()
    assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
    assert.deepStrictEqual(kinds(await context.engine.events("session-1")), [
      "invocation_opened",
      "model_requested",
      "model_interrupted",
      "invocation_ended",
    ])
    const refused = await rejection(context.engine.start(options(context, { sessionId: "session-2", signal: controller.signal })))
    assert.strictEqual(refused.reason._tag, "Cancelled")
    assert.deepStrictEqual(await context.engine.events("session-2"), [])
  })

  it("listens once on a signal many runs share, and cancels each of them when it aborts", async () => {
    const runs = 12
    const context = await setup(Array.from({ length: runs }, () => Respond.hang()))
    const controller = new AbortController()
    const started = []
    for (let index = 0; index < runs; index++) {
      started.push(await context.engine.start(options(context, { sessionId: `session-${index}`, signal: controller.signal })))
    }
    await context.server.request(runs - 1)
    // One listener for all twelve runs (Node warns past ten): the engine's and the facade's share it.
    assert.strictEqual(getEventListeners(controller.signal, "abort").length, 1)
    controller.abort()
    for (const run of started) {
      assert.deepStrictEqual((await run.wait()).outcome, { kind: "cancelled", source: "runtime_cancellation" })
    }
    assert.strictEqual(getEventListeners(controller.signal, "abort").length, 0)
  })

  it("stops listening on a shared signal once its runs end, and a later run listens again", async () => {
    const context = await setup([...listThenAnswer, Respond.hang()])
    const controller = new AbortController()
    const first = await context.engine.start(options(context, { signal: controller.signal }))
    assert.deepStrictEqual((await first.wait()).outcome, { kind: "completed" })
    assert.strictEqual(getEventListeners(controller.signal, "abort").length, 0)
    const second = await context.engine.start(options(context, { sessionId: "session-2", signal: controller.signal }))
    await context.server.request(2)
    assert.strictEqual(getEventListeners(controller.signal, "abort").length, 1)
    controller.abort()
    assert.deepStrictEqual((await second.wait()).outcome, { kind: "cancelled", source: "runtime_cancellation" })
  })

  it("refuses invalid input with InvalidInput and writes nothing", async () => {
    const context = await setup([])
    const invalid: ReadonlyArray<Partial<StartOptions>> = [
      { maxSteps: 0 },
      { maxSteps: 257 },
      { workspace: "relative/folder/that/does/not/exist" },
      { idleTimeoutMs: 10 },
      { provider: { kind: "openai-compatible", baseUrl: "not a url", model: "test-model" } },
      { systemPrompt: "   " },
      { sessionId: "" },
      { message: 42 as unknown as string },
      { provider: undefined as unknown as StartOptions["provider"] },
      // A hand-built tool without its definition: refused before the opening is written.
      { tools: [{ ...Builtins.listFiles({ root: context.workspace }), definition: undefined } as unknown as Tool.Tool] },
    ]
    for (const overrides of invalid) {
      const refused = await rejection(context.engine.start(options(context, overrides)))
      assert.strictEqual(refused.reason._tag, "InvalidInput", JSON.stringify(overrides))
    }
    assert.deepStrictEqual(await context.engine.events("session-1"), [])
    assert.strictEqual(context.server.requests().length, 0)
    const both = await rejection(createEngine({ database: context.database, databaseUrl: "postgres://localhost/x" }))
    assert.strictEqual(both.reason._tag, "InvalidInput")
    const neither = await rejection(createEngine({}))
    assert.strictEqual(neither.reason._tag, "InvalidInput")
    const missing = await rejection(createEngine(undefined as unknown as { database: string }))
    assert.strictEqual(missing.reason._tag, "InvalidInput")
    // An empty path would open the current folder, an empty URL the database the PG* variables name.
    for (const empty of [{ database: "" }, { database: "  " }, { databaseUrl: "" }, { database: null }]) {
      const refused = await rejection(createEngine(empty as unknown as { database: string }))
      assert.strictEqual(refused.reason._tag, "InvalidInput", JSON.stringify(empty))
      assert.include(refused.message, "must be a non-empty string")
    }
  })

  it("advertises no tool at all when tools are omitted", async () => {
    const context = await setup([Respond.sse(OpenAiSse.response({ text: ["Nothing to call."] }))])
    const { tools: _omitted, ...withoutTools } = options(context)
    const run = await context.engine.start(withoutTools)
    assert.deepStrictEqual(run.toolNames, [])
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    const body = context.server.requests()[0]!.json as { readonly tools?: ReadonlyArray<unknown> }
    assert.strictEqual(body.tools?.length ?? 0, 0)
  })

  it("delivers a steering message at the next step boundary", async () => {
    const gate = Respond.gate()
    const context = await setup([Respond.hold(gate, listThenAnswer[0]!), listThenAnswer[1]!])
    const run = await context.engine.start(options(context))
    await context.server.request(0)
    await run.steer("also mention the tests")
    gate.release()
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    const steered = (await context.engine.events("session-1")).filter((stored) => stored.event.fact.kind === "message_steered")
    assert.strictEqual(steered.length, 1)
    assert.include(context.server.requests()[1]!.body, "also mention the tests")
  })

  it("refuses steering in a run's last step rather than dropping it: the answer completes the turn", async () => {
    const gate = Respond.gate()
    const context = await setup([Respond.hold(gate, Respond.sse(OpenAiSse.response({ text: ["Done."] })))])
    const run = await context.engine.start(options(context, { maxSteps: 1 }))
    await context.server.request(0)
    const refused = await rejection(run.steer("one more thing"))
    assert.strictEqual(refused.reason._tag, "Busy")
    assert.include(refused.message, "last step")
    gate.release()
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    const steered = (await context.engine.events("session-1")).filter((stored) => stored.event.fact.kind === "message_steered")
    assert.strictEqual(steered.length, 0)
  })

  it("delivers steering that arrives while a finish_turn tool runs in one more step, never dropping it", async () => {
    let finish: () => void = () => undefined
    const finishing = new Promise<void>((resolve) => {
      finish = resolve
    })
    let started: () => void = () => undefined
    const running = new Promise<void>((resolve) => {
      started = resolve
    })
    const done = Tool.make({
      name: "done",
      description: "Ends the turn.",
      input: Schema.Struct({}),
      semantics: "finish_turn",
      execute: async () => {
        started()
        await finishing
        return Tool.text("finished")
      },
    })
    const context = await setup([
      Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "done", arguments: ["{}"] }] })),
      Respond.sse(OpenAiSse.response({ text: ["Noted."] })),
    ])
    const run = await context.engine.start(options(context, { tools: ToolCatalog.make([done]) }))
    await running
    await run.steer("and one more thing")
    finish()
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    const steered = (await context.engine.events("session-1")).filter((stored) => stored.event.fact.kind === "message_steered")
    assert.strictEqual(steered.length, 1)
    assert.strictEqual(context.server.requests().length, 2)
    assert.include(context.server.requests()[1]!.body, "and one more thing")
  })

  it("writes steering a cancelled step never delivered before the terminal, and the next turn sends it", async () => {
    const context = await setup([Respond.hang(), Respond.sse(OpenAiSse.response({ text: ["Seen."] }))])
    const run = await context.engine.start(options(context))
    await context.server.request(0)
    await run.steer("also mention the tests")
    await run.cancel()
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "cancelled", source: "runtime_cancellation" })
    // Delivered (to the log), never dropped: it is the last fact before the terminal.
    const facts = (await context.engine.events("session-1")).map((stored) => stored.event.fact)
    const steered = facts.flatMap((fact) => (fact.kind === "message_steered" ? [fact.message.content.text] : []))
    assert.deepStrictEqual(steered, ["also mention the tests"])
    assert.deepStrictEqual(kinds(await context.engine.events("session-1")).slice(-2), ["message_steered", "invocation_ended"])
    const refused = await rejection(run.steer("too late"))
    assert.strictEqual(refused.reason._tag, "Busy")
    const next = await context.engine.start(options(context, { message: "Go on." }))
    assert.deepStrictEqual((await next.wait()).outcome, { kind: "completed" })
    assert.include(context.server.requests()[1]!.body, "also mention the tests")
  })

  it("writes steering a failed step never delivered before the terminal", async () => {
    const gate = Respond.gate()
    const context = await setup([Respond.hold(gate, Respond.json(400, Respond.openAiError("bad request")))])
    const run = await context.engine.start(options(context))
    await context.server.request(0)
    await run.steer("also mention the tests")
    gate.release()
    const result = await run.wait()
    assert.strictEqual(result.outcome.kind, "failed")
    const steered = (await context.engine.events("session-1")).filter((stored) => stored.event.fact.kind === "message_steered")
    assert.strictEqual(steered.length, 1)
    assert.deepStrictEqual(kinds(await context.engine.events("session-1")).slice(-2), ["message_steered", "invocation_ended"])
  })

  it("refuses a steering text that is not a string with InvalidInput", async () => {
    const gate = Respond.gate()
    const context = await setup([Respond.hold(gate, Respond.sse(OpenAiSse.response({ text: ["Done."] })))])
    const run = await context.engine.start(options(context))
    await context.server.request(0)
    const refused = await rejection(run.steer(undefined as unknown as string))
    assert.strictEqual(refused.reason._tag, "InvalidInput")
    gate.release()
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
  })

  it("refuses a provider fetch that is not a function with InvalidInput, writing nothing", async () => {
    const context = await setup([])
    for (const fetch of ["x", 5, {}, null]) {
      const provider = { ...options(context).provider, fetch } as unknown as StartOptions["provider"]
      const refused = await rejection(context.engine.start(options(context, { provider })))
      assert.strictEqual(refused.reason._tag, "InvalidInput", String(fetch))
      assert.include(refused.message, "fetch must be a function")
    }
    assert.deepStrictEqual(await context.engine.events("session-1"), [])
    assert.strictEqual(context.server.requests().length, 0)
  })

  it("refuses an events range, resolvers of resumePending, or a session id of events or abandonHandoff, that are not ones with InvalidInput, as a rejected promise", async () => {
    const context = await setup(listThenAnswer)
    await (await context.engine.start(options(context))).wait()
    for (const range of [null, 5, { after: Number.NaN }, { after: -1 }, { after: 1.5 }, { limit: Number.NaN }, { limit: 0 }]) {
      const refused = await rejection(context.engine.events("session-1", range as unknown as { readonly after?: number }))
      assert.strictEqual(refused.reason._tag, "InvalidInput", JSON.stringify(range))
    }
    // A misspelt key would read from the first event, unseen.
    const misspelt = await rejection(context.engine.events("session-1", { afterr: 3 } as unknown as { readonly after?: number }))
    assert.strictEqual(misspelt.reason._tag, "InvalidInput")
    assert.include(misspelt.message, "the range has no key 'afterr' (the keys are after, limit)")
    assert.strictEqual((await context.engine.events("session-1", { after: 2, limit: 3 })).length, 3)
    // A session id that is not a string is the caller's error too, never a store error or nothing.
    // Resolvers that are not two functions are refused before any pause is looked at.
    for (const [resolvers, message] of [
      [undefined, "resumePending takes {provider, tools}, each a function"],
      [{}, "resumePending's provider resolver must be a function"],
      [{ provider: () => undefined }, "resumePending's tools resolver must be a function"],
    ] as const) {
      const refused = await rejection(context.engine.resumePending(resolvers as unknown as Parameters<typeof context.engine.resumePending>[0]))
      assert.deepStrictEqual([refused.reason._tag, refused.message], ["InvalidInput", message])
    }
    // A getter or a proxy of the caller's that throws is the same refusal, a rejected promise, never a throw.
    const throwing = { get after(): number { throw new Error("no after") } }
    const trapped = new Proxy({}, { ownKeys: () => { throw new Error("no keys") } })
    const calls: ReadonlyArray<readonly [() => Promise<unknown>, string]> = [
      [() => context.engine.events("session-1", throwing), "the range could not be read: no after"],
      [() => context.engine.events("session-1", trapped), "the range could not be read: no keys"],
      [
        () => context.engine.resumePending({ get provider(): never { throw new Error("no provider") }, tools: () => [] }),
        "resumePending's resolvers could not be read: no provider",
      ],
    ]
    for (const [call, message] of calls) {
      let promise: Promise<unknown> | undefined
      assert.doesNotThrow(() => (promise = call()), message)
      const refused = await rejection(promise!)
      assert.deepStrictEqual([refused.reason._tag, refused.message], ["InvalidInput", message])
    }
    for (const sessionId of [{ a: 1 }, 42, undefined]) {
      for (const refusal of [context.engine.events(sessionId as unknown as string), context.engine.abandonHandoff(sessionId as unknown as string)]) {
        const refused = await rejection(refusal)
        assert.strictEqual(refused.reason._tag, "InvalidInput", JSON.stringify(sessionId))
        assert.strictEqual(refused.message, "sessionId must be a string")
      }
    }
    // A close never fails on its options: one whose getter throws closes without handing off.
    let closing: Promise<unknown> | undefined
    assert.doesNotThrow(() => (closing = context.engine.close({ get handoff(): boolean { throw new Error("no handoff") } })))
    assert.deepStrictEqual(await closing, [])
  })

  it("refuses a second live run on a session with Busy", async () => {
    const context = await setup([Respond.hang()])
    const first = await context.engine.start(options(context))
    const busy = await rejection(context.engine.start(options(context, { message: "again" })))
    assert.strictEqual(busy.reason._tag, "Busy")
    await first.cancel()
    assert.strictEqual((await first.wait()).outcome.kind, "cancelled")
  })

  it("never writes a plain apiKey to the log file", async () => {
    const context = await setup(listThenAnswer)
    const run = await context.engine.start(options(context))
    await run.wait()
    await context.engine.close()
    const files = fs.readdirSync(context.folder).filter((name) => name.startsWith("events.sqlite"))
    assert.isNotEmpty(files)
    for (const name of files) {
      const bytes = fs.readFileSync(path.join(context.folder, name))
      assert.strictEqual(bytes.indexOf(API_KEY), -1, name)
    }
    assert.isTrue(context.server.requests().every((request) => request.headers["authorization"] === `Bearer ${API_KEY}`))
  })

  it("sends an apiKey the host defined out of sight (not enumerable), as it does a plain one", async () => {
    const context = await setup(listThenAnswer)
    const { apiKey, ...visible } = options(context).provider
    const provider = Object.defineProperty({ ...visible }, "apiKey", { value: apiKey, enumerable: false })
    await (await context.engine.start(options(context, { provider }))).wait()
    assert.isNotEmpty(context.server.requests())
    assert.isTrue(context.server.requests().every((request) => request.headers["authorization"] === `Bearer ${API_KEY}`))
  })

  it("fails a step whose tool call names a tool no fact can hold (NUL) as model_adapter, sealed, and the session goes on", async () => {
    const context = await setup([
      Respond.sse(OpenAiSse.response({ text: ["Calling."], toolCalls: [{ id: "call-1", name: "list\u0000files", arguments: ["{}"] }] })),
      Respond.sse(OpenAiSse.response({ text: ["Fine now."] })),
    ])
    const first = await context.engine.start(options(context))
    assert.deepStrictEqual((await first.wait()).outcome, {
      kind: "failed",
      class: "model_adapter",
      message: "Adapter: invalid tool call name",
    })
    // Its text is observed or not as the stream's reads fell; no call of it was dispatched or rejected.
    const kinds = (await context.engine.events("session-1")).map((stored) => stored.event.fact.kind).filter((kind) => kind !== "model_observed")
    assert.deepStrictEqual(kinds, ["invocation_opened", "model_requested", "model_interrupted", "invocation_ended"])
    const second = await context.engine.start(options(context, { message: "Again." }))
    assert.deepStrictEqual((await second.wait()).outcome, { kind: "completed" })
  })

  it("close({handoff: true}) cancels a compaction in flight at once: it never pauses, so it is not waited for", async () => {
    const context = await setup([Respond.sse(OpenAiSse.response({ text: ["A long answer about the workspace."] })), Respond.hang()])
    await context.engine.close()
    // A wait for a pause that never comes would hold this close for as long as the test runs.
    const engine = await createEngine({ database: context.database, engineOptions: { handoffWaitMs: 2 ** 31 - 1 } })
    cleanups.push(() => engine.close())
    const workspace = await openWorkspace(context.workspace)
    await (await engine.start(options(context, { workspace }))).wait()
    const compacting = engine.compact({ sessionId: "session-1", provider: options(context).provider, workspace })
    await context.server.request(1)
    const closed = await engine.close({ handoff: true })
    const compacted = await compacting
    assert.deepStrictEqual(compacted.outcome, { kind: "cancelled", source: "runtime_cancellation" })
    assert.deepStrictEqual(closed, [{ invocation: compacted.invocation, outcome: "cancelled" }])
  })

  it("resumes a paused run with the resuming host's idleTimeoutMs: the log does not hold the paused run's", async () => {
    const context = await setup([listThenAnswer[0]!, Respond.hang()])
    await context.engine.close()
    const first = await createEngine({ database: context.database })
    const workspace = await openWorkspace(context.workspace)
    const run = await first.start(options(context, { workspace, idleTimeoutMs: 1_000 }))
    const pause = await run.handoff()
    assert.isNotNull(pause)
    await first.close()
    const second = await createEngine({ database: context.database })
    cleanups.push(() => second.close())
    const resolvers = { provider: () => options(context).provider, tools: () => Builtins.read({ root: fs.realpathSync(context.workspace) }) }
    for (const idleTimeoutMs of [999, 300_001, 1.5, "1000"]) {
      const refused = await rejection(second.resumePending({ ...resolvers, idleTimeoutMs: idleTimeoutMs as number }))
      assert.deepStrictEqual(
        [refused.reason._tag, refused.message],
        ["InvalidInput", "resumePending's idleTimeoutMs must be an integer in [1000, 300000]"],
      )
    }
    const [report] = await second.resumePending({ ...resolvers, idleTimeoutMs: 1_000 })
    assert.isTrue(report !== undefined && "started" in report, JSON.stringify(report))
    // The successor's request hangs: it times out after the second given, not the default 120.
    const outcome = (await (report as { readonly started: Run }).started.wait()).outcome
    assert.strictEqual(outcome.kind === "failed" ? outcome.class : outcome.kind, "model_timeout")
  })

  it("close() tells a run its close sealed outcome_unknown as ended with that terminal, not cancelled", async () => {
    const context = await setup([Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "stuck", arguments: ["{}"] }] }))])
    await context.engine.close()
    const engine = await createEngine({ database: context.database, engineOptions: { cancelGraceMs: 50 } })
    cleanups.push(() => engine.close())
    let started = (): void => undefined
    const running = new Promise<void>((resolve) => (started = resolve))
    const stuck = Tool.make({
      name: "stuck",
      description: "Never ends, whatever its signal says.",
      input: Schema.Struct({}),
      semantics: "exclusive_step",
      execute: () => {
        started()
        return new Promise<never>(() => undefined)
      },
    })
    const run = await engine.start(options(context, { tools: [stuck] }))
    await running
    const closed = await engine.close({ handoff: false })
    const terminal = (await run.wait()).outcome
    assert.strictEqual(terminal.kind === "failed" ? terminal.class : terminal.kind, "outcome_unknown")
    assert.deepStrictEqual(closed, [{ invocation: run.invocation, outcome: "ended", terminal }])
    // The report narrows on its outcome: an `ended` one has its terminal, a `paused` one its pause.
    const told = closed.map((report) => (report.outcome === "ended" ? report.terminal.kind : report.outcome === "paused" ? report.pause.remainingSteps : report.outcome))
    assert.deepStrictEqual(told, ["failed"])
    // A host's own shutdown passes its optional options on as they are.
    const shutdown = (options?: { readonly handoff?: boolean }) => engine.close(options)
    assert.deepStrictEqual(await shutdown(), closed)
  })

  it("closes, then a new engine on the same file reads the session back", async () => {
    const context = await setup(listThenAnswer)
    const run = await context.engine.start(options(context, { workspace: await openWorkspace(context.workspace) }))
    await run.wait()
    const before = await context.engine.events("session-1")
    // Options it does not know close without a handoff; a later close is the same close.
    await context.engine.close(null as unknown as { handoff: true })
    await context.engine.close()
    const closed = await rejection(context.engine.start(options(context)))
    assert.strictEqual(closed.reason._tag, "Internal")
    const reopened = await createEngine({ database: context.database })
    cleanups.push(() => reopened.close())
    assert.deepStrictEqual(await reopened.events("session-1"), before)
    assert.deepStrictEqual((await reopened.recover()).count, 0)
  })

  it("close() cancels a live run and waits until it is sealed; a second close returns the first one's promise", async () => {
    const context = await setup([Respond.hang()])
    const run = await context.engine.start(options(context))
    await context.server.request(0)
    const closing = context.engine.close()
    // A close is done once: a later one, with handoff or not, returns the first one's promise.
    const again = context.engine.close({ handoff: true })
    assert.strictEqual<unknown>(again, closing)
    assert.deepStrictEqual(await again, [{ invocation: run.invocation, outcome: "cancelled" }])
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "cancelled", source: "runtime_cancellation" })
    const reopened = await createEngine({ database: context.database })
    cleanups.push(() => reopened.close())
    const events = await reopened.events("session-1")
    assert.deepStrictEqual(events.at(-1)?.event.fact, { kind: "invocation_ended", outcome: { kind: "cancelled", source: "runtime_cancellation" } })
  })

  it("refuses a second engine on a SQLite file whose writer lease is held, as Store {WriterBusy} with the log's error as cause", async () => {
    const context = await setup([])
    const second = await rejection(createEngine({ database: context.database }))
    assert.strictEqual(second.reason._tag, "Store")
    assert.strictEqual(second.reason._tag === "Store" ? second.reason.storeReason : undefined, "WriterBusy")
    assert.isTrue(EventLogError.isEventLogError(second.cause))
    assert.strictEqual(EventLogError.isEventLogError(second.cause) ? second.cause.reason._tag : undefined, "WriterBusy")
    assert.include(second.message, Hints.WRITER_BUSY_HINT)
  })

  it("refuses a file that is not a maka log as Store {UnsupportedDatabase}", async () => {
    const context = await setup([])
    const foreign = path.join(context.folder, "notes.txt")
    fs.writeFileSync(foreign, "not a database, just notes\n".repeat(200))
    const refused = await rejection(createEngine({ database: foreign }))
    assert.strictEqual(refused.reason._tag === "Store" ? refused.reason.storeReason : refused.reason._tag, "UnsupportedDatabase")
    assert.strictEqual(fs.readFileSync(foreign, "utf8"), "not a database, just notes\n".repeat(200))
  })

  it("sends maxOutputTokens as the output limit, 8,000 when omitted", async () => {
    const answer = Respond.sse(OpenAiSse.response({ text: ["Done."] }))
    const context = await setup([answer, answer])
    await (await context.engine.start(options(context, { maxOutputTokens: 1_234 }))).wait()
    await (await context.engine.start(options(context, { sessionId: "session-2" }))).wait()
    const [limited, plain] = context.server.requests().map((request) => request.json as Record<string, unknown>)
    assert.strictEqual(limited?.["max_tokens"], 1_234)
    assert.strictEqual(plain?.["max_tokens"], 8_000)
    const refused = await rejection(context.engine.start(options(context, { sessionId: "session-3", maxOutputTokens: 0 })))
    assert.strictEqual(refused.reason._tag, "InvalidInput")
  })

  it("merges providerOptions into every request body, never over model, messages or stream", async () => {
    const context = await setup(listThenAnswer)
    const providerOptions = { temperature: 0.25, reasoning_effort: "low", model: "other-model", messages: [], stream: false }
    const run = await context.engine.start(options(context, { providerOptions }))
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    const bodies = context.server.requests().map((request) => request.json as Record<string, unknown>)
    assert.strictEqual(bodies.length, 2)
    for (const body of bodies) {
      assert.strictEqual(body["temperature"], 0.25)
      assert.strictEqual(body["reasoning_effort"], "low")
      assert.strictEqual(body["model"], "test-model")
      assert.strictEqual(body["stream"], true)
      assert.isNotEmpty(body["messages"] as ReadonlyArray<unknown>)
    }
  })

  it("sends Anthropic thinking through providerOptions, with maxOutputTokens as max_tokens, and renders both kinds", async () => {
    const context = await setup([
      Respond.sse(AnthropicSse.response({ thinking: { chunks: ["Weighing ", "it."], signature: "sig-1" }, text: ["Forty", "-two."] })),
    ])
    const thinking = { type: "enabled", budget_tokens: 4_000 }
    const run = await context.engine.start(
      options(context, {
        provider: { kind: "anthropic", baseUrl: context.server.url, model: "claude-test", apiKey: API_KEY },
        maxOutputTokens: 16_000,
        providerOptions: { thinking },
      }),
    )
    const both = await collect(run.textAndThinking())
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    assert.deepStrictEqual(
      both.map((delta) => delta.kind).filter((kind, index, kinds) => kind !== kinds[index - 1]),
      ["thinking", "text"],
    )
    assert.strictEqual(both.filter((delta) => delta.kind === "thinking").map((delta) => delta.text).join(""), "Weighing it.")
    assert.strictEqual(both.filter((delta) => delta.kind === "text").map((delta) => delta.text).join(""), "Forty-two.")
    const body = context.server.requests()[0]!.json as Record<string, unknown>
    assert.deepStrictEqual(body["thinking"], thinking)
    assert.strictEqual(body["max_tokens"], 16_000)
    assert.strictEqual(body["model"], "claude-test")
  })

  it("refuses an Anthropic thinking budget not below the output limit, writing nothing and sending nothing", async () => {
    const context = await setup([Respond.sse(AnthropicSse.response({ text: ["unused"] }))])
    const provider = { kind: "anthropic" as const, baseUrl: context.server.url, model: "claude-test", apiKey: API_KEY }
    for (const [budget, maxOutputTokens] of [[10_000, undefined], [16_000, 16_000]] as const) {
      const refused = await rejection(
        context.engine.start(
          options(context, { provider, providerOptions: { thinking: { type: "enabled", budget_tokens: budget } }, ...(maxOutputTokens === undefined ? {} : { maxOutputTokens }) }),
        ),
      )
      assert.strictEqual(refused.reason._tag, "InvalidInput")
      assert.include(refused.message, `budget_tokens (${budget}) must be below the output limit (${maxOutputTokens ?? 8_000})`)
    }
    assert.deepStrictEqual(context.server.requests(), [])
    // The same budget on another route is only provider options.
    const other = await setup([Respond.sse(OpenAiSse.response({ text: ["fine"] }))])
    const run = await other.engine.start(options(other, { providerOptions: { thinking: { type: "enabled", budget_tokens: 10_000 } } }))
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
  })

  it("refuses, on the Anthropic route, a message or a steering message without a visible character, writing nothing", async () => {
    const gate = Respond.gate()
    const context = await setup([
      Respond.hold(gate, Respond.sse(AnthropicSse.response({ text: ["Noted."] }))),
    ])
    const provider = { kind: "anthropic" as const, baseUrl: context.server.url, model: "claude-test", apiKey: API_KEY }
    for (const message of ["", " \n\t", "\u00a0\u2003"]) {
      const refused = await rejection(context.engine.start(options(context, { provider, message })))
      assert.strictEqual(refused.reason._tag, "InvalidInput")
      assert.strictEqual(refused.message, "message.text: the Anthropic API refuses a message without a visible character")
    }
    assert.deepStrictEqual(context.server.requests(), [])
    assert.deepStrictEqual(await context.engine.events("session-1"), [])
    // The session is free for a message the API takes; a blank steering message is refused, a visible one queued.
    const run = await context.engine.start(options(context, { provider, message: " hi " }))
    await context.server.request(0)
    const steerRefused = await rejection(run.steer("\n"))
    assert.strictEqual(steerRefused.reason._tag, "InvalidInput")
    assert.strictEqual(steerRefused.message, "steering message: the Anthropic API refuses a message without a visible character")
    gate.release()
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    const kinds = (await context.engine.events("session-1")).map((stored) => stored.event.fact.kind)
    assert.notInclude(kinds, "message_steered")
    // Another route takes a blank message as the log does.
    const other = await setup([Respond.sse(OpenAiSse.response({ text: ["fine"] }))])
    const blank = await other.engine.start(options(other, { message: " " }))
    assert.deepStrictEqual((await blank.wait()).outcome, { kind: "completed" })
  })

  it("compacts a session on the Anthropic route: a compaction has no message for the blank-message refusal to see", async () => {
    const context = await setup([
      Respond.sse(AnthropicSse.response({ text: ["Forty-two."] })),
      Respond.sse(AnthropicSse.response({ text: [FactBuilders.VALID_SUMMARY] })),
    ])
    const provider = { kind: "anthropic" as const, baseUrl: context.server.url, model: "claude-test", apiKey: API_KEY }
    const workspace = await openWorkspace(context.workspace)
    await (await context.engine.start(options(context, { provider, workspace }))).wait()
    const compacted = await context.engine.compact({ sessionId: "session-1", provider, workspace })
    const outcome = compacted.outcome
    assert.deepStrictEqual(outcome.kind === "context_compact_finished" ? outcome.outcome.kind : outcome, "compacted")
    const kinds = (await context.engine.events("session-1")).map((stored) => stored.event.fact.kind)
    assert.include(kinds, "context_checkpoint_recorded")
    assert.strictEqual(context.server.requests().length, 2)
  })

  it("sends a summary at most 8,000 output tokens, whatever the main limit, and its thinking budget more on Anthropic", async () => {
    const context = await setup([
      Respond.sse(OpenAiSse.response({ text: ["Forty-two."] })),
      Respond.sse(OpenAiSse.response({ text: [FactBuilders.VALID_SUMMARY] })),
      Respond.sse(AnthropicSse.response({ text: ["Forty-three."] })),
      Respond.sse(AnthropicSse.response({ text: [FactBuilders.VALID_SUMMARY] })),
    ])
    const workspace = await openWorkspace(context.workspace)
    const bodies = () => context.server.requests().map((request) => JSON.parse(new TextDecoder().decode(request.rawBody)) as Record<string, unknown>)
    await (await context.engine.start(options(context, { workspace, maxOutputTokens: 32_000 }))).wait()
    await context.engine.compact({ sessionId: "session-1", provider: options(context).provider, workspace, maxOutputTokens: 32_000 })
    // A summary of a full window asked for the main limit would overflow it (docs/engine.md §5.6).
    assert.deepStrictEqual(
      bodies().map((body) => body["max_tokens"]),
      [32_000, 8_000],
    )
    const anthropic = {
      sessionId: "session-2",
      provider: { kind: "anthropic" as const, baseUrl: context.server.url, model: "claude-test", apiKey: API_KEY },
      workspace,
      maxOutputTokens: 32_000,
      providerOptions: { thinking: { type: "enabled", budget_tokens: 10_000 } },
    }
    await (await context.engine.start(options(context, anthropic))).wait()
    await context.engine.compact(anthropic)
    assert.deepStrictEqual(
      bodies()
        .slice(2)
        .map((body) => body["max_tokens"]),
      [32_000, 18_000],
    )
  })

  it("passes outputLimitField to the provider configuration only when it is set", () => {
    const provider = { kind: "openai-compatible" as const, baseUrl: "https://api.openai.com/v1", model: "o4-mini", apiKey: API_KEY }
    const config: Record<string, unknown> = { ...providerConfig({ ...provider, outputLimitField: "max_completion_tokens" }) }
    assert.strictEqual(config["outputLimitField"], "max_completion_tokens")
    assert.isFalse("outputLimitField" in providerConfig(provider))
  })

  it("yields the answer's text deltas with text(), and text and thinking in order with textAndThinking()", async () => {
    const context = await setup([
      Respond.sse(
        OpenAiSse.response({
          reasoning: ["Let me ", "look."],
          text: ["Listing."],
          toolCalls: [{ id: "call-1", name: "list_files", arguments: ['{"path":"."}'] }],
        }),
      ),
      Respond.sse(OpenAiSse.response({ reasoning: ["Found it."], text: ["A README ", "and nothing else."] })),
    ])
    const run = await context.engine.start(options(context))
    const [text, both] = await Promise.all([collect(run.text()), collect(run.textAndThinking())])
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    assert.strictEqual(text.join(""), "Listing.A README and nothing else.")
    const joined = (kind: "text" | "thinking") => both.filter((delta) => delta.kind === kind).map((delta) => delta.text)
    assert.strictEqual(joined("thinking").join(""), "Let me look.Found it.")
    assert.strictEqual(joined("text").join(""), text.join(""))
    assert.deepStrictEqual(
      both.map((delta) => delta.kind).filter((kind, index, kinds) => kind !== kinds[index - 1]),
      ["thinking", "text", "thinking", "text"],
    )
    assert.strictEqual((await collect(run.text())).join(""), text.join(""))
  })

  it("takes tools as a plain array, and an empty array advertises none", async () => {
    const answer = Respond.sse(OpenAiSse.response({ text: ["Done."] }))
    const context = await setup([listThenAnswer[0]!, listThenAnswer[1]!, answer])
    const root = fs.realpathSync(context.workspace)
    const run = await context.engine.start(options(context, { tools: Builtins.read({ root }) }))
    assert.deepStrictEqual([...run.toolNames].sort(), ["list_files", "read_file", "read_tool_result", "search_text"])
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    assert.include(kinds(await context.engine.events("session-1")), "tool_settled")
    const none = await context.engine.start(options(context, { sessionId: "session-2", tools: [] }))
    assert.deepStrictEqual(none.toolNames, [])
    await none.wait()
    const first = context.server.requests()[0]!.json as { readonly tools: ReadonlyArray<{ readonly function: { readonly name: string } }> }
    assert.deepStrictEqual(first.tools.map((tool) => tool.function.name), [...run.toolNames].sort())
    const body = context.server.requests()[2]!.json as { readonly tools?: ReadonlyArray<unknown> }
    assert.strictEqual(body.tools?.length ?? 0, 0)
    const twice = [...Builtins.read({ root }), ...Builtins.read({ root })]
    const refused = await rejection(context.engine.start(options(context, { sessionId: "session-3", tools: twice })))
    assert.strictEqual(refused.reason._tag, "InvalidInput")
  })

  it("runs without a workspace in the process's directory, with no identity and no marker written", async () => {
    const context = await setup([Respond.sse(OpenAiSse.response({ text: ["Hello."] }))])
    const marker = path.join(process.cwd(), ".maka-workspace.json")
    const hadMarker = fs.existsSync(marker)
    const { workspace: _omitted, tools: _none, ...withoutWorkspace } = options(context)
    const run = await context.engine.start(withoutWorkspace)
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    const opening = (await context.engine.events("session-1"))[0]!.event.fact
    assert.strictEqual(opening.kind === "invocation_opened" ? opening.configuration.cwd : undefined, process.cwd())
    assert.isFalse(opening.kind === "invocation_opened" && "workspaceIdentity" in opening.configuration)
    assert.strictEqual(fs.existsSync(marker), hadMarker)
  })

  it("names allowPriorUnknown when the session's earlier outcome is unknown, and admits the next message with it", async () => {
    const answer = Respond.sse(OpenAiSse.response({ text: ["Carrying on."] }))
    const context = await setup([
      Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "deploy", arguments: ['{"target":"prod"}'] }] })),
      answer,
    ])
    const deploy = Tool.make({
      name: "deploy",
      description: "Deploys the project.",
      input: Schema.Struct({ target: Schema.String }),
      semantics: "exclusive_step",
      execute: () => Effect.fail(new Tool.ToolOutcomeUnknown({ message: "the deploy host stopped answering" })),
    })
    const first = await context.engine.start(options(context, { tools: [deploy] }))
    const outcome = (await first.wait()).outcome
    assert.strictEqual(outcome.kind === "failed" ? outcome.class : outcome.kind, "outcome_unknown")
    const refused = await rejection(context.engine.start(options(context, { tools: [deploy], message: "Did it deploy?" })))
    assert.strictEqual(refused.reason._tag, "ReconciliationRequired")
    assert.include(refused.message, "allowPriorUnknown")
    const next = await context.engine.start(options(context, { tools: [deploy], message: "Did it deploy?", allowPriorUnknown: true }))
    assert.deepStrictEqual((await next.wait()).outcome, { kind: "completed" })
  })

  it("adds the way out to the failure of an unreachable endpoint and of a refused key", async () => {
    const context = await setup([Respond.json(401, Respond.openAiError("Incorrect API key provided", { type: "invalid_request_error", code: "invalid_api_key" }))])
    const closed = await ScriptedServer.start({ script: [] })
    const unreachable = `${closed.url}/v1`
    await closed.close()
    const offline = await createEngine({ database: path.join(context.folder, "offline.sqlite"), engineOptions: { maxModelAttempts: 1 } })
    cleanups.push(() => offline.close())
    const provider = { kind: "openai-compatible" as const, baseUrl: unreachable, model: "test-model" }
    const network = (await (await offline.start(options(context, { provider }))).wait()).outcome
    assert.strictEqual(network.kind === "failed" ? network.class : network.kind, "model_provider")
    assert.include(network.kind === "failed" ? network.message : "", Hints.NETWORK_HINT)
    const auth = (await (await context.engine.start(options(context))).wait()).outcome
    assert.strictEqual(auth.kind === "failed" ? auth.class : auth.kind, "model_provider")
    assert.include(auth.kind === "failed" ? auth.message : "", "401")
    assert.include(auth.kind === "failed" ? auth.message : "", Hints.AUTH_HINT)
  })

  it("adds the base URL's way out to a 404 (an Anthropic base URL given with /v1)", async () => {
    const context = await setup([Respond.json(404, { type: "error", error: { type: "not_found_error", message: "Not Found" } })])
    const provider = { kind: "anthropic" as const, baseUrl: `${context.server.url}/v1`, model: "claude-test", apiKey: API_KEY }
    const outcome = (await (await context.engine.start(options(context, { provider }))).wait()).outcome
    assert.strictEqual(outcome.kind === "failed" ? outcome.class : outcome.kind, "model_provider")
    assert.include(outcome.kind === "failed" ? outcome.message : "", "HTTP 404")
    assert.include(outcome.kind === "failed" ? outcome.message : "", Hints.NOT_FOUND_HINT)
    assert.strictEqual(context.server.requests()[0]?.path, "/v1/v1/messages")
    // A 404 naming the model is about the model, not the address.
    const unknownModel = await setup([Respond.json(404, Respond.openAiError("The model `gpt-nope` does not exist", { type: "invalid_request_error", code: "model_not_found" }))])
    const refused = (await (await unknownModel.engine.start(options(unknownModel))).wait()).outcome
    assert.include(refused.kind === "failed" ? refused.message : "", Hints.MODEL_NOT_FOUND_HINT)
    assert.notInclude(refused.kind === "failed" ? refused.message : "", Hints.NOT_FOUND_HINT)
    // A path that merely contains the word is about the address.
    const wrongPath = await setup([Respond.json(404, Respond.openAiError("Invalid URL (POST /models/v1/chat/completions)", { type: "invalid_request_error" }))])
    const lost = (await (await wrongPath.engine.start(options(wrongPath))).wait()).outcome
    assert.include(lost.kind === "failed" ? lost.message : "", Hints.NOT_FOUND_HINT)
  })
})
