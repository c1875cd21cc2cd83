/**
 * Canonical JSON for the request bodies (docs/model.md §4.1): the very bytes of `@maka/facts`
 * `Canonical.stringify` (keys sorted by UTF-16 code units, no whitespace, scalars as `JSON.stringify`
 * writes them), without its per-node bookkeeping, since the adapter only writes what it built from
 * a decoded request: a copy with sorted keys for one native `JSON.stringify`, or (an object with
 * index-like keys, which the engine orders first) one pass of its own. A value that is not plain
 * JSON is handed to `Canonical.stringify`, which refuses it exactly as before.
 */
import { Canonical } from "@maka/facts"

const NOT_PLAIN = Symbol("not plain JSON")

const write = (value: unknown, out: Array<string>, depth: number): typeof NOT_PLAIN | undefined => {
  switch (typeof value) {
    case "string":
    case "boolean":
      out.push(JSON.stringify(value))
      return undefined
    case "number":
      if (!Number.isFinite(value)) return NOT_PLAIN
      out.push(JSON.stringify(value))
      return undefined
    case "object":
      break
    default:
      return NOT_PLAIN
  }
  if (value === null) {
    out.push("null")
    return undefined
  }
  // Deep enough to be a cycle, or to overflow the stack: `Canonical` decides.
  if (depth > 512) return NOT_PLAIN
  const prototype: unknown = Object.getPrototypeOf(value)
  if (Array.isArray(value)) {
    if (prototype !== Array.prototype) return NOT_PLAIN
    const items: ReadonlyArray<unknown> = value
    out.push("[")
    for (let index = 0; index < items.length; index++) {
      if (index > 0) out.push(",")
      if (write(items[index], out, depth + 1) === NOT_PLAIN) return NOT_PLAIN
    }
    out.push("]")
    return undefined
  }
  if (prototype !== Object.prototype && prototype !== null) return NOT_PLAIN
  if (Object.getOwnPropertySymbols(value).length > 0) return NOT_PLAIN
  const keys = Object.keys(value).sort()
  out.push("{")
  for (let index = 0; index < keys.length; index++) {
    const key = keys[index]!
    out.push(index > 0 ? "," : "", JSON.stringify(key), ":")
    if (write(Reflect.get(value, key), out, depth + 1) === NOT_PLAIN) return NOT_PLAIN
  }
  out.push("}")
  return undefined
}

// A key the engine orders numerically, ahead of the others, whatever the order it was added in.
const INDEX_KEY = /^(?:0|[1-9]\d{0,9})$/

/**
 * A copy of a plain JSON value with every object's keys added in sorted order (null prototypes, so
 * `__proto__` stays a plain key), for one native `JSON.stringify`; `NOT_PLAIN` for anything else,
 * and for an object with an index-like key, whose place the engine would not keep.
 */
const sortedCopy = (value: unknown, depth: number): unknown => {
  switch (typeof value) {
    case "string":
    case "boolean":
      return value
    case "number":
      return Number.isFinite(value) ? value : NOT_PLAIN
    case "object":
      break
    default:
      return NOT_PLAIN
  }
  if (value === null) return null
  if (depth > 512) return NOT_PLAIN
  const prototype: unknown = Object.getPrototypeOf(value)
  if (Array.isArray(value)) {
    if (prototype !== Array.prototype) return NOT_PLAIN
    const items: ReadonlyArray<unknown> = value
    const copy: Array<unknown> = new Array(items.length)
    for (let index = 0; index < items.length; index++) {
      const item = sortedCopy(items[index], depth + 1)
      if (item === NOT_PLAIN) return NOT_PLAIN
      copy[index] = item
    }
    return copy
  }
  if (prototype !== Object.prototype && prototype !== null) return NOT_PLAIN
  if (Object.getOwnPropertySymbols(value).length > 0) return NOT_PLAIN
  const keys = Object.keys(value).sort()
  const copy: Record<string, unknown> = Object.create(null)
  for (const key of keys) {
    if (INDEX_KEY.test(key)) return NOT_PLAIN
    const item = sortedCopy(Reflect.get(value, key), depth + 1)
    if (item === NOT_PLAIN) return NOT_PLAIN
    copy[key] = item
  }
  return copy
}

/** `Canonical.stringify(value)`, faster on plain JSON; throws `CanonicalJsonError` like it otherwise. */
export const canonicalJson = (value: unknown): string => {
  const copy = sortedCopy(value, 0)
  if (copy !== NOT_PLAIN) return JSON.stringify(copy)
  const out: Array<string> = []
  return write(value, out, 0) === NOT_PLAIN ? Canonical.stringify(value) : out.join("")
}
