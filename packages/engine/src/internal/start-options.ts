/**
 * The caller's `start` options as the facade and `Agent` read them: once, into a plain copy
 * (docs/engine.md §5.2). A host without types may pass an object whose getters or proxy traps throw,
 * or return something new at each read; the copy reads the same every time it is read again.
 */
import type { RunOptions } from "../Agent.ts"

export const describeThrown = (error: unknown): string => (error instanceof Error ? error.message : String(error))

/**
 * The caller's options read once (their own enumerable keys, each getter run once), or why they
 * cannot be: a getter or a proxy trap that throws is a refusal of the input, never a defect.
 */
export const readOptions = (options: unknown): RunOptions | string => {
  if (typeof options !== "object" || options === null || Array.isArray(options)) return "start options must be an object"
  try {
    const read: Record<string, unknown> = { ...options }
    // The records read later, deep in admission, read once here too: the provider and its headers,
    // the context, the connection, a message object.
    const provider = recordOf(read["provider"])
    if (provider !== undefined) {
      const headers = recordOf(provider["headers"])
      // Set on the copy, not spread into a new one: a field kept out of sight stays there.
      if (headers !== undefined) provider["headers"] = headers
      read["provider"] = provider
    }
    for (const key of ["context", "connection", "message"]) {
      const record = recordOf(read[key])
      if (record !== undefined) read[key] = record
    }
    // Every check and the run then see one value: a getter that answered differently later could
    // pass the checks with one and be sent, or frozen into a pause, with another.
    if (read["providerOptions"] !== undefined) read["providerOptions"] = plainCopy(read["providerOptions"], new Map(), 0)
    return read as unknown as RunOptions
  } catch (error) {
    return `start options could not be read: ${describeThrown(error)}`
  }
}

/** How deep `plainCopy` copies: a deeper value is left as given, for the checks to refuse as too deep. */
const COPY_DEPTH = 64

/**
 * Plain objects and arrays copied, each getter run once, each object once (one met again, as a value
 * several keys share, is the same copy; one met inside itself is left as given, a cycle the checks
 * refuse); anything else, and what lies past `COPY_DEPTH`, as given. Linear in the objects given.
 */
const plainCopy = (value: unknown, copies: Map<object, unknown>, depth: number): unknown => {
  if (depth >= COPY_DEPTH || typeof value !== "object" || value === null) return value
  if (copies.has(value)) return copies.get(value)
  const isArray = Array.isArray(value)
  // An array with a property besides its items, and an object that is no plain one, are the checks'.
  if (isArray ? Object.keys(value).length !== value.length : Object.getPrototypeOf(value) !== Object.prototype) return value
  // Met again inside itself: left as given.
  copies.set(value, value)
  const copy = isArray
    ? (value as ReadonlyArray<unknown>).map((item) => plainCopy(item, copies, depth + 1))
    : Object.fromEntries(Object.entries(value).map(([key, child]) => [key, plainCopy(child, copies, depth + 1)]))
  copies.set(value, copy)
  return copy
}

/**
 * A plain object's own fields copied, each getter run once, each keeping whether it is enumerable
 * (a key kept out of sight, `apiKey` defined not enumerable, is still the caller's key, and still no
 * key a check of the enumerable ones names); anything else undefined.
 */
const recordOf = (value: unknown): Record<string, unknown> | undefined => {
  if (typeof value !== "object" || value === null || Array.isArray(value) || Object.getPrototypeOf(value) !== Object.prototype) return undefined
  const copy: Record<string, unknown> = {}
  for (const key of Object.getOwnPropertyNames(value)) {
    const enumerable = Object.prototype.propertyIsEnumerable.call(value, key)
    // A field out of sight is kept when it holds a value; its getter, if it has one, is not run.
    const descriptor = enumerable ? undefined : Object.getOwnPropertyDescriptor(value, key)
    if (descriptor !== undefined && !("value" in descriptor)) continue
    const field = descriptor === undefined ? (value as Record<string, unknown>)[key] : descriptor.value
    Object.defineProperty(copy, key, { value: field, enumerable, writable: true, configurable: true })
  }
  return copy
}
