/**
 * An empty struct (`Schema.Struct({})`) anywhere in a tool's input, not only as the input itself:
 * offered as the closed empty object and decoded as one, so a value the offered JSON Schema refuses
 * (`5`, `"x"`, `[]`, `null`, an object with keys) is rejected `invalid_input` at its position.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer, Schema } from "effect"
import { EventSink } from "@maka/facts"
import { Journal, Tool, ToolCatalog } from "@maka/tools"
import { RecordingSink } from "@maka/tools/testing"
import { Committed, kinds, setup, withSink } from "./journal-suite.ts"

/** What the top-level empty struct is offered as, and so every nested one. */
const CLOSED = { type: "object", properties: {}, additionalProperties: false } as const

/** What no empty struct may take: each is refused with the same reason where it stands. */
const NOT_OBJECTS: ReadonlyArray<unknown> = [5, "x", [], null]

/** A tool that records the input `execute` received. */
const recording = <S extends Schema.ConstraintDecoder<unknown, never>>(input: S) => {
  const received: Array<unknown> = []
  const tool = Tool.make({
    name: "probe",
    description: "A probe.",
    semantics: "parallel",
    input,
    execute: (decoded) => (received.push(decoded), Effect.succeed(Tool.text("ok"))),
  })
  return { tool, received }
}

/** Decodes and runs `input`, returning what `execute` received. */
const runs = (tool: Tool.Tool, received: Array<unknown>, input: unknown) =>
  Effect.gen(function* () {
    const runner = yield* tool.decode(input)
    yield* runner({ signal: new AbortController().signal }) as Effect.Effect<unknown>
    return received.at(-1)
  })

/** The rejection of `input`, as the journal would record it. */
const refusal = (tool: Tool.Tool, input: unknown) => Effect.flip(tool.decode(input))

const invalid = (detail: string) => ({ kind: "invalid_input", message: `Invalid input for tool "probe": ${detail}` })

describe("Tool.make with an empty struct inside its input", () => {
  it.effect("offers an empty struct field as the closed empty object and takes only {} there", () =>
    Effect.gen(function* () {
      const { tool, received } = recording(Schema.Struct({ path: Schema.String, options: Schema.Struct({}) }))
      assert.deepStrictEqual(tool.inputSchema, {
        type: "object",
        properties: { path: { type: "string" }, options: CLOSED },
        required: ["path", "options"],
        additionalProperties: false,
      })
      assert.deepStrictEqual(yield* runs(tool, received, { path: "a", options: {} }), { path: "a", options: {} })
      for (const value of NOT_OBJECTS) {
        assert.deepStrictEqual(
          yield* refusal(tool, { path: "a", options: value }),
          invalid('Expected object\n  at ["options"]'),
          JSON.stringify(value),
        )
      }
      assert.deepStrictEqual(
        yield* refusal(tool, { path: "a", options: { verbose: true } }),
        invalid('Expected no excess property\n  at ["options"]["verbose"]'),
      )
      assert.strictEqual(received.length, 1)
    }),
  )

  it.effect("offers the items of an array of empty structs as the closed empty object and takes only {} each", () =>
    Effect.gen(function* () {
      const { tool, received } = recording(Schema.Struct({ markers: Schema.Array(Schema.Struct({})) }))
      assert.deepStrictEqual(tool.inputSchema, {
        type: "object",
        properties: { markers: { type: "array", items: CLOSED } },
        required: ["markers"],
        additionalProperties: false,
      })
      assert.deepStrictEqual(yield* runs(tool, received, { markers: [{}, {}] }), { markers: [{}, {}] })
      for (const value of NOT_OBJECTS) {
        assert.deepStrictEqual(
          yield* refusal(tool, { markers: [{}, value] }),
          invalid('Expected object\n  at ["markers"][1]'),
          JSON.stringify(value),
        )
      }
      assert.strictEqual(received.length, 1)
    }),
  )

  it.effect("offers an optional empty struct as the closed empty object, present or absent", () =>
    Effect.gen(function* () {
      const { tool, received } = recording(Schema.Struct({ options: Schema.optionalKey(Schema.Struct({})) }))
      assert.deepStrictEqual(tool.inputSchema, {
        type: "object",
        properties: { options: CLOSED },
        additionalProperties: false,
      })
      assert.deepStrictEqual(yield* runs(tool, received, {}), {})
      assert.deepStrictEqual(yield* runs(tool, received, { options: {} }), { options: {} })
      for (const value of NOT_OBJECTS) {
        assert.deepStrictEqual(
          yield* refusal(tool, { options: value }),
          invalid('Expected object\n  at ["options"]'),
          JSON.stringify(value),
        )
      }
      assert.strictEqual(received.length, 2)
    }),
  )

  it.effect("offers an empty struct member of a union as the closed empty object beside the others", () =>
    Effect.gen(function* () {
      const { tool, received } = recording(
        Schema.Struct({ mode: Schema.Union([Schema.Struct({}), Schema.Struct({ pattern: Schema.String })]) }),
      )
      assert.deepStrictEqual(tool.inputSchema, {
        type: "object",
        properties: {
          mode: {
            anyOf: [
              CLOSED,
              { type: "object", properties: { pattern: { type: "string" } }, required: ["pattern"], additionalProperties: false },
            ],
          },
        },
        required: ["mode"],
        additionalProperties: false,
      })
      assert.deepStrictEqual(yield* runs(tool, received, { mode: {} }), { mode: {} })
      // An object with keys is not the empty member, so it goes on to the next one.
      assert.deepStrictEqual(yield* runs(tool, received, { mode: { pattern: "a*" } }), { mode: { pattern: "a*" } })
      for (const value of NOT_OBJECTS) {
        assert.deepStrictEqual(
          yield* refusal(tool, { mode: value }),
          invalid('Expected object\n  at ["mode"]'),
          JSON.stringify(value),
        )
      }
      assert.strictEqual(received.length, 2)
    }),
  )

  it.effect("closes it wherever the input reaches: a record value, a tuple element, a nullable, a lazy schema, a transformation's input", () =>
    Effect.gen(function* () {
      interface Tree {
        readonly children: ReadonlyArray<Tree>
        readonly meta: {}
      }
      const Tree: Schema.Codec<Tree> = Schema.Struct({
        children: Schema.Array(Schema.suspend((): Schema.Codec<Tree> => Tree)),
        meta: Schema.Struct({}),
      })
      const { tool, received } = recording(
        Schema.Struct({
          byName: Schema.Record(Schema.String, Schema.Struct({})),
          pair: Schema.Tuple([Schema.String, Schema.Struct({})]),
          nullable: Schema.NullOr(Schema.Struct({})),
          tree: Tree,
          defaulted: Schema.Struct({}).pipe(Schema.withDecodingDefaultKey(Effect.succeed({}))),
        }),
      )
      assert.deepStrictEqual(tool.inputSchema, {
        type: "object",
        properties: {
          byName: { type: "object", additionalProperties: CLOSED },
          pair: { type: "array", prefixItems: [{ type: "string" }, CLOSED], maxItems: 2, minItems: 2 },
          nullable: { anyOf: [CLOSED, { type: "null" }] },
          tree: { $ref: "#/$defs/Objects_" },
          defaulted: CLOSED,
        },
        required: ["byName", "pair", "nullable", "tree"],
        additionalProperties: false,
        $defs: {
          Objects_: {
            type: "object",
            properties: { children: { type: "array", items: { $ref: "#/$defs/Objects_" } }, meta: CLOSED },
            required: ["children", "meta"],
            additionalProperties: false,
          },
        },
      })
      const valid = { byName: { a: {} }, pair: ["p", {}], nullable: null, tree: { children: [{ children: [], meta: {} }], meta: {} } }
      assert.deepStrictEqual(yield* runs(tool, received, valid), { ...valid, defaulted: {} })
      const at = (path: string) => invalid(`Expected object\n  at ${path}`)
      for (const value of NOT_OBJECTS) {
        const what = JSON.stringify(value)
        assert.deepStrictEqual(yield* refusal(tool, { ...valid, byName: { a: value } }), at('["byName"]["a"]'), what)
        assert.deepStrictEqual(yield* refusal(tool, { ...valid, pair: ["p", value] }), at('["pair"][1]'), what)
        const deep = { children: [{ children: [], meta: value }], meta: {} }
        assert.deepStrictEqual(yield* refusal(tool, { ...valid, tree: deep }), at('["tree"]["children"][0]["meta"]'), what)
        assert.deepStrictEqual(yield* refusal(tool, { ...valid, defaulted: value }), at('["defaulted"]'), what)
        if (value !== null) {
          assert.deepStrictEqual(yield* refusal(tool, { ...valid, nullable: value }), at('["nullable"]'), what)
        }
      }
      assert.strictEqual(received.length, 1)
    }),
  )

  it("closes only the empty struct: ObjectKeyword, Unknown and Any beside it stay as Effect derives them", () => {
    const { tool } = recording(
      Schema.Struct({ empty: Schema.Struct({}), object: Schema.ObjectKeyword, unknown: Schema.Unknown, any: Schema.Any }),
    )
    assert.deepStrictEqual(tool.inputSchema, {
      type: "object",
      properties: { empty: CLOSED, object: { anyOf: [{ type: "array" }, { type: "object" }] }, unknown: {}, any: {} },
      required: ["empty", "object", "unknown", "any"],
      additionalProperties: false,
    })
  })

  it("keeps an empty struct's annotations and identifier, shared as one definition", () => {
    const Options = Schema.Struct({}).annotate({ identifier: "Options", description: "No options yet." })
    const { tool } = recording(Schema.Struct({ first: Options, second: Options }))
    assert.deepStrictEqual(tool.inputSchema, {
      type: "object",
      properties: { first: { $ref: "#/$defs/Options" }, second: { $ref: "#/$defs/Options" } },
      required: ["first", "second"],
      additionalProperties: false,
      $defs: { Options: { ...CLOSED, description: "No options yet." } },
    })
  })
})

const recordingLayer = (): Layer.Layer<EventSink.EventSink | Committed> =>
  Layer.effectContext(
    Effect.map(RecordingSink.make(), (recording) =>
      Context.make(EventSink.EventSink, recording.sink).pipe(Context.add(Committed, { events: recording.events })),
    ),
  )

describe("Journal with an empty struct inside a tool's input", () => {
  it.effect("rejects a non-object there as invalid_input, commits the rejection and never runs the tool", () =>
    Effect.gen(function* () {
      const { tool, received } = recording(Schema.Struct({ options: Schema.Struct({}) }))
      const context = yield* setup([
        { id: "call-1", name: "probe", input: { options: 5 } },
        { id: "call-2", name: "probe", input: { options: {} } },
      ])
      const result = yield* withSink(context)(Journal.runStep(context.invocation, ToolCatalog.from([tool]).capture(), context.requests))
      assert.deepStrictEqual(kinds(yield* context.facts), ["tool_rejected:invalid_input", "tool_dispatched", "tool_settled:succeeded"])
      const rejected = result.calls[0]!
      if (rejected._tag !== "Rejected") return assert.fail("expected a rejection")
      assert.strictEqual(rejected.text, 'Invalid input for tool "probe": Expected object\n  at ["options"]')
      assert.deepStrictEqual(received, [{ options: {} }])
    }).pipe(Effect.provide(recordingLayer())),
  )
})
