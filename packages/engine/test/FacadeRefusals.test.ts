/**
 * What the facade refuses from a host without types, and that a refusal writes nothing: a start
 * refused for its input leaves no workspace marker and no event (docs/engine.md §5.2), and
 * `createEngine` refused for its options leaves no log file or lease. Each refusal is `InvalidInput`
 * naming the option the host passed, never `Internal` with a stack trace.
 */
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { Cause, Effect, Exit, Layer, Schema } from "effect"
import * as LogTesting from "@maka/event-log/testing"
import { Ids, Tool } from "@maka/tools"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, assert, describe, it } from "vitest"
import * as Engine from "../src/Engine.ts"
import * as EngineError from "../src/EngineError.ts"
import { createEngine, openWorkspace, type CreateEngineOptions, type MakaEngine, type StartOptions } from "../src/Facade.ts"
import { defaults, resolveOptions } from "../src/internal/options.ts"
import { rejection } from "./support/harness.ts"

const MARKER = ".maka-workspace.json"

const cleanups: Array<() => Promise<void> | void> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

const temporaryFolder = (): string => {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "maka-refusals-"))
  cleanups.push(() => fs.rmSync(folder, { recursive: true, force: true }))
  return folder
}

interface Context {
  readonly folder: string
  readonly server: ScriptedServer.ScriptedServer
  readonly engine: MakaEngine
}

const setup = async (script: ReadonlyArray<Respond.Responder> = []): Promise<Context> => {
  const folder = temporaryFolder()
  const server = await ScriptedServer.start({ script })
  cleanups.push(() => server.close())
  const engine = await createEngine({ database: path.join(folder, "events.sqlite"), engineOptions: { backoffBaseMs: 5, backoffMaxMs: 40 } })
  cleanups.push(() => engine.close())
  return { folder, server, engine }
}

/** A fresh, empty workspace folder. */
const freshWorkspace = (context: Context, name: string): string => {
  const workspace = path.join(context.folder, name)
  fs.mkdirSync(workspace)
  return workspace
}

const options = (context: Context, overrides: Partial<StartOptions> = {}): StartOptions => ({
  sessionId: "session-1",
  provider: { kind: "openai-compatible", baseUrl: `${context.server.url}/v1`, model: "test-model" },
  message: "hi",
  ...overrides,
})

/** A value the types forbid, as a host without types would pass it. */
const untyped = <A>(value: unknown): A => value as A


/** An `InvalidInput` refusal whose message is the engine's own sentence, not a thrown error's stack. */
const assertInvalid = (error: EngineError.EngineError, text: string, what: string) => {
  assert.strictEqual(error.reason._tag, "InvalidInput", `${what}: ${error.message}`)
  assert.include(error.message, text, what)
  assert.notInclude(error.message, "Error:", what)
  assert.notInclude(error.message, "    at ", what)
}

const deployUnknown = Tool.make({
  name: "deploy",
  description: "Deploys the project.",
  input: Schema.Struct({ target: Schema.String }),
  semantics: "exclusive_step",
  execute: () => Effect.fail(new Tool.ToolOutcomeUnknown({ message: "the deploy host stopped answering" })),
})

describe("start refusals write nothing", () => {
  it("refuses a start for its input before it opens the workspace: no marker, no event, no request", async () => {
    const context = await setup()
    const readToolResult = Tool.make({
      name: "read_tool_result",
      description: "Shadows the engine's own tool.",
      semantics: "parallel",
      input: Schema.Struct({}),
      execute: async () => Tool.text("no"),
    })
    const cases: ReadonlyArray<readonly [Partial<StartOptions>, string]> = [
      [{ maxSteps: 0 }, "maxSteps must be an integer in 1..256"],
      [{ maxSteps: 257 }, "maxSteps must be an integer in 1..256"],
      [{ maxOutputTokens: 1e12 }, "maxOutputTokens must be an integer in 1..10000000000"],
      [{ systemPrompt: "   " }, "system prompt is blank"],
      [{ sessionId: "" }, "invocation"],
      [{ message: "x".repeat(64 * 1024 + 1) }, "message text exceeds"],
      [{ context: { contextWindow: -1 } }, "context"],
      [
        { context: untyped({ providerId: "p", declaredWindows: 5 }) },
        "context has no key 'declaredWindows' (the keys are providerId, contextWindow, declaredWindow, modelContextWindow)",
      ],
      [{ context: untyped("declaredWindow=5") }, "context must be an object"],
      [{ providerOptions: untyped(["not", "an", "object"]) }, "providerOptions"],
      // A handoff stores them in its pause: one no fact may hold would leave every handoff unwritable.
      [{ providerOptions: { user: "v\udfff" } }, "providerOptions.user is not well-formed Unicode (it holds a lone surrogate)"],
      // A key at fault is named with U+FFFD in its place: the refusal is well-formed text itself.
      [{ providerOptions: { "k\ud800": 1 } }, "providerOptions.k\ufffd is not well-formed Unicode"],
      [{ tools: [readToolResult] }, "read_tool_result"],
      [{ connection: { id: "", slug: "openai-compatible" } }, "length of at least 1"],
      // Named as the caller passed them, not as the opening's fields they become.
      [{ systemPrompt: untyped(5) }, "systemPrompt must be a string"],
      [{ systemPrompt: untyped(null) }, "systemPrompt must be a string"],
      [{ connection: untyped("openai-compatible") }, "connection must be {id, slug}, two strings"],
      [{ connection: untyped({ id: 1, slug: "s" }) }, "connection must be {id, slug}, two strings"],
      [{ connection: untyped(null) }, "connection must be {id, slug}, two strings"],
      [{ connection: untyped({ id: "a", slug: "b", model: "m" }) }, "connection has no key 'model' (the keys are id, slug)"],
    ]
    for (const [index, [overrides, text]] of cases.entries()) {
      const workspace = freshWorkspace(context, `workspace-${index}`)
      const refused = await rejection(context.engine.start(options(context, { workspace, ...overrides })))
      const what = JSON.stringify(overrides).slice(0, 80)
      assert.strictEqual(refused.reason._tag, "InvalidInput", `${what}: ${refused.message}`)
      assert.include(refused.message, text, what)
      assert.deepStrictEqual(fs.readdirSync(workspace), [], `${what} wrote into the workspace`)
    }
    assert.deepStrictEqual(await context.engine.events("session-1"), [])
    assert.deepStrictEqual(await context.engine.events(""), [])
    assert.strictEqual(context.server.requests().length, 0)
  })

  it("still creates the marker of a workspace whose start is admitted", async () => {
    const context = await setup([Respond.sse(OpenAiSse.response({ text: ["Hello."] }))])
    const workspace = freshWorkspace(context, "admitted")
    const run = await context.engine.start(options(context, { workspace }))
    assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    assert.deepStrictEqual(fs.readdirSync(workspace), [MARKER])
  })

  it("refuses an empty workspace path, from start and openWorkspace, and never writes a marker in the process's directory", async () => {
    const context = await setup()
    const marker = path.join(process.cwd(), MARKER)
    const hadMarker = fs.existsSync(marker)
    assertInvalid(await rejection(context.engine.start(options(context, { workspace: "" }))), "workspace must not be an empty path", "start")
    assertInvalid(await rejection(openWorkspace("")), "workspace must not be an empty path", "openWorkspace")
    for (const directory of [5, undefined, null, {}]) {
      assertInvalid(await rejection(openWorkspace(untyped(directory))), "workspace must be a directory path", String(directory))
    }
    assertInvalid(
      await rejection(context.engine.start(options(context, { workspace: untyped(5) }))),
      "workspace must be a directory path",
      "start with 5",
    )
    assert.strictEqual(fs.existsSync(marker), hadMarker)
    assert.deepStrictEqual(await context.engine.events("session-1"), [])
  })

  it("refuses a header value that is not text and a signal that is not an AbortSignal as InvalidInput, writing nothing", async () => {
    const context = await setup()
    const workspace = freshWorkspace(context, "workspace")
    const provider = options(context).provider
    const headers = await rejection(
      context.engine.start(options(context, { workspace, provider: { ...provider, headers: { "x-a": untyped(5) } } })),
    )
    assertInvalid(headers, "header x-a must be a string or a Redacted string", "headers")
    for (const signal of [{}, "x", { aborted: true }, { aborted: "no", addEventListener: () => undefined, removeEventListener: () => undefined }]) {
      const refused = await rejection(context.engine.start(options(context, { workspace, signal: untyped(signal) })))
      assertInvalid(refused, "signal must be an AbortSignal", JSON.stringify(signal))
    }
    // An object whose `aborted` getter throws is the same refusal, with its message, not the bare throw.
    const throwing = {
      get aborted(): boolean {
        throw new Error("no flag here")
      },
      addEventListener: () => undefined,
      removeEventListener: () => undefined,
    }
    assertInvalid(
      await rejection(context.engine.start(options(context, { workspace, signal: untyped(throwing) }))),
      "signal must be an AbortSignal: reading it threw: no flag here",
      "a throwing getter",
    )
    assert.deepStrictEqual(fs.readdirSync(workspace), [])
    assert.deepStrictEqual(await context.engine.events("session-1"), [])
    assert.strictEqual(context.server.requests().length, 0)
  })

  it("a signal whose aborted getter throws from its n-th read on: refused InvalidInput or a run that completes, never a bare throw or a run nobody holds", async () => {
    const context = await setup()
    context.server.push({ respond: Respond.sse(OpenAiSse.response({ text: ["done"] })), repeat: true })
    const workspace = freshWorkspace(context, "workspace")
    let refused = 0
    for (let from = 1; ; from++) {
      let reads = 0
      const signal = {
        get aborted(): boolean {
          if (++reads >= from) throw new Error("no flag here")
          return false
        },
        addEventListener: () => undefined,
        removeEventListener: () => undefined,
      }
      try {
        const run = await context.engine.start(options(context, { workspace, signal: untyped(signal) }))
        assert.strictEqual((await run.wait()).outcome.kind, "completed", `throwing from read ${from}`)
      } catch (error) {
        assert.instanceOf(error, EngineError.EngineError, `throwing from read ${from}: ${String(error)}`)
        assert.strictEqual((error as EngineError.EngineError).reason._tag, "InvalidInput")
        refused++
      }
      // Whatever happened, the session takes the next run at once.
      const next = await context.engine.start(options(context, { workspace }))
      assert.strictEqual((await next.wait()).outcome.kind, "completed")
      // Past the last read the getter never threw: every read site was met.
      if (reads < from) break
    }
    assert.isAtLeast(refused, 2)
  })

  it("refuses a message that is neither a string nor {text}, naming both forms, and takes either", async () => {
    const context = await setup([Respond.sse(OpenAiSse.response({ text: ["One."] })), Respond.sse(OpenAiSse.response({ text: ["Two."] }))])
    for (const message of [{}, 5, null, { text: 5 }]) {
      const refused = await rejection(context.engine.start(options(context, { message: untyped(message) })))
      assertInvalid(refused, "message must be a string or {text, displayText?}", JSON.stringify(message))
    }
    assert.deepStrictEqual(await context.engine.events("session-1"), [])
    for (const message of ["plain", { text: "shown", displayText: "short" }]) {
      const run = await context.engine.start(options(context, { message: untyped(message) }))
      assert.deepStrictEqual((await run.wait()).outcome, { kind: "completed" })
    }
  })

  it("refuses null for maxSteps and idleTimeoutMs, as for every other option, instead of taking the default unseen", async () => {
    const context = await setup([Respond.sse(OpenAiSse.response({ text: ["One."] }))])
    const maxSteps = await rejection(context.engine.start(options(context, { maxSteps: untyped(null) })))
    assertInvalid(maxSteps, "maxSteps must be an integer in 1..256", "maxSteps")
    const idle = await rejection(context.engine.start(options(context, { idleTimeoutMs: untyped(null) })))
    assertInvalid(idle, "idleTimeoutMs must be an integer in [1000, 300000]", "idleTimeoutMs")
    assert.deepStrictEqual(await context.engine.events("session-1"), [])
    assert.strictEqual(context.server.requests().length, 0)
  })

  it("refuses allowPriorUnknown that is not a boolean: the string \"false\" never admits a run over an unknown outcome", async () => {
    const context = await setup([
      Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "deploy", arguments: ['{"target":"prod"}'] }] })),
      Respond.sse(OpenAiSse.response({ text: ["Carrying on."] })),
    ])
    const first = await context.engine.start(options(context, { tools: [deployUnknown] }))
    const outcome = (await first.wait()).outcome
    assert.strictEqual(outcome.kind === "failed" ? outcome.class : outcome.kind, "outcome_unknown")
    // The terminal names the tool and keeps what it said: the one clue to what the effect did.
    assert.match(outcome.kind === "failed" ? (outcome.message ?? "") : "", /^the outcome of tool operation \S+:call-1 \(deploy\) is unknown: the deploy host stopped answering$/)
    const before = (await context.engine.events("session-1")).length
    for (const allow of ["false", "true", 0, 1, null]) {
      const refused = await rejection(
        context.engine.start(options(context, { tools: [deployUnknown], message: "Did it deploy?", allowPriorUnknown: untyped(allow) })),
      )
      assertInvalid(refused, "allowPriorUnknown must be a boolean", String(allow))
    }
    assert.strictEqual((await context.engine.events("session-1")).length, before)
    assert.strictEqual(context.server.requests().length, 1)
    const next = await context.engine.start(options(context, { tools: [deployUnknown], message: "Did it deploy?", allowPriorUnknown: true }))
    assert.deepStrictEqual((await next.wait()).outcome, { kind: "completed" })
  })

  it("refuses a misspelt start option, and options whose getters throw, as InvalidInput, writing nothing for them; reads each option once", async () => {
    const context = await setup([Respond.sse(OpenAiSse.response({ text: ["Read once."] }))])
    const workspace = freshWorkspace(context, "workspace")
    // A misspelt option would leave its default in force unseen: the signal that cancels, the step budget.
    for (const key of ["signl", "maxStep", "systemPromt"]) {
      const refused = await rejection(context.engine.start(untyped({ ...options(context, { workspace }), [key]: 1 })))
      assertInvalid(refused, `start options have no key '${key}'`, key)
    }
    // In the provider too: a misspelt apiKey would send no key at all.
    for (const key of ["apikey", "outputLimitFeild"]) {
      const refused = await rejection(
        context.engine.start(options(context, { workspace, provider: untyped({ ...options(context).provider, [key]: "x" }) })),
      )
      assertInvalid(
        refused,
        `provider has no key '${key}' (the keys are kind, baseUrl, model, apiKey, headers, fetch, outputLimitField, requestDeadlineMs)`,
        key,
      )
    }
    assert.strictEqual(context.server.requests().length, 0)
    const compact = await rejection(context.engine.compact(untyped({ ...options(context, { workspace }), sesionId: "s" })))
    assertInvalid(compact, "have no key 'sesionId'", "compact")
    const getter = (name: string) =>
      Object.defineProperty({ ...options(context, { workspace }) }, name, {
        enumerable: true,
        get: () => {
          throw new Error(`${name} is not here`)
        },
      })
    // The signal getter throws while start reads it: a rejection, never a throw out of `start`.
    for (const name of ["signal", "provider", "sessionId"]) {
      let started: Promise<unknown> | undefined
      assert.doesNotThrow(() => {
        started = context.engine.start(untyped(getter(name)))
      }, undefined, undefined, name)
      assertInvalid(await rejection(started!), `start options could not be read: ${name} is not here`, name)
    }
    // A nested one: the provider's base URL.
    const provider = Object.defineProperty({ ...options(context).provider }, "baseUrl", {
      enumerable: true,
      get: () => {
        throw new Error("baseUrl is not here")
      },
    })
    assertInvalid(
      await rejection(context.engine.start(options(context, { workspace, provider }))),
      "start options could not be read: baseUrl is not here",
      "provider.baseUrl",
    )
    // Deeper: a header, a context window, a provider option (an Internal failure with a stack, a
    // defect of the Effect API, or "nested too deeply").
    const throwing = (name: string) => Object.defineProperty({}, name, { enumerable: true, get: () => { throw new Error(`${name} is not here`) } })
    const deeper: ReadonlyArray<readonly [Partial<StartOptions>, string]> = [
      [{ provider: { ...options(context).provider, headers: throwing("x-a") } }, "x-a"],
      [{ context: throwing("declaredWindow") }, "declaredWindow"],
      [{ providerOptions: { nested: throwing("temperature") } }, "temperature"],
    ]
    for (const [overrides, name] of deeper) {
      assertInvalid(await rejection(context.engine.start(options(context, { workspace, ...overrides }))), `start options could not be read: ${name} is not here`, name)
    }
    // Provider options that refer to themselves are refused, and promptly (a copy of every branch
    // of a value shared by two keys ran for ever).
    const cyclic: Record<string, unknown> = {}
    cyclic["a"] = cyclic
    cyclic["b"] = cyclic
    assertInvalid(await rejection(context.engine.start(options(context, { workspace, providerOptions: untyped(cyclic) }))), "providerOptions", "cycle")
    // Each option is read once: a signal getter that gave a new signal at each read would leave the
    // facade and the engine watching different signals.
    const reads = new Map<string, number>()
    const counted = { ...options(context, { workspace }), signal: new AbortController().signal }
    const watched = Object.defineProperties(
      {},
      Object.fromEntries(
        Object.entries(counted).map(([key, value]) => [
          key,
          { enumerable: true, get: () => (reads.set(key, (reads.get(key) ?? 0) + 1), value) },
        ]),
      ),
    )
    const admitted = (await context.engine.start(untyped(watched))) as { wait: () => Promise<unknown> }
    assert.deepStrictEqual([...new Set(reads.values())], [1], JSON.stringify(Object.fromEntries(reads)))
    await admitted.wait()
    fs.rmSync(path.join(workspace, MARKER), { force: true })
    const proxy = new Proxy(options(context, { workspace }), {
      ownKeys: () => {
        throw new Error("no keys")
      },
    })
    assertInvalid(await rejection(context.engine.start(proxy)), "start options could not be read: no keys", "proxy")
    assert.deepStrictEqual(fs.readdirSync(workspace), [])
    // Only the run whose options were all readable was admitted and sent.
    assert.deepStrictEqual(new Set((await context.engine.events("session-1")).map((stored) => stored.event.invocation.invocationId)).size, 1)
    assert.strictEqual(context.server.requests().length, 1)
  })

  it("names maxOutputTokens, the option the host passed, in its refusal", async () => {
    const context = await setup()
    for (const limit of [1e12, 0, 1.5, untyped<number>("8000")]) {
      const refused = await rejection(context.engine.start(options(context, { maxOutputTokens: limit })))
      assertInvalid(refused, "maxOutputTokens must be an integer in 1..10000000000", String(limit))
      assert.notInclude(refused.message, "mainOutputLimit")
    }
  })
})

describe("createEngine refusals open nothing", () => {
  const refusedBeforeOpening = async (overrides: Partial<CreateEngineOptions>, text: string) => {
    const folder = temporaryFolder()
    const what = JSON.stringify(overrides, (_key, value: unknown) => (typeof value === "number" && !Number.isFinite(value) ? String(value) : value))
    const refused = await rejection(createEngine({ database: path.join(folder, "events.sqlite"), ...overrides }))
    assertInvalid(refused, text, what)
    assert.deepStrictEqual(fs.readdirSync(folder), [], `${what} created files`)
  }

  it("refuses an engineOptions value outside its range, naming the option and the range", async () => {
    const max = 2 ** 31 - 1
    const cases: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
      [{ cancelGraceMs: "100" }, `engineOptions.cancelGraceMs must be an integer in 0..${max}`],
      [{ cancelGraceMs: Infinity }, `engineOptions.cancelGraceMs must be an integer in 0..${max}`],
      [{ cancelGraceMs: NaN }, `engineOptions.cancelGraceMs must be an integer in 0..${max}`],
      [{ cancelGraceMs: -1 }, `engineOptions.cancelGraceMs must be an integer in 0..${max}`],
      [{ cancelGraceMs: max + 1 }, `engineOptions.cancelGraceMs must be an integer in 0..${max}`],
      [{ handoffWaitMs: -1 }, `engineOptions.handoffWaitMs must be an integer in 0..${max}`],
      [{ maxModelAttempts: 0 }, "engineOptions.maxModelAttempts must be an integer in 1..1000"],
      [{ maxModelAttempts: -1 }, "engineOptions.maxModelAttempts must be an integer in 1..1000"],
      [{ maxModelAttempts: 2.5 }, "engineOptions.maxModelAttempts must be an integer in 1..1000"],
      [{ maxModelAttempts: 1001 }, "engineOptions.maxModelAttempts must be an integer in 1..1000"],
      [{ backoffBaseMs: "5" }, `engineOptions.backoffBaseMs must be an integer in 0..${max}`],
      [{ backoffBaseMs: -5 }, `engineOptions.backoffBaseMs must be an integer in 0..${max}`],
      [{ backoffMaxMs: Infinity }, `engineOptions.backoffMaxMs must be an integer in 0..${max}`],
      [{ observationMaxChars: 0 }, "engineOptions.observationMaxChars must be an integer in 1..131072"],
      [{ observationMaxChars: 131_073 }, "engineOptions.observationMaxChars must be an integer in 1..131072"],
      [{ observationDelayMs: NaN }, "engineOptions.observationDelayMs must be a finite number (clamped to 0..50)"],
      [{ observationDelayMs: "10" }, "engineOptions.observationDelayMs must be a finite number (clamped to 0..50)"],
      [{ keptContexts: -1 }, "engineOptions.keptContexts must be an integer in 0..1000000"],
      [{ keptContexts: 1.5 }, "engineOptions.keptContexts must be an integer in 0..1000000"],
      [{ keptContextBytes: Infinity }, `engineOptions.keptContextBytes must be an integer in 0..${Number.MAX_SAFE_INTEGER}`],
    ]
    for (const [engineOptions, text] of cases) await refusedBeforeOpening({ engineOptions: untyped(engineOptions) }, text)
    await refusedBeforeOpening({ engineOptions: untyped("fast") }, "engineOptions must be an object")
    await refusedBeforeOpening({ engineOptions: untyped(null) }, "engineOptions must be an object")
    // A misspelt option is named, not ignored.
    await refusedBeforeOpening(
      { engineOptions: untyped({ cancelGrace: 100 }) },
      "engineOptions has no option 'cancelGrace' (the options are backoffBaseMs, backoffMaxMs, maxModelAttempts, observationMaxChars, observationDelayMs, cancelGraceMs, handoffWaitMs, keptContexts, keptContextBytes)",
    )
  })

  it("refuses the same options through the Effect API's Engine.make", async () => {
    const exit = await Effect.runPromiseExit(
      Engine.make(untyped({ maxModelAttempts: 0 })).pipe(Effect.provide(Layer.mergeAll(LogTesting.layer(), Ids.layer)), Effect.scoped),
    )
    assert.isTrue(Exit.isFailure(exit))
    const error = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
    assert.instanceOf(error, EngineError.EngineError)
    assert.deepStrictEqual((error as EngineError.EngineError).reason, {
      _tag: "InvalidInput",
      message: "engineOptions.maxModelAttempts must be an integer in 1..1000",
    })
  })

  it("accepts the ends of each range, and an option given as undefined keeps its default", async () => {
    const folder = temporaryFolder()
    const engine = await createEngine({
      database: path.join(folder, "events.sqlite"),
      engineOptions: {
        backoffBaseMs: 0,
        backoffMaxMs: 2 ** 31 - 1,
        maxModelAttempts: 1,
        observationMaxChars: 131_072,
        observationDelayMs: -10,
        cancelGraceMs: 0,
      },
    })
    await engine.close()
    // Typed as a host writes it (`exactOptionalPropertyTypes`): an option may be given as `undefined`.
    const withUndefined: Parameters<typeof createEngine>[0]["engineOptions"] = { cancelGraceMs: undefined, maxModelAttempts: undefined }
    assert.deepStrictEqual(resolveOptions(withUndefined!), defaults)
    const other = await createEngine({ database: path.join(folder, "other.sqlite"), engineOptions: withUndefined })
    assert.deepStrictEqual(await other.close({ handoff: undefined }), [])
  })

  it("refuses a misspelt option, and options whose getters throw, as InvalidInput before it opens anything", async () => {
    // A misspelt key would leave its default in force unseen: FULL where NORMAL was asked, ten attempts where one was.
    for (const key of ["synchronus", "engineOption"]) {
      await refusedBeforeOpening(
        untyped({ [key]: "NORMAL" }),
        `the engine's options have no key '${key}' (the keys are database, databaseUrl, synchronous, engineOptions)`,
      )
    }
    const folder = temporaryFolder()
    const thrower = (name: string, into: object) =>
      Object.defineProperty(into, name, {
        enumerable: true,
        get: () => {
          throw new Error(`${name} is not here`)
        },
      })
    const topLevel = thrower("synchronous", { database: path.join(folder, "events.sqlite") })
    const nested = { database: path.join(folder, "events.sqlite"), engineOptions: thrower("maxModelAttempts", {}) }
    for (const [given, name] of [
      [topLevel, "synchronous"],
      [nested, "maxModelAttempts"],
    ] as const) {
      let opened: Promise<unknown> | undefined
      assert.doesNotThrow(() => {
        opened = createEngine(untyped(given))
      }, undefined, undefined, name)
      assertInvalid(await rejection(opened!), `the engine's options could not be read: ${name} is not here`, name)
    }
    assert.deepStrictEqual(fs.readdirSync(folder), [])
  })

  it("refuses a synchronous level other than FULL and NORMAL before it creates the log", async () => {
    for (const level of ["garbage", "OFF", "EXTRA", "full", 5]) {
      await refusedBeforeOpening({ synchronous: untyped(level) }, "synchronous must be one of FULL, NORMAL")
    }
    const folder = temporaryFolder()
    const engine = await createEngine({ database: path.join(folder, "events.sqlite"), synchronous: "NORMAL" })
    await engine.close()
  })
})
