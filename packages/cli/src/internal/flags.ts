/**
 * The command line (docs/cli.md §10, §10.1): every flag with its default, which command takes which,
 * parsing with `node:util` `parseArgs`, and the checks that turn flags and environment into settings.
 * A problem is a `UsageError` (exit 2) that says what to do; nothing is opened before these checks.
 */
import * as path from "node:path"
import { parseArgs } from "node:util"
import { defaults, PROVIDERS, TOOL_LEVELS, type ProviderName, type ToolLevel } from "../Configuration.ts"

export class UsageError extends Error {
  override readonly name = "UsageError"
}

export interface FlagSpec {
  readonly type: "string" | "boolean"
  /** The placeholder of the value in the help text. */
  readonly value?: string
  readonly description: string
  /** What the help shows as the default, with its environment variable. */
  readonly defaultText?: string
}

export const FLAGS = {
  db: { type: "string", value: "PATH", description: "SQLite event log", defaultText: `${defaults.database}, env MAKA_DB` },
  "database-url": { type: "string", value: "URL", description: "PostgreSQL event log instead of --db", defaultText: "env MAKA_DATABASE_URL" },
  session: { type: "string", value: "ID", description: "session id", defaultText: "a new id, printed on stderr" },
  provider: {
    type: "string",
    value: PROVIDERS.join("|"),
    description: "model provider",
    defaultText: "openai-compatible when a base URL is set, else offline",
  },
  "base-url": { type: "string", value: "URL", description: "provider base URL (http or https)", defaultText: "env MAKA_BASE_URL" },
  model: { type: "string", value: "NAME", description: "model name", defaultText: "env MAKA_MODEL; maka-offline offline" },
  workspace: { type: "string", value: "DIR", description: "workspace the tools are confined to", defaultText: "the current directory" },
  tools: { type: "string", value: TOOL_LEVELS.join("|"), description: "builtin tools offered to the model", defaultText: defaults.tools },
  "max-steps": {
    type: "string",
    value: "N",
    description: `model steps per run (${defaults.maxStepsRange[0]}–${defaults.maxStepsRange[1]})`,
    defaultText: String(defaults.maxSteps),
  },
  "context-window": { type: "string", value: "N", description: "the model's context window in tokens", defaultText: "unknown" },
  "declared-window": { type: "string", value: "N", description: "tokens at which compaction is due", defaultText: "none" },
  "allow-prior-unknown": {
    type: "boolean",
    description: "admit a message over tool calls whose outcome is unknown",
    defaultText: "off",
  },
  "idle-timeout": {
    type: "string",
    value: "SECONDS",
    description: `seconds without model output before a request times out (${defaults.idleTimeoutRange[0]}–${defaults.idleTimeoutRange[1]})`,
    defaultText: String(defaults.idleTimeoutSeconds),
  },
  json: { type: "boolean", description: "print events as JSON lines {\"sequence\":N,\"event\":{…}}", defaultText: "off" },
  step: { type: "string", value: "N", description: "show the exact model input of step N (from 1)", defaultText: "none" },
  html: { type: "string", value: "FILE", description: "also write a self-contained HTML page of the session (- for stdout)", defaultText: "none" },
  abandon: {
    type: "boolean",
    description: "release the sealed handoff of --session: its successor is sealed cancelled, never run",
    defaultText: "off",
  },
  keep: { type: "boolean", description: "keep the tour's temporary folder and print its path", defaultText: "off" },
  help: { type: "boolean", description: "show this help" },
} as const satisfies Record<string, FlagSpec>

export type FlagName = keyof typeof FLAGS

const DATABASE: ReadonlyArray<FlagName> = ["db", "database-url"]
const PROVIDER: ReadonlyArray<FlagName> = ["provider", "base-url", "model"]

export interface CommandSpec {
  readonly summary: string
  readonly arguments?: string
  readonly flags: ReadonlyArray<FlagName>
  /** What a flag means for this command where it differs from the flag table's text. */
  readonly text?: Partial<Record<FlagName, Pick<FlagSpec, "description" | "defaultText">>>
}

/** `--session` of a command that reads or changes one existing session. */
const EXISTING_SESSION = { description: "the session (required)" } as const

/** The flags of a command that runs user turns (`run`, `chat`). */
const TURN: ReadonlyArray<FlagName> = [
  ...DATABASE,
  "session",
  ...PROVIDER,
  "workspace",
  "tools",
  "max-steps",
  "context-window",
  "declared-window",
  "allow-prior-unknown",
  "idle-timeout",
  "json",
]

/** The commands and the flags each takes. */
export const COMMANDS = {
  run: {
    summary: "one user turn (MESSAGE, or stdin when it is not a terminal or MESSAGE is -)",
    arguments: "[MESSAGE]",
    flags: TURN,
  },
  chat: {
    summary: "interactive turns in one session: one message per line of stdin; a line sent during a turn steers it",
    flags: TURN,
  },
  compact: {
    summary: "summarise a session's history into a checkpoint (standalone compaction); --session is required",
    flags: [...DATABASE, "session", ...PROVIDER, "workspace", "context-window", "declared-window", "idle-timeout", "json"],
    text: { session: EXISTING_SESSION },
  },
  events: { summary: "the stored events of a session", flags: [...DATABASE, "session", "json"], text: { session: EXISTING_SESSION } },
  inspect: {
    summary: "timeline of a session and the exact model input of a step, checked against its digest",
    flags: [...DATABASE, "session", "step", "html"],
    text: { session: EXISTING_SESSION },
  },
  resume: {
    summary: "run the successors of sealed handoffs (of --session only, when given) on the connection of the flags",
    flags: [...DATABASE, "session", ...PROVIDER, "idle-timeout", "abandon", "json"],
    text: { session: { description: "resume only this session's sealed handoff", defaultText: "every sealed handoff" } },
  },
  recover: { summary: "seal what a crashed host left in flight", flags: [...DATABASE] },
  sessions: {
    summary: "list sessions with their state",
    flags: [...DATABASE, "json"],
    text: { json: { description: 'print one JSON line per session {"sessionId":…,"state":…,"invocations":N,"events":N}', defaultText: "off" } },
  },
  backup: {
    summary: "copy a SQLite log safely while it may be in use (SQLite's online backup); FILE must not exist",
    arguments: "DB FILE",
    flags: [],
  },
  demo: { summary: "an offline tour: a tool loop, a crash and its recovery, compaction, and a handoff to a second process", flags: ["keep"] },
} as const satisfies Record<string, CommandSpec>

export type CommandName = keyof typeof COMMANDS

/** A flag's description and default as `maka <command> --help` shows them. */
export const flagText = (command: CommandName, flag: FlagName): { readonly description: string; readonly defaultText?: string } => {
  const spec: FlagSpec = FLAGS[flag]
  const own = (COMMANDS[command] as CommandSpec).text?.[flag]
  const defaultText = own === undefined ? spec.defaultText : own.defaultText
  return { description: own?.description ?? spec.description, ...(defaultText === undefined ? {} : { defaultText }) }
}

export const isCommand = (name: string): name is CommandName => Object.hasOwn(COMMANDS, name)

/** Edits (insert, delete, replace, swap of neighbours) between two short words. */
const distance = (left: string, right: string): number => {
  const rows = Array.from({ length: left.length + 1 }, (_, index) => [index, ...Array<number>(right.length).fill(0)])
  for (let column = 1; column <= right.length; column++) rows[0]![column] = column
  for (let row = 1; row <= left.length; row++) {
    for (let column = 1; column <= right.length; column++) {
      const same = left[row - 1] === right[column - 1] ? 0 : 1
      let best = Math.min(rows[row - 1]![column]! + 1, rows[row]![column - 1]! + 1, rows[row - 1]![column - 1]! + same)
      if (row > 1 && column > 1 && left[row - 1] === right[column - 2] && left[row - 2] === right[column - 1]) {
        best = Math.min(best, rows[row - 2]![column - 2]! + 1)
      }
      rows[row]![column] = best
    }
  }
  return rows[left.length]![right.length]!
}

/** The refusal of a word that names no command, with the command it most likely meant. */
export const unknownCommand = (name: string): string => {
  const lower = name.toLowerCase()
  const near = (Object.keys(COMMANDS) as Array<CommandName>)
    .map((command) => ({ command, edits: distance(lower, command) }))
    .filter(({ command, edits }) => edits <= (command.length <= 4 ? 1 : 2))
    .sort((left, right) => left.edits - right.edits)[0]
  return near === undefined ? `unknown command '${name}'; see maka --help` : `unknown command '${name}'; did you mean '${near.command}'? see maka --help`
}

export type Values = { readonly [K in FlagName]?: (typeof FLAGS)[K]["type"] extends "boolean" ? boolean : string }

export interface Parsed {
  readonly values: Values
  readonly positionals: ReadonlyArray<string>
}

/** Parses the arguments after the command name; unknown flags and missing values are usage errors. */
export const parse = (command: CommandName, args: ReadonlyArray<string>): Parsed => {
  const spec: CommandSpec = COMMANDS[command]
  const options: Record<string, { type: "string" | "boolean" }> = { help: { type: "boolean" } }
  for (const name of spec.flags) options[name] = { type: FLAGS[name].type }
  let parsed: ReturnType<typeof parseArgs<{ args: Array<string>; options: typeof options; allowPositionals: boolean; strict: true; tokens: true }>>
  try {
    parsed = parseArgs({ args: [...args], options, allowPositionals: spec.arguments !== undefined, strict: true, tokens: true })
  } catch (error) {
    const problem = parseProblem(command, error)
    // As unknownCommand's: "did you mean '--session'? see maka run --help".
    throw new UsageError(`${problem}${problem.endsWith("?") ? " " : "; "}see maka ${command} --help`)
  }
  // A flag given twice would silently take its last value (`--session a --session b`).
  const seen = new Set<string>()
  for (const token of parsed.tokens) {
    if (token.kind !== "option") continue
    if (seen.has(token.name)) throw new UsageError(`--${token.name} is given twice; give it once`)
    seen.add(token.name)
    // An empty value is never the flag left out: `maka resume --session "$S"` with S unset would
    // resume every paused session of the log, `--db ""` open the default log.
    if (token.value === "") throw new UsageError(`--${token.name} needs a value, not an empty one; leave the flag out for its default`)
  }
  const values = parsed.values as Values // parseArgs types values by `options`, built above from FLAGS
  const problem = values.session === undefined ? undefined : sessionProblem(values.session)
  if (problem !== undefined) throw new UsageError(problem)
  return { values, positionals: parsed.positionals }
}

/**
 * What is wrong with a `--session` value, or undefined: the log's ids are at most 512 UTF-16 units
 * (docs/log-format.md), so a longer one names no session and can make none.
 */
const sessionProblem = (value: string): string | undefined =>
  value.length > MAX_SESSION_ID ? `--session must be at most ${MAX_SESSION_ID} UTF-16 code units, got ${value.length}` : undefined

/** The log's longest id (`@maka/facts` `Limits.MAX_ID_UTF16`; test/flags.test.ts keeps the two in step). */
export const MAX_SESSION_ID = 512

/**
 * What a new turn's `--session` must also be: printable text. A line break or another control
 * character, or only spaces, would make the id unreadable in `maka sessions` and hard to type again.
 * Read commands take any id the log may hold.
 */
export const newTurnSession = (value: string): string => {
  if (value.trim() === "") throw new UsageError("--session must not be blank")
  if (/[\u0000-\u001f\u007f-\u009f]/.test(value)) throw new UsageError("--session must not contain a line break or another control character")
  return value
}

/**
 * A refusal of `parseArgs` in the command line's own terms: which flag or argument, and what to
 * write instead. Node's messages name its API (a "positional argument", an "option argument"), span
 * lines, and suggest a quoting that does not work in a shell.
 */
const parseProblem = (command: CommandName, error: unknown): string => {
  const message = error instanceof Error ? error.message : String(error)
  const code = (error as { readonly code?: unknown } | undefined)?.code
  const quoted = /'([^']*)'/.exec(message)?.[1]
  const flag = quoted?.split(" ")[0]
  if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && quoted !== undefined) {
    // A misspelt flag of the command (`--sesion`) is named with the one it most likely meant.
    const written = quoted.replace(/^-+/, "").split("=")[0]!.toLowerCase()
    const near = ["help", ...COMMANDS[command].flags]
      .map((name) => ({ name, edits: distance(written, name) }))
      .filter(({ name, edits }) => written.length > 1 && edits <= (name.length <= 4 ? 1 : 2))
      .sort((left, right) => left.edits - right.edits)[0]
    if (near !== undefined) return `unknown flag '${quoted}'; did you mean '--${near.name}'?`
    return "arguments" in COMMANDS[command]
      ? `unknown flag '${quoted}' (an argument that starts with '-' goes after '--')`
      : `unknown flag '${quoted}'`
  }
  if (code === "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL" && quoted !== undefined) {
    return `unexpected argument '${quoted}': maka ${command} takes none`
  }
  if (code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE" && flag !== undefined) {
    if (message.includes("does not take an argument")) return `${flag} takes no value`
    if (message.includes("ambiguous")) return `${flag} needs a value (one that starts with '-' is written ${flag}=VALUE)`
    return `${flag} needs a value`
  }
  return message.split("\n")[0]!
}

export type Environment = Readonly<Record<string, string | undefined>>

const nonEmpty = (value: string | undefined): string | undefined => (value === undefined || value === "" ? undefined : value)

/** An integer flag in a range, or a usage error that names it. */
export const integer = (name: FlagName, value: string | undefined, minimum: number, maximum: number): number | undefined => {
  if (value === undefined) return undefined
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(Number(value)) || Number(value) < minimum || Number(value) > maximum) {
    // A flag with no upper bound takes any positive integer; naming 2^53 − 1 as its end says nothing.
    const range = minimum === 1 && maximum === Number.MAX_SAFE_INTEGER ? "a positive integer" : `an integer in ${minimum}..${maximum}`
    throw new UsageError(`--${name} must be ${range}, got '${value}'`)
  }
  return Number(value)
}

export type DatabaseTarget = { readonly kind: "sqlite"; readonly path: string } | { readonly kind: "postgres"; readonly url: string }

/**
 * The environment variables that hold the CLI's credentials: `run_command`'s shell does not
 * inherit them (docs/cli.md §10.1 "Tools"). `PGPASSWORD` is the PostgreSQL log's password when its
 * URL names none (pg reads it).
 */
export const SECRET_ENVIRONMENT: ReadonlyArray<string> = ["MAKA_API_KEY", "MAKA_DATABASE_URL", "PGPASSWORD"]

/**
 * `--db` / `MAKA_DB` (default `.maka/events.sqlite` under `cwd`) or `--database-url` /
 * `MAKA_DATABASE_URL` (docs/cli.md §10.1 "Database"): a flag beats both variables, as every flag beats
 * its own; both flags, or no flag and both variables, is an error.
 */
export const database = (values: Values, environment: Environment, cwd: string): DatabaseTarget => {
  if (values.db !== undefined && values["database-url"] !== undefined) {
    throw new UsageError("pass either --db or --database-url, not both")
  }
  const hasFlag = values.db !== undefined || values["database-url"] !== undefined
  const file = hasFlag ? values.db : nonEmpty(environment["MAKA_DB"])
  const url = hasFlag ? values["database-url"] : nonEmpty(environment["MAKA_DATABASE_URL"])
  if (file !== undefined && url !== undefined) {
    throw new UsageError("MAKA_DB and MAKA_DATABASE_URL are both set: unset one, or pass --db or --database-url")
  }
  if (url !== undefined) {
    // The URL forms the log takes (docs/log-format.md §3.1); a socket folder's bare path is not one here.
    // Named as given: the flag, or the variable it came from.
    const named = hasFlag ? "--database-url" : "MAKA_DATABASE_URL"
    if (!/^(postgres(ql)?:\/\/|socket:)/.test(url)) throw new UsageError(`${named} must be a postgres://, postgresql:// or socket: URL`)
    // Not echoed: the URL may carry a password.
    if (!URL.canParse(url)) throw new UsageError(`${named} is not a valid URL (postgres://USER@HOST:PORT/DATABASE)`)
    return { kind: "postgres", url }
  }
  return { kind: "sqlite", path: path.resolve(cwd, file ?? defaults.database) }
}

export interface ProviderSettings {
  readonly provider: ProviderName
  readonly baseUrl?: string | undefined
  readonly model?: string | undefined
  /** From `MAKA_API_KEY` only. */
  readonly apiKey?: string | undefined
}

/**
 * The Fetch standard's "bad ports": `fetch` refuses them before connecting (`fetch failed`, cause
 * `bad port`), a transport failure the adapter retries as `network` for minutes. A base URL on one
 * of them can never work, so it is a usage error. `@maka/model`'s `ProviderConfig.FETCH_BAD_PORTS`,
 * here so the flag checks need not load the model package (test/flags.test.ts keeps the two in step).
 */
export const FETCH_BAD_PORTS: ReadonlySet<number> = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110, 111,
  113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548,
  554, 556, 563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665,
  6666, 6667, 6668, 6669, 6679, 6697, 10080,
])

/**
 * What is wrong with a base URL, or undefined. The value itself is never echoed: a key pasted into
 * the flag, or carried in its user info or query, must not reach the terminal or a log of it.
 */
const baseUrlProblem = (value: string, named = "--base-url"): string | undefined => {
  if (!URL.canParse(value)) return `${named} must be an http(s) URL; the value given is not a URL`
  const url = new URL(value)
  if (url.protocol !== "http:" && url.protocol !== "https:") return `${named} must be an http(s) URL, not ${url.protocol}`
  if (!/^https?:\/\/[^/]/i.test(value)) return `${named} must be an absolute URL: http(s)://HOST[:PORT][/PATH]`
  // `fetch` trims it, the route identity would keep it: a resume with the clean URL would not match.
  if (/\s$/.test(value)) return `${named} must not end with a space, tab or line break`
  if (url.username !== "" || url.password !== "") {
    return `${named} must not carry credentials (user:password@); the API key comes only from MAKA_API_KEY`
  }
  // The text itself: an empty `?` or `#` leaves `search` and `hash` empty.
  if (value.includes("?") || value.includes("#")) {
    return `${named} must not carry a query string or fragment; the API key comes only from MAKA_API_KEY`
  }
  const port = Number(url.port)
  if (FETCH_BAD_PORTS.has(port)) {
    return `${named} port ${port} is one fetch never connects to (a bad port of the Fetch standard); use another port`
  }
  return undefined
}

/**
 * `@maka/model`'s `ProviderConfig.isHeaderValue`, here so the flag checks need not load the model
 * package (test/flags.test.ts keeps the two in step): the value `fetch` would refuse, once trimmed.
 */
export const isHeaderValue = (value: string): boolean =>
  !/[^\t\u0020-\u007e\u0080-\u00ff]/.test(value.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, ""))

/** The model of the offline provider (docs/cli.md §10.1). */
export const OFFLINE_MODEL = "maka-offline"

/**
 * The provider of docs/cli.md §10.1: offline unless a base URL is set; remote providers need base URL
 * and model. The offline provider refuses a `--model` other than its own and, chosen by name, a
 * `--base-url` (flags only: `MAKA_MODEL` and `MAKA_BASE_URL` may be set for other runs).
 */
export const provider = (values: Values, environment: Environment): ProviderSettings => {
  const baseUrl = values["base-url"] ?? nonEmpty(environment["MAKA_BASE_URL"])
  const model = values.model ?? nonEmpty(environment["MAKA_MODEL"])
  const chosen = values.provider ?? (baseUrl === undefined ? "offline" : "openai-compatible")
  const name = PROVIDERS.find((candidate) => candidate === chosen)
  if (name === undefined) throw new UsageError(`--provider must be one of ${PROVIDERS.join(", ")}, got '${chosen}'`)
  if (name === "offline") {
    // A flag the offline model cannot honour is refused rather than dropped: a run against the
    // built-in model where the user named a remote one would be a silent surprise.
    const modelFlag = values.model
    if (values.provider === "offline") {
      if (values["base-url"] !== undefined) throw new UsageError("--provider offline takes no --base-url: its server is built in")
      if (modelFlag !== undefined && modelFlag !== OFFLINE_MODEL) {
        throw new UsageError(`--provider offline runs the built-in model ${OFFLINE_MODEL}; --model ${modelFlag} needs --provider openai-compatible or anthropic`)
      }
    } else if (modelFlag !== undefined && modelFlag !== OFFLINE_MODEL) {
      throw new UsageError(
        `--model ${modelFlag} needs --base-url URL (or MAKA_BASE_URL): without one the provider is offline, whose model is ${OFFLINE_MODEL}`,
      )
    }
    return { provider: name }
  }
  if (baseUrl === undefined) throw new UsageError(`--provider ${name} needs --base-url or MAKA_BASE_URL`)
  // Named as given: the flag, or the variable it came from.
  const problem = baseUrlProblem(baseUrl, values["base-url"] === undefined ? "MAKA_BASE_URL" : "--base-url")
  if (problem !== undefined) throw new UsageError(problem)
  if (model === undefined) throw new UsageError(`--provider ${name} needs --model or MAKA_MODEL`)
  const apiKey = nonEmpty(environment["MAKA_API_KEY"])
  if (apiKey !== undefined && !isHeaderValue(apiKey)) {
    throw new UsageError(
      "MAKA_API_KEY holds a character an HTTP header cannot carry (a line break, NUL or another control character, or one beyond U+00FF)",
    )
  }
  return { provider: name, baseUrl, model, ...(apiKey === undefined ? {} : { apiKey }) }
}

export const toolLevel = (value: string | undefined): ToolLevel => {
  const wanted = value ?? defaults.tools
  const level = TOOL_LEVELS.find((candidate) => candidate === wanted)
  if (level === undefined) throw new UsageError(`--tools must be one of ${TOOL_LEVELS.join(", ")}, got '${wanted}'`)
  return level
}

export const requiredSession = (values: Values, command: CommandName): string => {
  const session = values.session
  if (session === undefined) throw new UsageError(`maka ${command} needs --session ID`)
  return session
}
