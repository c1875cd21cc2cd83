import { Archive, Canonical, Digest, type Event, Fact } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import BetterSqlite3 from "better-sqlite3"
import * as path from "node:path"
import * as EventLog from "../src/EventLog.ts"
import type { EventLogError } from "../src/EventLogError.ts"
import { latestMain } from "../src/internal/context.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import * as Testing from "../src/testing.ts"
import { buildSqliteAtVersion, rawEvent, temporaryDirectory } from "./fixtures/storage.ts"
import { dialects } from "./support/dialects.ts"
import { appendAll, bigRead, failure, placeholderOf, summarised, withLog, write } from "./support/harness.ts"

const kinds = (items: ReadonlyArray<{ readonly kind: string; readonly stored?: Event.StoredEvent }>) =>
  items.map((item) => (item.kind === "canonical" ? item.stored!.event.fact.kind : "archived"))

/** Two turns, the second compacted mid-turn: returns the history and the checkpoint's event. */
const compactedHistory = () => {
  const history = History.smallRun()
  const run = history.open({ message: "Now read the README." })
  const first = run.request()
  run.complete(first, FactBuilders.toolCallStep([{ id: "r", name: "read_file", input: { path: "README.md" } }]))
  const operation = run.dispatch(first, "r")
  run.succeed(operation, FactBuilders.textOutput("# Project"))
  const checkpoint = summarised(history, run)
  run.steer("m-1", "and the tests")
  return { history, run, checkpoint }
}

for (const dialect of dialects()) {
  describe(`reads on ${dialect.name}`, () => {
    it("materialises baseline, anchor and tail with the tail's exclusions", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, run, checkpoint } = compactedHistory()
          yield* appendAll(log, history.writes)
          const observed = write(run.invocation, {
            kind: "model_requested",
            stepId: "main-live",
            modelId: "test-model",
            purpose: "main",
            sourceScope: { kind: "session", id: "session-1" },
            sourceHighWater: 15,
            sourceDigest: FactBuilders.digestOf("s"),
            inputDigest: FactBuilders.digestOf("i"),
            routeIdentity: FactBuilders.digestOf("route"),
          })
          yield* log.append(observed)
          yield* log.append(write(run.invocation, { kind: "model_observed", stepId: "main-live", event: { kind: "part_delta", id: "0", text: "partial" } }))
          const source = yield* log.readModelContext("session-1", { current: run.invocation.invocationId })
          expect(source.baseline?.eventId).toBe(checkpoint.event.id)
          expect(source.anchor?.event.id).toBe(run.opening.event.id)
          // Covered through the summary's source (sequence 13); the summary step's facts, the checkpoint
          // and the observation never enter the tail.
          expect(kinds(source.tail)).toEqual(["message_steered", "model_requested"])
          expect(source.sourceEvidence.highWater).toBe(19)
          const all = yield* log.events("session-1")
          expect(source.sourceEvidence.digest).toBe(
            Digest.logPrefix({ kind: "session", id: "session-1" }, all.map((stored) => ({ sequence: stored.sequence, json: Canonical.stringify(stored.event) })), 19),
          )
          expect(source.effectiveSourceDigest).toBe(Digest.effectiveSource(source.sourceEvidence.digest, []))
        }),
      ))

    it("refuses a tail over its event or byte limit, never returning part of it", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          yield* appendAll(log, history.writes)
          const full = yield* log.readModelContext("session-1")
          expect(full.tail.length).toBe(8)
          const tooFew = yield* failure(log.readModelContext("session-1", { maxEvents: 7 }))
          expect(tooFew.reason._tag === "Rejected" && tooFew.reason.rejection._tag).toBe("PrefixTooLarge")
          const bytes = history.writes.reduce((total, item) => total + Canonical.utf8Length(item.json), 0)
          expect((yield* log.readModelContext("session-1", { maxBytes: bytes })).tail.length).toBe(8)
          const tooSmall = yield* failure(log.readModelContext("session-1", { maxBytes: bytes - 1 }))
          expect(tooSmall.reason._tag === "Rejected" && tooSmall.reason.rejection._tag).toBe("PrefixTooLarge")
        }),
      ))

    it("replaces an archived result in the tail and binds it in the effective source digest", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const settled = bigRead(run, "a")
          const archive = run.archive(placeholderOf(settled, "a"))
          yield* appendAll(log, history.writes)
          const source = yield* log.readModelContext("session-1", { current: run.invocation.invocationId })
          const item = source.tail.find((entry) => entry.kind === "archived")
          expect(item?.kind === "archived" && item.replacement.kind).toBe("maka.archived_tool_result")
          expect(kinds(source.tail)).toEqual(["invocation_opened", "model_requested", "model_completed", "tool_dispatched", "archived"])
          expect(source.effectiveSourceDigest).toBe(
            Digest.effectiveSource(source.sourceEvidence.digest, [{ settledEventId: settled.event.id, archiveEventId: archive.event.id }]),
          )
          const raw = yield* log.readToolResult("session-1", settled.event.id)
          expect(raw.toolName).toBe("read_file")
          expect(raw.raw).toEqual(FactBuilders.textOutput("row\n".repeat(5_000)))
        }),
      ))

    it("charges an archived result its replacement's bytes, marks an archived failure, and allows a tail of exactly its limits", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          run.complete(
            step,
            FactBuilders.toolCallStep([
              { id: "a", name: "read_file", input: { path: "big" } },
              { id: "b", name: "read_file", input: { path: "other" } },
            ]),
          )
          const succeeded = run.succeed(run.dispatch(step, "a"), FactBuilders.textOutput("row\n".repeat(5_000)))
          const message = `cannot read: ${"e".repeat(20_000)}`
          const failed = run.fail(run.dispatch(step, "b"), message)
          run.archive(placeholderOf(succeeded, "a"))
          run.archive(Archive.prepare(failed.event.id, "b", "read_file", { kind: "failed", message })!)
          yield* appendAll(log, history.writes)
          const source = yield* log.readModelContext("session-1", { current: run.invocation.invocationId })
          const archived = source.tail.flatMap((item) => (item.kind === "archived" ? [item] : []))
          expect(archived.map((item) => [item.eventId, item.isError])).toEqual([
            [succeeded.event.id, false],
            [failed.event.id, true],
          ])
          // What the tail costs: each row's stored bytes, an archived result's replacement instead of its own.
          const bytes = source.tail.reduce(
            (total, item) =>
              total + Canonical.utf8Length(item.kind === "canonical" ? Canonical.stringify(item.stored.event) : Canonical.stringify(item.replacement)),
            0,
          )
          expect(bytes).toBeLessThan(20_000)
          const exact = { current: run.invocation.invocationId, maxEvents: source.tail.length, maxBytes: bytes }
          expect((yield* log.readModelContext("session-1", exact)).tail.length).toBe(source.tail.length)
          for (const over of [{ maxBytes: bytes - 1 }, { maxEvents: source.tail.length - 1 }]) {
            const refused = yield* failure(log.readModelContext("session-1", { ...exact, ...over }))
            expect(refused.reason._tag === "Rejected" && refused.reason.rejection._tag).toBe("PrefixTooLarge")
          }
        }),
      ))

    it("starts the tail after the baseline's coverage, and tells a drained summary from a main step cancelled", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          const run = history.open({ message: "Now read the README." })
          // A mid-turn checkpoint covering through the summary's source: the second run's opening (event 9).
          const checkpoint = summarised(history, run)
          const recorded = checkpoint.event.fact
          expect(recorded.kind === "context_checkpoint_recorded" && recorded.checkpoint.coveredThrough).toBe(9)
          const running = run.request({ purpose: "summary", stepId: "summary-2" })
          const requestedAt = history.events.length
          const written = history.written.length
          yield* appendAll(log, history.writes)
          const read = () => log.readModelContext("session-1", { current: run.invocation.invocationId })
          const source = yield* read()
          expect(source.baseline?.eventId).toBe(checkpoint.event.id)
          // Event 9 is covered (the anchor brings the opening back): nothing of the session is in the tail.
          expect(source.anchor?.sequence).toBe(9)
          expect(source.tail).toEqual([])
          expect(source.latestSummary).toEqual({ stepId: running, sequence: requestedAt, drained: false })
          // A main step cancelled beside it does not drain the summary; the summary's own cancellation does.
          run.interrupt(run.request({ stepId: "main-1" }), "cancelled")
          yield* appendAll(log, history.writes.slice(written))
          expect((yield* read()).latestSummary).toEqual({ stepId: running, sequence: requestedAt, drained: false })
          run.interrupt(running, "cancelled")
          yield* appendAll(log, history.writes.slice(-1))
          expect((yield* read()).latestSummary).toEqual({ stepId: running, sequence: requestedAt, drained: true })
        }),
      ))

    it("refuses a session with unsealed prior work, and a current invocation that is not live", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          run.request()
          yield* appendAll(log, history.writes)
          const unsafe = yield* failure(log.readModelContext("session-1"))
          expect(unsafe.message).toContain("Session contains unsealed or unresolved prior execution")
          const notLive = yield* failure(log.readModelContext("session-1", { current: "invocation-9" }))
          expect(notLive.message).toContain("current invocation is not live")
          expect((yield* log.readModelContext("session-1", { current: run.invocation.invocationId })).tail.length).toBe(2)
        }),
      ))

    it("selects the newest main completion as latestMain, skipping summaries, and never an older main past a damaged one (scenario 7)", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          yield* appendAll(log, history.writes)
          const latest = yield* log.latestMainContext("session-1")
          expect(latest.kind).toBe("selected")
          if (latest.kind === "selected") {
            expect(latest.sequence).toBe(7)
            expect(latest.usage).toEqual({ inputTokens: 10, outputTokens: 5 })
            expect(latest.connectionId).toBe(FactBuilders.modelBinding().connectionId)
            expect(latest.projectionCurrent).toBe(true)
          }
          const compact = history.open({ input: { kind: "context_compact", requestFingerprint: "c" } })
          const summary = compact.request({ purpose: "summary", stepId: "summary-1" })
          compact.complete(summary, FactBuilders.textStep(FactBuilders.VALID_SUMMARY))
          compact.end({ kind: "context_compact_finished", outcome: { kind: "unchanged", reason: "no_new_history" } })
          yield* appendAll(log, history.writes.slice(8))
          const afterSummary = yield* log.latestMainContext("session-1")
          expect(afterSummary.kind === "selected" && afterSummary.sequence).toBe(7)
        }),
      ))

    it("marks latestMain's projection stale only for an archive, after its request, of a result at or below its high water", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const early = bigRead(run, "a")
          run.complete(run.request(), FactBuilders.textStep("read it"))
          run.end()
          // The next run's request is the latest main; it sees the early result, then calls again.
          const next = history.open({ message: "Again." })
          const late = bigRead(next, "b")
          yield* appendAll(log, history.writes)
          const completion = history.events.length - 2
          const projectionCurrent = Effect.map(log.latestMainContext("session-1"), (latest) => {
            expect(latest.kind === "selected" && latest.sequence).toBe(completion)
            return latest.kind === "selected" && latest.projectionCurrent
          })
          expect(yield* projectionCurrent).toBe(true)
          const archive = (settled: Event.StoredEvent, callId: string) => {
            const written = history.written.length
            next.archive(placeholderOf(settled, callId))
            return appendAll(log, history.writes.slice(written))
          }
          // A result settled after the request's high water: the request never saw it, its projection stands.
          yield* archive(late, "b")
          expect(yield* projectionCurrent).toBe(true)
          // One the request saw whole: it is sent shorter now, and the request's usage no longer tells.
          yield* archive(early, "a")
          expect(yield* projectionCurrent).toBe(false)
        }),
      ))

    it("carries latestMain's request's checkpoint, context and connection, and says when nothing completed", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const { history, run, checkpoint } = compactedHistory()
          yield* appendAll(log, history.writes.slice(0, 1))
          expect(yield* log.latestMainContext("session-1")).toEqual({ kind: "no_completed_request" })
          const context = { providerId: "provider-1", declaredWindow: 1_000 }
          const step = run.request({ checkpointEventId: checkpoint.event.id, context })
          run.complete(step, FactBuilders.textStep("the tests pass"))
          yield* appendAll(log, history.writes.slice(1))
          const latest = yield* log.latestMainContext("session-1")
          expect(latest).toMatchObject({ kind: "selected", sequence: history.events.length, checkpointEventId: checkpoint.event.id, context })
          expect(latest.kind === "selected" && latest.connectionId).toBe(FactBuilders.modelBinding().connectionId)
        }),
      ))

    it("marks latestMain's projection stale for an archive of the result right at its request's high water", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const settled = bigRead(run, "a")
          // The answer's request reads through the result: its high water is the result's sequence.
          run.complete(run.request(), FactBuilders.textStep("read it"))
          run.end()
          const request = history.events[settled.sequence]!.event.fact
          expect(request.kind === "model_requested" && request.sourceHighWater).toBe(settled.sequence)
          history.open({ message: "Again." }).archive(placeholderOf(settled, "a"))
          yield* appendAll(log, history.writes)
          const latest = yield* log.latestMainContext("session-1")
          expect(latest.kind === "selected" && [latest.sequence, latest.projectionCurrent]).toEqual([settled.sequence + 2, false])
        }),
      ))

    it("keeps latestMain's projection current past an archive its request already saw", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          run.archive(placeholderOf(bigRead(run, "a"), "a"))
          run.complete(run.request(), FactBuilders.textStep("read it"))
          run.end()
          yield* appendAll(log, history.writes)
          const latest = yield* log.latestMainContext("session-1")
          expect(latest.kind === "selected" && [latest.sequence, latest.projectionCurrent]).toEqual([history.events.length - 1, true])
        }),
      ))

    it("reads latestMain on its own, past a live run and unresolved history the safety gate refuses", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          const live = history.open()
          const step = live.request()
          live.complete(step, FactBuilders.toolCallStep([{ id: "a", name: "read_file", input: { path: "x" } }]))
          live.request()
          yield* appendAll(log, history.writes)
          expect((yield* failure(log.readModelContext("session-1"))).message).toContain("unsealed or unresolved")
          const latest = yield* log.latestMainContext("session-1")
          expect(latest.kind === "selected" && latest.sequence).toBe(history.events.length - 1)
        }),
      ))

    it("reads a complete session prefix or none, and run prefixes never clamped", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          yield* appendAll(log, history.writes)
          const prefix = yield* log.prefix({ kind: "session", id: "session-1" }, 8, 1 << 20)
          expect(prefix.highWater).toBe(8)
          expect(prefix.digest).toBe(history.prefixDigest())
          const tooLarge = yield* failure(log.prefix({ kind: "session", id: "session-1" }, 7, 1 << 20))
          expect(tooLarge.reason._tag === "Rejected" && tooLarge.reason.rejection._tag).toBe("PrefixTooLarge")
          // Scenario 8: every request's sourceDigest is the session prefix digest at its sourceHighWater.
          for (const stored of prefix.events) {
            const fact = stored.event.fact
            if (fact.kind !== "model_requested") continue
            const cut = prefix.events.filter((item) => item.sequence <= fact.sourceHighWater)
            expect(
              Digest.logPrefix({ kind: "session", id: "session-1" }, cut.map((item) => ({ sequence: item.sequence, json: Canonical.stringify(item.event) })), fact.sourceHighWater),
            ).toBe(fact.sourceDigest)
          }
          const three = yield* log.runPrefix("session-1", "run-1", 3)
          expect(three?.highWater).toBe(3)
          expect(three?.digest).toBe(
            Digest.runPrefix(3, history.events[0]!.event.invocation, history.written.slice(0, 3).map((item) => ({ sequence: item.stored.sequence, json: item.write.json }))),
          )
          const beyond = yield* failure(log.runPrefix("session-1", "run-1", 9))
          expect(beyond.message).toContain("does not exist")
        }),
      ))

    it("refuses range arguments that are not whole numbers in bounds, and an unknown prefix scope, as the caller's errors", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          yield* appendAll(log, history.writes)
          const refusals: Array<string> = []
          const refused = (read: Effect.Effect<unknown, EventLogError>) =>
            Effect.map(failure(read), (error) => {
              refusals.push(error.reason._tag === "Rejected" ? `${error.reason.rejection._tag}: ${error.message}` : error.reason._tag)
            })
          for (const limit of [Number.NaN, 1.5, Number.POSITIVE_INFINITY, 0, -1]) yield* refused(log.events("session-1", undefined, limit))
          for (const after of [Number.NaN, -1, 2.5]) yield* refused(log.events("session-1", after))
          yield* refused(log.unfinishedInvocations(Number.NaN))
          yield* refused(log.prefix({ kind: "weird" } as unknown as Parameters<typeof log.prefix>[0]))
          // A scope parsed from untyped input with a misspelt or mistyped id would read an empty session.
          yield* refused(log.prefix({ kind: "session", sessionId: "session-1" } as unknown as Parameters<typeof log.prefix>[0]))
          yield* refused(log.prefix({ kind: "session", id: 42 } as unknown as Parameters<typeof log.prefix>[0]))
          expect(refusals).toEqual([
            "InvalidTransition: rejected: limit must be an integer of 1 or more, got NaN",
            "InvalidTransition: rejected: limit must be an integer of 1 or more, got 1.5",
            "InvalidTransition: rejected: limit must be an integer of 1 or more, got Infinity",
            "InvalidTransition: rejected: limit must be an integer of 1 or more, got 0",
            "InvalidTransition: rejected: limit must be an integer of 1 or more, got -1",
            "InvalidTransition: rejected: after must be an integer of 0 or more, got NaN",
            "InvalidTransition: rejected: after must be an integer of 0 or more, got -1",
            "InvalidTransition: rejected: after must be an integer of 0 or more, got 2.5",
            "InvalidTransition: rejected: limit must be an integer of 0 or more, got NaN",
            "InvalidTransition: rejected: unknown log scope weird",
            'InvalidTransition: rejected: the log scope is not {kind: "root"} or {kind: "session", id}',
            'InvalidTransition: rejected: the log scope is not {kind: "root"} or {kind: "session", id}',
          ])
          // The bounds themselves are read.
          expect((yield* log.events("session-1", 0, 1)).map((stored) => stored.sequence)).toEqual([1])
          expect((yield* log.events("session-1", 7)).map((stored) => stored.sequence)).toEqual([8])
        }),
      ))

    it("hashes the session without decoding, extendable event by event to the prefix digest", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = History.smallRun()
          yield* appendAll(log, history.writes.slice(0, 5))
          const hash = yield* log.sessionHash("session-1", 5)
          for (const item of history.written.slice(5)) {
            yield* log.append(item.write)
            hash.update(item.stored.sequence, item.write.json)
          }
          const prefix = yield* log.prefix({ kind: "session", id: "session-1" }, 100, 1 << 20)
          expect(hash.digest(prefix.highWater)).toBe(prefix.digest)
          expect(prefix.digest).toBe(history.prefixDigest())
        }),
      ))

    it("lists unfinished invocations and what recovery must seal", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          run.complete(step, FactBuilders.toolCallStep([{ id: "a", name: "read_file" }, { id: "b", name: "list_files" }]))
          run.dispatch(step, "a")
          const second = run.request()
          yield* appendAll(log, history.writes)
          expect(yield* log.unfinishedInvocations(10)).toEqual([run.invocation])
          const none = yield* failure(log.unfinishedInvocations(0))
          expect(none.reason._tag === "Rejected" && none.reason.rejection._tag).toBe("PrefixTooLarge")
          const recovery = yield* log.invocationRecovery(run.invocation)
          expect(recovery.unfinishedModelSteps).toEqual([second])
          expect(recovery.uncertainOperations).toEqual([`${step}:a`])
          expect(recovery.undispatchedCalls.map((call) => call.operationId)).toEqual([`${step}:b`])
          // Limits of 0 give PrefixTooLarge (scenario 67).
          for (const [maxEvents, maxBytes] of [
            [0, undefined],
            [undefined, 0],
            [0, 0],
          ] as const) {
            const tooLarge = yield* failure(log.invocationRecovery(run.invocation, maxEvents, maxBytes))
            expect(tooLarge.reason._tag === "Rejected" && tooLarge.reason.rejection._tag).toBe("PrefixTooLarge")
          }
        }),
      ))

    it("reads what recovery must seal page by page, and an invocation of any length with unbounded limits", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          const calls = Array.from({ length: 1_500 }, (_, index) => ({ id: `call-${index}`, name: "read_file" }))
          run.complete(step, FactBuilders.toolCallStep(calls))
          // 1,200 dispatches: more rows than one page of the read holds.
          for (const call of calls.slice(0, 1_200)) run.dispatch(step, call.id)
          yield* appendAll(log, history.writes)
          const unbounded = yield* log.invocationRecovery(run.invocation, Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY)
          expect(unbounded.uncertainOperations).toEqual(calls.slice(0, 1_200).map((call) => `${step}:${call.id}`))
          expect(unbounded.undispatchedCalls.map((call) => call.operationId)).toEqual(calls.slice(1_200).map((call) => `${step}:${call.id}`))
          expect(unbounded.unfinishedModelSteps).toEqual([])
          const tooLarge = yield* failure(log.invocationRecovery(run.invocation, 1_100))
          expect(tooLarge.reason._tag === "Rejected" && tooLarge.reason.rejection._tag).toBe("PrefixTooLarge")
        }),
      ))

    it("reads what recovery must seal without the run's observations, and refuses an invocation of a foreign session (scenario 67)", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          // Nine observations of about 1 MiB each: over 8 MiB, the default byte limit of the read.
          const text = "x".repeat(1_000_000)
          for (let index = 0; index < 9; index++) run.observe(step, { kind: "part_delta", id: "text-1", text })
          yield* appendAll(log, history.writes)
          const recovery = yield* log.invocationRecovery(run.invocation)
          expect(recovery.unfinishedModelSteps).toEqual([step])
          expect(recovery.uncertainOperations).toEqual([])
          // The same invocation named under another session is not this session's run.
          const foreign = yield* failure(log.invocationRecovery({ ...run.invocation, sessionId: "session-foreign" }))
          expect(foreign.reason._tag === "Rejected" && foreign.reason.rejection._tag).toBe("InvalidTransition")
          expect(foreign.message).toContain("the invocation belongs to another session")
        }),
      ))

    it("pages through unfinished invocations with a cursor, in opening order", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const openings = Array.from({ length: 7 }, (_, index) => {
            const history = new History.History({ sessionId: `session-${index}`, firstId: 1 + index * 10 })
            const run = history.open({ invocationId: `invocation-${index}`, runId: `run-${index}`, turnId: `turn-${index}` })
            if (index === 3) run.end({ kind: "failed", class: "cancelled" })
            return history
          })
          for (const history of openings) yield* appendAll(log, history.writes)
          const seen: Array<string> = []
          let after: number | undefined = 0
          let pages = 0
          while (after !== undefined && pages < 10) {
            const page: EventLog.UnfinishedPage = yield* log.unfinishedInvocationPage({ after, limit: 2 })
            seen.push(...page.invocations.map((invocation) => invocation.invocationId))
            after = page.next
            pages++
          }
          expect(seen).toEqual(["invocation-0", "invocation-1", "invocation-2", "invocation-4", "invocation-5", "invocation-6"])
          expect(pages).toBe(3)
          const all = yield* log.unfinishedInvocationPage()
          expect(all.next).toBeUndefined()
          expect(all.invocations[0]).toEqual(openings[0]!.events[0]!.event.invocation)
          expect((yield* failure(log.unfinishedInvocationPage({ limit: 0 }))).reason._tag).toBe("Rejected")
          expect((yield* failure(log.unfinishedInvocationPage({ limit: 10_001 }))).reason._tag).toBe("Rejected")
        }),
      ))

    it("a prune page of results archived already moves the cursor past them (docs/log-format.md §3.9)", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          // Four large results archived, then a fifth that is not: a page's byte budget holds about
          // two of them, so the first pages hold no candidate and must still move on.
          const archived = ["a0", "a1", "a2", "a3"].map((callId) => bigRead(run, callId))
          archived.forEach((settled, index) => run.archive(placeholderOf(settled, `a${index}`)))
          const last = bigRead(run, "a4")
          yield* appendAll(log, history.writes)
          const current = run.invocation.invocationId
          const maxBytes = 2 * Canonical.utf8Length(JSON.stringify(last.event)) + 1_000
          const found: Array<string> = []
          const cursors: Array<number> = []
          let cursor: EventLog.PruneCursor | undefined
          for (let page = 0; page < 10; page++) {
            const next = yield* log.preparePruneCandidates("session-1", { current, maxCandidates: 128, maxBytes, ...(cursor === undefined ? {} : { cursor }) })
            found.push(...next.candidates.map((candidate) => candidate.toolCallId))
            if (next.next === undefined) break
            cursors.push(next.next.afterSequence)
            cursor = next.next
          }
          expect(found).toEqual(["a4"])
          expect(cursors.length).toBeGreaterThan(1)
          // Each page starts after the last row the one before charged.
          for (let index = 1; index < cursors.length; index++) expect(cursors[index]!).toBeGreaterThan(cursors[index - 1]!)
        }),
      ))

    it("a prune page reads the history after the newest checkpoint, and archives written after the fence", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const old = history.open()
          bigRead(old, "old")
          const checkpoint = summarised(history, old)
          old.end()
          const run = history.open({ turnId: "turn-2", runId: "run-2", invocationId: "invocation-2" })
          const settled = ["a0", "a1", "a2"].map((callId) => bigRead(run, callId))
          yield* appendAll(log, history.writes)
          const current = run.invocation.invocationId
          // The result before the checkpoint's coverage is no candidate.
          expect(checkpoint.event.fact.kind === "context_checkpoint_recorded" && checkpoint.event.fact.checkpoint.coveredThrough).toBeGreaterThan(0)
          const first = yield* log.preparePruneCandidates("session-1", { current, maxCandidates: 1, maxBytes: 1 << 22 })
          expect(first.candidates.map((candidate) => candidate.toolCallId)).toEqual(["a0"])
          // An archive the pass writes after the fence (of a result the next page would reach) is seen.
          const written = history.written.length
          run.archive(placeholderOf(settled[1]!, "a1"))
          yield* appendAll(log, history.writes.slice(written))
          const second = yield* log.preparePruneCandidates("session-1", { current, maxCandidates: 10, maxBytes: 1 << 22, cursor: first.next! })
          expect(second.candidates.map((candidate) => candidate.toolCallId)).toEqual(["a2"])
          expect(second.next).toBeUndefined()
        }),
      ))

    it("refuses a prune page while a dispatch of the current run is unsettled, and reads once it settles", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          run.complete(step, FactBuilders.toolCallStep([{ id: "c0", name: "read_file", input: { path: "f" } }]))
          const operation = run.dispatch(step, "c0")
          yield* appendAll(log, history.writes)
          const current = run.invocation.invocationId
          const unsettled = yield* failure(log.preparePruneCandidates("session-1", { current, maxCandidates: 10, maxBytes: 1 << 20 }))
          expect(unsettled.message).toContain("a dispatched tool is unsettled")
          const written = history.written.length
          run.succeed(operation, FactBuilders.textOutput("body"))
          yield* appendAll(log, history.writes.slice(written))
          const page = yield* log.preparePruneCandidates("session-1", { current, maxCandidates: 10, maxBytes: 1 << 20 })
          expect(page.candidates.map((candidate) => candidate.toolCallId)).toEqual(["c0"])
        }),
      ))

    it("pages prune candidates with a cursor and a fixed fence", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          const calls = Array.from({ length: 5 }, (_, index) => ({ id: `c${index}`, name: "read_file", input: { path: `f${index}` } }))
          run.complete(step, FactBuilders.toolCallStep(calls))
          for (const call of calls) run.succeed(run.dispatch(step, call.id), FactBuilders.textOutput(`body ${call.id}`))
          yield* appendAll(log, history.writes)
          const first = yield* log.preparePruneCandidates("session-1", { current: run.invocation.invocationId, maxCandidates: 2, maxBytes: 1 << 20 })
          expect(first.candidates.map((candidate) => candidate.toolCallId)).toEqual(["c0", "c1"])
          expect(first.next).toBeDefined()
          const second = yield* log.preparePruneCandidates("session-1", { current: run.invocation.invocationId, maxCandidates: 10, maxBytes: 1 << 20, cursor: first.next! })
          expect(second.candidates.map((candidate) => candidate.toolCallId)).toEqual(["c2", "c3", "c4"])
          expect(second.next).toBeUndefined()
          const current = run.invocation.invocationId
          const check = yield* log.preparePruneCandidates("session-1", { current, maxCandidates: 0, maxBytes: 0 })
          expect(check.candidates).toEqual([])
          const unsafe = yield* failure(log.preparePruneCandidates("session-1", { maxCandidates: 0, maxBytes: 0 }))
          expect(unsafe.message).toContain("unsealed")
          const tooSmall = yield* failure(log.preparePruneCandidates("session-1", { current, maxCandidates: 5, maxBytes: 10 }))
          expect(tooSmall.reason._tag === "Rejected" && tooSmall.reason.rejection._tag).toBe("PrefixTooLarge")
          // A current run with a request in flight is not at a settled boundary: nothing is pruned then.
          const written = history.written.length
          run.request()
          yield* appendAll(log, history.writes.slice(written))
          const unsettled = yield* failure(log.preparePruneCandidates("session-1", { current, maxCandidates: 0, maxBytes: 0 }))
          expect(unsettled.reason._tag === "Rejected" && unsettled.reason.rejection._tag).toBe("InvalidTransition")
          expect(unsettled.message).toContain("the invocation is not at a settled boundary: ")
        }),
      ))
  })
}

describe("prefixes at the sizes of scenarios 5 and 6", () => {
  it("a 10,001-event session is PrefixTooLarge at 10,000 events and whole at 10,001; a 5-event run is never clamped", () =>
    Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          // Scenario 6: a run of 5 events.
          const history = new History.History()
          const run = history.open()
          const step = run.request()
          run.complete(step, FactBuilders.textStep("five"))
          run.steer("m-0", "more")
          run.end()
          expect(history.writes.length).toBe(5)
          // A second run fills the session to 10,001 events (scenario 5).
          const filler = history.open({ message: "fill" })
          while (history.writes.length < 10_000) filler.steer(`m-${history.writes.length}`, "more")
          filler.end()
          expect(history.writes.length).toBe(10_001)
          for (let start = 0; start < history.writes.length; start += 500) yield* log.appendBatch(history.writes.slice(start, start + 500))
          const scope = { kind: "session", id: "session-1" } as const
          for (const read of [log.prefix(scope, 10_000, 8 * 1024 * 1024), log.prefix(scope)]) {
            const tooLarge = yield* failure(read)
            expect(tooLarge.reason._tag === "Rejected" && tooLarge.reason.rejection._tag).toBe("PrefixTooLarge")
          }
          const whole = yield* log.prefix(scope, 10_001, 8 * 1024 * 1024)
          expect(whole.events.length).toBe(10_001)
          expect(whole.digest).toBe(history.prefixDigest())
          const beyond = yield* failure(log.runPrefix("session-1", "run-1", 6))
          expect(beyond.message).toContain("run position 6 does not exist (the run has 5 events)")
          const three = yield* log.runPrefix("session-1", "run-1", 3)
          expect(three?.highWater).toBe(3)
          expect(three?.events.map((stored) => stored.sequence)).toEqual([1, 2, 3])
          expect(three?.digest).toBe(
            Digest.runPrefix(3, run.invocation, history.written.slice(0, 3).map((item) => ({ sequence: item.stored.sequence, json: item.write.json }))),
          )
          expect((yield* log.runPrefix("session-1", "run-1"))?.highWater).toBe(5)
        }),
      ),
    ), 60_000)
})

describe("latestMain over a damaged log", () => {
  const damaged = (json: (original: string) => string) =>
    Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log, file } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          const history = History.smallRun()
          const second = history.open({ message: "again" })
          const step = second.request()
          second.complete(step, FactBuilders.textStep("newest"))
          second.end({ kind: "completed" })
          yield* appendAll(log, history.writes)
          const before = yield* log.latestMainContext("session-1")
          expect(before.kind === "selected" && before.sequence).toBe(history.events.length - 1)
          // Another connection damages the newest completion's stored JSON.
          const connection = new BetterSqlite3(file)
          const newest = connection
            .prepare("SELECT sequence, event_json FROM event_log WHERE kind = 'model_completed' ORDER BY sequence DESC LIMIT 1")
            .get() as { sequence: number; event_json: string }
          connection.prepare("UPDATE event_log SET event_json = ? WHERE sequence = ?").run(json(newest.event_json), newest.sequence)
          connection.close()
          return yield* log.latestMainContext("session-1")
        }),
      ),
    )

  it("is trace_unavailable, never Decode and never an older completion, when the newest completion is not JSON (scenario 7)", async () => {
    expect(await damaged(() => "{not json")).toEqual({ kind: "trace_unavailable" })
  })

  it("is trace_unavailable when the newest completion no longer decodes as a fact (scenario 7)", async () => {
    expect(await damaged((json) => json.replace('"finishReason":"stop"', '"finishReason":"bogus"'))).toEqual({ kind: "trace_unavailable" })
  })
})

describe("latestMain's walk", () => {
  // smallRun: 1 opening, 2 request, 3 completion (a call), 4 dispatch, 5 settle, 6 request, 7 completion, 8 end.
  const events = History.smallRun().events
  const row = (at: number, sequence: number) => {
    const event = events[at - 1]!.event
    return {
      sequence,
      eventId: event.id,
      invocationId: event.invocation.invocationId,
      kind: event.fact.kind,
      operationId: Fact.operationKey(event.fact) ?? null,
      event,
    }
  }
  const decode = (stored: ReturnType<typeof row>) => stored.event

  it("pairs the newest completion with its own step's request, not the nearest request before it", () => {
    // The first step's request moved between the second step's request and its completion.
    const rows = [row(1, 1), row(6, 2), row(2, 3), row(7, 4)]
    const latest = latestMain(rows, decode)
    expect(latest.kind === "selected" && latest.sequence).toBe(4)
    // Without its own request the completion has no trace, whatever request lies before it.
    expect(latestMain([row(1, 1), row(2, 3), row(7, 4)], decode)).toEqual({ kind: "trace_unavailable" })
  })

  it("finds no trace when the completion's request or opening does not match it", () => {
    const rows = events.map((stored) => row(stored.sequence, stored.sequence))
    expect(latestMain(rows, decode).kind).toBe("selected")
    const trace = (changed: ReadonlyArray<ReturnType<typeof row>>, decodeWith: (stored: ReturnType<typeof row>) => Event.RuntimeEvent | undefined = decode) =>
      latestMain(changed, decodeWith).kind
    const at = (index: number, change: Partial<ReturnType<typeof row>>) => rows.map((candidate, position) => (position === index ? { ...candidate, ...change } : candidate))
    const request = rows[5]!
    const requestFact = request.event.fact
    if (requestFact.kind !== "model_requested") throw new Error("expected a request")
    // The request row of another invocation; the request's own step id other than the completion's.
    expect(trace(at(5, { invocationId: "invocation-9" }))).toBe("trace_unavailable")
    expect(trace(at(5, { event: { ...request.event, fact: { ...requestFact, stepId: "other-step" } } }))).toBe("trace_unavailable")
    // The request row holding another fact; the completion's, the request's or the opening's event undecodable.
    expect(trace(at(5, { event: rows[4]!.event }))).toBe("trace_unavailable")
    // Not even a fact of the same step (the completion's own): never an older completion instead.
    expect(trace(at(5, { event: rows[6]!.event }))).toBe("trace_unavailable")
    for (const damaged of [7, 6, 1]) {
      expect(trace(rows, (candidate) => (candidate.sequence === damaged ? undefined : candidate.event))).toBe("trace_unavailable")
    }
    // The opening after the request.
    expect(trace(rows.map((candidate) => (candidate.sequence === 1 ? { ...candidate, sequence: 6.5 } : candidate)))).toBe("trace_unavailable")
    // Without an opening at all.
    expect(trace(rows.filter((candidate) => candidate.sequence !== 1))).toBe("trace_unavailable")
  })

  it("answers the same for rows in any order", () => {
    const rows = events.map((stored) => row(stored.sequence, stored.sequence))
    const inOrder = latestMain(rows, decode)
    expect(inOrder.kind === "selected" && inOrder.sequence).toBe(7)
    expect(latestMain([...rows].reverse(), decode)).toEqual(inOrder)
    expect(latestMain([rows[6]!, ...rows.slice(0, 6), rows[7]!], decode)).toEqual(inOrder)
  })
})

describe("unfinished invocations beyond 10,000", () => {
  it("pages through 10,050 unsealed openings where the single read refuses them", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const rows = Array.from({ length: 10_050 }, (_, index) =>
      rawEvent("invocation_opened", {}, { session_id: `s-${index}`, invocation_id: `i-${index}`, run_id: `r-${index}`, turn_id: `t-${index}` }),
    )
    buildSqliteAtVersion(file, 1, { journalMode: "wal", rows })
    const seen = await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const log = yield* EventLog.fromDatabase(() => openSqlite(file, { synchronous: "NORMAL" }))
          const single = yield* failure(log.unfinishedInvocations(10_000))
          expect(single.reason._tag === "Rejected" && single.reason.rejection._tag).toBe("PrefixTooLarge")
          const ids: Array<string> = []
          let after: number | undefined = 0
          for (let pages = 0; after !== undefined && pages < 5; pages++) {
            const page: EventLog.UnfinishedPage = yield* log.unfinishedInvocationPage({ after })
            ids.push(...page.invocations.map((invocation) => invocation.invocationId))
            after = page.next
          }
          return ids
        }),
      ),
    )
    expect(seen.length).toBe(10_050)
    expect(new Set(seen).size).toBe(10_050)
    expect(seen[10_049]).toBe("i-10049")
  })
})
