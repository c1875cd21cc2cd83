/**
 * Every fixed text a model reads or a caller matches on, as data: the compaction instructions
 * (docs/engine.md §5.12), the summary and steering messages (docs/engine.md §5.5), the prior-unknown notice (docs/engine.md §5.8), the
 * tool rejection and projection texts (docs/log-format.md §2.8), the archive reading instructions (docs/log-format.md §2.9) and the fixed
 * messages of a few failures. Builders here are tiny and pure; the engine decides when to use them.
 */
import { MAX_UNKNOWN_NOTICE_LINES } from "./Limits.ts"
import { SUMMARY_FORMAT_TEMPLATE, type SummaryDefect } from "./Summary.ts"

export { MAX_UNKNOWN_NOTICE_LINES }

// ---------------------------------------------------------------------------------------------
// Compaction (docs/engine.md §5.12)

export const COMPACTION_BASE_INSTRUCTION: string =
  "You are a context summarization assistant.\n" +
  "Read the conversation between a user and an AI assistant, then produce a structured summary another LLM will use to continue the same task.\n" +
  "Do NOT continue the conversation. Do NOT answer questions in it. ONLY output the structured summary.\n\n" +
  "Use this exact format:\n\n" +
  SUMMARY_FORMAT_TEMPLATE +
  "\n\nKeep each section concise. Preserve exact file paths, function names, commands, and error messages."

export const COMPACTION_ATTEMPT_SUFFIX =
  "\n\nNow write the structured summary of the conversation above. Output only the summary."

/** The user message that ends each summary attempt. */
export const compactionAttemptMessage = (instruction: string): string => instruction + COMPACTION_ATTEMPT_SUFFIX

/** The instruction after an attempt ended at the output limit. */
export const COMPACTION_LENGTH_RETRY_INSTRUCTION: string =
  COMPACTION_BASE_INSTRUCTION +
  "\n\nYour previous attempt was cut off at the output limit. Produce the same summary in well under half the length: keep every section, drop detail rather than sections."

/** The instruction after an attempt was rejected with a repairable defect. */
export const compactionRepairInstruction = (defect: SummaryDefect): string =>
  COMPACTION_BASE_INSTRUCTION +
  `\n\nA prior attempt was rejected as ${defect}.\n` +
  "Produce one complete replacement summary from the source conversation.\n" +
  "Every required section must appear in order with substantive content. Do not discuss the repair."

// ---------------------------------------------------------------------------------------------
// Summary and steering messages (docs/engine.md §5.5)

export const CONTINUATION_SUMMARY_PREFIX = "Continuation summary:\n"

/** The user message that carries the baseline summary in a main prompt. */
export const continuationSummaryMessage = (summary: string): string => CONTINUATION_SUMMARY_PREFIX + summary

export const PREVIOUS_CONTINUATION_SUMMARY_PREFIX = "Previous continuation summary:\n"
export const PREVIOUS_CONTINUATION_SUMMARY_SUFFIX = "\n\nUpdate it using the newer conversation events that follow."

/** The user message that carries the baseline summary in a summary prompt. */
export const previousContinuationSummaryMessage = (summary: string): string =>
  PREVIOUS_CONTINUATION_SUMMARY_PREFIX + summary + PREVIOUS_CONTINUATION_SUMMARY_SUFFIX

export const STEERING_OPEN = "<user_query>\n"
export const STEERING_CLOSE = "\n</user_query>"

/** The user message of a `message_steered` fact (Choice: no extra lead-in sentence). */
export const steeringMessage = (text: string): string => STEERING_OPEN + text + STEERING_CLOSE

/** The error text of a call dispatched in an invocation sealed `outcome_unknown` and never settled. */
export const OUTCOME_UNKNOWN_TOOL_TEXT =
  "outcome_unknown: this tool was dispatched but its result was never recorded; its effects may or may not have happened."

// ---------------------------------------------------------------------------------------------
// Prior unknown effects (docs/engine.md §5.8)

export const PRIOR_UNKNOWN_NOTICE_HEADER =
  "Prior execution was interrupted after these tools were dispatched. Their results were never recorded; effects may or may not have happened. Inspect current state before repeating any action. This is historical uncertainty, not a new tool result:"

export interface UnknownOperation {
  readonly name: string
  readonly operationId: string
}

/**
 * The notice for unknown prior dispatches, in the order given (log order), at most
 * `MAX_UNKNOWN_NOTICE_LINES` lines and a count of the rest. With no operations it is the header
 * alone; the engine treats an empty list as a missing tool (docs/engine.md §5.4 step 9) and never sends it.
 */
export const priorUnknownNotice = (operations: ReadonlyArray<UnknownOperation>): string => {
  const listed = operations
    .slice(0, MAX_UNKNOWN_NOTICE_LINES)
    .map((operation) => `\n- ${operation.name} (operation ${operation.operationId})`)
  const remaining = operations.length - listed.length
  const more = remaining > 0 ? `\n- and ${remaining} more unknown operations` : ""
  return PRIOR_UNKNOWN_NOTICE_HEADER + listed.join("") + more
}

/** The system message text: the prompt, then the notice after a blank line; either alone; or none. */
export const systemMessageWithNotice = (
  systemPrompt: string | undefined,
  notice: string | undefined,
): string | undefined => {
  if (systemPrompt === undefined) return notice
  if (notice === undefined) return systemPrompt
  return systemPrompt + "\n\n" + notice
}

// ---------------------------------------------------------------------------------------------
// Tool results (docs/log-format.md §2.8, §2.9, docs/tools.md §2.12, docs/engine.md §5.6)

/** What the model reads for a rejection whose kind carries no message of its own. */
export const TOOL_REJECTION_TEXT = Object.freeze({
  unavailable: "tool is unavailable",
  exclusive_conflict: "tool conflicts with exclusive step execution",
  cancelled: "tool cancelled before dispatch; tool was not executed",
} as const)

/** The `preparation_failed` message of local calls in a main output that ended at `length` (docs/engine.md §5.6). */
export const INCOMPLETE_OUTPUT_REJECTION_TEXT =
  "model output was incomplete; local tools from this response were not executed"

export const PROJECTION_FAILURE_TEXT =
  "The tool completed, but its model-visible result could not be projected safely."

export const ARCHIVE_READ_INSTRUCTIONS =
  "Read the page below; pass resourceRef and page.next to read_tool_result to continue. The address is a session resource, not a workspace file."

/** The known failure of a dispatched call whose cancellation arrived before its effect started (docs/tools.md §2.12). */
export const CANCELLED_BEFORE_EFFECT = "cancelled before effect"

// ---------------------------------------------------------------------------------------------
// Fixed failure messages callers match on

export const MODEL_IDLE_TIMEOUT_MESSAGE = "model stream idle timeout exceeded"
export const SESSION_RESERVED_MESSAGE = "Session is reserved for its sealed handoff successor"
export const UNSAFE_HISTORY_MESSAGE = "Session contains unsealed or unresolved prior execution"
export const CURRENT_NOT_LIVE_MESSAGE = "current invocation is not live"
