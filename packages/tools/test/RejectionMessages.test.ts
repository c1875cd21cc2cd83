/**
 * The messages of `invalid_input` and `preparation_failed` rejections as they are stored and read:
 * the host's secrets scrubbed in every form, then cut to 2,048 UTF-16 units like a failure message;
 * a validator without issues still says something; a definition that cannot be read is a
 * `ToolError`; a file system error never shows the path Node opened.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { EventSink, type Fact } from "@maka/facts"
import { Builtins, Journal, Tool, ToolCatalog, ToolError } from "@maka/tools"
import { RecordingSink } from "@maka/tools/testing"
import { Context, Effect, Exit, Layer, Redacted, Schema } from "effect"
import { z } from "zod"
import { FsError, fsReason } from "../src/internal/fs.ts"
import { call, definitionError as definitionErrorOf, failureOf, workspaceFixture } from "./fixtures.ts"
import { Committed, kinds, setup, withSink } from "./journal-suite.ts"

const KEY = "sk-test/secret+key=1\n"

/** Every form a secret is scrubbed in: as given, trimmed, URL-encoded, JSON-escaped. */
const FORMS = [KEY, KEY.trim(), encodeURIComponent(KEY.trim()), JSON.stringify(KEY).slice(1, -1)]

const recordingLayer = (): Layer.Layer<EventSink.EventSink | Committed> =>
  Layer.effectContext(
    Effect.map(RecordingSink.make(), (recording) =>
      Context.make(EventSink.EventSink, recording.sink).pipe(Context.add(Committed, { events: recording.events })),
    ),
  )

/** A Standard Schema (with Standard JSON Schema) whose validation is `validate`. */
const standard = (validate: (value: unknown) => unknown): Tool.StandardInput =>
  ({
    "~standard": {
      version: 1,
      vendor: "test",
      validate,
      jsonSchema: { input: () => ({ type: "object" }), output: () => ({ type: "object" }) },
    },
  }) as unknown as Tool.StandardInput

const toolOf = (name: string, input: Tool.InputSchema) =>
  Tool.make({ name, description: name, semantics: "parallel", input, execute: () => Effect.succeed(Tool.text("ran")) })

/** Runs one step of `calls` over `tools` with `secrets`; the rejections as stored, and the step's results. */
const runRejected = (
  tools: ReadonlyArray<Tool.Tool>,
  calls: ReadonlyArray<{ readonly id: string; readonly name: string; readonly input: never }>,
  secrets: ReadonlyArray<Redacted.Redacted<string>> = [],
) =>
  Effect.gen(function* () {
    const context = yield* setup(calls)
    const result = yield* withSink(context)(
      Journal.runStep(context.invocation, ToolCatalog.make(tools).capture(), context.requests, { secrets }),
    )
    const facts = yield* context.facts
    const messages = facts.flatMap((fact: Fact.Fact) =>
      fact.kind === "tool_rejected" && "message" in fact.reason ? [fact.reason.message] : [],
    )
    return { result, facts, messages }
  }).pipe(Effect.provide(recordingLayer()))

describe("rejection messages", () => {
  it.effect("scrubs the host's secrets in every form from invalid_input and preparation_failed messages", () =>
    Effect.gen(function* () {
      const tools = FORMS.flatMap((form, index) => [
        toolOf(`issue${index}`, standard(() => ({ issues: [{ message: `token ${form} has no access`, path: ["project"] }] }))),
        toolOf(
          `transform${index}`,
          z.strictObject({
            account: z.string().transform((): string => {
              throw new Error(`GET /accounts?key=${form} -> 404`)
            }),
          }),
        ),
      ])
      const calls = tools.map((tool, index) => ({
        id: `call-${index + 1}`,
        name: tool.name,
        input: (tool.name.startsWith("transform") ? { account: "bob" } : {}) as never,
      }))
      const { result, facts, messages } = yield* runRejected(tools, calls, [Redacted.make(KEY)])
      assert.deepStrictEqual(
        kinds(facts),
        tools.map((tool) => (tool.name.startsWith("issue") ? "tool_rejected:invalid_input" : "tool_rejected:preparation_failed")),
      )
      assert.strictEqual(messages.length, tools.length)
      for (const message of messages) {
        assert.include(message, "[redacted]")
        assert.notInclude(message, "secret")
      }
      assert.include(messages[0]!, 'Invalid input for tool "issue0": token [redacted] has no access')
      // What the model reads is the stored text.
      for (const [index, item] of result.calls.entries()) {
        assert.strictEqual(item._tag, "Rejected")
        if (item._tag === "Rejected") assert.strictEqual(item.text, messages[index])
      }
    }),
  )

  it.effect("cuts a decode message of megabytes to 2,048 units, so the rejection commits and the step goes on", () =>
    Effect.gen(function* () {
      const items = toolOf("items", Schema.Struct({ items: Schema.Array(Schema.String) }))
      const cities = Array.from({ length: 60_000 }, (_, index) => `city_${index}`) as [string, ...Array<string>]
      const city = toolOf("city", z.strictObject({ city: z.enum(cities) }))
      const echo = toolOf("echo", Schema.Struct({}))
      const { facts, messages } = yield* runRejected(
        [items, city, echo],
        [
          { id: "call-1", name: "items", input: { items: Array.from({ length: 60_000 }, () => 1) } as never },
          { id: "call-2", name: "city", input: { city: "Lyon" } as never },
          { id: "call-3", name: "echo", input: {} as never },
        ],
      )
      assert.deepStrictEqual(kinds(facts), [
        "tool_rejected:invalid_input",
        "tool_rejected:invalid_input",
        "tool_dispatched",
        "tool_settled:succeeded",
      ])
      assert.deepStrictEqual(
        messages.map((message) => message.length),
        [2_048, 2_048],
      )
      assert.isTrue(messages[0]!.startsWith('Invalid input for tool "items": Expected string\n  at ["items"][0]\n'))
      assert.isTrue(messages[1]!.startsWith('Invalid input for tool "city": Invalid option: expected one of "city_0"'))
    }),
  )

  it.effect("cuts without splitting a surrogate pair, and scrubs before cutting so a secret across the cut leaves nothing", () =>
    Effect.gen(function* () {
      const prefix = (name: string) => `Tool "${name}" could not prepare its input: Error: `
      const key = "sk-straddling-key-0123456789"
      // An emoji (a surrogate pair) across unit 2,048; a secret that starts at unit 2,040.
      const pair = "a".repeat(2_047 - prefix("pair").length) + "\u{1F600}" + "b".repeat(100)
      const before = "c".repeat(2_040 - prefix("straddler").length)
      const thrower = (message: string) =>
        standard(() => {
          throw new Error(message)
        })
      const { messages } = yield* runRejected(
        [toolOf("pair", thrower(pair)), toolOf("straddler", thrower(before + key + "d".repeat(100)))],
        [
          { id: "call-1", name: "pair", input: {} as never },
          { id: "call-2", name: "straddler", input: {} as never },
        ],
        [Redacted.make(key)],
      )
      assert.strictEqual(messages[0], prefix("pair") + "a".repeat(2_047 - prefix("pair").length))
      assert.strictEqual(messages[1], prefix("straddler") + before + "[redacte")
      assert.notInclude(messages[1]!, "sk-s")
    }),
  )

  it.effect("stops describing a Standard Schema's issues once the message holds enough of them", () =>
    Effect.gen(function* () {
      const many = toolOf(
        "many",
        standard(() => ({ issues: Array.from({ length: 100_000 }, (_, index) => ({ message: "Expected string", path: [index] })) })),
      )
      const exit = yield* Effect.exit(many.decode({}))
      assert.isTrue(Exit.isFailure(exit))
      const failure = Exit.isFailure(exit) ? exit.cause.reasons.find((reason) => reason._tag === "Fail") : undefined
      const message = failure?._tag === "Fail" ? failure.error.message : ""
      assert.isTrue(message.startsWith('Invalid input for tool "many": Expected string\n  at [0]\nExpected string\n  at [1]\n'))
      assert.isBelow(message.length, 10_000)
      assert.match(message, /\n\(and \d+ more issues\)$/)
    }),
  )

  it.effect("gives a readable detail when a Standard Schema fails without issues", () =>
    Effect.gen(function* () {
      const { messages } = yield* runRejected(
        [toolOf("silent", standard(() => ({ issues: [] })))],
        [{ id: "call-1", name: "silent", input: {} as never }],
      )
      assert.deepStrictEqual(messages, ['Invalid input for tool "silent": the validator reported a failure without issues'])
    }),
  )
})

describe("Tool.make with a Standard JSON Schema it cannot read", () => {
  const definitionError = (input: unknown): string => definitionErrorOf(() => toolOf("t", input as Tool.InputSchema))
  const converting = (jsonSchema: () => unknown) => ({
    "~standard": { version: 1, vendor: "test", validate: (value: unknown) => ({ value }), jsonSchema: { input: jsonSchema, output: jsonSchema } },
  })

  it("refuses a cyclic document as InvalidDefinition naming the cycle", () => {
    const cyclic: Record<string, unknown> = { type: "object", properties: {} }
    ;(cyclic["properties"] as Record<string, unknown>)["self"] = cyclic
    const message = definitionError(converting(() => cyclic))
    assert.include(message, "input schema is not JSON: reading it threw TypeError: Converting circular structure to JSON")
  })

  it("refuses a document, a schema or a converter whose getter throws as InvalidDefinition with its error", () => {
    const document = {
      type: "object",
      get properties(): never {
        throw new Error("properties unavailable")
      },
    }
    assert.include(definitionError(converting(() => document)), "reading it threw Error: properties unavailable")
    const standardThrows = {
      get "~standard"(): never {
        throw new Error("no standard")
      },
    }
    assert.include(definitionError(standardThrows), "its input schema threw while it was read: Error: no standard")
    const converterThrows = {
      "~standard": {
        version: 1,
        vendor: "test",
        validate: (value: unknown) => ({ value }),
        get jsonSchema(): never {
          throw new Error("no converter")
        },
      },
    }
    assert.include(definitionError(converterThrows), "Error: no converter")
    const trap = () => {
      throw new Error("trapped")
    }
    assert.include(definitionError(new Proxy({}, { get: trap, has: trap })), "Error: trapped")
  })
})

describe("file system reasons", () => {
  it("gives words for common errno codes and the bare code for others, never Node's message", () => {
    const reason = (code: string | undefined) =>
      fsReason(new FsError({ code, detail: `${code}: something, open '/proc/self/fd/27/mybin'` }))
    assert.strictEqual(reason("ETXTBSY"), "text file busy (a program running from it)")
    assert.strictEqual(reason("EFBIG"), "file too large")
    assert.strictEqual(reason("EDQUOT"), "disk quota exceeded")
    assert.strictEqual(reason("ENOSPC"), "no space left on device")
    assert.strictEqual(reason("EWHATEVER"), "EWHATEVER")
    assert.strictEqual(reason(undefined), "unexpected file system error")
  })

  it.effect.skipIf(process.platform !== "linux")("never shows the descriptor path when writing over a running program", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const program = path.join(root, "mybin")
      fs.copyFileSync("/bin/sleep", program)
      fs.chmodSync(program, 0o755)
      yield* Effect.acquireRelease(
        Effect.callback<ChildProcess>((resume) => {
          const child = spawn(program, ["30"], { stdio: "ignore" })
          child.once("spawn", () => resume(Effect.succeed(child)))
          child.once("error", (error) => resume(Effect.die(error)))
        }),
        (child) => Effect.sync(() => child.kill()),
      )
      const outcome = yield* call(Builtins.writeFile(workspace), { path: "mybin", content: "x" })
      if (outcome._tag === "Failed") assert.strictEqual(failureOf(outcome), "mybin: text file busy (a program running from it)")
      assert.notInclude(JSON.stringify(outcome), "/proc/self/fd")
    }),
  )
})
