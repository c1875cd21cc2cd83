/**
 * A fitted compaction source never separates a tool call from its result: over random sessions of
 * engine-shaped turns (steps with local calls dispatched and settled or rejected, steering between
 * steps) and random limits, the fence `prepareContextCompaction` picks keeps every call of a step at
 * or below it together with its dispatch or rejection and its settlement, and its tail fits.
 */
import { FactBuilders, History } from "@maka/testkit"
import { Effect } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import * as Testing from "../src/testing.ts"
import { appendAll } from "./support/harness.ts"

interface StepSpec {
  /** Each call: dispatched and settled, or rejected. */
  readonly calls: ReadonlyArray<"settled" | "failed" | "rejected">
  readonly steerAfter: boolean
}

const turnArbitrary = fc.array(
  fc.record({ calls: fc.array(fc.constantFrom("settled", "failed", "rejected"), { maxLength: 3 }), steerAfter: fc.boolean() }),
  { minLength: 1, maxLength: 3 },
)

/** Builds the session: each turn's steps, a final text step, its terminal; then a live opening. */
const build = (sessionId: string, firstId: number, firstSequence: number, turns: ReadonlyArray<ReadonlyArray<StepSpec>>) => {
  const history = new History.History({ sessionId, firstId, firstSequence })
  let steering = 0
  turns.forEach((steps, turn) => {
    const run = history.open({ turnId: `${sessionId}-turn-${turn}`, runId: `${sessionId}-run-${turn}`, invocationId: `${sessionId}-invocation-${turn}` })
    for (const step of steps) {
      const stepId = run.request()
      const calls = step.calls.map((_, index) => ({ id: `call-${index}`, name: "read_file", input: { path: `file-${index}` } }))
      run.complete(stepId, calls.length === 0 ? FactBuilders.textStep("Thinking.") : FactBuilders.toolCallStep(calls))
      step.calls.forEach((outcome, index) => {
        if (outcome === "rejected") {
          run.reject(stepId, `call-${index}`, { kind: "unavailable" })
          return
        }
        const operation = run.dispatch(stepId, `call-${index}`)
        if (outcome === "settled") run.succeed(operation, FactBuilders.textOutput(`contents ${index}`))
        else run.fail(operation, "no such file")
      })
      if (step.steerAfter) run.steer(`${sessionId}-message-${steering++}`, "Also look here.")
    }
    run.complete(run.request(), FactBuilders.textStep("Done."))
    run.end({ kind: "completed" })
  })
  const live = history.open({ turnId: `${sessionId}-live`, runId: `${sessionId}-live`, invocationId: `${sessionId}-live` })
  return { history, live }
}

describe("fitted compaction cuts", () => {
  it("never separate a tool call from its dispatch, rejection or settlement, and always fit", async () => {
    let session = 0
    let lowered = 0
    // The sessions share one log: each starts after the sequences of the ones before it.
    let nextSequence = 1
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          yield* Effect.promise(() =>
            fc.assert(
              fc.asyncProperty(fc.array(turnArbitrary, { minLength: 1, maxLength: 4 }), fc.integer({ min: 1, max: 60 }), async (turns, maxEvents) => {
                const sessionId = `session-${session++}`
                const { history, live } = build(sessionId, 1 + session * 1_000, nextSequence, turns)
                const appended = await Effect.runPromise(appendAll(log, history.writes))
                expect(appended).toEqual(history.events.map((stored) => stored.sequence))
                nextSequence = history.highWater + 1
                const exit = await Effect.runPromiseExit(
                  log.prepareContextCompaction(sessionId, { current: live.invocation.invocationId, mode: "pre_turn", maxEvents, fit: true }),
                )
                if (exit._tag === "Failure") {
                  expect(String(exit.cause)).toContain("PrefixTooLarge")
                  return
                }
                const source = exit.value.source
                const fence = source.sourceEvidence.highWater
                expect(source.tail.length).toBeLessThanOrEqual(maxEvents)
                // Every operation with a fact at or below the fence has its call's step and all its facts there too.
                const bySequence = history.events.filter((stored) => stored.event.invocation.sessionId === sessionId)
                expect(fence).toBeGreaterThan(0)
                if (fence < live.opening.sequence - 1) lowered++
                const operations = new Map<string, Array<number>>()
                for (const stored of bySequence) {
                  const fact = stored.event.fact
                  const key =
                    fact.kind === "tool_dispatched" || fact.kind === "tool_rejected" || fact.kind === "tool_settled"
                      ? fact.operationId
                      : undefined
                  if (key !== undefined) operations.set(key, [...(operations.get(key) ?? []), stored.sequence])
                }
                const stepSequence = new Map<string, number>()
                for (const stored of bySequence) {
                  if (stored.event.fact.kind === "model_completed") stepSequence.set(stored.event.fact.stepId, stored.sequence)
                }
                for (const [operationId, sequences] of operations) {
                  const completed = stepSequence.get(operationId.slice(0, operationId.lastIndexOf(":")))!
                  const inside = [completed, ...sequences].map((sequence) => sequence <= fence)
                  expect(new Set(inside).size, `operation ${operationId} is split by the cut at ${fence}`).toBe(1)
                }
              }),
              { numRuns: 60, seed: 20261201 },
            ),
          )
          // The limits are drawn so that many sessions are cut below their full fence.
          expect(lowered).toBeGreaterThan(10)
        }),
      ),
    )
  }, 120_000)
})
