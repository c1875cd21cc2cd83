/**
 * A caller interrupted while it starts, runs or compacts (a timeout or race around the call) never
 * leaves the session taken, and the run it would have held alone is cancelled (docs/engine.md §5.2
 * and docs/engine.md §5.14). For `start` the interruption is placed exactly: the caller's signal is an object whose
 * `aborted` getter interrupts the starting fiber on its n-th read, and the launch reads it (once)
 * between taking the session and handing it to the run's worker.
 */
import { assert, describe, it } from "@effect/vitest"
import { FactBuilders, OpenAiSse, Respond } from "@maka/testkit"
import { Effect, Exit, Fiber, Result, Scheduler } from "effect"
import { kinds } from "./support/harness.ts"
import { catalog, input, setup } from "./support/setup.ts"

/** A signal that is never aborted and interrupts `fiber()` as its `aborted` is read the `at`-th time. */
const interruptingSignal = (at: number, fiber: () => Fiber.Fiber<unknown, unknown> | undefined) => {
  let reads = 0
  return {
    get aborted() {
      reads++
      if (reads === at) fiber()?.interruptUnsafe()
      return false
    },
    reads: () => reads,
    addEventListener: () => undefined,
    removeEventListener: () => undefined,
  }
}

describe("an interrupted start", () => {
  it.live("leaves its session free for the next start, wherever in the launch the interruption lands", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [{ respond: Respond.sse(OpenAiSse.response({ text: ["done"] })), repeat: true }] })
        const tools = catalog({ ran: [] })
        let interrupted = 0
        for (let at = 1; ; at++) {
          let starting: Fiber.Fiber<unknown, unknown> | undefined
          const signal = interruptingSignal(at, () => starting)
          // The start runs in a fiber of its own, as a caller's race or timeout runs it.
          const started = input(context, `run ${at}`, tools, { signal: signal as unknown as AbortSignal })
          const fiber = yield* Effect.forkChild(
            Effect.withFiber((self) => {
              starting = self
              return context.engine.start(started)
            }),
          )
          const exit = yield* Fiber.await(fiber)
          if (Exit.isSuccess(exit)) yield* exit.value.wait
          else {
            assert.isTrue(Exit.hasInterrupts(exit), `read ${at}: ${String(exit.cause)}`)
            interrupted++
          }
          // The interruption ended once the run had: the next start on the session is admitted at once.
          const next = yield* context.engine.start(input(context, `probe ${at}`, tools))
          assert.deepStrictEqual((yield* next.wait).outcome, { kind: "completed" })
          if (Exit.isFailure(exit)) {
            // The caller never got the handle: the run was cancelled, before its opening or after it.
            const events = (yield* context.engine.log.events("session-1")).filter((stored) => stored.event.invocation.runId === started.invocation.runId)
            const last = events.at(-1)?.event.fact
            if (last !== undefined) {
              assert.deepStrictEqual(last.kind === "invocation_ended" ? last.outcome : last, { kind: "cancelled", source: "runtime_cancellation" })
            }
          }
          // Past the launch's last read the start is never interrupted.
          if (signal.reads() < at) break
        }
        assert.isAtLeast(interrupted, 1)
      }),
    ), 60_000)

  it.live("run and compact: an interruption at any operation of the caller's fiber cancels the run it held, the session free", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [{ respond: Respond.sse(OpenAiSse.response({ text: ["done"] })), repeat: true }] })
        const tools = catalog({ ran: [] })
        const inner = yield* Scheduler.Scheduler
        let compactions = 0
        const calls = {
          run: (at: number) => context.engine.run(input(context, `run ${at}`, tools)),
          compact: () => {
            compactions++
            return context.engine.compact({
              invocation: FactBuilders.invocation({ turnId: `c-turn-${compactions}`, runId: `c-run-${compactions}`, invocationId: `c-invocation-${compactions}` }),
              model: context.model,
              configuration: input(context, "x", tools).configuration,
            })
          },
        }
        for (const [name, call] of Object.entries(calls)) {
          let interrupted = 0
          // The caller's fiber is interrupted as the scheduler meets its `at`-th operation: every place
          // it can be, the launch's last operations included, until a call completes first.
          for (let at = 1; ; at++) {
            let caller: Fiber.Fiber<unknown, unknown> | undefined
            let operations = 0
            const scheduler: Scheduler.Scheduler = {
              executionMode: inner.executionMode,
              makeDispatcher: () => inner.makeDispatcher(),
              shouldYield: (fiber) => {
                if (fiber === caller && ++operations === at) fiber.interruptUnsafe()
                return inner.shouldYield(fiber)
              },
            }
            const fiber = yield* Effect.forkChild(
              Effect.withFiber((self) => {
                caller = self
                return call(at)
              }).pipe(Effect.provideService(Scheduler.Scheduler, scheduler)),
            )
            const exit = yield* Fiber.await(fiber)
            if (Exit.isSuccess(exit)) break
            interrupted++
            // The interruption ended once the run had: the next start on the session is admitted.
            const next = yield* Effect.result(context.engine.start(input(context, `probe ${name} ${at}`, tools)))
            if (Result.isFailure(next)) return assert.fail(`${name}, operation ${at}: ${next.failure.message}`)
            yield* next.success.wait
          }
          assert.isAtLeast(interrupted, 10, name)
        }
      }),
    ), 120_000)

  it.live("a start on an engine whose scope has closed is refused Internal, not left waiting for an admission", () =>
    Effect.gen(function* () {
      const context = yield* Effect.scoped(setup({ script: [] }))
      const refused = yield* Effect.flip(context.engine.start(input(context, "late", catalog({ ran: [] })))).pipe(Effect.timeout("5 seconds"))
      assert.strictEqual(refused.reason._tag, "Internal")
      assert.strictEqual(refused.message, "the engine is closed")
    }))

  it.live("a signal whose aborted getter or addEventListener throws refuses the start, InvalidInput, with the session free", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [{ respond: Respond.sse(OpenAiSse.response({ text: ["done"] })), repeat: true }] })
        const tools = catalog({ ran: [] })
        const throwing = {
          get aborted(): boolean {
            throw new Error("no flag here")
          },
          addEventListener: () => undefined,
          removeEventListener: () => undefined,
        }
        const refused = yield* Effect.flip(context.engine.start(input(context, "x", tools, { signal: throwing as unknown as AbortSignal })))
        assert.strictEqual(refused.reason._tag, "InvalidInput")
        assert.strictEqual(refused.message, "signal: reading aborted threw: no flag here")
        assert.deepStrictEqual(yield* context.engine.log.events("session-1"), [])
        // So does one that cannot be listened to (its run's listening would have died, Internal).
        const deaf = {
          aborted: false,
          addEventListener: () => {
            throw new Error("not listening")
          },
          removeEventListener: () => undefined,
        }
        const unheard = yield* Effect.flip(context.engine.start(input(context, "x", tools, { signal: deaf as unknown as AbortSignal })))
        assert.strictEqual(unheard.reason._tag, "InvalidInput")
        assert.strictEqual(unheard.message, "signal: adding or removing its abort listener threw: not listening")
        assert.deepStrictEqual(yield* context.engine.log.events("session-1"), [])
        const next = yield* context.engine.start(input(context, "next", tools))
        assert.deepStrictEqual((yield* next.wait).outcome, { kind: "completed" })
      }),
    ))

  it.live("run and compact: a caller that stops waiting cancels the run, and the session is free when the interruption ends", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [] })
        const tools = catalog({ ran: [] })
        const ran = input(context, "hangs", tools)
        const compacted = {
          invocation: FactBuilders.invocation({ turnId: "compact-turn", runId: "compact-run", invocationId: "compact-invocation" }),
          model: context.model,
          configuration: ran.configuration,
        }
        for (const [call, request] of [[context.engine.run(ran), 0], [context.engine.compact(compacted), 2]] as const) {
          // The run's request hangs; the next run's is answered.
          context.server.push(Respond.hang(), Respond.sse(OpenAiSse.response({ text: ["done"] })))
          const fiber = yield* Effect.forkChild(call)
          yield* Effect.promise(() => context.server.request(request))
          yield* Fiber.interrupt(fiber)
          assert.isTrue(Exit.hasInterrupts(yield* Fiber.await(fiber)))
          const next = yield* context.engine.start(input(context, "next", tools))
          assert.deepStrictEqual((yield* next.wait).outcome, { kind: "completed" })
        }
        const events = yield* context.engine.log.events("session-1")
        const of = (runId: string) => kinds(events.filter((stored) => stored.event.invocation.runId === runId && stored.event.fact.kind !== "model_observed"))
        assert.deepStrictEqual(of(ran.invocation.runId), ["invocation_opened", "model_requested", "model_interrupted:cancelled", "invocation_ended:cancelled"])
        assert.deepStrictEqual(of("compact-run"), ["invocation_opened", "model_requested", "model_interrupted:cancelled", "invocation_ended:cancelled"])
      }),
    ))
})
