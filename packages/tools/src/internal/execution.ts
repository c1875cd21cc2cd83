/**
 * Runs one prepared tool call and classifies how it ended, without ever failing (docs/tools.md
 * docs/tools.md §2.12): a decoded `ToolOutput` is a success; `ToolOutcomeUnknown` leaves the outcome unknown; a
 * `ToolFailure`, any other error thrown, rejected with or failed with, a defect, an interruption of
 * the tool's own effect and an invalid output are known failures that carry the error's message.
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
  if (error instanceof Error) return error.message
  if (typeof error === "object" && error !== null && "message" in error && typeof error.message === "string") {
    return error.message
  }
  return describeDefect(error)
}

const failed = (message: string): Execution => ({
  _tag: "Failed",
  message: message.length === 0 ? EMPTY_FAILURE_MESSAGE : message,
})

/** Classifies an error by its tag (never `instanceof`, so a second copy of this package agrees). */
export const classifyError = (error: unknown): Execution => {
  if (hasTag(error, "ToolOutcomeUnknown")) {
    return { _tag: "Unknown", message: typeof error.message === "string" ? error.message : "" }
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

const fromExit = (exit: Exit.Exit<unknown, unknown>): Execution => {
  if (Exit.isSuccess(exit)) {
    const text = plainTextOutput(exit.value)
    if (text !== undefined) return { _tag: "Succeeded", output: text }
    const output = decodeOutput(exit.value, { onExcessProperty: "error" })
    return Result.isSuccess(output)
      ? { _tag: "Succeeded", output: output.success }
      : failed(`tool returned an invalid output: ${output.failure.message}`)
  }
  const error = Cause.findError(exit.cause)
  if (Result.isSuccess(error)) return classifyError(error.success)
  const defect = Cause.findDie(exit.cause)
  if (Result.isSuccess(defect)) return classifyError(defect.success.defect)
  return failed("tool effect was interrupted")
}

/** Runs `runner` with `signal`; a synchronous throw from `execute` is classified like a rejection. */
export const execute = (runner: Runner, signal: AbortSignal): Effect.Effect<Execution> =>
  Effect.try({ try: () => runner({ signal }), catch: (error) => error }).pipe(
    Effect.flatMap(toEffect),
    Effect.exit,
    Effect.map(fromExit),
  )
