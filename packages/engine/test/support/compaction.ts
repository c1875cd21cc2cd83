/**
 * Helpers of the compaction suites: script entries routed by whether a request is a summary request
 * (its last user message ends with the attempt suffix), summaries in the `sections_v1` format, and
 * the prompt checks the scenarios share.
 */
import { Prompts, type Prompt } from "@maka/facts"
import { OpenAiSse, Respond, type ScriptedServer } from "@maka/testkit"

/** The text every summary attempt's instruction ends with, as it appears in a JSON request body. */
const SUMMARY_MARK = JSON.stringify(Prompts.COMPACTION_ATTEMPT_SUFFIX).slice(1, -1)

export const isSummaryRequest = (request: ScriptedServer.RecordedRequest): boolean => request.body.includes(SUMMARY_MARK)

/** The same for a request as the engine built it: its prompt ends with the attempt's instruction. */
export const isSummaryPrompt = (request: Prompt.ModelRequest): boolean => {
  const last = request.prompt[request.prompt.length - 1]
  return last?.role === "user" && typeof last.content === "string" && last.content.endsWith(Prompts.COMPACTION_ATTEMPT_SUFFIX)
}

/** Answers the next summary request. */
export const summaryEntry = (respond: Respond.Responder): ScriptedServer.ScriptEntry => ({ match: isSummaryRequest, respond })

/** A summary that streams the start of its Goal section (`## Goal` then `text`) and then stalls: it runs until drained. */
export const stalledSummary = (text: string): ScriptedServer.ScriptEntry =>
  summaryEntry(Respond.stallAfter([OpenAiSse.role(), OpenAiSse.text(`## Goal\n${text}`)]))

/** Answers the next main request. */
export const mainEntry = (respond: Respond.Responder): ScriptedServer.ScriptEntry => ({
  match: (request) => !isSummaryRequest(request),
  respond,
})

/** A complete summary whose Critical Context carries `marker`. */
export const summaryText = (marker: string): string =>
  [
    "## Goal",
    "Finish the user's task.",
    "",
    "## Progress",
    "### Done",
    "- Read the conversation",
    "### In Progress",
    "- Continuing the task",
    "",
    "## Key Decisions",
    "- **Summarise**: the history was long",
    "",
    "## Next Steps",
    "1. Answer the next question",
    "",
    "## Critical Context",
    `- ${marker}`,
  ].join("\n")

/** A summary without `## Next Steps`: malformed, repairable. */
export const summaryWithoutNextSteps = (): string =>
  ["## Goal", "Finish the task.", "", "## Progress", "- Read it", "", "## Critical Context", "- none of note"].join("\n")

export const usage = (input: number, output = 5) => ({ prompt_tokens: input, completion_tokens: output, total_tokens: input + output })

/** The SSE steps of a summary answer with `text`. */
export const summaryAnswerSteps = (text: string, finishReason = "stop") =>
  OpenAiSse.response({ text: [text], finishReason, usage: usage(100, 50) })

/** A summary answer with `text`. */
export const summaryAnswer = (text: string, finishReason = "stop") => Respond.sse(summaryAnswerSteps(text, finishReason))

/** A plain text answer, with the prompt usage the provider reports. */
export const answer = (text: string, input = 10) => Respond.sse(OpenAiSse.response({ text: [text], usage: usage(input) }))

/** One tool call of `echo`, with the prompt usage the provider reports. */
export const echoCall = (id: string, value: string, input = 10) =>
  Respond.sse(OpenAiSse.response({ toolCalls: [{ id, name: "echo", arguments: [JSON.stringify({ value })] }], usage: usage(input) }))

/** The provider's context-overflow refusal, before any output. */
export const overflow = () =>
  Respond.json(400, { error: { message: "This model's maximum context length is exceeded.", type: "invalid_request_error", code: "context_length_exceeded" } })

export interface WireRequest {
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content?: unknown }>
  readonly tools?: ReadonlyArray<unknown>
  readonly max_tokens?: number
  readonly max_completion_tokens?: number
}

export const wire = (request: ScriptedServer.RecordedRequest): WireRequest => request.json as WireRequest

/** The text of a wire message's content (a string, or the text parts joined). */
export const contentText = (content: unknown): string => {
  if (typeof content === "string") return content
  if (Array.isArray(content)) {
    return content.map((part) => (typeof part === "object" && part !== null && "text" in part ? String(part.text) : "")).join("")
  }
  return ""
}
