import { assert, describe, it } from "@effect/vitest"
import { Canonical, Digest } from "@maka/facts"
import { Tool, ToolCatalog, ToolError } from "@maka/tools"
import { Effect, Schema } from "effect"

const tool = (name: string, semantics: Tool.Semantics = "parallel", description = `The ${name} tool.`) =>
  Tool.make({
    name,
    description,
    input: Schema.Struct({ value: Schema.String }),
    semantics,
    execute: () => Effect.succeed(Tool.text(name)),
  })

describe("ToolCatalog", () => {
  it("has a digest over the sorted definitions and semantics, independent of the order given", () => {
    const catalog = ToolCatalog.make([tool("b"), tool("a", "finish_turn")])
    assert.deepStrictEqual(catalog.names, ["a", "b"])
    assert.strictEqual(catalog.digest, ToolCatalog.make([tool("a", "finish_turn"), tool("b")]).digest)
    assert.strictEqual(
      catalog.digest,
      Digest.toolCatalog(
        catalog.tools.map((item) => ({
          name: item.name,
          description: item.description,
          inputSchema: item.inputSchema,
          semantics: item.semantics,
        })),
      ),
    )
    assert.notStrictEqual(catalog.digest, ToolCatalog.make([tool("b"), tool("a")]).digest)
    assert.notStrictEqual(catalog.digest, ToolCatalog.make([tool("b"), tool("a", "finish_turn", "other")]).digest)
    assert.match(ToolCatalog.empty.digest, Digest.DIGEST_PATTERN)
  })

  it("offers its definitions as one sealed list, the same object for the same definitions in every catalog", () => {
    const first = ToolCatalog.make([tool("b"), tool("a")]).capture().definitions
    const second = ToolCatalog.extend(ToolCatalog.make([tool("a")]), [tool("b")]).capture().definitions
    assert.isTrue(Canonical.isSealed(first))
    assert.strictEqual(second, first)
    assert.deepStrictEqual(first, [tool("a").definition, tool("b").definition])
    // A definition deep-frozen: the text the model's body and digest reuse stays true.
    assert.isTrue(Object.isFrozen(first[0]!.inputSchema) && Canonical.isSealed(tool("a").definition))
    assert.throws(() => {
      ;(tool("a").inputSchema as Record<string, unknown>)["type"] = "string"
    }, TypeError)
    const other = ToolCatalog.make([tool("a"), tool("b", "parallel", "changed")]).capture().definitions
    assert.notStrictEqual(other, first)
    assert.strictEqual(other[1]!.description, "changed")
  })

  it("refuses two tools with one name", () => {
    assert.throws(() => ToolCatalog.make([tool("a"), tool("a")]), ToolError.ToolError)
    assert.throws(() => ToolCatalog.extend(ToolCatalog.make([tool("a")]), [tool("a")]), ToolError.ToolError)
  })

  it("refuses a tool that is not one Tool.make builds, before any run is opened with it", () => {
    const good = tool("ok")
    // A copy of a made tool is a tool like it.
    assert.deepStrictEqual(ToolCatalog.make([{ ...good }]).names, ["ok"])
    const schema = { type: "object", properties: {} }
    const broken: ReadonlyArray<readonly [unknown, string]> = [
      [null, "must be an object"],
      [{ ...good, name: "bad name" }, "must be 1-64 characters"],
      [{ ...good, semantics: "sometimes" }, "unknown semantics"],
      [{ ...good, decode: undefined }, "no decode function"],
      [{ ...good, definition: undefined }, "no definition"],
      [{ ...good, definition: { name: "other", description: "d", inputSchema: schema } }, "no definition"],
      [{ ...good, definition: { name: "ok", description: "d", inputSchema: { type: "string" } } }, "no definition"],
      [{ ...good, definition: { name: "ok", description: "d", inputSchema: { ...schema, when: new Date(0) } } }, "not plain JSON"],
    ]
    for (const [candidate, message] of broken) {
      let thrown: unknown
      try {
        ToolCatalog.make([candidate as Tool.Tool])
      } catch (error) {
        thrown = error
      }
      assert.instanceOf(thrown, ToolError.ToolError, message)
      assert.include((thrown as ToolError.ToolError).message, message)
    }
  })

  it("is immutable and captures frozen definitions and handlers for a step", () => {
    const catalog = ToolCatalog.make([tool("a")])
    const captured = catalog.capture()
    assert.isTrue(Object.isFrozen(catalog) && Object.isFrozen(captured) && Object.isFrozen(captured.definitions))
    assert.strictEqual(captured.digest, catalog.digest)
    assert.deepStrictEqual(captured.definitions.map((definition) => definition.name), ["a"])
    const extended = ToolCatalog.extend(catalog, [tool("b")])
    assert.deepStrictEqual(captured.names, ["a"])
    assert.deepStrictEqual(extended.names, ["a", "b"])
    assert.isUndefined(captured.get("b"))
  })

  it("admits parallel calls together and an exclusive or finish-turn call only alone, first", () => {
    const captured = ToolCatalog.make([tool("p"), tool("q"), tool("x", "exclusive_step"), tool("f", "finish_turn")]).capture()
    const admit = (names: ReadonlyArray<string>) => ToolCatalog.admit(captured, names)
    assert.deepStrictEqual(admit(["p", "q", "p"]), ["admitted", "admitted", "admitted"])
    assert.deepStrictEqual(admit(["x", "p"]), ["admitted", "exclusive_conflict"])
    assert.deepStrictEqual(admit(["p", "x", "q"]), ["admitted", "exclusive_conflict", "admitted"])
    assert.deepStrictEqual(admit(["f", "x"]), ["admitted", "exclusive_conflict"])
    assert.deepStrictEqual(admit(["x"]), ["admitted"])
    // An unknown name leaves the step as it was (it is rejected `unavailable` later) …
    assert.deepStrictEqual(admit(["missing", "x"]), ["admitted", "admitted"])
    // … unless the step is already exclusive.
    assert.deepStrictEqual(admit(["x", "missing"]), ["admitted", "exclusive_conflict"])
  })
})

describe("ToolCatalog.from", () => {
  it("takes a catalog as it is and builds one from a plain array; [] is the empty catalog", () => {
    const catalog = ToolCatalog.make([tool("a")])
    assert.strictEqual(ToolCatalog.from(catalog), catalog)
    const built = ToolCatalog.from([tool("b"), tool("a")])
    assert.deepStrictEqual(built.names, ["a", "b"])
    assert.strictEqual(built.digest, ToolCatalog.make([tool("a"), tool("b")]).digest)
    const none = ToolCatalog.from([])
    assert.deepStrictEqual(none.names, [])
    assert.strictEqual(none.digest, ToolCatalog.empty.digest)
    assert.isTrue(ToolCatalog.isToolCatalog(catalog))
    assert.isFalse(ToolCatalog.isToolCatalog([tool("a")]))
  })

  it("refuses an array that repeats a name, like make", () => {
    assert.throws(() => ToolCatalog.from([tool("a"), tool("a")]), /appears twice/)
  })
})
