/**
 * Child process of the engine crash test, run as
 * `node --import tsx --conditions=@maka/source tool-loop.ts <directory>` from the repository root.
 * It opens `<directory>/events.sqlite` with an engine, serves the testkit model in-process, and runs
 * one message run through a scripted four-step tool loop whose `note` tool appends its line to
 * `<directory>/workspace/effects.txt`. The parent sets MAKA_TEST_FAULT to an engine fault point
 * (`engine.commit.<k>`, `engine.after-dispatch.<n>`, `engine.before-settle.<n>`) to kill it there.
 * On a clean finish it prints one JSON line: the outcome and how many commits the engine made.
 */
import { EventLog } from "@maka/event-log"
import { LanguageModel } from "@maka/model"
import { FactBuilders, ScriptedServer } from "@maka/testkit"
import { Ids } from "@maka/tools"
import { Context, Effect, Layer, Redacted } from "effect"
import * as path from "node:path"
import * as Engine from "../../src/Engine.ts"
import { CRASH_INVOCATION, noteCatalog, toolLoopScript } from "../support/tool-loop.ts"

const directory = process.argv[2]
if (directory === undefined) throw new Error("usage: tool-loop.ts <directory>")
const workspace = path.join(directory, "workspace")

const program = Effect.scoped(
  Effect.gen(function* () {
    const server = yield* ScriptedServer.make({ script: toolLoopScript })
    // A process crash keeps every committed WAL frame (they are in the page cache); NORMAL is enough.
    const context = yield* Layer.build(EventLog.layerSqlite({ path: path.join(directory, "events.sqlite"), synchronous: "NORMAL" }))
    const log = Context.get(context, EventLog.EventLog)
    let commits = 0
    const counted: EventLog.EventLogShape = {
      ...log,
      appendBatch: (writes, complete) => Effect.tap(log.appendBatch(writes, complete), () => Effect.sync(() => void commits++)),
    }
    const engine = yield* Engine.make({ backoffBaseMs: 5, backoffMaxMs: 20 }).pipe(
      Effect.provideService(EventLog.EventLog, counted),
      Effect.provide(Ids.layer),
    )
    const model = yield* LanguageModel.make({
      kind: "openai-compatible",
      baseUrl: `${server.url}/v1`,
      model: "test-model",
      apiKey: Redacted.make("sk-crash"),
    })
    const result = yield* engine.run({
      invocation: CRASH_INVOCATION,
      model,
      configuration: FactBuilders.configuration({ cwd: workspace, model: FactBuilders.modelBinding({ model: "test-model" }) }),
      message: { text: "Write the four notes." },
      tools: noteCatalog(workspace),
      maxSteps: 8,
    })
    process.stdout.write(`${JSON.stringify({ outcome: result.outcome, commits })}\n`)
  }),
)

Effect.runPromise(program).then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${String(error)}\n`)
    process.exit(1)
  },
)
