/**
 * The fast canonical JSON writer (docs/log-format.md §2.1): one pass that returns text, with no shape objects,
 * no path and no ancestor set. It answers only for values it fully accepts; anything else (a value
 * to refuse, a cycle, nesting deeper than `MAX_FAST_DEPTH`, a symbol-keyed object) makes it give up,
 * and the caller asks the reference writer, which writes or refuses with the path. It also notes
 * whether every string it wrote (keys included) is well-formed, and whether every container was frozen.
 */

/** Thrown to leave the fast writer; never escapes this module's callers. */
const GIVE_UP: unique symbol = Symbol("canonical-writer.give-up")

/** Deeper values go to the reference writer, which also finds cycles (a cycle is never shallower). */
export const MAX_FAST_DEPTH = 200

/** A string JSON writes as is between quotes: no quote, backslash, control character or surrogate. */
const NEEDS_CARE = /["\\\u0000-\u001f\ud800-\udfff]/

/** A surrogate without its other half (the `u` flag pairs them). */
const LONE_SURROGATE = /\p{Cs}/u

/** What the last `write` saw; read right after it. */
const seen = { isWellFormed: true, isFrozen: true, shouldTrackFrozen: false, hasNegativeZero: false }

const quote = (text: string): string => {
  if (!NEEDS_CARE.test(text)) return `"${text}"`
  if (LONE_SURROGATE.test(text)) seen.isWellFormed = false
  return JSON.stringify(text)
}

/** Sorts keys by UTF-16 code units in place: an insertion sort, since most objects have few keys. */
const sortKeys = (keys: Array<string>): void => {
  const length = keys.length
  if (length > 16) {
    keys.sort()
    return
  }
  for (let index = 1; index < length; index += 1) {
    const key = keys[index]!
    let at = index - 1
    while (at >= 0 && keys[at]! > key) {
      keys[at + 1] = keys[at]!
      at -= 1
    }
    keys[at + 1] = key
  }
}

const writeValue = (value: unknown, depth: number): string => {
  switch (typeof value) {
    case "string":
      return quote(value)
    case "number":
      // For a finite number JSON writes ToString(value), which is what `${value}` is (-0 → "0").
      if (Number.isFinite(value)) {
        if (value === 0 && 1 / value < 0) seen.hasNegativeZero = true
        return `${value}`
      }
      throw GIVE_UP
    case "boolean":
      return value ? "true" : "false"
    case "object": {
      if (value === null) return "null"
      if (depth >= MAX_FAST_DEPTH) throw GIVE_UP
      if (seen.shouldTrackFrozen && !Object.isFrozen(value)) seen.isFrozen = false
      const prototype: unknown = Object.getPrototypeOf(value)
      if (Array.isArray(value)) {
        if (prototype !== Array.prototype) throw GIVE_UP
        const items: ReadonlyArray<unknown> = value
        const length = items.length
        if (length === 0) return "[]"
        // An index loop: a hole in a sparse array reads as undefined, which gives up.
        let text = `[${writeValue(items[0], depth + 1)}`
        for (let index = 1; index < length; index += 1) text += `,${writeValue(items[index], depth + 1)}`
        return `${text}]`
      }
      if (prototype !== Object.prototype && prototype !== null) throw GIVE_UP
      if (Object.getOwnPropertySymbols(value).length > 0) throw GIVE_UP
      const record = value as { readonly [key: string]: unknown }
      const keys = Object.keys(record)
      const length = keys.length
      if (length === 0) return "{}"
      sortKeys(keys)
      let text = "{"
      for (let index = 0; index < length; index += 1) {
        const key = keys[index]!
        text += `${index === 0 ? "" : ","}${quote(key)}:${writeValue(record[key], depth + 1)}`
      }
      return `${text}}`
    }
    default:
      throw GIVE_UP
  }
}

/** What `write` found besides the text. */
export interface Written {
  readonly text: string
  /** Every string written, keys included, is well-formed Unicode (no lone surrogate). */
  readonly isWellFormed: boolean
  /** Some number was -0, which the text writes as `0`: parsing the text back does not give the value. */
  readonly hasNegativeZero: boolean
  /** Every object and array was frozen (only when asked to track it). */
  readonly isFrozen: boolean
}

/**
 * The canonical JSON of `value`, or `undefined` when the fast writer gives up (the reference writer
 * then decides). `shouldTrackFrozen` also reports whether every container is frozen.
 */
export const write = (value: unknown, shouldTrackFrozen = false): Written | undefined => {
  seen.isWellFormed = true
  seen.hasNegativeZero = false
  seen.isFrozen = true
  seen.shouldTrackFrozen = shouldTrackFrozen
  try {
    const text = writeValue(value, 0)
    return { text, isWellFormed: seen.isWellFormed, isFrozen: seen.isFrozen, hasNegativeZero: seen.hasNegativeZero }
  } catch {
    // Whatever stopped the walk (a value to refuse, a deep value, a stack or string-length RangeError,
    // a throwing getter), the reference writer meets it again and answers exactly as it always has.
    return undefined
  }
}

/** The canonical JSON text of `value`, or `undefined` when the fast writer gives up. */
export const writeText = (value: unknown): string | undefined => {
  seen.shouldTrackFrozen = false
  try {
    return writeValue(value, 0)
  } catch {
    return undefined
  }
}

/** JSON size (nodes, depth) as `Canonical.measure` defines it, or `undefined` when it gives up. */
export const measure = (value: unknown): { readonly nodes: number; readonly depth: number } | undefined => {
  let nodes = 0
  const depthOf = (current: unknown, level: number): number => {
    nodes += 1
    switch (typeof current) {
      case "string":
      case "boolean":
        return 1
      case "number":
        if (Number.isFinite(current)) return 1
        throw GIVE_UP
      case "object": {
        if (current === null) return 1
        if (level >= MAX_FAST_DEPTH) throw GIVE_UP
        const prototype: unknown = Object.getPrototypeOf(current)
        let deepest = 0
        if (Array.isArray(current)) {
          if (prototype !== Array.prototype) throw GIVE_UP
          const items: ReadonlyArray<unknown> = current
          for (let index = 0; index < items.length; index += 1) {
            const depth = depthOf(items[index], level + 1)
            if (depth > deepest) deepest = depth
          }
          return 1 + deepest
        }
        if (prototype !== Object.prototype && prototype !== null) throw GIVE_UP
        if (Object.getOwnPropertySymbols(current).length > 0) throw GIVE_UP
        const record = current as { readonly [key: string]: unknown }
        for (const key of Object.keys(record)) {
          const depth = depthOf(record[key], level + 1)
          if (depth > deepest) deepest = depth
        }
        return 1 + deepest
      }
      default:
        throw GIVE_UP
    }
  }
  try {
    const depth = depthOf(value, 0)
    return { nodes, depth }
  } catch {
    return undefined
  }
}

/**
 * The canonical JSON of sealed values, by identity. Only values this package froze itself are here
 * (parsed back from their own canonical JSON, so plain data with no accessor), and a frozen value
 * cannot change: the text stays right for as long as the value lives.
 */
const sealedTexts = new WeakMap<object, string>()

/** Records `text` as the canonical JSON of `value`, which the caller froze after parsing it from `text`. */
export const remember = (value: object, text: string): void => {
  sealedTexts.set(value, text)
}

/** The canonical JSON of a sealed value, or `undefined` for any other value. */
export const sealedText = (value: unknown): string | undefined =>
  typeof value === "object" && value !== null ? sealedTexts.get(value) : undefined

/** Freezes every object and array of a plain JSON value (as `JSON.parse` returns it) and returns it. */
export const freezeDeep = <A>(value: A): A => {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    const record = value as { readonly [key: string]: unknown }
    for (const key of Object.keys(record)) freezeDeep(record[key])
    Object.freeze(value)
  }
  return value
}
