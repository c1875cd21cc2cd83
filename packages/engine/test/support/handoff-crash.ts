/**
 * The handed-off tool loop of the handoff crash test, shared by its child process and its parent: a
 * `count` tool whose effect appends one line to `effects.txt` in the workspace (countable after a
 * SIGKILL) and then takes a moment, the script of the run and its successor, and the run's identity.
 */
import { FactBuilders, OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Effect, Schema } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"

export const EFFECTS_FILE = "effects.txt"

/** How long `count` takes after its effect: the window in which the run is handed off. */
export const COUNT_PAUSE_MS = 600

/** `count {value}` appends `value` and a newline to `<workspace>/effects.txt`, then waits `COUNT_PAUSE_MS`. */
export const countTool = (workspace: string) =>
  Tool.make({
    name: "count",
    description: "Counts one effect.",
    input: Schema.Struct({ value: Schema.String }),
    semantics: "parallel",
    execute: ({ value }) =>
      Effect.andThen(
        Effect.sync(() => fs.appendFileSync(path.join(workspace, EFFECTS_FILE), `${value}\n`)),
        Effect.as(Effect.sleep(COUNT_PAUSE_MS), Tool.text(`counted ${value}`)),
      ),
  })

export const countCatalog = (workspace: string) => ToolCatalog.make([countTool(workspace)])

const count = (id: string, value: string) =>
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id, name: "count", arguments: [JSON.stringify({ value })] }] }))

/** The paused run counts `a`; its successor counts `b`, then answers. */
export const handoffScript = [count("call-a", "a"), count("call-b", "b"), Respond.sse(OpenAiSse.response({ text: ["Counted."] }))]

export const HANDOFF_INVOCATION = FactBuilders.invocation({
  sessionId: "session-handoff",
  turnId: "turn-handoff",
  runId: "run-handoff",
  invocationId: "invocation-handoff",
})

export const MAX_STEPS = 6

/** The run's configuration in `workspace`. */
export const configuration = (workspace: string) =>
  FactBuilders.configuration({ cwd: workspace, model: FactBuilders.modelBinding({ model: "test-model" }) })

/** The lines of the effects file (none when it does not exist). */
export const readEffects = (workspace: string): ReadonlyArray<string> => {
  const file = path.join(workspace, EFFECTS_FILE)
  if (!fs.existsSync(file)) return []
  return fs.readFileSync(file, "utf8").split("\n").filter((line) => line !== "")
}
