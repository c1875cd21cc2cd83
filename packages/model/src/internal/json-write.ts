/**
 * Canonical JSON for the request bodies (docs/model.md §4.1): the very bytes of `@maka/facts`
 * `Canonical.stringify` (keys sorted by UTF-16 code units, no whitespace, scalars as `JSON.stringify`
 * writes them), written in one pass without its per-node bookkeeping, since the adapter only writes
 * what it built from a decoded request. A value that is not plain JSON is handed to
 * `Canonical.stringify`, which refuses it exactly as before.
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

/** `Canonical.stringify(value)`, faster on plain JSON; throws `CanonicalJsonError` like it otherwise. */
export const canonicalJson = (value: unknown): string => {
  const out: Array<string> = []
  return write(value, out, 0) === NOT_PLAIN ? Canonical.stringify(value) : out.join("")
}
