/**
 * Commit faults for the engine's refusal suites: a wrapper around the real `EventLog` that fails
 * one chosen commit (or every commit from it on, until healed), and the scripted three-step tool
 * loop those suites drive. A commit is named by its last fact: `kind#n` (the n-th commit that
 * ends with `kind`; a request commit ends with its `model_requested`, whatever settlements and
 * steering ride it), and `model_observed@s` for the first observation commit of the s-th request.
 */
import type { EventWrite } from "@maka/facts"
import { EventLogError, type EventLog } from "@maka/event-log"
import { OpenAiSse, Respond, type ScriptedServer } from "@maka/testkit"
import { Effect } from "effect"
import { echoCall, isSummaryRequest, mainEntry, summaryAnswer, summaryText } from "./compaction.ts"
import { setup } from "./setup.ts"

export type FaultMode =
  /** The commit is refused: nothing is written. */
  | "refuse"
  /** The commit lands, but its caller is told the outcome is unknown. */
  | "unknown-landed"
  /** Nothing is written, and the caller is told the outcome is unknown. */
  | "unknown-lost"
  /** The named commit and every one after it fail (a full disk) until `heal()`. */
  | "outage"

export interface Faulty {
  readonly log: EventLog.EventLogShape
  /** The labels of every commit the wrapper saw, in order. */
  readonly labels: Array<string>
  /** Whether the fault fired. */
  readonly fired: () => boolean
  /** Ends an outage: later commits go through. */
  readonly heal: () => void
}

/** A refused commit is a `Database` error (nothing written); an uncertain one `OutcomeUnknown`. */
const failure = (mode: "refuse" | "unknown") =>
  mode === "refuse"
    ? EventLogError.make({ _tag: "Database", message: "disk I/O error (injected)" })
    : EventLogError.make({ _tag: "OutcomeUnknown", message: "the connection dropped during COMMIT (injected)" })

/** Wraps `log`; `target` names the commit to fail (`undefined`: never fail, only label). */
export const faulty = (
  log: EventLog.EventLogShape,
  target: string | undefined,
  mode: FaultMode,
): Faulty => {
  const labels: Array<string> = []
  const counts = new Map<string, number>()
  let requests = 0
  let observedStep = 0
  let fired = false
  let outage = false
  const labelOf = (writes: ReadonlyArray<EventWrite.EventWrite>, completed: boolean): string => {
    // The engine's only completed batch is a request built inside its commit.
    const kind = completed ? "model_requested" : (writes[writes.length - 1]?.event.fact.kind ?? "empty")
    if (kind === "model_requested") requests++
    if (kind === "model_observed") {
      if (observedStep === requests) return "model_observed@later"
      observedStep = requests
      return `model_observed@${requests}`
    }
    const count = (counts.get(kind) ?? 0) + 1
    counts.set(kind, count)
    return `${kind}#${count}`
  }
  const appendBatch: EventLog.EventLogShape["appendBatch"] = (writes, complete) =>
    Effect.suspend(() => {
      const label = labelOf(writes, complete !== undefined)
      labels.push(label)
      if (outage) return Effect.fail(failure("refuse"))
      if (label !== target || fired) return log.appendBatch(writes, complete)
      fired = true
      switch (mode) {
        case "refuse":
          return Effect.fail(failure("refuse"))
        case "unknown-lost":
          return Effect.fail(failure("unknown"))
        case "unknown-landed":
          return Effect.flatMap(log.appendBatch(writes, complete), () => Effect.fail(failure("unknown")))
        case "outage":
          outage = true
          return Effect.fail(failure("refuse"))
      }
    })
  return {
    log: { ...log, appendBatch, append: (write) => Effect.map(appendBatch([write]), (sequences) => sequences[0]!) },
    labels,
    fired: () => fired,
    heal: () => {
      outage = false
    },
  }
}


const lastMessage = (request: ScriptedServer.RecordedRequest) => {
  const messages = (request.json as { readonly messages?: ReadonlyArray<{ readonly role: string; readonly content?: unknown }> })
    .messages
  return messages?.[messages.length - 1]
}

const call = (id: string, value: string) => ({ id, name: "echo", arguments: [`{"value":"${value}"}`] })

/**
 * The three-step tool loop, routed on the last message of each request so that a run cut short
 * leaves nothing queued: "Loop." calls `echo a`; its result calls `echo b` and `echo c`; the result
 * of `c` (or its rejection) gets the answer. Any other last user message gets "ok".
 */
export const toolLoop: ReadonlyArray<ScriptedServer.ScriptEntry> = [
  {
    match: (request) => lastMessage(request)?.content === "Loop.",
    respond: Respond.sse(OpenAiSse.response({ toolCalls: [call("call-a", "a")] })),
    repeat: true,
  },
  {
    match: (request) => lastMessage(request)?.role === "tool" && lastMessage(request)?.content === "echo: a",
    respond: Respond.sse(OpenAiSse.response({ text: ["Two ", "more."], toolCalls: [call("call-b", "b"), call("call-c", "c")] })),
    repeat: true,
  },
  {
    match: (request) => lastMessage(request)?.role === "tool",
    respond: Respond.sse(OpenAiSse.response({ text: ["All ", "done."] })),
    repeat: true,
  },
  {
    match: (request) => lastMessage(request)?.role === "user",
    respond: Respond.sse(OpenAiSse.response({ text: ["ok"] })),
    repeat: true,
  },
]

/**
 * A set-up whose first main step calls `echo` and reports a prompt at the declared window (6,000
 * tokens, for runs that declare it), so a summary is due, and made in the background (two model
 * slots), before the next request: the summary never answers, so the step boundary or the run's end
 * drains it, and that drain's commit (`model_interrupted#1`, which carries what the run carried)
 * fails as `mode` says. `after` answers the main requests after the first.
 */
export const drainedSummaryFaulted = (mode: FaultMode, after: ReadonlyArray<Respond.Responder>) =>
  Effect.gen(function* () {
    let faults: Faulty | undefined
    const context = yield* setup(
      {
        script: [
          { match: isSummaryRequest, respond: Respond.hold(Respond.gate(), summaryAnswer(summaryText("never"))) },
          mainEntry(echoCall("call-1", "a", 6_000)),
          ...after.map(mainEntry),
        ],
      },
      undefined,
      { concurrency: 2 },
      {
        wrapLog: (log) => {
          faults = faulty(log, "model_interrupted#1", mode)
          return faults.log
        },
      },
    )
    return { context, faults: faults! }
  })
