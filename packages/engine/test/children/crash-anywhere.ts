/**
 * Child process of the crash-anywhere suite, bundled and run as `node crash-anywhere.mjs <directory>
 * <baseUrl> <scenario> [leave]`. It opens `<directory>/events.sqlite` with an engine and runs the scenario of
 * `support/crash-anywhere.ts` against the model at `<baseUrl>`; the `note` tool appends each effect to
 * `<directory>/workspace/effects.txt`. As soon as a commit returns it appends the commit's events
 * (sequence, id, digests) to `<directory>/committed.jsonl`. The parent kills it with SIGKILL through
 * MAKA_TEST_FAULT (an engine point) or MAKA_CRASH_ARM (`<k>:<point>`: an event-log point armed once
 * commit k − 1 returned). With `leave`, the handoff scenario stops once its pause is sealed and leaves
 * the successor to the next engine. On a clean finish it prints one JSON line with the outcomes of its runs.
 */
import type { EventWrite, Outcome } from "@maka/facts"
import { EventLog } from "@maka/event-log"
import { LanguageModel } from "@maka/model"
import { Ids } from "@maka/tools"
import { Context, Deferred, Effect, Layer, Redacted } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as Engine from "../../src/Engine.ts"
import { FAULT_VARIABLE } from "../../src/internal/fault.ts"
import {
  ARM_VARIABLE,
  configuration,
  invocation,
  JOURNAL_FILE,
  journalLine,
  scenario,
  WINDOWED,
  type ScenarioName,
} from "../support/crash-anywhere.ts"
import { noteCatalog } from "../support/tool-loop.ts"

const [directory, baseUrl, name, leave] = process.argv.slice(2)
if (directory === undefined || baseUrl === undefined || name === undefined) {
  throw new Error("usage: crash-anywhere.ts <directory> <baseUrl> <scenario>")
}
const workspace = path.join(directory, "workspace")
const journal = path.join(directory, JOURNAL_FILE)

// An event-log point armed at commit k: set once k − 1 commits returned, it fires inside the k-th.
const [armAt, armedPoint] = (process.env[ARM_VARIABLE] ?? "").split(":")
let commits = 0
const armAfter = (count: number) => {
  if (armedPoint !== undefined && Number(armAt) - 1 === count) process.env[FAULT_VARIABLE] = armedPoint
}
armAfter(0)

/** The log the engine writes through: each commit is journaled (and the next point armed) as soon as it returns. */
const journaled = (log: EventLog.EventLogShape): EventLog.EventLogShape => {
  const record = (writes: ReadonlyArray<EventWrite.EventWrite>, sequences: ReadonlyArray<number>) =>
    Effect.sync(() => {
      fs.appendFileSync(journal, journalLine(writes, sequences))
      armAfter(++commits)
    })
  return {
    ...log,
    append: (write) => Effect.tap(log.append(write), (sequence) => record([write], [sequence])),
    appendBatch: (writes, complete) => {
      // What `complete` builds once the leading sequences are known is part of the same commit.
      let trailing: ReadonlyArray<EventWrite.EventWrite> = []
      const completing =
        complete === undefined ? undefined : (sequences: ReadonlyArray<number>, prior?: (sessionId: string) => number | undefined) => (trailing = complete(sequences, prior))
      return Effect.tap(log.appendBatch(writes, completing), (sequences) => record([...writes, ...trailing], sequences))
    },
  }
}

const program = Effect.scoped(
  Effect.gen(function* () {
    const kind = scenario(name).name
    // A process crash keeps every committed WAL frame (they are in the page cache); NORMAL is enough.
    const context = yield* Layer.build(EventLog.layerSqlite({ path: path.join(directory, "events.sqlite"), synchronous: "NORMAL" }))
    const engine = yield* Engine.make({ backoffBaseMs: 5, backoffMaxMs: 20 }).pipe(
      Effect.provideService(EventLog.EventLog, journaled(Context.get(context, EventLog.EventLog))),
      Effect.provide(Ids.layer),
    )
    // One permit in the compaction scenario: every summary runs in the foreground, so commits keep their order.
    const model = yield* LanguageModel.make(
      { kind: "openai-compatible", baseUrl, model: "test-model", apiKey: Redacted.make("sk-crash") },
      kind === "compaction" ? { concurrency: 1 } : {},
    )
    const outcomes: Array<Outcome.InvocationOutcome> = []
    const message = (invocationName: string, text: string, maxSteps: number, windowed = false) =>
      Effect.tap(
        engine.run({
          invocation: invocation(invocationName),
          model,
          configuration: configuration(workspace),
          message: { text },
          tools: noteCatalog(workspace),
          maxSteps,
          ...(windowed ? { context: WINDOWED } : {}),
        }),
        (result) => Effect.sync(() => void outcomes.push(result.outcome)),
      )
    yield* scenarioRun(kind, engine, model, message, (outcome) => outcomes.push(outcome))
    process.stdout.write(`${JSON.stringify({ outcomes, commits })}\n`)
  }),
)

type Message = (
  invocationName: string,
  text: string,
  maxSteps: number,
  windowed?: boolean,
) => Effect.Effect<Engine.RunResult, unknown>

const scenarioRun = (
  kind: ScenarioName,
  engine: Engine.EngineShape,
  model: LanguageModel.LanguageModelShape,
  message: Message,
  record: (outcome: Outcome.InvocationOutcome) => void,
) =>
  Effect.gen(function* () {
    switch (kind) {
      case "tool-loop":
        yield* message("loop", "Write the five notes.", 8)
        return
      case "compaction": {
        yield* message("first", "Note k1.", 4, true)
        yield* message("second", "Note k2.", 4, true)
        const compacted = yield* engine.compact({ invocation: invocation("compact"), model, configuration: configuration(workspace) })
        record(compacted.outcome)
        return
      }
      case "handoff": {
        // `h1` asks for the handoff while its effect runs and answers only once the request has started
        // (from there its reservation is synchronous, never left to a timer); the run pauses at its
        // next step boundary.
        const handle = yield* Deferred.make<Engine.RunningInvocation>()
        const tools = noteCatalog(workspace, (line) =>
          line !== "h1"
            ? Effect.void
            : Effect.gen(function* () {
                const running = yield* Deferred.await(handle)
                const started = yield* Deferred.make<void>()
                yield* Effect.forkDetach(Effect.andThen(Deferred.succeed(started, undefined), running.handoff))
                yield* Deferred.await(started)
                yield* Effect.yieldNow
              }),
        )
        const running = yield* engine.start({
          invocation: invocation("paused"),
          model,
          configuration: configuration(workspace),
          message: { text: "Note h1, then h2." },
          tools,
          maxSteps: 4,
        })
        yield* Deferred.succeed(handle, running)
        const paused = yield* running.wait
        record(paused.outcome)
        if (paused.outcome.kind !== "handoff_paused" || leave === "leave") return
        const successor = yield* engine.resume({ paused: running.invocation, pause: paused.outcome.pause, model, tools })
        record((yield* successor.wait).outcome)
        return
      }
      case "continuation": {
        const source = yield* message("source", "Note c1, then c2.", 1)
        const continued = yield* engine.continueRun({
          source: source.invocation,
          invocation: invocation("continued"),
          model,
          configuration: configuration(workspace),
          tools: noteCatalog(workspace),
          maxSteps: 4,
        })
        record((yield* continued.wait).outcome)
        return
      }
    }
  })

Effect.runPromise(program).then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${String(error)}\n`)
    process.exit(1)
  },
)
