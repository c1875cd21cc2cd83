/**
 * `maka resume [--session S] [--abandon]` (docs/cli.md §10.1): starts the successor of each sealed
 * handoff (of S only, when given), one after another, and shows it like `maka run`. The successor's
 * configuration, context, step budget and tools come from the log; only the connection comes from
 * the flags and environment, and its route must be the pause's. `--abandon --session S` releases a
 * pause that can never be resumed.
 */
import type { Configuration, Lineage } from "@maka/facts"
import type { EventLog } from "@maka/event-log"
import { Agent, Engine, Facade } from "@maka/engine"
import { Builtins, ReadToolResult, ToolCatalog, Workspace } from "@maka/tools"
import { Cause, Effect, Exit, ManagedRuntime, Option, Stream } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { defaults, TOOL_LEVELS, type ToolLevel } from "../Configuration.ts"
import { CliError, ExitCode, fromEngineError } from "./exit.ts"
import * as Flags from "./flags.ts"
import type { CommandContext } from "./read-commands.ts"
import { offlineDelay, openConnection, showRun, type Connection } from "./run-command.ts"
import { prepareLogFolder } from "./store.ts"
import { eventLine, recoveredLines } from "./render.ts"
import { handleSignals, type Signals, stepWatch, whileOpening } from "./signals.ts"

/** The reason a pause is skipped when this host's connection or tools differ from the paused run's. */
export const SETTINGS_CHANGED = "handoff execution settings changed"

/** A page of `pendingHandoffs` (docs/log-format.md §3.10). */
const PENDING_PAGE = 64

/** The tool names a `--tools` level gives a run: its builtins and the engine's `read_tool_result`, sorted. */
export const levelNames = (level: ToolLevel): ReadonlyArray<string> => {
  const builtins = Builtins.forLevel(level, { root: path.sep }).map((tool) => tool.name)
  return (level === "none" ? builtins : [...builtins, ReadToolResult.NAME]).sort()
}

/** The `--tools` level whose run had exactly `names`, or `undefined`. */
export const levelOf = (names: ReadonlyArray<string>): ToolLevel | undefined => {
  const wanted = [...names].sort().join("\n")
  return TOOL_LEVELS.find((level) => levelNames(level).join("\n") === wanted)
}

type Runtime = ManagedRuntime.ManagedRuntime<Engine.Engine | EventLog.EventLog, unknown>

const runEffect = async <A, E>(runtime: Runtime, effect: Effect.Effect<A, E, Engine.Engine | EventLog.EventLog>): Promise<A> => {
  const exit = await runtime.runPromiseExit(effect)
  if (Exit.isSuccess(exit)) return exit.value
  const error = Cause.findErrorOption(exit.cause)
  throw fromEngineError(Option.isSome(error) ? error.value : Cause.squash(exit.cause))
}

/** A pause this command considered: started (and its exit code) or skipped (and why). */
interface Outcome {
  readonly code: number
  /** Whether no further pause should be taken up (a signal cancelled or handed off this one). */
  readonly shouldStop: boolean
}

const pendingOf = (runtime: Runtime, engine: Engine.EngineShape, sessionId: string | undefined) =>
  runEffect(
    runtime,
    Effect.gen(function* () {
      const found: Array<EventLog.PendingHandoff> = []
      for (let after = 0; ; ) {
        const page = yield* engine.log.pendingHandoffs(after)
        found.push(...page.filter((pending) => sessionId === undefined || pending.sessionId === sessionId))
        if (page.length < PENDING_PAGE) return found
        after = page[page.length - 1]!.sequence
      }
    }),
  )

/** The paused run's configuration, from its opening in the log. */
const configurationOf = async (
  runtime: Runtime,
  engine: Engine.EngineShape,
  pending: EventLog.PendingHandoff,
): Promise<Configuration.InvocationConfiguration> => {
  const events = await runEffect(runtime, engine.log.events(pending.sessionId))
  for (const stored of events) {
    const fact = stored.event.fact
    if (fact.kind === "invocation_opened" && stored.event.invocation.invocationId === pending.invocation.invocationId) return fact.configuration
  }
  throw new CliError(`the opening of the paused run ${pending.invocation.invocationId} is missing from the log`, ExitCode.failed)
}

/** Whether two paths name one folder (a missing one is compared by its path). */
const isSameFolder = (left: string, right: string): boolean => {
  const real = (folder: string) => {
    try {
      return fs.realpathSync(folder)
    } catch {
      return path.resolve(folder)
    }
  }
  return real(left) === real(right)
}

const resumeOne = async (
  context: CommandContext,
  runtime: Runtime,
  engine: Engine.EngineShape,
  connection: Connection,
  pending: EventLog.PendingHandoff,
  options: {
    readonly json: boolean
    readonly signals: Signals
    readonly protectedFiles: ReadonlyArray<string>
    readonly idleTimeoutMs: number
  },
): Promise<Outcome> => {
  const { sink } = context
  const skip = (reason: string, code: number): Outcome => {
    sink.err(`skipped ${pending.sessionId}: ${reason}\n`)
    return { code, shouldStop: false }
  }
  const pause: Lineage.HandoffPause = pending.pause
  // The idle timeout is the host's, as the connection is: the log does not hold the paused run's.
  const model = await runEffect(runtime, Agent.modelOf(connection.providerOptions, options.idleTimeoutMs))
  if (model.routeIdentity !== pause.execution.replay.routeIdentity) {
    return skip(`${SETTINGS_CHANGED}: this connection's route differs from the paused run's; pass the --provider, --base-url and --model it ran with`, ExitCode.usage)
  }
  const level = levelOf(pause.execution.tools.names)
  if (level === undefined) {
    return skip(`${SETTINGS_CHANGED}: no --tools level offers the paused run's tools (${pause.execution.tools.names.join(", ")})`, ExitCode.usage)
  }
  let started: Engine.RunningInvocation
  let workspaceAt = ""
  try {
    const configuration = await configurationOf(runtime, engine, pending)
    // The folder at the paused run's path must still be its workspace, which its marker names (see
    // docs/cli.md §10.1). A marker that is gone is not made anew: the folder would get another identity.
    const marker = Workspace.markerPath(configuration.cwd)
    if (!fs.existsSync(configuration.cwd)) {
      return skip(
        `the paused run's workspace ${configuration.cwd} is gone; restore it to resume, or release the pause with \`maka resume --abandon --session ${pending.sessionId}\``,
        ExitCode.usage,
      )
    }
    if (!fs.existsSync(marker)) {
      return skip(`${SETTINGS_CHANGED}: the paused run's workspace ${configuration.cwd} has lost its ${path.basename(marker)}; restore it to resume`, ExitCode.usage)
    }
    const workspace = await Facade.openWorkspace(configuration.cwd)
    // The tools act in the paused run's workspace, wherever this command runs: a folder other than
    // the current one (a copy of the workspace holds the same identity) is named.
    if (!isSameFolder(configuration.cwd, context.cwd)) workspaceAt = `, in the paused run's workspace ${configuration.cwd}`
    if (workspace.identity !== configuration.workspaceIdentity) {
      return skip(
        `${SETTINGS_CHANGED}: the folder ${configuration.cwd} is no longer the paused run's workspace (its ${path.basename(marker)} holds another identity)`,
        ExitCode.usage,
      )
    }
    const tools = ToolCatalog.from(
      Builtins.forLevel(level, { ...workspace, protectedFiles: options.protectedFiles, hiddenEnvironment: Flags.SECRET_ENVIRONMENT }),
    )
    // A signal that came while the successor was prepared: nothing is opened, the pause still waits.
    // One that comes before its opening is durable refuses it, writing nothing (docs/cli.md §10.1).
    if (options.signals.signal.aborted) return { code: ExitCode.cancelled, shouldStop: true }
    started = await runEffect(runtime, engine.resume({ paused: pending.invocation, pause, model, tools, signal: options.signals.signal }))
  } catch (error) {
    if (options.signals.signal.aborted) return { code: ExitCode.cancelled, shouldStop: true }
    const failure = fromEngineError(error)
    return skip(failure.message, failure.exitCode)
  }
  sink.err(`resuming ${pending.sessionId}: ${pause.remainingSteps} steps left${workspaceAt}\n`)
  const running = started
  const ended = runtime.runPromise(running.wait)
  ended.catch(() => undefined)
  const steps = stepWatch()
  const detach = options.signals.attach({
    handoff: () => runtime.runPromise(running.handoff).then((sealed) => sealed ?? null),
    cancel: () => runtime.runPromise(running.cancel),
    ended,
    stepAfter: steps.after,
  })
  try {
    const code = await showRun(
      { events: () => Stream.toAsyncIterable(running.events), wait: () => ended },
      { sink, json: options.json, sessionId: pending.sessionId, lastFailure: connection.lastFailure, observe: steps.observe },
    )
    return { code, shouldStop: code === ExitCode.cancelled || code === ExitCode.handedOff }
  } finally {
    detach()
  }
}

export const resumeCommand = async (context: CommandContext): Promise<number> => {
  const { values } = Flags.parse("resume", context.args)
  const target = Flags.database(values, context.environment, context.cwd)
  const sessionId = values.session
  const isAbandon = values.abandon === true
  if (isAbandon && sessionId === undefined) throw new Flags.UsageError("maka resume --abandon needs --session ID: the pause to release")
  const provider = isAbandon ? undefined : Flags.provider(values, context.environment)
  const delayMs = provider?.provider === "offline" ? offlineDelay(context.environment) : 0
  const idleTimeoutSeconds = Flags.integer("idle-timeout", values["idle-timeout"], ...defaults.idleTimeoutRange) ?? defaults.idleTimeoutSeconds
  if (target.kind === "sqlite" && !fs.existsSync(target.path)) {
    // A log that does not exist holds no pause: nothing is made for it (a `--db` other than the
    // default is refused as a typo, and a folder that cannot hold a log is reported, below).
    const folder = path.dirname(target.path)
    const isFolder = !fs.existsSync(folder) || fs.statSync(folder).isDirectory()
    if (target.path === path.resolve(context.cwd, defaults.database) && isFolder) {
      if (isAbandon) throw new CliError(`invalid input: session ${sessionId} holds no sealed handoff`, ExitCode.usage)
      context.sink.err("nothing to resume\n")
      return ExitCode.completed
    }
  }
  const unmake = prepareLogFolder(target, { defaultUnder: context.cwd })
  const signals = handleSignals(context.sink)
  const runtime: Runtime = ManagedRuntime.make(Agent.layer(target.kind === "sqlite" ? { database: target.path } : { databaseUrl: target.url }))
  let connection: Connection | undefined
  try {
    if (signals.signal.aborted) return ExitCode.cancelled
    const engine = await whileOpening(runEffect(runtime, Effect.service(Engine.Engine))).catch((error: unknown) => {
      unmake()
      throw error
    })
    context.sink.err(recoveredLines(Engine.recoveredOnOpen(engine)))
    if (isAbandon) {
      const successor = await runEffect(runtime, engine.abandonHandoff(sessionId!))
      if (values.json === true) {
        // The successor's event lines, its opening to its terminal, as for a resumed one.
        const events = await runEffect(runtime, engine.log.events(sessionId!))
        for (const stored of events) {
          if (stored.event.invocation.invocationId === successor.invocationId) context.sink.out(`${eventLine(stored)}\n`)
        }
      }
      context.sink.err(`abandoned the handoff of ${sessionId}: its successor ${successor.invocationId} is sealed cancelled {handoff_abandoned}\n`)
      return ExitCode.completed
    }
    const pending = await pendingOf(runtime, engine, sessionId)
    if (pending.length === 0) {
      context.sink.err("nothing to resume\n")
      return ExitCode.completed
    }
    connection = await openConnection(provider!, delayMs)
    let code: number = ExitCode.completed
    for (const [index, item] of pending.entries()) {
      // A pause whose output failed (its reader went away) cancels the rest before another resumes.
      await context.sink.outSettled?.(signals.signal)
      if (signals.signal.aborted) return ExitCode.cancelled
      if (signals.handoffRequested()) {
        // SIGTERM came while the run before this one ended on its own: stop here, as a handoff would.
        const left = pending.length - index
        context.sink.err(`stopped before the next pause (SIGTERM): ${left} left; continue with: maka resume\n`)
        return code
      }
      const outcome = await resumeOne(context, runtime, engine, connection, item, {
        json: values.json === true,
        signals,
        protectedFiles: target.kind === "sqlite" ? [target.path] : [],
        idleTimeoutMs: idleTimeoutSeconds * 1000,
      })
      // The first pause that did not complete gives the exit code.
      if (code === ExitCode.completed) code = outcome.code
      if (outcome.shouldStop) return outcome.code
    }
    return code
  } finally {
    signals.release()
    await runtime.dispose()
    await connection?.close()
  }
}
