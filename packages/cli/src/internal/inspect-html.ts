/**
 * `maka inspect --html FILE`: one self-contained page (inline styles, no script, nothing fetched)
 * with the session's timeline, the context size per step, and each main step's exact input (rebuilt
 * from the log and checked against its `inputDigest`: the messages it shares with the step before
 * it by reference, the others in full) and output.
 */
import { Canonical, type Event, type Prompt } from "@maka/facts"
import { PromptBuilder } from "@maka/engine"
import { rebuildInput, UNCHECKED_TOOLS, type RebuiltInput, type SessionView, type StepSource } from "./inspect.ts"
import { terminalSafe } from "./terminal.ts"

/**
 * Text as the page shows it: HTML-escaped, with the characters a terminal would act on, or that
 * reorder what follows them, as the visible escapes a terminal shows (docs/cli.md §10.1 "Output").
 */
const escape = (text: string): string =>
  terminalSafe(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#39;")

const STYLE = `
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; padding: 0 1rem; color: #1d1d1f; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
pre, code { font: 12px/1.4 ui-monospace, monospace; }
pre { background: #f5f5f7; padding: .6rem .8rem; border-radius: 6px; white-space: pre-wrap; word-break: break-word; }
ol.timeline { list-style: none; padding: 0; font: 12px/1.5 ui-monospace, monospace; }
ol.timeline li { padding: 1px 0; border-bottom: 1px solid #eee; white-space: pre-wrap; }
table.sizes td { padding: 2px 6px; vertical-align: middle; } .bar { background: #4a7bd0; height: .8rem; border-radius: 2px; }
details { border: 1px solid #ddd; border-radius: 6px; margin: .6rem 0; padding: .4rem .8rem; }
summary { cursor: pointer; font-weight: 600; } .ok { color: #137333; } .bad { color: #b3261e; }
.role { font-weight: 600; margin-top: .6rem; }
`

const messageHtml = (message: Prompt.PromptMessage, number: number): string => {
  const body = (() => {
    switch (message.role) {
      case "system":
      case "user":
        return message.content
      case "assistant":
        return message.parts
          .map((part) =>
            part.kind === "tool_call" ? `call ${part.toolName} ${JSON.stringify(part.input)} (${part.toolCallId})` : part.kind === "thinking" ? `(thinking) ${part.text}` : part.text,
          )
          .join("\n")
      case "tool":
        return message.results
          .map((result) => `${result.toolName} (${result.toolCallId}) → ${typeof result.output.value === "string" ? result.output.value : JSON.stringify(result.output.value)}`)
          .join("\n")
    }
  })()
  return `<div class="role">${number}. ${escape(message.role)}</div><pre>${escape(body)}</pre>`
}

/** Whether two messages are the same: the same object, or the same canonical JSON. */
const sameMessage = (left: Prompt.PromptMessage, right: Prompt.PromptMessage): boolean =>
  left === right || Canonical.stringify(left) === Canonical.stringify(right)

/** How many leading messages `prompt` shares with `previous`. */
const sharedPrefix = (prompt: Prompt.Prompt, previous: Prompt.Prompt | undefined): number => {
  if (previous === undefined) return 0
  const length = Math.min(prompt.length, previous.length)
  let shared = 0
  while (shared < length && sameMessage(prompt[shared]!, previous[shared]!)) shared++
  return shared
}

/**
 * A step's input messages: those it shares with the step before it (the same messages, in the same
 * order; the last step rebuilt, past one whose source is not readable) by reference to that step,
 * the others in full. A session's page then grows with its messages, not with its steps times its
 * messages.
 */
const inputHtml = (prompt: Prompt.Prompt, previous: { readonly number: number; readonly prompt: Prompt.Prompt } | undefined): string => {
  const shared = previous === undefined ? 0 : sharedPrefix(prompt, previous.prompt)
  const reference =
    shared === 0 || previous === undefined
      ? ""
      : `<p>Messages 1–${shared}: the same as messages 1–${shared} of <a href="#step-${previous.number}">step ${previous.number}</a>.</p>\n`
  return (
    reference +
    prompt
      .slice(shared)
      .map((message, index) => messageHtml(message, shared + index + 1))
      .join("\n")
  )
}

/**
 * The page's `generator`: `maka inspect --html` overwrites an existing file only when it names this
 * generator (a page it wrote before), never a log or any other file (docs/cli.md §10.1).
 */
export const GENERATOR = "maka inspect"

/** Whether `head` (the first bytes of an existing file) is a page `inspectHtml` wrote. */
export const isInspectPage = (head: string): boolean =>
  head.startsWith("<!doctype html>") && head.includes(`<meta name="generator" content="${GENERATOR}">`)

/** A page being written: the main steps are added in step order, then the page is finished. */
export interface InspectPage {
  /**
   * Adds the next main step: its request and its source as the log re-read it, or why it could
   * not. Only the step's section is kept (and its input until the next step is added), so the
   * sources of a long session need not be held all at once.
   */
  readonly step: (stored: Event.StoredEvent, source: StepSource) => void
  /** The page's HTML (before `pieces`, which drops each step's section as it gives it). */
  readonly finish: () => string
  /**
   * The page's HTML in pieces, for writing to a file: a page of a long session is larger than the
   * longest string V8 can hold (about 512 MiB). Each step's section is dropped once given.
   */
  readonly pieces: () => Iterable<string>
}

/** The page of a session, from what `maka inspect` kept of its events. */
export const inspectPage = (sessionId: string, session: SessionView): InspectPage => {
  const { outputs, openings, observed } = session
  let largest = 1
  for (const stored of session.mainRequests) {
    const fact = stored.event.fact
    if (fact.kind === "model_requested") largest = Math.max(largest, outputs.get(fact.stepId)?.usage.inputTokens ?? 0)
  }
  const sizeRows: Array<string> = []
  const stepSections: Array<string> = []
  let previous: { readonly number: number; readonly prompt: Prompt.Prompt } | undefined
  // The steps' sources come in log order: each one's projection extends the one before it.
  const projector = new PromptBuilder.SourceProjector()
  const step = (stored: Event.StoredEvent, source: StepSource): void => {
    const number = stepSections.length + 1
    const request = stored.event.fact
    const stepOutput = request.kind === "model_requested" ? outputs.get(request.stepId) : undefined
    const rebuilt: RebuiltInput | { readonly unreadable: string } = "unreadable" in source ? source : rebuildInput(openings, stored, source, projector)
    const tokens = stepOutput?.usage.inputTokens
    const width = tokens === undefined ? 0 : Math.max(1, Math.round((tokens / largest) * 100))
    const messages = "unreadable" in rebuilt ? "source not readable" : `${rebuilt.prompt.length} messages`
    sizeRows.push(
      `<tr><td>step ${number}</td><td style="width:30rem"><div class="bar" style="width:${width}%"></div></td><td>${tokens ?? "?"} tokens in, ${messages}</td></tr>`,
    )
    const shown = request.kind === "model_requested" ? observed.get(request.stepId) : undefined
    const output =
      stepOutput === undefined
        ? shown === undefined
          ? "<p>No output: the request did not complete.</p>"
          : `<p>No output: the request did not complete. The text it showed before it ended (never part of the history):</p><pre>${escape(shown)}</pre>`
        : `<pre>${escape(
            stepOutput.parts
              .map((part) =>
                part.kind === "tool_call" ? `call ${part.name} ${JSON.stringify(part.input)}` : part.textKind === "thinking" ? `(thinking) ${part.text}` : part.text,
              )
              .join("\n"),
          )}</pre><p>finish ${escape(stepOutput.finishReason)}</p>`
    if ("unreadable" in rebuilt) {
      stepSections.push(`<details id="step-${number}"><summary>Step ${number} — source not readable</summary>
<p><span class="bad">the source of this step cannot be re-read from the log: ${escape(rebuilt.unreadable)}</span></p>
<h3>Output</h3>
${output}
</details>`)
      return
    }
    const digest = request.kind === "model_requested" ? request.inputDigest : ""
    const check = rebuilt.matches
      ? `<span class="ok">input digest matches (${escape(digest)})</span>`
      : `<span class="bad">input digest differs: recorded ${escape(digest)}, rebuilt ${escape(rebuilt.digest)}</span> (${escape(UNCHECKED_TOOLS)})`
    stepSections.push(`<details id="step-${number}"><summary>Step ${number} — ${rebuilt.prompt.length} messages, tools ${escape(
      rebuilt.tools.map((tool) => tool.name).join(", ") || "none",
    )}</summary>
<p>${check}; max output tokens ${rebuilt.maxOutputTokens}</p>
<h3>Input</h3>
${inputHtml(rebuilt.prompt, previous)}
<h3>Output</h3>
${output}
</details>`)
    previous = { number, prompt: rebuilt.prompt }
  }
  function* pieces(drop = true): Generator<string> {
    const steps = stepSections.length
    yield `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="generator" content="${GENERATOR}">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>maka inspect: ${escape(sessionId)}</title>
<style>${STYLE}</style>
</head>
<body>
<h1>Session ${escape(sessionId)}</h1>
<p>${session.count} events, ${steps} model steps.</p>
<h2>Timeline</h2>
<ol class="timeline">
`
    for (let index = 0; index < session.lines.length; index++) {
      yield `${index === 0 ? "" : "\n"}<li>${escape(session.lines[index]!)}</li>`
    }
    yield `
</ol>
<h2>Context size per step</h2>
<table class="sizes">
${sizeRows.join("\n")}
</table>
<h2>Steps</h2>
`
    for (let index = 0; index < stepSections.length; index++) {
      yield `${index === 0 ? "" : "\n"}${stepSections[index]!}`
      if (drop) stepSections[index] = ""
    }
    yield `
</body>
</html>
`
  }
  return { step, finish: () => [...pieces(false)].join(""), pieces: () => pieces(true) }
}
