/**
 * The live context's differential check (src/internal/live-context.ts): a spy wraps the log the
 * engine writes through; after every commit of a live invocation it applies the batch to its own
 * `LiveContext` (loaded when the opening commits, as the runner does) and compares the whole
 * `snapshot()` with a fresh `readModelContext(session, {current})`; before every `model_requested`
 * it reads the context fresh at that cut and rebuilds the request the runner must have sent from it
 * (prompt, output limit, tools, digest), which a test then compares with what the model received.
 */
import { Codec, Digest, type Configuration, type Event, type EventWrite, type Fact, type Identity, type Prompt } from "@maka/facts"
import type { EventLog } from "@maka/event-log"
import { projectPrompt, type LanguageModel } from "@maka/model"
import type { ScriptedServer } from "@maka/testkit"
import { ReadToolResult } from "@maka/tools"
import { Effect, Result } from "effect"
import { isDeepStrictEqual } from "node:util"
import * as PromptBuilder from "../../src/PromptBuilder.ts"
import { LiveContext } from "../../src/internal/live-context.ts"
import type * as Engine from "../../src/Engine.ts"
import { setup } from "./setup.ts"

export interface Comparison {
  /** Whole-context comparisons made after commits. */
  snapshots: number
  /** Requests rebuilt from a fresh read at their cut. */
  readonly expected: Array<Prompt.ModelRequest>
  /** The `model_requested` facts seen, in order. */
  readonly requests: Array<Fact.ModelRequested>
  /** Retries whose evidence is their first attempt's, not a fresh read at their own cut. */
  retries: number
  readonly mismatches: Array<string>
}

interface Current {
  readonly invocationId: string
  readonly configuration: Configuration.InvocationConfiguration
  live: LiveContext
}

/** What the runner needs to rebuild a request: the run's input, as the test started it. */
export type Settings = Pick<Engine.StartInput, "model" | "mainOutputLimit" | "context" | "tools" | "allowPriorUnknown">

export const rebuild = (
  settings: Settings,
  configuration: Configuration.InvocationConfiguration,
  source: EventLog.ModelContextSource,
): Prompt.ModelRequest => {
  const model: LanguageModel.LanguageModelShape = settings.model
  const notice = settings.allowPriorUnknown === true ? PromptBuilder.priorUnknownNotice(source) : undefined
  const prompt = PromptBuilder.buildMainPrompt({
    systemPrompt: configuration.systemPrompt?.text,
    notice,
    source,
  })
  const maxOutputTokens = PromptBuilder.outputLimit({
    mainOutputLimit: settings.mainOutputLimit,
    context: settings.context,
    latestMain: source.latestMain,
    routeIdentity: model.routeIdentity,
    ...(configuration.model === undefined ? {} : { connectionId: configuration.model.connectionId }),
    modelId: model.model,
    ...(source.baseline === undefined ? {} : { baselineId: source.baseline.eventId }),
  })
  // A run with tools also offers `read_tool_result`, whose definition does not depend on its reader.
  const tools = ReadToolResult.offer(settings.tools, () => Effect.die("the rebuilt request never runs a tool"))
  return {
    prompt: projectPrompt(model.kind, model.routeIdentity, prompt),
    tools: tools.capture().definitions,
    providerOptions: {},
    maxOutputTokens,
  }
}

/**
 * The source evidence a request of `invocationId` must carry when its context is a lineage
 * (docs/log-format.md §3.6): every event at or below the base, and the events of the invocation's
 * chain (its continuation sources and handoff predecessors), through `before`.
 */
const lineageEvidence = (
  events: ReadonlyArray<Event.StoredEvent>,
  scope: Identity.LogScope,
  invocationId: string,
  before: number,
): { readonly highWater: number; readonly digest: string } => {
  const openings = new Map<string, Fact.InvocationOpened>()
  for (const { event } of events) if (event.fact.kind === "invocation_opened") openings.set(event.invocation.invocationId, event.fact)
  const opened = openings.get(invocationId)?.input
  const base = opened?.kind === "continuation" ? opened.claim.base.highWater : opened?.kind === "handoff" ? opened.pause.execution.replayBase : undefined
  if (base === undefined) throw new Error(`invocation ${invocationId} reads no lineage`)
  const chain = new Set([invocationId])
  for (let input = opened; input?.kind === "continuation" || input?.kind === "handoff"; ) {
    const source = input.claim.source.invocation.invocationId
    if (chain.has(source)) break
    chain.add(source)
    input = openings.get(source)?.input
  }
  const rows = events
    .filter(({ sequence, event }) => sequence <= before && (sequence <= base || chain.has(event.invocation.invocationId)))
    .map(({ sequence, event }) => ({ sequence, json: Codec.encodeEventJson(event) }))
  const highWater = rows.at(-1)?.sequence ?? 0
  return { highWater, digest: Digest.logPrefix(scope, rows, highWater) }
}

/** The spy: wraps `appendBatch` of the log the engine writes through. */
export const comparing = (
  comparison: Comparison,
  sessionId: string,
  settings: () => Settings,
  log: EventLog.EventLogShape,
): EventLog.EventLogShape => {
  let current: Current | undefined
  const read = (invocationId: string) =>
    settings().allowPriorUnknown === true
      ? log.readManualMessageContext(sessionId, { current: invocationId })
      : log.readModelContext(sessionId, { current: invocationId })
  let lastSequence = 0
  // A snapshot whose digests and tail nobody read yet, and the fresh read they must equal once read
  // (after the next commit moved the live context's hash and tail on).
  let unread: { readonly source: EventLog.ModelContextSource; readonly fresh: EventLog.ModelContextSource } | undefined
  const appendBatch: EventLog.EventLogShape["appendBatch"] = (leading, complete) =>
    Effect.gen(function* () {
      // A request is built inside its commit, after the settlements and steering that ride it.
      let trailing: ReadonlyArray<EventWrite.EventWrite> = []
      const spied = complete === undefined ? undefined : (sequences: ReadonlyArray<number>, prior?: (sessionId: string) => number | undefined) => (trailing = complete(sequences, prior))
      const sequences = yield* log.appendBatch(leading, spied)
      const writes = [...leading, ...trailing]
      // A batch of another session's run is that session's (a run's batches hold its own session only).
      if (writes.every((write) => write.event.invocation.sessionId !== sessionId)) return sequences
      // An opening starts the comparison of its run, before a request that rides its commit.
      const opening = writes.find((write) => write.event.fact.kind === "invocation_opened")
      // An invocation opened and ended in one batch (an abandoned handoff's successor) is never live.
      const endedAtOnce = writes.some((write) => write.event.fact.kind === "invocation_ended" && write.event.invocation.invocationId === opening?.event.invocation.invocationId)
      if (opening !== undefined && opening.event.fact.kind === "invocation_opened" && !endedAtOnce) {
        const { invocationId } = opening.event.invocation
        const configuration = opening.event.fact.configuration
        const live = yield* LiveContext.load(log, sessionId, invocationId, configuration, settings().allowPriorUnknown === true)
        current = { invocationId, configuration, live }
      }
      for (const [index, write] of writes.entries()) {
        const fact: Fact.Fact = write.event.fact
        // A summary request (docs/engine.md §5.12) is built from its own capture, not as a main request.
        if (fact.kind !== "model_requested" || fact.purpose !== "main" || current === undefined) continue
        // What precedes the request (this batch's settlements and steering included) is its source:
        // a read now sees the request itself too, which projects to nothing in the prompt.
        const fresh = yield* read(current.invocationId)
        const previous = comparison.requests.at(-1)
        const request = rebuild(settings(), current.configuration, fresh)
        comparison.expected.push(request)
        comparison.requests.push(fact)
        if (Digest.modelInput(request) !== fact.inputDigest) {
          comparison.mismatches.push(`request ${fact.stepId}: inputDigest differs from one rebuilt from a fresh read`)
        }
        const before = index > 0 ? sequences[index - 1]! : lastSequence
        if (fresh.sourceEvidence.scope.kind === "lineage") {
          // A continuation's, or a successor's that replays one: its lineage through the rows before it.
          const evidence = lineageEvidence(yield* log.events(sessionId), fresh.sourceEvidence.scope, current.invocationId, before)
          if (fact.sourceHighWater === evidence.highWater && fact.sourceDigest === evidence.digest) continue
        } else {
          const hash = yield* log.sessionHash(sessionId, fact.sourceHighWater)
          if (fact.sourceHighWater === before && hash.digest(before) === fact.sourceDigest) continue
        }
        // A physical retry re-sends the frozen request of its logical step, with that step's evidence.
        const isRetry =
          previous !== undefined &&
          previous.inputDigest === fact.inputDigest &&
          previous.sourceHighWater === fact.sourceHighWater &&
          previous.sourceDigest === fact.sourceDigest
        if (isRetry) comparison.retries++
        else comparison.mismatches.push(`request ${fact.stepId}: source evidence differs from the log before it`)
      }
      if (sequences.length > 0) lastSequence = sequences[sequences.length - 1]!
      if (opening === undefined && current !== undefined) {
        for (const [index, write] of writes.entries()) {
          current.live.apply({ sequence: sequences[index]!, event: write.event }, write.json)
        }
        if (unread !== undefined) {
          const { source, fresh } = unread
          unread = undefined
          if (
            source.sourceEvidence.digest !== fresh.sourceEvidence.digest ||
            source.effectiveSourceDigest !== fresh.effectiveSourceDigest
          ) {
            comparison.mismatches.push(`a snapshot's digests read after the next commit differ from a fresh read at its own cut`)
          }
          // Its tail too is the one it saw, not the live context's as it stands after the commit.
          if (!isDeepStrictEqual(source.tail, fresh.tail)) {
            comparison.mismatches.push(`a snapshot's tail read after the next commit differs from a fresh read at its own cut`)
          }
        }
        if (writes.some((write) => write.event.fact.kind === "invocation_ended")) {
          // A standalone compaction's checkpoint commits with its terminal: nothing is live after it.
          current = undefined
        } else {
          // An archive makes the live context read the log again, as the engine's does; an adopted
          // checkpoint, which the engine rebuilds its context over (docs/engine.md §5.12), is read anew here.
          if (current.live.stale || writes.some((write) => write.event.fact.kind === "context_checkpoint_recorded")) {
            current.live = yield* LiveContext.load(log, sessionId, current.invocationId, current.configuration, settings().allowPriorUnknown === true)
          }
          const fresh = yield* read(current.invocationId)
          comparison.snapshots++
          const cached = current.live.snapshot()
          if (!Result.isSuccess(cached) || !isDeepStrictEqual(cached.success, fresh)) {
            comparison.mismatches.push(
              `after ${writes.map((write) => write.event.fact.kind).join("+")} at ${sequences.join(",")}: ` +
                `live ${JSON.stringify(cached)} != fresh ${JSON.stringify(fresh)}`,
            )
          }
          const deferred = current.live.snapshot()
          if (Result.isSuccess(deferred)) unread = { source: deferred.success, fresh }
        }
      }
      return sequences
    })
  return { ...log, appendBatch, append: (write) => Effect.map(appendBatch([write]), (sequences) => sequences[0]!) }
}

/** A comparison with nothing compared yet. */
export const newComparison = (): Comparison => ({ snapshots: 0, expected: [], requests: [], retries: 0, mismatches: [] })

/**
 * A scripted engine whose log is wrapped by `comparing` over session `session-1`, with the comparison
 * and the settings the spy rebuilds requests with (set them to each run's input before it starts).
 */
export const comparedSetup = (script: ScriptedServer.ServerOptions["script"]) =>
  Effect.gen(function* () {
    const comparison = newComparison()
    const current: { settings?: Settings } = {}
    const context = yield* setup({ script }, undefined, {}, { wrapLog: (log) => comparing(comparison, "session-1", () => current.settings!, log) })
    return { context, comparison, current }
  })
