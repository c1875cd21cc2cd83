/**
 * A tool (docs/architecture.md §7, docs/tools.md §2.12): a name, a description, an input schema (an Effect
 * Schema, or any Standard Schema that also implements Standard JSON Schema: zod 4, ArkType, Valibot
 * with its adapter) whose JSON Schema is what providers see, step semantics and an `execute` that returns an Effect or a
 * Promise of a `ToolOutput`. `ToolFailure`, and any other error thrown, rejected or failed with, is a
 * known failure the model reads; only `ToolOutcomeUnknown` leaves the outcome unknown.
 */
import { Canonical, Identity, type ToolCall } from "@maka/facts"
import { Data, Effect, Fiber, Result, Schema } from "effect"
import type { StandardJSONSchemaV1, StandardSchemaV1 } from "effect/StandardSchema"
import { defaults } from "./Defaults.ts"
import { closeEmptyStructs } from "./internal/closed-empty-struct.ts"
import { describeDefect } from "./internal/describe.ts"
import { invalidDefinition, ToolError } from "./ToolError.ts"

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
/**
 * What `json` takes of a value of type `T`: plain JSON data, written as a type alias or as an
 * interface (which has no index signature, so is no `Identity.Json`); a function, method, bigint,
 * symbol or `undefined` anywhere in it makes it `never`. A `Date` or `Map` has methods: refused too.
 */
export type JsonValue<T> = T extends null | boolean | number | string
  ? T
  : T extends (...args: ReadonlyArray<never>) => unknown
    ? never
    : T extends ReadonlyArray<infer Item>
      ? ReadonlyArray<JsonValue<Item>>
      : T extends object
        ? { readonly [K in keyof T]: JsonValue<T[K]> }
        : never

/**
 * A JSON output; the value is checked when the output is recorded (the README's Errors). Typed as
 * `Identity.Json` (a generic `V extends Identity.Json` too), or as plain data of any other type.
 */
export const json: {
  (value: Identity.Json): ToolCall.ToolOutput
  <T>(value: T extends JsonValue<T> ? T : JsonValue<T>): ToolCall.ToolOutput
} = (value: unknown): ToolCall.ToolOutput => ({
  format: "json",
  // Plain data by its type, so JSON.
  value: value as Identity.Json,
})

/** What `execute` receives besides its input. */
export interface ToolContext {
  /** Aborted when the caller cancels while the effect runs; a tool may honour it. */
  readonly signal: AbortSignal
}

/** An Effect or a Promise; any error is a known failure carrying its message, except `ToolOutcomeUnknown`. */
export type Execution = Effect.Effect<ToolCall.ToolOutput, unknown> | PromiseLike<ToolCall.ToolOutput>

/**
 * A Standard Schema (`@standard-schema/spec` 1.1) that also implements Standard JSON Schema: zod 4,
 * ArkType, Valibot with its JSON Schema adapter. The types are the spec's own, as Effect vendors them.
 */
export interface StandardInput<Input = unknown, Output = Input> {
  readonly "~standard": StandardSchemaV1.Props<Input, Output> & StandardJSONSchemaV1.Props<Input, Output>
}

/** What `input` may be: an Effect Schema without decoding services, or a `StandardInput`. */
export type InputSchema = Schema.ConstraintDecoder<unknown, never> | StandardInput

/** The decoded input `execute` receives: the Effect Schema's `Type`, or the Standard Schema's output. */
export type InputOf<S extends InputSchema> =
  S extends Schema.ConstraintDecoder<unknown, never>
    ? S["Type"]
    : S extends StandardInput
      ? StandardSchemaV1.InferOutput<S>
      : never

export interface Config<S extends InputSchema> {
  readonly name: string
  readonly description: string
  readonly input: S
  readonly semantics: Semantics
  readonly execute: (input: InputOf<S>, context: ToolContext) => Execution
}

/** The provider-facing definition (docs/tools.md §2.12). */
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
  /** The JSON Schema (draft 2020-12, its definitions in `$defs`) derived from the input Schema. */
  readonly inputSchema: Identity.JsonObject
  readonly definition: ToolDefinition
  /** Decodes input from the model at the boundary; never starts the effect. */
  readonly decode: (input: unknown) => Effect.Effect<Runner, DecodeFailure>
}

const decodeJsonObject = Schema.decodeUnknownResult(Identity.JsonObject)

/**
 * `value` as the JSON object a provider is offered. The check's parser throws, rather than failing,
 * on a value it cannot walk (a cycle, nesting deeper than the stack, a getter or proxy that throws),
 * with an error of its own that names none of them; `JSON.stringify` names the cycle or rethrows the
 * getter's error, so the definition error says which.
 */
const asJsonObject = (value: unknown): Identity.JsonObject => {
  const checked = Result.try({ try: () => decodeJsonObject(value), catch: (error) => error })
  if (Result.isFailure(checked)) {
    const readable = Result.try({ try: () => JSON.stringify(value), catch: (error) => error })
    const thrown = Result.isFailure(readable) ? readable.failure : checked.failure
    throw invalidDefinition(`input schema is not JSON: reading it threw ${describeDefect(thrown)}`)
  }
  const decoded = checked.success
  if (Result.isFailure(decoded)) throw invalidDefinition(`input schema is not JSON: ${decoded.failure.message}`)
  return decoded.success
}

/** An Effect Schema (its decoding services are `never` by `Config`'s bound). */
const isEffectSchema = (input: InputSchema): input is Schema.ConstraintDecoder<unknown, never> => Schema.isSchema(input)

const isStandardInput = (input: unknown): input is StandardInput => {
  if (typeof input !== "object" && typeof input !== "function") return false
  if (input === null || !("~standard" in input)) return false
  const standard: unknown = input["~standard"]
  return typeof standard === "object" && standard !== null && "validate" in standard && typeof standard.validate === "function"
}

const hasJsonSchema = (input: StandardInput): boolean => {
  const converter: unknown = (input["~standard"] as { readonly jsonSchema?: unknown }).jsonSchema
  return typeof converter === "object" && converter !== null && "input" in converter && typeof converter.input === "function"
}

const DEFINITION_REF = "#/$defs/"

/**
 * A root that only refers to one of its `$defs` (an Effect `Schema.Class` or a schema with an
 * `identifier`, a zod schema registered with an `id`) as that definition, the `$defs` kept for the
 * references in it: providers take only an object schema at the root of a tool's parameters. Any
 * other root as it is. The definition itself stays in `$defs` only when something refers to it.
 */
const withRootResolved = (schema: Record<string, unknown>): Record<string, unknown> => {
  const { $ref: ref, $defs: definitions, ...rest } = schema
  if (typeof ref !== "string" || !ref.startsWith(DEFINITION_REF) || typeof definitions !== "object" || definitions === null) return schema
  // A JSON Pointer token: `~1` is `/`, `~0` is `~`.
  const name = ref.slice(DEFINITION_REF.length).replaceAll("~1", "/").replaceAll("~0", "~")
  const target: unknown = Object.hasOwn(definitions, name) ? (definitions as Record<string, unknown>)[name] : undefined
  if (typeof target !== "object" || target === null || Array.isArray(target) || "$ref" in target) return schema
  const resolved = { ...target, ...rest }
  // The definition stays in `$defs` only while something still refers to it (a recursive schema).
  const { [name]: _root, ...others } = definitions as Record<string, unknown>
  const kept = JSON.stringify([resolved, others]).includes(JSON.stringify(ref)) ? definitions : others
  return Object.keys(kept).length === 0 ? resolved : { ...resolved, $defs: kept }
}

/**
 * The JSON Schema sent to providers from an Effect Schema: the document's root with its definitions
 * as `$defs` (a root that is a reference to one of them resolved), every empty struct in it the
 * closed empty object (`closeEmptyStructs`).
 */
export const jsonSchemaOf = (schema: Schema.Constraint): Identity.JsonObject => {
  const document = Schema.toJsonSchemaDocument(closeEmptyStructs(schema), { onExcessProperty: "error" })
  const definitions = document.definitions
  return asJsonObject(withRootResolved(Object.keys(definitions).length === 0 ? document.schema : { ...document.schema, $defs: definitions }))
}

/**
 * The JSON Schema (draft 2020-12) of what the model sends, from a Standard JSON Schema; `$schema`
 * dropped. What the converter gives is the schema library's (or anyone's) object: reading it may
 * throw (a getter, a proxy's trap) or never end (a cycle), and each is an `InvalidDefinition`.
 */
export const standardJsonSchemaOf = (schema: StandardInput): Identity.JsonObject => {
  const generated = Result.try({
    try: () => schema["~standard"].jsonSchema.input({ target: "draft-2020-12" }),
    catch: (error) => invalidDefinition(`input schema has no JSON Schema: ${describeDefect(error)}`),
  })
  if (Result.isFailure(generated)) throw generated.failure
  const output: unknown = generated.success
  if (typeof output !== "object" || output === null || Array.isArray(output)) {
    const gave = output === null ? "null" : Array.isArray(output) ? "an array" : typeof output
    throw invalidDefinition(`input schema has no JSON Schema: its Standard JSON Schema gave ${gave}`)
  }
  const copied = Result.try({
    try: () => {
      const { $schema: _dialect, ...document } = output as Record<string, unknown>
      return withRootResolved(document)
    },
    catch: (error) => invalidDefinition(`input schema has no JSON Schema: reading it threw ${describeDefect(error)}`),
  })
  if (Result.isFailure(copied)) throw copied.failure
  return asJsonObject(copied.success)
}

/** One Standard Schema issue as the model reads it: the message, then its path like Effect's. */
const describeIssue = (issue: StandardSchemaV1.Issue): string => {
  const path = (issue.path ?? []).map((segment) =>
    typeof segment === "object" && segment !== null ? segment.key : segment,
  )
  const keys = path.map((key) => (typeof key === "symbol" ? String(key) : key))
  return keys.length === 0 ? issue.message : `${issue.message}\n  at ${JSON.stringify(keys)}`
}

/** The detail of a failed validation that named no issue. */
const NO_ISSUES = "the validator reported a failure without issues"

/**
 * How many UTF-16 units of issues are formatted: the stored message keeps 2,048 units of them, with
 * room for secrets scrubbed to `[redacted]`; the issues after them are only counted, so input that
 * breaks a rule in every one of 60,000 items never builds a message of megabytes.
 */
const ISSUE_TEXT_UNITS = 4 * defaults.failureMessageUnits

/** A failed validation's issues, one after another, as many as `ISSUE_TEXT_UNITS` hold. */
const describeIssues = (issues: ReadonlyArray<StandardSchemaV1.Issue>): string => {
  if (issues.length === 0) return NO_ISSUES
  const described: Array<string> = []
  let units = 0
  for (const issue of issues) {
    if (units >= ISSUE_TEXT_UNITS) {
      described.push(`(and ${issues.length - described.length} more issues)`)
      break
    }
    const text = describeIssue(issue)
    described.push(text)
    units += text.length + 1
  }
  return described.join("\n")
}

/** A decoder of the tool's input: the decoded value, or the readable problem. */
type InputDecoder = (input: unknown) => Effect.Effect<unknown, { readonly message: string }>

const standardDecoder =
  (schema: StandardInput): InputDecoder =>
  (input) =>
    Effect.flatMap(
      Effect.suspend(() => {
        const validated = schema["~standard"].validate(input)
        return validated instanceof Promise ? Effect.promise(() => validated) : Effect.succeed(validated)
      }),
      (result) => {
        // The validator is the host's or a library's: a result that is neither `{value}` nor
        // `{issues}` is its defect (`preparation_failed`), never a success with no value.
        if (typeof result !== "object" || result === null) return Effect.die(malformedResult(result))
        if (result.issues !== undefined) {
          return Array.isArray(result.issues) ? Effect.fail({ message: describeIssues(result.issues) }) : Effect.die(malformedResult(result))
        }
        return "value" in result ? Effect.succeed(result.value) : Effect.die(malformedResult(result))
      },
    )

const malformedResult = (result: unknown): Error =>
  new Error(`its Standard Schema validate gave ${kindOf(result)}, not a result {value} or {issues: [...]}`)

/** What a value given where another was expected is, for a message: its type, or `null`, or `an array`. */
const kindOf = (value: unknown): string =>
  value === null ? "null" : Array.isArray(value) ? "an array" : typeof value === "object" ? "an object" : typeof value

/** Effect's decoder of `schema`, every empty struct in it the closed empty object `jsonSchemaOf` offers. */
const effectDecoder = (schema: Schema.ConstraintDecoder<unknown, never>): InputDecoder => {
  // Through the schema's JSON codec: what the model sends is JSON, the form the offered JSON Schema
  // describes (a `Schema.Date` is offered, and so taken, as its ISO string).
  const decode = Schema.decodeUnknownEffect(Schema.toCodecJson(closeEmptyStructs(schema)))
  return (input) => decode(input, { onExcessProperty: "error", errors: "all" })
}

/** The readable message of an `invalid_input` rejection. */
export const invalidInputMessage = (name: string, detail: string): string =>
  `Invalid input for tool "${name}": ${detail}`

/**
 * The provider-facing definition, sealed (`Canonical.seal`: deep-frozen, its canonical JSON kept), so
 * every request of every step offers it without checking or writing it again
 * (docs/architecture.md §12). The input schema was decoded as a JSON object, so sealing cannot fail.
 */
const sealedDefinition = (name: string, description: string, inputSchema: Identity.JsonObject): ToolDefinition =>
  Canonical.seal({ name, description, inputSchema })

/** What an Effect Schema input gives a tool of one name and description: its sealed definition and decoder. */
interface EffectInput {
  readonly definition: ToolDefinition
  readonly decodeInput: InputDecoder
}

/**
 * Effect Schemas are immutable, so the JSON Schema, the decoder and the sealed definition a schema
 * gives are derived once per schema (and name and description) and shared: a tool the engine makes
 * for every run (`read_tool_result`) costs no JSON Schema generation, decoder compilation or sealing.
 */
const effectInputs = new WeakMap<object, Map<string, EffectInput>>()

/** How many name and description pairs are kept per schema. */
const DEFINITIONS_PER_SCHEMA = 16

const effectInputOf = (schema: Schema.ConstraintDecoder<unknown, never>, name: string, description: string): EffectInput => {
  let byDefinition = effectInputs.get(schema)
  if (byDefinition === undefined) {
    byDefinition = new Map()
    effectInputs.set(schema, byDefinition)
  }
  const key = `${name}\u0000${description}`
  let derived = byDefinition.get(key)
  if (derived === undefined) {
    derived = { definition: sealedDefinition(name, description, jsonSchemaOf(schema)), decodeInput: effectDecoder(schema) }
    byDefinition.set(key, derived)
    // Names and descriptions made on the fly must not grow it without bound: the oldest goes.
    if (byDefinition.size > DEFINITIONS_PER_SCHEMA) byDefinition.delete(byDefinition.keys().next().value!)
  }
  return derived
}

/** What an input gives a tool: its JSON Schema, its decoder, and the sealed definition when shared. */
interface DerivedInput {
  readonly inputSchema: Identity.JsonObject
  readonly decodeInput: InputDecoder
  readonly definition: ToolDefinition | undefined
}

const deriveInput = (input: InputSchema, name: string, description: string): DerivedInput => {
  if (isEffectSchema(input)) {
    const derived = effectInputOf(input, name, description)
    return { inputSchema: derived.definition.inputSchema, decodeInput: derived.decodeInput, definition: derived.definition }
  }
  if (!isStandardInput(input)) throw invalidDefinition(`tool ${name}: input must be an Effect Schema or a Standard Schema`)
  if (!hasJsonSchema(input)) {
    throw invalidDefinition(`tool ${name}: its Standard Schema input must also implement Standard JSON Schema`)
  }
  return { inputSchema: standardJsonSchemaOf(input), decodeInput: standardDecoder(input), definition: undefined }
}

/**
 * Builds a tool. Throws `ToolError` (`InvalidDefinition`) when the name breaks `NAME_PATTERN`, the
 * semantics are unknown, the input is neither an Effect Schema nor a Standard Schema with Standard
 * JSON Schema, or it does not describe a JSON object.
 */
export const make = <S extends InputSchema>(config: Config<S>): Tool => {
  // A definition that is no object, or whose getter or proxy trap throws, is an invalid definition
  // like any other, never a bare TypeError.
  if (typeof config !== "object" || config === null) throw invalidDefinition(`a tool definition must be an object, got ${kindOf(config)}`)
  try {
    return makeChecked(config)
  } catch (error) {
    if (error instanceof ToolError) throw error
    throw invalidDefinition(`a tool definition could not be read: ${error instanceof Error ? error.message : String(error)}`)
  }
}

const makeChecked = <S extends InputSchema>(config: Config<S>): Tool => {
  // A string first: the pattern would read `123`, or an object whose `toString` gives a name, as one.
  const name: unknown = config.name
  if (typeof name !== "string") throw invalidDefinition(`tool name must be a string, got ${kindOf(name)}`)
  if (!NAME_PATTERN.test(name)) {
    throw invalidDefinition(`tool name ${JSON.stringify(name)} must be 1-64 characters of [A-Za-z0-9_-]`)
  }
  if (!Schema.is(Semantics)(config.semantics)) {
    throw invalidDefinition(`tool ${config.name} has unknown semantics ${JSON.stringify(config.semantics)}`)
  }
  // Checked here, where the caller's value is named, not later by the catalog or at the first call.
  if (typeof config.description !== "string") {
    throw invalidDefinition(`tool ${config.name}: its description must be a string, got ${kindOf(config.description)}`)
  }
  if (typeof config.execute !== "function") {
    throw invalidDefinition(`tool ${config.name}: its execute must be a function, got ${kindOf(config.execute)}`)
  }
  const derived = Result.try({
    try: () => deriveInput(config.input, config.name, config.description),
    // The input is the host's or a schema library's object: a getter or proxy trap that throws
    // while it is read is a definition error too, never a raw throw out of `make`.
    catch: (error) =>
      error instanceof ToolError
        ? error
        : invalidDefinition(`tool ${config.name}: its input schema threw while it was read: ${describeDefect(error)}`),
  })
  if (Result.isFailure(derived)) throw derived.failure
  const { inputSchema, decodeInput } = derived.success
  if (inputSchema["type"] !== "object") {
    throw invalidDefinition(`tool ${config.name} must take a JSON object as input`)
  }
  const definition = derived.success.definition ?? sealedDefinition(config.name, config.description, inputSchema)
  return Object.freeze({
    name: config.name,
    description: config.description,
    semantics: config.semantics,
    inputSchema: definition.inputSchema,
    definition,
    decode: (input: unknown) =>
      // In a fiber of its own: a decoding that yields what is not an Effect (a default given as a
      // plain function by a caller without types) ends the fiber running it, past its own handlers;
      // joined, it is a defect here like any other, so `preparation_failed`.
      Effect.flatMap(Effect.forkChild(decodeInput(input)), Fiber.join).pipe(
        // The decoder is the schema's own, so its output is the schema's output type.
        Effect.map((decoded): Runner => (context) => config.execute(decoded as InputOf<S>, context)),
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
