/**
 * Runs one prepared tool call and classifies how it ended, without ever failing: a decoded
 * `ToolOutput` is a success, `ToolFailure` a known failure, and `ToolOutcomeUnknown`, any other error,
 * an invalid output, an interruption or a defect an unknown outcome (SEMANTICS.md §2.12).
 */
import { ToolCall } from "@maka/facts"
import { Cause, Effect, Exit, Result, Schema } from "effect"
import type { Execution as ToolExecution, Runner } from "../Tool.ts"
import { describeDefect } from "./describe.ts"

export type Execution =
  | { readonly _tag: "Succeeded"; readonly output: ToolCall.ToolOutput }
  | { readonly _tag: "Failed"; readonly message: string }
  | { readonly _tag: "Unknown"; readonly cause: "outcome_unknown" | "defect"; readonly message: string }

const hasTag = (value: unknown, tag: string): value is { readonly _tag: string; readonly message: unknown } =>
  typeof value === "object" && value !== null && "_tag" in value && value._tag === tag

/** Classifies an error by its tag (never `instanceof`, so a second copy of this package agrees). */
export const classifyError = (error: unknown): Execution => {
  if (hasTag(error, "ToolFailure") && typeof error.message === "string") return { _tag: "Failed", message: error.message }
  if (hasTag(error, "ToolOutcomeUnknown")) {
    return { _tag: "Unknown", cause: "outcome_unknown", message: typeof error.message === "string" ? error.message : "" }
  }
  return { _tag: "Unknown", cause: "defect", message: describeDefect(error) }
}

const decodeOutput = Schema.decodeUnknownResult(ToolCall.ToolOutput)

const isPromiseLike = (value: unknown): value is PromiseLike<unknown> =>
  typeof value === "object" && value !== null && "then" in value && typeof value.then === "function"

const toEffect = (result: ToolExecution): Effect.Effect<unknown, unknown> => {
  if (Effect.isEffect(result)) return result
  if (isPromiseLike(result)) return Effect.tryPromise({ try: () => Promise.resolve(result), catch: (error) => error })
  return Effect.die(new TypeError("execute returned neither an Effect nor a Promise"))
}

const fromExit = (exit: Exit.Exit<unknown, unknown>): Execution => {
  if (Exit.isSuccess(exit)) {
    const output = decodeOutput(exit.value, { onExcessProperty: "error" })
    return Result.isSuccess(output)
      ? { _tag: "Succeeded", output: output.success }
      : { _tag: "Unknown", cause: "defect", message: `tool returned an invalid output: ${output.failure.message}` }
  }
  const error = Cause.findError(exit.cause)
  if (Result.isSuccess(error)) return classifyError(error.success)
  const defect = Cause.findDie(exit.cause)
  if (Result.isSuccess(defect)) return { _tag: "Unknown", cause: "defect", message: describeDefect(defect.success.defect) }
  return { _tag: "Unknown", cause: "defect", message: "tool effect was interrupted" }
}

/** Runs `runner` with `signal`; a synchronous throw from `execute` is classified like a rejection. */
export const execute = (runner: Runner, signal: AbortSignal): Effect.Effect<Execution> =>
  Effect.try({ try: () => runner({ signal }), catch: (error) => error }).pipe(
    Effect.flatMap(toEffect),
    Effect.exit,
    Effect.map(fromExit),
  )
