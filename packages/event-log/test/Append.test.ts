import { Archive, Canonical, Digest, EventWrite, type Fact, type Identity } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import { Context, Deferred, Effect, Fiber, Layer, Option, Result, Stream } from "effect"
import { describe, expect, it } from "vitest"
import { dialects } from "./support/dialects.ts"
import * as EventLog from "../src/EventLog.ts"
import { appendAll, expectRefused, failure, freshId, plain, withLog, withSqliteFile, write } from "./support/harness.ts"

/** A history with one live run: opening, a completed main step calling `read_file` (a) and `list_files` (b). */
const liveWithCalls = () => {
  const history = new History.History()
  const run = history.open()
  const step = run.request()
  run.complete(step, FactBuilders.toolCallStep([{ id: "a", name: "read_file", input: { path: "x" } }, { id: "b", name: "list_files" }]))
  return { history, run, step }
}

for (const dialect of dialects()) {
  describe(`append on ${dialect.name}`, () => {
    it("returns the original sequence for an exact replay and refuses a different body under the same id (scenario 1)", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          const sequences = yield* appendAll(log, history.writes)
          expect(sequences).toEqual([1, 2, 3, 4, 5, 6, 7, 8])
          expect(yield* log.append(history.writes[4]!)).toBe(5)
          expect(yield* log.appendBatch(history.writes.slice(0, 3))).toEqual([1, 2, 3])
          const original = history.writes[1]!
          const changed = plain({ ...original.event, recordedAt: original.event.recordedAt + 1 })
          yield* expectRefused(log, "session-1", log.append(changed), "EventConflict")
          const settle = history.writes[4]!
          yield* expectRefused(log, "session-1", log.append({ ...settle, rawPayload: settle.rawPayload + " " }), "EventConflict")
          expect((yield* log.events("session-1")).length).toBe(8)
        }),
      ))

    it("signals commits: a subscriber sees the last committed sequence, then each later commit; a replay and an empty batch signal nothing", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          yield* appendAll(log, history.writes.slice(0, 2))
          const seen: Array<number> = []
          const fiber = yield* Effect.forkChild(Stream.runForEach(log.commits, (sequence) => Effect.sync(() => seen.push(sequence))))
          yield* Effect.yieldNow
          expect(seen).toEqual([2])
          yield* log.appendBatch(history.writes.slice(2, 5))
          yield* log.append(history.writes[1]!)
          yield* log.appendBatch([])
          yield* log.append(history.writes[5]!)
          yield* Effect.yieldNow
          expect(seen).toEqual([2, 5, 6])
          yield* Fiber.interrupt(fiber)
        }),
      ))

    it("gives a follower slower than the commits each of them in order, and ends it when the log closes", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          yield* appendAll(log, history.writes.slice(0, 2))
          // A follower that takes its time: the commits meanwhile wait for it, in order.
          const seen: Array<number> = []
          const gate = yield* Deferred.make<void>()
          const follower = yield* Effect.forkChild(
            Stream.runForEach(log.commits, (sequence) => Effect.andThen(Effect.sync(() => seen.push(sequence)), Deferred.await(gate))),
          )
          yield* Effect.yieldNow
          expect(seen).toEqual([2])
          for (const next of history.writes.slice(2, 6)) yield* log.append(next)
          yield* Deferred.succeed(gate, undefined)
          yield* Effect.sleep("20 millis")
          expect(seen).toEqual([2, 3, 4, 5, 6])
          // Closed, the log ends its followers.
          yield* log.close
          expect(yield* Fiber.await(follower).pipe(Effect.timeoutOption("2 seconds"), Effect.map((exit) => exit._tag))).toBe("Some")
        }),
      ))

    it("refuses any fact of a sealed invocation (scenario 2)", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          yield* appendAll(log, history.writes)
          const invocation = history.events[0]!.event.invocation
          yield* expectRefused(log, "session-1", log.append(write(invocation, { kind: "invocation_ended", outcome: { kind: "completed" } })), "Sealed")
          yield* expectRefused(
            log,
            "session-1",
            log.append(write(invocation, { kind: "message_steered", message: FactBuilders.deliveredMessage("m1", "late") })),
            "Sealed",
          )
          // Its opening again (a new event): sealed, before the opening rules; while another run of
          // the session is live, still sealed rather than busy; from another session, sealed too.
          const reopening = history.events[0]!.event.fact
          yield* expectRefused(log, "session-1", log.append(write(invocation, reopening)), "Sealed")
          const live = new History.History({ firstId: 700 }).open({ invocationId: "invocation-live", runId: "run-live", turnId: "turn-live" })
          yield* log.append(live.history.writes[0]!)
          yield* expectRefused(log, "session-1", log.append(write(invocation, reopening)), "Sealed")
          yield* expectRefused(log, "session-9", log.append(write({ ...invocation, sessionId: "session-9" }, reopening)), "Sealed")
        }),
      ))

    it("refuses a second live opening in a session, a reopened invocation, and a fact without its opening (scenario 2)", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          yield* appendAll(log, history.writes)
          const other = new History.History({ firstId: 500 }).open({ invocationId: "invocation-2", runId: "run-2", turnId: "turn-2" })
          yield* expectRefused(log, "session-1", log.append(other.history.writes[0]!), "SessionBusy")
          const reopened = write(run.invocation, history.events[0]!.event.fact)
          yield* expectRefused(log, "session-1", log.append(reopened), "InvalidTransition", "already opened")
          const orphan = write({ ...run.invocation, invocationId: "invocation-9" }, { kind: "model_interrupted", stepId: "s", status: "failed" })
          yield* expectRefused(log, "session-1", log.append(orphan), "InvalidTransition", "no opening")
          const mismatched = write({ ...run.invocation, runId: "run-x" }, { kind: "model_interrupted", stepId: "s", status: "failed" })
          yield* expectRefused(log, "session-1", log.append(mismatched), "InvalidTransition", "differs from its opening")
        }),
      ))

    it("refuses tool calls that name no local call of a completed main step", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, run, step } = liveWithCalls()
          yield* appendAll(log, history.writes)
          const dispatch = (toolCallId: string, name: string, input: Identity.Json, stepId = step) =>
            write(run.invocation, {
              kind: "tool_dispatched",
              operationId: `${stepId}:${toolCallId}`,
              call: { toolCallId, origin: { kind: "provider", stepId } },
              name,
              input,
            })
          yield* expectRefused(log, "session-1", log.append(dispatch("z", "read_file", {})), "InvalidTransition", "does not match")
          yield* expectRefused(log, "session-1", log.append(dispatch("a", "list_files", { path: "x" })), "InvalidTransition")
          yield* expectRefused(log, "session-1", log.append(dispatch("a", "read_file", { path: "y" })), "InvalidTransition")
          yield* expectRefused(log, "session-1", log.append(dispatch("a", "read_file", { path: "x" }, "no-step")), "InvalidTransition")
          yield* log.append(dispatch("a", "read_file", { path: "x" }))
          const rejectAfterDispatch = write(run.invocation, {
            kind: "tool_rejected",
            operationId: `${step}:a`,
            call: { toolCallId: "a", origin: { kind: "provider", stepId: step } },
            name: "read_file",
            input: { path: "x" },
            reason: { kind: "cancelled" },
          })
          yield* expectRefused(log, "session-1", log.append(rejectAfterDispatch), "InvalidTransition", "already dispatched")
          const standalone = (operationId: string) =>
            write(run.invocation, {
              kind: "tool_dispatched",
              operationId,
              call: { toolCallId: "s1", origin: { kind: "standalone" } },
              name: "anything",
              input: null,
            })
          yield* log.append(standalone("host-op-1"))
          yield* expectRefused(log, "session-1", log.append(standalone(`${step}:a`)), "InvalidTransition", "already used")
        }),
      ))

    it("refuses a settlement without a dispatch, a second settlement, and settles only with a matching payload (scenario 3)", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, run, step } = liveWithCalls()
          yield* appendAll(log, history.writes)
          const settleA = Result.getOrThrow(
            EventWrite.toolSuccess({
              id: freshId(),
              recordedAt: 2,
              invocation: run.invocation,
              operationId: `${step}:a`,
              output: FactBuilders.textOutput("content"),
            }),
          )
          yield* expectRefused(log, "session-1", log.append(settleA), "InvalidTransition", "needs a dispatch")
          const operation = run.dispatch(step, "a")
          yield* log.append(history.writes[history.writes.length - 1]!)
          yield* expectRefused(log, "session-1", log.append({ ...settleA, rawPayload: '{"format":"text","value":"other"}' }), "PayloadMismatch")
          const { rawPayload: _dropped, ...withoutPayload } = settleA
          yield* expectRefused(log, "session-1", log.append(withoutPayload), "PayloadMismatch")
          yield* log.append(settleA)
          const again = write(run.invocation, { kind: "tool_settled", operationId: operation, outcome: { kind: "failed", message: "x" } })
          yield* expectRefused(log, "session-1", log.append(again), "InvalidTransition", "already settled")
        }),
      ))

    it("refuses model facts without their request or after its end, a reused step id and a second unresolved request (scenario 3)", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          run.complete(step, FactBuilders.textStep("done"))
          yield* appendAll(log, history.writes)
          const observed = write(run.invocation, { kind: "model_observed", stepId: step, event: { kind: "part_delta", id: "0", text: "x" } })
          yield* expectRefused(log, "session-1", log.append(observed), "InvalidTransition", "already completed")
          const interrupted = write(run.invocation, { kind: "model_interrupted", stepId: step, status: "failed" })
          yield* expectRefused(log, "session-1", log.append(interrupted), "InvalidTransition")
          const unknownStep = write(run.invocation, { kind: "model_completed", stepId: "nope", output: FactBuilders.textStep("x") })
          yield* expectRefused(log, "session-1", log.append(unknownStep), "InvalidTransition", "no request")
          const request = history.events[1]!.event.fact
          if (request.kind !== "model_requested") throw new Error("expected a request")
          yield* expectRefused(log, "session-1", log.append(write(run.invocation, request)), "InvalidTransition", "already used")
          yield* log.append(write(run.invocation, { ...request, stepId: "step-2" }))
          yield* expectRefused(log, "session-1", log.append(write(run.invocation, { ...request, stepId: "step-3" })), "InvalidTransition", "already unresolved")
          yield* log.append(write(run.invocation, { ...request, stepId: "summary-1", purpose: "summary" }))
        }),
      ))

    it("refuses a main request in a context_compact invocation", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open({ input: { kind: "context_compact", requestFingerprint: "compact-1" } })
          yield* appendAll(log, history.writes)
          run.request({ purpose: "main" })
          yield* expectRefused(log, "session-1", log.append(history.writes[1]!), "InvalidTransition", "does not allow main")
          const summary = new History.History({ firstId: 700 })
          const compact = summary.open({ input: { kind: "context_compact", requestFingerprint: "compact-1" } })
          compact.request({ purpose: "summary", stepId: "summary-step" })
          yield* log.append(summary.writes[1]!)
        }),
      ))

    it("refuses a clean completion while work is unresolved, and accepts a failure", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, run, step } = liveWithCalls()
          yield* appendAll(log, history.writes)
          const completed = () => write(run.invocation, { kind: "invocation_ended", outcome: { kind: "completed" } })
          yield* expectRefused(log, "session-1", log.append(completed()), "InvalidTransition", "neither rejected nor settled")
          run.dispatch(step, "a")
          run.reject(step, "b", { kind: "cancelled" })
          yield* appendAll(log, history.writes.slice(-2))
          yield* expectRefused(log, "session-1", log.append(completed()), "InvalidTransition", "unsettled")
          run.request()
          yield* log.append(history.writes[history.writes.length - 1]!)
          run.fail(`${step}:a`, "boom")
          yield* log.append(history.writes[history.writes.length - 1]!)
          yield* expectRefused(log, "session-1", log.append(completed()), "InvalidTransition", "unresolved")
          yield* log.append(write(run.invocation, { kind: "invocation_ended", outcome: { kind: "failed", class: "host_interrupted" } }))
        }),
      ))

    it("accepts a failed end while a dispatch is still unsettled, where a clean completion is refused (scenario 4)", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, run, step } = liveWithCalls()
          const operation = run.dispatch(step, "a")
          run.reject(step, "b", { kind: "cancelled" })
          yield* appendAll(log, history.writes)
          // Only the dispatch of `a` is open: no unresolved request, no unanswered local call.
          yield* expectRefused(
            log,
            "session-1",
            log.append(write(run.invocation, { kind: "invocation_ended", outcome: { kind: "completed" } })),
            "InvalidTransition",
            "a dispatched tool is unsettled",
          )
          // docs/log-format.md §3.3 rule 7: a `failed` terminal is allowed over the open dispatch.
          const failed = write(run.invocation, { kind: "invocation_ended", outcome: { kind: "failed", class: "outcome_unknown" } })
          const sequence = yield* log.append(failed)
          const events = yield* log.events("session-1")
          expect(events.at(-1)).toEqual({ sequence, event: failed.event })
          // The dispatch stays unsettled under the seal.
          expect(events.filter((stored) => stored.event.fact.kind === "tool_dispatched").map((stored) => stored.event.fact)).toMatchObject([{ operationId: operation }])
          expect(events.some((stored) => stored.event.fact.kind === "tool_settled")).toBe(false)
        }),
      ))

    it("refuses a steering message delivered twice in a session", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          run.steer("m-1", "also check the tests")
          yield* appendAll(log, history.writes)
          const again = write(run.invocation, { kind: "message_steered", message: FactBuilders.deliveredMessage("m-1", "different") })
          yield* expectRefused(log, "session-1", log.append(again), "InvalidTransition", "already delivered")
        }),
      ))

    it("checks a checkpoint against its completed summary request and the opening's mode", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const summary = run.request({ purpose: "summary", stepId: "summary-1" })
          run.complete(summary, FactBuilders.textStep(FactBuilders.VALID_SUMMARY))
          yield* appendAll(log, history.writes)
          const request = history.events[1]!.event.fact
          if (request.kind !== "model_requested") throw new Error("expected a request")
          const checkpoint = (overrides: Partial<Fact.ContextCheckpointRecorded["checkpoint"]>) =>
            write(run.invocation, {
              kind: "context_checkpoint_recorded",
              checkpoint: {
                mode: { kind: "pre_turn" },
                coveredThrough: request.sourceHighWater,
                sourceDigest: request.sourceDigest,
                summary: { format: "sections_v1", text: FactBuilders.VALID_SUMMARY },
                summaryStepId: summary,
                ...overrides,
              },
            })
          yield* expectRefused(log, "session-1", log.append(checkpoint({ summaryStepId: "other" })), "InvalidTransition", "completed summary")
          yield* expectRefused(log, "session-1", log.append(checkpoint({ coveredThrough: 2 })), "InvalidTransition", "coveredThrough")
          yield* expectRefused(log, "session-1", log.append(checkpoint({ sourceDigest: FactBuilders.digestOf("x") })), "InvalidTransition", "sourceDigest")
          yield* expectRefused(log, "session-1", log.append(checkpoint({ mode: { kind: "standalone" } })), "InvalidTransition", "standalone")
          yield* expectRefused(
            log,
            "session-1",
            log.append(checkpoint({ mode: { kind: "mid_turn", anchorEventId: FactBuilders.eventId(999) } })),
            "InvalidTransition",
            "anchors",
          )
          yield* log.append(checkpoint({ mode: { kind: "mid_turn", anchorEventId: history.events[0]!.event.id } }))
        }),
      ))

    it("commits a standalone checkpoint only with the terminal that names it", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const base = History.smallRun()
          yield* appendAll(log, base.writes)
          const compact = base.open({ input: { kind: "context_compact", requestFingerprint: "compact-1" } })
          const summary = compact.request({ purpose: "summary", stepId: "summary-1" })
          compact.complete(summary, FactBuilders.textStep(FactBuilders.VALID_SUMMARY))
          yield* appendAll(log, base.writes.slice(8))
          const request = base.events[9]!.event.fact
          if (request.kind !== "model_requested") throw new Error("expected a request")
          const checkpoint = write(compact.invocation, {
            kind: "context_checkpoint_recorded",
            checkpoint: {
              mode: { kind: "standalone" },
              coveredThrough: request.sourceHighWater,
              sourceDigest: request.sourceDigest,
              summary: { format: "sections_v1", text: FactBuilders.VALID_SUMMARY },
              summaryStepId: summary,
            },
          })
          yield* expectRefused(log, "session-1", log.append(checkpoint), "InvalidTransition", "standalone checkpoint")
          const terminal = write(compact.invocation, {
            kind: "invocation_ended",
            outcome: { kind: "context_compact_finished", outcome: { kind: "compacted", checkpointId: checkpoint.event.id } },
          })
          const sequences = yield* log.appendBatch([checkpoint, terminal])
          expect(sequences.length).toBe(2)
          expect(sequences[1]).toBe(sequences[0]! + 1)
          expect((yield* log.events("session-1")).slice(-2).map((stored) => stored.event.id)).toEqual([checkpoint.event.id, terminal.event.id])
        }),
      ))

    it("checks an archive against the result it replaces, archives a result once, and replays an archive write idempotently", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          run.complete(step, FactBuilders.toolCallStep([{ id: "a", name: "read_file", input: { path: "big" } }]))
          const operation = run.dispatch(step, "a")
          const settled = run.succeed(operation, FactBuilders.textOutput("line\n".repeat(4_000)))
          yield* appendAll(log, history.writes)
          const fact = settled.event.fact
          if (fact.kind !== "tool_settled" || fact.outcome.kind !== "succeeded") throw new Error("expected a success")
          const placeholder = Archive.prepare(settled.event.id, "a", "read_file", { kind: "projection", projection: fact.outcome.projection })!
          const archive = (value: Archive.ArchivedPlaceholder) => write(run.invocation, { kind: "tool_result_archived", placeholder: value })
          yield* expectRefused(
            log,
            "session-1",
            log.append(archive({ ...placeholder, identity: { ...placeholder.identity, toolName: "list_file" } })),
            "InvalidTransition",
          )
          const shorter = Archive.pageAt(placeholder.identity, Archive.body({ kind: "projection", projection: fact.outcome.projection }), 0)!
          const tampered = { ...placeholder, identity: { ...placeholder.identity, bodySha256: "0".repeat(64) }, page: shorter }
          yield* expectRefused(log, "session-1", log.append(archive(tampered)), "InvalidTransition", "differs")
          // A forged page (scenario 50): the genuine identity, one character of the page changed.
          expect(shorter).toEqual(placeholder.page)
          const text = placeholder.page.text
          const forgedText = `${text.slice(0, 10)}${text[10] === "x" ? "y" : "x"}${text.slice(11)}`
          expect(forgedText.length).toBe(text.length)
          const forged = { ...placeholder, page: { ...placeholder.page, text: forgedText } }
          yield* expectRefused(log, "session-1", log.append(archive(forged)), "InvalidTransition", "differs")
          expect((yield* log.events("session-1")).some((stored) => stored.event.fact.kind === "tool_result_archived")).toBe(false)
          const archived = archive(placeholder)
          const sequence = yield* log.append(archived)
          // Replaying the same write is idempotent (scenario 50): its sequence, nothing inserted.
          const count = (yield* log.events("session-1")).length
          expect(yield* log.append(archived)).toBe(sequence)
          expect(yield* log.appendBatch([archived])).toEqual([sequence])
          expect((yield* log.events("session-1")).length).toBe(count)
          yield* expectRefused(log, "session-1", log.append(archive(placeholder)), "InvalidTransition", "already archived")
        }),
      ))

    it("refuses a hand-built write holding a lone surrogate or a NUL id, writes nothing, and stays usable", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const opening = History.smallRun().events[0]!.event
          const handBuilt = (event: typeof opening): EventWrite.EventWrite => ({ event, json: Canonical.stringify(event) })
          for (const sessionId of ["\ud800x", "a\u0000b"]) {
            const event = { ...opening, invocation: { ...opening.invocation, sessionId } }
            const error = yield* failure(log.append(handBuilt(event)))
            expect(error.reason._tag === "Rejected" && error.reason.rejection._tag).toBe("InvalidTransition")
            expect(error.message).toContain("not a checked EventWrite")
          }
          // A batch that is no list is refused the same way, never a defect.
          for (const batch of [null, undefined, { length: 1 }]) {
            const refused = yield* failure(log.appendBatch(batch as unknown as ReadonlyArray<EventWrite.EventWrite>))
            expect(refused.reason._tag === "Rejected" && refused.reason.rejection._tag).toBe("InvalidTransition")
            expect(refused.message).toContain("the batch is not a list of checked EventWrites")
          }
          // A `complete` that is no function, or builds no list, is refused too, nothing written.
          const leading = History.smallRun().writes.slice(0, 1)
          const wrongComplete = yield* failure(log.appendBatch(leading, "x" as unknown as EventLog.CompleteBatch))
          expect(wrongComplete.reason._tag === "Rejected" && wrongComplete.reason.rejection._tag).toBe("InvalidTransition")
          expect(wrongComplete.message).toContain("complete is not a function")
          const noList = yield* failure(log.appendBatch(leading, (() => null) as unknown as EventLog.CompleteBatch))
          expect(noList.reason._tag === "Rejected" && noList.reason.rejection._tag).toBe("InvalidTransition")
          expect(noList.message).toContain("returned no list")
          const truncatedEmoji = { ...opening, fact: { ...opening.fact, input: { kind: "message", content: { text: "hi \ud83d" } } } } as typeof opening
          yield* expectRefused(log, "session-1", log.append(handBuilt(truncatedEmoji)), "InvalidTransition", "well-formed")
          expect(yield* log.prefix({ kind: "root" })).toMatchObject({ highWater: 0, events: [] })
          const history = History.smallRun()
          expect((yield* appendAll(log, history.writes)).length).toBe(8)
        }),
      ))

    it("stores and validates the event it checked: a getter that answers differently on a later read changes nothing", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          const opening = history.writes[0]!
          let reads = 0
          const invocation = { ...opening.event.invocation } as { sessionId: string }
          Object.defineProperty(invocation, "sessionId", { enumerable: true, get: () => (++reads === 1 ? "session-1" : "session-evil") })
          const split: EventWrite.EventWrite = { event: { ...opening.event, invocation } as typeof opening.event, json: opening.json }
          const [sequence] = yield* log.appendBatch([split])
          expect(sequence).toBe(1)
          // Stored under the session its bytes name, and the genuine writes go on after it.
          expect((yield* log.events("session-1")).map((stored) => stored.event.invocation.sessionId)).toEqual(["session-1"])
          expect(yield* log.events("session-evil")).toEqual([])
          expect((yield* log.sessionSummaries()).map((summary) => summary.sessionId)).toEqual(["session-1"])
          expect(yield* appendAll(log, history.writes)).toEqual(history.writes.map((_, index) => index + 1))
        }),
      ))

    it("refuses a write whose json is not its event's: a forged terminal of another session is never stored", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const first = new History.History()
          const runA = first.open()
          const second = new History.History({ sessionId: "session-2", firstId: 500 })
          const runB = second.open({ invocationId: "invocation-b", runId: "run-b", turnId: "turn-b" })
          yield* appendAll(log, [...first.writes, ...second.writes])
          const terminalA = write(runA.invocation, { kind: "invocation_ended", outcome: { kind: "failed", class: "cancelled" } })
          const terminalB = write(runB.invocation, { kind: "invocation_ended", outcome: { kind: "completed" } })
          // The log validates session-1's terminal while the stored bytes would seal session-2.
          yield* expectRefused(log, "session-2", log.append({ event: terminalA.event, json: terminalB.json }), "InvalidTransition", "canonical JSON")
          // The same forgery the other way round: a checked write whose event was swapped afterwards.
          yield* expectRefused(log, "session-1", log.append({ ...terminalB, event: terminalA.event }), "InvalidTransition", "canonical JSON")
          yield* expectRefused(log, "session-1", log.appendBatch([terminalB, { event: terminalA.event, json: terminalB.json }]), "InvalidTransition")
          expect((yield* log.events("session-1")).length).toBe(1)
          expect((yield* log.events("session-2")).length).toBe(1)
          expect(yield* log.appendBatch([terminalA, terminalB])).toHaveLength(2)
        }),
      ))

    it("appends a batch all or nothing, validating each write against the earlier ones", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          const broken = [...history.writes.slice(0, 4), write(history.events[0]!.event.invocation, { kind: "tool_settled", operationId: "nope", outcome: { kind: "failed", message: "x" } })]
          const error = yield* failure(log.appendBatch(broken))
          expect(error.reason._tag).toBe("Rejected")
          expect(yield* log.events("session-1")).toEqual([])
          // PostgreSQL hands out sequence values at insert, so a rolled-back batch may leave a gap.
          const sequences = yield* log.appendBatch(history.writes)
          expect(sequences.length).toBe(8)
          expect(sequences.every((sequence, index) => index === 0 || sequence > sequences[index - 1]!)).toBe(true)
          expect((yield* log.events("session-1")).map((stored) => stored.event.id)).toEqual(history.events.map((stored) => stored.event.id))
        }),
      ))

    it("admits a continuation only on the exact sealed prefix of its source, once per boundary", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          yield* appendAll(log, history.writes)
          const source = (yield* log.runPrefix("session-1", "run-1"))!
          const configuration = history.events[0]!.event.fact
          if (configuration.kind !== "invocation_opened") throw new Error("expected an opening")
          const rootBase = { highWater: 0, digest: emptyRootDigest() }
          const continuation = (index: number, claimId: string, digest = source.digest, base = rootBase) =>
            write(
              { sessionId: "session-1", turnId: `turn-c${index}`, runId: `run-c${index}`, invocationId: `invocation-c${index}` },
              {
                kind: "invocation_opened",
                configuration: configuration.configuration,
                input: {
                  kind: "continuation",
                  requestFingerprint: FactBuilders.digestOf(`fingerprint-${index}`),
                  claim: {
                    id: claimId,
                    source: { invocation: source.invocation, highWater: source.highWater, digest },
                    base,
                    replay: { version: 1, digest: FactBuilders.digestOf("replay"), routeIdentity: FactBuilders.digestOf("route") },
                  },
                },
              },
            )
          yield* expectRefused(log, "session-1", log.append(continuation(1, "claim-1", FactBuilders.digestOf("other"))), "InvalidTransition", "exact prefix")
          const badBase = continuation(1, "claim-1", source.digest, { highWater: 0, digest: FactBuilders.digestOf("base") })
          yield* expectRefused(log, "session-1", log.append(badBase), "InvalidTransition", "base")
          const accepted = continuation(1, "claim-1")
          yield* log.append(accepted)
          yield* log.append(write(accepted.event.invocation, { kind: "invocation_ended", outcome: { kind: "failed", class: "runtime_internal" } }))
          expect((yield* log.continuationForSource({ invocation: source.invocation, highWater: source.highWater, digest: source.digest }))?.event.id).toBe(accepted.event.id)
          yield* expectRefused(log, "session-1", log.append(continuation(2, "claim-2")), "InvalidTransition", "already claimed")
        }),
      ))

    it("reserves a session for its sealed handoff successor", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          run.complete(step, FactBuilders.textStep("working"))
          const pause = run.pause()
          run.end({ kind: "handoff_paused", pause })
          yield* appendAll(log, history.writes)
          const intruder = new History.History({ firstId: 900 }).open({ invocationId: "invocation-7", runId: "run-7", turnId: "turn-7" })
          yield* expectRefused(log, "session-1", log.append(intruder.history.writes[0]!), "Reserved")
          const prefix = yield* log.runPrefix("session-1", "run-1")
          expect(prefix?.highWater).toBe(4)
          const emptyBase = { highWater: 0, digest: "sha256:" + "0".repeat(64) }
          const successorInvocation = { ...run.invocation, runId: pause.intent.successorRunId, invocationId: pause.intent.successorInvocationId }
          const opening = (claimBase: { readonly highWater: number; readonly digest: string }, configuration = history.events[0]!.event.fact) => {
            if (configuration.kind !== "invocation_opened") throw new Error("expected an opening")
            return write(successorInvocation, {
              kind: "invocation_opened",
              configuration: configuration.configuration,
              input: {
                kind: "handoff",
                claim: {
                  id: pause.intent.claimId,
                  source: { invocation: run.invocation, highWater: prefix!.highWater, digest: prefix!.digest },
                  base: claimBase,
                  replay: pause.execution.replay,
                },
                pause,
              },
            })
          }
          yield* expectRefused(log, "session-1", log.append(opening({ ...emptyBase, digest: FactBuilders.digestOf("wrong") })), "InvalidTransition", "base")
          const rootBase = { highWater: 0, digest: emptyRootDigest() }
          yield* log.append(opening(rootBase))
          expect(yield* log.hasPendingHandoff("session-1")).toBe(false)
        }),
      ))
  })
}

const emptyRootDigest = () => Digest.logPrefix({ kind: "session", id: "session-1" }, [], 0)

describe("commit notifications of a log opened over events (SQLite)", () => {
  it("start at the log's high water, not at 0", () =>
    withSqliteFile((log, file) =>
      Effect.gen(function* () {
        yield* appendAll(log, History.smallRun().writes.slice(0, 3))
        const reader = yield* Effect.map(Layer.build(EventLog.layerSqliteReadOnly(file)), (context) => Context.get(context, EventLog.EventLog))
        expect(yield* Stream.runHead(reader.commits)).toEqual(Option.some(3))
      }),
    ))
})
