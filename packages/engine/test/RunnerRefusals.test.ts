/**
 * The runner's admission keeps each store answer's meaning (docs/engine.md §5.3): a refused or
 * uncertain opening, and a history gate that fails for a reason other than an unsettled history,
 * reach the caller as the error that names what happened, never as another one. The log is the real
 * SQLite log, wrapped so that one chosen call answers as a store would.
 */
import { assert, describe, it } from "@effect/vitest"
import type { EventWrite } from "@maka/facts"
import { EventLogError, type EventLog } from "@maka/event-log"
import { History, OpenAiSse, Respond, type ScriptedServer } from "@maka/testkit"
import { Effect, Exit } from "effect"
import type * as Engine from "../src/Engine.ts"
import * as EngineError from "../src/EngineError.ts"
import { toolLoop } from "./support/faults.ts"
import { catalog, input, setup, type Setup } from "./support/setup.ts"

type Shape = EventLog.EventLogShape

/**
 * An engine whose log answers every commit of the first run's opening with `error` (nothing is
 * written; the opening rides its first request's commit, and is then tried alone); every write it
 * is asked for (fact kind and invocation id) is recorded in `asked`, if given.
 */
const refusingOpening = (error: EventLogError.EventLogError, asked: Array<readonly [string, string]> = []) =>
  setup({ script: toolLoop }, { backoffBaseMs: 5, backoffMaxMs: 40 }, {}, {
    wrapLog: (log): Shape => {
      let refused: string | undefined
      const appendBatch: Shape["appendBatch"] = (writes, complete) =>
        Effect.suspend(() => {
          for (const write of writes) asked.push([write.event.fact.kind, write.event.invocation.invocationId])
          const opening = writes.find((write) => write.event.fact.kind === "invocation_opened")?.event.invocation.invocationId
          refused ??= opening
          if (opening === undefined || opening !== refused) return log.appendBatch(writes, complete)
          return Effect.fail(error)
        })
      return { ...log, appendBatch, append: (write) => Effect.map(appendBatch([write]), (sequences) => sequences[0]!) }
    },
  })

/** An engine whose log's history gates (the plain one and the manual-message one) fail with `error`. */
const failingGate = (error: EventLogError.EventLogError) =>
  setup({ script: toolLoop }, { backoffBaseMs: 5, backoffMaxMs: 40 }, {}, {
    wrapLog: (log): Shape => ({
      ...log,
      checkHistorySafety: () => Effect.fail(error),
      checkManualMessageHistory: () => Effect.fail(error),
    }),
  })

/** The engine error a run's start fails with. */
const startError = (context: Setup, overrides: Partial<Engine.StartInput> = {}) =>
  Effect.gen(function* () {
    const exit = yield* Effect.exit(context.engine.run(input(context, "Loop.", catalog({ ran: [] }), overrides)))
    assert.isTrue(Exit.isFailure(exit), "the run started")
    return yield* Effect.flip(Effect.suspend(() => exit))
  })

const database = () => EventLogError.make({ _tag: "Database", message: "disk I/O error (injected)" })

describe("a refused or uncertain opening is the caller's error by its meaning", () => {
  it.live("a busy session, a reservation, an invalid transition, another refusal, an uncertain commit, a database error", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const cases: ReadonlyArray<readonly [EventLogError.EventLogError, EngineError.Reason]> = [
          [EventLogError.rejected({ _tag: "SessionBusy" }), { _tag: "Busy", message: EngineError.SESSION_ACTIVE_MESSAGE }],
          [EventLogError.rejected({ _tag: "Reserved" }), { _tag: "Busy", message: EngineError.SESSION_RESERVED_MESSAGE }],
          [
            EventLogError.rejected({ _tag: "InvalidTransition", reason: "the opening names a foreign turn" }),
            { _tag: "ReconciliationRequired", message: "the opening names a foreign turn" },
          ],
          [EventLogError.rejected({ _tag: "EventConflict" }), { _tag: "Commit", message: "rejected: a different event was already written under this id" }],
          [
            EventLogError.make({ _tag: "OutcomeUnknown", message: "the connection dropped during COMMIT" }),
            { _tag: "Commit", message: "commit outcome unknown: the connection dropped during COMMIT" },
          ],
        ]
        for (const [refusal, expected] of cases) {
          const context = yield* refusingOpening(refusal)
          const error = yield* startError(context)
          assert.deepStrictEqual(error.reason, expected, refusal.message)
        }
        // Neither a refusal nor an uncertain commit: the store's own taxonomy, the cause kept.
        const context = yield* refusingOpening(database())
        const error = yield* startError(context)
        assert.strictEqual(error.reason._tag, "Store")
        assert.strictEqual(error.reason._tag === "Store" ? error.reason.storeReason : undefined, "Database")
        assert.instanceOf(error.cause, EventLogError.EventLogError)
      }),
    ))

  it.live("a refused opening writes nothing and the session takes the next run", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const asked: Array<readonly [string, string]> = []
        const context = yield* refusingOpening(EventLogError.rejected({ _tag: "SessionBusy" }), asked)
        yield* startError(context)
        assert.deepStrictEqual(yield* context.log.events("session-1"), [])
        const [refused] = asked
        const ofRefused = () => asked.filter(([, invocationId]) => invocationId === refused![1])
        // Only the opening was asked for: with its first request, then alone.
        assert.isAtLeast(ofRefused().length, 1)
        assert.isTrue(ofRefused().every(([kind]) => kind === "invocation_opened"))
        const before = ofRefused().length
        const next = yield* context.engine.run(input(context, "Hello.", catalog({ ran: [] })))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
        // A refused opening never landed: the engine has nothing of it to seal before the next run.
        assert.strictEqual(ofRefused().length, before)
      }),
    ))
})

describe("the history gate: only an unsettled history is a reconciliation", () => {
  it.live("a gate that fails reading the store is a store error, with nothing written", () =>
    Effect.scoped(
      Effect.gen(function* () {
        for (const failure of [database(), EventLogError.rejected({ _tag: "SessionBusy" })]) {
          const context = yield* failingGate(failure)
          const error = yield* startError(context)
          assert.strictEqual(error.reason._tag, "Store", error.message)
          assert.strictEqual(error.reason._tag === "Store" ? error.reason.storeReason : undefined, failure.reason._tag)
          assert.deepStrictEqual(yield* context.log.events("session-1"), [])
        }
      }),
    ))

  it.live("an unsettled history names the gate's reason, whatever another session leaves unsealed", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const reason = "an unsettled tool call blocks the next message"
        const context = yield* failingGate(EventLogError.rejected({ _tag: "InvalidTransition", reason }))
        // Another session's run left unsealed (a crashed process's): it is not this session's history.
        const other = new History.History({ sessionId: "session-2", firstId: 9_000 })
        other.open({ invocationId: "invocation-other", runId: "run-other", turnId: "turn-other" })
        for (const written of other.written) yield* context.log.append(written.write)
        assert.strictEqual((yield* context.log.unfinishedInvocations(10)).length, 1)
        const error = yield* startError(context)
        assert.deepStrictEqual(error.reason, { _tag: "ReconciliationRequired", message: reason })
      }),
    ))

  it.live("under allowPriorUnknown, a history the manual-message policy refuses names the policy's reason", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const reason = "an unsettled call is not an unknown outcome"
        const context = yield* failingGate(EventLogError.rejected({ _tag: "InvalidTransition", reason }))
        const error = yield* startError(context, { allowPriorUnknown: true })
        assert.deepStrictEqual(error.reason, { _tag: "ReconciliationRequired", message: reason })
      }),
    ))

  it.live("an unsettled history with this session's run unsealed names the unsealed run", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* failingGate(EventLogError.rejected({ _tag: "InvalidTransition", reason: "unsettled" }))
        const own = new History.History({ sessionId: "session-1", firstId: 9_000 })
        own.open({ invocationId: "invocation-own", runId: "run-own", turnId: "turn-own" })
        for (const written of own.written) yield* context.log.append(written.write)
        const error = yield* startError(context)
        assert.deepStrictEqual(error.reason, { _tag: "ReconciliationRequired", message: EngineError.UNSEALED_RUN_MESSAGE })
      }),
    ))
})

describe("the opening carries what the caller asked for", () => {
  it.live("a message run's request fingerprint is the opening's, and none is written without one", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: toolLoop })
        for (const overrides of [{ requestFingerprint: "request-7" }, {}]) {
          const before = (yield* context.log.events("session-1")).length
          const result = yield* context.engine.run(input(context, "Hello.", catalog({ ran: [] }), overrides))
          assert.deepStrictEqual(result.outcome, { kind: "completed" })
          const opening = (yield* context.log.events("session-1"))[before]!.event.fact
          assert.isTrue(opening.kind === "invocation_opened" && opening.input.kind === "message")
          const written = opening.kind === "invocation_opened" ? opening.input : undefined
          assert.deepStrictEqual(written !== undefined && "requestFingerprint" in written ? written.requestFingerprint : undefined, overrides.requestFingerprint)
        }
      }),
    ))
})

describe("a defect inside a run", () => {
  it.live("seals the run failed runtime_internal, naming the defect, and the session takes the next run", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The log's context read dies (a bug, not a store error) on the first run only.
        let dies = true
        const context = yield* setup({ script: toolLoop }, { backoffBaseMs: 5, backoffMaxMs: 40 }, {}, {
          wrapLog: (log): Shape => ({
            ...log,
            readModelContextWithHash: (sessionId, request) =>
              Effect.suspend(() => (dies ? Effect.die(new Error("the reader lost its state")) : log.readModelContextWithHash(sessionId, request))),
          }),
        })
        const result = yield* context.engine.run(input(context, "Hello.", catalog({ ran: [] })))
        dies = false
        assert.deepStrictEqual(result.outcome, {
          kind: "failed",
          class: "runtime_internal",
          message: "the run failed: Error: the reader lost its state",
        })
        const next = yield* context.engine.run(input(context, "Hello again.", catalog({ ran: [] })))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
      }),
    ))
})

describe("a context read that fails at the opening", () => {
  /** An engine whose log's context read fails once with `error`, then reads as usual. */
  const failingRead = (error: EventLogError.EventLogError) => {
    let failures = 1
    return setup({ script: toolLoop }, { backoffBaseMs: 5, backoffMaxMs: 40 }, {}, {
      wrapLog: (log): Shape => ({
        ...log,
        readModelContextWithHash: (sessionId, request) =>
          Effect.suspend(() => (failures-- > 0 ? Effect.fail(error) : log.readModelContextWithHash(sessionId, request))),
      }),
    })
  }

  it.live("seals an unsettled history reconciliation_required and a store failure event_store, trying no compaction", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const cases = [
          [EventLogError.rejected({ _tag: "InvalidTransition", reason: "the history is not settled" }), "reconciliation_required", "rejected: the history is not settled"],
          [database(), "event_store", undefined],
          [EventLogError.rejected({ _tag: "SessionBusy" }), "event_store", undefined],
        ] as const
        for (const [error, failureClass, message] of cases) {
          const context = yield* failingRead(error)
          const { outcome } = yield* context.engine.run(input(context, "Hello.", catalog({ ran: [] })))
          assert.strictEqual(outcome.kind === "failed" ? outcome.class : outcome.kind, failureClass)
          if (message !== undefined) assert.strictEqual(outcome.kind === "failed" ? outcome.message : undefined, message)
          // Only a context past the read limits is pruned and compacted to fit: nothing else was sent or written.
          assert.strictEqual(context.server.requests().length, 0)
          const next = yield* context.engine.run(input(context, "Hello again.", catalog({ ran: [] })))
          assert.deepStrictEqual(next.outcome, { kind: "completed" })
        }
      }),
    ))
})

describe("a run under the prior-unknown policy", () => {
  it.live("fails reconciliation_required when its context holds no unknown call to name, sending nothing", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // The log reports an unknown outcome the context read then does not hold.
        const context = yield* setup({ script: toolLoop }, { backoffBaseMs: 5, backoffMaxMs: 40 }, {}, {
          wrapLog: (log): Shape => ({ ...log, checkManualMessageHistory: () => Effect.succeed(true) }),
        })
        const { outcome } = yield* context.engine.run(input(context, "Did it happen?", catalog({ ran: [] }), { allowPriorUnknown: true }))
        assert.deepStrictEqual(outcome, { kind: "failed", class: "reconciliation_required", message: EngineError.PRIOR_UNKNOWN_MISSING_MESSAGE })
        assert.strictEqual(context.server.requests().length, 0)
      }),
    ))
})

/**
 * An engine whose log records the fact kinds of every batch it commits, and refuses with `refusal`
 * each batch that `refuses` picks (the log's own answer otherwise).
 */
const batching = (
  batches: Array<ReadonlyArray<string>>,
  refuses: (kinds: ReadonlyArray<string>) => EventLogError.EventLogError | undefined = () => undefined,
  script: NonNullable<ScriptedServer.ServerOptions["script"]> = toolLoop,
) =>
  setup({ script }, { backoffBaseMs: 5, backoffMaxMs: 40 }, {}, {
    wrapLog: (log): Shape => {
      const appendBatch: Shape["appendBatch"] = (writes, complete) =>
        Effect.suspend(() => {
          let trailing: ReadonlyArray<EventWrite.EventWrite> = []
          // The kinds of the whole batch are known only once `complete` built its trailing writes:
          // a batch with one is refused from inside its transaction, as the store refuses a write.
          const kinds = () => [...writes, ...trailing].map((write) => write.event.fact.kind)
          const spied =
            complete === undefined
              ? undefined
              : (sequences: ReadonlyArray<number>, prior?: (sessionId: string) => number | undefined) => {
                  trailing = complete(sequences, prior)
                  const refusal = refuses(kinds())
                  if (refusal !== undefined) throw refusal
                  return trailing
                }
          const refusal = complete === undefined ? refuses(kinds()) : undefined
          if (refusal !== undefined) return Effect.fail(refusal)
          return Effect.tap(log.appendBatch(writes, spied), () => Effect.sync(() => batches.push(kinds())))
        })
      return { ...log, appendBatch, append: (write) => Effect.map(appendBatch([write]), (sequences) => sequences[0]!) }
    },
  })

const opensAndRequests = (kinds: ReadonlyArray<string>) => kinds.includes("invocation_opened") && kinds.includes("model_requested")

describe("a message run's opening rides its first request's commit (docs/engine.md §5.3)", () => {
  it.live("one commit holds the opening and the first request, and the run is admitted once it is durable", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const batches: Array<ReadonlyArray<string>> = []
        const gate = Respond.gate()
        const context = yield* batching(batches, undefined, [
          Respond.sse(OpenAiSse.response({ text: ["Hello."] })),
          // The second turn's answer waits: the run is admitted while its model call is open.
          Respond.hold(gate, Respond.sse(OpenAiSse.response({ text: ["Again."] }))),
        ])
        // A new session's first turn (one read of the empty session) and a later turn (the context
        // the engine kept) alike.
        const first = yield* context.engine.run(input(context, "Hi.", catalog({ ran: [] })))
        assert.deepStrictEqual(first.outcome, { kind: "completed" })
        assert.deepStrictEqual(batches[0], ["invocation_opened", "model_requested"])
        const before = batches.length
        const second = input(context, "Hi again.", catalog({ ran: [] }))
        const running = yield* context.engine.start(second)
        // Admitted before its answer came: the opening and the first request, nothing more, are in the log.
        const stored = (yield* context.log.events("session-1")).filter(
          (event) => event.event.invocation.invocationId === second.invocation.invocationId,
        )
        assert.deepStrictEqual(
          stored.map((event) => event.event.fact.kind),
          ["invocation_opened", "model_requested"],
        )
        gate.release()
        const result = yield* running.wait
        assert.deepStrictEqual(result.outcome, { kind: "completed" })
        assert.deepStrictEqual(batches[before], ["invocation_opened", "model_requested"])
        // No opening took a commit of its own.
        assert.isFalse(batches.some((kinds) => kinds.length === 1 && kinds[0] === "invocation_opened"))
      }),
    ))

  it.live("a batch refused for its request commits the opening alone: the run is admitted and fails on its commit", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const batches: Array<ReadonlyArray<string>> = []
        let refused = 0
        const context = yield* batching(batches, (kinds) =>
          opensAndRequests(kinds) && refused++ === 0 ? EventLogError.rejected({ _tag: "EventConflict" }) : undefined,
        )
        const run = input(context, "Loop.", catalog({ ran: [] }))
        const result = yield* context.engine.run(run)
        assert.strictEqual(refused, 1)
        assert.strictEqual(result.outcome.kind, "failed")
        assert.strictEqual(result.outcome.kind === "failed" ? result.outcome.class : undefined, "event_commit")
        assert.deepStrictEqual(batches[0], ["invocation_opened"])
        const stored = (yield* context.log.events("session-1")).filter(
          (event) => event.event.invocation.invocationId === run.invocation.invocationId,
        )
        assert.deepStrictEqual(
          stored.map((event) => event.event.fact.kind),
          ["invocation_opened", "invocation_ended"],
        )
      }),
    ))

  it.live("a riding opening the store refuses is the admission's error, and nothing of the run is written", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const batches: Array<ReadonlyArray<string>> = []
        let firstDone = false
        const context = yield* batching(batches, (kinds) =>
          firstDone && kinds.includes("invocation_opened") ? EventLogError.rejected({ _tag: "SessionBusy" }) : undefined,
        )
        yield* context.engine.run(input(context, "Loop.", catalog({ ran: [] })))
        firstDone = true
        const before = (yield* context.log.events("session-1")).length
        const error = yield* startError(context)
        assert.deepStrictEqual(error.reason, { _tag: "Busy", message: EngineError.SESSION_ACTIVE_MESSAGE })
        assert.strictEqual((yield* context.log.events("session-1")).length, before)
      }),
    ))
})

describe("an opening whose every commit lands with an unknown outcome", () => {
  it.live("is the caller's Commit error, and the engine seals it before the session's next run", () =>
    Effect.scoped(
      Effect.gen(function* () {
        let uncertain: string | undefined
        const context = yield* setup({ script: toolLoop }, { backoffBaseMs: 5, backoffMaxMs: 40 }, {}, {
          wrapLog: (log): Shape => {
            const appendBatch: Shape["appendBatch"] = (writes, complete) =>
              Effect.suspend(() => {
                const opening = writes.find((write) => write.event.fact.kind === "invocation_opened")?.event.invocation.invocationId
                uncertain ??= opening
                if (opening === undefined || opening !== uncertain) return log.appendBatch(writes, complete)
                // The commit lands, and the store cannot say so.
                return Effect.flatMap(log.appendBatch(writes, complete), () =>
                  Effect.fail(EventLogError.make({ _tag: "OutcomeUnknown", message: "the connection dropped during COMMIT" })),
                )
              })
            return { ...log, appendBatch, append: (write) => Effect.map(appendBatch([write]), (sequences) => sequences[0]!) }
          },
        })
        const error = yield* startError(context)
        assert.strictEqual(error.reason._tag, "Commit")
        const next = yield* context.engine.run(input(context, "Hello.", catalog({ ran: [] })))
        assert.deepStrictEqual(next.outcome, { kind: "completed" })
        const ended = (yield* context.log.events("session-1")).filter(
          (stored) => stored.event.invocation.invocationId === uncertain && stored.event.fact.kind === "invocation_ended",
        )
        assert.strictEqual(ended.length, 1, "the uncertain run was sealed")
      }),
    ))
})

describe("an input that is not an object", () => {
  it.live("is refused InvalidInput by every Engine method, as an Effect failure, writing nothing", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: toolLoop })
        const engine = context.engine
        const refusals: ReadonlyArray<readonly [string, () => Effect.Effect<unknown, EngineError.EngineError>]> = [
          ["start", () => engine.start(undefined as unknown as Engine.StartInput)],
          ["start", () => engine.run(null as unknown as Engine.StartInput)],
          ["compact", () => engine.compact(undefined as unknown as Engine.CompactInput)],
          ["resume", () => engine.resume(7 as unknown as Engine.ResumeInput)],
          ["continueRun", () => engine.continueRun(undefined as unknown as Engine.ContinueInput)],
          ["checkContinuation", () => engine.checkContinuation(null as unknown as Engine.ContinueInput)],
          ["resumePending", () => engine.resumePending(undefined as unknown as Engine.ResumeResolvers)],
        ]
        for (const [method, call] of refusals) {
          // Building the effect throws nothing; running it fails, never dies.
          const exit = yield* Effect.exit(call())
          assert.isTrue(Exit.isFailure(exit), method)
          const error = yield* Effect.flip(Effect.suspend(() => exit))
          assert.strictEqual(error.reason._tag, "InvalidInput", method)
          assert.match(error.message, new RegExp(`^${method}: the input must be an object, got `), method)
        }
        assert.deepStrictEqual(yield* context.log.events("session-1"), [])
        // The engine is unharmed: a run goes on.
        const ran = yield* engine.run(input(context, "Loop.", catalog({ ran: [] })))
        assert.deepStrictEqual(ran.outcome, { kind: "completed" })
      }),
    ),
  )
})

describe("an input object that lacks what a method reads into", () => {
  it.live("is refused InvalidInput naming the field, as an Effect failure, writing nothing", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: toolLoop })
        const engine = context.engine
        const tools = catalog({ ran: [] })
        const good = input(context, "Loop.", tools)
        const cast = <A>(value: object): A => value as A
        const { model: _model, ...noModel } = good
        const { message: _message, ...noMessage } = good
        const refusals: ReadonlyArray<readonly [string, () => Effect.Effect<unknown, EngineError.EngineError>]> = [
          ["start: model must be an object, got undefined", () => engine.start(cast(noModel))],
          ["start: message must be an object, got undefined", () => engine.start(cast(noMessage))],
          ["start: tools must be a ToolCatalog (ToolCatalog.from(tools)), got an array", () => engine.run(cast({ ...good, tools: [...tools.tools] }))],
          ["start: configuration must be an object, got null", () => engine.start(cast({ ...good, configuration: null }))],
          ["compact: model must be an object, got undefined", () => engine.compact(cast({ invocation: good.invocation, configuration: good.configuration }))],
          ["resume: paused must be an object, got undefined", () => engine.resume(cast({}))],
          ["continueRun: source must be an object, got undefined", () => engine.continueRun(cast(good))],
          [
            "checkContinuation: reading model threw: no model here",
            () =>
              engine.checkContinuation(
                cast({
                  ...good,
                  get model(): never {
                    throw new Error("no model here")
                  },
                }),
              ),
          ],
        ]
        for (const [message, call] of refusals) {
          const exit = yield* Effect.exit(call())
          assert.isTrue(Exit.isFailure(exit), message)
          const error = yield* Effect.flip(Effect.suspend(() => exit))
          assert.strictEqual(error.reason._tag, "InvalidInput", message)
          assert.strictEqual(error.message, message)
        }
        assert.deepStrictEqual(yield* context.log.events("session-1"), [])
        const ran = yield* engine.run(good)
        assert.deepStrictEqual(ran.outcome, { kind: "completed" })
      }),
    ),
  )
})
