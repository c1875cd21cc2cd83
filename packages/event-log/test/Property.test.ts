import { Canonical, EventWrite, type Fact, type Identity, type Model } from "@maka/facts"
import { FactBuilders } from "@maka/testkit"
import { Effect, Exit, Result } from "effect"
import fc from "fast-check"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"

/**
 * Random sequences of appends, legal and illegal, checked against a small reference model of
 * legality: every accepted write is legal, every illegal one is refused, and the log read back after
 * reopening holds exactly the accepted writes in order.
 */

type Action =
  | "open"
  | "request_main"
  | "request_summary"
  | "complete"
  | "interrupt"
  | "observe"
  | "dispatch"
  | "reject"
  | "settle_ok"
  | "settle_failed"
  | "end_completed"
  | "end_failed"
  | "steer"
  | "replay"

const ACTIONS: ReadonlyArray<Action> = [
  "open",
  "request_main",
  "request_summary",
  "complete",
  "interrupt",
  "observe",
  "dispatch",
  "reject",
  "settle_ok",
  "settle_failed",
  "end_completed",
  "end_failed",
  "steer",
  "replay",
]

interface Step {
  readonly stepId: string
  readonly purpose: Model.ModelPurpose
  resolved: boolean
  calls: ReadonlyArray<{ readonly id: string; readonly name: string }>
}

interface InvocationModel {
  readonly invocation: Identity.Invocation
  ended: boolean
  readonly steps: Array<Step>
  readonly dispatched: Set<string>
  readonly settled: Set<string>
  readonly rejected: Set<string>
}

class Model_ {
  readonly invocations: Array<InvocationModel> = []
  readonly steered = new Set<string>()
  readonly accepted: Array<EventWrite.EventWrite> = []
  private ids = 1
  private steps = 0

  nextId(): string {
    return FactBuilders.eventId(this.ids++)
  }

  get latest(): InvocationModel | undefined {
    return this.invocations[this.invocations.length - 1]
  }

  get live(): InvocationModel | undefined {
    return this.invocations.find((item) => !item.ended)
  }

  nextStepId(): string {
    return `step-${++this.steps}`
  }
}

const write = (model: Model_, invocation: Identity.Invocation, fact: Fact.Fact) =>
  Result.getOrThrow(EventWrite.plain({ id: model.nextId(), recordedAt: 0, invocation, fact }))

interface Planned {
  readonly write: EventWrite.EventWrite
  readonly legal: boolean
  readonly apply: () => void
}

const operation = (stepId: string, callId: string) => `${stepId}:${callId}`

/** Turns an action and a choice into one concrete write, its legality under the model, and its effect. */
const plan = (model: Model_, action: Action, pick: number): Planned | undefined => {
  const target = model.latest
  const isLive = target !== undefined && !target.ended
  const noop = () => {}
  switch (action) {
    case "open": {
      const index = model.invocations.length + 1
      const invocation = FactBuilders.invocation({ turnId: `turn-${index}`, runId: `run-${index}`, invocationId: `invocation-${index}` })
      const entry: InvocationModel = { invocation, ended: false, steps: [], dispatched: new Set(), settled: new Set(), rejected: new Set() }
      return {
        write: write(model, invocation, { kind: "invocation_opened", input: { kind: "message", content: { text: `message ${index}` } }, configuration: FactBuilders.configuration() }),
        legal: model.live === undefined,
        apply: () => model.invocations.push(entry),
      }
    }
    case "request_main":
    case "request_summary": {
      if (target === undefined) return undefined
      const purpose = action === "request_main" ? "main" : "summary"
      const stepId = model.nextStepId()
      return {
        write: write(model, target.invocation, {
          kind: "model_requested",
          stepId,
          modelId: "test-model",
          purpose,
          sourceScope: { kind: "session", id: "session-1" },
          sourceHighWater: 0,
          sourceDigest: FactBuilders.digestOf("source"),
          inputDigest: FactBuilders.digestOf("input"),
          routeIdentity: FactBuilders.digestOf("route"),
        }),
        legal: isLive && !target.steps.some((step) => step.purpose === purpose && !step.resolved),
        apply: () => target.steps.push({ stepId, purpose, resolved: false, calls: [] }),
      }
    }
    case "complete":
    case "interrupt":
    case "observe": {
      if (target === undefined || target.steps.length === 0) return undefined
      const step = target.steps[pick % target.steps.length]!
      const calls = action === "complete" && step.purpose === "main" ? Array.from({ length: pick % 3 }, (_, index) => ({ id: `c${index}`, name: index % 2 === 0 ? "read_file" : "list_files" })) : []
      const fact: Fact.Fact =
        action === "complete"
          ? { kind: "model_completed", stepId: step.stepId, output: calls.length === 0 ? FactBuilders.textStep("answer") : FactBuilders.toolCallStep(calls) }
          : action === "interrupt"
            ? { kind: "model_interrupted", stepId: step.stepId, status: "failed" }
            : { kind: "model_observed", stepId: step.stepId, event: { kind: "part_delta", id: "0", text: "x" } }
      return {
        write: write(model, target.invocation, fact),
        legal: isLive && !step.resolved,
        apply: () => {
          if (action === "observe") return
          step.resolved = true
          if (action === "complete") step.calls = calls
        },
      }
    }
    case "dispatch":
    case "reject": {
      if (target === undefined) return undefined
      const calls = target.steps.flatMap((step) => step.calls.map((call) => ({ step, call })))
      if (calls.length === 0) return undefined
      const { step, call } = calls[pick % calls.length]!
      const operationId = operation(step.stepId, call.id)
      const base = { operationId, call: { toolCallId: call.id, origin: { kind: "provider" as const, stepId: step.stepId } }, name: call.name, input: {} }
      return {
        write: write(model, target.invocation, action === "dispatch" ? { kind: "tool_dispatched", ...base } : { kind: "tool_rejected", ...base, reason: { kind: "cancelled" } }),
        legal: isLive && !target.dispatched.has(operationId) && !target.rejected.has(operationId),
        apply: () => (action === "dispatch" ? target.dispatched : target.rejected).add(operationId),
      }
    }
    case "settle_ok":
    case "settle_failed": {
      if (target === undefined) return undefined
      const known = [...target.dispatched, ...target.rejected, "unknown:op"]
      const operationId = known[pick % known.length]!
      const built =
        action === "settle_ok"
          ? Result.getOrThrow(EventWrite.toolSuccess({ id: model.nextId(), recordedAt: 0, invocation: target.invocation, operationId, output: FactBuilders.textOutput(`out ${pick}`) }))
          : write(model, target.invocation, { kind: "tool_settled", operationId, outcome: { kind: "failed", message: "boom" } })
      return {
        write: built,
        legal: isLive && target.dispatched.has(operationId) && !target.settled.has(operationId),
        apply: () => target.settled.add(operationId),
      }
    }
    case "end_completed":
    case "end_failed": {
      if (target === undefined) return undefined
      const clean =
        target.steps.every((step) => step.resolved) &&
        [...target.dispatched].every((id) => target.settled.has(id)) &&
        target.steps.every((step) =>
          step.purpose !== "main" || step.calls.every((call) => target.dispatched.has(operation(step.stepId, call.id)) || target.rejected.has(operation(step.stepId, call.id))),
        )
      return {
        write: write(model, target.invocation, {
          kind: "invocation_ended",
          outcome: action === "end_completed" ? { kind: "completed" } : { kind: "failed", class: "runtime_internal" },
        }),
        legal: isLive && (action === "end_failed" || clean),
        apply: () => {
          target.ended = true
        },
      }
    }
    case "steer": {
      if (target === undefined) return undefined
      const messageId = `m${pick % 3}`
      return {
        write: write(model, target.invocation, { kind: "message_steered", message: FactBuilders.deliveredMessage(messageId, "more") }),
        legal: isLive && !model.steered.has(messageId),
        apply: () => model.steered.add(messageId),
      }
    }
    case "replay": {
      if (model.accepted.length === 0) return undefined
      const previous = model.accepted[pick % model.accepted.length]!
      return { write: previous, legal: true, apply: noop }
    }
  }
}

const openLog = (file: string) => EventLog.fromDatabase(() => openSqlite(file, { synchronous: "NORMAL" }))

const runCommands = (file: string, commands: ReadonlyArray<{ readonly action: Action; readonly pick: number }>) =>
  Effect.scoped(
    Effect.gen(function* () {
      const log = yield* openLog(file)
      const model = new Model_()
      for (const command of commands) {
        const planned = plan(model, command.action, command.pick)
        if (planned === undefined) continue
        const exit = yield* Effect.exit(log.append(planned.write))
        if (Exit.isSuccess(exit) !== planned.legal) {
          throw new Error(
            `${command.action} ${planned.legal ? "legal but refused" : "illegal but accepted"}: ${Exit.isSuccess(exit) ? "accepted" : String(exit.cause)}`,
          )
        }
        if (Exit.isSuccess(exit)) {
          if (!model.accepted.includes(planned.write)) model.accepted.push(planned.write)
          planned.apply()
        }
      }
      return model.accepted.map((item) => item.json)
    }),
  )

const readJson = (file: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      const log = yield* openLog(file)
      const events = yield* log.events("session-1")
      return events.map((stored) => Canonical.stringify(stored.event))
    }),
  )

describe("append legality", () => {
  it("accepts exactly the legal writes of random sequences, and reads back what it accepted after reopening", async () => {
    const directory = fs.mkdtempSync(path.join(os.tmpdir(), "maka-property-"))
    let runs = 0
    try {
      await fc.assert(
        fc.asyncProperty(
          fc.array(fc.record({ action: fc.constantFrom(...ACTIONS), pick: fc.nat(20) }), { minLength: 10, maxLength: 80, size: "max" }),
          async (commands) => {
            const file = path.join(directory, `run-${runs++}.sqlite`)
            const accepted = await Effect.runPromise(runCommands(file, commands))
            const stored = await Effect.runPromise(readJson(file))
            expect(stored).toEqual(accepted)
          },
        ),
        { numRuns: 60, seed: 20261129 },
      )
    } finally {
      fs.rmSync(directory, { recursive: true, force: true })
    }
  }, 120_000)
})
