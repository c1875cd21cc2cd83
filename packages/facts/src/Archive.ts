/**
 * Archive (prune) records (docs/log-format.md §2.9): the identity of an archived tool result, its pages,
 * the placeholder the model sees instead of the result, and `prepare`, the one pure rule that decides
 * whether and how a settled result is archived.
 */
import { Schema } from "effect"
import * as Canonical from "./Canonical.ts"
import * as Digest from "./Digest.ts"
import { EventId, Id, IntBetween, NonNegativeInt, Sha256Hex, Digest as DigestSchema } from "./Identity.ts"
import { MAX_ARCHIVE_BYTES, MAX_PAGE_CHARS } from "./Limits.ts"
import { ARCHIVE_READ_INSTRUCTIONS, PROJECTION_FAILURE_TEXT } from "./Prompts.ts"
import type { DurableToolProjection } from "./ToolCall.ts"

export const ARCHIVED_RESULT_KIND = "maka.archived_tool_result"
export const ARCHIVE_REASON = "tool_result_pruned"
export const RESOURCE_REF_PREFIX = "maka://tool-result/"

export const ArchiveIdentity = Schema.Struct({
  runtimeEventId: EventId,
  toolCallId: Id,
  toolName: Schema.String,
  sourceProjectionDigest: DigestSchema,
  bodySha256: Sha256Hex,
  originalBytes: IntBetween(0, MAX_ARCHIVE_BYTES),
}).annotate({ identifier: "ArchiveIdentity" })
export type ArchiveIdentity = typeof ArchiveIdentity.Type

export const ReadPage = Schema.Struct({
  offset: NonNegativeInt,
  text: Schema.String,
  totalChars: NonNegativeInt,
  next: Schema.optionalKey(NonNegativeInt),
}).annotate({ identifier: "ReadPage" })
export type ReadPage = typeof ReadPage.Type

export const ArchivedPlaceholder = Schema.Struct({
  identity: ArchiveIdentity,
  originalEstimatedTokens: NonNegativeInt,
  reason: Schema.Literal(ARCHIVE_REASON),
  page: ReadPage,
}).annotate({ identifier: "ArchivedPlaceholder" })
export type ArchivedPlaceholder = typeof ArchivedPlaceholder.Type

/** What an archive replaces: a settled projection, or the message of a failed outcome. */
export type ArchiveSource =
  | { readonly kind: "projection"; readonly projection: DurableToolProjection }
  | { readonly kind: "failed"; readonly message: string }

/** The archive body: canonical JSON of the projection's value (text and failures as JSON strings). */
export const body = (source: ArchiveSource): string => {
  if (source.kind === "failed") return Canonical.stringify(source.message)
  const projection = source.projection
  switch (projection.kind) {
    case "text":
      return Canonical.stringify(projection.text)
    case "json":
      return Canonical.stringify(projection.value)
    case "failure":
      return Canonical.stringify(PROJECTION_FAILURE_TEXT)
  }
}

/** The digest an archive identity binds: the projection, or the failure message as a text projection. */
export const sourceProjectionDigest = (source: ArchiveSource): string =>
  Digest.toolProjection(source.kind === "failed" ? { kind: "text", text: source.message } : source.projection)

export const resourceRef = (runtimeEventId: string): string => RESOURCE_REF_PREFIX + runtimeEventId

/** Whether a projection is already an archive placeholder's model value. */
export const isArchivedValue = (projection: DurableToolProjection): boolean =>
  projection.kind === "json" &&
  typeof projection.value === "object" &&
  projection.value !== null &&
  !Array.isArray(projection.value) &&
  "kind" in projection.value &&
  projection.value["kind"] === ARCHIVED_RESULT_KIND

/** The JSON value the model sees in place of an archived result. */
export const modelValue = (identity: ArchiveIdentity, page: ReadPage) => ({
  kind: ARCHIVED_RESULT_KIND,
  resourceRef: resourceRef(identity.runtimeEventId),
  toolName: identity.toolName,
  originalBytes: identity.originalBytes,
  reason: ARCHIVE_REASON,
  readInstructions: ARCHIVE_READ_INSTRUCTIONS,
  page,
})

const isHighSurrogate = (code: number): boolean => code >= 0xd800 && code <= 0xdbff

/** Extends an end index by one when it would split a surrogate pair. */
const pairEnd = (text: string, end: number): number =>
  end < text.length && isHighSurrogate(text.charCodeAt(end - 1)) ? end + 1 : end

const makePage = (text: string, offset: number, end: number): ReadPage =>
  end < text.length
    ? { offset, text: text.slice(offset, end), totalChars: text.length, next: end }
    : { offset, text: text.slice(offset, end), totalChars: text.length }

const fits = (identity: ArchiveIdentity, page: ReadPage): boolean =>
  Canonical.stringify(modelValue(identity, page)).length <= MAX_PAGE_CHARS

/**
 * The page at `offset`: the longest slice of the body from `offset` for which the whole model value
 * stays within 7,500 UTF-16 units, never splitting a surrogate pair. `undefined` when `offset` is not
 * a position of the body.
 */
export const pageAt = (identity: ArchiveIdentity, bodyText: string, offset: number): ReadPage | undefined => {
  if (!Number.isSafeInteger(offset) || offset < 0 || offset > bodyText.length) return undefined
  let best = offset
  let low = offset + 1
  let high = bodyText.length
  while (low <= high) {
    const middle = Math.floor((low + high) / 2)
    const end = pairEnd(bodyText, middle)
    if (fits(identity, makePage(bodyText, offset, end))) {
      best = end
      low = end + 1
    } else {
      high = middle - 1
    }
  }
  return makePage(bodyText, offset, best)
}

/**
 * Prepares the archive of a settled result. Returns `undefined` when the projection is already an
 * archive placeholder, when the body is at most 7,500 UTF-16 units, or when it exceeds 4 MiB.
 */
export const prepare = (
  eventId: string,
  toolCallId: string,
  toolName: string,
  source: ArchiveSource,
): ArchivedPlaceholder | undefined => {
  if (source.kind === "projection" && isArchivedValue(source.projection)) return undefined
  const bodyText = body(source)
  if (bodyText.length <= MAX_PAGE_CHARS) return undefined
  const originalBytes = Canonical.utf8Length(bodyText)
  if (originalBytes > MAX_ARCHIVE_BYTES) return undefined
  const identity: ArchiveIdentity = {
    runtimeEventId: eventId,
    toolCallId,
    toolName,
    sourceProjectionDigest: sourceProjectionDigest(source),
    bodySha256: Digest.sha256Hex(bodyText),
    originalBytes,
  }
  const page = pageAt(identity, bodyText, 0)
  if (page === undefined) return undefined
  return {
    identity,
    originalEstimatedTokens: Math.ceil(bodyText.length / 4),
    reason: ARCHIVE_REASON,
    page,
  }
}
