/**
 * The facade over the hardened packages: thrown tool errors the model reads, well-formed stored
 * text, secrets scrubbed from tool failures, in-memory logs, the output limit field, and recovery of
 * more unsealed invocations than one read page holds.
 */
import { EventWrite, type Event, type Identity } from "@maka/facts"
import { EventLog, EventLogError } from "@maka/event-log"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Ids, Tool } from "@maka/tools"
import { Cause, Effect, Exit, Option, Result, Schema } from "effect"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, assert, describe, it } from "vitest"
import { createEngine, type MakaEngine, type StartOptions } from "../src/Facade.ts"
import * as Recovery from "../src/Recovery.ts"

const API_KEY = "sk-integration-secret-7d2e"

const cleanups: Array<() => Promise<void> | void> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

const tempFolder = () => {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "maka-integration-"))
  cleanups.push(() => fs.rmSync(folder, { recursive: true, force: true }))
  return folder
}

const serve = async (script: ReadonlyArray<Respond.Responder>) => {
  const server = await ScriptedServer.start({ script })
  cleanups.push(() => server.close())
  return server
}

const open = async (database: string): Promise<MakaEngine> => {
  const engine = await createEngine({ database, engineOptions: { backoffBaseMs: 5, backoffMaxMs: 40 } })
  cleanups.push(() => engine.close())
  return engine
}

const provider = (server: ScriptedServer.ScriptedServer) =>
  ({ kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "test-model", apiKey: API_KEY }) as const

/** A tool whose handler throws, as TypeScript code fails. */
const throwing = (message: string) =>
  Tool.make({
    name: "probe",
    description: "Probes the project.",
    input: Schema.Struct({ path: Schema.String }),
    semantics: "exclusive_step",
    execute: () => {
      throw new Error(message)
    },
  })

const callThenAnswer = [
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "probe", arguments: ['{"path":"."}'] }] })),
  Respond.sse(OpenAiSse.response({ text: ["Done."] })),
]

const settledOutcome = (events: ReadonlyArray<Event.StoredEvent>) => {
  const settled = events.find((stored) => stored.event.fact.kind === "tool_settled")?.event.fact
  return settled?.kind === "tool_settled" ? settled.outcome : undefined
}

/** The content of the tool result message of a recorded OpenAI-compatible request body. */
const toolResults = (json: unknown): ReadonlyArray<unknown> => {
  const messages = (json as { readonly messages?: ReadonlyArray<{ readonly role: string; readonly content: unknown }> }).messages ?? []
  return messages.filter((message) => message.role === "tool").map((message) => message.content)
}

const runThrowing = async (message: string, options: Partial<StartOptions> = {}) => {
  const folder = tempFolder()
  const server = await serve(callThenAnswer)
  const engine = await open(path.join(folder, "events.sqlite"))
  const run = await engine.start({ sessionId: "session-1", provider: provider(server), message: "Probe it.", tools: [throwing(message)], ...options })
  const result = await run.wait()
  const events = await engine.events("session-1")
  return { server, engine, result, events }
}

describe("Integration", () => {
  it("settles a thrown Error as failed with its message, sends it to the model as the tool result, and completes", async () => {
    const { server, result, events } = await runThrowing("x")
    assert.deepStrictEqual(settledOutcome(events), { kind: "failed", message: "x" })
    assert.deepStrictEqual(result.outcome, { kind: "completed" })
    const requests = server.requests()
    assert.strictEqual(requests.length, 2)
    const results = toolResults(requests[1]!.json)
    assert.strictEqual(results.length, 1)
    assert.include(JSON.stringify(results[0]), "x")
    assert.notInclude(JSON.stringify(toolResults(requests[0]!.json)), "x")
  })

  it("stores a thrown message with a lone surrogate with U+FFFD in its place, and the run completes", async () => {
    const { result, events } = await runThrowing("bad \ud800 text")
    assert.deepStrictEqual(settledOutcome(events), { kind: "failed", message: "bad \ufffd text" })
    assert.deepStrictEqual(result.outcome, { kind: "completed" })
  })

  it("scrubs the provider key and a Redacted header value from a thrown tool message before it is stored", async () => {
    const folder = tempFolder()
    const server = await serve(callThenAnswer)
    const engine = await open(path.join(folder, "events.sqlite"))
    const { Redacted } = await import("effect")
    const token = "tok-header-secret-91ab"
    const run = await engine.start({
      sessionId: "session-1",
      provider: { ...provider(server), headers: { "x-token": Redacted.make(token) } },
      message: "Probe it.",
      tools: [throwing(`denied for ${API_KEY} and ${token}`)],
    })
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    const stored = JSON.stringify(await engine.events("session-1"))
    assert.notInclude(stored, API_KEY)
    assert.notInclude(stored, token)
    const outcome = settledOutcome(await engine.events("session-1"))
    assert.strictEqual(outcome?.kind, "failed")
    assert.include(outcome?.kind === "failed" ? outcome.message : "", "[redacted]")
    await engine.close()
    for (const file of fs.readdirSync(folder)) {
      const bytes = fs.readFileSync(path.join(folder, file)).toString("latin1")
      assert.notInclude(bytes, API_KEY, file)
      assert.notInclude(bytes, token, file)
    }
  })

  it("stores a provider error message with a lone surrogate made well-formed in the failed terminal", async () => {
    const server = await serve([Respond.json(400, Respond.openAiError("bad \ud800 request"))])
    const folder = tempFolder()
    const engine = await createEngine({ database: path.join(folder, "events.sqlite"), engineOptions: { maxModelAttempts: 1 } })
    cleanups.push(() => engine.close())
    const run = await engine.start({ sessionId: "session-1", provider: provider(server), message: "Hi." })
    const outcome = (await run.wait()).outcome
    assert.strictEqual(outcome.kind === "failed" ? outcome.class : outcome.kind, "model_provider")
    assert.include(outcome.kind === "failed" ? outcome.message : "", "bad \ufffd request")
    const events = await engine.events("session-1")
    assert.strictEqual(events[events.length - 1]?.event.fact.kind, "invocation_ended")
  })

  it("runs one turn on database \":memory:\" and leaves no file of that name in the working directory", async () => {
    const server = await serve([Respond.sse(OpenAiSse.response({ text: ["Hello."] }))])
    const before = new Set(fs.readdirSync(process.cwd()))
    const engine = await createEngine({ database: ":memory:" })
    cleanups.push(() => engine.close())
    const run = await engine.start({ sessionId: "session-1", provider: provider(server), message: "Hi." })
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    assert.isAbove((await engine.events("session-1")).length, 2)
    await engine.close()
    const after = fs.readdirSync(process.cwd())
    for (const name of [":memory:", ":memory:.writer.lock", ":memory:-wal", ":memory:-shm"]) assert.notInclude(after, name)
    assert.deepStrictEqual(after.filter((name) => !before.has(name)), [])
  })

  it("sends max_completion_tokens and no max_tokens when the provider asks for that field", async () => {
    const server = await serve([Respond.sse(OpenAiSse.response({ text: ["Hello."] }))])
    const engine = await open(path.join(tempFolder(), "events.sqlite"))
    const run = await engine.start({
      sessionId: "session-1",
      provider: { ...provider(server), outputLimitField: "max_completion_tokens" },
      message: "Hi.",
      maxOutputTokens: 321,
    })
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    const body = server.requests()[0]!.json as Record<string, unknown>
    assert.strictEqual(body["max_completion_tokens"], 321)
    assert.notProperty(body, "max_tokens")
  })

  it("ends a request at the provider's requestDeadlineMs even while keep-alive bytes arrive", async () => {
    const server = await serve([Respond.stallAfter(Array.from({ length: 400 }, () => Respond.comment("keep-alive", { delayMs: 50 })))])
    const engine = await createEngine({
      database: path.join(tempFolder(), "events.sqlite"),
      engineOptions: { maxModelAttempts: 1 },
    })
    cleanups.push(() => engine.close())
    const run = await engine.start({ sessionId: "session-1", provider: { ...provider(server), requestDeadlineMs: 400 }, message: "Hi." })
    const outcome = (await run.wait()).outcome
    // The terminal names the deadline, not the idle timeout that never ran out.
    assert.deepStrictEqual(outcome, { kind: "failed", class: "model_timeout", message: "model request exceeded its deadline of 400 ms" })
  })

  it("fails recovery over a closed log with Store, the log's reason as storeReason and the EventLogError as cause", async () => {
    const database = path.join(tempFolder(), "events.sqlite")
    const closed = await Effect.runPromise(
      Effect.scoped(Effect.provide(Effect.service(EventLog.EventLog), EventLog.layerSqlite({ path: database }))),
    )
    const exit = await Effect.runPromiseExit(Effect.provide(Recovery.recover(closed), Ids.layer))
    assert.isTrue(Exit.isFailure(exit))
    const error = Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : Option.none()
    assert.isTrue(Option.isSome(error))
    const failure = Option.getOrThrow(error)
    assert.strictEqual(failure.reason._tag, "Store")
    assert.instanceOf(failure.cause, EventLogError.EventLogError)
    assert.strictEqual(
      failure.reason._tag === "Store" ? failure.reason.storeReason : undefined,
      (failure.cause as EventLogError.EventLogError).reason._tag,
    )
  })

  it("recovers more unsealed invocations than one read page holds when the engine opens", async () => {
    const folder = tempFolder()
    const database = path.join(folder, "events.sqlite")
    const count = 10_050
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const log = yield* EventLog.EventLog
          const writes: Array<EventWrite.EventWrite> = []
          for (let index = 0; index < count; index++) {
            const invocation: Identity.Invocation = {
              sessionId: `session-${index}`,
              turnId: randomUUID(),
              runId: randomUUID(),
              invocationId: randomUUID(),
            }
            const built = EventWrite.plain({
              id: randomUUID(),
              recordedAt: 0,
              invocation,
              fact: {
                kind: "invocation_opened",
                input: { kind: "message", content: { text: "Hi." } },
                configuration: { cwd: folder, toolMode: "direct" },
              },
            })
            if (Result.isFailure(built)) return yield* Effect.die(built.failure)
            writes.push(built.success)
          }
          for (let start = 0; start < writes.length; start += 2_000) yield* log.appendBatch(writes.slice(start, start + 2_000))
        }).pipe(Effect.provide(EventLog.layerSqlite({ path: database, synchronous: "NORMAL" }))),
      ),
    )
    const engine = await createEngine({ database, synchronous: "NORMAL" })
    cleanups.push(() => engine.close())
    assert.deepStrictEqual(await engine.recover(), { sealed: [], count: 0, unsealed: [] })
    const last = await engine.events(`session-${count - 1}`)
    const terminal = last[last.length - 1]?.event.fact
    assert.deepStrictEqual(terminal, { kind: "invocation_ended", outcome: { kind: "failed", class: "host_interrupted" } })
  }, 120_000)
})
