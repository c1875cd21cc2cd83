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
      read["provider"] = headers === undefined ? provider : { ...provider, headers }
    }
    for (const key of ["context", "connection", "message"]) {
      const record = recordOf(read[key])
      if (record !== undefined) read[key] = record
    }
    if (read["providerOptions"] !== undefined) read["providerOptions"] = plainCopy(read["providerOptions"], 0)
    return read as unknown as RunOptions
  } catch (error) {
    return `start options could not be read: ${describeThrown(error)}`
  }
}

/** How deep `plainCopy` copies: a deeper value is left as given, for the checks to refuse as too deep. */
const COPY_DEPTH = 64

/** Plain objects and arrays copied through `COPY_DEPTH` levels (each getter run once); anything else as given. */
const plainCopy = (value: unknown, depth: number): unknown => {
  if (depth >= COPY_DEPTH || typeof value !== "object" || value === null) return value
  // An array with a property besides its items is left for the checks to refuse (a copy would lose it).
  if (Array.isArray(value)) return Object.keys(value).length === value.length ? value.map((item) => plainCopy(item, depth + 1)) : value
  if (Object.getPrototypeOf(value) !== Object.prototype) return value
  return Object.fromEntries(Object.entries(value).map(([key, child]) => [key, plainCopy(child, depth + 1)]))
}

/** A plain object's own enumerable fields, copied (each getter run once); anything else undefined. */
const recordOf = (value: unknown): Record<string, unknown> | undefined =>
  typeof value === "object" && value !== null && !Array.isArray(value) && Object.getPrototypeOf(value) === Object.prototype
    ? { ...value }
    : undefined
