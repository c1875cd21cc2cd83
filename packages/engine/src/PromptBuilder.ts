/**
 * Prompt building (docs/engine.md §5.5): the main and summary prompts over a `ModelContextSource`, the
 * main output limit and the automatic-compaction trigger (docs/engine.md §5.12), and the request's `inputDigest`.
 * Everything here is a pure function of facts; the caller applies the route projection
 * (`projectPrompt` of `@maka/model`) before digesting or sending a prompt.
 */
import { Canonical, Digest, Limits, Prompts, type ModelContext, type Prompt } from "@maka/facts"
import type { EventLog } from "@maka/event-log"
import { HistoryProjector, projectHistory, type ProjectedHistory } from "./internal/prompt-history.ts"

export type { ProjectedHistory } from "./internal/prompt-history.ts"

export interface MainPromptInput {
  /** `configuration.systemPrompt.text` of the current opening. */
  readonly systemPrompt?: string | undefined
  /** The prior-unknown notice (docs/engine.md §5.8); when absent and `priorUnknown` is set, it is built from the source. */
  readonly notice?: string | undefined
  readonly priorUnknown?: boolean | undefined
  readonly source: EventLog.ModelContextSource
  /** The source's history projection when the caller keeps it (a live context); projected from `source` otherwise. */
  readonly projection?: ProjectedHistory | undefined
}

export interface SummaryPromptInput {
  readonly source: EventLog.ModelContextSource
}

/** The anchor is re-sent only under a `mid_turn` baseline. */
const anchorOf = (source: EventLog.ModelContextSource) =>
  source.baseline?.checkpoint.mode.kind === "mid_turn" ? source.anchor : undefined

/** The projected history of a source: anchor (mid-turn only) then tail, and its unresolved calls. */
export const projectSource = (source: EventLog.ModelContextSource): ProjectedHistory =>
  projectHistory(anchorOf(source), source.tail)

/** Whether two tail items are the same item of the same read: the same stored event, or the same archive of it. */
const sameItem = (left: EventLog.TailItem, right: EventLog.TailItem): boolean =>
  left.kind === "canonical"
    ? right.kind === "canonical" && left.stored === right.stored
    : right.kind === "archived" && left.sequence === right.sequence && left.archiveEventId === right.archiveEventId

/**
 * Whether `next` projects to `previous`'s projection plus its own new items: the same projected
 * anchor, and `previous`'s tail the start of its tail (the projection depends on nothing else).
 */
const extendsKept = (previous: EventLog.ModelContextSource, next: EventLog.ModelContextSource): boolean => {
  const tail = previous.tail
  // A frozen read builds each anchor anew: the same event is the same anchor.
  if (anchorOf(previous)?.event.id !== anchorOf(next)?.event.id || next.tail.length < tail.length) return false
  for (let index = 0; index < tail.length; index++) if (!sameItem(tail[index]!, next.tail[index]!)) return false
  return true
}

/**
 * Projects the sources of one session's requests in log order, as `projectSource` does, in time that
 * grows with what each source adds: a source that extends the one before it (the same projected
 * anchor, and its tail the same items, read by the same read, then more) adds only its new items to
 * the kept projection (docs/architecture.md §12). Any other source is projected whole
 * and kept for the next. For a reader that rebuilds every step of a long session (`maka inspect
 * --html`); the projection equals `projectSource`'s, and so do its messages' bytes.
 */
export class SourceProjector {
  private kept: { source: EventLog.ModelContextSource; readonly projector: HistoryProjector } | undefined

  /** The projection of `source`, the source after the one projected before it (log order). */
  project(source: EventLog.ModelContextSource): ProjectedHistory {
    const kept = this.kept
    if (kept !== undefined && extendsKept(kept.source, source)) {
      for (let index = kept.source.tail.length; index < source.tail.length; index++) kept.projector.add(source.tail[index]!)
      kept.source = source
      return kept.projector.project()
    }
    const anchor = anchorOf(source)
    const projector = new HistoryProjector(anchor === undefined ? source.tail : [{ kind: "canonical", stored: anchor }, ...source.tail])
    this.kept = { source, projector }
    return projector.project()
  }
}

/**
 * Local calls of the source that have no result: no settlement, no rejection, and no dispatch in an
 * invocation sealed `outcome_unknown`. The prompt omits a result for them rather than inventing one;
 * the safety gate guarantees none in sealed prior invocations, so a non-empty list means the current
 * invocation is not at a settled boundary.
 */
export const unresolvedOperations = (source: EventLog.ModelContextSource): ReadonlyArray<string> =>
  projectSource(source).unresolvedOperations

/**
 * The prior-unknown notice of a source read under the manual-message policy, or `undefined` when it
 * lists no operation (docs/engine.md §5.4 step 9: the caller then fails `ReconciliationRequired`).
 */
export const priorUnknownNotice = (source: EventLog.ModelContextSource): string | undefined =>
  source.unknownOperations.length === 0 ? undefined : Prompts.priorUnknownNotice(source.unknownOperations)

/** How many sealed system and summary messages are kept for reuse (each is one text). */
const KEPT_MESSAGES = 64

/** Recently built system and summary messages, by role and text, least recently used first. */
const keptMessages = new Map<string, Prompt.PromptMessage>()

/**
 * The sealed message of `role` and `content` (`Canonical.seal`), the same object for the same text
 * while it is in use, so the request digest and body reuse its text step after step.
 */
const textMessage = (role: "system" | "user", content: string): Prompt.PromptMessage => {
  const key = `${role}:${content}`
  const kept = keptMessages.get(key)
  if (kept !== undefined) {
    keptMessages.delete(key)
    keptMessages.set(key, kept)
    return kept
  }
  const message = Canonical.seal<Prompt.PromptMessage>({ role, content })
  keptMessages.set(key, message)
  if (keptMessages.size > KEPT_MESSAGES) keptMessages.delete(keptMessages.keys().next().value!)
  return message
}

/**
 * The main prompt: the system message (system prompt, then the notice after a blank line), the
 * baseline summary as `Continuation summary:`, the anchor of a mid-turn baseline, then the tail.
 */
export const buildMainPrompt = (input: MainPromptInput): Prompt.Prompt => {
  const notice = input.notice ?? (input.priorUnknown === true ? priorUnknownNotice(input.source) : undefined)
  const system = Prompts.systemMessageWithNotice(input.systemPrompt, notice)
  const baseline = input.source.baseline
  return [
    ...(system === undefined ? [] : [textMessage("system", system)]),
    ...(baseline === undefined ? [] : [textMessage("user", Prompts.continuationSummaryMessage(baseline.checkpoint.summary.text))]),
    ...(input.projection ?? projectSource(input.source)).messages,
  ]
}

/**
 * The summary prompt without its instruction: no system message; the baseline as `Previous
 * continuation summary:`, then anchor and tail. The caller appends `Prompts.compactionAttemptMessage`.
 */
export const buildSummaryPrompt = (input: SummaryPromptInput): Prompt.Prompt => {
  const baseline = input.source.baseline
  return [
    ...(baseline === undefined
      ? []
      : [{ role: "user" as const, content: Prompts.previousContinuationSummaryMessage(baseline.checkpoint.summary.text) }]),
    ...projectSource(input.source).messages,
  ]
}

/** What decides whether the latest main completion describes the request about to be sent. */
export interface RouteMatch {
  readonly latestMain: EventLog.LatestMainContext
  readonly routeIdentity: string
  /** The current opening's `configuration.model.connectionId`, if it has a binding. */
  readonly connectionId?: string | undefined
  readonly modelId: string
  /** The current baseline's checkpoint event id, if any. */
  readonly baselineId?: string | undefined
}

type SelectedMain = Extract<EventLog.LatestMainContext, { readonly kind: "selected" }>

/**
 * The latest main completion when it was produced on the same connection, model and route, its
 * projection is still current and it used the current baseline (docs/engine.md §5.12 "Due"); otherwise `undefined`.
 * An absent connection id or baseline matches only an absent one.
 */
const matchingLatestMain = (match: RouteMatch): SelectedMain | undefined => {
  const latest = match.latestMain
  if (latest.kind !== "selected") return undefined
  if (
    latest.connectionId !== match.connectionId ||
    latest.modelId !== match.modelId ||
    latest.routeIdentity !== match.routeIdentity ||
    !latest.projectionCurrent ||
    latest.checkpointEventId !== match.baselineId
  ) {
    return undefined
  }
  return latest
}

export interface CompactionDueInput extends RouteMatch {
  readonly context?: ModelContext.ModelRequestContext | undefined
}

/**
 * docs/engine.md §5.12 "Due": `declaredWindow` is set, the latest main matches, its input is known and positive, and
 * input (or input plus a known output) reaches the declared window.
 */
export const compactionDue = (input: CompactionDueInput): boolean => {
  const window = input.context?.declaredWindow
  if (window === undefined) return false
  const latest = matchingLatestMain(input)
  const inputTokens = latest?.usage.inputTokens
  if (latest === undefined || inputTokens === undefined || inputTokens <= 0) return false
  const outputTokens = latest.usage.outputTokens
  return inputTokens >= window || (outputTokens !== undefined && inputTokens + outputTokens >= window)
}

export interface OutputLimitInput extends RouteMatch {
  readonly mainOutputLimit?: number | undefined
  readonly context?: ModelContext.ModelRequestContext | undefined
  /** The Anthropic thinking budget in the provider options; 0 otherwise. */
  readonly thinkingBudget?: number | undefined
}

/**
 * docs/engine.md §5.12 "Output limit": `mainOutputLimit ?? 8,000`, capped by what the model's context window leaves
 * after the retained usage of a matching latest main, the 8,000-token reserve and the thinking budget;
 * never above the limit and never below `min(limit, 8,000)`, nor (an addition) at or below a thinking
 * budget the limit is above: Anthropic refuses a request whose `max_tokens` is not above its budget.
 * Only `modelContextWindow` caps output.
 */
export const outputLimit = (input: OutputLimitInput): number => {
  const limit = input.mainOutputLimit ?? Limits.DEFAULT_OUTPUT_LIMIT
  const window = input.context?.modelContextWindow
  if (window === undefined) return limit
  const usage = matchingLatestMain(input)?.usage
  if (usage?.inputTokens === undefined) return limit
  const retained = usage.inputTokens + (usage.outputTokens ?? 0)
  const budget = input.thinkingBudget ?? 0
  const available = window - retained - Limits.OUTPUT_RESERVE - budget
  const floor = Math.min(limit, Math.max(Limits.DEFAULT_OUTPUT_LIMIT, budget + 1))
  return Math.max(Math.min(available, limit), floor)
}

/**
 * A summary request's output limit (docs/engine.md §5.6): `min(mainOutputLimit ?? 8,000, 8,000)`,
 * and with an Anthropic thinking budget (which a limit must stay above) the budget plus 8,000, never
 * above the main limit (which is above the budget). Uncapped, a large main limit would make every
 * summary of a full window overflow it, exactly when compaction is needed.
 */
export const summaryOutputLimit = (mainOutputLimit: number | undefined, thinkingBudget: number): number =>
  Math.min(mainOutputLimit ?? Limits.DEFAULT_OUTPUT_LIMIT, Limits.SUMMARY_OUTPUT_CAP + thinkingBudget)

/**
 * The Anthropic thinking budget in provider options (`thinking.budget_tokens`, a safe integer above
 * zero), which the output limit reserves; 0 on another route or without one.
 */
export const thinkingBudgetOf = (kind: string, providerOptions: Readonly<Record<string, unknown>> | undefined): number => {
  if (kind !== "anthropic") return 0
  // An object's `budget_tokens` (an array or a scalar has none).
  const thinking = providerOptions?.["thinking"] as { readonly budget_tokens?: unknown } | null | undefined
  const budget = thinking?.budget_tokens
  return Number.isSafeInteger(budget) ? Math.max(budget as number, 0) : 0
}

/**
 * `inputDigest` of one request (docs/engine.md §5.5) over the route-projected prompt, i.e. exactly what the adapter
 * encodes: `Digest.modelInput` of `{projection: "maka.model-history.v1", prompt, tools, providerOptions, maxOutputTokens}`.
 */
export const inputDigest = (
  projectedPrompt: Prompt.Prompt,
  tools: ReadonlyArray<Prompt.ToolDefinition>,
  providerOptions: Prompt.ModelRequest["providerOptions"],
  maxOutputTokens: number,
): string => Digest.modelInput({ prompt: projectedPrompt, tools, providerOptions, maxOutputTokens })
