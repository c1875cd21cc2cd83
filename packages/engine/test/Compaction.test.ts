/**
 * Compaction scenarios of docs/engine.md §5.12 and SEMANTICS scenarios 31–46 (docs/scenarios.md §6):
 * standalone, pre-turn and mid-turn checkpoints, the summary job's repair and length retries, the
 * background summary beside a main request, overflow recovery and the shared budget. Real SQLite
 * files and the scripted server on loopback.
 */
import { assert, describe, it } from "@effect/vitest"
import { Digest, Prompts } from "@maka/facts"
import { FactBuilders, History, OpenAiSse, Respond, type ScriptedServer } from "@maka/testkit"
import { EventLogError } from "@maka/event-log"
import { Effect, Fiber, Stream } from "effect"
import * as Agent from "../src/Agent.ts"
import * as Engine from "../src/Engine.ts"
import {
  answer,
  contentText,
  echoCall,
  isSummaryRequest,
  mainEntry,
  overflow,
  stalledSummary,
  summaryAnswer,
  summaryEntry,
  summaryText,
  summaryWithoutNextSteps,
  usage,
  wire,
} from "./support/compaction.ts"
import { expectFrozenSources, factsOf, kinds, recording, reopen } from "./support/harness.ts"
import { catalog, input, setup, type Effects, type Setup } from "./support/setup.ts"

const SYSTEM = FactBuilders.SYSTEM_PROMPT

let compactions = 0
const compactInput = (context: Setup, overrides: Partial<Engine.CompactInput> = {}): Engine.CompactInput => {
  compactions++
  return {
    invocation: FactBuilders.invocation({
      turnId: `compact-turn-${compactions}`,
      runId: `compact-run-${compactions}`,
      invocationId: `compact-invocation-${compactions}`,
    }),
    model: context.model,
    configuration: FactBuilders.configuration({ cwd: context.workspace, model: FactBuilders.modelBinding({ model: "test-model" }) }),
    ...overrides,
  }
}

const noTools = (effects: Effects) => catalog(effects)

/** The wire messages of the server's `index`-th request as `role: text` lines. */
const lines = (context: Setup, index: number) =>
  wire(context.server.requests()[index]!).messages.map((message) => `${message.role}: ${contentText(message.content)}`)

describe("standalone compaction", () => {
  it.live("refuses a compaction whose opening fails its checks with InvalidInput, writing nothing, and the session goes on", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(answer("Ready."))] })
        const refusals = [
          compactInput(context, { requestFingerprint: "" }),
          compactInput(context, { configuration: FactBuilders.configuration({ cwd: "relative/path" }) }),
        ]
        for (const refused of refusals) {
          const error = yield* Effect.flip(context.engine.compact(refused))
          assert.strictEqual(error.reason._tag, "InvalidInput")
        }
        assert.deepStrictEqual(yield* context.log.events("session-1"), [])
        const result = yield* context.engine.run(input(context, "Hello.", noTools({ ran: [] })))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
      }),
    ))

  it.live("folds the history into a checkpoint that later requests start from, also after reopening (scenario 31)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            mainEntry(answer("Noted: the launch code is 4417.")),
            summaryEntry(summaryAnswer(summaryText("launch code recorded"))),
            mainEntry(answer("Ready.")),
          ],
        })
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "Remember: the launch code is 4417.", noTools(effects)))
        const compacted = yield* context.engine.compact(compactInput(context))
        const events = yield* context.log.events("session-1")
        const checkpoints = factsOf(events, "context_checkpoint_recorded")
        assert.strictEqual(checkpoints.length, 1)
        const checkpointEvent = events.find((stored) => stored.event.fact.kind === "context_checkpoint_recorded")!
        assert.deepStrictEqual(compacted.outcome, {
          kind: "context_compact_finished",
          outcome: { kind: "compacted", checkpointId: checkpointEvent.event.id },
        })
        // The checkpoint commits in the terminal's batch: it is the event right before it.
        const terminal = events[events.length - 1]!
        assert.strictEqual(terminal.sequence, checkpointEvent.sequence + 1)
        const checkpoint = checkpoints[0]!.checkpoint
        assert.deepStrictEqual(checkpoint.mode, { kind: "standalone" })
        assert.strictEqual(checkpoint.summary.text, summaryText("launch code recorded"))
        // The summary request: no system prompt, no tools, the 8,000-token limit, the instruction last.
        const summaryRequest = wire(context.server.requests()[1]!)
        assert.isTrue(isSummaryRequest(context.server.requests()[1]!))
        assert.notInclude(summaryRequest.messages.map((message) => message.role), "system")
        assert.isTrue(summaryRequest.tools === undefined || summaryRequest.tools.length === 0)
        assert.strictEqual(summaryRequest.max_tokens ?? summaryRequest.max_completion_tokens, 8_000)
        assert.include(contentText(summaryRequest.messages[0]!.content), "4417")
        assert.strictEqual(
          contentText(summaryRequest.messages[summaryRequest.messages.length - 1]!.content),
          Prompts.compactionAttemptMessage(Prompts.COMPACTION_BASE_INSTRUCTION),
        )
        // The summary covers the history before the compaction's opening.
        const opening = events.find((stored) => stored.event.invocation.invocationId === `compact-invocation-${compactions}`)!
        assert.strictEqual(checkpoint.coveredThrough, opening.sequence - 1)
        // A summary request binds its effective source, also with no archive applied (docs/engine.md §5.4).
        const summaryRequested = factsOf(events, "model_requested").find((fact) => fact.purpose === "summary")!
        assert.strictEqual(summaryRequested.effectiveSourceDigest, Digest.effectiveSource(summaryRequested.sourceDigest, []))

        yield* context.engine.run(input(context, "What next?", noTools(effects)))
        const expected = [`system: ${SYSTEM}`, `user: ${Prompts.CONTINUATION_SUMMARY_PREFIX}${summaryText("launch code recorded")}`, "user: What next?"]
        assert.deepStrictEqual(lines(context, 2), expected)
        const after = yield* context.log.events("session-1")
        const requests = factsOf(after, "model_requested").filter((fact) => fact.purpose === "main")
        assert.strictEqual(requests[requests.length - 1]!.checkpointEventId, checkpointEvent.event.id)

        // A new engine over the same file builds the same request.
        yield* context.log.close
        const reopened = yield* reopen(context.file)
        context.server.push(mainEntry(answer("Still ready.")))
        const again = yield* reopened.run(input(context, "What next?", noTools(effects)))
        const last = lines(context, 3)
        assert.deepStrictEqual(last.slice(0, 2), expected.slice(0, 2))
        assert.notInclude(last.join("\n"), "4417")
        // Its request names the checkpoint too.
        const reread = (yield* reopened.log.events("session-1")).filter(
          (stored) => stored.event.invocation.invocationId === again.invocation.invocationId,
        )
        assert.strictEqual(factsOf(reread, "model_requested")[0]!.checkpointEventId, checkpointEvent.event.id)
      }),
    ),
  )

  it.live("reports unchanged when nothing new was said since the last checkpoint (scenario 32)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [mainEntry(answer("Hello.")), summaryEntry(summaryAnswer(summaryText("greeting")))],
        })
        yield* context.engine.run(input(context, "Hi.", noTools({ ran: [] })))
        const first = yield* context.engine.compact(compactInput(context))
        assert.strictEqual(first.outcome.kind === "context_compact_finished" ? first.outcome.outcome.kind : "", "compacted")
        const second = yield* context.engine.compact(compactInput(context))
        assert.deepStrictEqual(second.outcome, { kind: "context_compact_finished", outcome: { kind: "unchanged", reason: "no_new_history" } })
        assert.strictEqual(context.server.requests().length, 2)
      }),
    ),
  )

  it.live("fails input_too_large when no clean cut of the history fits the read limits, sending nothing (scenario 32)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The log's own refusal (`PrefixTooLarge` with fit: no clean cut fits), reached with a session of
        // a few events by lowering the byte limit the engine's read asks for to 64.
        const context = yield* setup(
          { script: [mainEntry(answer("Hello.")), mainEntry(answer("Still here."))] },
          undefined,
          {},
          {
            wrapLog: (log) => ({
              ...log,
              prepareContextCompaction: (sessionId, options) => log.prepareContextCompaction(sessionId, { ...options, maxBytes: 64 }),
            }),
          },
        )
        yield* context.engine.run(input(context, "Hi.", noTools({ ran: [] })))
        const result = yield* context.engine.compact(compactInput(context))
        assert.deepStrictEqual(result.outcome, { kind: "context_compact_finished", outcome: { kind: "failed", reason: "input_too_large" } })
        assert.strictEqual(context.server.requests().length, 1)
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded"), [])
        assert.deepStrictEqual(kinds(events).slice(-2), ["invocation_opened", "invocation_ended:context_compact_finished"])
        // The session goes on.
        const next = yield* context.engine.run(input(context, "More.", noTools({ ran: [] })))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
      }),
    ),
  )

  it.live("summarises the history through the highest clean cut that fits when the whole history does not", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The event limit the engine's read asks for is lowered to the history's events (observations
        // aside) through turn 2's opening, the clean cut before its main request: the next clean cut,
        // before turn 3's opening, is over it.
        let maxEvents: number | undefined
        const context = yield* setup(
          {
            script: [
              mainEntry(answer("First answer.")),
              mainEntry(answer("Second answer.")),
              mainEntry(answer("Third answer.")),
              summaryEntry(summaryAnswer(summaryText("early turns"))),
            ],
          },
          undefined,
          {},
          {
            wrapLog: (log) => ({
              ...log,
              prepareContextCompaction: (sessionId, options) =>
                log.prepareContextCompaction(sessionId, maxEvents === undefined ? options : { ...options, maxEvents }),
            }),
          },
        )
        for (const message of ["Turn one.", "Turn two.", "Turn three."]) {
          yield* context.engine.run(input(context, message, noTools({ ran: [] })))
        }
        const history = yield* context.log.events("session-1")
        const openings = history.filter((stored) => stored.event.fact.kind === "invocation_opened")
        const through = openings[1]!.sequence
        maxEvents = history.filter((stored) => stored.sequence <= through && stored.event.fact.kind !== "model_observed").length
        const result = yield* context.engine.compact(compactInput(context))
        assert.strictEqual(result.outcome.kind === "context_compact_finished" ? result.outcome.outcome.kind : "", "compacted")
        const [checkpoint] = factsOf(yield* context.log.events("session-1"), "context_checkpoint_recorded")
        assert.strictEqual(checkpoint!.checkpoint.coveredThrough, through)
        const summary = context.server.requests().find(isSummaryRequest)!.body
        assert.include(summary, "Turn two.")
        assert.include(summary, "First answer.")
        assert.notInclude(summary, "Second answer.")
        assert.notInclude(summary, "Turn three.")
      }),
    ),
  )

  it.live("holds a first fold to the fold floor, and a fold over a baseline not (scenario 37)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // 150 tokens out of 12,000 in is below the floor of a first fold (docs/engine.md §5.12).
        const tiny = (marker: string) => summaryEntry(Respond.sse(OpenAiSse.response({ text: [summaryText(marker)], usage: usage(12_000, 150) })))
        const context = yield* setup({
          script: [
            mainEntry(answer("One.")),
            tiny("first"),
            tiny("repaired"),
            summaryEntry(Respond.sse(OpenAiSse.response({ text: [summaryText("kept")], usage: usage(100, 50) }))),
            mainEntry(answer("Two.")),
            tiny("over the baseline"),
          ],
        })
        yield* context.engine.run(input(context, "Turn one.", noTools({ ran: [] })))
        const first = yield* context.engine.compact(compactInput(context))
        assert.deepStrictEqual(first.outcome, {
          kind: "context_compact_finished",
          outcome: { kind: "failed", reason: "malformed_summary_too_small_for_fold" },
        })
        assert.deepStrictEqual(factsOf(yield* context.log.events("session-1"), "context_checkpoint_recorded"), [])
        const second = yield* context.engine.compact(compactInput(context))
        assert.strictEqual(second.outcome.kind === "context_compact_finished" ? second.outcome.outcome.kind : "", "compacted")
        yield* context.engine.run(input(context, "Turn two.", noTools({ ran: [] })))
        // The same usage over a baseline is a summary like any other.
        const third = yield* context.engine.compact(compactInput(context))
        assert.strictEqual(third.outcome.kind === "context_compact_finished" ? third.outcome.outcome.kind : "", "compacted")
        assert.strictEqual(factsOf(yield* context.log.events("session-1"), "context_checkpoint_recorded").length, 2)
      }),
    ),
  )

  it.live("repairs a malformed summary once, then keeps the old history (scenario 33)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            mainEntry(answer("The code is 4417.")),
            summaryEntry(summaryAnswer(summaryWithoutNextSteps())),
            summaryEntry(summaryAnswer(summaryWithoutNextSteps())),
            mainEntry(answer("Still here.")),
          ],
        })
        yield* context.engine.run(input(context, "The code is 4417.", noTools({ ran: [] })))
        const result = yield* context.engine.compact(compactInput(context))
        assert.deepStrictEqual(result.outcome, {
          kind: "context_compact_finished",
          outcome: { kind: "failed", reason: "malformed_summary_missing_section" },
        })
        const repair = wire(context.server.requests()[2]!).messages
        assert.strictEqual(
          contentText(repair[repair.length - 1]!.content),
          Prompts.compactionAttemptMessage(Prompts.compactionRepairInstruction("malformed_summary_missing_section")),
        )
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded"), [])
        yield* context.engine.run(input(context, "And now?", noTools({ ran: [] })))
        assert.include(lines(context, 3).join("\n"), "4417")
      }),
    ),
  )

  it.live("retries a summary cut by length with the shorter instruction, and fails after a second (scenario 34)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            mainEntry(answer("Hello.")),
            summaryEntry(summaryAnswer("## Goal\nA long", "length")),
            summaryEntry(summaryAnswer("## Goal\nStill long", "length")),
          ],
        })
        yield* context.engine.run(input(context, "Hi.", noTools({ ran: [] })))
        const result = yield* context.engine.compact(compactInput(context))
        assert.deepStrictEqual(result.outcome, {
          kind: "context_compact_finished",
          outcome: { kind: "failed", reason: "output_length" },
        })
        const retry = wire(context.server.requests()[2]!).messages
        assert.strictEqual(
          contentText(retry[retry.length - 1]!.content),
          Prompts.compactionAttemptMessage(Prompts.COMPACTION_LENGTH_RETRY_INSTRUCTION),
        )
      }),
    ),
  )

  it.live("stopped mid-stream, it leaves one interrupted request, a cancelled terminal and no checkpoint (scenario 35)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(answer("Hello.")), summaryEntry(Respond.hang())] })
        yield* context.engine.run(input(context, "Hi.", noTools({ ran: [] })))
        const controller = new AbortController()
        const running = yield* Effect.forkChild(context.engine.compact(compactInput(context, { signal: controller.signal })))
        yield* Effect.promise(() => context.server.request(1))
        controller.abort()
        const result = yield* Fiber.join(running)
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        const events = yield* context.log.events("session-1")
        const own = events.filter((stored) => stored.event.invocation.invocationId === `compact-invocation-${compactions}`)
        assert.deepStrictEqual(kinds(own), ["invocation_opened", "model_requested", "model_interrupted:cancelled", "invocation_ended:cancelled"])
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded"), [])
      }),
    ),
  )

  it.live("fails a summary that calls a tool as an adapter error, its request interrupted, with no checkpoint (docs/engine.md §5.6 step 5)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            mainEntry(answer("Hello.")),
            summaryEntry(echoCall("call-1", "x")),
            mainEntry(answer("Hello again.")),
            summaryEntry(
              Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-2", name: "echo", arguments: ['{"value":"y"}'] }], finishReason: "stop" })),
            ),
          ],
        })
        yield* context.engine.run(input(context, "Hi.", noTools({ ran: [] })))
        // Whatever its finish reason (`tool_calls`, then `stop`): never read as a summary.
        const refused = { kind: "failed", class: "model_adapter", message: "Adapter: summary contains tool content" } as const
        const first = yield* context.engine.compact(compactInput(context))
        assert.deepStrictEqual(first.outcome, refused)
        yield* context.engine.run(input(context, "Hi again.", noTools({ ran: [] })))
        const second = yield* context.engine.compact(compactInput(context))
        assert.deepStrictEqual(second.outcome, refused)
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded"), [])
        const summarySteps = factsOf(events, "model_requested").flatMap((fact) => (fact.purpose === "summary" ? [fact.stepId] : []))
        assert.strictEqual(summarySteps.length, 2)
        assert.deepStrictEqual(
          factsOf(events, "model_interrupted").filter((fact) => summarySteps.includes(fact.stepId)).map((fact) => fact.status),
          ["failed", "failed"],
        )
        assert.isFalse(factsOf(events, "model_completed").some((fact) => summarySteps.includes(fact.stepId)))
      }),
    ),
  )
})

/** A model of one permit: no background reservation, every summary runs in the foreground. */
const oneSlot = { concurrency: 1 }
const windowed = { context: { providerId: "openai-compatible", declaredWindow: 1_000 } }

describe("automatic compaction", () => {
  it.live("runs a pre_turn summary before a request whose last main reached the declared window (scenario 38)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          {
            script: [
              mainEntry(answer("The code is 4417.", 5_000)),
              summaryEntry(summaryAnswer(summaryText("code noted"))),
              mainEntry(answer("Done.")),
            ],
          },
          undefined,
          oneSlot,
        )
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "The code is 4417.", noTools(effects), windowed))
        const second = input(context, "What is next?", noTools(effects), windowed)
        const result = yield* context.engine.run(second)
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.isTrue(isSummaryRequest(context.server.requests()[1]!))
        // The summary's source leaves out the current question.
        assert.notInclude(context.server.requests()[1]!.body, "What is next?")
        assert.deepStrictEqual(lines(context, 2), [
          `system: ${SYSTEM}`,
          `user: ${Prompts.CONTINUATION_SUMMARY_PREFIX}${summaryText("code noted")}`,
          "user: What is next?",
        ])
        const events = yield* context.log.events("session-1")
        const own = events.filter((stored) => stored.event.invocation.invocationId === second.invocation.invocationId)
        assert.deepStrictEqual(kinds(own), [
          "invocation_opened",
          "model_requested",
          "model_completed",
          "context_checkpoint_recorded",
          "model_requested",
          "model_completed",
          "invocation_ended:completed",
        ])
        const checkpoint = factsOf(own, "context_checkpoint_recorded")[0]!.checkpoint
        assert.deepStrictEqual(checkpoint.mode, { kind: "pre_turn" })
        assert.strictEqual(checkpoint.coveredThrough, own[0]!.sequence - 1)
      }),
    ),
  )

  it.live("goes on without a checkpoint when a pre_turn summary's request fails (docs/engine.md §5.12)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          {
            script: [
              mainEntry(answer("The code is 4417.", 5_000)),
              summaryEntry(Respond.json(400, Respond.openAiError("the summary was refused", { type: "invalid_request_error" }))),
              mainEntry(answer("Done.")),
            ],
          },
          undefined,
          oneSlot,
        )
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "The code is 4417.", noTools(effects), windowed))
        const result = yield* context.engine.run(input(context, "What is next?", noTools(effects), windowed))
        // The summary's model error adopts nothing; the main request carries the whole history.
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.isTrue(isSummaryRequest(context.server.requests()[1]!))
        assert.deepStrictEqual(lines(context, 2), [
          `system: ${SYSTEM}`,
          "user: The code is 4417.",
          "assistant: The code is 4417.",
          "user: What is next?",
        ])
        assert.deepStrictEqual(factsOf(yield* context.log.events("session-1"), "context_checkpoint_recorded"), [])
      }),
    ),
  )

  it.live("does nothing and caps no output without a declared window, or when the last main ran on another route (scenario 38)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          { script: [mainEntry(answer("One.", 5_000)), mainEntry(answer("Two.", 5_000)), mainEntry(answer("Three."))] },
          undefined,
          oneSlot,
        )
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "First.", noTools(effects)))
        // Without a declared window (nor a model window: only `modelContextWindow` caps output,
        // docs/engine.md §5.12), the configured limit is sent as it is.
        const spy = recording(context.model)
        const second = yield* context.engine.run(input(context, "Second.", noTools(effects), { model: spy.model, mainOutputLimit: 100_000 }))
        assert.deepStrictEqual(second.outcome, { kind: "completed" })
        // Another model id on the same server is another route (a `maka.route.v1` digest of its own): its
        // usage does not make compaction due, and does not cap the output either, though the model's
        // window is declared. Had the last main (5,005 tokens on test-model) counted, the limit would be
        // 50,000 - 5,005 - 8,000 = 36,995.
        const other = recording({ ...context.model, model: "other-model", routeIdentity: FactBuilders.digestOf("other-route") })
        const third = yield* context.engine.run(
          input(context, "Third.", noTools(effects), {
            context: { ...windowed.context, modelContextWindow: 50_000 },
            mainOutputLimit: 100_000,
            model: other.model,
            configuration: FactBuilders.configuration({ cwd: context.workspace, model: FactBuilders.modelBinding({ model: "other-model" }) }),
          }),
        )
        assert.deepStrictEqual(third.outcome, { kind: "completed" })
        assert.isFalse(context.server.requests().some(isSummaryRequest))
        assert.deepStrictEqual(factsOf(yield* context.log.events("session-1"), "context_checkpoint_recorded"), [])
        assert.strictEqual(context.server.requests().length, 3)
        for (const [index, recorded] of [[1, spy], [2, other]] as const) {
          assert.strictEqual(wire(context.server.requests()[index]!).max_tokens, 100_000, `request ${index}`)
          assert.deepStrictEqual(recorded.requests.map((request) => request.maxOutputTokens), [100_000], `request ${index}`)
        }
      }),
    ),
  )

  it.live("anchors a mid_turn checkpoint on the opening after a tool step, and the accepted step renews the budget (scenario 40)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          {
            script: [
              mainEntry(echoCall("call-1", "alpha", 5_000)),
              summaryEntry(summaryAnswer(summaryText("alpha echoed"))),
              mainEntry(echoCall("call-2", "beta", 5_000)),
              summaryEntry(summaryAnswer(summaryText("beta echoed"))),
              mainEntry(answer("All done.")),
            ],
          },
          undefined,
          oneSlot,
        )
        const effects: Effects = { ran: [] }
        const run = input(context, "Echo alpha then beta.", catalog(effects), windowed)
        const result = yield* context.engine.run(run)
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, ["alpha", "beta"])
        const events = yield* context.log.events("session-1")
        const checkpoints = factsOf(events, "context_checkpoint_recorded")
        assert.strictEqual(checkpoints.length, 2)
        const opening = events[0]!
        assert.deepStrictEqual(checkpoints[0]!.checkpoint.mode, { kind: "mid_turn", anchorEventId: opening.event.id })
        assert.strictEqual(checkpoints[1]!.checkpoint.previousCheckpointId, events.find((stored) => stored.event.fact.kind === "context_checkpoint_recorded")!.event.id)
        // Every request's source, main and summary, re-reads from its evidence with the baseline it named.
        assert.strictEqual(yield* expectFrozenSources(context.log, events), 5)
        // After the first checkpoint: system, summary, the opening verbatim; the covered tool step is gone.
        assert.deepStrictEqual(lines(context, 2), [
          `system: ${SYSTEM}`,
          `user: ${Prompts.CONTINUATION_SUMMARY_PREFIX}${summaryText("alpha echoed")}`,
          "user: Echo alpha then beta.",
        ])
        assert.deepStrictEqual(lines(context, 4), [
          `system: ${SYSTEM}`,
          `user: ${Prompts.CONTINUATION_SUMMARY_PREFIX}${summaryText("beta echoed")}`,
          "user: Echo alpha then beta.",
        ])
        // The second summary updates the first.
        assert.include(contentText(wire(context.server.requests()[3]!).messages[0]!.content), "Previous continuation summary:")
      }),
    ),
  )

  it.live("after a mid_turn checkpoint sends system, summary, the opening verbatim and the tool results after the coverage, also after reopening (scenario 40)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          {
            script: [
              mainEntry(echoCall("call-1", "alpha", 5_000)),
              summaryEntry(summaryAnswer(summaryText("alpha echoed"))),
              mainEntry(echoCall("call-2", "beta")),
              mainEntry(answer("All done.")),
            ],
          },
          undefined,
          oneSlot,
        )
        const effects: Effects = { ran: [] }
        const result = yield* context.engine.run(input(context, "Echo alpha then beta.", catalog(effects), windowed))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, ["alpha", "beta"])
        const events = yield* context.log.events("session-1")
        const checkpointEvent = events.find((stored) => stored.event.fact.kind === "context_checkpoint_recorded")!
        const [checkpoint] = factsOf(events, "context_checkpoint_recorded")
        assert.deepStrictEqual(checkpoint!.checkpoint.mode, { kind: "mid_turn", anchorEventId: events[0]!.event.id })
        // The covered tool step (call-1) is gone; call-2's step, after the coverage, follows the opening.
        const expected = [
          `system: ${SYSTEM}`,
          `user: ${Prompts.CONTINUATION_SUMMARY_PREFIX}${summaryText("alpha echoed")}`,
          "user: Echo alpha then beta.",
          "assistant: ",
          "tool: echo: beta",
        ]
        assert.deepStrictEqual(lines(context, 3), expected)
        assert.deepStrictEqual(
          wire(context.server.requests()[3]!).messages.flatMap((message) => ("tool_call_id" in message ? [message.tool_call_id] : [])),
          ["call-2"],
        )

        // A new engine over the same file builds the next request from the log alone: the same
        // baseline, the opening re-sent verbatim as its anchor, the tail after the coverage.
        yield* context.log.close
        const reopened = yield* reopen(context.file)
        context.server.push(mainEntry(answer("Next.")))
        const next = yield* reopened.run(input(context, "And now?", catalog(effects)))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
        assert.deepStrictEqual(lines(context, 4), [...expected, "assistant: All done.", "user: And now?"])
        const own = (yield* reopened.log.events("session-1")).filter((stored) => stored.event.invocation.invocationId === next.invocation.invocationId)
        assert.strictEqual(factsOf(own, "model_requested")[0]!.checkpointEventId, checkpointEvent.event.id)
        assert.deepStrictEqual(effects.ran, ["alpha", "beta"])
      }),
    ),
  )

  it.live("caps the main output by what the model's window leaves after a matching route's retained usage (scenario 39)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [mainEntry(Respond.sse(OpenAiSse.response({ text: ["Noted."], usage: usage(60, 10) }))), mainEntry(answer("Done."))],
        })
        const effects: Effects = { ran: [] }
        const spy = recording(context.model)
        const capped = { model: spy.model, mainOutputLimit: 200_000, context: { providerId: "openai-compatible", modelContextWindow: 200_000 } }
        yield* context.engine.run(input(context, "First.", noTools(effects), capped))
        yield* context.engine.run(input(context, "Second.", noTools(effects), capped))
        // No main before the first request: the limit. Then 200,000 - (60 + 10) - 8,000 = 191,930
        // (docs/engine.md §5.12 "Output limit").
        assert.deepStrictEqual(
          context.server.requests().map((request) => wire(request).max_tokens),
          [200_000, 191_930],
        )
        assert.deepStrictEqual(
          spy.requests.map((request) => request.maxOutputTokens),
          [200_000, 191_930],
        )
        assert.isFalse(context.server.requests().some(isSummaryRequest))
      }),
    ),
  )

  it.live.each([
    ["in the foreground", oneSlot],
    // Beside a main answer slow enough that the summary has failed by the boundary that adopts it.
    ["in the background", {}],
  ] as const)("ends the run reconciliation_required when the summariser calls a tool (scenario 43), %s", ([, slots]) =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          {
            script: [
              mainEntry(answer("Noted.", 5_000)),
              summaryEntry(echoCall("call-9", "x")),
              mainEntry(Respond.sse(Respond.withDelay(OpenAiSse.response({ text: ["Fine."] }), 150))),
            ],
          },
          undefined,
          slots,
        )
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "Note this.", catalog(effects), windowed))
        const result = yield* context.engine.run(input(context, "Next.", catalog(effects), windowed))
        assert.deepStrictEqual(result.outcome.kind === "failed" ? result.outcome.class : result.outcome.kind, "reconciliation_required")
        assert.deepStrictEqual(effects.ran, [])
        assert.deepStrictEqual(factsOf(yield* context.log.events("session-1"), "context_checkpoint_recorded"), [])
      }),
    ),
  )
})

describe("overflow recovery", () => {
  it.live("ends the run reconciliation_required when the recovery summary calls a tool (scenario 43), not context_overflow", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          {
            script: [mainEntry(answer("The code is 4417.")), mainEntry(overflow()), summaryEntry(echoCall("call-9", "x"))],
          },
          undefined,
          oneSlot,
        )
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "The code is 4417.", catalog(effects)))
        const result = yield* context.engine.run(input(context, "Go on.", catalog(effects)))
        assert.deepStrictEqual(result.outcome.kind === "failed" ? [result.outcome.class, result.outcome.message] : result.outcome.kind, [
          "reconciliation_required",
          "summary contains tool content",
        ])
        assert.deepStrictEqual(effects.ran, [])
        assert.deepStrictEqual(factsOf(yield* context.log.events("session-1"), "context_checkpoint_recorded"), [])
      }),
    ),
  )

  it.live("adopts one summary and repeats the step when the provider overflows before any output (scenario 44)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          {
            script: [
              mainEntry(answer("The code is 4417.")),
              mainEntry(overflow()),
              summaryEntry(summaryAnswer(summaryText("code noted"))),
              mainEntry(answer("Recovered.")),
            ],
          },
          undefined,
          oneSlot,
        )
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "The code is 4417.", noTools(effects)))
        const second = input(context, "Go on.", noTools(effects))
        const result = yield* context.engine.run(second)
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        const own = events.filter((stored) => stored.event.invocation.invocationId === second.invocation.invocationId)
        assert.deepStrictEqual(kinds(own), [
          "invocation_opened",
          "model_requested",
          "model_interrupted:failed",
          "model_requested",
          "model_completed",
          "context_checkpoint_recorded",
          "model_requested",
          "model_completed",
          "invocation_ended:completed",
        ])
        assert.deepStrictEqual(lines(context, 3), [
          `system: ${SYSTEM}`,
          `user: ${Prompts.CONTINUATION_SUMMARY_PREFIX}${summaryText("code noted")}`,
          "user: Go on.",
        ])
      }),
    ),
  )

  it.live("does not recover an overflow on the last step (scenario 45)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [mainEntry(answer("Hi.")), mainEntry(overflow())] }, undefined, oneSlot)
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "Hello.", noTools(effects)))
        const result = yield* context.engine.run(input(context, "Again.", noTools(effects), { maxSteps: 1 }))
        assert.strictEqual(result.outcome.kind === "failed" ? result.outcome.class : result.outcome.kind, "context_overflow")
        assert.isFalse(context.server.requests().some(isSummaryRequest))
      }),
    ),
  )

  it.live("does not recover an overflow once a failed proactive summary spent the budget (scenario 46)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          {
            script: [
              mainEntry(answer("Noted.", 5_000)),
              summaryEntry(summaryAnswer(summaryWithoutNextSteps())),
              summaryEntry(summaryAnswer(summaryWithoutNextSteps())),
              mainEntry(overflow()),
            ],
          },
          undefined,
          oneSlot,
        )
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "Note this.", noTools(effects), windowed))
        const result = yield* context.engine.run(input(context, "Next.", noTools(effects), windowed))
        assert.strictEqual(result.outcome.kind === "failed" ? result.outcome.class : result.outcome.kind, "context_overflow")
        assert.strictEqual(context.server.requests().filter(isSummaryRequest).length, 2)
        assert.deepStrictEqual(factsOf(yield* context.log.events("session-1"), "context_checkpoint_recorded"), [])
      }),
    ),
  )
})

/** Waits until the session's log holds a fact of `kind` for a summary request. */
const summaryFact = (context: Setup, kind: "model_completed" | "model_observed") =>
  Effect.gen(function* () {
    for (;;) {
      const events = yield* context.log.events("session-1")
      const summaries = new Set(factsOf(events, "model_requested").filter((fact) => fact.purpose === "summary").map((fact) => fact.stepId))
      if (factsOf(events, kind).some((fact) => summaries.has(fact.stepId))) return
      yield* Effect.sleep("5 millis")
    }
  })
const summaryCompleted = (context: Setup) => summaryFact(context, "model_completed")
const summaryObserved = (context: Setup) => summaryFact(context, "model_observed")

/** The main requests the server received, in order. */
const mainRequests = (context: Setup) => context.server.requests().filter((request) => !isSummaryRequest(request))

/** `request` starts from the continuation summary `text` (after its system message) and no longer carries `covered`. */
const assertFromSummary = (request: ScriptedServer.RecordedRequest, text: string, covered: string) => {
  assert.strictEqual(contentText(wire(request).messages[1]!.content), `${Prompts.CONTINUATION_SUMMARY_PREFIX}${summaryText(text)}`)
  assert.notInclude(request.body, covered)
}

describe("background compaction", () => {
  it.live("streams the summary on its background reservation while the main request holds the model's other permit", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // Two permits: the reservation keeps one, the main request takes the other. A summary that
        // asked for a foreground permit would wait for the main request, which waits for the summary.
        const held = Respond.gate()
        const context = yield* setup(
          {
            script: [
              mainEntry(answer("The code is 4417.", 5_000)),
              mainEntry(Respond.hold(held, echoCall("call-1", "alpha"))),
              summaryEntry(summaryAnswer(summaryText("code noted"))),
              mainEntry(answer("Done.")),
            ],
          },
          undefined,
          { concurrency: 2 },
        )
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "The code is 4417.", catalog(effects), windowed))
        const running = yield* context.engine.start(input(context, "Echo alpha.", catalog(effects), windowed))
        yield* summaryCompleted(context).pipe(
          Effect.timeoutOrElse({ duration: "10 seconds", orElse: () => Effect.die(new Error("the summary never ran beside the held main request")) }),
        )
        assert.isFalse(held.isReleased())
        held.release()
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded").map((fact) => fact.checkpoint.mode.kind), ["pre_turn"])
      }),
    ),
  )

  it.live("runs beside the main request, keeps steering once and the tool tail, and is adopted at the next boundary (scenario 41)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const held = Respond.gate()
        const context = yield* setup({
          script: [
            mainEntry(answer("The code is 4417.", 5_000)),
            mainEntry(Respond.json(429, { error: { message: "slow down", type: "rate_limit" } }, { "retry-after-ms": "5" })),
            mainEntry(Respond.hold(held, echoCall("call-1", "alpha"))),
            summaryEntry(summaryAnswer(summaryText("code noted"))),
            mainEntry(answer("Done.")),
          ],
        })
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "The code is 4417.", catalog(effects), windowed))
        const running = yield* context.engine.start(input(context, "Echo alpha.", catalog(effects), windowed))
        // The summary completes while the main request is still held open.
        yield* summaryCompleted(context)
        assert.isFalse(held.isReleased())
        yield* running.steer("Also mind the tests.")
        yield* Effect.sleep("20 millis")
        held.release()
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(effects.ran, ["alpha"])
        const main = mainRequests(context)
        // The 429 re-sent the frozen request byte for byte.
        assert.strictEqual(main[1]!.body, main[2]!.body)
        assert.include(main[1]!.body, "4417")
        const last = wire(main[3]!).messages
        assert.deepStrictEqual(
          last.map((message) => message.role),
          ["system", "user", "user", "assistant", "tool", "user"],
        )
        assertFromSummary(main[3]!, "code noted", "4417")
        assert.strictEqual(contentText(last[2]!.content), "Echo alpha.")
        assert.strictEqual(main[3]!.body.split("Also mind the tests.").length - 1, 1)
        const events = yield* context.log.events("session-1")
        assert.strictEqual(factsOf(events, "message_steered").length, 1)
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded").map((fact) => fact.checkpoint.mode.kind), ["pre_turn"])
      }),
    ),
  )

  it.live("adopts a summary that finished during the run's last step before its terminal; the next run starts from it", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const held = Respond.gate()
        const context = yield* setup({
          script: [
            mainEntry(answer("The code is 4417.", 5_000)),
            summaryEntry(summaryAnswer(summaryText("code noted"))),
            mainEntry(Respond.hold(held, answer("Noted."))),
            mainEntry(answer("Done.")),
          ],
        })
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "The code is 4417.", noTools(effects), windowed))
        // A one-step turn: its answer is held until the summary beside it has completed, so no step
        // boundary comes after the summary finishes.
        const running = yield* context.engine.start(input(context, "Next.", noTools(effects), windowed))
        yield* summaryCompleted(context)
        held.release()
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        const own = events.filter((stored) => stored.event.invocation.invocationId === running.invocation.invocationId)
        assert.deepStrictEqual(factsOf(own, "context_checkpoint_recorded").map((fact) => fact.checkpoint.mode.kind), ["pre_turn"])
        assert.strictEqual(kinds(own)[kinds(own).length - 1], "invocation_ended:completed")
        yield* context.engine.run(input(context, "Go on.", noTools(effects), windowed))
        assertFromSummary(mainRequests(context)[2]!, "code noted", "4417")
      }),
    ),
  )

  it.live("drains a summary still running when the run completes: no checkpoint, nothing shown, nothing to recover (scenario 42)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const held = Respond.gate()
        const context = yield* setup({
          script: [
            mainEntry(answer("Noted.", 5_000)),
            stalledSummary("SECRET-SUMMARY-TEXT"),
            mainEntry(Respond.hold(held, answer("Done."))),
          ],
        })
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "Note this.", noTools(effects), windowed))
        const running = yield* context.engine.start(input(context, "Next.", noTools(effects), windowed))
        const shown = yield* Effect.forkChild(Stream.runCollect(running.events))
        // The summary's text is durable (observed) before the main answer is let through.
        yield* summaryObserved(context)
        held.release()
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        const own = events.filter((stored) => stored.event.invocation.invocationId === running.invocation.invocationId)
        assert.deepStrictEqual(factsOf(own, "context_checkpoint_recorded"), [])
        assert.include(kinds(own), "model_interrupted:cancelled")
        assert.strictEqual(kinds(own)[kinds(own).length - 1], "invocation_ended:completed")
        const text = yield* Stream.runCollect(Agent.text(Stream.fromIterable(yield* Fiber.join(shown))))
        assert.notInclude(text.join(""), "SECRET-SUMMARY-TEXT")
        yield* context.log.close
        const reopened = yield* reopen(context.file)
        const report = yield* reopened.recover
        assert.strictEqual(report.sealed.length, 0)
      }),
    ),
  )

  it.live("drains a summary still running when the run is cancelled: no checkpoint, nothing shown, nothing to recover (scenario 42)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [
            mainEntry(answer("Noted.", 5_000)),
            stalledSummary("SECRET-SUMMARY-TEXT"),
            mainEntry(Respond.hang()),
          ],
        })
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "Note this.", noTools(effects), windowed))
        const running = yield* context.engine.start(input(context, "Next.", noTools(effects), windowed))
        const shown = yield* Effect.forkChild(Stream.runCollect(running.events))
        // The summary's text is durable (observed) while the main request hangs; then the run is cancelled.
        yield* summaryObserved(context)
        yield* running.cancel
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "cancelled", source: "runtime_cancellation" })
        const events = yield* context.log.events("session-1")
        const own = events.filter((stored) => stored.event.invocation.invocationId === running.invocation.invocationId)
        assert.deepStrictEqual(factsOf(own, "context_checkpoint_recorded"), [])
        // Both requests were closed before the terminal: the summary's and the main one.
        assert.strictEqual(kinds(own).filter((kind) => kind === "model_interrupted:cancelled").length, 2)
        assert.strictEqual(kinds(own)[kinds(own).length - 1], "invocation_ended:cancelled")
        const text = yield* Stream.runCollect(Agent.text(Stream.fromIterable(yield* Fiber.join(shown))))
        assert.notInclude(text.join(""), "SECRET-SUMMARY-TEXT")
        yield* context.log.close
        const reopened = yield* reopen(context.file)
        const report = yield* reopened.recover
        assert.strictEqual(report.sealed.length, 0)
      }),
    ),
  )

  it.live("compacts in the foreground at the session's next due point after its background summary was drained", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const held = Respond.gate()
        const context = yield* setup({
          script: [
            mainEntry(answer("The code is 4417.", 5_000)),
            stalledSummary("unfinished"),
            mainEntry(Respond.hold(held, answer("Noted.", 5_000))),
            summaryEntry(summaryAnswer(summaryText("code noted"))),
            mainEntry(answer("Done.")),
          ],
        })
        const effects: Effects = { ran: [] }
        yield* context.engine.run(input(context, "The code is 4417.", noTools(effects), windowed))
        // A one-step turn ends while its background summary still streams: the summary is drained.
        const running = yield* context.engine.start(input(context, "Next.", noTools(effects), windowed))
        yield* summaryObserved(context)
        held.release()
        assert.deepStrictEqual((yield* running.wait).outcome, { kind: "completed" })
        const drained = yield* context.log.events("session-1")
        assert.deepStrictEqual(factsOf(drained, "context_checkpoint_recorded"), [])
        // The next turn does not race the summary again: it compacts before its main request.
        const before = context.server.requests().length
        const third = yield* context.engine.run(input(context, "Go on.", noTools(effects), windowed))
        assert.deepStrictEqual(third.outcome, { kind: "completed" })
        assert.deepStrictEqual(
          context.server.requests().slice(before).map((request) => (isSummaryRequest(request) ? "summary" : "main")),
          ["summary", "main"],
        )
        assertFromSummary(mainRequests(context)[2]!, "code noted", "4417")
        const events = yield* context.log.events("session-1")
        const own = events.filter((stored) => stored.event.invocation.invocationId === third.invocation.invocationId)
        assert.deepStrictEqual(factsOf(own, "context_checkpoint_recorded").map((fact) => fact.checkpoint.mode.kind), ["pre_turn"])
      }),
    ),
  )
})

describe("a session past the read limits", () => {
  it.live("is compacted in fitted passes at its next run's opening instead of failing", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          {
            script: [
              { match: isSummaryRequest, respond: summaryAnswer(summaryText("the old turns")), repeat: true },
              mainEntry(answer("Back on track.")),
            ],
          },
          undefined,
          oneSlot,
        )
        // 40 turns with answers of 450 KB: 18 MB, more than twice the 8 MiB a read takes, written
        // before compaction was due at 80 % of it.
        const history = new History.History({ sessionId: "session-1" })
        const bulk = "b".repeat(450_000)
        for (let turn = 0; turn < 40; turn++) {
          const run = history.open({ message: `Old turn ${turn}.`, turnId: `old-turn-${turn}`, runId: `old-run-${turn}`, invocationId: `old-invocation-${turn}` })
          run.complete(run.request(), FactBuilders.textStep(`Answer ${turn}: ${bulk}`))
          run.end({ kind: "completed" })
        }
        const writes = history.written.map((written) => written.write)
        for (let start = 0; start < writes.length; start += 20) yield* context.log.appendBatch(writes.slice(start, start + 20))
        const tooLarge = yield* Effect.flip(context.log.readModelContext("session-1"))
        assert.strictEqual(tooLarge.reason._tag === "Rejected" ? tooLarge.reason.rejection._tag : tooLarge.reason._tag, "PrefixTooLarge")

        const result = yield* context.engine.run(input(context, "Continue.", noTools({ ran: [] })))
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1", writes.length, 1_000)
        assert.isAtLeast(writes.length, 160)
        const checkpoints = factsOf(events, "context_checkpoint_recorded")
        assert.isAtLeast(checkpoints.length, 2)
        assert.isTrue(checkpoints.every((fact) => fact.checkpoint.mode.kind === "pre_turn"))
        // Each pass goes on from the last: coverage grows and the chain links.
        for (let index = 1; index < checkpoints.length; index++) {
          assert.isAbove(checkpoints[index]!.checkpoint.coveredThrough, checkpoints[index - 1]!.checkpoint.coveredThrough)
          assert.isDefined(checkpoints[index]!.checkpoint.previousCheckpointId)
        }
        const main = context.server.requests().filter((request) => !isSummaryRequest(request))
        assert.strictEqual(contentText(wire(main[0]!).messages.at(-1)!.content), "Continue.")
        yield* context.log.readModelContext("session-1")
      }),
    ),
  120_000)
})

describe("compaction's refusals and old history", () => {
  it.live("seals failed {event_commit} with no checkpoint visible when the store refuses the checkpoint-and-terminal batch (scenario 36)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup(
          { script: [mainEntry(answer("Hello.")), summaryEntry(summaryAnswer(summaryText("greeting")))] },
          undefined,
          {},
          {
            wrapLog: (log) => ({
              ...log,
              appendBatch: (writes, complete) =>
                writes.some((write) => write.event.fact.kind === "context_checkpoint_recorded")
                  ? Effect.fail(EventLogError.invalidTransition("the store refuses this batch"))
                  : log.appendBatch(writes, complete),
            }),
          },
        )
        yield* context.engine.run(input(context, "Hi.", noTools({ ran: [] })))
        const result = yield* context.engine.compact(compactInput(context))
        assert.strictEqual(result.outcome.kind === "failed" ? result.outcome.class : result.outcome.kind, "event_commit")
        const events = yield* context.log.events("session-1")
        assert.deepStrictEqual(factsOf(events, "context_checkpoint_recorded"), [])
        assert.strictEqual(kinds(events).at(-1), "invocation_ended:failed:event_commit")
        // The session stays usable.
        context.server.push(mainEntry(answer("Still here.")))
        assert.deepStrictEqual((yield* context.engine.run(input(context, "Again.", noTools({ ran: [] })))).outcome, { kind: "completed" })
      }),
    ),
  )

  it.live("archives old unpruned history when a run is admitted, and a later summary sees only the first page (scenario 51)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({
          script: [mainEntry(answer("Seen.")), summaryEntry(summaryAnswer(summaryText("old result paged")))],
        })
        // A run written before pruning existed: its 30,000-character result was never archived.
        const history = new History.History({ sessionId: "session-1" })
        const old = history.open({ message: "Dump the file.", turnId: "old-turn", runId: "old-run", invocationId: "old-invocation" })
        const step = old.request()
        old.complete(step, FactBuilders.toolCallStep([{ id: "call-1", name: "echo", input: { value: "dump" } }]))
        old.succeed(old.dispatch(step, "call-1"), FactBuilders.textOutput(`START-OF-RESULT ${"r".repeat(30_000)} END-OF-RESULT`))
        old.complete(old.request(), FactBuilders.textStep("Dumped."))
        old.end({ kind: "completed" })
        yield* context.log.appendBatch(history.written.map((written) => written.write))

        const run = input(context, "What did it say?", noTools({ ran: [] }))
        yield* context.engine.run(run)
        const events = yield* context.log.events("session-1")
        const own = events.filter((stored) => stored.event.invocation.invocationId === run.invocation.invocationId)
        // The archive is the run's first write after its opening, before its first request.
        assert.deepStrictEqual(kinds(own).slice(0, 3), ["invocation_opened", "tool_result_archived", "model_requested"])
        const body = context.server.requests()[0]!.body
        assert.include(body, "START-OF-RESULT")
        assert.notInclude(body, "END-OF-RESULT")
        yield* context.engine.compact(compactInput(context))
        const summary = context.server.requests()[1]!.body
        assert.isTrue(isSummaryRequest(context.server.requests()[1]!))
        assert.include(summary, "maka.archived_tool_result")
        assert.notInclude(summary, "END-OF-RESULT")
        // The raw result stays readable.
        const settled = events.find((stored) => stored.event.fact.kind === "tool_settled")!
        const raw = yield* context.log.readToolResult("session-1", settled.event.id)
        assert.include(raw.raw.format === "text" ? raw.raw.value : "", "END-OF-RESULT")
      }),
    ),
  )
})
