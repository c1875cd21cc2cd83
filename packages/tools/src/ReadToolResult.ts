/**
 * `read_tool_result` (docs/engine.md §5.11): the tool the model pages through an archived tool result
 * with. It takes the placeholder's `resourceRef` and an offset and returns the `ReadPage` there, under
 * the same page rule as the placeholder's first page. It reads through a `Reader` the host builds (the
 * engine reads its log, never the workspace), so this package stays free of any store.
 */
import { Archive, Canonical, Digest, EventWrite, Identity, type ToolCall } from "@maka/facts"
import { Effect, Schema } from "effect"
import * as Tool from "./Tool.ts"
import * as ToolCatalog from "./ToolCatalog.ts"

export const NAME = "read_tool_result"

/** The model-facing description; part of the catalog digest, so it changes only deliberately. */
export const DESCRIPTION =
  "Read a page of an archived tool result (kind maka.archived_tool_result). Pass its resourceRef and offset 0 or the previous page's next; returns {offset, text, totalChars, next?}, where next is absent on the last page."

/** A settled result as the log holds it: the tool's name and its raw output, integrity checked. */
export interface StoredResult {
  readonly toolName: string
  readonly raw: ToolCall.ToolOutput
}

/**
 * Reads the settled tool result with this event id in the reader's session: `undefined` when the
 * session holds no successful settlement with that id; a `ToolFailure` when the read itself failed.
 */
export type Reader = (eventId: string) => Effect.Effect<StoredResult | undefined, Tool.ToolFailure>

export const Input = Schema.Struct({
  resourceRef: Schema.String.annotate({
    description: `The resourceRef of the archived result (${Archive.RESOURCE_REF_PREFIX}...)`,
  }),
  offset: Identity.NonNegativeInt.annotate({
    description: "UTF-16 offset in the result: 0 for the first page, then the previous page's next",
  }),
})
export type Input = typeof Input.Type

const isEventId = Schema.is(Identity.EventId)

/** The event id a `resourceRef` names, or `undefined` when it is not an archive address. */
export const eventIdOf = (resourceRef: string): string | undefined => {
  if (!resourceRef.startsWith(Archive.RESOURCE_REF_PREFIX)) return undefined
  const eventId = resourceRef.slice(Archive.RESOURCE_REF_PREFIX.length)
  return isEventId(eventId) ? eventId : undefined
}

/** The archive identity of a stored result: the same body, size and name the placeholder was built from. */
const identityOf = (eventId: string, stored: StoredResult): { readonly identity: Archive.ArchiveIdentity; readonly body: string } => {
  const source: Archive.ArchiveSource = { kind: "projection", projection: EventWrite.freezeProjection(stored.raw) }
  const body = Archive.body(source)
  return {
    body,
    identity: {
      runtimeEventId: eventId,
      // A page depends on the address, the name and the size only (`Archive.modelValue`); the call id
      // is not part of what the model sees, and the log read does not return it.
      toolCallId: eventId,
      toolName: stored.toolName,
      sourceProjectionDigest: Archive.sourceProjectionDigest(source),
      bodySha256: Digest.sha256Hex(body),
      originalBytes: Canonical.utf8Length(body),
    },
  }
}

const isHighSurrogate = (code: number): boolean => code >= 0xd800 && code <= 0xdbff
const isLowSurrogate = (code: number): boolean => code >= 0xdc00 && code <= 0xdfff

/** The page of `input` from a stored result, or the readable reason there is none. */
export const pageOf = (eventId: string, stored: StoredResult, offset: number): Archive.ReadPage | string => {
  const { identity, body } = identityOf(eventId, stored)
  if (offset > body.length) {
    return `offset ${offset} is past the end of the result (${body.length} characters); read from 0 or a page's next`
  }
  if (offset > 0 && isHighSurrogate(body.charCodeAt(offset - 1)) && isLowSurrogate(body.charCodeAt(offset))) {
    return `offset ${offset} splits a character; read from 0 or a page's next`
  }
  return Archive.pageAt(identity, body, offset) ?? `offset ${offset} is not a position of the result`
}

/** The tool over `read`; read-only, so it may share a step with other calls. */
export const make = (read: Reader): Tool.Tool =>
  Tool.make({
    name: NAME,
    description: DESCRIPTION,
    input: Input,
    semantics: "parallel",
    execute: (input) =>
      Effect.gen(function* () {
        const eventId = eventIdOf(input.resourceRef)
        if (eventId === undefined) {
          return yield* Tool.fail(
            `resourceRef must be the ${Archive.RESOURCE_REF_PREFIX}<id> address of an archived result, got ${JSON.stringify(input.resourceRef.slice(0, 200))}`,
          )
        }
        const stored = yield* read(eventId)
        if (stored === undefined) {
          return yield* Tool.fail(`no settled tool result at ${input.resourceRef} in this session`)
        }
        const page = pageOf(eventId, stored, input.offset)
        return typeof page === "string" ? yield* Tool.fail(page) : Tool.json(page)
      }),
  })

/**
 * The catalog a run offers for the host's `tools`: the same tools plus `read_tool_result` over `read`,
 * or the empty catalog as it is when the host offers no tool at all. Throws like `ToolCatalog.make`
 * when the host's catalog already holds a tool named `read_tool_result`.
 */
export const offer = (tools: ToolCatalog.ToolCatalog, read: Reader): ToolCatalog.ToolCatalog =>
  tools.tools.length === 0 ? tools : ToolCatalog.extend(tools, [make(read)])
