/**
 * Prune and compaction invariants over generated sessions of real runs
 * (docs/engine.md §5.5, docs/engine.md §5.11, docs/engine.md §5.12): turns of tool steps with small and archivable results, provider usage that makes automatic
 * compaction due at random points, standalone compactions, overflows, summaries that succeed or stay
 * malformed, and summaries in the foreground or the background. Every main request the server received
 * is checked against the log: no tool call is separated from its result, the run's own opening is never
 * folded away, and nothing at or below the adopted checkpoint's coverage is sent except its anchor. A
 * copy of the log opened by a new engine then builds the same next request as the engine that kept it.
 */
import { Prompts, type Event, type Fact } from "@maka/facts"
import { OpenAiSse, Respond, type ScriptedServer } from "@maka/testkit"
import { FactBuilders } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Effect, Schema } from "effect"
import * as fc from "fast-check"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import * as Engine from "../src/Engine.ts"
import { answer, contentText, isSummaryRequest, overflow, summaryAnswer, summaryText, summaryWithoutNextSteps, usage } from "./support/compaction.ts"
import { reopen, type WireMessage } from "./support/harness.ts"
import { input, setup, type Setup } from "./support/setup.ts"

// ---------------------------------------------------------------------------------------------
// The generated session
// ---------------------------------------------------------------------------------------------

interface Step {
  /** The echo calls of the step, each with an archivable (over one page) result or a small one; none ends the turn. */
  readonly calls: ReadonlyArray<boolean>
  /** The prompt tokens the provider reports: at or over the declared window, the next step is due for compaction. */
  readonly usage: number
  /** The provider refuses the step's first request as too large, before any output. */
  readonly overflow: boolean
}

type Operation = { readonly kind: "turn"; readonly steps: ReadonlyArray<Step> } | { readonly kind: "compact" }

interface Session {
  readonly operations: ReadonlyArray<Operation>
  /** 1: every summary runs in the foreground; 4: a spare slot runs it in the background. */
  readonly concurrency: 1 | 4
  /** The answers of the first summary attempts, in order; then every attempt gets a valid summary. */
  readonly summaries: ReadonlyArray<"valid" | "malformed">
}

const WINDOW = 1_000
const usageArbitrary = fc.constantFrom(10, 300, 999, WINDOW, 4_000)
const rarely = fc.integer({ min: 0, max: 6 }).map((value) => value === 0)
const toolStep: fc.Arbitrary<Step> = fc.record({
  calls: fc.array(fc.boolean(), { minLength: 1, maxLength: 3 }),
  usage: usageArbitrary,
  overflow: rarely,
})
const lastStep: fc.Arbitrary<Step> = fc.record({ calls: fc.constant([]), usage: usageArbitrary, overflow: rarely })
const turn: fc.Arbitrary<Operation> = fc
  .tuple(fc.array(toolStep, { maxLength: 3 }), lastStep)
  .map(([steps, last]) => ({ kind: "turn", steps: [...steps, last] }))
const operation: fc.Arbitrary<Operation> = fc.oneof(
  { weight: 5, arbitrary: turn },
  { weight: 1, arbitrary: fc.constant({ kind: "compact" } as const) },
)
const session: fc.Arbitrary<Session> = fc.record({
  operations: fc.array(operation, { minLength: 2, maxLength: 6 }),
  concurrency: fc.constantFrom(1 as const, 4 as const),
  summaries: fc.array(fc.constantFrom("valid" as const, "malformed" as const), { maxLength: 4 }),
})

// ---------------------------------------------------------------------------------------------
// Markers: every piece of content the session says carries a unique one
// ---------------------------------------------------------------------------------------------

const MARKER = /#m-[a-z0-9-]+#/g
const markersOf = (text: string): ReadonlyArray<string> => text.match(MARKER) ?? []
const openingText = (turnIndex: number) => `Work on part #m-o${turnIndex}# of the task.`
const answerText = (turnIndex: number) => `Part #m-a${turnIndex}# is done.`
const callValue = (turnIndex: number, step: number, call: number, big: boolean) =>
  `${big ? "big " : ""}#m-v${turnIndex}-${step}-${call}#`

/** Over one page (7,500 UTF-16 units): prune archives the result, whose first page still shows the marker. */
const PADDING = "x".repeat(8_000)

const echo = Tool.make({
  name: "echo",
  description: "Echoes its input.",
  input: Schema.Struct({ value: Schema.String }),
  semantics: "parallel",
  execute: ({ value }) => Effect.succeed(Tool.text(value.startsWith("big ") ? `echo: ${value} ${PADDING}` : `echo: ${value}`)),
})
const tools = ToolCatalog.make([echo])

// ---------------------------------------------------------------------------------------------
// The scripted server: summaries by a repeating entry, main answers per turn, in order
// ---------------------------------------------------------------------------------------------

interface Routing {
  /** The turn whose main entries answer now; entries of an earlier turn (one that ended early) never match. */
  active: number
  /** Once set, only the repeating valid summary answers. */
  final: boolean
}

const mainFor = (routing: Routing, turnIndex: number, respond: Respond.Responder): ScriptedServer.ScriptEntry => ({
  match: (request) => !isSummaryRequest(request) && routing.active === turnIndex,
  respond,
})

const stepResponse = (turnIndex: number, stepIndex: number, step: Step): Respond.Responder =>
  step.calls.length === 0
    ? answer(answerText(turnIndex), step.usage)
    : Respond.sse(
        OpenAiSse.response({
          toolCalls: step.calls.map((big, call) => ({
            id: `call-${turnIndex}-${stepIndex}-${call}`,
            name: "echo",
            arguments: [JSON.stringify({ value: callValue(turnIndex, stepIndex, call, big) })],
          })),
          usage: usage(step.usage),
        }),
      )

const scriptTurn = (context: Setup, routing: Routing, turnIndex: number, steps: ReadonlyArray<Step>) => {
  steps.forEach((step, stepIndex) => {
    if (step.overflow) context.server.push(mainFor(routing, turnIndex, overflow()))
    context.server.push(mainFor(routing, turnIndex, stepResponse(turnIndex, stepIndex, step)))
  })
}

const summaryScript = (routing: Routing, summaries: Session["summaries"]): ReadonlyArray<ScriptedServer.ScriptEntry> => [
  ...summaries.map((kind, index) => ({
    match: (request: ScriptedServer.RecordedRequest) => isSummaryRequest(request) && !routing.final,
    respond: kind === "valid" ? summaryAnswer(summaryText(`summary ${index}`)) : summaryAnswer(summaryWithoutNextSteps()),
  })),
  { match: isSummaryRequest, respond: summaryAnswer(summaryText("summary of the rest")), repeat: true },
]

const windowed = { context: { providerId: "openai-compatible", declaredWindow: WINDOW } }

let compactions = 0
const compactInput = (context: Setup): Engine.CompactInput => {
  compactions++
  return {
    invocation: FactBuilders.invocation({
      turnId: `compact-turn-${compactions}`,
      runId: `compact-run-${compactions}`,
      invocationId: `compact-invocation-${compactions}`,
    }),
    model: context.model,
    configuration: FactBuilders.configuration({ cwd: context.workspace, model: FactBuilders.modelBinding({ model: "test-model" }) }),
  }
}

// ---------------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------------

const messagesOf = (request: ScriptedServer.RecordedRequest): ReadonlyArray<WireMessage> =>
  (request.json as { readonly messages: ReadonlyArray<WireMessage> }).messages

/**
 * No tool call is separated from its result: every tool message answers a call of the assistant
 * message right before the run of tool messages it is in, and every call of an assistant message is
 * answered before the next message of another role.
 */
const checkPairs = (messages: ReadonlyArray<WireMessage>, where: string) => {
  let open = new Set<string>()
  const seen = new Set<string>()
  for (const [index, message] of messages.entries()) {
    if (message.role === "tool") {
      const id = message.tool_call_id ?? ""
      assert.isTrue(open.has(id), `${where}: tool message ${index} answers ${id}, which no call right before it made`)
      open.delete(id)
      continue
    }
    assert.deepStrictEqual([...open], [], `${where}: calls without their result before message ${index}`)
    open = new Set()
    for (const call of message.role === "assistant" ? (message.tool_calls ?? []) : []) {
      assert.isFalse(seen.has(call.id), `${where}: call ${call.id} sent twice`)
      seen.add(call.id)
      open.add(call.id)
    }
  }
  assert.deepStrictEqual([...open], [], `${where}: calls without their result at the end`)
}

/** Facts whose content the projection sends (docs/engine.md §5.5). */
const isContent = (stored: Event.StoredEvent, summarySteps: ReadonlySet<string>): boolean => {
  const fact = stored.event.fact
  switch (fact.kind) {
    case "invocation_opened":
      return fact.input.kind === "message"
    case "message_steered":
    case "tool_settled":
      return true
    case "model_completed":
      return !summarySteps.has(fact.stepId)
    default:
      return false
  }
}

const openingMessageText = (stored: Event.StoredEvent): string => {
  const fact = stored.event.fact
  if (fact.kind !== "invocation_opened" || fact.input.kind !== "message") throw new Error(`${stored.event.id} is not a message opening`)
  return fact.input.content.text
}

type Purpose = "main" | "summary"

/** Steps whose request was interrupted `cancelled` before any of its stream was observed. */
const cancelledBeforeObserving = (events: ReadonlyArray<Event.StoredEvent>): ReadonlySet<string> => {
  const observed = new Set<string>()
  const cancelled = new Set<string>()
  for (const stored of events) {
    const fact = stored.event.fact
    if (fact.kind === "model_observed") observed.add(fact.stepId)
    if (fact.kind === "model_interrupted" && fact.status === "cancelled" && !observed.has(fact.stepId)) cancelled.add(fact.stepId)
  }
  return cancelled
}

/**
 * The ways to leave `count` of the `skippable` requests out of `all` (in order): each a list of the
 * requests kept. None when there are fewer than `count` to leave out.
 */
const leavingOut = <A>(all: ReadonlyArray<A>, skippable: (item: A) => boolean, count: number): Array<ReadonlyArray<A>> => {
  if (count === 0) return [all]
  const first = all.findIndex(skippable)
  if (first < 0) return []
  const rest = all.slice(first + 1)
  const head = all.slice(0, first)
  return [
    ...leavingOut(rest, skippable, count - 1).map((kept) => [...head, ...kept]),
    ...leavingOut(rest, skippable, count).map((kept) => [...head, all[first]!, ...kept]),
  ]
}

/**
 * Checks every request of `purpose` the session sent against the log: `sent` are the server's requests
 * of that purpose in arrival order, which the session's `model_requested` facts of that purpose match
 * one to one (main requests never overlap, nor do summaries). A main request's context reaches up to
 * the request, a summary's up to its fence (`sourceHighWater`).
 */
const checkRequests = (events: ReadonlyArray<Event.StoredEvent>, purpose: Purpose, sent: ReadonlyArray<ScriptedServer.RecordedRequest>) => {
  const all = events.filter((stored) => stored.event.fact.kind === "model_requested" && stored.event.fact.purpose === purpose)
  // A request cancelled before anything was observed (a background summary the run's end stopped)
  // may or may not have reached the server: as many of those as the server missed are left out of
  // the pairing, whichever ones make it hold.
  const unobserved = cancelledBeforeObserving(events)
  const pairings = leavingOut(all, (stored) => unobserved.has((stored.event.fact as Fact.ModelRequested).stepId), all.length - sent.length)
  assert.isNotEmpty(pairings, `every ${purpose} request the server received is one ${purpose} model_requested fact`)
  let refusal: unknown
  for (const requested of pairings) {
    try {
      return checkPairing(events, purpose, sent, requested)
    } catch (error) {
      refusal ??= error
    }
  }
  throw refusal
}

/** Checks the requests the server received against the facts `requested`, one to one in order. */
const checkPairing = (
  events: ReadonlyArray<Event.StoredEvent>,
  purpose: Purpose,
  sent: ReadonlyArray<ScriptedServer.RecordedRequest>,
  requested: ReadonlyArray<Event.StoredEvent>,
) => {
  const summarySteps = new Set(
    events.flatMap((stored) => (stored.event.fact.kind === "model_requested" && stored.event.fact.purpose === "summary" ? [stored.event.fact.stepId] : [])),
  )
  assert.strictEqual(requested.length, sent.length, `every ${purpose} request the server received is one ${purpose} model_requested fact`)
  const byId = new Map(events.map((stored) => [stored.event.id, stored]))
  const stats = { checkpointed: 0, midTurn: 0, archived: 0 }
  for (const [index, stored] of requested.entries()) {
    const fact = stored.event.fact
    if (fact.kind !== "model_requested") continue
    const request = sent[index]!
    const where = `${purpose} request ${index} (sequence ${stored.sequence})`
    const messages = messagesOf(request)
    const body = request.body
    checkPairs(messages, where)
    const reach = purpose === "main" ? stored.sequence - 1 : fact.sourceHighWater

    // The checkpoint in force: the latest one recorded within the request's reach, which the request names.
    const checkpoint = events.filter((event) => event.sequence <= reach && event.event.fact.kind === "context_checkpoint_recorded").at(-1)
    const recorded = checkpoint?.event.fact.kind === "context_checkpoint_recorded" ? checkpoint.event.fact.checkpoint : undefined
    assert.strictEqual(fact.checkpointEventId, checkpoint?.event.id, `${where}: the baseline it names`)
    const covered = recorded?.coveredThrough ?? 0
    const mode = recorded?.mode
    const anchor = mode?.kind === "mid_turn" ? byId.get(mode.anchorEventId) : undefined
    if (mode?.kind === "mid_turn") assert.isDefined(anchor, `${where}: the anchor ${mode.anchorEventId} is in the log`)

    // Layout: (main: system,) the summary, the anchor of a mid-turn checkpoint, then the tail.
    const first = purpose === "main" ? 1 : 0
    if (purpose === "main") assert.strictEqual(messages[0]?.role, "system", where)
    if (recorded === undefined) {
      assert.isFalse(body.includes("Continuation summary:"), `${where}: no summary without a checkpoint`)
    } else {
      stats.checkpointed++
      const summary =
        purpose === "main"
          ? Prompts.continuationSummaryMessage(recorded.summary.text)
          : Prompts.previousContinuationSummaryMessage(recorded.summary.text)
      assert.strictEqual(contentText(messages[first]?.content), summary, `${where}: the summary comes first`)
      if (anchor !== undefined) {
        stats.midTurn++
        assert.strictEqual(messages[first + 1]?.role, "user", where)
        assert.strictEqual(contentText(messages[first + 1]?.content), openingMessageText(anchor), `${where}: the anchor is re-sent verbatim after the summary`)
      }
    }

    // A main request's own opening is never folded away: in the tail (above the coverage), or the anchor.
    if (purpose === "main") {
      const opening = events.find(
        (event) => event.event.invocation.invocationId === stored.event.invocation.invocationId && event.event.fact.kind === "invocation_opened",
      )!
      assert.isTrue(
        opening.sequence > covered || anchor?.event.id === opening.event.id,
        `${where}: the opening (sequence ${opening.sequence}) is covered through ${covered} and is not the anchor`,
      )
      assert.isTrue(
        messages.some((message) => message.role === "user" && contentText(message.content) === openingMessageText(opening)),
        `${where}: the run's opening is sent`,
      )
    }

    // Nothing at or below the coverage is sent except the anchor; everything above it is.
    const anchorMarkers = new Set(anchor === undefined ? [] : markersOf(JSON.stringify(anchor.event.fact)))
    const forbidden = new Set(
      events
        .filter((event) => event.sequence <= covered)
        .flatMap((event) => markersOf(JSON.stringify(event.event.fact)))
        .filter((marker) => !anchorMarkers.has(marker)),
    )
    const required = new Set([
      ...anchorMarkers,
      ...events
        .filter((event) => event.sequence > covered && event.sequence <= reach && isContent(event, summarySteps))
        .flatMap((event) => markersOf(JSON.stringify(event.event.fact))),
    ])
    for (const marker of required) {
      assert.isFalse(forbidden.has(marker), `${where}: ${marker} is both covered and in the tail`)
      assert.isTrue(body.includes(marker), `${where}: ${marker} is in its context but not sent`)
    }
    for (const marker of forbidden) assert.isFalse(body.includes(marker), `${where}: ${marker} is covered through ${covered} but sent`)
    if (messages.some((message) => message.role === "tool" && contentText(message.content).includes("maka://tool-result/"))) stats.archived++
  }
  return stats
}

/** Checks the main and the summary requests of a session. */
const checkSession = (events: ReadonlyArray<Event.StoredEvent>, requests: ReadonlyArray<ScriptedServer.RecordedRequest>) => {
  checkRequests(events, "summary", requests.filter(isSummaryRequest))
  return checkRequests(
    events,
    "main",
    requests.filter((request) => !isSummaryRequest(request)),
  )
}

// ---------------------------------------------------------------------------------------------
// One session
// ---------------------------------------------------------------------------------------------

const totals = { sessions: 0, requests: 0, checkpointed: 0, midTurn: 0, archived: 0, background: 0, overflows: 0, overflowsRecovered: 0 }

/** Checkpoints adopted from the background: a main request above their coverage completed before they were recorded. */
const backgroundAdoptions = (events: ReadonlyArray<Event.StoredEvent>) => {
  const main = new Map(
    events.flatMap((stored) =>
      stored.event.fact.kind === "model_requested" && stored.event.fact.purpose === "main" ? [[stored.event.fact.stepId, stored.sequence] as const] : [],
    ),
  )
  return events.filter((stored, index) => {
    const fact = stored.event.fact
    if (fact.kind !== "context_checkpoint_recorded") return false
    return events.slice(0, index).some((event) => {
      const completed = event.event.fact
      if (completed.kind !== "model_completed") return false
      const requested = main.get(completed.stepId)
      return requested !== undefined && requested > fact.checkpoint.coveredThrough
    })
  }).length
}

/** Overflowed main requests, and those after which the same run adopted a checkpoint before its next main request. */
const overflowsOf = (events: ReadonlyArray<Event.StoredEvent>) => {
  const main = new Set(
    events.flatMap((stored) => (stored.event.fact.kind === "model_requested" && stored.event.fact.purpose === "main" ? [stored.event.fact.stepId] : [])),
  )
  let overflows = 0
  let recovered = 0
  events.forEach((stored, index) => {
    const fact = stored.event.fact
    if (fact.kind !== "model_interrupted" || !main.has(fact.stepId)) return
    overflows++
    const next = events.slice(index + 1).find((later) => later.event.fact.kind === "context_checkpoint_recorded" || (later.event.fact.kind === "model_requested" && later.event.fact.purpose === "main"))
    if (next?.event.fact.kind === "context_checkpoint_recorded") recovered++
  })
  return { overflows, recovered }
}

const play = (item: Session) =>
  Effect.scoped(
    Effect.gen(function* () {
      const routing: Routing = { active: -1, final: false }
      const context = yield* setup({ script: summaryScript(routing, item.summaries) }, undefined, { concurrency: item.concurrency })
      for (const [turnIndex, op] of item.operations.entries()) {
        if (op.kind === "compact") {
          const result = yield* context.engine.compact(compactInput(context))
          assert.strictEqual(result.outcome.kind, "context_compact_finished", `compaction ${turnIndex}`)
          continue
        }
        routing.active = turnIndex
        scriptTurn(context, routing, turnIndex, op.steps)
        const result = yield* context.engine.run(input(context, openingText(turnIndex), tools, windowed))
        // A run completes, or fails on an overflow it may not recover (budget spent, nothing to fold).
        const outcome = result.outcome
        assert.isTrue(
          outcome.kind === "completed" || (outcome.kind === "failed" && outcome.class === "context_overflow"),
          `turn ${turnIndex} ended ${JSON.stringify(outcome)}`,
        )
      }
      routing.active = -1
      for (const exchange of context.server.exchanges()) assert.isTrue(exchange.matched, `request ${exchange.request.index} was scripted`)
      const events = yield* context.log.events("session-1")
      const sent = context.server.requests()
      const stats = checkSession(events, sent)

      // One more turn, twice: on the engine that kept the session, and on a copy of the log opened by a new engine.
      routing.final = true
      const copy = path.join(path.dirname(context.file), "copy.sqlite")
      yield* context.log.backup(copy)
      const last = input(context, openingText(item.operations.length), tools, windowed)
      const lastSteps: ReadonlyArray<Step> = [{ calls: [], usage: 10, overflow: false }]
      routing.active = item.operations.length
      scriptTurn(context, routing, item.operations.length, lastSteps)
      const before = context.server.requests().length
      const kept = yield* context.engine.run(last)
      assert.deepStrictEqual(kept.outcome, { kind: "completed" })
      const keptRequest = context.server.requests().slice(before).find((request) => !isSummaryRequest(request))!
      checkSession(yield* context.log.events("session-1"), context.server.requests())
      const reopened = yield* reopen(copy)
      routing.active = item.operations.length + 1
      scriptTurn(context, routing, item.operations.length + 1, lastSteps)
      const middle = context.server.requests().length
      const fresh = yield* reopened.run(last)
      assert.deepStrictEqual(fresh.outcome, { kind: "completed" })
      checkSession(yield* reopened.log.events("session-1"), [...sent, ...context.server.requests().slice(middle)])
      const freshRequest = context.server.requests().slice(middle).find((request) => !isSummaryRequest(request))!
      // A short account first (role, tool call id, content length), then the bytes.
      const outline = (request: ScriptedServer.RecordedRequest) =>
        messagesOf(request).map((message) => `${message.role} ${message.tool_call_id ?? ""} ${contentText(message.content).length}`)
      assert.deepStrictEqual(outline(freshRequest), outline(keptRequest), "a new engine over a copy of the log builds the same next request")
      assert.strictEqual(freshRequest.body, keptRequest.body, "a new engine over a copy of the log builds the same next request")

      totals.sessions++
      totals.requests += sent.length
      totals.checkpointed += stats.checkpointed
      totals.midTurn += stats.midTurn
      totals.archived += stats.archived
      totals.background += backgroundAdoptions(events)
      const overflows = overflowsOf(events)
      totals.overflows += overflows.overflows
      totals.overflowsRecovered += overflows.recovered
    }),
  )

const seed = Number(process.env["MAKA_PROPERTY_SEED"] ?? 20_261_211)

describe("prune and compaction over generated sessions", () => {
  it(
    "never separate a call from its result, never fold away the run's opening, and send nothing covered but the anchor",
    async () => {
      await fc.assert(
        fc.asyncProperty(session, (item) => Effect.runPromise(play(item))),
        { numRuns: Number(process.env["MAKA_PROPERTY_RUNS"] ?? 24), seed, endOnFailure: true },
      )
      // The generator reached what the properties are about.
      assert.isAbove(totals.checkpointed, 10, JSON.stringify(totals))
      assert.isAbove(totals.midTurn, 3, JSON.stringify(totals))
      assert.isAbove(totals.archived, 3, JSON.stringify(totals))
      assert.isAbove(totals.background, 1, JSON.stringify(totals))
      assert.isAbove(totals.overflowsRecovered, 1, JSON.stringify(totals))
    },
    120_000,
  )
})

describe("prune beside a background summary", () => {
  it.live("archives a result the tool batch left while a summary was pending, before the next run's request", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The first run's usage reaches the window: the second run's first step starts a summary in the
        // background, which never answers. Its tool batch settles a result over one page while the summary
        // is pending, so it is not pruned then; the summary is drained when the run ends. The next run
        // prunes once after its opening (docs/engine.md §5.11), whether or not the engine kept the context.
        const context = yield* setup({ script: [{ match: isSummaryRequest, respond: Respond.hang(), repeat: true }] }, undefined, { concurrency: 4 })
        const routing: Routing = { active: 0, final: false }
        scriptTurn(context, routing, 0, [{ calls: [], usage: 4_000, overflow: false }])
        yield* context.engine.run(input(context, openingText(0), tools, windowed))
        routing.active = 1
        scriptTurn(context, routing, 1, [{ calls: [true], usage: 10, overflow: false }, { calls: [], usage: 10, overflow: false }])
        const second = yield* context.engine.run(input(context, openingText(1), tools, windowed))
        assert.deepStrictEqual(second.outcome, { kind: "completed" })
        assert.strictEqual(context.server.requests().filter(isSummaryRequest).length, 1)
        routing.active = 2
        scriptTurn(context, routing, 2, [{ calls: [], usage: 10, overflow: false }])
        yield* context.engine.run(input(context, openingText(2), tools, windowed))
        const main = context.server.requests().filter((request) => !isSummaryRequest(request))
        const last = messagesOf(main[main.length - 1]!)
        const results = last.filter((message) => message.role === "tool")
        assert.strictEqual(results.length, 1)
        assert.include(contentText(results[0]!.content), "maka.archived_tool_result", "the result over one page is archived")
      }),
    ),
  )
})

describe("prune after a background summary was adopted", () => {
  it.live("archives a result left by a batch that settled while the summary was pending, as the summary is adopted", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The second run's first step starts a summary in the background; its main answer (a call
        // with a result over one page) is held until the summary completed, so the batch settles while
        // the summary is still pending and is not pruned then. The summary is adopted at the next step
        // boundary, which then pays the prune the batch owed (docs/engine.md §5.11): the request right
        // after the checkpoint no longer holds the first result whole.
        const held = Respond.gate()
        const context = yield* setup({ script: [{ match: isSummaryRequest, respond: summaryAnswer(summaryText("held")), repeat: true }] }, undefined, {
          concurrency: 4,
        })
        const routing: Routing = { active: 0, final: false }
        scriptTurn(context, routing, 0, [{ calls: [], usage: 4_000, overflow: false }])
        yield* context.engine.run(input(context, openingText(0), tools, windowed))
        routing.active = 1
        context.server.push(mainFor(routing, 1, Respond.hold(held, stepResponse(1, 0, { calls: [true], usage: 10, overflow: false }))))
        context.server.push(
          mainFor(routing, 1, stepResponse(1, 1, { calls: [false], usage: 10, overflow: false })),
          mainFor(routing, 1, stepResponse(1, 2, { calls: [], usage: 10, overflow: false })),
        )
        const running = yield* context.engine.start(input(context, openingText(1), tools, windowed))
        // The summary completes, and its job ends, before the held answer is let through.
        for (;;) {
          const events = yield* context.log.events("session-1")
          if (events.some((stored) => stored.event.fact.kind === "model_completed" && stored.event.invocation.invocationId === running.invocation.invocationId)) break
          yield* Effect.sleep("5 millis")
        }
        yield* Effect.sleep("50 millis")
        held.release()
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        const own = events.filter((stored) => stored.event.invocation.invocationId === running.invocation.invocationId)
        const order = own.flatMap((stored) => {
          const fact = stored.event.fact
          if (fact.kind === "context_checkpoint_recorded") return ["checkpoint"]
          if (fact.kind === "tool_result_archived") return ["archive"]
          return fact.kind === "model_requested" && fact.purpose === "main" ? ["main"] : []
        })
        assert.deepStrictEqual(order, ["main", "checkpoint", "archive", "main", "main"], "the summary is adopted at the second step's boundary, then the owed prune")
        const main = context.server.requests().filter((request) => !isSummaryRequest(request))
        const afterCheckpoint = messagesOf(main[main.length - 2]!).filter((message) => message.role === "tool")
        assert.deepStrictEqual(afterCheckpoint.map((message) => message.tool_call_id), ["call-1-0-0"])
        assert.include(contentText(afterCheckpoint[0]!.content), "maka.archived_tool_result", "archived before the first request after the checkpoint")
        const last = messagesOf(main[main.length - 1]!).filter((message) => message.role === "tool")
        assert.deepStrictEqual(
          last.map((message) => message.tool_call_id),
          ["call-1-0-0", "call-1-1-0"],
        )
        assert.include(contentText(last[0]!.content), "maka.archived_tool_result", "the result over one page is archived")
      }),
    ),
  )
})
