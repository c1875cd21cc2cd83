/**
 * Small readers for provider JSON: narrow `unknown` without casts. A field of the wrong type is
 * reported as `INVALID`, so the normalisers can refuse a chunk shape they do not understand.
 */

export type JsonRecord = Readonly<Record<string, unknown>>

export const INVALID: unique symbol = Symbol("invalid")
export type Invalid = typeof INVALID

export const isRecord = (value: unknown): value is JsonRecord =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** A string field: the string, undefined when absent or null, INVALID otherwise. */
export const optionalString = (object: JsonRecord, key: string): string | undefined | Invalid => {
  const value = object[key]
  return value === undefined || value === null ? undefined : typeof value === "string" ? value : INVALID
}

/** A record field: the record, undefined when absent or null, INVALID otherwise. */
export const optionalRecord = (object: JsonRecord, key: string): JsonRecord | undefined | Invalid => {
  const value = object[key]
  return value === undefined || value === null ? undefined : isRecord(value) ? value : INVALID
}

/** A token count: a non-negative safe integer, undefined when absent or null, INVALID otherwise. */
export const optionalCount = (object: JsonRecord, key: string): number | undefined | Invalid => {
  const value = object[key]
  if (value === undefined || value === null) return undefined
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0 ? value : INVALID
}

export const parseJson = (text: string): unknown | Invalid => {
  try {
    return JSON.parse(text)
  } catch {
    return INVALID
  }
}
