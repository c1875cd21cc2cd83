/**
 * `EventWrite`, one checked submission to the log (docs/log-format.md §2.13). `plain` validates an event;
 * `toolSuccess` is the only way to build a successful `tool_settled`: it encodes the raw payload,
 * binds it by length and digest, and freezes the model-visible projection within its limits. Each
 * event is written to canonical JSON once; the store reuses those bytes for the row and its digests.
 */
import { Result } from "effect"
import * as Canonical from "./Canonical.ts"
import { decodeEvent, encodeEventChecked, hasRuntimeEventShape } from "./Codec.ts"
import * as Digest from "./Digest.ts"
import type { RuntimeEvent } from "./Event.ts"
import { factError, type FactError } from "./FactError.ts"
import type { Invocation } from "./Identity.ts"
import {
  MAX_EVENT_BYTES,
  MAX_PROJECTION_BYTES,
  MAX_PROJECTION_DEPTH,
  MAX_PROJECTION_NODES,
  MAX_RAW_TOOL_RESULT_BYTES,
  MAX_RAW_TOOL_RESULT_DEPTH,
} from "./Limits.ts"
import type { DurableToolProjection, RawToolResultRef, ToolOutput } from "./ToolCall.ts"
import { fact as factRules, storedIdsWithoutNul, wellFormedEvent } from "./Validation.ts"
import * as Writer from "./internal/canonical-writer.ts"

export interface EventWrite {
  readonly event: RuntimeEvent
  /** The canonical JSON of the tool output, stored apart; only on a successful `tool_settled`. */
  readonly rawPayload?: string
  /** The canonical JSON of `event`, as it will be stored. */
  readonly json: string
}

/**
 * The writes `plain` and `toolSuccess` built. Each is frozen, and so is its event (the decoded copy,
 * which shares no object with the caller's): nothing in it can change after the checks, so the store
 * need not check it again (docs/log-format.md §2.13). A write built any other way is not here.
 */
const constructed = new WeakSet<EventWrite>()

/**
 * Checks the event closed (schemas, then the fact's rules), checks its text (well-formed, ids
 * without NUL), and encodes it within 1 MiB. Everything after the shape check reads a fresh copy
 * equal to the input (the parse of its canonical text, or the decoded event; no fact schema
 * transforms), so the caller cannot change what was checked. The canonical writer notes whether every
 * string it wrote is well-formed, so on the usual path the text rules reduce to the NUL check of ids;
 * otherwise (a lone surrogate, or a value the fast writer leaves to the reference) the rules run in
 * full, in their order, before the encoding.
 */
const encode = (event: RuntimeEvent): Result.Result<{ readonly decoded: RuntimeEvent; readonly json: string }, FactError> =>
  encodeByShape(event) ?? encodeByDecode(event)

/** The checks after the fact's rules, on well-formed text: the NUL check of ids, then the size. */
const finish = (decoded: RuntimeEvent, text: string): Result.Result<{ readonly decoded: RuntimeEvent; readonly json: string }, FactError> =>
  Result.flatMap(storedIdsWithoutNul(decoded.fact, decoded.invocation), () =>
    text.length <= MAX_EVENT_BYTES / 3 || Canonical.utf8Length(text) <= MAX_EVENT_BYTES
      ? Result.succeed({ decoded, json: text })
      : Result.fail(factError("event_too_large", `event exceeds ${MAX_EVENT_BYTES} bytes`)),
  )

/**
 * The usual path: the fast writer writes the event, `JSON.parse` of that text is the fresh copy, and
 * the copy's shape is checked in place (`Codec.hasRuntimeEventShape`: only what the closed decode
 * accepts unchanged). `undefined` (nothing decided) when the writer gives up, a string is not
 * well-formed, a number is -0 (the text's parse would not give it back) or the shape does not check:
 * the closed decode then gives the verdict and its message. Once the shape checks, the rules run on
 * the copy in the closed decode's order, so a refusal is the same either way.
 */
const encodeByShape = (event: RuntimeEvent): Result.Result<{ readonly decoded: RuntimeEvent; readonly json: string }, FactError> | undefined => {
  const written = Writer.write(event)
  // A -0 would come back from the text as 0: the closed decode keeps the value as given.
  if (written === undefined || !written.isWellFormed || written.hasNegativeZero) return undefined
  const copy: unknown = JSON.parse(written.text)
  if (!hasRuntimeEventShape(copy)) return undefined
  return Result.flatMap(factRules(copy.fact, copy.invocation), () => finish(copy, written.text))
}

const encodeByDecode = (event: RuntimeEvent): Result.Result<{ readonly decoded: RuntimeEvent; readonly json: string }, FactError> =>
  Result.flatMap(decodeEvent(event), (decoded) => {
    const written = Writer.write(decoded)
    if (written === undefined || !written.isWellFormed) {
      return Result.flatMap(wellFormedEvent(decoded), () => Result.map(encodeEventChecked(decoded), (json) => ({ decoded, json })))
    }
    return finish(decoded, written.text)
  })

const checked = (event: RuntimeEvent, rawPayload?: string): Result.Result<EventWrite, FactError> =>
  Result.map(encode(event), ({ decoded, json }): EventWrite => {
    // Frozen, the event the log validates cannot drift from the bytes it stores. Its text is not kept
    // in the sealed-value table: a weak entry per event costs the collector more than it saves.
    const frozen = Writer.freezeDeep(decoded)
    const write: EventWrite = Object.freeze(rawPayload === undefined ? { event: frozen, json } : { event: frozen, json, rawPayload })
    constructed.add(write)
    return write
  })

/**
 * Re-checks a write at the store: its event passes every rule `plain` checks and `json` is exactly
 * the canonical JSON of `event`, so a hand-built write cannot store one event while the log
 * validates another. Gives the write to store: a write `plain` or `toolSuccess` built as it is (it
 * and its event are frozen since those checks); any other, a frozen write of the copy the checks read
 * (each field of the given write read once), so a getter or a proxy that answers differently on a
 * later read changes nothing of what is validated and stored. The raw payload of a success is
 * checked by the store against its reference.
 */
export const verify = (write: EventWrite): Result.Result<EventWrite, FactError> => {
  if (constructed.has(write)) return Result.succeed(write)
  const given = Result.try({
    try: () => ({ event: write.event, json: write.json, rawPayload: write.rawPayload }),
    catch: () => factError("write_not_canonical", "the write could not be read"),
  })
  if (Result.isFailure(given)) return Result.fail(given.failure)
  const { event, json: givenJson, rawPayload } = given.success
  return Result.flatMap(encode(event), ({ decoded, json }) => {
    if (json !== givenJson) {
      return Result.fail(factError("write_not_canonical", "the write's json is not the canonical JSON of its event"))
    }
    if (rawPayload !== undefined && typeof rawPayload !== "string") {
      return Result.fail(factError("write_not_canonical", "the write's raw payload is not a string"))
    }
    const frozen = Writer.freezeDeep(decoded)
    const checkedWrite: EventWrite = Object.freeze(rawPayload === undefined ? { event: frozen, json } : { event: frozen, json, rawPayload })
    constructed.add(checkedWrite)
    return Result.succeed(checkedWrite)
  })
}

/** A successful `tool_settled`, read defensively: an unchecked value may lack any part of it. */
const isToolSuccess = (event: RuntimeEvent): boolean => {
  const fact: unknown = (event as { readonly fact?: unknown } | null | undefined)?.fact
  if (typeof fact !== "object" || fact === null || (fact as { readonly kind?: unknown }).kind !== "tool_settled") return false
  const outcome: unknown = (fact as { readonly outcome?: unknown }).outcome
  return typeof outcome === "object" && outcome !== null && (outcome as { readonly kind?: unknown }).kind === "succeeded"
}

/**
 * Validates any event except a successful `tool_settled`, which only `toolSuccess` builds: openings,
 * steering, archives, requests and checkpoints against their rules, and every event within 1 MiB.
 */
export const plain = (event: RuntimeEvent): Result.Result<EventWrite, FactError> =>
  isToolSuccess(event)
    ? Result.fail(
        factError("tool_success_requires_tool_write", "a successful tool_settled is built only by EventWrite.toolSuccess"),
      )
    : checked(event)

/**
 * The frozen model-visible form of an output: text → `text`; JSON holding a string → `text`; other
 * JSON → `json`; anything over 256 KiB encoded, 20,000 nodes or depth 32 → `failure`.
 */
export const freezeProjection = (output: ToolOutput): DurableToolProjection => {
  const projection: DurableToolProjection =
    output.format === "text"
      ? { kind: "text", text: output.value }
      : typeof output.value === "string"
        ? { kind: "text", text: output.value }
        : { kind: "json", value: output.value }
  const encoded = Canonical.tryStringify(projection)
  if (Result.isFailure(encoded) || Canonical.utf8Length(encoded.success) > MAX_PROJECTION_BYTES) {
    return { kind: "failure" }
  }
  if (projection.kind === "json") {
    const shape = Canonical.measure(projection.value)
    if (shape.nodes > MAX_PROJECTION_NODES || shape.depth > MAX_PROJECTION_DEPTH) return { kind: "failure" }
  }
  return projection
}

/** Encodes a tool output as its raw payload and reference, within 64 MiB and depth 64. */
export const encodeRawOutput = (
  output: ToolOutput,
): Result.Result<{ readonly payload: string; readonly raw: RawToolResultRef }, FactError> => {
  const encoded = Canonical.tryStringify(output)
  if (Result.isFailure(encoded)) return Result.fail(factError("canonical_json", encoded.failure.message))
  const payload = encoded.success
  const bytes = Canonical.utf8Length(payload)
  if (bytes > MAX_RAW_TOOL_RESULT_BYTES) {
    return Result.fail(factError("raw_payload_too_large", `raw tool result exceeds ${MAX_RAW_TOOL_RESULT_BYTES} bytes`))
  }
  // A string value is a leaf: only JSON output nests. A value the measure refuses (it took its
  // text already, so nothing but its size) is refused as too deep as well, never thrown.
  if (typeof output.value !== "string") {
    const measured = Result.try(() => Canonical.measure(output).depth)
    if (Result.isFailure(measured) || measured.success > MAX_RAW_TOOL_RESULT_DEPTH) {
      return Result.fail(factError("raw_payload_too_deep", `raw tool result is deeper than ${MAX_RAW_TOOL_RESULT_DEPTH}`))
    }
  }
  return Result.succeed({ payload, raw: { bytes, digest: Digest.toolRaw(payload) } })
}

/**
 * How many more bytes the canonical JSON of `{kind: "text", text: v}` has than that of
 * `{format, value: v}` for the same string `v`, by format: a string is written the same wherever it
 * stands, so the projection's size follows from the raw payload's without writing the text again.
 */
const textProjectionDelta = (() => {
  const bytesOf = (value: unknown) => Canonical.utf8Length(Canonical.stringify(value))
  const projection = bytesOf({ kind: "text", text: "" })
  return {
    text: projection - bytesOf({ format: "text", value: "" }),
    json: projection - bytesOf({ format: "json", value: "" }),
  } as const
})()

/** `freezeProjection(output)` given the UTF-8 size of `output`'s canonical JSON (its raw payload). */
const projectionOf = (output: ToolOutput, payloadBytes: number): DurableToolProjection => {
  if (typeof output.value !== "string") return freezeProjection(output)
  return payloadBytes + textProjectionDelta[output.format] <= MAX_PROJECTION_BYTES ? { kind: "text", text: output.value } : { kind: "failure" }
}

export interface ToolSuccessInput {
  readonly id: string
  readonly recordedAt: number
  readonly invocation: Invocation
  readonly operationId: string
  readonly output: ToolOutput
}

/** Builds the successful settlement of `operationId`, its raw payload and its frozen projection. */
export const toolSuccess = (input: ToolSuccessInput): Result.Result<EventWrite, FactError> =>
  Result.flatMap(encodeRawOutput(input.output), ({ payload, raw }) =>
    checked(
      {
        id: input.id,
        recordedAt: input.recordedAt,
        invocation: input.invocation,
        fact: {
          kind: "tool_settled",
          operationId: input.operationId,
          outcome: { kind: "succeeded", raw, projection: projectionOf(input.output, raw.bytes) },
        },
      },
      payload,
    ),
  )

/** Checks that a stored raw payload matches its reference (length, then digest). */
export const payloadMatches = (raw: RawToolResultRef, payload: string): boolean =>
  Canonical.utf8Length(payload) === raw.bytes && Digest.toolRaw(payload) === raw.digest
