import { assert, describe, it } from "@effect/vitest"
import { Tool, ToolError } from "@maka/tools"
import { Effect, Schema } from "effect"

const Input = Schema.Struct({
  path: Schema.String.annotate({ description: "A path" }),
  limit: Schema.optionalKey(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 10 }))),
})

const make = (name: string) =>
  Tool.make({ name, description: "Reads.", input: Input, semantics: "parallel", execute: () => Effect.succeed(Tool.text("")) })

const definitionError = (thunk: () => unknown): string => {
  const thrown = (() => {
    try {
      thunk()
      return undefined
    } catch (error) {
      return error
    }
  })()
  assert.instanceOf(thrown, ToolError.ToolError)
  const error = thrown as ToolError.ToolError
  assert.strictEqual(error.reason._tag, "InvalidDefinition")
  return error.message
}

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

  it("accepts names of 1-64 characters of [A-Za-z0-9_-] and refuses others", () => {
    assert.strictEqual(make("a").name, "a")
    assert.strictEqual(make("A-z_0".padEnd(64, "x")).name.length, 64)
    for (const name of ["", "x".repeat(65), "read file", "read.file", "réad", "a/b"]) {
      assert.include(definitionError(() => make(name)), "must be 1-64 characters")
    }
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
