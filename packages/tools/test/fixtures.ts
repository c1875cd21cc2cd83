/**
 * Test fixtures: real temporary directories owned by the test's scope, opened workspaces, and a
 * helper that runs a builtin tool the way the journal does (decode, then execute) and classifies it.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { ToolCall } from "@maka/facts"
import { assert } from "@effect/vitest"
import { type Tool, ToolError, Workspace } from "@maka/tools"
import { TestIds } from "@maka/tools/testing"
import { Effect, Exit, type Scope } from "effect"

/** A fresh real directory (its realpath), removed when the scope closes. */
export const tempDirectory: Effect.Effect<string, never, Scope.Scope> = Effect.acquireRelease(
  Effect.sync(() => fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "maka-tools-")))),
  (directory) => Effect.sync(() => fs.rmSync(directory, { recursive: true, force: true })),
)

/** A temporary workspace with a marker, plus a sibling directory outside it. */
export const workspaceFixture = Effect.gen(function* () {
  const base = yield* tempDirectory
  const root = path.join(base, "workspace")
  const outside = path.join(base, "outside")
  fs.mkdirSync(root)
  fs.mkdirSync(outside)
  const workspace = yield* Effect.provide(Workspace.open(root), TestIds.layer(1))
  return { base, root: workspace.root, outside, workspace }
})

export type Outcome =
  | { readonly _tag: "Invalid"; readonly message: string }
  | { readonly _tag: "Succeeded"; readonly output: ToolCall.ToolOutput }
  | { readonly _tag: "Failed"; readonly message: string }
  | { readonly _tag: "Defect"; readonly cause: unknown }

/** Decodes `input` like preparation does, then executes; a `ToolFailure` is `Failed`, anything else a defect. */
export const call = (tool: Tool.Tool, input: unknown, signal: AbortSignal = new AbortController().signal): Effect.Effect<Outcome> =>
  Effect.gen(function* () {
    const decoded = yield* Effect.exit(tool.decode(input))
    if (Exit.isFailure(decoded)) {
      return { _tag: "Invalid", message: String(decoded.cause) } satisfies Outcome
    }
    const execution = decoded.value({ signal })
    const effect = Effect.isEffect(execution) ? execution : Effect.promise(() => Promise.resolve(execution))
    const exit = yield* Effect.exit(effect)
    if (Exit.isSuccess(exit)) return { _tag: "Succeeded", output: exit.value } satisfies Outcome
    const failure = exit.cause.reasons.find((reason) => reason._tag === "Fail")
    if (failure !== undefined && failure._tag === "Fail") {
      const error = failure.error
      if (typeof error === "object" && error !== null && "_tag" in error && error._tag === "ToolFailure" && "message" in error) {
        return { _tag: "Failed", message: String(error.message) } satisfies Outcome
      }
    }
    return { _tag: "Defect", cause: exit.cause } satisfies Outcome
  })

export const textOf = (outcome: Outcome): string => {
  if (outcome._tag !== "Succeeded" || outcome.output.format !== "text") {
    throw new Error(`expected a text result, got ${JSON.stringify(outcome)}`)
  }
  return outcome.output.value
}

export const jsonOf = (outcome: Outcome): unknown => {
  if (outcome._tag !== "Succeeded" || outcome.output.format !== "json") {
    throw new Error(`expected a JSON result, got ${JSON.stringify(outcome)}`)
  }
  return outcome.output.value
}

export const failureOf = (outcome: Outcome): string => {
  if (outcome._tag !== "Failed") throw new Error(`expected a ToolFailure, got ${JSON.stringify(outcome)}`)
  return outcome.message
}

/** The message of the `InvalidDefinition` `thunk` throws; fails the test on anything else. */
export const definitionError = (thunk: () => unknown): string => {
  const thrown = (() => {
    try {
      thunk()
      return undefined
    } catch (error) {
      return error
    }
  })()
  assert.instanceOf(thrown, ToolError.ToolError)
  const error = thrown as ToolError.ToolError
  assert.strictEqual(error.reason._tag, "InvalidDefinition")
  return error.message
}
