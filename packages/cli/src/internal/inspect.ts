/**
 * `maka inspect --session S [--step N]`: a terminal timeline of a session (invocations, model steps
 * with their retries, tool calls with durations, checkpoints, archives, terminals), and the exact
 * model input of step N rebuilt from the log and checked against the step's recorded `inputDigest`.
 * Steps are numbered from 1 over the session's `model_requested {main}` facts in sequence order.
 */
import type { Event, Fact, Model, Outcome, Prompt } from "@maka/facts"
import type { EventLog } from "@maka/event-log"
import { Result } from "effect"
import { PromptBuilder } from "@maka/engine"
import { projectPrompt } from "@maka/model"
import { Builtins, ReadToolResult, Tool, ToolCatalog } from "@maka/tools"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { TOOL_LEVELS, type ToolLevel } from "../Configuration.ts"
import { CliError, ExitCode, fsReasonOf } from "./exit.ts"
import * as Flags from "./flags.ts"
import type { CommandContext } from "./read-commands.ts"
import type { InspectPage } from "./inspect-html.ts"
import { openReadOnly, sessionEventPages, type OpenLog } from "./store.ts"
import { oneLine } from "./clip.ts"

const clip = (text: string, max = 100): string => oneLine(text, max)

const time = (ms: number): string => new Date(ms).toISOString().slice(11, 23)

const compactDetail = (outcome: Outcome.CompactOutcome): string => {
  switch (outcome.kind) {
    case "compacted":
      return `compacted into checkpoint ${outcome.checkpointId}`
    case "unchanged":
      return `unchanged: ${outcome.reason}`
    case "failed":
      return `failed: ${outcome.reason}`
  }
}

/**
 * A timeline written event by event into `lines`: what it keeps between events is the steps and
 * the dispatched calls it has seen (their numbers, names and times), never the events themselves.
 */
/**
 * ` in N ms` between two events' times; nothing when the second is earlier: `recordedAt` is the
 * writer's wall clock, informational (a clock stepped back between them gives no duration).
 */
const durationOf = (from: number | undefined, to: number): string => (from === undefined || to < from ? "" : ` in ${to - from} ms`)

export const timelineOf = (lines: Array<string>): ((stored: Event.StoredEvent) => void) => {
  const steps = new Map<string, { readonly number: number | undefined; readonly at: number }>()
  const dispatched = new Map<string, { readonly name: string; readonly at: number }>()
  let mainSteps = 0
  // A main attempt that failed retryably, by its invocation: marked retried when the next request
  // of that invocation (or of its handoff successor) follows (its last attempt, or one cut by a
  // cancellation, is not).
  const failedAttempts = new Map<string, number>()
  return (stored) => {
    const fact: Fact.Fact = stored.event.fact
    const at = stored.event.recordedAt
    const prefix = `${String(stored.sequence).padStart(5)} ${time(at)}`
    switch (fact.kind) {
      case "invocation_opened": {
        const input =
          fact.input.kind === "message"
            ? `message ${JSON.stringify(clip(fact.input.content.text, 80))}`
            : fact.input.kind === "handoff" || fact.input.kind === "continuation"
              ? `${fact.input.kind} of invocation ${fact.input.claim.source.invocation.invocationId} (its first ${fact.input.claim.source.highWater} events)`
              : fact.input.kind
        const model = fact.configuration.model
        // A successor sends the retry its paused run waited to send (docs/engine.md §5.10): that
        // run's failed attempt is marked retried at the successor's first request.
        if (fact.input.kind === "handoff") {
          const paused = fact.input.claim.source.invocation.invocationId
          const failed = failedAttempts.get(paused)
          if (failed !== undefined) {
            failedAttempts.delete(paused)
            failedAttempts.set(stored.event.invocation.invocationId, failed)
          }
        }
        lines.push(`${prefix} invocation ${stored.event.invocation.invocationId} opened: ${input}`)
        if (model !== undefined) lines.push(`${" ".repeat(19)}  model ${model.model} on ${model.connectionId}, cwd ${fact.configuration.cwd}`)
        break
      }
      case "model_requested": {
        const number = fact.purpose === "main" ? ++mainSteps : undefined
        steps.set(fact.stepId, { number, at })
        const failed = failedAttempts.get(stored.event.invocation.invocationId)
        if (number !== undefined && failed !== undefined) {
          lines[failed] = `${lines[failed]!} (retried)`
          failedAttempts.delete(stored.event.invocation.invocationId)
        }
        const label = number === undefined ? `${fact.purpose} request` : `step ${number}`
        lines.push(`${prefix}   ${label} requested (input ${fact.inputDigest.slice(0, 19)}…, source through ${fact.sourceHighWater})`)
        break
      }
      case "model_completed": {
        const step = steps.get(fact.stepId)
        const label = step === undefined ? "request" : step.number === undefined ? "summary request" : `step ${step.number}`
        const text = fact.output.parts.flatMap((part) => (part.kind === "text" && part.textKind === "text" ? [part.text] : [])).join("")
        const calls = fact.output.parts.flatMap((part) => (part.kind === "tool_call" ? [part.name] : []))
        const usage = fact.output.usage
        const took = durationOf(step?.at, at)
        lines.push(
          `${prefix}   ${label} completed${took}: finish ${fact.output.finishReason}, tokens in ${usage.inputTokens ?? "?"} out ${usage.outputTokens ?? "?"}` +
            // Parts of those counts, not more tokens: cache reads and writes of the input, reasoning of the output.
            (usage.cacheReadTokens === undefined ? "" : `, cache read ${usage.cacheReadTokens}`) +
            (usage.cacheWriteTokens === undefined ? "" : `, cache write ${usage.cacheWriteTokens}`) +
            (usage.reasoningTokens === undefined ? "" : `, reasoning ${usage.reasoningTokens}`) +
            (calls.length === 0 ? "" : `, calls ${calls.join(", ")}`) +
            (text === "" ? "" : `, text ${JSON.stringify(clip(text, 60))}`),
        )
        break
      }
      case "model_interrupted": {
        const step = steps.get(fact.stepId)
        const label = step === undefined ? "request" : step.number === undefined ? "summary request" : `step ${step.number}`
        lines.push(`${prefix}   ${label} interrupted: ${fact.status}`)
        // A summary attempt runs once (docs/engine.md §5.6): only a main one may be retried.
        if (fact.status === "retryable_failure" && step?.number !== undefined) failedAttempts.set(stored.event.invocation.invocationId, lines.length - 1)
        break
      }
      case "tool_dispatched":
        dispatched.set(fact.operationId, { name: fact.name, at })
        lines.push(`${prefix}     tool ${fact.name} ${clip(JSON.stringify(fact.input), 80)} dispatched`)
        break
      case "tool_settled": {
        const call = dispatched.get(fact.operationId)
        const took = durationOf(call?.at, at)
        lines.push(`${prefix}     tool ${call?.name ?? fact.operationId} ${fact.outcome.kind}${took}`)
        break
      }
      case "tool_rejected":
        lines.push(`${prefix}     tool ${fact.name} rejected: ${fact.reason.kind}`)
        break
      case "message_steered":
        lines.push(`${prefix}   steered: ${JSON.stringify(clip(fact.message.content.text, 80))}`)
        break
      case "context_checkpoint_recorded":
        lines.push(
          `${prefix}   checkpoint ${stored.event.id} recorded (${fact.checkpoint.mode.kind}, covers through ${fact.checkpoint.coveredThrough})`,
        )
        break
      case "tool_result_archived":
        lines.push(`${prefix}   tool result archived`)
        break
      case "invocation_ended": {
        const outcome = fact.outcome
        const detail =
          outcome.kind === "failed"
            ? `failed ${outcome.class}${outcome.message === undefined ? "" : `: ${clip(outcome.message, 80)}`}`
            : outcome.kind === "context_compact_finished"
              ? `context_compact_finished: ${compactDetail(outcome.outcome)}`
              : outcome.kind === "handoff_paused"
                ? `handoff_paused: ${outcome.pause.remainingSteps} steps left for successor ${outcome.pause.intent.successorInvocationId}`
                : outcome.kind
        lines.push(`${prefix} invocation ${stored.event.invocation.invocationId} ended: ${detail}`)
        break
      }
      default:
        break
    }
  }
}

/**
 * The model-context source of each main request, as the engine read it: re-read by the log from
 * the request's evidence (its scope, high water and digest, docs/log-format.md §3.7), with the
 * checkpoint, anchor, archives and `latestMain` that held at its high water. A source the log
 * refuses (its rows no longer give the recorded digest) is the refusal's message instead. The
 * limits are the log's own rows, already read: a source read under a host's larger limits rebuilds.
 * All of them in one read of the session: their sources share its events, and so do the messages
 * rebuilt from them (what the page compares from step to step).
 */
const readSources = async (open: OpenLog, requests: ReadonlyArray<Event.StoredEvent>): Promise<ReadonlyArray<StepSource>> => {
  const evidences = requests.map((stored) => {
    const request = stored.event.fact
    if (request.kind !== "model_requested") throw new CliError("not a model request", ExitCode.failed)
    return { scope: request.sourceScope, highWater: request.sourceHighWater, digest: request.sourceDigest }
  })
  const reads = await open.run(
    open.log.readFrozenModelContexts(evidences, { maxEvents: Number.MAX_SAFE_INTEGER, maxBytes: Number.MAX_SAFE_INTEGER }),
  )
  return reads.map((read) => (Result.isSuccess(read) ? read.success : { unreadable: `store error: ${read.failure.message}` }))
}

/**
 * How many tail items the sources read at once may hold together, at most (see `forEachSource`).
 * The sources of one read share their items (an array slot each, 8 bytes), not the events; each
 * read decodes the session's rows through its last high water again, so fewer reads are faster:
 * a 10,000-step session with tails near the read limit (8,000 events) reads 12 times, not 92.
 */
const SOURCE_ITEMS_AT_ONCE = 4_000_000

/**
 * Calls `each` with every request's source, in order, reading them in batches of `readSources`: a
 * batch's sources are dropped once handed on, so a long session never holds every step's source at
 * once (each tail is as long as the step's context). A batch takes requests while their tails,
 * estimated as the last tail read plus the rows since its high water, add up to `budget` (one
 * request at least). The estimate bounds a tail of the same scope as the last one read; a step
 * whose scope differs (a lineage after the session, or the other way) may read more, which only
 * makes that batch larger, never the page different.
 */
export const forEachSource = async (
  open: OpenLog,
  requests: ReadonlyArray<Event.StoredEvent>,
  each: (stored: Event.StoredEvent, source: StepSource, index: number) => void,
  budget = SOURCE_ITEMS_AT_ONCE,
): Promise<void> => {
  let last = { tail: 0, highWater: 0 }
  // A request's tail, estimated: the last tail read, plus every row since its high water.
  const bound = (stored: Event.StoredEvent) => {
    const highWater = stored.event.fact.kind === "model_requested" ? stored.event.fact.sourceHighWater : 0
    return last.tail + Math.max(0, highWater - last.highWater)
  }
  let start = 0
  while (start < requests.length) {
    let end = start + 1
    let items = bound(requests[start]!)
    while (end < requests.length && items + bound(requests[end]!) <= budget) items += bound(requests[end++]!)
    const batch = requests.slice(start, end)
    const sources = await readSources(open, batch)
    sources.forEach((source, index) => {
      if (!("unreadable" in source)) last = { tail: source.tail.length, highWater: source.sourceEvidence.highWater }
      each(batch[index]!, source, start + index)
    })
    start = end
  }
}

/**
 * What a step's source is, as `--step` prints it: its scope, the event it reads through, the
 * checkpoint it starts from, its archived results, and that its rows gave the recorded digest.
 */
export const sourceLine = (source: EventLog.ModelContextSource): string => {
  const { scope, highWater } = source.sourceEvidence
  const selection = scope.kind === "lineage" ? `the lineage of run ${scope.runId}` : "the session"
  const archived = source.tail.filter((item) => item.kind === "archived").length
  return [
    `${selection} through event ${highWater}`,
    source.baseline === undefined ? "no checkpoint" : `checkpoint at event ${source.baseline.sequence}`,
    ...(archived === 0 ? [] : [`${archived} archived result${archived === 1 ? "" : "s"}`]),
    "digest verified",
  ].join(", ")
}

/** A step's source as the log re-read it, or why it could not. */
export type StepSource = EventLog.ModelContextSource | { readonly unreadable: string }

export interface RebuiltInput {
  readonly prompt: Prompt.Prompt
  readonly tools: ReadonlyArray<Prompt.ToolDefinition>
  readonly toolLevel: ToolLevel | undefined
  /** Whether the matching tools held `read_tool_result` (earlier versions of maka did not offer it). */
  readonly readToolResult: boolean
  readonly maxOutputTokens: number
  readonly digest: string
  readonly matches: boolean
}

/**
 * What a differing input digest may also mean: the log names a run's tools only by the digest, so
 * the input is rebuilt with each tool level of the CLI, and a run given other tools (through the
 * library) never matches one (docs/cli.md §10.1).
 */
export const UNCHECKED_TOOLS =
  "the input was rebuilt with the CLI's own tools (the read level shown), no provider options and the output limit the log implies: " +
  "a run given other tools, provider options or an output limit (through the library) cannot be checked here"

/** The CLI's tool sets a run in `cwd` may have been given, by level, with and without read_tool_result. */
interface ToolCandidate {
  readonly level: ToolLevel
  readonly offered: boolean
  readonly tools: ReadonlyArray<Prompt.ToolDefinition>
}

/** The candidates of the last workspaces seen: a session's steps share one or a few. */
const keptCandidates = new Map<string, ReadonlyArray<ToolCandidate>>()

const toolCandidates = (cwd: string): ReadonlyArray<ToolCandidate> => {
  const kept = keptCandidates.get(cwd)
  if (kept !== undefined) return kept
  const root = { root: cwd }
  // The engine adds read_tool_result to a catalog with tools; its definition does not depend on the
  // reader. A run written by an earlier version of maka, which did not offer it, is checked with each
  // level alone.
  const candidates = [true, false].flatMap((offered) =>
    TOOL_LEVELS.map((level): ToolCandidate => {
      const builtins = ToolCatalog.make(Builtins.forLevel(level, root))
      const catalog = offered ? ReadToolResult.offer(builtins, () => Tool.fail("not readable offline")) : builtins
      return { level, offered, tools: catalog.capture().definitions }
    }),
  )
  if (keptCandidates.size >= 8) keptCandidates.delete(keptCandidates.keys().next().value!)
  keptCandidates.set(cwd, candidates)
  return candidates
}

/**
 * Rebuilds the exact input of a main request from the log: the prompt of its source, the route
 * projection, the output limit, and the CLI's tool set (the level whose digest matches; the log records
 * the catalog only through the digest).
 */
export const rebuildInput = (
  openings: ReadonlyMap<string, Fact.InvocationOpened>,
  stored: Event.StoredEvent,
  source: EventLog.ModelContextSource,
  projector?: PromptBuilder.SourceProjector,
): RebuiltInput => {
  const request = stored.event.fact
  if (request.kind !== "model_requested") throw new CliError("not a model request", ExitCode.failed)
  const opening = openings.get(stored.event.invocation.invocationId)
  if (opening === undefined) throw new CliError("the step's opening is missing from the log", ExitCode.failed)
  const systemPrompt = opening.configuration.systemPrompt?.text
  // A source holding an effect of unknown outcome was read for a run admitted under the prior-unknown
  // policy (no other run is admitted over one): its system message carried the notice.
  const priorUnknown = source.unknownOperations.length > 0
  const prompt = PromptBuilder.buildMainPrompt({
    ...(systemPrompt === undefined ? {} : { systemPrompt }),
    source,
    priorUnknown,
    ...(projector === undefined ? {} : { projection: projector.project(source) }),
  })
  const binding = opening.configuration.model
  const kind = binding?.connectionSlug === "anthropic" ? "anthropic" : "openai-compatible"
  const projected = projectPrompt(kind, request.routeIdentity, prompt)
  const maxOutputTokens = PromptBuilder.outputLimit({
    ...(request.context === undefined ? {} : { context: request.context }),
    latestMain: source.latestMain,
    routeIdentity: request.routeIdentity,
    ...(binding === undefined ? {} : { connectionId: binding.connectionId }),
    modelId: request.modelId,
  })
  const candidates = toolCandidates(opening.configuration.cwd).map((candidate) => ({
    ...candidate,
    digest: PromptBuilder.inputDigest(projected, candidate.tools, {}, maxOutputTokens),
  }))
  const match = candidates.find((candidate) => candidate.digest === request.inputDigest)
  const shown = match ?? candidates.find((candidate) => candidate.level === "read")!
  return {
    prompt: projected,
    tools: shown.tools,
    toolLevel: match?.level,
    readToolResult: shown.offered,
    maxOutputTokens,
    digest: shown.digest,
    matches: match !== undefined,
  }
}

const renderMessage = (message: Prompt.PromptMessage): ReadonlyArray<string> => {
  const indent = (text: string) => text.split("\n").map((line) => `    ${line}`)
  switch (message.role) {
    case "system":
    case "user":
      return [`  [${message.role}]`, ...indent(message.content)]
    case "assistant":
      return [
        "  [assistant]",
        ...message.parts.flatMap((part) =>
          part.kind === "tool_call"
            ? indent(`call ${part.toolName} ${JSON.stringify(part.input)} (${part.toolCallId})`)
            : indent(part.kind === "thinking" ? `(thinking) ${part.text}` : part.text),
        ),
      ]
    case "tool":
      return [
        "  [tool]",
        ...message.results.flatMap((result) =>
          indent(`${result.toolName} (${result.toolCallId}) → ${result.output.type}: ${typeof result.output.value === "string" ? result.output.value : JSON.stringify(result.output.value)}`),
        ),
      ]
  }
}

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> => typeof value === "object" && value !== null

/**
 * The first bytes of `file`, or `undefined` when nothing is there; `""` (no page) for anything but a
 * regular file, never opened: a FIFO would block the open until a writer came, with the signals
 * unheard, and a link (a dangling one too) is not a page maka wrote.
 */
const headOf = (file: string): string | undefined => {
  let entry: fs.Stats
  try {
    entry = fs.lstatSync(file)
  } catch (error) {
    if (isRecord(error) && error["code"] === "ENOENT") return undefined
    throw new CliError(`cannot write ${file}: ${fsReasonOf(error)}`, ExitCode.failed)
  }
  if (!entry.isFile()) return ""
  let handle: number
  try {
    // Without blocking or following, should the entry have changed since it was looked at.
    handle = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK | fs.constants.O_NOFOLLOW)
  } catch (error) {
    if (isRecord(error) && (error["code"] === "ELOOP" || error["code"] === "ENXIO")) return ""
    throw new CliError(`cannot write ${file}: ${fsReasonOf(error)}`, ExitCode.failed)
  }
  try {
    const buffer = Buffer.alloc(1_024)
    return buffer.toString("utf8", 0, fs.readSync(handle, buffer, 0, buffer.length, 0))
  } catch (error) {
    // A directory: not a page, so it is refused below.
    if (isRecord(error) && error["code"] === "EISDIR") return ""
    throw new CliError(`cannot write ${file}: ${fsReasonOf(error)}`, ExitCode.failed)
  } finally {
    fs.closeSync(handle)
  }
}

/** Refuses `file` unless it is new or a page `maka inspect --html` wrote before. */
const checkPageTarget = async (file: string): Promise<void> => {
  const { isInspectPage } = await import("./inspect-html.ts")
  const head = headOf(file)
  if (head !== undefined && !isInspectPage(head)) {
    throw new Flags.UsageError(`${file} exists and is not a page maka inspect wrote; choose a new FILE for --html`)
  }
}

/**
 * Writes the page to `file`: a new file, or one `maka inspect --html` wrote before (never a log or any
 * other file, which is refused with nothing written); through a temporary file renamed over it, so an
 * interrupted write never leaves half a page.
 */
const writePage = async (file: string, page: InspectPage): Promise<void> => {
  await checkPageTarget(file)
  // Named apart from FILE, whose own name may already be as long as a name can be.
  const temporary = path.join(path.dirname(file), `.maka-inspect-${process.pid}-${crypto.randomBytes(4).toString("hex")}.tmp`)
  try {
    // Piece by piece: a long session's page is larger than one string can be.
    const descriptor = fs.openSync(temporary, "wx")
    try {
      for (const piece of page.pieces()) {
        // A write may take only part of what it is given: the rest is written until none is left.
        const bytes = Buffer.from(piece, "utf8")
        for (let written = 0; written < bytes.length; ) written += fs.writeSync(descriptor, bytes, written)
      }
    } finally {
      fs.closeSync(descriptor)
    }
    fs.renameSync(temporary, file)
  } catch (error) {
    try {
      fs.rmSync(temporary, { force: true })
    } catch {
      // The error that stopped the write is the one to report.
    }
    throw new CliError(`cannot write ${file}: ${fsReasonOf(error)}`, ExitCode.failed)
  }
}

/**
 * What `maka inspect` keeps of a session's events, read page by page: its timeline's lines, its
 * event count, its openings, its main requests and its completions' outputs, never the events
 * themselves (a long session is not held whole).
 */
export interface SessionView {
  readonly count: number
  readonly lines: ReadonlyArray<string>
  readonly openings: ReadonlyMap<string, Fact.InvocationOpened>
  readonly mainRequests: ReadonlyArray<Event.StoredEvent>
  /** The output of each completed request, by step id. */
  readonly outputs: ReadonlyMap<string, Model.ModelStep>
  /** The answer text a request that did not complete showed before it ended, by step id. */
  readonly observed: ReadonlyMap<string, string>
}

/**
 * The session's view, its events read page by page (`sessionEventPages`); the model's outputs are
 * kept only `withOutputs` (the page shows them; the timeline does not).
 */
export const readSession = async (open: OpenLog, sessionId: string, withOutputs = true): Promise<SessionView> => {
  const lines: Array<string> = []
  const add = timelineOf(lines)
  const openings = new Map<string, Fact.InvocationOpened>()
  const mainRequests: Array<Event.StoredEvent> = []
  const outputs = new Map<string, Model.ModelStep>()
  // The answer text each request showed, until its completion replaces it: what an interrupted one left.
  const observed = new Map<string, string>()
  const answerParts = new Set<string>()
  let count = 0
  for await (const page of sessionEventPages(open, sessionId)) {
    for (const stored of page) {
      add(stored)
      const fact = stored.event.fact
      if (fact.kind === "invocation_opened") openings.set(stored.event.invocation.invocationId, fact)
      else if (fact.kind === "model_requested" && fact.purpose === "main") mainRequests.push(stored)
      else if (fact.kind === "model_completed" && withOutputs) {
        outputs.set(fact.stepId, fact.output)
        observed.delete(fact.stepId)
      } else if (fact.kind === "model_observed" && withOutputs) {
        const event = fact.event
        const part = `${fact.stepId}\u0000${event.kind === "part_started" || event.kind === "part_delta" ? event.id : ""}`
        if (event.kind === "part_started" && event.textKind === "text") answerParts.add(part)
        else if (event.kind === "part_delta" && answerParts.has(part)) observed.set(fact.stepId, `${observed.get(fact.stepId) ?? ""}${event.text}`)
      }
    }
    count += page.length
  }
  if (count === 0) throw new CliError(`session ${sessionId} has no events`, ExitCode.failed)
  return { count, lines, openings, mainRequests, outputs, observed }
}

function* linesOf(lines: ReadonlyArray<string>): Iterable<string> {
  for (const line of lines) yield `${line}\n`
}

/** Writes `texts` to stdout at the pace of its reader; a reader that went away (`| head`) ends it. */
const outPaced = async (context: CommandContext, texts: Iterable<string>): Promise<void> => {
  for (const text of texts) {
    context.sink.out(text)
    const drained = context.sink.outDrained?.()
    if (drained !== undefined) await drained
    if (context.sink.outClosed?.aborted === true) return
  }
}

export const inspectCommand = async (context: CommandContext): Promise<number> => {
  const { values } = Flags.parse("inspect", context.args)
  const target = Flags.database(values, context.environment, context.cwd)
  const sessionId = Flags.requiredSession(values, "inspect")
  const stepNumber = Flags.integer("step", values.step, 1, Number.MAX_SAFE_INTEGER)
  // `--html -` writes the page to stdout; the step's input, printed there too, would end inside it.
  const toStdout = values.html === "-"
  if (toStdout && stepNumber !== undefined) throw new Flags.UsageError("--html - writes the page to stdout; give --step without it, or a FILE")
  const html = values.html === undefined || toStdout ? values.html : path.resolve(context.cwd, values.html)
  const open = await openReadOnly(target)
  let session: SessionView
  // The page, its steps added as their sources are read; step N's source for the terminal.
  let page: InspectPage | undefined
  let stepSource: StepSource | undefined
  try {
    session = await readSession(open, sessionId, html !== undefined)
    const { mainRequests } = session
    // Checked before the page is written: a usage error leaves nothing behind.
    if (stepNumber !== undefined && stepNumber > mainRequests.length) {
      throw new Flags.UsageError(
        `session ${sessionId} has ${mainRequests.length} ${mainRequests.length === 1 ? "step" : "steps"}; --step must be in 1..${mainRequests.length}`,
      )
    }
    if (html !== undefined) {
      // Refused before the sources are read (a long session's take a while), and again at the write.
      if (!toStdout) await checkPageTarget(html)
      const { inspectPage } = await import("./inspect-html.ts")
      const building = inspectPage(sessionId, session)
      page = building
      await forEachSource(open, mainRequests, (stored, source, index) => {
        building.step(stored, source)
        if (index === (stepNumber ?? 0) - 1) stepSource = source
      })
    }
    if (stepNumber !== undefined) stepSource ??= (await readSources(open, [mainRequests[stepNumber - 1]!]))[0]
  } finally {
    await open.close()
  }
  if (html === undefined && stepNumber === undefined) {
    context.sink.out(`session ${sessionId}: ${session.count} events\n`)
    await outPaced(context, linesOf(session.lines))
    return ExitCode.completed
  }
  if (toStdout && page !== undefined) {
    await outPaced(context, page.pieces())
  } else if (html !== undefined && page !== undefined) {
    await writePage(html, page)
    context.sink.err(`wrote ${html}\n`)
  }
  // Without --step the page was all.
  if (stepNumber === undefined) return ExitCode.completed
  const stored = session.mainRequests[stepNumber - 1]!
  const request = stored.event.fact
  if (request.kind !== "model_requested") throw new CliError("not a model request", ExitCode.failed)
  if (stepSource === undefined || "unreadable" in stepSource) {
    throw new CliError(`the source of step ${stepNumber} cannot be re-read from the log: ${stepSource?.unreadable ?? "not read"}`, ExitCode.failed)
  }
  const rebuilt = rebuildInput(session.openings, stored, stepSource)
  context.sink.out(`step ${stepNumber} of session ${sessionId} (event ${stored.sequence}, step ${request.stepId})\n`)
  context.sink.out(`model ${request.modelId}, route ${request.routeIdentity}, max output tokens ${rebuilt.maxOutputTokens}\n`)
  context.sink.out(`source: ${sourceLine(stepSource)}\n`)
  context.sink.out(`tools: ${rebuilt.tools.map((tool) => tool.name).join(", ") || "(none)"}\n`)
  context.sink.out(`messages (${rebuilt.prompt.length}):\n`)
  for (const message of rebuilt.prompt) for (const line of renderMessage(message)) context.sink.out(`${line}\n`)
  if (rebuilt.matches) {
    const offered = rebuilt.readToolResult ? "" : ", without read_tool_result, as earlier versions of maka offered them"
    context.sink.out(`input digest: ${request.inputDigest} matches the rebuilt input (tools ${rebuilt.toolLevel}${offered})\n`)
    return ExitCode.completed
  }
  context.sink.err(`input digest: recorded ${request.inputDigest}, rebuilt ${rebuilt.digest}: the rebuilt input differs\n`)
  context.sink.err(`${UNCHECKED_TOOLS}\n`)
  return ExitCode.failed
}
