/**
 * Test set-up for the engine: the testkit server as the model over real sockets, a real SQLite log
 * in a temporary folder, a temporary workspace, and an engine over them, all owned by the scope.
 */
import type { ToolCall } from "@maka/facts"
import { FactBuilders } from "@maka/testkit"
import * as LogTesting from "@maka/event-log/testing"
import { LanguageModel } from "@maka/model"
import { ScriptedServer } from "@maka/testkit"
import { Ids, Tool, ToolCatalog } from "@maka/tools"
import { Context, Effect, Layer, Redacted, Schema, type Scope } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Engine from "../../src/Engine.ts"

export interface Effects {
  readonly ran: Array<string>
}

/**
 * An `echo` tool that records each effect; its result is `output(value)`: a text, or the effect that
 * gives the result (which may fail, or wait).
 */
export const echoTool = (
  effects: Effects,
  output: (value: string) => string | Effect.Effect<ToolCall.ToolOutput, unknown> = (value) => `echo: ${value}`,
) =>
  Tool.make({
    name: "echo",
    description: "Echoes its input.",
    input: Schema.Struct({ value: Schema.String }),
    semantics: "parallel",
    execute: ({ value }) => {
      effects.ran.push(value)
      const result = output(value)
      return typeof result === "string" ? Effect.succeed(Tool.text(result)) : result
    },
  })

export const catalog = (effects: Effects) => ToolCatalog.make([echoTool(effects)])

export interface Setup {
  readonly server: ScriptedServer.ScriptedServer
  readonly engine: Engine.EngineShape
  readonly model: LanguageModel.LanguageModelShape
  readonly file: string
  readonly workspace: string
  /** The log under the engine (unwrapped); `log.close` releases the file for a reopen. */
  readonly log: LogTesting.EventLog.EventLogShape
}

export interface SetupExtras {
  /** Wraps the log the engine writes through (a spy); the engine sees the wrapper. */
  readonly wrapLog?: (log: LogTesting.EventLog.EventLogShape) => LogTesting.EventLog.EventLogShape
  /** Opens the log instead of a temporary SQLite file (`file` is then empty). */
  readonly openLog?: Effect.Effect<LogTesting.EventLog.EventLogShape, unknown, Scope.Scope>
}

/** One `EventLog` over `schema` of `url`, with its own connection pool, closed with the scope; every log opened on a schema shares it. */
export const sharedPostgresLog = (url: string, schema: string) =>
  Effect.map(Layer.build(LogTesting.EventLog.layerPostgres({ url, schema })), (context) => Context.get(context, LogTesting.EventLog.EventLog))

/** A PostgreSQL log in a fresh schema of `url` (left in place, like the log suites' schemas), closed with the scope. */
export const postgresLog = (url: string) =>
  Effect.suspend(() => sharedPostgresLog(url, `engine_${process.pid}_${Date.now().toString(36)}_${++schemas}`))
let schemas = 0

/** The PostgreSQL server of the suites that also run there, or `undefined` (those cases are skipped). */
export const databaseUrl = process.env["MAKA_TEST_DATABASE_URL"] === "" ? undefined : process.env["MAKA_TEST_DATABASE_URL"]

export const setup = (
  options: ScriptedServer.ServerOptions,
  engineOptions: Partial<Engine.EngineOptions> = { backoffBaseMs: 5, backoffMaxMs: 40 },
  modelOptions: LanguageModel.MakeOptions = {},
  extras: SetupExtras = {},
) =>
  Effect.gen(function* () {
    const server = yield* ScriptedServer.make(options)
    const temporary =
      extras.openLog === undefined
        ? yield* LogTesting.makeTemporary()
        : { log: yield* extras.openLog, file: "", directory: yield* LogTesting.temporaryDirectory }
    const { log, file, directory } = temporary
    const workspace = path.join(directory, "workspace")
    fs.mkdirSync(workspace)
    const model = yield* LanguageModel.make(
      { kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "test-model", apiKey: Redacted.make("sk-test-secret") },
      modelOptions,
    )
    const engine = yield* Engine.make(engineOptions).pipe(
      Effect.provideService(LogTesting.EventLog.EventLog, extras.wrapLog === undefined ? log : extras.wrapLog(log)),
      Effect.provide(Ids.layer),
    )
    return { server, engine, model, file, workspace, log } satisfies Setup
  })

let runs = 0
/** A message run's input on `session-1` with a fresh invocation. */
export const input = (
  context: Setup,
  message: string,
  tools: ToolCatalog.ToolCatalog,
  overrides: Partial<Engine.StartInput> = {},
): Engine.StartInput => {
  runs++
  return {
    invocation: FactBuilders.invocation({ turnId: `turn-${runs}`, runId: `run-${runs}`, invocationId: `invocation-${runs}` }),
    model: context.model,
    configuration: FactBuilders.configuration({
      cwd: context.workspace,
      model: FactBuilders.modelBinding({ model: "test-model" }),
    }),
    message: { text: message },
    tools,
    ...overrides,
  }
}

export const temporary = () => fs.mkdtempSync(path.join(os.tmpdir(), "maka-engine-"))
