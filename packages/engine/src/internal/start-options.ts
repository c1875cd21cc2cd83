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
    return { ...options } as unknown as RunOptions
  } catch (error) {
    return `start options could not be read: ${describeThrown(error)}`
  }
}
