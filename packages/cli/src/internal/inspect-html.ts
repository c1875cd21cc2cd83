/**
 * `maka inspect --html FILE`: one self-contained page (inline styles, no script, nothing fetched)
 * with the session's timeline, the context size per step, and each main step's exact input (rebuilt
 * from the log and checked against its `inputDigest`: the messages it shares with the step before
 * it by reference, the others in full) and output.
 */
import type { Event, Model, Prompt } from "@maka/facts"
import { rebuildInput, timeline, type RebuiltInput, type StepSource } from "./inspect.ts"

const escape = (text: string): string =>
  text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#39;")

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

/** How many leading messages `prompt` shares with `previous`: the same message objects, in order. */
const sharedPrefix = (prompt: Prompt.Prompt, previous: Prompt.Prompt | undefined): number => {
  if (previous === undefined) return 0
  const length = Math.min(prompt.length, previous.length)
  let shared = 0
  while (shared < length && prompt[shared] === previous[shared]) shared++
  return shared
}

/**
 * A step's input messages: those it shares with the step before it (the same messages, in the same
 * order: rebuilt from the same events of the log) by reference to that step, the others in full. A
 * session's page then grows with its messages, not with its steps times its messages.
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

/** The page of a session's events. */
/**
 * The page's `generator`: `maka inspect --html` overwrites an existing file only when it names this
 * generator (a page it wrote before), never a log or any other file (docs/cli.md §10.1).
 */
export const GENERATOR = "maka inspect"

/** Whether `head` (the first bytes of an existing file) is a page `inspectHtml` wrote. */
export const isInspectPage = (head: string): boolean =>
  head.startsWith("<!doctype html>") && head.includes(`<meta name="generator" content="${GENERATOR}">`)

/**
 * The page; `sources` holds each main step's source as the log re-read it (in step order), or why
 * it could not.
 */
export const inspectHtml = (sessionId: string, events: ReadonlyArray<Event.StoredEvent>, sources: ReadonlyArray<StepSource>): string => {
  const mainRequests = events.filter((stored) => stored.event.fact.kind === "model_requested" && stored.event.fact.purpose === "main")
  const outputs = new Map<string, Model.ModelStep>()
  for (const stored of events) if (stored.event.fact.kind === "model_completed") outputs.set(stored.event.fact.stepId, stored.event.fact.output)
  const steps = mainRequests.map((stored, index) => {
    const request = stored.event.fact
    const stepId = request.kind === "model_requested" ? request.stepId : ""
    const output = outputs.get(stepId)
    const source = sources[index]
    const rebuilt: RebuiltInput | { readonly unreadable: string } =
      source === undefined ? { unreadable: "not read" } : "unreadable" in source ? source : rebuildInput(events, stored, source)
    return { number: index + 1, stored, rebuilt, output }
  })
  // The input of the step before `index`, when it was rebuilt.
  const previousInput = (index: number) => {
    const previous = steps[index - 1]
    return previous === undefined || "unreadable" in previous.rebuilt ? undefined : { number: previous.number, prompt: previous.rebuilt.prompt }
  }
  const largest = Math.max(1, ...steps.map((step) => step.output?.usage.inputTokens ?? 0))
  const sizeRows = steps
    .map((step) => {
      const tokens = step.output?.usage.inputTokens
      const width = tokens === undefined ? 0 : Math.max(1, Math.round((tokens / largest) * 100))
      const messages = "unreadable" in step.rebuilt ? "source not readable" : `${step.rebuilt.prompt.length} messages`
      return `<tr><td>step ${step.number}</td><td style="width:30rem"><div class="bar" style="width:${width}%"></div></td><td>${tokens ?? "?"} tokens in, ${messages}</td></tr>`
    })
    .join("\n")
  const stepSections = steps
    .map((step, index) => {
      const output =
        step.output === undefined
          ? "<p>No output: the request did not complete.</p>"
          : `<pre>${escape(
              step.output.parts
                .map((part) => (part.kind === "tool_call" ? `call ${part.name} ${JSON.stringify(part.input)}` : part.text))
                .join("\n"),
            )}</pre><p>finish ${escape(step.output.finishReason)}</p>`
      const rebuilt = step.rebuilt
      if ("unreadable" in rebuilt) {
        return `<details id="step-${step.number}"><summary>Step ${step.number} — source not readable</summary>
<p><span class="bad">the source of this step cannot be re-read from the log: ${escape(rebuilt.unreadable)}</span></p>
<h3>Output</h3>
${output}
</details>`
      }
      const request = step.stored.event.fact
      const digest = request.kind === "model_requested" ? request.inputDigest : ""
      const check = rebuilt.matches
        ? `<span class="ok">input digest matches (${escape(digest)})</span>`
        : `<span class="bad">input digest differs: recorded ${escape(digest)}, rebuilt ${escape(rebuilt.digest)}</span>`
      return `<details id="step-${step.number}"><summary>Step ${step.number} — ${rebuilt.prompt.length} messages, tools ${escape(
        rebuilt.tools.map((tool) => tool.name).join(", ") || "none",
      )}</summary>
<p>${check}; max output tokens ${rebuilt.maxOutputTokens}</p>
<h3>Input</h3>
${inputHtml(rebuilt.prompt, previousInput(index))}
<h3>Output</h3>
${output}
</details>`
    })
    .join("\n")
  return `<!doctype html>
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
<p>${events.length} events, ${steps.length} model steps.</p>
<h2>Timeline</h2>
<ol class="timeline">
${timeline(events)
  .map((line) => `<li>${escape(line)}</li>`)
  .join("\n")}
</ol>
<h2>Context size per step</h2>
<table class="sizes">
${sizeRows}
</table>
<h2>Steps</h2>
${stepSections}
</body>
</html>
`
}
