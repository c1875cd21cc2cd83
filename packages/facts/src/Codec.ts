/**
 * Decoding and encoding at trust boundaries. Every decode is closed (an unknown field is an error),
 * then runs the rules of `Validation.ts`; every encode writes canonical JSON, the bytes the store keeps
 * and every digest hashes.
 */
import { Result, Schema } from "effect"
import * as Canonical from "./Canonical.ts"
import { RuntimeEvent, StoredEvent } from "./Event.ts"
import { Fact } from "./Fact.ts"
import { factError, type FactError } from "./FactError.ts"
import type { Invocation } from "./Identity.ts"
import * as ShapeGuard from "./internal/shape-guard.ts"
import { MAX_EVENT_BYTES } from "./Limits.ts"
import * as Validation from "./Validation.ts"

/** The options every closed decode uses. */
export const closed = { onExcessProperty: "error", errors: "first" } as const

/**
 * Decodes any schema closed, mapping the schema error into a `FactError`. A value the decoder cannot
 * walk (JSON nested deeper than the stack allows: the decoder throws) is a `decode` error too.
 */
export const decodeClosed =
  <S extends Schema.ConstraintDecoder<unknown>>(schema: S) =>
  (input: unknown): Result.Result<S["Type"], FactError> => {
    try {
      return Result.mapError(Schema.decodeUnknownResult(schema)(input, closed), (error) =>
        factError("decode", String(error.message)),
      )
    } catch {
      return Result.fail(factError("decode", "the value cannot be decoded: it is nested too deeply"))
    }
  }

const invalidJson = (cause: unknown): FactError =>
  factError("decode", `invalid JSON: ${cause instanceof Error ? cause.message : String(cause)}`)

const decodeRuntimeEventShape = decodeClosed(RuntimeEvent)
const decodeStoredEventShape = decodeClosed(StoredEvent)
const decodeFactShape = decodeClosed(Fact)

/**
 * Decodes and validates one fact of `invocation` as admission does: the schema, the fact's rules,
 * and the text rules of the fact and the invocation (well-formed, ids without NUL).
 */
export const decodeFact = (input: unknown, invocation: Invocation): Result.Result<Fact, FactError> =>
  Result.flatMap(decodeFactShape(input), (fact) =>
    Result.flatMap(Validation.fact(fact, invocation), () =>
      Result.map(Validation.wellFormedFact(fact, invocation), () => fact),
    ),
  )

/** `event` once the rules of its fact hold. */
const withValidFact = (event: RuntimeEvent): Result.Result<RuntimeEvent, FactError> =>
  Result.map(Validation.fact(event.fact, event.invocation), () => event)

/** Decodes and validates a `RuntimeEvent` (shape, then the rules of its fact). */
export const decodeEvent = (input: unknown): Result.Result<RuntimeEvent, FactError> =>
  Result.flatMap(decodeRuntimeEventShape(input), withValidFact)

/**
 * The in-place shape check of a schema: a guard that answers `true` only when the closed decode
 * accepts the value and returns the same structure, so the value itself can be kept instead of the
 * decoder's copy (docs/architecture.md §12). `false` says nothing more (a node the check does not
 * compile, a value nested too deeply to walk): ask the closed decode for the verdict and its message.
 */
export const shapeGuard = <S extends Schema.Top>(schema: S): ((input: unknown) => input is S["Type"]) => {
  const guard = ShapeGuard.compile(schema.ast)
  return (input: unknown): input is S["Type"] => {
    try {
      return guard(input)
    } catch {
      return false
    }
  }
}

/**
 * Whether a value parsed from JSON has the closed shape of a `RuntimeEvent`, checked in place:
 * `true` only when the closed decode accepts it and returns the same structure, so the parsed
 * value itself can be kept (`false` for a value nested too deeply to walk). The fact's rules are
 * `Validation.fact`.
 */
export const hasRuntimeEventShape: (input: unknown) => input is RuntimeEvent = shapeGuard(RuntimeEvent)

const hasFactShape = shapeGuard(Fact)

/**
 * The verdict of `decodeFact` without its copy, for a check whose caller keeps its own value
 * (admission, steering): a fact of the closed shape (the decode would return the same structure)
 * that meets the rules is accepted as it is; anything else gets the decode's verdict and message
 * (the rules walk the decode's copy, whose keys are in the schema's order, so a refusal names the
 * same place).
 */
export const checkFact = (input: unknown, invocation: Invocation): Result.Result<void, FactError> => {
  if (hasFactShape(input)) {
    const valid = Result.flatMap(Validation.fact(input, invocation), () => Validation.wellFormedFact(input, invocation))
    if (Result.isSuccess(valid)) return valid
  }
  return Result.map(decodeFact(input, invocation), () => undefined)
}

/**
 * Decodes stored event JSON; an event over 1 MiB is refused before it is parsed. The parsed value
 * is kept when its shape checks in place (no copy: the common case of a stored row); otherwise the
 * closed decode gives the verdict and its message.
 */
export const decodeEventJson = (json: string): Result.Result<RuntimeEvent, FactError> => {
  // A UTF-16 unit is at most 3 UTF-8 bytes: a short text needs no byte count.
  if (json.length * 3 > MAX_EVENT_BYTES && Canonical.utf8Length(json) > MAX_EVENT_BYTES) {
    return Result.fail(factError("event_too_large", `event exceeds ${MAX_EVENT_BYTES} bytes`))
  }
  // The usual path (a stored row of the right shape) builds one result, no intermediate ones.
  let value: unknown
  try {
    value = JSON.parse(json)
  } catch (cause) {
    return Result.fail(invalidJson(cause))
  }
  if (!hasRuntimeEventShape(value)) return decodeEvent(value)
  const valid = Validation.fact(value.fact, value.invocation)
  return Result.isSuccess(valid) ? Result.succeed(value) : Result.fail(valid.failure)
}

export const decodeStoredEvent = (input: unknown): Result.Result<StoredEvent, FactError> =>
  Result.flatMap(decodeStoredEventShape(input), (stored) =>
    Result.map(Validation.fact(stored.event.fact, stored.event.invocation), () => stored),
  )

/** The canonical JSON of an event: the exact bytes of `event_json`. */
export const encodeEventJson = (event: RuntimeEvent): string => Canonical.stringify(event)

/** Encodes an event and checks the 1 MiB single-event limit. */
export const encodeEventChecked = (event: RuntimeEvent): Result.Result<string, FactError> =>
  Result.flatMap(
    Result.mapError(Canonical.tryStringify(event), (error) => factError("canonical_json", error.message)),
    (json) =>
      Canonical.utf8Length(json) <= MAX_EVENT_BYTES
        ? Result.succeed(json)
        : Result.fail(factError("event_too_large", `event exceeds ${MAX_EVENT_BYTES} bytes`)),
  )
