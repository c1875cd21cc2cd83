/**
 * A start interrupted while it takes its session (a caller's timeout or race landing there) never
 * leaves the session taken. The interruption is placed exactly: the start's caller signal is an
 * object whose `aborted` getter interrupts the starting fiber on its n-th read, and the launch reads
 * it between taking the session and handing it to the run's worker.
 */
import { assert, describe, it } from "@effect/vitest"
import { OpenAiSse, Respond } from "@maka/testkit"
import { Effect, Exit, Fiber } from "effect"
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
          // The next start on the session is admitted once whatever the interrupted one left has ended.
          const deadline = Date.now() + 5_000
          while (true) {
            const next = yield* Effect.exit(context.engine.start(input(context, `probe ${at}`, tools)))
            if (Exit.isSuccess(next)) {
              assert.deepStrictEqual((yield* next.value.wait).outcome, { kind: "completed" })
              break
            }
            assert.include(String(next.cause), "session already has an active invocation")
            assert.isBelow(Date.now(), deadline, `the session stayed busy after a start interrupted at read ${at} of its signal`)
            yield* Effect.sleep("5 millis")
          }
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
        assert.isAtLeast(interrupted, 2)
      }),
    ), 60_000)
})
