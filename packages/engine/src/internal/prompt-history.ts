/**
 * The history projection of docs/engine.md §5.5: the anchor and tail of a `ModelContextSource` as
 * prompt messages. Openings and steering become user messages, each main completion an assistant
 * message followed by one tool message with the results of its local calls in call order; requests,
 * observations, interruptions and dispatches contribute nothing by themselves.
 */
import { Canonical, Model, Prompts, ToolCall, type Event, type Fact, type Prompt } from "@maka/facts"
import type { EventLog } from "@maka/event-log"

type TailItem = EventLog.TailItem

/** What the anchor and tail project to, plus the local calls that have no result yet. */
export interface ProjectedHistory {
  readonly messages: ReadonlyArray<Prompt.PromptMessage>
  /** Operation ids of local calls with no settlement, rejection or known-unknown dispatch, in prompt order. */
  readonly unresolvedOperations: ReadonlyArray<string>
}

/** The results of the history, keyed by operation id, and what is needed to read them. */
interface ResultIndex {
  /** Settled and archived outputs; a settlement always wins over anything else for its call. */
  readonly settled: Map<string, Prompt.ToolResultOutput>
  readonly rejected: Map<string, Prompt.ToolResultOutput>
  /** Dispatched operations and the invocation that dispatched them. */
  readonly dispatched: Map<string, string>
  /** Invocations sealed `failed {outcome_unknown}`. */
  readonly outcomeUnknown: Set<string>
  /** Steps requested with purpose `summary`; the store leaves them out already, this is a second guard. */
  readonly summarySteps: Set<string>
}

/**
 * Projections are memoised by the identity of the stored facts they come from: a live context keeps
 * its events step after step, so each step projects to the same message objects, and the request
 * digest reuses their canonical fragments (docs/architecture.md §12). Facts are never mutated.
 */
const memo = <K extends object, V>(compute: (key: K) => V): ((key: K) => V) => {
  const cache = new WeakMap<K, { readonly value: V }>()
  return (key) => {
    const hit = cache.get(key)
    if (hit !== undefined) return hit.value
    const value = compute(key)
    cache.set(key, { value })
    return value
  }
}

/** The model-visible output of a settled outcome. */
export const settledOutput = (outcome: ToolCall.ToolOutcome): Prompt.ToolResultOutput => {
  if (outcome.kind === "failed") return { type: "error-text", value: outcome.message }
  const projection = outcome.projection
  switch (projection.kind) {
    case "text":
      return { type: "text", value: projection.text }
    case "json":
      return { type: "json", value: projection.value }
    case "failure":
      return { type: "error-text", value: Prompts.PROJECTION_FAILURE_TEXT }
  }
}

const settledOutputOf = memo(settledOutput)

/** The model-visible output of an archived replacement: its model value, or that value's JSON as an error. */
const archivedOutput = memo(
  (item: Extract<TailItem, { readonly kind: "archived" }>): Prompt.ToolResultOutput =>
    item.isError
      ? { type: "error-text", value: Canonical.stringify(item.replacement) }
      : { type: "json", value: item.replacement },
)

const rejectedOutput = memo(
  (fact: Fact.ToolRejected): Prompt.ToolResultOutput => ({ type: "error-text", value: ToolCall.rejectionText(fact.reason) }),
)

const OUTCOME_UNKNOWN_OUTPUT: Prompt.ToolResultOutput = Object.freeze({
  type: "error-text",
  value: Prompts.OUTCOME_UNKNOWN_TOOL_TEXT,
})

/** The operation id a rejection or dispatch names: its provider call identity, or none for standalone calls. */
const providerOperation = (call: ToolCall.ToolCallIdentity): string | undefined =>
  call.origin.kind === "provider" ? ToolCall.providerOperationId(call.origin.stepId, call.toolCallId) : undefined

const emptyIndex = (): ResultIndex => ({
  settled: new Map(),
  rejected: new Map(),
  dispatched: new Map(),
  outcomeUnknown: new Set(),
  summarySteps: new Set(),
})

/** Adds what one item says about results to `index`. */
const indexItem = (index: ResultIndex, item: TailItem): void => {
  if (item.kind === "archived") {
    index.settled.set(item.operationId, archivedOutput(item))
    return
  }
  const event = item.stored.event
  const fact = event.fact
  switch (fact.kind) {
    case "tool_settled":
      index.settled.set(fact.operationId, settledOutputOf(fact.outcome))
      break
    case "tool_rejected": {
      const operationId = providerOperation(fact.call)
      if (operationId !== undefined) index.rejected.set(operationId, rejectedOutput(fact))
      break
    }
    case "tool_dispatched": {
      const operationId = providerOperation(fact.call)
      if (operationId !== undefined) index.dispatched.set(operationId, event.invocation.invocationId)
      break
    }
    case "invocation_ended":
      if (fact.outcome.kind === "failed" && fact.outcome.class === "outcome_unknown") {
        index.outcomeUnknown.add(event.invocation.invocationId)
      }
      break
    case "model_requested":
      if (fact.purpose === "summary") index.summarySteps.add(fact.stepId)
      break
    default:
      break
  }
}

/** The output of one local call in `indexes` (a settlement first, in any of them), or `undefined` (never invented). */
const resolve = (indexes: ReadonlyArray<ResultIndex>, operationId: string): Prompt.ToolResultOutput | undefined => {
  for (const index of indexes) {
    const settled = index.settled.get(operationId)
    if (settled !== undefined) return settled
  }
  for (const index of indexes) {
    const rejected = index.rejected.get(operationId)
    if (rejected !== undefined) return rejected
  }
  for (const index of indexes) {
    const dispatcher = index.dispatched.get(operationId)
    if (dispatcher !== undefined && indexes.some((other) => other.outcomeUnknown.has(dispatcher))) return OUTCOME_UNKNOWN_OUTPUT
  }
  return undefined
}

const hasOptions = (options: Prompt.AssistantThinking["providerOptions"]): options is NonNullable<typeof options> =>
  options !== undefined && Object.keys(options).length > 0

/**
 * The assistant message of a completion: text and thinking in order, then the tool calls; `undefined`
 * when nothing remains. Empty texts are dropped, except thinking that carries provider options (a
 * redacted or signature-only block), which the producing route must get back.
 */
export const assistantMessage = (step: Model.ModelStep): Prompt.AssistantMessage | undefined => {
  const parts: Array<Prompt.AssistantPart> = []
  for (const part of step.parts) {
    if (part.kind !== "text") continue
    if (part.textKind === "text") {
      if (part.text !== "") parts.push({ kind: "text", text: part.text })
    } else if (part.text !== "" || hasOptions(part.providerOptions)) {
      parts.push({
        kind: "thinking",
        text: part.text,
        ...(hasOptions(part.providerOptions) ? { providerOptions: part.providerOptions } : {}),
      })
    }
  }
  for (const part of step.parts) {
    if (part.kind !== "tool_call") continue
    parts.push({
      kind: "tool_call",
      toolCallId: part.id,
      toolName: part.name,
      input: part.input,
      providerExecuted: part.providerExecuted,
    })
  }
  return parts.length === 0 ? undefined : { role: "assistant", parts }
}

/**
 * Messages are sealed (`Canonical.seal`: deep-frozen, their canonical JSON kept), so the request
 * digest and the request body reuse each message's text step after step.
 */
const sealed = <A>(value: A): A => (value === undefined ? value : Canonical.seal(value))

const assistantOf = memo((step: Model.ModelStep) => sealed(assistantMessage(step)))

const openingMessage = memo(
  (fact: Fact.InvocationOpened): Prompt.PromptMessage | undefined =>
    fact.input.kind === "message" ? sealed({ role: "user", content: fact.input.content.text }) : undefined,
)

const steeringMessage = memo(
  (fact: Fact.MessageSteered): Prompt.PromptMessage =>
    sealed({ role: "user", content: Prompts.steeringMessage(fact.message.content.text) }),
)

/** The tool message of a completion's results: the same object while its results are the same ones. */
const toolMessages = new WeakMap<
  Fact.ModelCompleted,
  { readonly results: ReadonlyArray<Prompt.ToolResult>; readonly message: Prompt.PromptMessage }
>()

const toolMessage = (completion: Fact.ModelCompleted, results: ReadonlyArray<Prompt.ToolResult>): Prompt.PromptMessage => {
  const kept = toolMessages.get(completion)
  if (
    kept !== undefined &&
    kept.results.length === results.length &&
    kept.results.every((result, index) => result.output === results[index]!.output && result.toolCallId === results[index]!.toolCallId)
  ) {
    return kept.message
  }
  const message = sealed({ role: "tool" as const, results })
  toolMessages.set(completion, { results, message })
  return message
}

/** A tail item as the prompt sees it: a message, a completion with its calls, or nothing. */
type Entry =
  | { readonly kind: "message"; readonly message: Prompt.PromptMessage }
  | { readonly kind: "completion"; readonly fact: Fact.ModelCompleted; readonly assistant: Prompt.AssistantMessage }

const entryOf = (summarySteps: (stepId: string) => boolean, item: TailItem): Entry | undefined => {
  if (item.kind === "archived") return undefined
  const fact = item.stored.event.fact
  switch (fact.kind) {
    case "invocation_opened": {
      const opening = openingMessage(fact)
      return opening === undefined ? undefined : { kind: "message", message: opening }
    }
    case "message_steered":
      return { kind: "message", message: steeringMessage(fact) }
    case "model_completed": {
      if (summarySteps(fact.stepId)) return undefined
      const assistant = assistantOf(fact.output)
      return assistant === undefined ? undefined : { kind: "completion", fact, assistant }
    }
    default:
      return undefined
  }
}

/** Appends an entry's messages to `messages`; returns the operation ids of its calls without a result. */
const projectEntry = (
  entry: Entry,
  indexes: ReadonlyArray<ResultIndex>,
  messages: Array<Prompt.PromptMessage>,
): ReadonlyArray<string> => {
  if (entry.kind === "message") {
    messages.push(entry.message)
    return []
  }
  messages.push(entry.assistant)
  const unresolved: Array<string> = []
  const results: Array<Prompt.ToolResult> = []
  for (const call of Model.localToolCalls(entry.fact.output)) {
    const operationId = ToolCall.providerOperationId(entry.fact.stepId, call.id)
    const output = resolve(indexes, operationId)
    if (output === undefined) unresolved.push(operationId)
    else results.push({ toolCallId: call.id, toolName: call.name, output })
  }
  if (results.length > 0) messages.push(toolMessage(entry.fact, results))
  return unresolved
}

/**
 * The history projection, kept current item by item (docs/architecture.md §12): a live context adds
 * each event it applies, and each step projects only what may still change. A call's result, once
 * the history holds one, never changes (a settlement is final, and so is the outcome of a sealed
 * invocation), so the messages up to the first completion with a call still open are kept.
 */
export class HistoryProjector {
  private readonly index = emptyIndex()
  private readonly entries: Array<Entry> = []
  /** The messages of `entries[0 .. settledEntries)`, whose calls all have their result. */
  private readonly settledMessages: Array<Prompt.PromptMessage> = []
  private settledEntries = 0

  constructor(items: ReadonlyArray<TailItem> = []) {
    for (const item of items) this.add(item)
  }

  /** Adds one item of the history, in log order. */
  add(item: TailItem): void {
    indexItem(this.index, item)
    const entry = entryOf((stepId) => this.index.summarySteps.has(stepId), item)
    if (entry !== undefined) this.entries.push(entry)
  }

  /** The projection of the history, followed by `pending` (items about to commit, in order). */
  project(pending: ReadonlyArray<TailItem> = []): ProjectedHistory {
    const committed = [this.index]
    while (this.settledEntries < this.entries.length) {
      const messages: Array<Prompt.PromptMessage> = []
      if (projectEntry(this.entries[this.settledEntries]!, committed, messages).length > 0) break
      this.settledMessages.push(...messages)
      this.settledEntries++
    }
    const overlay = emptyIndex()
    const entries = this.entries.slice(this.settledEntries)
    const isSummary = (stepId: string) => this.index.summarySteps.has(stepId) || overlay.summarySteps.has(stepId)
    for (const item of pending) {
      indexItem(overlay, item)
      const entry = entryOf(isSummary, item)
      if (entry !== undefined) entries.push(entry)
    }
    const indexes = [this.index, overlay]
    const messages = [...this.settledMessages]
    const unresolvedOperations: Array<string> = []
    for (const entry of entries) unresolvedOperations.push(...projectEntry(entry, indexes, messages))
    return { messages, unresolvedOperations }
  }
}

/** Projects the anchor (when given) and the tail, in order. */
export const projectHistory = (anchor: Event.StoredEvent | undefined, tail: ReadonlyArray<TailItem>): ProjectedHistory =>
  new HistoryProjector(anchor === undefined ? tail : [{ kind: "canonical", stored: anchor }, ...tail]).project()
