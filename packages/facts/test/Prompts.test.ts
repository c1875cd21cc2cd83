import { assert, describe, it } from "@effect/vitest"
import {
  ARCHIVE_READ_INSTRUCTIONS,
  CANCELLED_BEFORE_EFFECT,
  COMPACTION_ATTEMPT_SUFFIX,
  COMPACTION_BASE_INSTRUCTION,
  COMPACTION_LENGTH_RETRY_INSTRUCTION,
  compactionAttemptMessage,
  compactionRepairInstruction,
  CONTINUATION_SUMMARY_PREFIX,
  continuationSummaryMessage,
  CURRENT_NOT_LIVE_MESSAGE,
  INCOMPLETE_OUTPUT_REJECTION_TEXT,
  MAX_UNKNOWN_NOTICE_LINES,
  MODEL_IDLE_TIMEOUT_MESSAGE,
  OUTCOME_UNKNOWN_TOOL_TEXT,
  previousContinuationSummaryMessage,
  PRIOR_UNKNOWN_NOTICE_HEADER,
  priorUnknownNotice,
  PROJECTION_FAILURE_TEXT,
  SESSION_RESERVED_MESSAGE,
  steeringMessage,
  systemMessageWithNotice,
  TOOL_REJECTION_TEXT,
  UNSAFE_HISTORY_MESSAGE,
} from "../src/Prompts.ts"
import { SUMMARY_FORMAT_TEMPLATE } from "../src/Summary.ts"

// The spec's JSON-string forms, decoded here so escapes are checked independently of the source.
const specificationText = (json: string): string => {
  const decoded: unknown = JSON.parse(json)
  assert.isString(decoded)
  return String(decoded)
}

describe("compaction instructions", () => {
  it("embeds the template verbatim in the base instruction", () => {
    assert.isTrue(COMPACTION_BASE_INSTRUCTION.startsWith("You are a context summarization assistant.\n"))
    assert.include(COMPACTION_BASE_INSTRUCTION, `Use this exact format:\n\n${SUMMARY_FORMAT_TEMPLATE}\n\nKeep each section`)
    assert.strictEqual(
      COMPACTION_BASE_INSTRUCTION,
      specificationText(
        String.raw`"You are a context summarization assistant.\nRead the conversation between a user and an AI assistant, then produce a structured summary another LLM will use to continue the same task.\nDo NOT continue the conversation. Do NOT answer questions in it. ONLY output the structured summary.\n\nUse this exact format:\n\n"`,
      ) +
        SUMMARY_FORMAT_TEMPLATE +
        specificationText(
          String.raw`"\n\nKeep each section concise. Preserve exact file paths, function names, commands, and error messages."`,
        ),
    )
    assert.isTrue(COMPACTION_BASE_INSTRUCTION.endsWith("commands, and error messages."))
  })

  it("ends every attempt with the attempt suffix", () => {
    assert.strictEqual(
      COMPACTION_ATTEMPT_SUFFIX,
      "\n\nNow write the structured summary of the conversation above. Output only the summary.",
    )
    assert.strictEqual(compactionAttemptMessage("base"), "base" + COMPACTION_ATTEMPT_SUFFIX)
  })

  it("asks for a shorter summary after a length stop", () => {
    assert.strictEqual(
      COMPACTION_LENGTH_RETRY_INSTRUCTION,
      COMPACTION_BASE_INSTRUCTION +
        "\n\nYour previous attempt was cut off at the output limit. Produce the same summary in well under half the length: keep every section, drop detail rather than sections.",
    )
  })

  it("names the defect in the repair instruction", () => {
    assert.strictEqual(
      compactionRepairInstruction("malformed_summary_truncated"),
      COMPACTION_BASE_INSTRUCTION +
        "\n\nA prior attempt was rejected as malformed_summary_truncated.\nProduce one complete replacement summary from the source conversation.\nEvery required section must appear in order with substantive content. Do not discuss the repair.",
    )
  })
})

describe("summary and steering messages", () => {
  it("prefixes the baseline summary of a main prompt", () => {
    assert.strictEqual(CONTINUATION_SUMMARY_PREFIX, "Continuation summary:\n")
    assert.strictEqual(continuationSummaryMessage("## Goal\nx"), "Continuation summary:\n## Goal\nx")
  })

  it("wraps the baseline summary of a summary prompt", () => {
    assert.strictEqual(
      previousContinuationSummaryMessage("S"),
      "Previous continuation summary:\nS\n\nUpdate it using the newer conversation events that follow.",
    )
  })

  it("wraps steering text in user_query tags without a lead-in", () => {
    assert.strictEqual(steeringMessage("stop after tests"), "<user_query>\nstop after tests\n</user_query>")
  })
})

describe("prior unknown notice", () => {
  const operations = (count: number) =>
    Array.from({ length: count }, (_, index) => ({ name: `tool_${index}`, operationId: `step:${index}` }))

  it("pins the header", () => {
    assert.strictEqual(
      PRIOR_UNKNOWN_NOTICE_HEADER,
      "Prior execution was interrupted after these tools were dispatched. Their results were never recorded; effects may or may not have happened. Inspect current state before repeating any action. This is historical uncertainty, not a new tool result:",
    )
    assert.strictEqual(MAX_UNKNOWN_NOTICE_LINES, 64)
  })

  it("is the header alone with no operations", () => {
    assert.strictEqual(priorUnknownNotice([]), PRIOR_UNKNOWN_NOTICE_HEADER)
  })

  it("lists one operation", () => {
    assert.strictEqual(
      priorUnknownNotice([{ name: "write_file", operationId: "s1:c1" }]),
      PRIOR_UNKNOWN_NOTICE_HEADER + "\n- write_file (operation s1:c1)",
    )
  })

  it("lists 64 operations without a remainder line", () => {
    const notice = priorUnknownNotice(operations(64))
    const lines = notice.split("\n")
    assert.strictEqual(lines.length, 65)
    assert.strictEqual(lines[1], "- tool_0 (operation step:0)")
    assert.strictEqual(lines[64], "- tool_63 (operation step:63)")
    assert.notInclude(notice, "more unknown operations")
  })

  it("lists the first 64 of 65 operations and counts the rest", () => {
    const notice = priorUnknownNotice(operations(65))
    const lines = notice.split("\n")
    assert.strictEqual(lines.length, 66)
    assert.strictEqual(lines[64], "- tool_63 (operation step:63)")
    assert.strictEqual(lines[65], "- and 1 more unknown operations")
    assert.notInclude(notice, "tool_64")
  })

  it("joins the system prompt and the notice with a blank line", () => {
    assert.strictEqual(systemMessageWithNotice("You are helpful.", "NOTICE"), "You are helpful.\n\nNOTICE")
    assert.strictEqual(systemMessageWithNotice(undefined, "NOTICE"), "NOTICE")
    assert.strictEqual(systemMessageWithNotice("You are helpful.", undefined), "You are helpful.")
    assert.isUndefined(systemMessageWithNotice(undefined, undefined))
  })
})

describe("fixed texts", () => {
  it("pins the tool result texts the model reads", () => {
    assert.strictEqual(
      OUTCOME_UNKNOWN_TOOL_TEXT,
      "outcome_unknown: this tool was dispatched but its result was never recorded; its effects may or may not have happened.",
    )
    assert.strictEqual(PROJECTION_FAILURE_TEXT, "The tool completed, but its model-visible result could not be projected safely.")
    assert.strictEqual(
      ARCHIVE_READ_INSTRUCTIONS,
      "Read the page below; pass resourceRef and page.next to read_tool_result to continue. The address is a session resource, not a workspace file.",
    )
    assert.deepStrictEqual(TOOL_REJECTION_TEXT, {
      unavailable: "tool is unavailable",
      exclusive_conflict: "tool conflicts with exclusive step execution",
      cancelled: "tool cancelled before dispatch; tool was not executed",
    })
    assert.isTrue(Object.isFrozen(TOOL_REJECTION_TEXT))
    assert.strictEqual(
      INCOMPLETE_OUTPUT_REJECTION_TEXT,
      "model output was incomplete; local tools from this response were not executed",
    )
    assert.strictEqual(CANCELLED_BEFORE_EFFECT, "cancelled before effect")
  })

  it("pins the fixed failure messages", () => {
    assert.strictEqual(MODEL_IDLE_TIMEOUT_MESSAGE, "model stream idle timeout exceeded")
    assert.strictEqual(SESSION_RESERVED_MESSAGE, "Session is reserved for its sealed handoff successor")
    assert.strictEqual(UNSAFE_HISTORY_MESSAGE, "Session contains unsealed or unresolved prior execution")
    assert.strictEqual(CURRENT_NOT_LIVE_MESSAGE, "current invocation is not live")
  })
})
