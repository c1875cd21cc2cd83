/**
 * The context an engine keeps across steps and runs (docs/engine.md §5.4,
 * src/internal/live-context.ts) against fresh reads, over generated sessions of real runs: turns of
 * tool steps whose calls are small, over one page (archived by prune before the next request) or
 * invalid (rejected); steps retried after a replay-safe failure; provider usage that moves the
 * output limit and makes compaction due (the summary made before the next request, or in the
 * background beside it); runs of another writer appended between turns (an append the engine did
 * not make); steering, a cancellation or a handoff that arrives while a step's request waits for
 * its answer or while its first effect runs, or another engine's start in the live session (the
 * successor resumed by the same engine or by another over the same log, the host handing off every
 * live run and the next engine resuming the pauses it finds, or the pause abandoned); the session
 * moved to another engine between turns (the last one closed, the next recovering what it left
 * open); runs of another session on the same engine between turns or beside a turn, and standalone
 * compactions between turns; tools that fail, and tools that cannot tell whether their effect
 * happened; turns that continue the session's latest run (docs/engine.md §5.9) instead of sending a
 * message, when `checkContinuation` allows it (a refusal is `continueRun`'s too, and writes
 * nothing); runs that end at their step budget after a tool step; and a turn whose commit the store
 * refuses or answers with an unknown outcome (after writing it) at a generated point. The spy of
 * `support/live-comparison.ts` compares the live context with a fresh `readModelContext` after
 * every commit, and every request the model received with one rebuilt from a fresh read at its cut.
 *
 * After a fault the session stays usable: every later turn completes, except that a dispatch whose
 * commit outcome was unknown, or whose tool could not tell what its effect did, refuses the next
 * message (docs/engine.md §5.8), the session then going
 * on with explicit messages (`allowPriorUnknown`), and that a pause which landed although its
 * outcome was unknown reserves the session until the host abandons it. No wait hangs and no effect
 * runs twice. The same sessions run on PostgreSQL when `MAKA_TEST_DATABASE_URL` names a server;
 * `MAKA_PROPERTY_SEED` and `MAKA_PROPERTY_RUNS` change the seed and the number of sessions;
 * `MAKA_PROPERTY_PRINT=1` prints how often the sessions reached each case.
 */
import { assert, describe, it } from "@effect/vitest"
import type { Event, EventWrite, Identity, Outcome, ToolCall } from "@maka/facts"
import { EventLog, EventLogError } from "@maka/event-log"
import { FactBuilders, History, OpenAiSse, Respond, type ScriptedServer } from "@maka/testkit"
import { Ids, Tool, ToolCatalog } from "@maka/tools"
import { Cause, Effect, Exit, Fiber, Option } from "effect"
import * as fc from "fast-check"
import * as Engine from "../src/Engine.ts"
import * as EngineError from "../src/EngineError.ts"
import { isSummaryPrompt, isSummaryRequest, summaryAnswer, summaryText } from "./support/compaction.ts"
import { recording } from "./support/harness.ts"
import { comparing, newComparison, type Comparison, type Settings } from "./support/live-comparison.ts"
import { databaseUrl, echoTool, input, postgresLog, setup, type SetupExtras } from "./support/setup.ts"

// ---------------------------------------------------------------------------------------------
// The generated session
// ---------------------------------------------------------------------------------------------

/**
 * A call of `echo`: a small result, one over a page, an input the tool's schema refuses, a known
 * failure the model reads, or an effect whose outcome the tool cannot tell (`ToolOutcomeUnknown`:
 * the run ends `failed {outcome_unknown}`, docs/engine.md §5.4 step 14).
 */
type Call = "small" | "big" | "invalid" | "failing" | "unknown"

interface Step {
  /** The step's calls; none: the step answers and ends the turn. */
  readonly calls: ReadonlyArray<Call>
  /** The step's first attempt fails replay-safely after some output; its retry then answers. */
  readonly retry: boolean
  /** The prompt tokens the provider reports (the next request's output limit follows them). */
  readonly promptTokens: number
}

/** A commit the store fails: refused or failing before it writes, or written with an unknown outcome. */
type FaultKind = "refused" | "database" | "unknown"

interface Fault {
  /**
   * Which of the turn's commits fails: its n-th (0: its first; a turn with fewer meets none), the
   * first that carries a dispatch, the first that carries a settlement (with the next request or
   * dispatch), or its terminal's.
   */
  readonly at: number | "dispatch" | "settle" | "terminal"
  readonly kind: FaultKind
}

/**
 * What arrives while the request of step `at` (its answer's attempt) waits for the answer, or while
 * the tool step's first effect runs: steering, a cancellation, or a handoff (the run pauses at its
 * next step boundary and this engine resumes its successor, which goes on with the turn).
 */
interface Interrupt {
  readonly at: number
  /**
   * `tool`: while the first valid call of step `at` (a tool step) runs; `retry`: while the attempt
   * of step `at` that fails replay-safely waits for its answer, so the interrupt meets the step
   * waiting to retry (docs/engine.md §5.10); absent: while the request of its answered attempt waits.
   */
  readonly during?: "tool" | "retry" | undefined
  /**
   * `handoff-away`: the successor is resumed by another engine over the same log, which then serves
   * the session. `close-away`: the host hands off every live run (`handOffAll`) and closes, and the
   * next engine starts the pauses it finds (`resumePending`), as a host moving to another process.
   * `handoff-abandon`: the pause is released instead (`abandonHandoff`), and the turn ends there.
   * `rival`: another engine over the same log starts a message run in the session, which is refused
   * (the session has an unsealed run) with nothing written; the turn goes on.
   */
  readonly kind: "steer" | "cancel" | "handoff" | "handoff-away" | "close-away" | "handoff-abandon" | "rival"
}

type Operation =
  | {
      readonly kind: "turn"
      readonly steps: ReadonlyArray<Step>
      readonly fault?: Fault | undefined
      readonly interrupt?: Interrupt | undefined
      /**
       * The turn continues the session's latest run (docs/engine.md §5.9) instead of sending a
       * message, when `checkContinuation` allows it; otherwise it sends its message.
       */
      readonly continues: boolean
      /** The run's step budget ends it after its last tool step (`step_limit`): its last message is a tool result. */
      readonly stepLimit: boolean
      /**
       * A run of another session on the same engine runs beside the turn (a tool step, then its
       * answer), from the turn's start; not with an interrupt that moves the session to another engine.
       */
      readonly beside?: boolean | undefined
    }
  /** Another writer's sealed run in the session, with a tool step or with its message only. */
  | { readonly kind: "foreign"; readonly toolStep: boolean }
  /**
   * The session moves to another engine over the same log, as to a new process: this one closes,
   * the next recovers what is left open (docs/engine.md §5.3) and serves the later turns.
   */
  | { readonly kind: "move" }
  /** A standalone compaction of the session between turns (docs/engine.md §5.12). */
  | { readonly kind: "compact" }
  /** A run of another session on the same engine between turns (one answer, or a tool step first). */
  | { readonly kind: "elsewhere"; readonly toolStep: boolean }

const promptTokens = fc.constantFrom(500, 2_000, 6_000)
const retry = fc.integer({ min: 0, max: 4 }).map((value) => value === 0)
const toolStep: fc.Arbitrary<Step> = fc.record({
  calls: fc.array(
    fc.oneof(
      { weight: 16, arbitrary: fc.constant<Call>("small") },
      { weight: 4, arbitrary: fc.constant<Call>("big") },
      { weight: 4, arbitrary: fc.constant<Call>("invalid") },
      { weight: 2, arbitrary: fc.constant<Call>("failing") },
      { weight: 1, arbitrary: fc.constant<Call>("unknown") },
    ),
    { minLength: 1, maxLength: 3 },
  ),
  retry,
  promptTokens,
})
const lastStep: fc.Arbitrary<Step> = fc.record({ calls: fc.constant([]), retry, promptTokens })
const fault: fc.Arbitrary<Fault | undefined> = fc.oneof(
  { weight: 3, arbitrary: fc.constant(undefined) },
  {
    weight: 2,
    arbitrary: fc.record({
      at: fc.oneof(fc.integer({ min: 0, max: 6 }), fc.constantFrom("dispatch" as const, "settle" as const, "terminal" as const)),
      kind: fc.constantFrom<FaultKind>("refused", "database", "unknown"),
    }),
  },
)
const interruptKind = fc.constantFrom<Interrupt["kind"]>("steer", "cancel", "handoff", "handoff-away", "close-away", "handoff-abandon", "rival")
const interrupt = fc.oneof(
  { weight: 1, arbitrary: fc.constant(undefined) },
  {
    weight: 1,
    arbitrary: fc.record({ at: fc.nat({ max: 3 }), kind: interruptKind, during: fc.constantFrom<"request" | "tool" | "retry">("request", "request", "tool", "retry") }),
  },
)
const turn: fc.Arbitrary<Operation> = fc
  .tuple(fc.array(toolStep, { maxLength: 3 }), lastStep, fault, interrupt, fc.integer({ min: 0, max: 3 }), fc.boolean(), fc.integer({ min: 0, max: 3 }))
  .map(([steps, last, fault, interrupt, continues, stepLimit, beside]) => ({
    kind: "turn",
    steps: [...steps, last],
    fault,
    // At one of the turn's steps; during a tool only at a tool step with a call the tool runs.
    interrupt: interrupt === undefined ? undefined : interruptAt(steps, last, interrupt),
    continues: continues === 0,
    // Only a turn with a tool step and nothing arriving mid-turn (steering would add a step).
    stepLimit: stepLimit && steps.length > 0 && interrupt === undefined,
    beside: beside === 0 && interrupt?.kind !== "handoff-away" && interrupt?.kind !== "close-away",
  }))
/** The generated interrupt at one of the turn's steps (`toolSteps` and its answer). */
function interruptAt(
  toolSteps: ReadonlyArray<Step>,
  last: Step,
  generated: { readonly at: number; readonly kind: Interrupt["kind"]; readonly during: "request" | "tool" | "retry" },
): Interrupt {
  const { at, kind, during } = generated
  const among = (matches: (step: Step) => boolean, steps: ReadonlyArray<Step>) =>
    steps.flatMap((step, index) => (matches(step) ? [index] : []))
  const running = among((step) => step.calls.some((call) => call !== "invalid"), toolSteps)
  if (during === "tool" && running.length > 0) return { at: running[at % running.length]!, kind, during }
  const retrying = among((step) => step.retry, [...toolSteps, last])
  if (during === "retry" && retrying.length > 0) return { at: retrying[at % retrying.length]!, kind, during }
  return { at: at % (toolSteps.length + 1), kind }
}

const operation: fc.Arbitrary<Operation> = fc.oneof(
  { weight: 3, arbitrary: turn },
  { weight: 1, arbitrary: fc.boolean().map((toolStep) => ({ kind: "foreign", toolStep }) as const) },
  { weight: 1, arbitrary: fc.constant({ kind: "move" } as const) },
  { weight: 1, arbitrary: fc.constant({ kind: "compact" } as const) },
  { weight: 1, arbitrary: fc.boolean().map((toolStep) => ({ kind: "elsewhere", toolStep }) as const) },
)
interface Session {
  readonly operations: ReadonlyArray<Operation>
  /** 1: a summary is made in the foreground before the request; 4: a spare slot makes it in the background. */
  readonly concurrency: 1 | 4
}

const session: fc.Arbitrary<Session> = fc.record({
  operations: fc.array(operation, { minLength: 2, maxLength: 8 }),
  concurrency: fc.constantFrom(1 as const, 4 as const),
})

// ---------------------------------------------------------------------------------------------
// The tool, the script and the other writer
// ---------------------------------------------------------------------------------------------

/** Over one page (7,500 UTF-16 units): prune archives such a result before the next request. */
const PADDING = "x".repeat(8_000)

/** The effect `echo` holds: it runs, says so, and returns once released. */
interface ToolHold {
  value: string | undefined
  readonly entered: () => void
  readonly released: Promise<void>
}

/**
 * `echo`, whose result for a value marked `big ` is over one page, which fails for one marked `fail `
 * and cannot tell its outcome for one marked `unknown `, and whose effect for `hold.value` waits
 * for its release first.
 */
const echoOf = (ran: Array<string>, hold: { current: ToolHold | undefined }) =>
  ToolCatalog.make([
    echoTool({ ran }, (value) => {
      const result: Effect.Effect<ToolCall.ToolOutput, Tool.ToolFailure | Tool.ToolOutcomeUnknown> = value.startsWith("fail ")
        ? Tool.fail(`echo failed for ${value}`)
        : value.startsWith("unknown ")
          ? Effect.fail(new Tool.ToolOutcomeUnknown({ message: `echo lost track of ${value}` }))
          : Effect.succeed(Tool.text(value.startsWith("big ") ? `echo: ${value} ${PADDING}` : `echo: ${value}`))
      const held = hold.current
      if (held === undefined || held.value !== value) return result
      held.entered()
      return Effect.andThen(Effect.promise(() => held.released), result)
    }),
  ])

const MARKS: Record<Call, string> = { small: "", big: "big ", invalid: "", failing: "fail ", unknown: "unknown " }

const valueOf = (session: number, turn: number, step: number, call: number, kind: Call) => `${MARKS[kind]}v${session}-${turn}-${step}-${call}`

const argumentsOf = (value: string, kind: Call) => JSON.stringify({ value: kind === "invalid" ? 5 : value })

const usage = (prompt: number) => ({ prompt_tokens: prompt, completion_tokens: 100, total_tokens: prompt + 100 })

/** Resolves once the `count + 1`-th main request from the session's request `base` on arrived (summaries skipped). */
const mainRequestArrived = (server: ScriptedServer.ScriptedServer, base: number, count: number): Promise<void> =>
  (async () => {
    for (let index = base, seen = 0; ; index++) {
      const request = await server.request(index)
      if (isSummaryRequest(request) || request.body.includes(BESIDE)) continue
      if (seen === count) return
      seen++
    }
  })()

/** What the messages of a run beside a turn begin with: the session's turns leave its requests alone. */
const BESIDE = "Beside the turn "

/** Which turn's entries the server answers with: those of a turn that ended early never match later. */
interface Routing {
  active: number
}

/**
 * The step's answer, after a replay-safe failure when the step retries; `gate`, when given, holds
 * the answer, or the failure when `holdFailure`.
 */
const responsesOf = (
  sessionIndex: number,
  turnIndex: number,
  stepIndex: number,
  step: Step,
  gate?: Respond.Gate,
  holdFailure = false,
): ReadonlyArray<Respond.Responder> => {
  const answer =
    step.calls.length === 0
      ? Respond.sse(OpenAiSse.response({ text: [`Turn ${turnIndex} `, "is done."], usage: usage(step.promptTokens) }))
      : Respond.sse(
          OpenAiSse.response({
            text: stepIndex % 2 === 0 ? [] : ["Calling."],
            toolCalls: step.calls.map((kind, call) => ({
              id: `call-${sessionIndex}-${turnIndex}-${stepIndex}-${call}`,
              name: "echo",
              arguments: [argumentsOf(valueOf(sessionIndex, turnIndex, stepIndex, call, kind), kind)],
            })),
            usage: usage(step.promptTokens),
          }),
        )
  const held = (respond: Respond.Responder, holds: boolean) => (gate === undefined || !holds ? respond : Respond.hold(gate, respond))
  const answered = held(answer, !holdFailure)
  return step.retry ? [held(Respond.dropAfter([OpenAiSse.role(), OpenAiSse.text("a half ans")]), holdFailure), answered] : [answered]
}

/** How many main requests of the turn come before step `at`'s answered attempt. */
const requestsBefore = (steps: ReadonlyArray<Step>, at: number): number =>
  steps.slice(0, at).reduce((count, step) => count + (step.retry ? 2 : 1), 0) + (steps[at]!.retry ? 1 : 0)

/** Another writer's run in the session: its message, and a settled tool step when asked. */
const foreignWrites = (sessionIndex: number, index: number, withToolStep: boolean) => {
  const history = new History.History({ sessionId: "session-1", firstId: 100_000 + index * 1_000 })
  const names = { turnId: `other-turn-${index}`, runId: `other-run-${index}`, invocationId: `other-invocation-${index}` }
  const run = history.open({ ...names, message: `A note ${sessionIndex}-${index} from elsewhere.` })
  if (!withToolStep) {
    run.end()
    return history.writes
  }
  const step = run.request()
  const id = `other-call-${index}`
  run.complete(step, FactBuilders.toolCallStep([{ id, name: "echo", input: { value: `other ${index}` } }]))
  run.succeed(run.dispatch(step, id), FactBuilders.textOutput(`echo: other ${index}`))
  run.end({ kind: "failed", class: "runtime_internal" })
  return history.writes
}

/**
 * The fault of the turn being played: the commits of the turn's own run counted from its start (the
 * engine's seal of an earlier run whose terminal a fault kept out is not the turn's, and a store
 * refuses such a seal only when the run is sealed already).
 */
interface Injection {
  fault: Fault | undefined
  invocationId: string
  commits: number
  fired: FaultKind | undefined
}

const errorOf = (kind: FaultKind): EventLogError.EventLogError =>
  kind === "refused"
    ? EventLogError.rejected({ _tag: "InvalidTransition", reason: "refused by the test's store" })
    : kind === "database"
      ? EventLogError.make({ _tag: "Database", message: "disk I/O error (injected)" })
      : EventLogError.make({ _tag: "OutcomeUnknown", message: "the connection dropped during COMMIT (injected)" })

/**
 * The log with the injection's fault at its commit: refused before it writes, or written, then
 * unknown. A request committed with an unknown outcome is never sent, so the request the comparison
 * expects for it is dropped.
 */
const injecting = (injection: Injection, comparison: Comparison, log: EventLog.EventLogShape): EventLog.EventLogShape => {
  const appendBatch: EventLog.EventLogShape["appendBatch"] = (writes, complete) =>
    Effect.suspend(() => {
      const fault = injection.fault
      if (fault === undefined || writes.every((write) => write.event.invocation.invocationId !== injection.invocationId)) {
        return log.appendBatch(writes, complete)
      }
      const index = injection.commits++
      const kinds = { dispatch: "tool_dispatched", settle: "tool_settled", terminal: "invocation_ended" } as const
      const target = typeof fault.at === "number" ? index === fault.at : writes.some((write) => write.event.fact.kind === kinds[fault.at as keyof typeof kinds])
      if (injection.fired !== undefined || !target) return log.appendBatch(writes, complete)
      injection.fired = fault.kind
      if (fault.kind !== "unknown") return Effect.fail(errorOf(fault.kind))
      let trailing: ReadonlyArray<EventWrite.EventWrite> = []
      const spied = complete === undefined ? undefined : (sequences: ReadonlyArray<number>, prior?: (sessionId: string) => number | undefined) => (trailing = complete(sequences, prior))
      return Effect.andThen(
        log.appendBatch(writes, spied),
        Effect.suspend(() => {
          if ([...writes, ...trailing].some((write) => write.event.fact.kind === "model_requested")) comparison.expected.pop()
          return Effect.fail(errorOf(fault.kind))
        }),
      )
    })
  return { ...log, appendBatch, append: (write) => Effect.map(appendBatch([write]), (sequences) => sequences[0]!) }
}

/** The reason of a refusal, or the success. */
const reasonOf = <A>(exit: Exit.Exit<A, EngineError.EngineError>) =>
  Exit.isSuccess(exit) ? "succeeded" : Option.getOrUndefined(Option.map(Cause.findErrorOption(exit.cause), (error) => error.reason))

/** Whether `reason` is a `ReconciliationRequired` refusal (with `message`, when given). */
const isReconciliation = (reason: ReturnType<typeof reasonOf>, message?: string): boolean =>
  reason !== "succeeded" && reason?._tag === "ReconciliationRequired" && (message === undefined || reason.message === message)

/** Dispatches of the session with no settlement: what an unknown dispatch commit leaves to reconciliation. */
const unsettledDispatches = (events: ReadonlyArray<Event.StoredEvent>): number => {
  const open = new Set<string>()
  for (const { event } of events) {
    const fact = event.fact
    if (fact.kind === "tool_dispatched") open.add(fact.operationId)
    if (fact.kind === "tool_settled") open.delete(fact.operationId)
  }
  return open.size
}

// ---------------------------------------------------------------------------------------------
// A session played, and what the generator reached
// ---------------------------------------------------------------------------------------------

const newTotals = () => ({
  sessions: 0,
  requests: 0,
  retries: 0,
  archived: 0,
  rejected: 0,
  foreign: 0,
  faults: 0,
  afterFault: 0,
  reconciliation: 0,
  foreignRefused: 0,
  steered: 0,
  cancelled: 0,
  checkpoints: 0,
  handedOff: 0,
  handedAway: 0,
  closedAway: 0,
  elsewhere: 0,
  abandonedPauses: 0,
  continued: 0,
  continuationsRefused: 0,
  stepLimited: 0,
  duringTool: 0,
  duringRetry: 0,
  rivalsRefused: 0,
  beside: 0,
  failedEffects: 0,
  unknownEffects: 0,
  compacted: 0,
  compactRefused: 0,
  moved: 0,
  recovered: 0,
  abandoned: 0,
  backgroundCheckpoints: 0,
})
type Totals = ReturnType<typeof newTotals>
let sessions = 0

/** Plays one generated session on a fresh log: a temporary SQLite file, or `openLog`'s. */
const play = ({ operations, concurrency }: Session, totals: Totals, openLog?: SetupExtras["openLog"]) =>
  Effect.scoped(
    Effect.gen(function* () {
      const sessionIndex = ++sessions
      const comparison = newComparison()
      const injection: Injection = { fault: undefined, invocationId: "", commits: 0, fired: undefined }
      const routing: Routing = { active: -1 }
      let settings: Settings | undefined
      // Every summary is answered; the main requests are counted apart from them.
      const summaries = { match: isSummaryRequest, respond: summaryAnswer(summaryText(`summary of session ${sessions}`)), repeat: true }
      const context = yield* setup({ script: [summaries] }, undefined, { concurrency }, {
        wrapLog: (log) => injecting(injection, comparison, comparing(comparison, "session-1", () => settings!, log)),
        ...(openLog === undefined ? {} : { openLog }),
      })
      const ran: Array<string> = []
      const completedValues: Array<string> = []
      // The effect a turn's interrupt arrives during, if any.
      const hold: { current: ToolHold | undefined } = { current: undefined }
      const tools = echoOf(ran, hold)
      const spy = recording(context.model)
      // The engine serving the session; after a move, another one over the same (spied) log.
      let engine = context.engine
      // The session's latest run this engine started: what a continuation continues.
      let latest: Identity.Invocation | undefined
      const moveEngine = Effect.gen(function* () {
        yield* engine.close
        engine = yield* Engine.make({ backoffBaseMs: 5, backoffMaxMs: 40 }).pipe(
          Effect.provideService(EventLog.EventLog, context.engine.log),
          Effect.provide(Ids.layer),
        )
        // A new process recovers what the last one left open before it admits a run (on SQLite at its
        // open; a host that knows the other one gone, as here, on PostgreSQL too).
        const report = yield* engine.recover
        assert.deepStrictEqual(report.unsealed, [], JSON.stringify(operations))
        totals.recovered += report.sealed.length
      })
      let foreign = 0
      let faulted = false
      // A turn cancelled or faulted ran the effects of its calls up to where it stopped.
      let partial = false
      // Only a commit whose outcome is unknown may leave a dispatch without its settlement.
      let unknownFired = false
      // Once a message was refused for it, the session's turns are explicit messages (allowPriorUnknown).
      let priorUnknown = false
      for (const [turnIndex, operation] of operations.entries()) {
        if (operation.kind === "elsewhere") {
          // Answered only while this operation plays, whatever the session's own requests wait for.
          routing.active = turnIndex
          const marker = `Elsewhere ${sessionIndex}-${turnIndex}.`
          const respond = (respond: Respond.Responder) =>
            context.server.push({ match: (request) => request.body.includes(marker) && routing.active === turnIndex, respond })
          if (operation.toolStep) {
            respond(Respond.sse(OpenAiSse.response({ toolCalls: [{ id: `elsewhere-${turnIndex}`, name: "echo", arguments: [JSON.stringify({ value: marker })] }] })))
          }
          respond(Respond.sse(OpenAiSse.response({ text: ["Done elsewhere."] })))
          // The unspied model: the requests compared are the session's own.
          const start = input(context, marker, tools)
          Object.assign(injection, { fault: undefined, invocationId: start.invocation.invocationId, commits: 0, fired: undefined })
          const other = yield* Effect.exit(engine.run({ ...start, invocation: { ...start.invocation, sessionId: "session-2" } }))
          assert.deepStrictEqual(Exit.isSuccess(other) ? other.value.outcome : other.cause, { kind: "completed" }, JSON.stringify(operations))
          if (operation.toolStep) completedValues.push(marker)
          totals.elsewhere++
          continue
        }
        if (operation.kind === "move") {
          yield* moveEngine
          totals.moved++
          continue
        }
        if (operation.kind === "compact") {
          const start = input(context, "", tools, {
            model: spy.model,
            context: { providerId: "provider-1", modelContextWindow: 20_000, declaredWindow: 6_000 },
          })
          const { message: _message, tools: _tools, ...compact } = start
          settings = start
          Object.assign(injection, { fault: undefined, invocationId: start.invocation.invocationId, commits: 0, fired: undefined })
          const compacted = yield* Effect.exit(engine.compact(compact))
          if (Exit.isSuccess(compacted)) {
            const outcome = compacted.value.outcome
            assert.strictEqual(outcome.kind, "context_compact_finished", JSON.stringify(outcome))
            if (outcome.kind === "context_compact_finished" && outcome.outcome.kind === "compacted") totals.compacted++
          } else {
            // Only a session a fault left waiting for the host refuses it (as it refuses a message).
            const reason = reasonOf(compacted)
            assert.isTrue(unknownFired && reason !== "succeeded" && (reason?._tag === "ReconciliationRequired" || reason?._tag === "Busy"), `compaction: ${JSON.stringify(reason)}`)
            totals.compactRefused++
          }
          continue
        }
        if (operation.kind === "foreign") {
          const appended = yield* Effect.exit(context.log.appendBatch(foreignWrites(sessionIndex, ++foreign, operation.toolStep)))
          // A run whose terminal a fault kept from the log stays open until the engine's next start
          // on the session seals it (docs/engine.md §5.3, step 8): another writer's run waits until then.
          if (Exit.isFailure(appended)) {
            const refusal = Cause.findErrorOption(appended.cause)
            // …or a pause that landed although its commit's outcome was unknown reserves it for its successor.
            const busy =
              Option.isSome(refusal) &&
              refusal.value.reason._tag === "Rejected" &&
              (refusal.value.reason.rejection._tag === "SessionBusy" || refusal.value.reason.rejection._tag === "Reserved")
            assert.isTrue(faulted && busy, `another writer's run refused: ${Cause.pretty(appended.cause)}`)
            totals.foreignRefused++
          }
          continue
        }
        routing.active = turnIndex
        const values: Array<string> = []
        const gate = Respond.gate()
        const held = operation.interrupt
        const duringTool = held?.during === "tool"
        // The first call of the held step that the tool runs, when the interrupt arrives during it.
        let toolEntered = () => {}
        const entered = new Promise<void>((resolve) => (toolEntered = resolve))
        let releaseTool = () => {}
        const released = new Promise<void>((resolve) => (releaseTool = resolve))
        const heldCall = duringTool ? operation.steps[held.at]!.calls.findIndex((call) => call !== "invalid") : -1
        hold.current =
          heldCall < 0 ? undefined : { value: valueOf(sessionIndex, turnIndex, held!.at, heldCall, operation.steps[held!.at]!.calls[heldCall]!), entered: toolEntered, released }
        /** Lets the held answer or the held effect go on. */
        const release = () => {
          gate.release()
          releaseTool()
        }
        const push = (respond: Respond.Responder) =>
          context.server.push({
            match: (request) => !isSummaryRequest(request) && !request.body.includes(BESIDE) && routing.active === turnIndex,
            respond,
          } satisfies ScriptedServer.ScriptEntry)
        operation.steps.forEach((step, stepIndex) => {
          const holds = held?.at === stepIndex && !duringTool
          for (const respond of responsesOf(sessionIndex, turnIndex, stepIndex, step, holds ? gate : undefined, held?.during === "retry")) push(respond)
          step.calls.forEach((kind, call) => {
            if (kind !== "invalid") values.push(valueOf(sessionIndex, turnIndex, stepIndex, call, kind))
          })
        })
        // Steering that arrives during the answer is delivered by one more step (docs/engine.md §5.4).
        if (held?.kind === "steer") push(Respond.sse(OpenAiSse.response({ text: [`Turn ${turnIndex} is done, as steered.`] })))
        const base = context.server.requests().length
        const inputOf = (allowPriorUnknown: boolean) =>
          input(context, `Turn ${turnIndex} of session ${sessionIndex}.`, tools, {
            model: spy.model,
            mainOutputLimit: 16_000,
            // A main step that reports 6,000 prompt tokens makes compaction due before the next request.
            context: { providerId: "provider-1", modelContextWindow: 20_000, declaredWindow: 6_000 },
            ...(allowPriorUnknown ? { allowPriorUnknown } : {}),
            ...(operation.stepLimit ? { maxSteps: operation.steps.length - 1 } : {}),
          })
        /** The continuation of the latest run `start` (a message run's input) stands for. */
        const continuationOf = (start: Engine.StartInput, source: Identity.Invocation): Engine.ContinueInput => {
          const { message: _message, allowPriorUnknown: _allow, ...rest } = start
          return { ...rest, source }
        }
        // A continuation the log refuses is refused alike by its check and by `continueRun`, which
        // writes nothing; the turn then sends its message.
        let continues = false
        // The check met a run of this engine whose terminal it owes: `continueRun` writes that terminal
        // first, then judges the claim.
        let judgedAtStart = false
        if (operation.continues && latest !== undefined) {
          const candidate = continuationOf(inputOf(false), latest)
          const before = (yield* context.log.events("session-1")).length
          const checked = yield* Effect.exit(engine.checkContinuation(candidate))
          if (Exit.isSuccess(checked)) continues = true
          else if (isReconciliation(reasonOf(checked), EngineError.UNWRITTEN_TERMINAL_CHECK_MESSAGE)) {
            assert.isTrue(faulted, "a terminal owed without a fault")
            continues = true
            judgedAtStart = true
          } else {
            const refused = yield* Effect.exit(engine.continueRun(candidate))
            assert.deepStrictEqual(reasonOf(refused), reasonOf(checked), `${JSON.stringify(reasonOf(refused))} vs ${JSON.stringify(reasonOf(checked))} in ${JSON.stringify(operations)}`)
            assert.strictEqual((yield* context.log.events("session-1")).length, before, "a refused continuation wrote")
            totals.continuationsRefused++
          }
        }
        // A handoff requested during a tool step's request pauses the run at the next step boundary,
        // unless a fault ended the run first or the run goes on under the prior-unknown policy.
        const pausable = (held: Interrupt) =>
          injection.fired === undefined &&
          !priorUnknown &&
          // A step waiting to retry pauses before its batch, the answer's step too; otherwise the pause
          // comes after the batch, and an effect whose outcome is unknown ends the run there first.
          (held.during === "retry" || (held.at < operation.steps.length - 1 && !operation.steps[held.at]!.calls.includes("unknown")))
        const attempt = (allowPriorUnknown: boolean) =>
          Effect.gen(function* () {
            const start = inputOf(allowPriorUnknown)
            settings = start
            Object.assign(injection, { fault: operation.fault, invocationId: start.invocation.invocationId, commits: 0, fired: undefined })
            let started = yield* Effect.exit(continues ? engine.continueRun(continuationOf(start, latest!)) : engine.start(start))
            const refusal = reasonOf(started)
            // The check leaves the claim's uniqueness to the append (docs/engine.md §5.9): a continuation
            // of the same run that landed although its commit's outcome was unknown took the boundary.
            const claimed = unknownFired && isReconciliation(refusal, "the source boundary is already claimed")
            if (continues && (claimed || (judgedAtStart && isReconciliation(refusal)))) {
              // Refused (once the owed terminal was written; nothing of this run was): the turn sends its message.
              totals.continuationsRefused++
              continues = false
              started = yield* Effect.exit(engine.start(start))
            }
            if (Exit.isSuccess(started)) latest = start.invocation
            let interrupted: Interrupt["kind"] | undefined
            const exit: Exit.Exit<Engine.RunResult, EngineError.EngineError> = Exit.isFailure(started)
              ? Exit.failCause(started.cause)
              : yield* Effect.gen(function* () {
                  const running = started.value
                  if (held !== undefined) {
                    // The held request arrives (or the held effect starts), unless a fault ended the run first.
                    // The failing attempt of a step that retries comes right before its answered one.
                    const requestIndex = requestsBefore(operation.steps, held.at) - (held.during === "retry" ? 1 : 0)
                    const reached = duringTool ? entered : mainRequestArrived(context.server, base, requestIndex)
                    const arrived = yield* Effect.raceFirst(
                      Effect.as(Effect.promise(() => reached), true),
                      Effect.as(Effect.exit(running.wait), false),
                    )
                    if (arrived && held.kind === "steer" && Exit.isSuccess(yield* Effect.exit(running.steer(`Steer turn ${turnIndex}.`)))) {
                      interrupted = "steer"
                    }
                    if (arrived && held.kind === "rival") {
                      const rival = yield* Engine.make({ backoffBaseMs: 5, backoffMaxMs: 40 }).pipe(
                        Effect.provideService(EventLog.EventLog, context.engine.log),
                        Effect.provide(Ids.layer),
                      )
                      const rivalStart = input(context, `A rival's message in turn ${turnIndex}.`, tools, { model: spy.model })
                      const refused = reasonOf(yield* Effect.exit(rival.start(rivalStart)))
                      yield* rival.close
                      // Another engine cannot tell a live run from a crashed one (docs/engine.md §5.2); a
                      // session waiting for the host refuses a message before it looks for either.
                      const unsealed = isReconciliation(refused, EngineError.UNSEALED_RUN_MESSAGE)
                      const waiting = unknownFired && isReconciliation(refused)
                      assert.isTrue(unsealed || waiting, `the rival's start: ${JSON.stringify(refused)} in ${JSON.stringify(operations)}`)
                      const written = (yield* context.log.events("session-1")).filter(
                        ({ event }) => event.invocation.invocationId === rivalStart.invocation.invocationId,
                      )
                      assert.deepStrictEqual(written, [], "a refused rival wrote")
                      interrupted = "rival"
                    }
                    if (arrived && held.kind === "cancel") {
                      yield* running.cancel
                      interrupted = "cancel"
                    }
                    if (arrived && (held.kind === "handoff" || held.kind === "handoff-away" || held.kind === "handoff-abandon")) {
                      // The step in flight settles first: its answer (or effect) is released while the handoff waits.
                      const requested = yield* Effect.forkChild(Effect.exit(running.handoff), { startImmediately: true })
                      release()
                      const handed = yield* Fiber.join(requested)
                      const paused = yield* Effect.exit(running.wait)
                      if (Exit.isFailure(handed) || handed.value === undefined) {
                        assert.isFalse(pausable(held), `no pause: ${JSON.stringify(operations)}`)
                        return paused
                      }
                      assert.deepStrictEqual(Exit.isSuccess(paused) ? paused.value.outcome : paused.cause, { kind: "handoff_paused", pause: handed.value })
                      interrupted = held.kind
                      if (held.kind === "handoff-abandon") {
                        const abandoned = yield* engine.abandonHandoff("session-1")
                        assert.strictEqual(abandoned.invocationId, handed.value.intent.successorInvocationId)
                        return paused
                      }
                      if (held.kind === "handoff-away") yield* moveEngine
                      const successor = yield* Effect.exit(
                        engine.resume({ paused: running.invocation, pause: handed.value, model: spy.model, tools, context: start.context!, mainOutputLimit: 16_000 }),
                      )
                      if (Exit.isFailure(successor)) return Exit.failCause(successor.cause)
                      latest = successor.value.invocation
                      return yield* Effect.exit(successor.value.wait)
                    }
                    if (arrived && held.kind === "close-away") {
                      const closing = yield* Effect.forkChild(engine.handOffAll, { startImmediately: true })
                      release()
                      const closed = yield* Fiber.join(closing)
                      const paused = yield* Effect.exit(running.wait)
                      const own = closed.find((run) => run.invocation.invocationId === running.invocation.invocationId)
                      if (own?.pause === undefined) {
                        assert.isFalse(pausable(held), `no pause: ${JSON.stringify(operations)}`)
                        // A run the host cannot hand off (under the prior-unknown policy) is cancelled; one
                        // with no step boundary left (it was answering) may end first, as it ends.
                        if (Exit.isSuccess(paused) && paused.value.outcome.kind === "cancelled") interrupted = "cancel"
                        return paused
                      }
                      assert.deepStrictEqual(Exit.isSuccess(paused) ? paused.value.outcome : paused.cause, { kind: "handoff_paused", pause: own.pause })
                      interrupted = held.kind
                      yield* moveEngine
                      const reports = yield* engine.resumePending({ provider: () => Effect.succeed(spy.model), tools: () => tools })
                      assert.strictEqual(reports.length, 1, JSON.stringify(reports))
                      const report = reports[0]!
                      if (!("started" in report)) return assert.fail(`the pause was not resumed: ${report.skipped}`)
                      latest = report.started.invocation
                      return yield* Effect.exit(report.started.wait)
                    }
                  }
                  release()
                  return yield* Effect.exit(running.wait)
                })
            return { exit, interrupted }
          })
        // The run beside the turn: another session's, on the engine the turn starts on.
        const besideMarker = `${BESIDE}${sessionIndex}-${turnIndex}.`
        let beside: Fiber.Fiber<Exit.Exit<Engine.RunResult, EngineError.EngineError>> | undefined
        if (operation.beside === true) {
          const answer = (respond: Respond.Responder) => context.server.push({ match: (request) => request.body.includes(besideMarker), respond })
          answer(Respond.sse(OpenAiSse.response({ toolCalls: [{ id: `beside-${turnIndex}`, name: "echo", arguments: [JSON.stringify({ value: besideMarker })] }] })))
          answer(Respond.sse(OpenAiSse.response({ text: ["Done beside."] })))
          const start = input(context, besideMarker, tools)
          beside = yield* Effect.forkChild(Effect.exit(engine.run({ ...start, invocation: { ...start.invocation, sessionId: "session-2" } })), {
            startImmediately: true,
          })
        }
        let { exit, interrupted } = yield* attempt(priorUnknown)
        const label = `turn ${turnIndex} of ${JSON.stringify(operations)}`
        // A commit whose outcome was unknown may have left the session waiting for the host, and only so:
        for (let refusals = 0; injection.fired === undefined && Exit.isFailure(exit) && refusals < 2; refusals++) {
          const failure = Cause.findErrorOption(exit.cause)
          const reason = Option.isSome(failure) ? failure.value.reason : undefined
          assert.isTrue(unknownFired, `${label}: ${Cause.pretty(exit.cause)}`)
          if (reason?._tag === "Busy" && reason.message === EngineError.SESSION_RESERVED_MESSAGE) {
            // A pause that landed reserves the session for its successor: the host abandons it (docs/engine.md §5.10).
            yield* engine.abandonHandoff("session-1")
            totals.abandoned++
          } else {
            // A dispatch left without its settlement refuses a message: the session then goes on with
            // explicit messages (allowPriorUnknown, docs/engine.md §5.8).
            const unsettled = unsettledDispatches(yield* context.log.events("session-1"))
            assert.isTrue(!priorUnknown && reason?._tag === "ReconciliationRequired" && unsettled > 0, `${label}: ${JSON.stringify(reason)}, ${unsettled} unsettled, priorUnknown ${priorUnknown}`)
            totals.reconciliation++
            priorUnknown = true
          }
          // A continuation refused here (the check does not take the session's reservation) sends its message.
          continues = false
          ;({ exit, interrupted } = yield* attempt(priorUnknown))
        }
        if (beside !== undefined) {
          // Whatever the turn met, the other session's run completes.
          const besideExit = yield* Fiber.join(beside)
          assert.deepStrictEqual(Exit.isSuccess(besideExit) ? besideExit.value.outcome : besideExit.cause, { kind: "completed" }, `beside ${label}`)
          completedValues.push(besideMarker)
          totals.beside++
        }
        // An effect of the turn whose outcome the tool could not tell ran (its dispatch has no settlement).
        const unknownRan = operation.steps.some((step, stepIndex) =>
          step.calls.some((kind, call) => kind === "unknown" && ran.includes(valueOf(sessionIndex, turnIndex, stepIndex, call, kind))),
        )
        if (injection.fired !== undefined) {
          // The turn met its fault: it ends however the fault makes it end; the session goes on.
          faulted = true
          partial = true
          unknownFired ||= injection.fired === "unknown" || unknownRan
          totals.faults++
          continue
        }
        if (unknownRan) {
          // An effect whose outcome the tool could not tell ended the run (or a cancellation did, as
          // it ran): its dispatch stays without a settlement, so the session waits for the host.
          const outcome = Exit.isSuccess(exit) ? exit.value.outcome : undefined
          const ended = (outcome?.kind === "failed" && outcome.class === "outcome_unknown") || (interrupted === "cancel" && outcome?.kind === "cancelled")
          assert.isTrue(ended, `${label}: ${JSON.stringify(outcome ?? Cause.pretty((exit as Exit.Failure<unknown, unknown>).cause))}`)
          unknownFired = true
          partial = true
          totals.unknownEffects++
          continue
        }
        if (interrupted !== undefined && duringTool) totals.duringTool++
        if (interrupted !== undefined && held?.during === "retry") totals.duringRetry++
        if (interrupted === "rival") totals.rivalsRefused++
        if (interrupted === "steer") {
          // Accepted steering is delivered: durable in the session, once.
          const steered = (yield* context.log.events("session-1")).filter(
            ({ event }) => event.fact.kind === "message_steered" && event.fact.message.content.text === `Steer turn ${turnIndex}.`,
          )
          assert.strictEqual(steered.length, 1, `steering of ${label}`)
          totals.steered++
        }
        if (interrupted === "handoff") totals.handedOff++
        if (interrupted === "handoff-away") totals.handedAway++
        if (interrupted === "close-away") totals.closedAway++
        if (interrupted === "handoff-abandon") {
          // The turn ends at its pause: the steps after it never run.
          assert.deepStrictEqual(Exit.isSuccess(exit) ? exit.value.outcome.kind : exit.cause, "handoff_paused", label)
          partial = true
          totals.abandonedPauses++
          continue
        }
        if (interrupted === "cancel") {
          assert.deepStrictEqual(Exit.isSuccess(exit) ? exit.value.outcome : exit.cause, { kind: "cancelled", source: "runtime_cancellation" }, label)
          partial = true
          totals.cancelled++
          continue
        }
        if (faulted) totals.afterFault++
        assert.isTrue(Exit.isSuccess(exit), `${label}: ${Exit.isFailure(exit) ? Cause.pretty(exit.cause) : ""}`)
        const expected: Outcome.InvocationOutcome = operation.stepLimit
          ? { kind: "failed", class: "step_limit", message: "the run reached its step limit" }
          : { kind: "completed" }
        if (Exit.isSuccess(exit)) assert.deepStrictEqual(exit.value.outcome, expected, label)
        if (operation.stepLimit) totals.stepLimited++
        if (continues) totals.continued++
        completedValues.push(...values)
      }
      assert.deepStrictEqual(comparison.mismatches, [], `${JSON.stringify(comparison.mismatches)} in ${JSON.stringify(operations)}`)
      assert.deepStrictEqual(spy.requests.filter((request) => !isSummaryPrompt(request)), comparison.expected, JSON.stringify(operations))
      // No effect ran twice, and every valid call of a completed turn ran (a retried step's included).
      assert.strictEqual(new Set(ran).size, ran.length, `an effect ran twice: ${JSON.stringify(ran)}`)
      for (const value of completedValues) assert.include(ran, value)
      if (!partial) assert.deepStrictEqual(ran, completedValues)
      const events = yield* context.log.events("session-1")
      totals.sessions++
      totals.requests += comparison.requests.length
      totals.retries += comparison.retries
      totals.archived += events.filter((stored) => stored.event.fact.kind === "tool_result_archived").length
      totals.rejected += events.filter((stored) => stored.event.fact.kind === "tool_rejected").length
      totals.failedEffects += events.filter(({ event }) => event.fact.kind === "tool_settled" && event.fact.outcome.kind === "failed").length
      totals.foreign += foreign
      const checkpoints = events.filter((stored) => stored.event.fact.kind === "context_checkpoint_recorded").length
      totals.checkpoints += checkpoints
      if (concurrency > 1) totals.backgroundCheckpoints += checkpoints
    }),
  )

const seed = Number(process.env["MAKA_PROPERTY_SEED"] ?? 20_261_217)

const runs = Number(process.env["MAKA_PROPERTY_RUNS"] ?? 56)

/**
 * `MAKA_PROPERTY_CASE`: one session to play instead (a counterexample as fast-check prints it, with
 * `__proto__:null,` and undefined fields left out), on PostgreSQL when `MAKA_TEST_DATABASE_URL` is set.
 */
const replayed = process.env["MAKA_PROPERTY_CASE"]

// Registered only when asked for: a suite run has no such case, skipped or not.
if (replayed !== undefined) {
  describe("one session of MAKA_PROPERTY_CASE", () => {
    it("plays", async () => {
      const item = JSON.parse(replayed) as Session
      const openLog = databaseUrl === undefined ? undefined : postgresLog(databaseUrl)
      await Effect.runPromise(play(item, newTotals(), openLog).pipe(Effect.timeout("30 seconds")))
    }, 60_000)
  })
}

/**
 * Sessions the generator found that failed, kept as they were found. On PostgreSQL (where the opening
 * commits alone) the first one's fourth turn meets its fault at the commit in which the background
 * summary's stream carried the step's settlement: the step loop went on and sent a request built
 * without it, with evidence behind the log.
 */
const found: ReadonlyArray<Session> = [
  {
    operations: [
      {
        kind: "turn",
        steps: [
          { calls: ["invalid", "small"], retry: false, promptTokens: 500 },
          { calls: [], retry: false, promptTokens: 6_000 },
        ],
        fault: { at: "terminal", kind: "unknown" },
        interrupt: { at: 0, kind: "steer" },
        continues: true,
        stepLimit: false,
      },
      { kind: "foreign", toolStep: false },
      { kind: "move" },
      {
        kind: "turn",
        steps: [
          { calls: ["small"], retry: false, promptTokens: 2_000 },
          { calls: [], retry: false, promptTokens: 2_000 },
        ],
        fault: { at: 2, kind: "unknown" },
        continues: false,
        stepLimit: false,
      },
    ],
    concurrency: 4,
  },
]

describe("the kept context over generated sessions", () => {
  it("plays the sessions found before", async () => {
    for (const item of found) await Effect.runPromise(play(item, newTotals()).pipe(Effect.timeout("15 seconds")))
  }, 60_000)

  it.skipIf(databaseUrl === undefined)("PostgreSQL: plays the sessions found before", async () => {
    for (const item of found) await Effect.runPromise(play(item, newTotals(), postgresLog(databaseUrl!)).pipe(Effect.timeout("30 seconds")))
  }, 60_000)

  it(
    "equals a fresh read after every commit, every request equals one rebuilt at its cut, and a fault leaves the session usable",
    async () => {
      const totals = newTotals()
      await fc.assert(
        // A session that hangs (a wait nothing ends) fails as a counterexample instead of timing the test out.
        fc.asyncProperty(session, (item) => Effect.runPromise(play(item, totals).pipe(Effect.timeout("15 seconds")))),
        { numRuns: runs, seed, endOnFailure: true },
      )
      // The generator reached what the property is about: more than this many of each.
      const reached: ReadonlyArray<readonly [keyof Totals, number]> = [
        ["retries", 2],
        ["archived", 2],
        ["rejected", 2],
        ["foreign", 2],
        ["faults", 2],
        ["afterFault", 2],
        ["steered", 1],
        ["cancelled", 1],
        ["reconciliation", 0],
        ["checkpoints", 2],
        ["handedOff", 1],
        ["handedAway", 0],
        ["closedAway", 0],
        ["abandonedPauses", 0],
        ["moved", 1],
        // Not `recovered`: a fault here fails one commit, and the engine writes a terminal it could not
        // write by a second commit at once (docs/engine.md §5.3 step 8), so a moved engine finds nothing
        // to seal. A terminal kept out by a lasting outage is sealed later: test/Faults.test.ts.
        ["elsewhere", 1],
        ["compacted", 1],
        ["continued", 1],
        ["continuationsRefused", 1],
        ["stepLimited", 1],
        ["duringTool", 2],
        ["duringRetry", 2],
        ["rivalsRefused", 1],
        ["beside", 2],
        ["failedEffects", 2],
        ["unknownEffects", 2],
        ["backgroundCheckpoints", 1],
      ]
      if (process.env["MAKA_PROPERTY_PRINT"]) console.log(JSON.stringify(totals))
      for (const [name, least] of reached) assert.isAbove(totals[name], least, `${name}: ${JSON.stringify(totals)}`)
    },
    120_000,
  )

  // PostgreSQL keeps no context across runs (several writers), and checks each append by reading rows.
  it.skipIf(databaseUrl === undefined)(
    "PostgreSQL: the same, each run's context against fresh reads",
    async () => {
      const totals = newTotals()
      await fc.assert(
        fc.asyncProperty(session, (item) =>
          Effect.runPromise(play(item, totals, postgresLog(databaseUrl!)).pipe(Effect.timeout("30 seconds"))),
        ),
        { numRuns: Math.ceil(runs / 2), seed, endOnFailure: true },
      )
      assert.isAbove(totals.faults, 1, JSON.stringify(totals))
      assert.isAbove(totals.afterFault, 0, JSON.stringify(totals))
    },
    240_000,
  )
})

if (databaseUrl === undefined) {
  process.stdout.write("note: MAKA_TEST_DATABASE_URL is unset; the PostgreSQL case of LiveContextProperty.test.ts does not run here\n")
}
