/**
 * The way out of the errors a new user meets first: a missing native SQLite build, an endpoint that
 * does not answer, a wrong key, a session whose earlier outcome is unknown. Each function returns the
 * sentence to add to an error's message, or `undefined` when the message needs none.
 */
import { EventLogError } from "@maka/event-log"
import type { ModelError } from "@maka/model"

export const NATIVE_BUILD_HINT =
  "better-sqlite3 has no native build for this Node.js (its install script was skipped, or built for another " +
  "Node.js): with pnpm run `pnpm approve-builds` (or install with `--allow-build=better-sqlite3`), then " +
  "`pnpm rebuild better-sqlite3`; with npm or yarn run `npm rebuild better-sqlite3`"

export const WRITER_BUSY_HINT =
  "another engine (in this process or another one, a `maka` command included) has the SQLite file open for writing; wait until it is closed, or use another file"

export const WRITER_LOST_HINT =
  "open the log again (a new engine, or the command run again): recovery seals what this one left open"

export const FILE_REPLACED_HINT =
  "keep the log where no tool or cleanup removes it (outside the workspace, or `--db`); a log restored to its path is opened again, and one opened there anew starts empty"

export const PRIOR_UNKNOWN_HINT =
  "to go on with a new message, start again with `allowPriorUnknown: true` (the model is told that the earlier outcome is unknown)"

/** The refusal of a run that already had `allowPriorUnknown`: it covers one case, and this is another. */
export const PRIOR_UNKNOWN_NOT_COVERED_HINT =
  "allowPriorUnknown only lets a message follow a run sealed `outcome_unknown`; this history holds another unresolved step: a run left open (a recovery seals it) or rows changed by hand (read the session's events to find it)"

export const SEALED_HINT =
  "the run was sealed by another engine while it was live (recovery: `recover()` or `maka recover` run beside it); its terminal is in the log"

export const NETWORK_HINT = "check that the server is running and that the provider's baseUrl is right"

export const AUTH_HINT = "check the provider's apiKey (and that it belongs to this baseUrl)"

export const MODEL_NOT_FOUND_HINT = "check the model name: the provider does not know it"

/** A 404 that names a model: OpenAI's `model_not_found`, Anthropic's `model: NAME`, "the model `NAME`". */
const NAMES_A_MODEL = /\bmodel_not_found\b|\bmodel: \S|\bmodel [`'"]/i

export const NOT_FOUND_HINT =
  "check the provider's baseUrl: an OpenAI-compatible one usually ends in /v1 (the adapter adds /chat/completions), an Anthropic one does not (the adapter adds /v1/messages)"

/** What `bindings` and Node say when better-sqlite3's `.node` file is absent or built for another Node. */
const NATIVE_BUILD_PATTERNS = [
  /Could not locate the bindings file/,
  /NODE_MODULE_VERSION/,
  /better_sqlite3\.node/,
  /ERR_DLOPEN_FAILED/,
]

const isNativeBuildMissing = (message: string): boolean => NATIVE_BUILD_PATTERNS.some((pattern) => pattern.test(message))

/** A log failure: `reason` is the `EventLogError` reason tag. */
export const forStore = (reason: string, message: string): string | undefined => {
  if (reason === "WriterBusy") {
    if (message.includes(EventLogError.FILE_REPLACED)) return FILE_REPLACED_HINT
    return message.includes(EventLogError.LEASE_LOST_MESSAGE) ? WRITER_LOST_HINT : WRITER_BUSY_HINT
  }
  if (isNativeBuildMissing(message)) return NATIVE_BUILD_HINT
  return undefined
}

/**
 * The message of a log failure with its way out: a missing native build leads with the fix (the
 * driver's own text lists every path it tried), the others end with it.
 */
export const storeMessage = (reason: string, message: string): string => {
  const hint = forStore(reason, message)
  return hint === NATIVE_BUILD_HINT ? `${hint}\n${message}` : append(message, hint)
}

/**
 * An admission refused over unsettled history; nothing when the message already names the way out:
 * `allowPriorUnknown`, `recover`, or a terminal of this engine's that is written once the log
 * accepts writes again (`allowPriorUnknown` is refused the same way meanwhile). A run that had
 * `allowPriorUnknown` is not told to start again with it.
 */
export const forReconciliation = (message: string, allowedPriorUnknown = false): string | undefined =>
  message.includes("allowPriorUnknown") || message.includes("recover") || message.includes("when the log accepts writes")
    ? undefined
    : allowedPriorUnknown
      ? PRIOR_UNKNOWN_NOT_COVERED_HINT
      : PRIOR_UNKNOWN_HINT

/** A model failure after its retries: unreachable endpoints and refused keys. */
export const forModel = (error: ModelError.ModelError): string | undefined => {
  const reason = error.reason
  if (reason._tag !== "Provider") return undefined
  if (reason.reason === "network") return NETWORK_HINT
  if (reason.reason === "auth") return AUTH_HINT
  // A 404 naming a model is about the model (`model_not_found`, Anthropic's `model: NAME`); any
  // other is about the address.
  if (reason.status === 404) return NAMES_A_MODEL.test(reason.message) ? MODEL_NOT_FOUND_HINT : NOT_FOUND_HINT
  return undefined
}

/** `message` followed by `hint`, once. */
export const append = (message: string, hint: string | undefined): string =>
  hint === undefined || message.includes(hint) ? message : `${message}; ${hint}`
