/**
 * The Effect API's refusals are typed failures, as its types and the facade's say: options whose
 * getter throws, a closed engine's writes, a non-object input to the pure admission check, and the
 * text of a steering refusal a host maps by its exported prefix.
 */
import { assert, describe, it } from "@effect/vitest"
import * as LogTesting from "@maka/event-log/testing"
import { ModelError } from "@maka/model"
import * as FakeModel from "@maka/model/testing"
import { FactBuilders } from "@maka/testkit"
import { Ids, ToolCatalog } from "@maka/tools"
import { Effect, Exit, Scope } from "effect"
import * as Engine from "../src/Engine.ts"
import * as EngineError from "../src/EngineError.ts"

const provided = <A, E, R>(effect: Effect.Effect<A, E, R>, log: LogTesting.EventLog.EventLogShape) =>
  effect.pipe(Effect.provideService(LogTesting.EventLog.EventLog, log), Effect.provide(Ids.layer))

describe("the Effect API's refusals", () => {
  it.effect("engine options whose getter or proxy trap throws fail InvalidInput, as the facade's do, never a defect", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { log } = yield* LogTesting.makeTemporary()
        const getter = Object.defineProperty({}, "backoffBaseMs", { enumerable: true, get: () => { throw new Error("not here") } })
        const trapped = new Proxy({}, { ownKeys: () => { throw new Error("no keys") } })
        for (const [options, message] of [
          [getter, "the engine's options could not be read: not here"],
          [trapped, "the engine's options could not be read: no keys"],
        ] as const) {
          const exit = yield* Effect.exit(provided(Engine.make(options as Engine.EngineOptionsInput), log))
          assert.isTrue(Exit.isFailure(exit) && exit.cause.reasons.some((reason) => reason._tag === "Fail"), message)
          const failure = Exit.isFailure(exit) ? exit.cause.reasons.find((reason) => reason._tag === "Fail") : undefined
          const error = failure?._tag === "Fail" ? (failure.error as EngineError.EngineError) : undefined
          assert.deepStrictEqual([error?.reason._tag, error?.message], ["InvalidInput", message])
        }
      }),
    ))

  it.effect("a closed engine refuses abandonHandoff and recover, writing nothing", () =>
    Effect.gen(function* () {
      const { log } = yield* Effect.scoped(LogTesting.makeTemporary()).pipe(Effect.map((made) => made))
      const scope = yield* Scope.make()
      const engine = yield* provided(Engine.make({}), log).pipe(Scope.provide(scope))
      yield* Scope.close(scope, Exit.void)
      for (const call of [Effect.asVoid(engine.abandonHandoff("session-1")), Effect.asVoid(engine.recover)]) {
        const error = yield* Effect.flip(call)
        assert.deepStrictEqual([error.reason._tag, error.message], ["Internal", EngineError.ENGINE_CLOSED_MESSAGE])
      }
    }),
  )

  it("the pure admission check refuses an input that is no object with a message, never a throw", () => {
    for (const input of [null, undefined, 5]) {
      assert.strictEqual(Engine.validateInput(input as unknown as Parameters<typeof Engine.validateInput>[0]), "the input must be an object")
    }
  })

  it.effect("steering a run that failed is refused with a text that begins with the exported prefix", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { log } = yield* LogTesting.makeTemporary()
        const engine = yield* provided(Engine.make({}), log)
        const model = FakeModel.make([FakeModel.failure(ModelError.adapter("not a model"))])
        const configuration = FactBuilders.configuration({ model: FactBuilders.modelBinding({ model: model.model }) })
        const running = yield* engine.start({ invocation: FactBuilders.invocation(), model, configuration, message: { text: "Go." }, tools: ToolCatalog.make([]) })
        assert.strictEqual((yield* running.wait).outcome.kind, "failed")
        const refused = yield* Effect.flip(running.steer("more"))
        assert.strictEqual(refused.reason._tag, "Busy")
        assert.isTrue(refused.message.startsWith(EngineError.STEERING_RUN_ENDED_MESSAGE), refused.message)
      }),
    ))
})
