import { describe, expect, it } from "vitest"
import * as fc from "fast-check"
import * as Canonical from "../src/Canonical.ts"
import * as Reference from "../src/internal/canonical-reference.ts"
import * as Writer from "../src/internal/canonical-writer.ts"
import * as Validation from "../src/Validation.ts"

/** Any UTF-16 unit, biased towards surrogate halves, controls, quotes and escapes. */
const unit = fc.oneof(
  fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)),
  fc.constantFrom("\ud800", "\udbff", "\udc00", "\udfff", "\ud83d\ude00", "\u0000", "\u001f", "\u2028", '"', "\\", "/", "a", "é", "世"),
)
const text = fc.oneof({ weight: 4, arbitrary: fc.string({ unit, maxLength: 12 }) }, { weight: 1, arbitrary: fc.string({ maxLength: 12 }) })
const number = fc.oneof(
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.integer(),
  fc.constantFrom(-0, 0, 1e21, 1e-7, 5e-324, 1.7976931348623157e308, -1e21, 123456789012345680000, 0.1, Number.MAX_SAFE_INTEGER),
)
/** Keys that collide on case, code-unit order and integer-likeness. */
const key = fc.oneof(text, fc.constantFrom("a", "b", "B", "10", "2", "1", "", "é", "\uffff", "\ud83d\ude00", "__proto__x"))

const json = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constant(null),
    fc.boolean(),
    number,
    text,
    tie("array"),
    tie("object"),
  ),
  array: fc.array(tie("value"), { maxLength: 5 }),
  object: fc.dictionary(key, tie("value"), { maxKeys: 6 }),
})).value

/** A value canonical JSON refuses, or an odd one it accepts (null prototype, a non-enumerable symbol). */
const odd = fc.constantFrom<() => unknown>(
  () => undefined,
  () => Number.NaN,
  () => Number.POSITIVE_INFINITY,
  () => 1n,
  () => Symbol("s"),
  () => () => 1,
  () => new Date(0),
  () => new Map(),
  () => new Uint8Array(1),
  () => Object.assign(Object.create(null), { b: 1, a: 2 }),
  () => ({ [Symbol("hidden")]: 1 }),
  () => Object.defineProperty({ a: 1 }, Symbol("quiet"), { value: 1, enumerable: false }),
  () => [1, , 3],
  () => {
    const self: Record<string, unknown> = { a: 1 }
    self["self"] = self
    return self
  },
)

/** A JSON value with one odd value planted at a random place. */
const planted = fc.tuple(json, odd, fc.array(fc.oneof(fc.nat(), key), { minLength: 1, maxLength: 4 })).map(([base, make, route]) => {
  const root: { value: unknown } = { value: base }
  let holder: Record<string, unknown> = root
  let slot = "value"
  for (const step of route) {
    const current = holder[slot]
    if (typeof current !== "object" || current === null) break
    const keys = Object.keys(current)
    if (keys.length === 0) break
    holder = current as Record<string, unknown>
    slot = keys[typeof step === "number" ? step % keys.length : 0]!
  }
  holder[slot] = make()
  return root.value
})

type Outcome = { readonly text: string } | { readonly message: string; readonly path: ReadonlyArray<string | number> }

const outcome = (write: (value: unknown) => string, value: unknown): Outcome => {
  try {
    return { text: write(value) }
  } catch (error) {
    if (!(error instanceof Canonical.CanonicalJsonError)) throw error
    return { message: error.message, path: error.path }
  }
}

const nested = (depth: number, leaf: unknown, wrap: (inner: unknown, level: number) => unknown): unknown => {
  let value = leaf
  for (let level = 1; level < depth; level += 1) value = wrap(value, level)
  return value
}

describe("the fast canonical writer against the reference writer", () => {
  it("writes exactly the reference's bytes for random JSON values", () => {
    fc.assert(
      fc.property(json, (value) => {
        expect(Canonical.stringify(value)).toBe(Reference.stringify(value))
        expect(Writer.writeText(value)).toBe(Reference.stringify(value))
      }),
      { numRuns: 2_000 },
    )
  })

  it("writes numbers (-0, 1e21, subnormals) and strings (controls, lone surrogates) as the reference does", () => {
    fc.assert(
      fc.property(fc.oneof(number, text), (value) => {
        expect(Writer.writeText(value)).toBe(Reference.stringify(value))
        expect(Writer.writeText({ [String(value)]: [value] })).toBe(Reference.stringify({ [String(value)]: [value] }))
      }),
      { numRuns: 2_000 },
    )
  })

  it("refuses what the reference refuses, with the same message and path, and accepts the same odd values", () => {
    fc.assert(
      fc.property(planted, (value) => {
        expect(outcome(Canonical.stringify, value)).toEqual(outcome(Reference.stringify, value))
      }),
      { numRuns: 1_000 },
    )
  })

  it("writes and refuses values around and beyond the fast writer's depth like the reference", () => {
    for (const depth of [Writer.MAX_FAST_DEPTH - 1, Writer.MAX_FAST_DEPTH, Writer.MAX_FAST_DEPTH + 1, 3 * Writer.MAX_FAST_DEPTH]) {
      const mixed = nested(depth, "é\ud800", (inner, level) => (level % 2 === 0 ? [inner, level] : { z: inner, a: -0 }))
      expect(Canonical.stringify(mixed)).toBe(Reference.stringify(mixed))
      expect(Canonical.measure(mixed)).toEqual(Reference.measure(mixed))
      const refused = nested(depth, undefined, (inner) => [inner])
      expect(outcome(Canonical.stringify, refused)).toEqual(outcome(Reference.stringify, refused))
      const cyclic: Array<unknown> = []
      const deep = nested(depth, cyclic, (inner) => ({ next: inner }))
      cyclic.push(deep)
      expect(outcome(Canonical.stringify, deep)).toEqual(outcome(Reference.stringify, deep))
    }
  })

  it("measures nodes and depth as the reference does, and refuses alike", () => {
    fc.assert(
      fc.property(fc.oneof(json, planted), (value) => {
        const measured = (measure: typeof Canonical.measure): unknown => {
          try {
            return measure(value)
          } catch (error) {
            if (!(error instanceof Canonical.CanonicalJsonError)) throw error
            return { message: error.message, path: error.path }
          }
        }
        expect(measured(Canonical.measure)).toEqual(measured(Reference.measure))
      }),
      { numRuns: 1_000 },
    )
  })

  it("reports lone surrogates anywhere, keys included, exactly when the well-formed rule refuses", () => {
    fc.assert(
      fc.property(json, (value) => {
        const written = Writer.write(value)
        expect(written?.isWellFormed).toBe(Validation.wellFormed(value)._tag === "Success")
      }),
      { numRuns: 2_000 },
    )
    expect(Writer.write({ ok: "\ud83d\ude00" })?.isWellFormed).toBe(true)
    expect(Writer.write({ "\udc00": 1 })?.isWellFormed).toBe(false)
    expect(Writer.write(["a", ["\ud800"]])?.isWellFormed).toBe(false)
  })

  it("reports a value frozen only when every object and array in it is frozen", () => {
    const inner = Object.freeze({ b: [1] })
    const open = Object.freeze({ a: inner })
    expect(Writer.write(open, true)?.isFrozen).toBe(false)
    Object.freeze(inner.b)
    expect(Writer.write(open, true)?.isFrozen).toBe(true)
    expect(Writer.write(Object.freeze([Object.freeze({}), []]), true)?.isFrozen).toBe(false)
  })
})
