/**
 * Runs one prepared tool call and classifies how it ended, without ever failing
 * (docs/tools.md §2.12): a decoded `ToolOutput` is a success; `ToolOutcomeUnknown` leaves the outcome unknown; a
 * `ToolFailure`, any other error thrown, rejected with or failed with, a defect, an interruption of
 * the tool's own effect and an invalid output are known failures that carry the error's message.
 * Reading what the tool returned runs the tool's code (getters, proxies) and can throw or overflow
 * the stack; such a throw is a known failure too, never a defect of the caller.
 */
import { ToolCall } from "@maka/facts"
import { Cause, Effect, Exit, Result, Schema } from "effect"
import type { Execution as ToolExecution, Runner } from "../Tool.ts"
import { describeDefect } from "./describe.ts"

export type Execution =
  | { readonly _tag: "Succeeded"; readonly output: ToolCall.ToolOutput }
  | { readonly _tag: "Failed"; readonly message: string }
  | { readonly _tag: "Unknown"; readonly message: string }

/** The message of a failure whose error said nothing. */
export const EMPTY_FAILURE_MESSAGE = "tool failed"

const hasTag = (value: unknown, tag: string): value is { readonly _tag: string; readonly message: unknown } =>
  typeof value === "object" && value !== null && "_tag" in value && value._tag === tag

/** The message of an error as the model should read it: an `Error`'s own message, not its name. */
const messageOf = (error: unknown): string => {
  // Read once: a getter may answer differently each time, and only a string is settled as a message.
  const message: unknown = typeof error === "object" && error !== null && "message" in error ? error.message : undefined
  // A failure with no reason at all (`Promise.reject()`, `Effect.fail(null)`) said nothing, as an empty message.
  return typeof message === "string" ? message : error === undefined || error === null ? "" : describeDefect(error)
}

/** The message of a success whose output cannot be recorded (over 64 MiB raw, too deep, unreadable). */
export const unrecordableOutputMessage = (detail: string): string =>
  `The tool completed, but its result could not be recorded: ${detail}`

/**
 * Why an output whose reading threw cannot be recorded. The thrown error is the tool's own (a getter's,
 * a proxy's) or a stack overflow, so its message is not repeated: it may hold anything, a secret
 * included.
 */
const UNREADABLE_OUTPUT =
  "reading it as JSON threw an error (is it circular, nested too deeply, or does a getter or proxy in it throw?)"

/** The message of a failure whose error threw while it was read (a getter, a proxy). */
const UNREADABLE_ERROR_MESSAGE = "tool failed with an error that could not be read"

const failed = (message: string): Execution => ({
  _tag: "Failed",
  message: message.length === 0 ? EMPTY_FAILURE_MESSAGE : message,
})

/** Classifies an error by its tag (never `instanceof`, so a second copy of this package agrees). */
export const classifyError = (error: unknown): Execution => {
  if (hasTag(error, "ToolOutcomeUnknown")) {
    const message = error.message
    return { _tag: "Unknown", message: typeof message === "string" ? message : "" }
  }
  return failed(messageOf(error))
}

const decodeOutput = Schema.decodeUnknownResult(ToolCall.ToolOutput)

/**
 * The usual output, `{format: "text", value}` with no other own key, as the schema decodes it (a
 * fresh object of the two fields), checked without the schema's parser: a step's tool call pays
 * tens of microseconds for the parser's general path where this is a few. Anything else (JSON, an
 * extra key, a symbol key, a value that is not a string) goes to the schema, which gives the verdict
 * and its message; this path accepts no value the schema refuses and builds the same output.
 */
const plainTextOutput = (value: unknown): ToolCall.ToolOutput | undefined => {
  if (typeof value !== "object" || value === null) return undefined
  const keys = Reflect.ownKeys(value)
  if (keys.length !== 2 || !keys.includes("format") || !keys.includes("value")) return undefined
  const output = value as { readonly format: unknown; readonly value: unknown }
  if (output.format !== "text") return undefined
  const text = output.value
  return typeof text === "string" ? { format: "text", value: text } : undefined
}

const isPromiseLike = (value: unknown): value is PromiseLike<unknown> =>
  typeof value === "object" && value !== null && "then" in value && typeof value.then === "function"

const toEffect = (result: ToolExecution): Effect.Effect<unknown, unknown> => {
  if (Effect.isEffect(result)) return result
  if (isPromiseLike(result)) return Effect.tryPromise({ try: () => Promise.resolve(result), catch: (error) => error })
  return Effect.fail(new TypeError("execute returned neither an Effect nor a Promise"))
}

/**
 * The first value in a JSON output that is an object but neither an array nor a plain object (its
 * prototype `Object.prototype` or `null`), with its path: a `Date`, a `Map`, a `Set`, a `Buffer`, a
 * class instance. The schema takes any object as a record of its own enumerable keys, so a `Date`
 * would be stored as `{}` and a class's getters dropped: such an output is refused, never stored
 * with its data lost. Called after the schema accepted the output (no cycle, finite depth).
 */
const notPlain = (value: unknown, path: Array<string | number>): { readonly what: string; readonly path: string } | undefined => {
  if (typeof value !== "object" || value === null) return undefined
  if (Array.isArray(value)) {
    // Its items and `length`, and nothing else: the schema reads an array by index, so another own
    // property (`rows.total = 2`) would be dropped from what is stored.
    const keys = Reflect.ownKeys(value)
    const extra = keys.length === value.length + 1 ? undefined : keys.find((key) => key !== "length" && !(typeof key === "string" && /^(0|[1-9][0-9]*)$/.test(key)))
    if (extra !== undefined) {
      return {
        what: `an array with a property that is not an item (${typeof extra === "symbol" ? extra.toString() : JSON.stringify(extra)})`,
        path: path.map((key) => `[${JSON.stringify(key)}]`).join(""),
      }
    }
    for (const [index, item] of value.entries()) {
      path.push(index)
      const found = notPlain(item, path)
      path.pop()
      if (found !== undefined) return found
    }
    return undefined
  }
  const prototype: unknown = Object.getPrototypeOf(value)
  if (prototype !== Object.prototype && prototype !== null) {
    const constructor: unknown = (prototype as { readonly constructor?: unknown }).constructor
    const named = typeof constructor === "function" && constructor !== Object ? constructor.name : ""
    const tag = Object.prototype.toString.call(value).slice(8, -1)
    const type = named !== "" ? named : tag !== "Object" ? tag : undefined
    return {
      what: type === undefined ? "an object whose prototype is not Object.prototype" : `an instance of ${type}`,
      path: path.map((key) => `[${JSON.stringify(key)}]`).join(""),
    }
  }
  for (const key of Object.keys(value)) {
    path.push(key)
    const found = notPlain((value as Record<string, unknown>)[key], path)
    path.pop()
    if (found !== undefined) return found
  }
  return undefined
}

/**
 * The output a tool returned, as a success or the known failure of docs/tools.md §2.12: the effect
 * happened, so an output that is not a valid `ToolOutput` or cannot be read is settled as a failure,
 * never left to throw through the journal's bookkeeping.
 */
const fromOutput = (value: unknown): Execution => {
  try {
    const text = plainTextOutput(value)
    if (text !== undefined) return { _tag: "Succeeded", output: text }
    const output = decodeOutput(value, { onExcessProperty: "error" })
    if (Result.isFailure(output)) return failed(`tool returned an invalid output: ${output.failure.message}`)
    if (output.success.format === "json") {
      const found = notPlain((value as { readonly value: unknown }).value, ["value"])
      if (found !== undefined) {
        return failed(
          `tool returned an invalid output: Expected Json (plain objects and arrays), got ${found.what}\n  at ${found.path}`,
        )
      }
    }
    return { _tag: "Succeeded", output: output.success }
  } catch {
    // The schema's parser throws (rather than failing) when a check throws, a cycle or a deep value
    // overflowing the stack included; the value is the tool's, so its error is not echoed.
    return failed(unrecordableOutputMessage(UNREADABLE_OUTPUT))
  }
}

/** `classifyError`, except that an error which throws while it is read is a known failure too. */
const fromError = (error: unknown): Execution => {
  try {
    return classifyError(error)
  } catch {
    return failed(UNREADABLE_ERROR_MESSAGE)
  }
}

const fromExit = (exit: Exit.Exit<unknown, unknown>): Execution => {
  if (Exit.isSuccess(exit)) return fromOutput(exit.value)
  const error = Cause.findError(exit.cause)
  if (Result.isSuccess(error)) return fromError(error.success)
  const defect = Cause.findDie(exit.cause)
  if (Result.isSuccess(defect)) return fromError(defect.success.defect)
  return failed("tool effect was interrupted")
}

/** Runs `runner` with `signal`; a synchronous throw from `execute` is classified like a rejection. */
export const execute = (runner: Runner, signal: AbortSignal): Effect.Effect<Execution> =>
  Effect.try({ try: () => runner({ signal }), catch: (error) => error }).pipe(
    Effect.flatMap(toEffect),
    Effect.exit,
    Effect.map(fromExit),
  )
