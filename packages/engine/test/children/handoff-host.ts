/**
 * Child process of the cross-process handoff test, a host over the Promise facade:
 * - `pause <directory> <baseUrl>` opens `<directory>/events.sqlite`, starts a tool-loop run whose
 *   `count` tool appends a line to `<directory>/workspace/effects.txt`, prints `{"dispatched": n}` as
 *   each call is dispatched, and on SIGTERM closes the engine handing the run off; it prints what
 *   became of the run and exits, releasing the log.
 * - `resume <directory> <baseUrl>` opens the same log, resumes every sealed pause it can serve with
 *   the same provider and tools, waits for each successor, and prints their outcomes.
 */
import { createEngine } from "@maka/engine"
import { Tool } from "@maka/tools"
import { Effect, Schema } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"

const [mode, directory, baseUrl] = process.argv.slice(2)
if (directory === undefined || baseUrl === undefined) throw new Error("usage: handoff-host.ts pause|resume <directory> <baseUrl>")
const workspace = path.join(directory, "workspace")
const provider = { kind: "openai-compatible" as const, baseUrl, model: "test-model", apiKey: "sk-handoff" }

/** Appends its value to the effects file, then takes a moment: the countable effect. */
const count = Tool.make({
  name: "count",
  description: "Counts one effect.",
  input: Schema.Struct({ value: Schema.String }),
  semantics: "parallel",
  execute: ({ value }) =>
    Effect.andThen(
      Effect.sync(() => fs.appendFileSync(path.join(workspace, "effects.txt"), `${value}\n`)),
      Effect.as(Effect.sleep("150 millis"), Tool.text(`counted ${value}`)),
    ),
})

const print = (value: unknown) => process.stdout.write(`${JSON.stringify(value)}\n`)

const engine = await createEngine({ database: path.join(directory, "events.sqlite") })
if (mode === "pause") {
  const run = await engine.start({ sessionId: "session-1", message: "Count a, then b.", tools: [count], workspace, provider, maxSteps: 8 })
  process.once("SIGTERM", () => {
    void engine.close({ handoff: true }).then((closed) => {
      print({ closed: closed.map((item) => ({ outcome: item.outcome, remainingSteps: item.pause?.remainingSteps })) })
      process.exit(0)
    })
  })
  let dispatched = 0
  for await (const stored of run.events()) {
    if (stored.event.fact.kind === "tool_dispatched") print({ dispatched: ++dispatched })
  }
} else {
  const reports = await engine.resumePending({ provider: () => provider, tools: () => [count] })
  const outcomes = []
  for (const report of reports) {
    outcomes.push("started" in report ? (await report.started.wait()).outcome : { skipped: report.skipped })
  }
  await engine.close()
  print({ resumed: outcomes })
  process.exit(0)
}
