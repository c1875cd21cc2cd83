/**
 * A tool (DESIGN.md §7, SEMANTICS.md §2.12): a name, a description, an Effect Schema input whose
 * JSON Schema is what providers see, step semantics and an `execute` that returns an Effect or a
 * Promise of a `ToolOutput`. `ToolFailure`, and any other error thrown, rejected or failed with, is a
 * known failure the model reads; only `ToolOutcomeUnknown` leaves the outcome unknown.
 */
import { Identity, type ToolCall } from "@maka/facts"
import { Data, Effect, Result, Schema } from "effect"
import { describeDefect } from "./internal/describe.ts"
import { invalidDefinition } from "./ToolError.ts"

/** `parallel` may share a step; `exclusive_step` must be alone in it; `finish_turn` too, and ends the turn. */
export type Semantics = "parallel" | "exclusive_step" | "finish_turn"
export const Semantics = Schema.Literals(["parallel", "exclusive_step", "finish_turn"])

/** 1–64 characters of `[A-Za-z0-9_-]`. */
export const NAME_PATTERN = /^[A-Za-z0-9_-]{1,64}$/

/** A known failure: the effect did not do what was asked, and the model reads `message`. */
export class ToolFailure extends Data.TaggedError("ToolFailure")<{ readonly message: string }> {}

/** The tool cannot say whether its effect happened; the call stays uncertain. */
export class ToolOutcomeUnknown extends Data.TaggedError("ToolOutcomeUnknown")<{ readonly message: string }> {}

/** Fails with a known failure. */
export const fail = (message: string): Effect.Effect<never, ToolFailure> => Effect.fail(new ToolFailure({ message }))

export const text = (value: string): ToolCall.ToolOutput => ({ format: "text", value })
export const json = (value: Identity.Json): ToolCall.ToolOutput => ({ format: "json", value })

/** What `execute` receives besides its input. */
export interface ToolContext {
  /** Aborted when the caller cancels while the effect runs; a tool may honour it. */
  readonly signal: AbortSignal
}

/** An Effect or a Promise; any error is a known failure carrying its message, except `ToolOutcomeUnknown`. */
export type Execution = Effect.Effect<ToolCall.ToolOutput, unknown> | PromiseLike<ToolCall.ToolOutput>

export interface Config<S extends Schema.ConstraintDecoder<unknown, never>> {
  readonly name: string
  readonly description: string
  readonly input: S
  readonly semantics: Semantics
  readonly execute: (input: S["Type"], context: ToolContext) => Execution
}

/** The provider-facing definition (SEMANTICS.md §2.12). */
export interface ToolDefinition {
  readonly name: string
  readonly description: string
  readonly inputSchema: Identity.JsonObject
}

/** A preparation failure: the decode message, or a decoder that broke. */
export type DecodeFailure =
  | { readonly kind: "invalid_input"; readonly message: string }
  | { readonly kind: "preparation_failed"; readonly message: string }

/** A decoded call, ready to run once. */
export type Runner = (context: ToolContext) => Execution

export interface Tool {
  readonly name: string
  readonly description: string
  readonly semantics: Semantics
  /** The JSON Schema (draft 2020-12, `$defs` inlined) derived from the input Schema. */
  readonly inputSchema: Identity.JsonObject
  readonly definition: ToolDefinition
  /** Decodes input from the model at the boundary; never starts the effect. */
  readonly decode: (input: unknown) => Effect.Effect<Runner, DecodeFailure>
}

/** The JSON Schema sent to providers: the document's root with its definitions as `$defs`. */
export const jsonSchemaOf = (schema: Schema.Constraint): Identity.JsonObject => {
  const document = Schema.toJsonSchemaDocument(schema, { onExcessProperty: "error" })
  const decoded = decodeJsonObject(
    Object.keys(document.definitions).length === 0
      ? document.schema
      : { ...document.schema, $defs: document.definitions },
  )
  if (Result.isFailure(decoded)) throw invalidDefinition(`input schema is not JSON: ${decoded.failure.message}`)
  return decoded.success
}

const decodeJsonObject = Schema.decodeUnknownResult(Identity.JsonObject)

/** The readable message of an `invalid_input` rejection. */
export const invalidInputMessage = (name: string, detail: string): string =>
  `Invalid input for tool "${name}": ${detail}`

/**
 * Builds a tool. Throws `ToolError` (`InvalidDefinition`) when the name breaks `NAME_PATTERN`, the
 * semantics are unknown, or the input Schema does not describe a JSON object.
 */
export const make = <S extends Schema.ConstraintDecoder<unknown, never>>(config: Config<S>): Tool => {
  if (!NAME_PATTERN.test(config.name)) {
    throw invalidDefinition(`tool name ${JSON.stringify(config.name)} must be 1-64 characters of [A-Za-z0-9_-]`)
  }
  if (!Schema.is(Semantics)(config.semantics)) {
    throw invalidDefinition(`tool ${config.name} has unknown semantics ${JSON.stringify(config.semantics)}`)
  }
  const inputSchema = jsonSchemaOf(config.input)
  if (inputSchema["type"] !== "object") {
    throw invalidDefinition(`tool ${config.name} must take a JSON object as input`)
  }
  const decodeInput = Schema.decodeUnknownEffect(config.input)
  const definition: ToolDefinition = Object.freeze({
    name: config.name,
    description: config.description,
    inputSchema,
  })
  return Object.freeze({
    name: config.name,
    description: config.description,
    semantics: config.semantics,
    inputSchema,
    definition,
    decode: (input: unknown) =>
      decodeInput(input, { onExcessProperty: "error", errors: "all" }).pipe(
        Effect.map((decoded): Runner => (context) => config.execute(decoded, context)),
        Effect.mapError(
          (error): DecodeFailure => ({ kind: "invalid_input", message: invalidInputMessage(config.name, error.message) }),
        ),
        Effect.catchDefect((defect) =>
          Effect.fail<DecodeFailure>({
            kind: "preparation_failed",
            message: `Tool "${config.name}" could not prepare its input: ${describeDefect(defect)}`,
          }),
        ),
      ),
  })
}
