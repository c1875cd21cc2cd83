/**
 * Child process of the handoff crash test, bundled and run as `node handoff-crash.mjs <directory>
 * <baseUrl> [paused]`. It opens `<directory>/events.sqlite` with an engine, starts the run of
 * `support/handoff-crash.ts` against the model at `<baseUrl>`, requests a handoff as soon as the first
 * call is dispatched (while the effect runs), and once the pause is sealed starts its successor in the
 * same process and waits for it. The parent kills it with SIGKILL at an engine fault point
 * (MAKA_TEST_FAULT) or on a progress line: `{"reserved": true}` once the handoff is requested,
 * `{"paused": remainingSteps}` once the pause is sealed (with `paused` as third argument it then waits
 * for the kill instead of starting the successor). On a clean finish it prints the outcomes and the
 * kinds of each commit it made.
 */
import { EventLog } from "@maka/event-log"
import { LanguageModel } from "@maka/model"
import { Ids } from "@maka/tools"
import { Context, Effect, Fiber, Layer, Redacted, Stream } from "effect"
import * as path from "node:path"
import * as Engine from "../../src/Engine.ts"
import { configuration, countCatalog, HANDOFF_INVOCATION, MAX_STEPS } from "../support/handoff-crash.ts"

const [directory, baseUrl, hold] = process.argv.slice(2)
if (directory === undefined || baseUrl === undefined) throw new Error("usage: handoff-crash.ts <directory> <baseUrl> [paused]")
const workspace = path.join(directory, "workspace")
const print = (value: unknown) => process.stdout.write(`${JSON.stringify(value)}\n`)

const program = Effect.scoped(
  Effect.gen(function* () {
    // A process crash keeps every committed WAL frame (they are in the page cache); NORMAL is enough.
    const context = yield* Layer.build(EventLog.layerSqlite({ path: path.join(directory, "events.sqlite"), synchronous: "NORMAL" }))
    const log = Context.get(context, EventLog.EventLog)
    const commits: Array<ReadonlyArray<string>> = []
    const counted: EventLog.EventLogShape = {
      ...log,
      appendBatch: (writes, complete) => {
        // What `complete` builds once the leading sequences are known is part of the same commit.
        const trailing: Array<string> = []
        const completing =
          complete === undefined
            ? undefined
            : (sequences: ReadonlyArray<number>, prior?: (sessionId: string) => number | undefined) => {
                const built = complete(sequences, prior)
                trailing.splice(0, trailing.length, ...built.map((write) => write.event.fact.kind))
                return built
              }
        return Effect.tap(log.appendBatch(writes, completing), () =>
          Effect.sync(() => void commits.push([...writes.map((write) => write.event.fact.kind), ...trailing])),
        )
      },
    }
    const engine = yield* Engine.make({ backoffBaseMs: 5, backoffMaxMs: 20 }).pipe(
      Effect.provideService(EventLog.EventLog, counted),
      Effect.provide(Ids.layer),
    )
    const model = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl, model: "test-model", apiKey: Redacted.make("sk-crash") })
    const tools = countCatalog(workspace)
    const running = yield* engine.start({
      invocation: HANDOFF_INVOCATION,
      model,
      configuration: configuration(workspace),
      message: { text: "Count a, then b." },
      tools,
      maxSteps: MAX_STEPS,
    })
    const dispatched = running.events.pipe(
      Stream.filter((stored) => stored.event.fact.kind === "tool_dispatched"),
      Stream.runHead,
    )
    yield* dispatched
    const requested = yield* Effect.forkChild(running.handoff)
    yield* Effect.sleep("20 millis")
    print({ reserved: true })
    const pause = yield* Fiber.join(requested)
    const paused = yield* running.wait
    if (pause === undefined) return print({ outcome: paused.outcome, commits })
    print({ paused: pause.remainingSteps })
    // Told to hold here, the child waits for its kill with the pause sealed and no successor opened.
    if (hold === "paused") yield* Effect.never
    const successor = yield* engine.resume({ paused: running.invocation, pause, model, tools })
    const result = yield* successor.wait
    print({ outcome: result.outcome, paused: paused.outcome.kind, commits })
  }),
)

Effect.runPromise(program).then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${String(error)}\n`)
    process.exit(1)
  },
)
