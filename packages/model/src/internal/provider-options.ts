/**
 * Deep merge of `providerOptions` objects (docs/log-format.md §2.7): nested objects merge key by key, any
 * other value from the right replaces the left, so a signature seen late is never lost.
 */
import type { Identity } from "@maka/facts"

type JsonObject = Identity.JsonObject
type Json = Identity.Json

export const isObject = (value: Json | undefined): value is JsonObject =>
  typeof value === "object" && value !== null && !Array.isArray(value)

export const deepMerge = (left: JsonObject | undefined, right: JsonObject | undefined): JsonObject | undefined => {
  if (right === undefined) return left
  if (left === undefined) return right
  const merged: Record<string, Json> = { ...left }
  for (const [key, value] of Object.entries(right)) {
    const current = merged[key]
    merged[key] = isObject(current) && isObject(value) ? (deepMerge(current, value) ?? {}) : value
  }
  return merged
}

export const isNonEmpty = (options: JsonObject | undefined): options is JsonObject =>
  options !== undefined && Object.keys(options).length > 0
