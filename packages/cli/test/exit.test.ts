import { describe, expect, it } from "vitest"
import { EngineError } from "@maka/engine"
import { exitCodeOf, failureLine, fromEngineError, inCliTerms } from "../src/internal/exit.ts"
import { failureReport } from "../src/internal/main.ts"

describe("exit codes (docs/cli.md §10.1)", () => {
  it.each([
    [{ kind: "completed" }, 0],
    [{ kind: "failed", class: "model_provider" }, 1],
    [{ kind: "failed", class: "step_limit" }, 1],
    [{ kind: "failed", class: "session_busy" }, 1],
    [{ kind: "failed", class: "reconciliation_required" }, 3],
    [{ kind: "cancelled", source: "runtime_cancellation" }, 130],
    [{ kind: "context_compact_finished", outcome: { kind: "unchanged", reason: "no_new_history" } }, 0],
  ] as const)("maps the terminal %j to %i", (outcome, code) => {
    expect(exitCodeOf(outcome)).toBe(code)
  })

  it("maps a sealed handoff pause to 75", () => {
    expect(exitCodeOf({ kind: "handoff_paused" } as Parameters<typeof exitCodeOf>[0])).toBe(75)
  })

  it.each([
    [EngineError.invalidInput("bad"), 2],
    [EngineError.busy("busy"), 1],
    [EngineError.reconciliation("unknown"), 3],
    [EngineError.cancelled(), 130],
    [EngineError.store("another writer holds the log"), 1],
    [EngineError.internal("boom"), 1],
  ])("maps a facade rejection %s to its exit code", (error, code) => {
    expect(fromEngineError(error).exitCode).toBe(code)
  })

  it("names the command line's flags and settings where the engine's message names its API", () => {
    const refused = fromEngineError(EngineError.reconciliation(EngineError.PRIOR_UNKNOWN_MESSAGE))
    expect(refused.message).toContain("`maka run --allow-prior-unknown`")
    expect(refused.message).not.toContain("allowPriorUnknown")
    const auth = failureLine({ kind: "failed", class: "model_provider", message: "HTTP 401: bad key; check the provider's apiKey (and that it belongs to this baseUrl)" })
    expect(auth).toBe("failed: model_provider: HTTP 401: bad key; check MAKA_API_KEY (and that it belongs to this --base-url)")
    expect(inCliTerms("unreachable; check that the server is running and that the provider's baseUrl is right")).toBe(
      "unreachable; check that the server is running and that --base-url is right",
    )
    expect(inCliTerms("start again with `allowPriorUnknown: true` (the model is told)")).toBe("send it with `maka run --allow-prior-unknown` (the model is told)")
  })

  it("prints a failure as failed: <class>: <message>", () => {
    expect(failureLine({ kind: "failed", class: "model_provider", message: "HTTP 400" })).toBe("failed: model_provider: HTTP 400")
    expect(failureLine({ kind: "failed", class: "step_limit" })).toBe("failed: step_limit")
  })

  it("reports an engine or log error that reached the top as one line with its exit code, never a stack", () => {
    const store = failureReport(EngineError.store("the log went away"))
    expect(store).toEqual({ line: "maka: store error: the log went away\n", code: 1 })
    // A failed commit reads as every other store failure.
    expect(failureReport(EngineError.commit("io: read ECONNRESET"))).toEqual({ line: "maka: store error: io: read ECONNRESET\n", code: 1 })
    const reconciliation = failureReport(EngineError.reconciliation("an unsealed run"))
    expect(reconciliation.code).toBe(3)
    expect(reconciliation.line.split("\n")).toHaveLength(2)
    // An error with a tagged reason from another package (an `EventLogError`, say) too.
    const tagged = failureReport(Object.assign(new Error("rejected: the invocation is sealed"), { reason: { _tag: "Rejected" } }))
    expect(tagged).toEqual({ line: "maka: error: rejected: the invocation is sealed\n", code: 1 })
    // Anything else is an internal error, with its stack for a report.
    expect(failureReport(new TypeError("boom")).line).toMatch(/^maka: internal error: TypeError: boom\n\s+at /)
  })
})
