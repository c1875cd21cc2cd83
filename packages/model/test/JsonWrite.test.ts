/** The request bodies' canonical JSON writer gives exactly `Canonical.stringify`'s bytes, and refuses what it refuses. */
import { assert, describe, it } from "@effect/vitest"
import { Canonical } from "@maka/facts"
import * as fc from "fast-check"
import { canonicalJson } from "../src/internal/json-write.ts"

const refusalOf = (run: () => string): string => {
  try {
    run()
  } catch (error) {
    return error instanceof Canonical.CanonicalJsonError ? error.message : `not a refusal: ${String(error)}`
  }
  return "accepted"
}

describe("canonicalJson", () => {
  it("writes the same bytes as Canonical.stringify for any JSON value", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        assert.strictEqual(canonicalJson(value), Canonical.stringify(value))
      }),
      { numRuns: 500 },
    )
  })

  it("sorts keys by UTF-16 code units and escapes lone surrogates like Canonical", () => {
    const value = { b: 1, a: [true, null, "x"], "\u00e9": "\ud800", "😀": { z: -0, y: 1e21 }, A: "" }
    assert.strictEqual(canonicalJson(value), Canonical.stringify(value))
    assert.strictEqual(canonicalJson({ b: 1, a: 2 }), '{"a":2,"b":1}')
  })

  it("refuses what is not plain JSON with Canonical's own error", () => {
    const cyclic: Record<string, unknown> = {}
    cyclic["self"] = cyclic
    const values: ReadonlyArray<unknown> = [
      { a: undefined },
      [1, Number.NaN],
      { n: Number.POSITIVE_INFINITY },
      new Date(0),
      { nested: new Map() },
      [() => 1],
      // eslint-disable-next-line no-sparse-arrays
      [1, , 2],
      cyclic,
      { [Symbol("s")]: 1 },
    ]
    for (const value of values) {
      const expected = refusalOf(() => Canonical.stringify(value))
      assert.notStrictEqual(expected, "accepted")
      assert.strictEqual(refusalOf(() => canonicalJson(value)), expected)
    }
  })

  it("writes a value nested deeper than its own bound like Canonical", () => {
    let deep: unknown = "leaf"
    for (let level = 0; level < 600; level++) deep = level % 2 === 0 ? [deep] : { k: deep }
    assert.strictEqual(canonicalJson(deep), Canonical.stringify(deep))
  })
})

describe("canonicalJson, keys the engine would reorder", () => {
  it("sorts index-like keys as text, like Canonical", () => {
    const value = { b: 1, "10": "ten", "2": "two", a: { "0": [], "01": null, "4294967295": 1, __proto__x: 2 } }
    assert.strictEqual(canonicalJson(value), Canonical.stringify(value))
    assert.isTrue(canonicalJson(value).startsWith('{"10":"ten","2":"two","a"'))
  })

  it("keeps a `__proto__` key as a plain key", () => {
    const value: unknown = JSON.parse('{"b":1,"__proto__":{"x":1},"a":2}')
    assert.strictEqual(canonicalJson(value), Canonical.stringify(value))
    assert.include(canonicalJson(value), '"__proto__":{"x":1}')
  })

  it("writes the same bytes as Canonical.stringify for objects with index-like keys", () => {
    const key = fc.oneof(fc.string(), fc.nat().map(String))
    fc.assert(
      fc.property(fc.dictionary(key, fc.jsonValue({ maxDepth: 2 })), (value) => {
        assert.strictEqual(canonicalJson(value), Canonical.stringify(value))
      }),
      { numRuns: 300 },
    )
  })
})
