/**
 * Every validation rule of docs/log-format.md §2 that a schema cannot state alone, as pure functions that
 * return `Result<A, FactError>`. Decoding (`Codec.ts`) runs the schema, then these rules; the store
 * adds the rules that need the log (docs/log-format.md §3.3).
 */
import { Result } from "effect"
import * as Archive from "./Archive.ts"
import * as Canonical from "./Canonical.ts"
import * as Digest from "./Digest.ts"
import type { InvocationConfiguration } from "./Configuration.ts"
import type { RuntimeEvent } from "./Event.ts"
import type { ContextCheckpoint } from "./ModelContext.ts"
import type { Fact } from "./Fact.ts"
import { factError, type FactError } from "./FactError.ts"
import type { Invocation } from "./Identity.ts"
import { sameInvocation } from "./Identity.ts"
import type { DeliveredMessage, InvocationInput, MessageInput } from "./Input.ts"
import type { ContinuationClaim, HandoffIntent, HandoffPause, HandoffTools } from "./Lineage.ts"
import { successorOf } from "./Lineage.ts"
import {
  MAX_CWD_BYTES,
  MAX_DELIVERED_MESSAGE_BYTES,
  MAX_MESSAGE_TEXT_BYTES,
  MAX_PAGE_CHARS,
  MAX_ARCHIVE_REF_CHARS,
  MAX_SYSTEM_PROMPT_BYTES,
} from "./Limits.ts"
import type { InvocationOutcome } from "./Outcome.ts"
import * as Summary from "./Summary.ts"
import type { ToolCallIdentity } from "./ToolCall.ts"
import { operationKey } from "./Fact.ts"
import { providerOperationId } from "./ToolCall.ts"

export type Validation<A = void> = Result.Result<A, FactError>

const ok: Validation = Result.succeed(undefined)

/** Runs checks in order and returns the first failure. */
const all = (...checks: ReadonlyArray<() => Validation>): Validation => {
  for (const check of checks) {
    const result = check()
    if (Result.isFailure(result)) return result
  }
  return ok
}

const require = (condition: boolean, rule: FactError["rule"], message: string): Validation =>
  condition ? ok : Result.fail(factError(rule, message))

export const messageInput = (content: MessageInput): Validation =>
  require(
    Canonical.utf8Length(content.text) <= MAX_MESSAGE_TEXT_BYTES,
    "message_too_large",
    `message text exceeds ${MAX_MESSAGE_TEXT_BYTES} UTF-8 bytes`,
  )

export const deliveredMessage = (message: DeliveredMessage): Validation =>
  all(
    () => messageInput(message.content),
    () =>
      require(
        Canonical.utf8Length(Canonical.stringify(message)) <= MAX_DELIVERED_MESSAGE_BYTES,
        "delivered_message_too_large",
        `delivered message exceeds ${MAX_DELIVERED_MESSAGE_BYTES} serialized bytes`,
      ),
    () =>
      require(
        message.submittedContentDigest === Digest.messageContent(message.content),
        "message_digest",
        "submittedContentDigest does not match the message content",
      ),
  )

export const configuration = (value: InvocationConfiguration): Validation =>
  all(
    () =>
      value.systemPrompt === undefined
        ? ok
        : all(
            () => require(value.systemPrompt!.text.trim().length > 0, "system_prompt_blank", "system prompt is blank"),
            () =>
              require(
                Canonical.utf8Length(value.systemPrompt!.text) <= MAX_SYSTEM_PROMPT_BYTES,
                "system_prompt_too_large",
                `system prompt exceeds ${MAX_SYSTEM_PROMPT_BYTES} UTF-8 bytes`,
              ),
          ),
    () =>
      require(
        Canonical.utf8Length(value.cwd) <= MAX_CWD_BYTES,
        "cwd_too_large",
        `cwd exceeds ${MAX_CWD_BYTES} UTF-8 bytes`,
      ),
  )

export const checkpoint = (value: ContextCheckpoint): Validation => {
  const summary = Summary.validateSummary(value.summary.text)
  return Result.isFailure(summary)
    ? Result.fail(factError("summary_invalid", `checkpoint summary is invalid: ${summary.failure}`))
    : ok
}

export const handoffTools = (tools: HandoffTools): Validation => {
  for (let index = 1; index < tools.names.length; index++) {
    if (!(tools.names[index - 1]! < tools.names[index]!)) {
      return Result.fail(factError("handoff_tools", "handoff tool names must be sorted and unique"))
    }
  }
  return ok
}

/** An intent is valid against the run it pauses (`source`). */
export const handoffIntent = (intent: HandoffIntent, source: Invocation): Validation =>
  all(
    () =>
      require(
        intent.successorRunId !== intent.rootRunId && intent.successorRunId !== source.runId,
        "handoff_intent",
        "the successor run must differ from the root run and the paused run",
      ),
    () =>
      require(
        intent.successorInvocationId !== source.invocationId,
        "handoff_intent",
        "the successor invocation must differ from the paused invocation",
      ),
    () =>
      require(
        intent.successorRunId !== intent.successorInvocationId,
        "handoff_intent",
        "the successor run id must differ from the successor invocation id",
      ),
  )

export const handoffPause = (pause: HandoffPause, source: Invocation): Validation =>
  all(
    () => handoffIntent(pause.intent, source),
    () => handoffTools(pause.execution.tools),
  )

/** The boundary rules shared by continuation and handoff: the claim targets its own session. */
const claimSession = (claim: ContinuationClaim, target: Invocation): Validation =>
  require(
    claim.source.invocation.sessionId === target.sessionId,
    "claim_target",
    "a claim must target the session of its source",
  )

/** A continuation opens a different turn, run and invocation than its source. */
export const continuationClaim = (claim: ContinuationClaim, target: Invocation): Validation =>
  all(
    () => claimSession(claim, target),
    () =>
      require(
        claim.source.invocation.turnId !== target.turnId &&
          claim.source.invocation.runId !== target.runId &&
          claim.source.invocation.invocationId !== target.invocationId,
        "claim_target",
        "a continuation needs a different turn, run and invocation than its source",
      ),
  )

/** `validateClaim` of docs/log-format.md §2.6: a handoff claim against its pause and the opening invocation. */
export const handoffClaim = (claim: ContinuationClaim, pause: HandoffPause, target: Invocation): Validation =>
  all(
    () => claimSession(claim, target),
    () => handoffPause(pause, claim.source.invocation),
    () => require(claim.id === pause.intent.claimId, "handoff_claim", "the claim id differs from the intent's claim id"),
    () =>
      require(
        claim.replay.routeIdentity === pause.execution.replay.routeIdentity,
        "handoff_claim",
        "the claim's route identity differs from the pause's",
      ),
    () =>
      require(
        pause.execution.replayBase === undefined || pause.execution.replayBase === claim.base.highWater,
        "handoff_claim",
        "the pause's replay base differs from the claim's base",
      ),
    () =>
      require(
        sameInvocation(target, successorOf(pause.intent, claim.source.invocation)),
        "handoff_claim",
        "the opening is not the successor named by the handoff intent",
      ),
  )

export const invocationInput = (input: InvocationInput, target: Invocation): Validation => {
  switch (input.kind) {
    case "message":
      return messageInput(input.content)
    case "continuation":
      return continuationClaim(input.claim, target)
    case "handoff":
      return handoffClaim(input.claim, input.pause, target)
    case "context_compact":
      return ok
  }
}

export const opening = (input: InvocationInput, value: InvocationConfiguration, target: Invocation): Validation =>
  all(
    () => invocationInput(input, target),
    () => configuration(value),
    () =>
      require(
        (input.kind !== "continuation" && input.kind !== "handoff") || value.workspaceIdentity !== undefined,
        "workspace_identity_required",
        "continuation and handoff openings need a workspace identity",
      ),
  )

export const toolCall = (operationId: string, call: ToolCallIdentity): Validation =>
  call.origin.kind === "provider"
    ? require(
        operationId === providerOperationId(call.origin.stepId, call.toolCallId),
        "operation_id",
        "a provider call's operationId must be \"{stepId}:{toolCallId}\"",
      )
    : ok

export const archivedPlaceholder = (placeholder: Archive.ArchivedPlaceholder): Validation => {
  const { identity, page } = placeholder
  const reference = Archive.resourceRef(identity.runtimeEventId)
  const fail = (message: string) => Result.fail(factError("archive_placeholder", message))
  if (reference.length > MAX_ARCHIVE_REF_CHARS) return fail("resource reference is too long")
  if (page.offset !== 0) return fail("an archived placeholder's page starts at offset 0")
  if (page.text.length > page.totalChars) return fail("page text is longer than the body")
  if (page.totalChars <= MAX_PAGE_CHARS) return fail("a body of at most 7,500 UTF-16 units is never archived")
  const end = page.offset + page.text.length
  if (end < page.totalChars ? page.next !== end : page.next !== undefined) return fail("page.next is inconsistent")
  if (placeholder.originalEstimatedTokens !== Math.ceil(page.totalChars / 4)) {
    return fail("originalEstimatedTokens must be ceil(body UTF-16 length / 4)")
  }
  if (Canonical.stringify(Archive.modelValue(identity, page)).length > MAX_PAGE_CHARS) {
    return fail("the archived model value exceeds 7,500 UTF-16 units")
  }
  return ok
}

export const outcome = (value: InvocationOutcome, invocation: Invocation): Validation =>
  value.kind === "handoff_paused" ? handoffPause(value.pause, invocation) : ok

/** The rules of one fact that need only the fact and its invocation. */
export const fact = (value: Fact, invocation: Invocation): Validation => {
  switch (value.kind) {
    case "invocation_opened":
      return opening(value.input, value.configuration, invocation)
    case "message_steered":
      return deliveredMessage(value.message)
    case "context_checkpoint_recorded":
      return checkpoint(value.checkpoint)
    case "tool_result_archived":
      return archivedPlaceholder(value.placeholder)
    case "tool_dispatched":
    case "tool_rejected":
      return toolCall(value.operationId, value.call)
    case "invocation_ended":
      return outcome(value.outcome, invocation)
    case "model_requested":
    case "model_observed":
    case "model_completed":
    case "model_interrupted":
    case "tool_settled":
      return ok
  }
}

// ---------------------------------------------------------------------------------------------
// Well-formed text: what the log stores must survive every encoder unchanged.

/** A UTF-16 unit that is half of a surrogate pair without its other half (the `u` flag pairs them). */
const LONE_SURROGATE = /\p{Cs}/u

/** Whether `text` is well-formed Unicode: every surrogate is part of a pair. */
export const isWellFormedText = (text: string): boolean => !LONE_SURROGATE.test(text)

/**
 * `text` with each lone surrogate replaced by U+FFFD, as a UTF-8 encoder writes it: for writers that
 * must store text they did not produce (a thrown error's message) rather than refuse it.
 */
export const toWellFormedText = (text: string): string => text.replace(/\p{Cs}/gu, "\ufffd")

/**
 * Every string of `value` (object keys included) is well-formed Unicode. A lone surrogate becomes
 * U+FFFD in UTF-8 (a SQLite or PostgreSQL text column, an HTTP body) while the canonical JSON keeps
 * its escape, so the stored copies of one value would differ; it is refused instead. `label` names
 * the value in the message.
 */
export const wellFormed = (value: unknown, label = "value"): Validation => {
  const path: Array<string> = [label]
  const visit = (node: unknown): boolean => {
    if (typeof node === "string") return isWellFormedText(node)
    if (typeof node !== "object" || node === null) return true
    if (Array.isArray(node)) {
      for (let index = 0; index < node.length; index++) {
        path.push(String(index))
        if (!visit(node[index])) return false
        path.pop()
      }
      return true
    }
    for (const [key, child] of Object.entries(node)) {
      path.push(key)
      if (!isWellFormedText(key) || !visit(child)) return false
      path.pop()
    }
    return true
  }
  return visit(value)
    ? ok
    : Result.fail(factError("text_ill_formed", `${path.join(".")} is not well-formed Unicode (it holds a lone surrogate)`))
}

/**
 * A stored id or name: well-formed and without NUL. Ids are index keys and columns in both dialects,
 * and a PostgreSQL text column cannot hold NUL.
 */
export const storedId = (value: string, label: string): Validation =>
  all(
    () => wellFormed(value, label),
    () => require(!value.includes("\u0000"), "id_has_nul", `${label} contains NUL`),
  )

/** The four ids of an invocation. */
export const invocationIds = (invocation: Invocation): Validation =>
  all(
    () => storedId(invocation.sessionId, "invocation.sessionId"),
    () => storedId(invocation.turnId, "invocation.turnId"),
    () => storedId(invocation.runId, "invocation.runId"),
    () => storedId(invocation.invocationId, "invocation.invocationId"),
  )

const prefixed = (prefix: string, invocation: Invocation): ReadonlyArray<readonly [string, string]> => [
  [`${prefix}.sessionId`, invocation.sessionId],
  [`${prefix}.turnId`, invocation.turnId],
  [`${prefix}.runId`, invocation.runId],
  [`${prefix}.invocationId`, invocation.invocationId],
]

const intentIds = (prefix: string, intent: HandoffIntent): ReadonlyArray<readonly [string, string]> => [
  [`${prefix}.handoffId`, intent.handoffId],
  [`${prefix}.hostEpoch`, intent.hostEpoch],
  [`${prefix}.rootRunId`, intent.rootRunId],
  [`${prefix}.successorRunId`, intent.successorRunId],
  [`${prefix}.successorInvocationId`, intent.successorInvocationId],
  [`${prefix}.claimId`, intent.claimId],
]

/** The ids and names a fact carries (what the log indexes or looks up), labelled by their path. */
export const factIds = (fact: Fact): ReadonlyArray<readonly [string, string]> => {
  const key = operationKey(fact)
  const ids: Array<readonly [string, string]> = key === undefined ? [] : [["fact.operationKey", key]]
  switch (fact.kind) {
    case "invocation_opened": {
      const binding = fact.configuration.model
      if (binding !== undefined) {
        ids.push(["fact.configuration.model.connectionId", binding.connectionId])
        ids.push(["fact.configuration.model.connectionSlug", binding.connectionSlug])
        ids.push(["fact.configuration.model.model", binding.model])
      }
      const input = fact.input
      if (input.kind === "continuation" || input.kind === "handoff") {
        ids.push(["fact.input.claim.id", input.claim.id], ...prefixed("fact.input.claim.source.invocation", input.claim.source.invocation))
      }
      if (input.kind === "handoff") ids.push(...intentIds("fact.input.pause.intent", input.pause.intent))
      break
    }
    case "model_requested":
      ids.push(["fact.modelId", fact.modelId])
      if (fact.context !== undefined) ids.push(["fact.context.providerId", fact.context.providerId])
      break
    case "tool_dispatched":
    case "tool_rejected":
      ids.push(["fact.name", fact.name], ["fact.call.toolCallId", fact.call.toolCallId])
      if (fact.call.origin.kind === "provider") ids.push(["fact.call.origin.stepId", fact.call.origin.stepId])
      break
    case "message_steered":
      ids.push(["fact.message.messageId", fact.message.messageId])
      break
    case "context_checkpoint_recorded":
      ids.push(["fact.checkpoint.summaryStepId", fact.checkpoint.summaryStepId])
      break
    case "tool_result_archived":
      ids.push(
        ["fact.placeholder.identity.toolCallId", fact.placeholder.identity.toolCallId],
        ["fact.placeholder.identity.toolName", fact.placeholder.identity.toolName],
      )
      break
    case "invocation_ended":
      if (fact.outcome.kind === "handoff_paused") ids.push(...intentIds("fact.outcome.pause.intent", fact.outcome.pause.intent))
      break
    case "model_completed":
      // A call's id and name become a dispatch's or a rejection's, and recovery builds a rejection from them.
      fact.output.parts.forEach((part, index) => {
        if (part.kind === "tool_call") ids.push([`fact.output.parts.${index}.id`, part.id], [`fact.output.parts.${index}.name`, part.name])
      })
      break
    case "model_observed":
      if (fact.event.kind === "tool_call") ids.push(["fact.event.id", fact.event.id], ["fact.event.name", fact.event.name])
      break
    case "model_interrupted":
    case "tool_settled":
      break
  }
  return ids
}

/**
 * The text rules of one fact of `invocation`: every string is well-formed Unicode, and the ids and
 * names hold no NUL. Admission runs them through `Codec.decodeFact`, every write through `EventWrite`.
 */
export const wellFormedFact = (fact: Fact, invocation: Invocation): Validation => {
  const text = all(
    () => wellFormed(invocation, "invocation"),
    () => wellFormed(fact, "fact"),
  )
  if (Result.isFailure(text)) return text
  for (const [label, value] of [...prefixed("invocation", invocation), ...factIds(fact)]) {
    const checked = storedId(value, label)
    if (Result.isFailure(checked)) return checked
  }
  return ok
}

/**
 * The NUL rule of `wellFormedFact` alone, in the same order, for a writer that already knows every
 * string of the event is well-formed (the canonical writer notes it while it writes): with that
 * known, it fails exactly when `wellFormedFact` does, with the same error.
 */
export const storedIdsWithoutNul = (fact: Fact, invocation: Invocation): Validation => {
  for (const [label, value] of [...prefixed("invocation", invocation), ...factIds(fact)]) {
    if (value.includes("\u0000")) return Result.fail(factError("id_has_nul", `${label} contains NUL`))
  }
  return ok
}

/** The text rules of a whole event (`wellFormedFact` plus its id), checked by every write. */
export const wellFormedEvent = (event: RuntimeEvent): Validation =>
  all(
    () => wellFormed(event.id, "id"),
    () => wellFormedFact(event.fact, event.invocation),
  )
