import { Result } from "effect"
import { describe, expect, it } from "vitest"
import * as Canonical from "../src/Canonical.ts"

const refusal = (value: unknown): Canonical.CanonicalJsonError => {
  expect(() => Canonical.stringify(value)).toThrow(Canonical.CanonicalJsonError)
  const result = Canonical.tryStringify(value)
  if (Result.isSuccess(result)) throw new Error(`expected a refusal, got ${result.success}`)
  return result.failure
}

/** No lone surrogate: under the `u` flag a pair is one code point, so `\p{Cs}` matches only lone halves. */
const isWellFormed = (text: string): boolean => !/\p{Cs}/u.test(text)

const nestedArray = (depth: number): unknown => {
  let value: unknown = 0
  for (let level = 1; level < depth; level += 1) value = [value]
  return value
}

describe("Canonical.stringify", () => {
  it("sorts keys by UTF-16 code units, so an astral key sorts before U+FFFF", () => {
    const value = { "\uFFFF": 1, "\uD83D\uDE00": 2, b: 3, a: 4, B: 5, "é": 6, "": 7 }
    expect(Canonical.stringify(value)).toBe('{"":7,"B":5,"a":4,"b":3,"é":6,"\uD83D\uDE00":2,"\uFFFF":1}')
  })

  it("sorts integer-like keys as strings, not in insertion or numeric order", () => {
    expect(Canonical.stringify({ 10: "ten", 2: "two", 1: "one", x: null })).toBe('{"1":"one","10":"ten","2":"two","x":null}')
  })

  it("sorts nested objects at every level, keeps array order and writes no whitespace", () => {
    const value = { z: [{ d: 1, c: [3, 2, 1] }, "s"], y: { b: { y: true, x: false }, a: [] }, x: {} }
    expect(Canonical.stringify(value)).toBe('{"x":{},"y":{"a":[],"b":{"x":false,"y":true}},"z":[{"c":[3,2,1],"d":1},"s"]}')
  })

  it("writes the golden nested value with unicode byte for byte", () => {
    const value = {
      b: [1, 2.5, { z: null, a: true, "\u00e9": false }],
      a: "h\u00e9llo \u2028 \"q\" \\ \n\t\u0001 \ud834\udd1e \u4e16",
      "\u00e4": { y: -3, x: 0.1, Z: [], w: {} },
      A: "\u00ff"
    }
    expect(Canonical.stringify(value)).toBe(
      "{\"A\":\"\u00ff\",\"a\":\"h\u00e9llo \u2028 \\\"q\\\" \\\\ \\n\\t\\u0001 \ud834\udd1e \u4e16\",\"b\":[1,2.5,{\"a\":true,\"z\":null,\"\u00e9\":false}],\"\u00e4\":{\"Z\":[],\"w\":{},\"x\":0.1,\"y\":-3}}"
    )
  })

  it("writes numbers exactly as JSON.stringify does", () => {
    const cases: ReadonlyArray<readonly [number, string]> = [
      [1e21, "1e+21"],
      [1e-7, "1e-7"],
      [-0, "0"],
      [0.1, "0.1"],
      [0.000001, "0.000001"],
      [123456789012345680000, "123456789012345680000"],
      [5e-324, "5e-324"],
      [1.7976931348623157e308, "1.7976931348623157e+308"],
      [-42, "-42"],
      [Number.MAX_SAFE_INTEGER, "9007199254740991"]
    ]
    for (const [value, text] of cases) {
      expect(Canonical.stringify(value)).toBe(text)
      expect(Canonical.stringify(value)).toBe(JSON.stringify(value))
    }
    expect(Canonical.stringify({ n: -0 })).toBe('{"n":0}')
  })

  it("escapes strings exactly as JSON.stringify does, lone surrogates included", () => {
    const controls = Array.from({ length: 0x20 }, (_, code) => String.fromCharCode(code)).join("")
    const samples = [
      controls,
      "\"quoted\" and \\ backslash /",
      "\u2028\u2029\u007f",
      "\uD800",
      "x\uDC00y",
      "\uDBFF\uDFFF",
      "\uD83D\uDE00 emoji",
      "héllo 世界"
    ]
    for (const sample of samples) {
      expect(Canonical.stringify(sample)).toBe(JSON.stringify(sample))
      expect(Canonical.stringify({ [sample]: sample })).toBe(`{${JSON.stringify(sample)}:${JSON.stringify(sample)}}`)
    }
    expect(Canonical.stringify("\uD800")).toBe('"\\ud800"')
  })

  it("accepts null-prototype objects and shared (acyclic) references", () => {
    const bare: Record<string, unknown> = Object.create(null)
    bare["b"] = 1
    bare["a"] = 2
    const shared = { k: 1 }
    expect(Canonical.stringify(bare)).toBe('{"a":2,"b":1}')
    expect(Canonical.stringify([shared, { again: shared }])).toBe('[{"k":1},{"again":{"k":1}}]')
  })

  it("refuses undefined anywhere, with the path to it", () => {
    expect(refusal(undefined).path).toEqual([])
    expect(refusal({ a: { b: undefined } }).path).toEqual(["a", "b"])
    expect(refusal([1, undefined]).path).toEqual([1])
    const sparse: Array<number> = [1]
    sparse[2] = 3
    expect(refusal(sparse).path).toEqual([1])
    expect(() => Canonical.measure(sparse)).toThrow(Canonical.CanonicalJsonError)
  })

  it("refuses non-finite numbers, bigint, functions and symbols", () => {
    for (const value of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 1n, () => 1, Symbol("s")]) {
      const error = refusal({ list: [value] })
      expect(error._tag).toBe("CanonicalJsonError")
      expect(error.path).toEqual(["list", 0])
    }
    expect(refusal({ toJSON: () => "x" }).path).toEqual(["toJSON"])
    expect(refusal({ "odd key": Number.NaN }).message).toContain('$["odd key"]')
  })

  it("refuses cycles, but names where they close", () => {
    const self: Record<string, unknown> = {}
    self["me"] = self
    expect(refusal(self).path).toEqual(["me"])
    const list: Array<unknown> = []
    list.push({ back: list })
    expect(refusal(list).path).toEqual([0, "back"])
  })

  it("refuses non-plain objects", () => {
    class Point {
      constructor(readonly x: number) {}
    }
    class List extends Array<number> {}
    const values: ReadonlyArray<unknown> = [
      new Date(0),
      new Map([["a", 1]]),
      new Set([1]),
      new Point(1),
      new Uint8Array(2),
      /regex/,
      new String("boxed"),
      List.from([1]),
      { [Symbol("hidden")]: 1 }
    ]
    for (const value of values) expect(refusal({ v: value }).path).toEqual(["v"])
    expect(refusal(new Point(1)).message).toContain("Point")
  })

  it("writes a value however deeply it nests, the same whatever the caller's stack depth", () => {
    const deep = nestedArray(200_000)
    const text = Canonical.stringify(deep)
    expect(text).toHaveLength(1 + 2 * 199_999)
    expect(text).toBe(`${"[".repeat(199_999)}0${"]".repeat(199_999)}`)
    // Called from deep in the stack (where a recursive walk would overflow), the same text.
    const under = (frames: number): string => (frames === 0 ? Canonical.stringify(deep) : under(frames - 1))
    expect(under(7_000)).toBe(text)
    const objects = JSON.parse(`${'{"b":1,"a":'.repeat(5_000)}null${"}".repeat(5_000)}`) as unknown
    expect(Canonical.stringify(objects)).toBe(`${'{"a":'.repeat(5_000)}null${',"b":1}'.repeat(5_000)}`)
  })
})

describe("Canonical.tryStringify and equal", () => {
  it("succeeds with the canonical text", () => {
    expect(Canonical.tryStringify({ b: 1, a: 2 })).toEqual(Result.succeed('{"a":2,"b":1}'))
  })

  it("compares values by canonical JSON", () => {
    expect(Canonical.equal({ a: 1, b: [1, { c: 2, d: 3 }] }, { b: [1, { d: 3, c: 2 }], a: 1 })).toBe(true)
    expect(Canonical.equal({ n: -0 }, { n: 0 })).toBe(true)
    expect(Canonical.equal([1, 2], [2, 1])).toBe(false)
    expect(Canonical.equal({ a: 1 }, { a: "1" })).toBe(false)
    expect(() => Canonical.equal({ a: undefined }, {})).toThrow(Canonical.CanonicalJsonError)
  })
})

describe("Canonical.measure", () => {
  it("counts every value as a node; a scalar or empty container has depth 1", () => {
    expect(Canonical.measure(1)).toEqual({ nodes: 1, depth: 1 })
    expect(Canonical.measure(null)).toEqual({ nodes: 1, depth: 1 })
    expect(Canonical.measure([])).toEqual({ nodes: 1, depth: 1 })
    expect(Canonical.measure({})).toEqual({ nodes: 1, depth: 1 })
    expect(Canonical.measure({ a: [1] })).toEqual({ nodes: 3, depth: 3 })
    expect(Canonical.measure({ a: [1, 2, { b: "x" }], c: true })).toEqual({ nodes: 7, depth: 4 })
    expect(Canonical.measure(nestedArray(64))).toEqual({ nodes: 64, depth: 64 })
  })

  it("refuses what stringify refuses", () => {
    const self: Record<string, unknown> = {}
    self["me"] = self
    expect(() => Canonical.measure(self)).toThrow(Canonical.CanonicalJsonError)
    expect(() => Canonical.measure({ a: [new Date(0)] })).toThrow(Canonical.CanonicalJsonError)
    // Depth alone is never refused: measured as deep as it nests, whatever the caller's stack.
    expect(Canonical.measure(nestedArray(200_000))).toEqual({ nodes: 200_000, depth: 200_000 })
  })
})

describe("Canonical lengths and truncation", () => {
  it("measures UTF-8 and UTF-16 lengths", () => {
    expect(Canonical.utf8Length("aé世\uD83D\uDE00")).toBe(1 + 2 + 3 + 4)
    expect(Canonical.utf16Length("aé世\uD83D\uDE00")).toBe(5)
    expect(Canonical.utf8Length("\uD800")).toBe(3)
  })

  it("cuts to UTF-16 units without splitting a surrogate pair", () => {
    const text = "ab\uD83D\uDE00cd"
    expect(Canonical.truncateUtf16(text, 10)).toBe(text)
    expect(Canonical.truncateUtf16(text, 4)).toBe("ab\uD83D\uDE00")
    expect(Canonical.truncateUtf16(text, 3)).toBe("ab")
    expect(Canonical.truncateUtf16(text, 2)).toBe("ab")
    expect(Canonical.truncateUtf16("\uD83D\uDE00", 1)).toBe("")
    expect(Canonical.truncateUtf16(text, 0)).toBe("")
    expect(Canonical.truncateUtf16("a\uD800b", 2)).toBe("a\uD800")
    const long = "\uD83D\uDE00".repeat(2_000)
    for (const limit of [2_047, 2_048]) {
      const cut = Canonical.truncateUtf16(long, limit)
      expect(cut.length).toBeLessThanOrEqual(limit)
      expect(isWellFormed(cut)).toBe(true)
    }
  })

  it("cuts to UTF-8 bytes at a character boundary", () => {
    const text = "aé世\uD83D\uDE00z"
    expect(Canonical.truncateUtf8(text, 11)).toBe(text)
    expect(Canonical.truncateUtf8(text, 10)).toBe("aé世\uD83D\uDE00")
    expect(Canonical.truncateUtf8(text, 9)).toBe("aé世")
    expect(Canonical.truncateUtf8(text, 8)).toBe("aé世")
    expect(Canonical.truncateUtf8(text, 6)).toBe("aé世")
    expect(Canonical.truncateUtf8(text, 5)).toBe("aé")
    expect(Canonical.truncateUtf8(text, 3)).toBe("aé")
    expect(Canonical.truncateUtf8(text, 2)).toBe("a")
    expect(Canonical.truncateUtf8(text, 0)).toBe("")
    const long = "x\uD83D\uDE00".repeat(2_000)
    for (let limit = 4_090; limit <= 4_096; limit += 1) {
      const cut = Canonical.truncateUtf8(long, limit)
      expect(Canonical.utf8Length(cut)).toBeLessThanOrEqual(limit)
      expect(Canonical.utf8Length(cut)).toBeGreaterThan(limit - 4)
      expect(isWellFormed(cut)).toBe(true)
    }
  })

  it("rejects a negative or fractional limit as a bug", () => {
    expect(() => Canonical.truncateUtf16("abc", -1)).toThrow(RangeError)
    expect(() => Canonical.truncateUtf8("abc", 1.5)).toThrow(RangeError)
  })
})
