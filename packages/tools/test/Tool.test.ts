import { assert, describe, it } from "@effect/vitest"
import type { Identity } from "@maka/facts"
import { Builtins, Tool, ToolCatalog, ToolError } from "@maka/tools"
import { Effect, Schema } from "effect"
import { z } from "zod"
import { definitionError } from "./fixtures.ts"
import { classifyError } from "../src/internal/execution.ts"

const Input = Schema.Struct({
  path: Schema.String.annotate({ description: "A path" }),
  limit: Schema.optionalKey(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 10 }))),
})

/** A value the types forbid, as a caller without types would pass it. */
const untypedDefault = (value: unknown) => value as Effect.Effect<number>

const make = (name: string) =>
  Tool.make({ name, description: "Reads.", input: Input, semantics: "parallel", execute: () => Effect.succeed(Tool.text("")) })

describe("Tool.make", () => {
  it("derives the provider JSON Schema from the input Schema, closed to unknown properties", () => {
    const tool = make("read")
    assert.deepStrictEqual(tool.inputSchema, {
      type: "object",
      properties: {
        path: { type: "string", description: "A path" },
        limit: { type: "integer", minimum: 1, maximum: 10 },
      },
      required: ["path"],
      additionalProperties: false,
    })
    assert.deepStrictEqual(tool.definition, { name: "read", description: "Reads.", inputSchema: tool.inputSchema })
  })

  it("inlines named sub-schemas as $defs", () => {
    const Named = Schema.String.annotate({ identifier: "FilePath" })
    const tool = Tool.make({
      name: "named",
      description: "d",
      input: Schema.Struct({ path: Named }),
      semantics: "parallel",
      execute: () => Promise.resolve(Tool.text("")),
    })
    assert.deepStrictEqual(tool.inputSchema["$defs"], { FilePath: { type: "string" } })
  })

  it("takes a named object input (a Schema.Class, an identifier, a zod id) as its definition at the root", () => {
    class Person extends Schema.Class<Person>("Person")({ name: Schema.String }) {}
    const expected = { type: "object", properties: { name: { type: "string" } }, required: ["name"], additionalProperties: false }
    const classTool = Tool.make({ name: "c", description: "d", input: Person, semantics: "parallel", execute: ({ name }) => Promise.resolve(Tool.text(name)) })
    assert.deepStrictEqual(classTool.inputSchema, expected)
    const named = Schema.Struct({ name: Schema.String }).annotate({ identifier: "Named" })
    assert.deepStrictEqual(Tool.make({ name: "n", description: "d", input: named, semantics: "parallel", execute: () => Promise.resolve(Tool.text("")) }).inputSchema, expected)
    const zodNamed = z.object({ name: z.string() }).meta({ id: "ZodNamed" })
    const zodNamedTool = Tool.make({ name: "z", description: "d", input: zodNamed, semantics: "parallel", execute: () => Promise.resolve(Tool.text("")) })
    assert.deepStrictEqual(zodNamedTool.inputSchema, { type: "object", properties: { name: { type: "string" } }, required: ["name"] })
    // A recursive one keeps its definition, which it refers to.
    interface Tree {
      readonly label: string
      readonly children: ReadonlyArray<Tree>
    }
    const TreeSchema: Schema.Codec<Tree> = Schema.Struct({
      label: Schema.String,
      children: Schema.Array(Schema.suspend((): Schema.Codec<Tree> => TreeSchema)),
    }).annotate({ identifier: "Tree" })
    const tree = Tool.make({ name: "t", description: "d", input: TreeSchema, semantics: "parallel", execute: () => Promise.resolve(Tool.text("")) })
    assert.strictEqual(tree.inputSchema["type"], "object")
    assert.deepStrictEqual(Object.keys(tree.inputSchema["$defs"] as object), ["Tree"])
  })

  it.effect("fails preparation_failed, never the caller's fiber, when an Effect Schema's decoding yields what is not an Effect", () =>
    Effect.gen(function* () {
      // A default given as a plain function, as a caller without types may pass it.
      const broken = Schema.Struct({ count: Schema.Finite.pipe(Schema.withDecodingDefaultKey(untypedDefault(() => 5))) })
      const tool = Tool.make({ name: "count", description: "d", input: broken, semantics: "parallel", execute: () => Promise.resolve(Tool.text("")) })
      const failure = yield* Effect.flip(tool.decode({}))
      assert.strictEqual(failure.kind, "preparation_failed")
      assert.include(failure.message, 'Tool "count" could not prepare its input: ')
      // The same tool decodes what needs no default.
      assert.isFunction(yield* tool.decode({ count: 2 }))
    }),
  )

  it("accepts names of 1-64 characters of [A-Za-z0-9_-] and refuses others", () => {
    assert.strictEqual(make("a").name, "a")
    assert.strictEqual(make("A-z_0".padEnd(64, "x")).name.length, 64)
    for (const name of ["", "x".repeat(65), "read file", "read.file", "réad", "a/b"]) {
      assert.include(definitionError(() => make(name)), "must be 1-64 characters")
    }
    // Only a string: neither a number nor an object whose text would pass the pattern.
    const named = (name: unknown) => definitionError(() => make(name as string)).replace("invalid tool definition: ", "")
    assert.strictEqual(named(123), "tool name must be a string, got number")
    assert.strictEqual(named(null), "tool name must be a string, got null")
    assert.strictEqual(named(undefined), "tool name must be a string, got undefined")
    assert.strictEqual(named(["read"]), "tool name must be a string, got an array")
    assert.strictEqual(named({ toString: () => "read" }), "tool name must be a string, got an object")
  })

  it("refuses a definition, a catalog or limits that are none, or that throw while read, as invalid definitions", () => {
    const refusal = (build: () => unknown) => definitionError(build).replace("invalid tool definition: ", "")
    assert.strictEqual(refusal(() => Tool.make(null as unknown as Parameters<typeof Tool.make>[0])), "a tool definition must be an object, got null")
    const throwing = Object.defineProperty({}, "name", { get: () => { throw new Error("no name") } })
    assert.strictEqual(refusal(() => Tool.make(throwing as unknown as Parameters<typeof Tool.make>[0])), "a tool definition could not be read: no name")
    assert.strictEqual(refusal(() => ToolCatalog.from(null as unknown as ReadonlyArray<Tool.Tool>)), "tools must be a list of tools (Tool.make)")
    const limits = Object.defineProperty({}, "commandTimeoutSeconds", { enumerable: true, get: () => { throw new Error("no limit") } })
    assert.strictEqual(refusal(() => Builtins.all({ root: "/tmp" } as never, limits)), "builtin limits could not be read: no limit")
  })

  it("settles a failure with no reason at all as 'tool failed', as an empty message", () => {
    for (const reason of [undefined, null, new Error(""), { message: "" }]) {
      assert.deepStrictEqual(classifyError(reason), { _tag: "Failed", message: "tool failed" })
    }
    assert.deepStrictEqual(classifyError(0), { _tag: "Failed", message: "0" })
    assert.deepStrictEqual(classifyError("nope"), { _tag: "Failed", message: "nope" })
  })

  it("refuses an input Schema that is not a JSON object, and unknown semantics", () => {
    assert.include(
      definitionError(() =>
        Tool.make({ name: "s", description: "d", input: Schema.String, semantics: "parallel", execute: () => Promise.resolve(Tool.text("")) }),
      ),
      "must take a JSON object",
    )
    assert.include(
      definitionError(() =>
        Tool.make({
          name: "s",
          description: "d",
          input: Input,
          semantics: "sometimes" as Tool.Semantics,
          execute: () => Promise.resolve(Tool.text("")),
        }),
      ),
      "unknown semantics",
    )
  })

  it("refuses a description that is not a string and an execute that is not a function, naming them", () => {
    const config = { name: "s", description: "d", input: Input, semantics: "parallel" as const, execute: () => Promise.resolve(Tool.text("")) }
    // What a caller without types can pass: the definition names what is wrong, before any catalog.
    const untyped = (patch: Record<string, unknown>) => () => Tool.make({ ...config, ...patch } as typeof config)
    assert.include(definitionError(untyped({ description: 42 })), "tool s: its description must be a string, got number")
    assert.include(definitionError(untyped({ description: undefined })), "its description must be a string, got undefined")
    assert.include(definitionError(untyped({ execute: undefined })), "tool s: its execute must be a function, got undefined")
    assert.include(definitionError(untyped({ execute: "run" })), "its execute must be a function, got string")
    assert.strictEqual(Tool.make(config).description, "d")
  })

  it.effect("takes an empty struct as a tool without arguments: the closed empty object, offered and decoded", () =>
    Effect.gen(function* () {
      // Effect reads Schema.Struct({}) as TypeScript's {} (any value but null): JSON Schema
      // {not: {type: "null"}}, which Tool.make refused as not a JSON object.
      const ran: Array<unknown> = []
      const now = Tool.make({
        name: "now",
        description: "d",
        semantics: "parallel",
        input: Schema.Struct({}),
        execute: (input) => (ran.push(input), Effect.succeed(Tool.text("noon"))),
      })
      assert.deepStrictEqual(now.inputSchema, { type: "object", properties: {}, additionalProperties: false })
      // The same JSON Schema as zod's closed empty object; annotations stay.
      assert.deepStrictEqual(now.inputSchema, Tool.standardJsonSchemaOf(z.strictObject({})))
      const described = Tool.make({
        name: "now",
        description: "d",
        semantics: "parallel",
        input: Schema.Struct({}).annotate({ description: "No arguments." }),
        execute: () => Effect.succeed(Tool.text("noon")),
      })
      assert.deepStrictEqual(described.inputSchema, {
        type: "object",
        properties: {},
        additionalProperties: false,
        description: "No arguments.",
      })
      const runner = yield* now.decode({})
      yield* runner({ signal: new AbortController().signal }) as Effect.Effect<unknown>
      assert.deepStrictEqual(ran, [{}])
      // What the JSON Schema refuses, the decoder refuses too, in Effect's words for a closed struct.
      for (const input of [5, "x", [], null]) {
        const failure = yield* Effect.flip(now.decode(input))
        assert.deepStrictEqual(failure, { kind: "invalid_input", message: 'Invalid input for tool "now": Expected object' })
      }
      const extra = yield* Effect.flip(now.decode({ a: 1, b: 2 }))
      assert.strictEqual(
        extra.message,
        'Invalid input for tool "now": Expected no excess property\n  at ["a"]\nExpected no excess property\n  at ["b"]',
      )
      assert.deepStrictEqual(ran, [{}])
    }),
  )

  it.effect("takes a value that is not JSON in the JSON form its offered schema describes, and hands execute the value", () =>
    Effect.gen(function* () {
      const received: Array<{ readonly at: Date; readonly site?: URL | undefined; readonly count: number }> = []
      const remind = Tool.make({
        name: "remind",
        description: "d",
        semantics: "parallel",
        input: Schema.Struct({ at: Schema.Date, site: Schema.optionalKey(Schema.URL), count: Schema.Int }),
        execute: (input) => {
          received.push(input)
          return Effect.succeed(Tool.text("ok"))
        },
      })
      assert.deepStrictEqual(remind.inputSchema["properties"], {
        at: { type: "string" },
        site: { type: "string" },
        count: { type: "integer", minimum: Number.MIN_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER },
      })
      const runner = yield* remind.decode({ at: "2026-01-01T09:00:00.000Z", site: "https://example.com/", count: 2 })
      yield* runner({ signal: new AbortController().signal }) as Effect.Effect<unknown>
      assert.strictEqual(received[0]!.at.toISOString(), "2026-01-01T09:00:00.000Z")
      assert.strictEqual(received[0]!.site?.href, "https://example.com/")
      // What is no such JSON form is refused, and so is a Date object itself (a model sends JSON).
      for (const input of [{ at: "not a date", count: 2 }, { at: "2026-01-01T09:00:00.000Z", count: "2" }, { at: new Date(0), count: 2 }]) {
        const failure = yield* Effect.flip(remind.decode(input))
        assert.strictEqual(failure.kind, "invalid_input", JSON.stringify(input))
      }
      assert.strictEqual(received.length, 1)
    }),
  )

  it.effect("shares one sealed definition per schema, name and description, and runs each tool's own execute", () =>
    Effect.gen(function* () {
      const runs: Array<string> = []
      const tool = (name: string, description: string) =>
        Tool.make({ name, description, input: Input, semantics: "parallel", execute: () => Effect.sync(() => runs.push(`${name} ${description}`)).pipe(Effect.as(Tool.text(""))) })
      const first = tool("read", "Reads.")
      const again = tool("read", "Reads.")
      assert.strictEqual(again.definition, first.definition)
      assert.isTrue(Object.isFrozen(first.definition.inputSchema))
      // Another description, or another name, is another definition.
      const other = tool("read", "Reads more.")
      assert.notStrictEqual(other.definition, first.definition)
      assert.strictEqual(other.definition.description, "Reads more.")
      assert.strictEqual(tool("look", "Reads.").definition.name, "look")
      // The shared definition never mixes the tools' handlers up.
      yield* Effect.flatMap(first.decode({ path: "a" }), (runner) => runner(undefined as never) as Effect.Effect<unknown>)
      yield* Effect.flatMap(other.decode({ path: "a" }), (runner) => runner(undefined as never) as Effect.Effect<unknown>)
      assert.deepStrictEqual(runs, ["read Reads.", "read Reads more."])
      // Descriptions made on the fly do not pile up: past the bound the oldest is derived afresh.
      for (let index = 0; index < 20; index++) tool("read", `Reads ${index}.`)
      assert.notStrictEqual(tool("read", "Reads.").definition, first.definition)
      assert.deepStrictEqual(tool("read", "Reads.").definition, first.definition)
    }),
  )

  it.effect("decodes valid input and reports every problem of invalid input in one readable message", () =>
    Effect.gen(function* () {
      const tool = make("read")
      yield* tool.decode({ path: "a", limit: 3 })
      const failure = yield* Effect.flip(tool.decode({ path: 1, limit: 0, other: true }))
      assert.strictEqual(failure.kind, "invalid_input")
      assert.match(failure.message, /^Invalid input for tool "read": /)
      assert.include(failure.message, 'at ["path"]')
      assert.include(failure.message, 'at ["limit"]')
      assert.include(failure.message, 'at ["other"]')
    }),
  )
})

describe("Tool.make with a Standard Schema (zod 4)", () => {
  const ZodInput = z.object({
    path: z.string().describe("A path"),
    limit: z.number().int().min(1).max(10).optional(),
  })

  const zodTool = (input: Tool.InputSchema = ZodInput) =>
    Tool.make({
      name: "read",
      description: "Reads.",
      input,
      semantics: "parallel",
      execute: (decoded) => Effect.succeed(Tool.text(JSON.stringify(decoded))),
    })

  it("derives the provider JSON Schema from the schema's input JSON Schema, without $schema", () => {
    assert.deepStrictEqual(zodTool().inputSchema, {
      type: "object",
      properties: {
        path: { type: "string", description: "A path" },
        limit: { type: "integer", minimum: 1, maximum: 10 },
      },
      required: ["path"],
    })
  })

  it.effect("runs execute with the schema's output and types it from the schema", () =>
    Effect.gen(function* () {
      const seen: Array<{ readonly path: string; readonly mode: "a" | "b" }> = []
      const tool = Tool.make({
        name: "defaults",
        description: "d",
        input: z.object({ path: z.string(), mode: z.enum(["a", "b"]).default("a") }),
        semantics: "parallel",
        execute: (input) => {
          seen.push(input)
          return Promise.resolve(Tool.text(input.path))
        },
      })
      const runner = yield* tool.decode({ path: "x" })
      yield* Effect.promise(() => Promise.resolve(runner({ signal: new AbortController().signal })))
      assert.deepStrictEqual(seen, [{ path: "x", mode: "a" }])
    }),
  )

  it.effect("reports every issue of invalid input with its path in one readable message", () =>
    Effect.gen(function* () {
      const failure = yield* Effect.flip(zodTool().decode({ path: 1, limit: 0 }))
      assert.strictEqual(failure.kind, "invalid_input")
      assert.match(failure.message, /^Invalid input for tool "read": /)
      assert.include(failure.message, 'expected string, received number\n  at ["path"]')
      assert.include(failure.message, 'expected number to be >=1\n  at ["limit"]')
    }),
  )

  it.effect("awaits an asynchronous validation", () =>
    Effect.gen(function* () {
      const tool = zodTool(z.object({ name: z.string().refine(async (name) => name !== "taken", "name is taken") }))
      yield* tool.decode({ name: "free" })
      const failure = yield* Effect.flip(tool.decode({ name: "taken" }))
      assert.include(failure.message, 'name is taken\n  at ["name"]')
    }),
  )

  it.effect("turns a validator that throws into preparation_failed", () =>
    Effect.gen(function* () {
      const tool = zodTool(
        z.object({
          name: z.string().refine(() => {
            throw new Error("validator broke")
          }),
        }),
      )
      const failure = yield* Effect.flip(tool.decode({ name: "x" }))
      assert.strictEqual(failure.kind, "preparation_failed")
      assert.include(failure.message, "validator broke")
    }),
  )

  it.effect("turns a validator result that is neither {value} nor {issues} into preparation_failed, never a success", () =>
    Effect.gen(function* () {
      const executed: Array<unknown> = []
      for (const result of [42, null, undefined, {}, { issues: "bad" }]) {
        const handMade = {
          "~standard": {
            version: 1,
            vendor: "hand",
            validate: () => result,
            jsonSchema: { input: () => ({ type: "object", properties: {} }), output: () => ({ type: "object", properties: {} }) },
          },
        } as unknown as Tool.StandardInput<Record<string, never>>
        const tool = Tool.make({
          name: "hand",
          description: "d",
          input: handMade,
          semantics: "parallel",
          execute: (input) => {
            executed.push(input)
            return Promise.resolve(Tool.text(""))
          },
        })
        const failure = yield* Effect.flip(tool.decode({}))
        assert.strictEqual(failure.kind, "preparation_failed", JSON.stringify(result))
        assert.include(failure.message, "its Standard Schema validate gave")
      }
      assert.deepStrictEqual(executed, [])
    }),
  )

  it.effect("turns a validator that throws an error which cannot even be read into preparation_failed", () =>
    Effect.gen(function* () {
      const unreadable = new Error("hidden")
      Object.defineProperty(unreadable, "message", {
        get() {
          throw new Error("getter broke")
        },
      })
      const trapped = new Proxy(
        {},
        {
          getPrototypeOf() {
            throw new Error("trap broke")
          },
        },
      )
      for (const thrown of [unreadable, trapped]) {
        const tool = zodTool(
          z.object({
            name: z.string().refine(() => {
              throw thrown
            }),
          }),
        )
        const failure = yield* Effect.flip(tool.decode({ name: "x" }))
        assert.deepStrictEqual(failure, {
          kind: "preparation_failed",
          message: 'Tool "read" could not prepare its input: an error that could not be described',
        })
      }
    }),
  )

  it("refuses a schema that is not a JSON object, and a Standard Schema without Standard JSON Schema", () => {
    assert.include(definitionError(() => zodTool(z.string())), "must take a JSON object")
    const validateOnly = {
      "~standard": { version: 1, vendor: "custom", validate: (value: unknown) => ({ value }) },
    } as unknown as Tool.InputSchema
    assert.include(definitionError(() => zodTool(validateOnly)), "Standard JSON Schema")
    assert.include(definitionError(() => zodTool({} as unknown as Tool.InputSchema)), "Effect Schema or a Standard Schema")
    // A Standard JSON Schema that gives no JSON Schema at all.
    for (const given of [null, "object", 5]) {
      const noSchema = {
        "~standard": {
          version: 1,
          vendor: "custom",
          validate: (value: unknown) => ({ value }),
          jsonSchema: { input: () => given, output: () => given },
        },
      } as unknown as Tool.InputSchema
      assert.include(definitionError(() => zodTool(noSchema)), "input schema has no JSON Schema", String(given))
    }
  })

  it("gives the same definition for the same tool written with zod and with Effect Schema", () => {
    // The README's example.
    const withZod = zodTool(
      z.strictObject({ path: z.string().describe("A file path"), limit: z.number().int().min(1).optional() }),
    )
    const withEffect = zodTool(
      Schema.Struct({
        path: Schema.String.annotate({ description: "A file path" }),
        limit: Schema.optionalKey(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
      }),
    )
    assert.deepStrictEqual(withZod.inputSchema, withEffect.inputSchema)
  })
})

describe("Tool.json", () => {
  interface Row {
    readonly id: number
    readonly name: string
    readonly tags?: ReadonlyArray<string>
    readonly parent: Row | null
  }

  it("takes plain data typed as an interface or a type alias, as given; a type holding what is not JSON does not compile", () => {
    const rows: Array<Row> = [{ id: 1, name: "a", parent: null, tags: ["x"] }]
    const output = Tool.json(rows)
    assert.strictEqual(output.format, "json")
    assert.strictEqual(output.value as unknown, rows)
    // A generic value typed as JSON, as a wrapper of Tool.json passes it.
    const wrapped = <V extends Identity.Json>(value: V) => Tool.json(value)
    assert.deepStrictEqual(wrapped([1, "a"]).value, [1, "a"])
    const record: Record<string, number> = { a: 1 }
    assert.deepStrictEqual(Tool.json({ rows, record, count: 2, ok: true }).value as unknown, { rows, record, count: 2, ok: true })
    // What `pnpm check` (tsconfig.test.json) refuses: each line below fails to compile without its directive.
    const refused = [
      // @ts-expect-error a Date has methods: not JSON
      () => Tool.json(new Date(0)),
      // @ts-expect-error a function is not JSON
      () => Tool.json({ f: () => 1 }),
      // @ts-expect-error a bigint is not JSON
      () => Tool.json({ n: 1n }),
      // @ts-expect-error undefined is not JSON
      () => Tool.json(undefined),
      // @ts-expect-error a value of unknown type is not JSON
      () => Tool.json(JSON.parse("1") as unknown),
      // @ts-expect-error an interface with a method is not JSON
      () => Tool.json({ id: 1, toJSON: () => "x" } as { readonly id: number; toJSON(): string }),
    ]
    assert.strictEqual(refused.length, 6)
  })
})
