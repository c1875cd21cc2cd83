import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Effect, Result, Schema } from "effect"
import {
  Archive,
  Canonical,
  Codec,
  Digest,
  Event,
  Fact,
  Identity,
  Interaction,
  Lineage,
  Model,
} from "@maka/facts"
import { FactBuilders } from "@maka/testkit"

/**
 * Encode → decode is the identity for every fact kind over generated values. Values come from the
 * schemas' own arbitraries; `repair` then makes the cross-field rules hold that a generator cannot
 * see (a digest of a sibling field, sorted names, distinct successor ids), so every generated event is
 * valid and the property tests round trips, not rejections.
 */

const suffix = (value: string, tail: string): string => (value.length + tail.length <= 512 ? value + tail : value.slice(0, 512 - tail.length) + tail)

const repairPause = (pause: Lineage.HandoffPause, source: Identity.Invocation): Lineage.HandoffPause => {
  const intent = { ...pause.intent }
  if (intent.successorRunId === intent.rootRunId || intent.successorRunId === source.runId) {
    intent.successorRunId = suffix(intent.successorRunId, "~s")
    if (intent.successorRunId === intent.rootRunId || intent.successorRunId === source.runId) intent.successorRunId = suffix(intent.successorRunId, "~t")
  }
  if (intent.successorInvocationId === source.invocationId) intent.successorInvocationId = suffix(intent.successorInvocationId, "~i")
  if (intent.successorInvocationId === intent.successorRunId) intent.successorInvocationId = suffix(intent.successorInvocationId, "~j")
  const names = [...new Set(pause.execution.tools.names)].sort()
  return { ...pause, intent, execution: { ...pause.execution, tools: { ...pause.execution.tools, names } } }
}

const LONG_TEXT = "archived result line\n".repeat(600)

const repair = (event: Event.RuntimeEvent): Event.RuntimeEvent => {
  const fact = event.fact
  switch (fact.kind) {
    case "invocation_opened": {
      let configuration = fact.configuration
      if (configuration.systemPrompt !== undefined && configuration.systemPrompt.text.trim() === "") {
        configuration = { ...configuration, systemPrompt: { text: "system" } }
      }
      const input = fact.input
      if (input.kind === "continuation" || input.kind === "handoff") {
        if (configuration.workspaceIdentity === undefined) {
          configuration = { ...configuration, workspaceIdentity: FactBuilders.WORKSPACE_IDENTITY }
        }
      }
      if (input.kind === "continuation") {
        const source = {
          ...input.claim.source.invocation,
          sessionId: event.invocation.sessionId,
          turnId: suffix(event.invocation.turnId, "~turn"),
          runId: suffix(event.invocation.runId, "~run"),
          invocationId: suffix(event.invocation.invocationId, "~inv"),
        }
        const claim = { ...input.claim, source: { ...input.claim.source, invocation: source } }
        return { ...event, fact: { ...fact, configuration, input: { ...input, claim } } }
      }
      if (input.kind === "handoff") {
        const source = { ...input.claim.source.invocation, sessionId: event.invocation.sessionId }
        const pause = repairPause(input.pause, source)
        const execution =
          pause.execution.replayBase === undefined ? pause.execution : { ...pause.execution, replayBase: input.claim.base.highWater }
        const claim = {
          ...input.claim,
          id: pause.intent.claimId,
          source: { ...input.claim.source, invocation: source },
          replay: { ...input.claim.replay, routeIdentity: pause.execution.replay.routeIdentity },
        }
        return {
          ...event,
          invocation: Lineage.successorOf(pause.intent, source),
          fact: { ...fact, configuration, input: { ...input, claim, pause: { ...pause, execution } } },
        }
      }
      return { ...event, fact: { ...fact, configuration } }
    }
    case "message_steered": {
      const content = fact.message.content
      return {
        ...event,
        fact: { ...fact, message: { ...fact.message, submittedContentDigest: Digest.messageContent(content) } },
      }
    }
    case "context_checkpoint_recorded":
      return {
        ...event,
        fact: { ...fact, checkpoint: { ...fact.checkpoint, summary: { format: "sections_v1", text: FactBuilders.VALID_SUMMARY } } },
      }
    case "tool_result_archived": {
      const identity = fact.placeholder.identity
      const placeholder = Archive.prepare(identity.runtimeEventId, identity.toolCallId, identity.toolName, {
        kind: "projection",
        projection: { kind: "text", text: LONG_TEXT + identity.toolName },
      })
      assert.isDefined(placeholder)
      return { ...event, fact: { ...fact, placeholder: placeholder! } }
    }
    case "tool_dispatched":
    case "tool_rejected":
      return fact.call.origin.kind === "provider"
        ? { ...event, fact: { ...fact, operationId: `${fact.call.origin.stepId}:${fact.call.toolCallId}` } }
        : event
    case "invocation_ended":
      return fact.outcome.kind === "handoff_paused"
        ? { ...event, fact: { ...fact, outcome: { ...fact.outcome, pause: repairPause(fact.outcome.pause, event.invocation) } } }
        : event
    default:
      return event
  }
}

const roundTrips = (event: Event.RuntimeEvent): boolean => {
  const json = Codec.encodeEventJson(event)
  const decoded = Codec.decodeEventJson(json)
  if (Result.isFailure(decoded)) {
    throw new Error(`${event.fact.kind} did not decode: ${decoded.failure.message}\n${json.slice(0, 2000)}`)
  }
  return Codec.encodeEventJson(decoded.success) === json && Canonical.equal(decoded.success, event)
}

const factSchemas = {
  invocation_opened: Fact.InvocationOpened,
  model_requested: Fact.ModelRequested,
  model_observed: Fact.ModelObserved,
  model_completed: Fact.ModelCompleted,
  model_interrupted: Fact.ModelInterrupted,
  tool_dispatched: Fact.ToolDispatched,
  tool_settled: Fact.ToolSettled,
  tool_rejected: Fact.ToolRejected,
  message_steered: Fact.MessageSteered,
  context_checkpoint_recorded: Fact.ContextCheckpointRecorded,
  tool_result_archived: Fact.ToolResultArchived,
  invocation_ended: Fact.InvocationEnded,
} as const

describe("round trip", () => {
  it("names a schema for every fact kind", () => {
    assert.deepStrictEqual(Object.keys(factSchemas).sort(), [...Fact.FACT_KINDS].sort())
  })

  for (const [kind, schema] of Object.entries(factSchemas)) {
    it.effect(`encodes then decodes every generated ${kind} event to itself`, () =>
      Effect.gen(function* () {
        const arbitrary = Arbitrary.schema(
          Schema.Struct({ id: Identity.EventId, recordedAt: Identity.EpochMillis, invocation: Identity.Invocation, fact: schema }),
        )
        const result = yield* Arbitrary.checkEffect(arbitrary, (event) => roundTrips(repair(event)), { runs: 60, seed: 7 })
        assert.strictEqual(Arbitrary.formatCheckFailure(result), undefined)
        assert.strictEqual(result._tag, "Passed")
      }),
    )
  }

  it.effect("round-trips generated stored events through the StoredEvent schema", () =>
    Effect.gen(function* () {
      const arbitrary = Arbitrary.schema(Event.StoredEvent)
      const result = yield* Arbitrary.checkEffect(
        arbitrary,
        (stored) => {
          const repaired = { sequence: stored.sequence, event: repair(stored.event) }
          const decoded = Codec.decodeStoredEvent(JSON.parse(Canonical.stringify(repaired)))
          return Result.isSuccess(decoded) && Canonical.equal(decoded.success, repaired)
        },
        { runs: 100, seed: 11 },
      )
      assert.strictEqual(Arbitrary.formatCheckFailure(result), undefined)
    }),
  )
})

describe("records outside facts", () => {
  const records = {
    InteractionRecord: Interaction.InteractionRecord,
    LogPrefix: Event.LogPrefix,
    ReadPage: Archive.ReadPage,
    ModelEvent: Model.ModelEvent,
  } as const
  for (const [name, schema] of Object.entries(records)) {
    it.effect(`encodes then decodes every generated ${name} to itself`, () =>
      Effect.gen(function* () {
        const decode = Codec.decodeClosed(schema)
        const result = yield* Arbitrary.checkEffect(
          Arbitrary.schema(schema),
          (value) => {
            const json = Canonical.stringify(value)
            const decoded = decode(JSON.parse(json))
            return Result.isSuccess(decoded) && Canonical.stringify(decoded.success) === json
          },
          { runs: 60, seed: 3 },
        )
        assert.strictEqual(Arbitrary.formatCheckFailure(result), undefined)
      }),
    )
  }
})
