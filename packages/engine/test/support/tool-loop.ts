/**
 * The scripted tool loop of the crash test, shared by its child process and its parent: a `note`
 * tool whose effect appends one line to `effects.txt` in the workspace (so effects can be counted
 * after a SIGKILL), and a four-step script that dispatches five notes before answering.
 */
import { FactBuilders, OpenAiSse, Respond } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Effect, Schema } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"

export const EFFECTS_FILE = "effects.txt"

/**
 * `note {line}` appends `line` and a newline to `<workspace>/effects.txt`, synchronously, then runs
 * `after(line)` (nothing by default) before it answers.
 */
export const noteTool = (workspace: string, after: (line: string) => Effect.Effect<void> = () => Effect.void) =>
  Tool.make({
    name: "note",
    description: "Appends one line to the notes file.",
    input: Schema.Struct({ line: Schema.String }),
    semantics: "parallel",
    execute: ({ line }) =>
      Effect.andThen(
        Effect.sync(() => fs.appendFileSync(path.join(workspace, EFFECTS_FILE), `${line}\n`)),
        Effect.as(after(line), Tool.text(`noted ${line}`)),
      ),
  })

export const noteCatalog = (workspace: string, after?: (line: string) => Effect.Effect<void>) =>
  ToolCatalog.make([noteTool(workspace, after)])

/** The `note` calls of one model response, one per line, each call id naming its line. */
export const notes = (...lines: ReadonlyArray<string>) =>
  lines.map((line) => ({ id: `call-${line}`, name: "note", arguments: ['{"line":', `"${line}"}`] }))

/** Step 1 notes `a`; step 2 notes `b` and `c`; step 3 says something and notes `d`, `e`; step 4 answers. */
export const toolLoopScript = [
  Respond.sse(OpenAiSse.response({ toolCalls: notes("a") })),
  Respond.sse(OpenAiSse.response({ text: ["Two ", "more."], toolCalls: notes("b", "c") })),
  Respond.sse(OpenAiSse.response({ text: ["Last ", "two."], toolCalls: notes("d", "e") })),
  Respond.sse(OpenAiSse.response({ text: ["All ", "notes ", "written."] })),
]

/** The lines a clean run writes, in order. */
export const ALL_NOTES = ["a", "b", "c", "d", "e"]

export const CRASH_INVOCATION = FactBuilders.invocation({
  sessionId: "session-crash",
  turnId: "turn-crash",
  runId: "run-crash",
  invocationId: "invocation-crash",
})

/** The lines of the effects file (none when the file does not exist). */
export const readEffects = (workspace: string): ReadonlyArray<string> => {
  const file = path.join(workspace, EFFECTS_FILE)
  if (!fs.existsSync(file)) return []
  return fs.readFileSync(file, "utf8").split("\n").filter((line) => line !== "")
}
