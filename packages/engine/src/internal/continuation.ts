/**
 * Continuation (docs/engine.md §5.9): a new turn that resumes a sealed run through a claim on its
 * exact boundary (the run-prefix digest), replaying the run's lineage — its chain of runs over the
 * base it inherits, never later runs of the session — as the first request's prompt. `prepare` runs
 * steps 1–8 and writes nothing; every failure is `ReconciliationRequired`.
 */
import { Identity, type Lineage, type Prompt } from "@maka/facts"
import type { EventLog } from "@maka/event-log"
import { Ids } from "@maka/tools"
import { Effect } from "effect"
import * as EngineError from "../EngineError.ts"
import { inheritedBase, readError } from "./handoff.ts"
import type { Run } from "./run-context.ts"

export const UNAVAILABLE_TOOL_MESSAGE = "continuation requires an unavailable tool"
export const UNSTABLE_BOUNDARY_MESSAGE = "continuation requires stable user/tool replay boundaries"

const refused = (message: string) => EngineError.reconciliation(message)

/** The tool names the replayed prompt calls locally. */
const calledTools = (prompt: Prompt.Prompt): ReadonlyArray<string> =>
  prompt.flatMap((message) =>
    message.role === "assistant" ? message.parts.flatMap((part) => (part.kind === "tool_call" && !part.providerExecuted ? [part.toolName] : [])) : [],
  )

/** docs/engine.md §5.9 step 6: the replay starts with a user message and ends with a user or tool message. */
const stableBoundaries = (prompt: Prompt.Prompt): boolean => {
  const messages = prompt.filter((message) => message.role !== "system")
  const first = messages[0]
  const last = messages[messages.length - 1]
  return first?.role === "user" && (last?.role === "user" || last?.role === "tool")
}

/** Why a compaction run cannot be continued: it sends no main request, so it has no boundary. */
export const COMPACTION_SOURCE_MESSAGE = "a compaction run has no boundary to continue: continue the run before it"

/**
 * The claim of a continuation of `source` (docs/engine.md §5.9): the sealed run's exact boundary, the
 * base it inherits, and the replay digest of the first request `run` would send over the lineage.
 * `request` builds that request (the runner's own prompt building) from a source.
 */
export const prepare = (
  run: Run,
  source: Identity.Invocation,
  request: (context: EventLog.ModelContextSource) => Effect.Effect<{ readonly inputDigest: string; readonly prompt: Prompt.Prompt }, EngineError.EngineError>,
): Effect.Effect<Lineage.ContinuationClaim, EngineError.EngineError, Ids.Ids> =>
  Effect.gen(function* () {
    const { log, settings } = run
    const target = settings.invocation
    // A source in another session was refused at admission (docs/engine.md §5.2).
    if (source.turnId === target.turnId || source.runId === target.runId || source.invocationId === target.invocationId) {
      return yield* Effect.fail(refused("a continuation opens a new turn, run and invocation"))
    }
    // Steps 1–2: the exact sealed boundary, and the same workspace.
    const prefix = yield* Effect.mapError(log.runPrefix(source.sessionId, source.runId), readError)
    if (prefix === undefined || !Identity.sameInvocation(prefix.invocation, source)) {
      return yield* Effect.fail(refused("no run of that invocation"))
    }
    const last = prefix.events[prefix.events.length - 1]!.event.fact
    if (last.kind !== "invocation_ended") return yield* Effect.fail(refused("a continuation claims a sealed run"))
    if (last.outcome.kind === "handoff_paused") return yield* Effect.fail(refused("a paused run is resumed by its handoff successor"))
    const opening = prefix.events[0]!.event.fact
    if (opening.kind !== "invocation_opened") return yield* Effect.fail(refused("the source has no opening"))
    // A compaction sends no main request: it has no boundary a turn could go on from.
    if (opening.input.kind === "context_compact") return yield* Effect.fail(refused(COMPACTION_SOURCE_MESSAGE))
    const workspace = settings.configuration.workspaceIdentity
    if (workspace === undefined || workspace !== opening.configuration.workspaceIdentity) {
      return yield* Effect.fail(refused("a continuation runs in the source's workspace"))
    }
    // Step 3: the base the lineage inherits.
    const base = yield* inheritedBase(log, source, opening)
    // Steps 4–6: the replay over the lineage, its tools and its boundaries.
    const context = yield* Effect.mapError(log.readModelContext(source.sessionId, { lineageOf: source.invocationId }), readError)
    const replay = yield* request(context)
    const names = new Set(settings.tools.names)
    if (calledTools(replay.prompt).some((name) => !names.has(name))) return yield* Effect.fail(refused(UNAVAILABLE_TOOL_MESSAGE))
    if (!stableBoundaries(replay.prompt)) return yield* Effect.fail(refused(UNSTABLE_BOUNDARY_MESSAGE))
    // Steps 7–8: the evidence and a fresh claim id.
    return {
      id: yield* Ids.next,
      source: { invocation: prefix.invocation, highWater: prefix.highWater, digest: prefix.digest },
      base,
      replay: { version: 1, digest: replay.inputDigest, routeIdentity: run.model.routeIdentity },
    } satisfies Lineage.ContinuationClaim
  })
