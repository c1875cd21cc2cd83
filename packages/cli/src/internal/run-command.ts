/**
 * `maka run [MESSAGE]` (docs/cli.md §10.1): checks every flag before anything is opened, builds the
 * run's configuration as pure functions of the flags, starts it through the Promise facade, shows it
 * as it becomes durable, and maps its terminal to the exit code. SIGINT cancels it; SIGTERM hands it
 * off at its next step boundary (exit 75), so `maka resume` continues it in another process.
 */
import { Limits, type Event, type Outcome } from "@maka/facts"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { CLI_SYSTEM_PROMPT, connectionOf, contextOf, defaults } from "../Configuration.ts"
import { CliError, ExitCode, exitCodeOf, failureLine, fromEngineError } from "./exit.ts"
import { prepareLogFolder } from "./store.ts"
import * as Flags from "./flags.ts"
import { recoveredLines, RunRenderer, type ObservedFailure, type Sink } from "./render.ts"
import { exitIfOpening, handleSignals, type Signals, stepWatch, whileOpening } from "./signals.ts"

export interface RunContext {
  readonly args: ReadonlyArray<string>
  readonly environment: Flags.Environment
  readonly cwd: string
  readonly sink: Sink
  readonly stdin: NodeJS.ReadStream
}

/** A system error's code (`EBADF`, `EISDIR`), or its message. */
export const errorCodeOf = (error: unknown): string =>
  typeof error === "object" && error !== null && "code" in error && typeof error.code === "string"
    ? error.code
    : error instanceof Error
      ? error.message
      : String(error)

/**
 * Why stdin cannot be read at all though reading it would not fail: a directory, which Node reads as
 * an empty input. `undefined` for anything else (a failing read says why itself).
 */
export const unreadableStdin = (stdin: NodeJS.ReadStream): string | undefined => {
  const fd: unknown = Reflect.get(stdin, "fd")
  if (typeof fd !== "number") return undefined
  try {
    // The bigint form: with the number form, on Node 20.20, a later import of the log's modules
    // resolved them at their symbolic links' paths when stdin was a pipe, and better-sqlite3 then
    // could not find its `bindings` (every `maka run -` failed to open the log).
    return fs.fstatSync(fd, { bigint: true }).isDirectory() ? "EISDIR" : undefined
  } catch {
    return undefined
  }
}

/** The most bytes of stdin a message may take: its limit, the line end that closes it, a byte-order mark. */
const STDIN_MESSAGE_BYTES = Limits.MAX_MESSAGE_TEXT_BYTES + 2 + 3

/**
 * The message on stdin, read to its end; `undefined` as soon as more bytes came than a message can
 * hold, stdin then left unread (a file of gigabytes, `/dev/zero`, `yes |` are refused at once, in
 * the memory of one message).
 */
const readStdin = (stdin: NodeJS.ReadStream): Promise<string | undefined> =>
  new Promise((resolve, reject) => {
    const unreadable = unreadableStdin(stdin)
    if (unreadable !== undefined) return reject(Object.assign(new Error(unreadable), { code: unreadable }))
    const chunks: Array<Buffer> = []
    let bytes = 0
    const onData = (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes <= STDIN_MESSAGE_BYTES) return void chunks.push(chunk)
      stdin.off("data", onData)
      stdin.pause()
      stdin.destroy()
      resolve(undefined)
    }
    stdin.on("data", onData)
    stdin.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    stdin.on("error", reject)
  })

/** The canonical workspace directory, or a usage error (it must exist and be a directory). */
export const workspaceDirectory = (cwd: string, flag: string | undefined): string => {
  const resolved = path.resolve(cwd, flag ?? ".")
  let real: string
  try {
    real = fs.realpathSync(resolved)
  } catch {
    throw new Flags.UsageError(`workspace ${resolved} does not exist; pass an existing directory with --workspace`)
  }
  if (!fs.statSync(real).isDirectory()) {
    throw new Flags.UsageError(`workspace ${real} is not a directory; pass a directory with --workspace`)
  }
  return real
}

/**
 * The first `limit` bytes of a response's body as text, then the rest left unread (cancelled): the
 * adapter reads no more of an error body either, and a copy read to its end would hold the
 * response open after the adapter let it go (and read an endless body for ever).
 */
const readHead = async (response: Response, limit: number): Promise<string> => {
  const reader = response.body?.getReader()
  if (reader === undefined) return ""
  const decoder = new TextDecoder()
  let text = ""
  let size = 0
  try {
    while (size < limit) {
      const chunk = await reader.read()
      if (chunk.done) break
      const bytes = chunk.value.subarray(0, limit - size)
      size += bytes.byteLength
      text += decoder.decode(bytes, { stream: true })
    }
  } finally {
    reader.cancel().catch(() => undefined)
  }
  return text + decoder.decode()
}

/** Wraps a `fetch` so a retry line can name the provider's failure and its requested wait. */
const observingFetch = (
  inner: (input: string, init: RequestInit) => Promise<Response>,
  record: (failure: ObservedFailure) => void,
) => {
  let model: typeof import("@maka/model") | undefined
  return async (input: string, init: RequestInit): Promise<Response> => {
    let response: Response
    try {
      response = await inner(input, init)
    } catch (error) {
      record({ reason: "network" })
      throw error
    }
    // Each attempt's own: an attempt that fails after a good start broke in its stream, and an HTTP
    // failure is named by its status until its body is classified (never by an earlier attempt's).
    record({ reason: response.ok ? "the streamed response failed" : `HTTP ${response.status}` })
    if (!response.ok) {
      model ??= await import("@maka/model")
      const classify = model.ErrorClassification.classify
      readHead(response.clone(), model.ModelDefaults.ModelDefaults.maxErrorBodyBytes)
        .then(
          (body) => {
            const error = classify({ status: response.status, headers: response.headers, body, nowMs: Date.now(), replaySafe: true, observedOutput: false })
            const reason = error.reason
            record(
              reason._tag === "Provider"
                ? { reason: reason.reason, retryAfterMs: reason.retryAfterMs }
                : { reason: reason._tag === "ContextOverflow" ? "context_overflow" : `HTTP ${response.status}` },
            )
          },
          () => record({ reason: `HTTP ${response.status}` }),
        )
    }
    return response
  }
}

/**
 * The longest line a Linux terminal hands over in its line mode (its line buffer less the line
 * feed): the rest of a longer line, pasted, is dropped by the terminal, so a line of this length
 * may be cut and is not sent as it is.
 */
export const TERMINAL_LINE_BYTES = 4_095

export const TERMINAL_LINE_PROBLEM =
  `the line reached the terminal's limit of ${TERMINAL_LINE_BYTES} bytes, so the terminal may have cut it; for a longer message use maka chat < FILE, or maka run - < FILE`

/** Why `text` read from `stdin` may have been cut by a Linux terminal (a line at its limit), or `undefined`. */
export const terminalLineProblem = (stdin: NodeJS.ReadStream, text: string): string | undefined =>
  stdin.isTTY === true && process.platform === "linux" && text.split("\n").some((line) => Buffer.byteLength(line, "utf8") >= TERMINAL_LINE_BYTES)
    ? TERMINAL_LINE_PROBLEM
    : undefined

/** Why the log would refuse a user message's text (over its size limit), or `undefined`. */
export const messageProblem = (message: string): string | undefined => {
  const bytes = Buffer.byteLength(message, "utf8")
  return bytes > Limits.MAX_MESSAGE_TEXT_BYTES
    ? `the message is ${bytes} bytes of UTF-8; a message holds at most ${Limits.MAX_MESSAGE_TEXT_BYTES}`
    : undefined
}

const readMessage = async (context: RunContext, positionals: ReadonlyArray<string>): Promise<string> => {
  if (positionals.length > 1) throw new Flags.UsageError("maka run takes one MESSAGE; quote it")
  let message = positionals[0]
  // `-` names stdin, as for other commands that read a file (read to its end, a terminal's too).
  if (message === undefined || message === "-") {
    if (message === undefined && context.stdin.isTTY === true) throw new Flags.UsageError("give a MESSAGE, or pipe it on stdin")
    // The line end that closes piped input (`echo`, a file's last line) is not part of the message,
    // as `maka chat` reads a line without it.
    const read = await readStdin(context.stdin).catch((error: unknown) => {
      throw new Flags.UsageError(`could not read the message from stdin (${errorCodeOf(error)}); give a MESSAGE, or pipe it on stdin`)
    })
    if (read === undefined) {
      throw new Flags.UsageError(`the message on stdin is over ${Limits.MAX_MESSAGE_TEXT_BYTES} bytes of UTF-8; a message holds at most ${Limits.MAX_MESSAGE_TEXT_BYTES}`)
    }
    // Nor is a byte-order mark a file from some editors begins with.
    message = read.replace(/^\ufeff/, "").replace(/\r?\n$/, "")
  }
  if (message.trim() === "") throw new Flags.UsageError("the message is empty; give a MESSAGE with text")
  // Read from a terminal (`maka run -`): a line at the terminal's limit may have been cut there.
  if (positionals[0] === undefined || positionals[0] === "-") {
    const cut = terminalLineProblem(context.stdin, message)
    if (cut !== undefined) throw new Flags.UsageError(cut)
  }
  // Refused here, before the log, the workspace or a session is made for it.
  const problem = messageProblem(message)
  if (problem !== undefined) throw new Flags.UsageError(problem)
  return message
}

/** `MAKA_OFFLINE_DELAY_MS`: a pause between the offline model's stream events (0–10,000 ms, default 0). */
export const offlineDelay = (environment: Flags.Environment): number => {
  const value = environment["MAKA_OFFLINE_DELAY_MS"]
  if (value === undefined || value === "") return 0
  if (!/^\d+$/.test(value) || Number(value) > 10_000) throw new Flags.UsageError("MAKA_OFFLINE_DELAY_MS must be an integer in 0..10000")
  return Number(value)
}

/** Everything a run or chat needs from its flags, checked before anything is opened. */
export interface RunSettings {
  readonly database: Flags.DatabaseTarget
  readonly provider: Flags.ProviderSettings
  readonly level: ReturnType<typeof Flags.toolLevel>
  readonly maxSteps: number
  readonly idleTimeoutSeconds: number
  readonly contextWindow: number | undefined
  readonly declaredWindow: number | undefined
  readonly directory: string
  readonly sessionId: string
  readonly isNewSession: boolean
  readonly allowPriorUnknown: boolean
  readonly json: boolean
  readonly offlineDelayMs: number
}

export const settingsOf = (values: Flags.Values, context: Pick<RunContext, "environment" | "cwd">): RunSettings => {
  const isNewSession = values.session === undefined
  const provider = Flags.provider(values, context.environment)
  return {
    database: Flags.database(values, context.environment, context.cwd),
    provider,
    level: Flags.toolLevel(values.tools),
    maxSteps: Flags.integer("max-steps", values["max-steps"], ...defaults.maxStepsRange) ?? defaults.maxSteps,
    idleTimeoutSeconds: Flags.integer("idle-timeout", values["idle-timeout"], ...defaults.idleTimeoutRange) ?? defaults.idleTimeoutSeconds,
    contextWindow: Flags.integer("context-window", values["context-window"], 1, Number.MAX_SAFE_INTEGER),
    declaredWindow: Flags.integer("declared-window", values["declared-window"], 1, Number.MAX_SAFE_INTEGER),
    directory: workspaceDirectory(context.cwd, values.workspace),
    sessionId: isNewSession ? randomUUID() : Flags.newTurnSession(values.session!),
    isNewSession,
    allowPriorUnknown: values["allow-prior-unknown"] === true,
    json: values.json === true,
    // Read only for the offline model it paces: a value set for demos refuses no other run.
    offlineDelayMs: provider.provider === "offline" ? offlineDelay(context.environment) : 0,
  }
}

/** A standalone compaction's terminal and the events it committed, from its opening to its terminal. */
export interface CompactResult {
  readonly outcome: Outcome.InvocationOutcome
  readonly events: ReadonlyArray<Event.StoredEvent>
}

/** An open engine, workspace and model for one or more turns of a session. */
export interface Host {
  /** Starts a turn, shows it as it becomes durable and resolves with its exit code. */
  readonly turn: (message: string, onStarted?: (run: { readonly steer: (text: string) => Promise<void> }) => void) => Promise<number>
  /** Runs a standalone compaction of the session and resolves with its result and its committed events. */
  readonly compact: () => Promise<CompactResult>
  readonly close: () => Promise<void>
}

/** The connection of the provider flags: its options (with the offline server when chosen) and how to close it. */
export interface Connection {
  readonly providerOptions: import("@maka/engine").Facade.ProviderOptions & { readonly baseUrl: string }
  /** The last provider failure its `fetch` saw: what a retry line names. */
  readonly lastFailure: () => ObservedFailure | undefined
  readonly close: () => Promise<void>
}

/** Opens the connection of `provider` (docs/cli.md §10.1 "Provider", "Offline model"). */
export const openConnection = async (provider: Flags.ProviderSettings, offlineDelayMs: number): Promise<Connection> => {
  const offline = provider.provider === "offline" ? await (await import("../OfflineModel.ts")).start({ delayMs: offlineDelayMs }) : undefined
  let lastFailure: ObservedFailure | undefined
  const record = (failure: ObservedFailure) => {
    lastFailure = failure
  }
  const providerOptions =
    offline !== undefined
      ? { ...offline.provider, fetch: observingFetch(offline.provider.fetch, record) }
      : {
          kind: provider.provider === "anthropic" ? ("anthropic" as const) : ("openai-compatible" as const),
          baseUrl: provider.baseUrl!,
          model: provider.model!,
          ...(provider.apiKey === undefined ? {} : { apiKey: provider.apiKey }),
          fetch: observingFetch((input, init) => fetch(input, init), record),
        }
  return { providerOptions, lastFailure: () => lastFailure, close: async () => await offline?.close() }
}

/** A run as the CLI shows it: a run of the facade, or the successor of a pause. */
export interface ShownRun {
  readonly events: () => AsyncIterable<Event.StoredEvent>
  readonly wait: () => Promise<{ readonly outcome: Outcome.InvocationOutcome }>
}

/**
 * Shows a run as it becomes durable and resolves with its exit code; the terminal's line goes to
 * stderr (a failure's class, `cancelled`, or how to resume a handoff).
 */
export const showRun = async (
  run: ShownRun,
  options: {
    readonly sink: Sink
    readonly json: boolean
    readonly sessionId: string
    readonly lastFailure: () => ObservedFailure | undefined
    /** Sees each event as it is shown. */
    readonly observe?: (stored: Event.StoredEvent) => void
  },
): Promise<number> => {
  const renderer = new RunRenderer(options.sink, options.json, options.lastFailure)
  renderer.startProgress()
  try {
    for await (const stored of run.events()) {
      renderer.handle(stored)
      options.observe?.(stored)
    }
  } finally {
    renderer.stop()
  }
  const outcome = (await run.wait()).outcome
  if (outcome.kind === "failed") options.sink.err(`${failureLine(outcome)}\n`)
  if (outcome.kind === "cancelled") options.sink.err("cancelled\n")
  if (outcome.kind === "handoff_paused") {
    options.sink.err(`handed off with ${outcome.pause.remainingSteps} steps left; continue it with: maka resume --session ${options.sessionId}\n`)
  }
  return exitCodeOf(outcome)
}

/**
 * Opens the model (the offline server when chosen), the workspace and the log. `signal` cancels the
 * turn in flight; aborted before the log is opened, nothing is written. `attach` makes each started
 * run the target of the signals (SIGTERM hands it off).
 */
export const openHost = async (settings: RunSettings, sink: Sink, signal: AbortSignal, attach?: Signals["attach"]): Promise<Host> => {
  const { createEngine, Facade } = await import("@maka/engine")
  const { Builtins } = await import("@maka/tools")
  const provider = settings.provider
  const connection = await openConnection(provider, settings.offlineDelayMs)
  let engine: Awaited<ReturnType<typeof createEngine>> | undefined
  let unmake = (): void => undefined
  const close = async () => {
    await engine?.close()
    await connection.close()
  }
  try {
    const providerOptions = connection.providerOptions
    const database = settings.database
    unmake = prepareLogFolder(database)
    if (signal.aborted) throw new CliError("cancelled", ExitCode.cancelled)
    engine = await whileOpening(createEngine(database.kind === "sqlite" ? { database: database.path } : { databaseUrl: database.url }))
    const opened = engine
    sink.err(recoveredLines(opened.recoveredOnOpen))
    // The workspace's marker is made only once the log is open: a log another writer holds (or one
    // that is not a maka log) leaves no marker behind in a folder that had none.
    const workspace = await Facade.openWorkspace(settings.directory)
    if (settings.isNewSession) sink.err(`session: ${settings.sessionId}\n`)
    // A log kept in the workspace is never written by a tool (docs/cli.md §10.1).
    const tools = Builtins.forLevel(settings.level, {
      ...workspace,
      protectedFiles: database.kind === "sqlite" ? [database.path] : [],
      hiddenEnvironment: Flags.SECRET_ENVIRONMENT,
    })
    const turn: Host["turn"] = async (message, onStarted) => {
      const run = await opened.start({
        sessionId: settings.sessionId,
        provider: providerOptions,
        connection: connectionOf(provider.provider, providerOptions.baseUrl),
        message,
        tools,
        workspace,
        systemPrompt: CLI_SYSTEM_PROMPT,
        providerOptions: {},
        context: contextOf(provider.provider, { contextWindow: settings.contextWindow, declaredWindow: settings.declaredWindow }),
        maxSteps: settings.maxSteps,
        idleTimeoutMs: settings.idleTimeoutSeconds * 1000,
        allowPriorUnknown: settings.allowPriorUnknown,
        signal,
      })
      onStarted?.(run)
      // Handled here: when the run's events fail first (the store went away, another host's
      // `maka recover` sealed it), `showRun` reports that, and this promise must not reject unheard.
      const ended = run.wait()
      ended.catch(() => undefined)
      const steps = stepWatch()
      const detach = attach?.({
        handoff: () => run.handoff(),
        cancel: () => run.cancel(),
        ended,
        stepAfter: steps.after,
        allowsPriorUnknown: settings.allowPriorUnknown,
      })
      try {
        return await showRun(run, {
          sink,
          json: settings.json,
          sessionId: settings.sessionId,
          lastFailure: connection.lastFailure,
          observe: steps.observe,
        })
      } finally {
        detach?.()
      }
    }
    const compact: Host["compact"] = async () => {
      const result = await opened.compact({
        sessionId: settings.sessionId,
        provider: providerOptions,
        connection: connectionOf(provider.provider, providerOptions.baseUrl),
        workspace,
        systemPrompt: CLI_SYSTEM_PROMPT,
        providerOptions: {},
        context: contextOf(provider.provider, { contextWindow: settings.contextWindow, declaredWindow: settings.declaredWindow }),
        idleTimeoutMs: settings.idleTimeoutSeconds * 1000,
        signal,
      })
      const invocationId = result.invocation.invocationId
      const stored = await opened.events(settings.sessionId)
      return { outcome: result.outcome, events: stored.filter((event) => event.event.invocation.invocationId === invocationId) }
    }
    return { turn, compact, close }
  } catch (error) {
    await close()
    unmake()
    throw fromEngineError(error)
  }
}

/** SIGINT, SIGTERM and SIGHUP abort the returned signal until `release` (for a standalone compaction, which has no handoff). */
export const cancelOnSignals = (): { readonly signal: AbortSignal; readonly release: () => void } => {
  const controller = new AbortController()
  const onSignal = () => {
    exitIfOpening()
    controller.abort()
  }
  process.on("SIGINT", onSignal)
  process.on("SIGTERM", onSignal)
  process.on("SIGHUP", onSignal)
  return {
    signal: controller.signal,
    release: () => {
      process.off("SIGINT", onSignal)
      process.off("SIGTERM", onSignal)
      process.off("SIGHUP", onSignal)
    },
  }
}

export const runCommand = async (context: RunContext): Promise<number> => {
  const { values, positionals } = Flags.parse("run", context.args)
  const settings = settingsOf(values, context)
  const message = await readMessage(context, positionals)
  // Signals before the opening is durable cancel with nothing written; then SIGTERM hands off.
  const signals = handleSignals(context.sink)
  try {
    const host = await openHost(settings, context.sink, signals.signal, signals.attach)
    try {
      return await host.turn(message)
    } catch (error) {
      throw fromEngineError(error)
    } finally {
      await host.close()
    }
  } finally {
    signals.release()
  }
}
