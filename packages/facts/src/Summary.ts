/**
 * The `sections_v1` continuation summary (docs/log-format.md §2.5): the template the model fills in, the
 * validator every adopted summary passes, the defects it reports, and `fromModelStep`, which turns a
 * completed summary request into validated text. Pure rules only; the compaction job lives in the engine.
 */
import { Result, Schema } from "effect"
import { utf8Length } from "./Canonical.ts"
import { scanSections } from "./internal/summary-scan.ts"
import { FOLD_FLOOR_INPUT_TOKENS, FOLD_FLOOR_OUTPUT_TOKENS, MAX_SUMMARY_BYTES } from "./Limits.ts"

export { FOLD_FLOOR_INPUT_TOKENS, FOLD_FLOOR_OUTPUT_TOKENS, MAX_SUMMARY_BYTES }

export const SUMMARY_FORMAT = "sections_v1" as const

export const SUMMARY_FORMAT_TEMPLATE: string = [
  "## Goal",
  "[What the user is trying to accomplish]",
  "",
  "## Progress",
  "### Done",
  "- [Completed work and changes]",
  "### In Progress",
  "- [Current work]",
  "",
  "## Key Decisions",
  "- **[Decision]**: [Brief rationale]",
  "",
  "## Next Steps",
  "1. [Ordered list of what should happen next]",
  "",
  "## Critical Context",
  '- [Files, commands/results, errors, anything needed to continue; or "(none)"]',
].join("\n")

export const REQUIRED_SECTIONS = ["## Goal", "## Progress", "## Next Steps", "## Critical Context"] as const

export const SummaryDefect = Schema.Literals([
  "empty_summary",
  "summary_too_large",
  "malformed_summary_missing_section",
  "malformed_summary_truncated",
  "malformed_summary_too_small_for_fold",
  "summary_contains_tool_content",
  "summary_has_invalid_finish_reason",
])
export type SummaryDefect = typeof SummaryDefect.Type

/** Only a malformed summary is worth a repair attempt (docs/engine.md §5.12); the others fail the job at once. */
export const isRepairable = (defect: SummaryDefect): boolean =>
  defect === "malformed_summary_missing_section" ||
  defect === "malformed_summary_truncated" ||
  defect === "malformed_summary_too_small_for_fold"

/** Token usage of the request that produced a first fold; an absent number is unknown. */
export interface SummaryUsage {
  readonly inputTokens?: number
  readonly outputTokens?: number
}

/** The parts of a `ModelStep` the summary reads; the real `ModelStep` is structurally assignable. */
export interface SummarySourceStep {
  readonly finishReason: string
  readonly usage: SummaryUsage
  readonly parts: ReadonlyArray<
    | { readonly kind: "text"; readonly textKind: "text" | "thinking"; readonly text: string }
    | { readonly kind: "tool_call" }
  >
}

const TEMPLATE_LINES: ReadonlySet<string> = new Set(SUMMARY_FORMAT_TEMPLATE.split("\n"))

const TRUNCATED_ENDINGS: ReadonlyArray<string> = ["...", ":", "：", ",", "，", "、", ";", "；", "…", "(", "（", "—"]

const isTooSmallForFold = (usage: SummaryUsage | undefined): boolean =>
  usage?.inputTokens !== undefined &&
  usage.outputTokens !== undefined &&
  usage.inputTokens > FOLD_FLOOR_INPUT_TOKENS &&
  usage.outputTokens < FOLD_FLOOR_OUTPUT_TOKENS

/**
 * Checks a summary in the order docs/log-format.md §2.5 fixes: size (before trimming), emptiness, the section scan,
 * truncation, then the fold floor when both usage numbers of a first fold are known. Succeeds with
 * the trimmed text, which is what a checkpoint stores.
 */
export const validateSummary = (text: string, initialUsage?: SummaryUsage): Result.Result<string, SummaryDefect> => {
  if (utf8Length(text) > MAX_SUMMARY_BYTES) return Result.fail("summary_too_large")
  const trimmed = text.trim()
  if (trimmed.length === 0) return Result.fail("empty_summary")
  const scan = scanSections(trimmed, { requiredHeadings: REQUIRED_SECTIONS, templateLines: TEMPLATE_LINES })
  if (!scan.hasEverySection) return Result.fail("malformed_summary_missing_section")
  if (scan.isFenceOpen || TRUNCATED_ENDINGS.some((ending) => trimmed.endsWith(ending))) {
    return Result.fail("malformed_summary_truncated")
  }
  if (isTooSmallForFold(initialUsage)) return Result.fail("malformed_summary_too_small_for_fold")
  return Result.succeed(trimmed)
}

/**
 * Reads the summary out of a completed summary request. The finish reason is checked before the
 * parts, so a step cut off at `length` while calling a tool reports the finish reason. The usage
 * floor applies only to a first fold (`initialFold`: no previous baseline to update).
 */
export const fromModelStep = (step: SummarySourceStep, initialFold: boolean): Result.Result<string, SummaryDefect> => {
  if (step.finishReason !== "stop") return Result.fail("summary_has_invalid_finish_reason")
  let text = ""
  for (const part of step.parts) {
    if (part.kind === "tool_call") return Result.fail("summary_contains_tool_content")
    if (part.textKind === "text") text += part.text
  }
  return validateSummary(text.trim(), initialFold ? step.usage : undefined)
}
