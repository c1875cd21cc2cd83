/**
 * Canonical JSON: the one serializer behind `event_json`, every digest and every byte comparison
 * (docs/log-format.md §2.1). Keys sorted by UTF-16 code units, no whitespace, strings and numbers exactly as
 * `JSON.stringify` writes them; anything that is not plain JSON is refused, never coerced.
 * Also owns JSON size measures (nodes, depth) and the UTF-8 / UTF-16 length and truncation helpers.
 */
import { Result } from "effect"
import * as Reference from "./internal/canonical-reference.ts"
import { CanonicalJsonError } from "./internal/canonical-reference.ts"
import * as Writer from "./internal/canonical-writer.ts"

/** A plain JSON value, as canonical JSON accepts it. */
export type JsonValue =
  | null
  | boolean
  | number
  | string
  | ReadonlyArray<JsonValue>
  | { readonly [key: string]: JsonValue }

export { CanonicalJsonError } from "./internal/canonical-reference.ts"

/**
 * Canonical JSON text of `value`; throws `CanonicalJsonError` for anything that is not plain JSON.
 * The single-pass writer answers; whatever it does not accept goes to the reference writer, which
 * refuses with the path (or writes a value nested deeper than the fast writer goes).
 */
export const stringify = (value: unknown): string =>
  Writer.sealedText(value) ?? Writer.writeText(value) ?? Reference.stringify(value)

/**
 * A deep-frozen copy of a plain JSON value, parsed back from its canonical JSON, whose canonical JSON
 * is kept: `stringify` and the digests (`Digest.modelInput` per prompt message) answer for it at
 * once instead of walking it again. For values written once and read many times, such as the
 * messages of a prompt that grows by a few messages a step. Throws like `stringify`; the copy
 * holds `0` where the value held `-0`, as its canonical JSON does.
 */
export const seal = <A>(value: A): A => {
  const text = stringify(value)
  if (typeof value !== "object" || value === null) return value
  if (Writer.sealedText(value) !== undefined) return value
  const copy: unknown = Writer.freezeDeep(JSON.parse(text))
  Writer.remember(copy as object, text)
  // The copy is the same JSON value as `value`, parsed back from its canonical text.
  return copy as A
}

/** Whether `value` is a sealed value (`seal`): deep-frozen, so whatever was checked of it still holds. */
export const isSealed = (value: unknown): boolean =>
  typeof value === "object" && value !== null && Writer.sealedText(value) !== undefined

/** The non-throwing form of `stringify`. */
export const tryStringify = (value: unknown): Result.Result<string, CanonicalJsonError> => {
  try {
    return Result.succeed(stringify(value))
  } catch (error) {
    if (error instanceof CanonicalJsonError) return Result.fail(error)
    throw error
  }
}

/** Canonical equality: both values serialize to the same canonical JSON (throws like `stringify`). */
export const equal = (left: unknown, right: unknown): boolean => stringify(left) === stringify(right)

/**
 * JSON size of `value`: `nodes` counts every value, containers included; `depth` is 1 for a scalar
 * or an empty container, and 1 + the deepest child for a non-empty container (so `{"a":[1]}` has
 * 3 nodes and depth 3). Refuses what `stringify` refuses, with the same error.
 */
export const measure = (value: unknown): { readonly nodes: number; readonly depth: number } =>
  Writer.measure(value) ?? Reference.measure(value)

/** UTF-8 byte length (a lone surrogate counts as the 3 bytes of U+FFFD, as encoders write it). */
export const utf8Length = (text: string): number => Buffer.byteLength(text, "utf8")

/** UTF-16 length: JavaScript `string.length`. */
export const utf16Length = (text: string): number => text.length

const requireLimit = (name: string, limit: number): void => {
  if (!Number.isSafeInteger(limit) || limit < 0) {
    throw new RangeError(`${name} must be a non-negative safe integer, got ${limit}`)
  }
}

const isHighSurrogate = (code: number): boolean => code >= 0xd800 && code <= 0xdbff
const isLowSurrogate = (code: number): boolean => code >= 0xdc00 && code <= 0xdfff

/** `text` cut to at most `maxUnits` UTF-16 units, never splitting a surrogate pair. */
export const truncateUtf16 = (text: string, maxUnits: number): string => {
  requireLimit("maxUnits", maxUnits)
  if (text.length <= maxUnits) return text
  const splitsPair =
    maxUnits > 0 && isHighSurrogate(text.charCodeAt(maxUnits - 1)) && isLowSurrogate(text.charCodeAt(maxUnits))
  return text.slice(0, splitsPair ? maxUnits - 1 : maxUnits)
}

/** `text` cut to at most `maxBytes` UTF-8 bytes at a character (code point) boundary. */
export const truncateUtf8 = (text: string, maxBytes: number): string => {
  requireLimit("maxBytes", maxBytes)
  if (text.length <= maxBytes / 3 || utf8Length(text) <= maxBytes) return text
  let bytes = 0
  let end = 0
  for (const character of text) {
    const code = character.codePointAt(0) ?? 0
    const size = code < 0x80 ? 1 : code < 0x800 ? 2 : code < 0x10000 ? 3 : 4
    if (bytes + size > maxBytes) break
    bytes += size
    end += character.length
  }
  return text.slice(0, end)
}
