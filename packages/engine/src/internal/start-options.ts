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
    return read as unknown as RunOptions
  } catch (error) {
    return `start options could not be read: ${describeThrown(error)}`
  }
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
    const field = (value as Record<string, unknown>)[key]
    Object.defineProperty(copy, key, { value: field, enumerable: Object.prototype.propertyIsEnumerable.call(value, key), writable: true, configurable: true })
  }
  return copy
}
