import { Result } from "effect"
import { describe, expect, it } from "vitest"
import {
  Archive,
  Codec,
  Digest,
  EventWrite,
  Lineage,
  type Event,
  type FactError,
  type Identity,
  type Input,
} from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"

/**
 * Decoding rejects every invalid case docs/log-format.md §2 names. Each test starts from a valid event,
 * shows that it decodes, then changes exactly one thing and shows that the change is rejected, with
 * the rule `Validation.ts` names (`decode` for what the closed schema refuses).
 */

// ---------------------------------------------------------------------------------------------------
// Helpers

const KIB = 1024
const MIB = 1024 * KIB

type Path = ReadonlyArray<string | number>
type Container = { [key: string]: unknown }

const isContainer = (value: unknown): value is Container => typeof value === "object" && value !== null

/** The container at `path` inside `root`; fails the test when the path does not exist. */
const containerAt = (root: unknown, path: Path): Container => {
  let node = root
  for (const step of path) {
    if (!isContainer(node)) throw new Error(`no container at ${path.join(".")}`)
    node = node[step]
  }
  if (!isContainer(node)) throw new Error(`no container at ${path.join(".")}`)
  return node
}

/** A deep copy of `value` with `path` set to `replacement` (added when absent). */
const set = (value: unknown, path: Path, replacement: unknown): unknown => {
  const copy = structuredClone(value)
  const key = path[path.length - 1]!
  containerAt(copy, path.slice(0, -1))[key] = replacement
  return copy
}

/** A deep copy of `value` without the key at `path`. */
const remove = (value: unknown, path: Path): unknown => {
  const copy = structuredClone(value)
  const key = path[path.length - 1]!
  const parent = containerAt(copy, path.slice(0, -1))
  expect(key in parent).toBe(true)
  delete parent[key]
  return copy
}

const expectAccepted = <A>(result: Result.Result<A, FactError.FactError>): A => {
  if (Result.isFailure(result)) {
    expect.fail(`expected acceptance, got ${result.failure.rule}: ${result.failure.message}`)
  }
  return result.success
}

const expectRejected = <A>(result: Result.Result<A, FactError.FactError>, rule: FactError.FactRule): void => {
  if (Result.isSuccess(result)) expect.fail(`expected rejection by ${rule}, but the value was accepted`)
  expect(result.failure._tag).toBe("FactError")
  expect(result.failure.rule).toBe(rule)
}

const decode = (value: unknown) => Codec.decodeEvent(value)

/** The valid `event` decodes (as an object and through its canonical JSON). */
const expectValid = (event: Event.RuntimeEvent): void => {
  expectAccepted(decode(event))
  expectAccepted(Codec.decodeEventJson(Codec.encodeEventJson(event)))
}

const lastEvent = (history: History.History): Event.RuntimeEvent => history.events.at(-1)!.event

const nested = (depth: number): Identity.Json => (depth <= 1 ? [] : [nested(depth - 1)])

// ---------------------------------------------------------------------------------------------------
// Valid fixtures

const messageOpening = (): Event.RuntimeEvent => new History.History().open().opening.event

const contextCompactOpening = (): Event.RuntimeEvent =>
  new History.History().open({ input: { kind: "context_compact", requestFingerprint: "compact-1" } }).opening.event

const REQUEST_CONTEXT = {
  providerId: "openai-compatible",
  contextWindow: 128_000,
  declaredWindow: 100_000,
  modelContextWindow: 128_000,
}

const modelRequest = (): Event.RuntimeEvent => {
  const history = new History.History()
  history.open().request({ context: REQUEST_CONTEXT })
  return lastEvent(history)
}

const modelCompletion = (): Event.RuntimeEvent => {
  const history = new History.History()
  const run = history.open()
  const step = run.request()
  run.complete(step, FactBuilders.textStep("The repository holds a README."))
  return lastEvent(history)
}

/** A run with one completed step calling `call-1` and `call-2`. */
const toolRun = () => {
  const history = new History.History()
  const run = history.open()
  const stepId = run.request()
  run.complete(
    stepId,
    FactBuilders.toolCallStep([
      { id: "call-1", name: "list_files", input: { path: "." } },
      { id: "call-2", name: "read_file", input: { path: "README.md" } },
    ]),
  )
  return { history, run, stepId }
}

const steering = (): Event.RuntimeEvent => {
  const history = new History.History()
  history.open().steer("message-1", "Also look at the tests.")
  return lastEvent(history)
}

const delivered = (content: Input.MessageInput): Input.DeliveredMessage => ({
  messageId: "message-1",
  content,
  submittedContentDigest: Digest.messageContent(content),
})

const checkpointRecorded = (): Event.RuntimeEvent => {
  const history = new History.History()
  const run = history.open()
  run.checkpoint({
    mode: { kind: "mid_turn", anchorEventId: run.opening.event.id },
    coveredThrough: 1,
    sourceDigest: history.prefixDigest(),
    summary: { format: "sections_v1", text: FactBuilders.VALID_SUMMARY },
    summaryStepId: "invocation-1-step-1",
  })
  return lastEvent(history)
}

const ended = (outcome: Parameters<History.Run["end"]>[0]): Event.RuntimeEvent => {
  const history = new History.History()
  history.open().end(outcome)
  return lastEvent(history)
}

const claimOf = (source: Identity.Invocation): Lineage.ContinuationClaim => ({
  id: "claim-1",
  source: { invocation: source, highWater: 4, digest: FactBuilders.digestOf("run-prefix") },
  base: { highWater: 0, digest: FactBuilders.digestOf("session-base") },
  replay: { version: 1, digest: FactBuilders.digestOf("replay"), routeIdentity: FactBuilders.digestOf("route") },
})

/** A continuation of `turn-1`/`run-1`/`invocation-1`, opened as `turn-2`/`run-2`/`invocation-2`. */
const continuationOpening = (): Event.RuntimeEvent => {
  const history = new History.History()
  const source = history.open()
  source.end()
  return history.open({
    input: {
      kind: "continuation",
      claim: claimOf(source.invocation),
      requestFingerprint: FactBuilders.digestOf("continue"),
    },
  }).opening.event
}

/**
 * A run paused by handoff (`run-1`/`invocation-1`, root run `root-run`), its `handoff_paused`
 * terminal, and the successor's handoff opening (`run-1-successor`/`invocation-1-successor`).
 */
const handoff = () => {
  const history = new History.History()
  const paused = history.open()
  const pause = paused.pause({ rootRunId: "root-run" })
  const terminal = paused.end({ kind: "handoff_paused", pause }).event
  const claim: Lineage.ContinuationClaim = {
    ...claimOf(paused.invocation),
    id: pause.intent.claimId,
    // A copy, not the pause's object: structuredClone keeps shared references shared.
    replay: { ...pause.execution.replay },
  }
  const successor = Lineage.successorOf(pause.intent, paused.invocation)
  const opening = history.open({
    input: { kind: "handoff", claim, pause },
    turnId: successor.turnId,
    runId: successor.runId,
    invocationId: successor.invocationId,
  }).opening.event
  return { source: paused.invocation, pause, terminal, opening }
}

/** A text projection whose body is far over one page. */
const ARCHIVE_SOURCE: Archive.ArchiveSource = {
  kind: "projection",
  projection: { kind: "text", text: "a line of a long tool result\n".repeat(1_000) },
}

const archived = () => {
  const history = new History.History()
  const run = history.open()
  const settledId = FactBuilders.eventId(99)
  const placeholder = Archive.prepare(settledId, "call-1", "read_file", ARCHIVE_SOURCE)
  if (placeholder === undefined) throw new Error("the archive fixture must be archivable")
  run.archive(placeholder)
  return { event: lastEvent(history), placeholder, body: Archive.body(ARCHIVE_SOURCE) }
}

// ---------------------------------------------------------------------------------------------------

describe("envelope (docs/log-format.md §2, §2.1)", () => {
  it("rejects an unknown field at the top level of an event", () => {
    const event = messageOpening()
    expectValid(event)
    expectRejected(decode(set(event, ["extra"], 1)), "decode")
  })

  it("rejects an unknown field in the invocation", () => {
    const event = messageOpening()
    expectValid(event)
    expectRejected(decode(set(event, ["invocation", "extra"], "x")), "decode")
  })

  it("rejects an unknown field in the configuration's model binding", () => {
    const event = messageOpening()
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "configuration", "model", "extra"], true)), "decode")
  })

  it("rejects an unknown field in a model step part", () => {
    const event = modelCompletion()
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "output", "parts", 0, "extra"], true)), "decode")
  })

  it("rejects an unknown field in usage", () => {
    const event = modelCompletion()
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "output", "usage", "totalTokens"], 15)), "decode")
  })

  it("rejects an optional field present as undefined", () => {
    const opening = messageOpening()
    expectValid(opening)
    expectRejected(decode(set(opening, ["fact", "input", "content", "displayText"], undefined)), "decode")
    expectRejected(decode(set(opening, ["fact", "configuration", "systemPrompt"], undefined)), "decode")
    const completion = modelCompletion()
    expectValid(completion)
    expectRejected(decode(set(completion, ["fact", "output", "usage", "reasoningTokens"], undefined)), "decode")
  })

  it("rejects an empty id", () => {
    const event = modelCompletion()
    expectValid(event)
    expectRejected(decode(set(event, ["invocation", "turnId"], "")), "decode")
    expectRejected(decode(set(event, ["fact", "stepId"], "")), "decode")
  })

  it("rejects an id of 513 UTF-16 units and accepts 512", () => {
    const event = modelCompletion()
    const id512 = "😀".repeat(256)
    expect(id512.length).toBe(512)
    expectAccepted(decode(set(event, ["invocation", "sessionId"], id512)))
    expectAccepted(decode(set(event, ["fact", "stepId"], id512)))
    expectRejected(decode(set(event, ["invocation", "sessionId"], `${id512}a`)), "decode")
    expectRejected(decode(set(event, ["fact", "stepId"], `${id512}a`)), "decode")
  })

  it("rejects an event id that is not a lowercase UUIDv4", () => {
    const event = messageOpening()
    expectValid(event)
    for (const id of [
      "0A000000-0000-4000-8000-000000000001", // uppercase
      "00000000-0000-1000-8000-000000000001", // version 1
      "00000000-0000-4000-c000-000000000001", // variant 110x
      "00000000-0000-4000-7000-000000000001", // variant 0xxx
      "00000000000040008000000000000001", // no dashes
    ]) {
      expectRejected(decode(set(event, ["id"], id)), "decode")
    }
  })

  it("rejects a digest with uppercase hex, a wrong prefix or 63 hex digits", () => {
    const event = modelRequest()
    expectValid(event)
    const hex = FactBuilders.digestOf("input").slice("sha256:".length)
    for (const digest of [`sha256:${hex.toUpperCase()}`, `sha512:${hex}`, `SHA256:${hex}`, hex, `sha256:${hex.slice(1)}`]) {
      expectRejected(decode(set(event, ["fact", "inputDigest"], digest)), "decode")
    }
  })

  it("rejects a negative or non-integer recordedAt", () => {
    const event = messageOpening()
    expectValid(event)
    expectAccepted(decode(set(event, ["recordedAt"], 0)))
    expectRejected(decode(set(event, ["recordedAt"], -1)), "decode")
    expectRejected(decode(set(event, ["recordedAt"], 1_767_225_600_000.5)), "decode")
  })

  it("rejects sequence 0 in a stored event", () => {
    const history = new History.History()
    history.open()
    const stored = history.events[0]!
    expect(stored.sequence).toBe(1)
    expectAccepted(Codec.decodeStoredEvent(stored))
    expectRejected(Codec.decodeStoredEvent(set(stored, ["sequence"], 0)), "decode")
  })

  it("rejects an unknown fact kind", () => {
    const event = modelCompletion()
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "kind"], "model_started")), "decode")
  })

  it("rejects an unknown finish reason", () => {
    const event = modelCompletion()
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "output", "finishReason"], "content-filter")), "decode")
  })

  it("rejects negative usage", () => {
    const event = modelCompletion()
    expectValid(event)
    expectAccepted(decode(set(event, ["fact", "output", "usage", "outputTokens"], 0)))
    expectRejected(decode(set(event, ["fact", "output", "usage", "outputTokens"], -1)), "decode")
  })

  it("rejects an unknown failure class", () => {
    const event = ended({ kind: "failed", class: "model_provider" })
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "outcome", "class"], "disk_full")), "decode")
  })

  it("rejects a checkpoint mode unit variant with an extra field", () => {
    const event = checkpointRecorded()
    expectAccepted(decode(set(event, ["fact", "checkpoint", "mode"], { kind: "pre_turn" })))
    expectRejected(decode(set(event, ["fact", "checkpoint", "mode"], { kind: "pre_turn", x: 1 })), "decode")
    expectRejected(
      decode(set(event, ["fact", "checkpoint", "mode"], { kind: "standalone", anchorEventId: event.id })),
      "decode",
    )
  })

  it("rejects a completed outcome with an extra field", () => {
    const event = ended({ kind: "completed" })
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "outcome", "x"], 1)), "decode")
  })

  it("decodes a fact against the invocation it is given and rejects its unknown fields", () => {
    const { terminal, source, pause } = handoff()
    expectAccepted(Codec.decodeFact(terminal.fact, source))
    expectRejected(Codec.decodeFact(set(terminal.fact, ["extra"], 1), source), "decode")
    expectRejected(
      Codec.decodeFact(terminal.fact, { ...source, runId: pause.intent.successorRunId }),
      "handoff_intent",
    )
  })

  it("rejects an unknown field in any record decoded closed", () => {
    const { pause } = handoff()
    const decodePause = Codec.decodeClosed(Lineage.HandoffPause)
    expectAccepted(decodePause(pause))
    expectRejected(decodePause(set(pause, ["execution", "tools", "extra"], [])), "decode")
    expectRejected(decodePause(set(pause, ["intent", "extra"], "x")), "decode")
  })

  it("rejects a standalone origin with a step id", () => {
    const event: Event.RuntimeEvent = {
      ...messageOpening(),
      fact: {
        kind: "tool_dispatched",
        operationId: "host-operation-1",
        call: { toolCallId: "call-9", origin: { kind: "standalone" } },
        name: "list_files",
        input: {},
      },
    }
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "call", "origin", "stepId"], "s")), "decode")
  })
})

describe("openings and messages (docs/log-format.md §2.4)", () => {
  it("rejects a message text over 64 KiB of UTF-8", () => {
    const event = messageOpening()
    // 32,768 two-byte characters: exactly 64 KiB of UTF-8 in half as many UTF-16 units.
    const exact = "é".repeat(32 * KIB)
    expectAccepted(decode(set(event, ["fact", "input", "content"], { text: exact })))
    expectRejected(decode(set(event, ["fact", "input", "content"], { text: `${exact}a` })), "message_too_large")
  })

  it("rejects a steered message text over 64 KiB of UTF-8", () => {
    const event = steering()
    expectValid(event)
    const exact = "é".repeat(32 * KIB)
    expectAccepted(decode(set(event, ["fact", "message"], delivered({ text: exact }))))
    expectRejected(decode(set(event, ["fact", "message"], delivered({ text: `${exact}a` }))), "message_too_large")
  })

  it("rejects a delivered message whose digest does not match its content", () => {
    const event = steering()
    expectValid(event)
    const wrong = Digest.messageContent({ text: "Something else." })
    expectRejected(decode(set(event, ["fact", "message", "submittedContentDigest"], wrong)), "message_digest")
  })

  it("rejects a delivered message serialized over 1 MiB", () => {
    const event = steering()
    expectValid(event)
    const message = delivered({ text: "Look at this.", displayText: "d".repeat(MIB) })
    expectRejected(decode(set(event, ["fact", "message"], message)), "delivered_message_too_large")
  })

  it("rejects a continuation requestFingerprint that is not a digest", () => {
    const event = continuationOpening()
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "input", "requestFingerprint"], "fingerprint-1")), "decode")
  })

  it("rejects an empty context_compact requestFingerprint", () => {
    const event = contextCompactOpening()
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "input", "requestFingerprint"], "")), "decode")
  })
})

describe("context and checkpoints (docs/log-format.md §2.5)", () => {
  it("rejects a request context providerId that is empty or 513 UTF-16 units", () => {
    const event = modelRequest()
    expectValid(event)
    expectAccepted(decode(set(event, ["fact", "context", "providerId"], "p".repeat(512))))
    expectRejected(decode(set(event, ["fact", "context", "providerId"], "")), "decode")
    expectRejected(decode(set(event, ["fact", "context", "providerId"], "p".repeat(513))), "decode")
  })

  it("rejects a window of 0, 2^53 or a non-integer", () => {
    const event = modelRequest()
    expectValid(event)
    for (const field of ["contextWindow", "declaredWindow", "modelContextWindow"]) {
      expectAccepted(decode(set(event, ["fact", "context", field], 1)))
      expectAccepted(decode(set(event, ["fact", "context", field], Number.MAX_SAFE_INTEGER)))
      expectRejected(decode(set(event, ["fact", "context", field], 0)), "decode")
      expectRejected(decode(set(event, ["fact", "context", field], 2 ** 53)), "decode")
      expectRejected(decode(set(event, ["fact", "context", field], 1_000.5)), "decode")
    }
  })

  it("rejects a checkpoint with coveredThrough 0", () => {
    const event = checkpointRecorded()
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "checkpoint", "coveredThrough"], 0)), "decode")
  })

  it("rejects a checkpoint whose summary is invalid", () => {
    const event = checkpointRecorded()
    expectValid(event)
    const withoutNextSteps = FactBuilders.VALID_SUMMARY.replace("## Next Steps", "## Later")
    expectRejected(decode(set(event, ["fact", "checkpoint", "summary", "text"], withoutNextSteps)), "summary_invalid")
    expectRejected(decode(set(event, ["fact", "checkpoint", "summary", "text"], "   ")), "summary_invalid")
  })

  it("rejects a summary format other than sections_v1", () => {
    const event = checkpointRecorded()
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "checkpoint", "summary", "format"], "sections_v2")), "decode")
  })

  it("rejects a mid_turn anchorEventId that is not an event id", () => {
    const event = checkpointRecorded()
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "checkpoint", "mode", "anchorEventId"], "opening-1")), "decode")
  })
})

describe("continuation and handoff records (docs/log-format.md §2.6)", () => {
  it("rejects a claim whose source highWater is 0", () => {
    const event = continuationOpening()
    expectAccepted(decode(set(event, ["fact", "input", "claim", "source", "highWater"], 1)))
    expectRejected(decode(set(event, ["fact", "input", "claim", "source", "highWater"], 0)), "decode")
  })

  it("rejects a claim whose base highWater is negative", () => {
    const event = continuationOpening()
    expectAccepted(decode(set(event, ["fact", "input", "claim", "base", "highWater"], 0)))
    expectRejected(decode(set(event, ["fact", "input", "claim", "base", "highWater"], -1)), "decode")
  })

  it("rejects replay evidence of version 2", () => {
    const event = continuationOpening()
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "input", "claim", "replay", "version"], 2)), "decode")
  })

  it("rejects a claim that targets another session", () => {
    const continuation = continuationOpening()
    expectValid(continuation)
    expectRejected(decode(set(continuation, ["invocation", "sessionId"], "session-2")), "claim_target")
    const { opening } = handoff()
    expectValid(opening)
    expectRejected(decode(set(opening, ["invocation", "sessionId"], "session-2")), "claim_target")
  })

  it("rejects a continuation in the same turn, run or invocation as its source", () => {
    const event = continuationOpening()
    expectValid(event)
    expectRejected(decode(set(event, ["invocation", "turnId"], "turn-1")), "claim_target")
    expectRejected(decode(set(event, ["invocation", "runId"], "run-1")), "claim_target")
    expectRejected(decode(set(event, ["invocation", "invocationId"], "invocation-1")), "claim_target")
  })

  it("accepts a valid handoff opening and a valid handoff_paused terminal", () => {
    const { opening, terminal } = handoff()
    expectValid(opening)
    expectValid(terminal)
  })

  it("rejects a handoff intent whose successor run is the root run", () => {
    const { terminal } = handoff()
    expectValid(terminal)
    expectRejected(
      decode(set(terminal, ["fact", "outcome", "pause", "intent", "successorRunId"], "root-run")),
      "handoff_intent",
    )
  })

  it("rejects a handoff intent whose successor run is the paused run", () => {
    const { terminal, source } = handoff()
    expectValid(terminal)
    expectRejected(
      decode(set(terminal, ["fact", "outcome", "pause", "intent", "successorRunId"], source.runId)),
      "handoff_intent",
    )
  })

  it("rejects a handoff intent whose successor invocation is the paused invocation", () => {
    const { terminal, source } = handoff()
    expectValid(terminal)
    expectRejected(
      decode(set(terminal, ["fact", "outcome", "pause", "intent", "successorInvocationId"], source.invocationId)),
      "handoff_intent",
    )
  })

  it("rejects a handoff intent whose successor run id equals its successor invocation id", () => {
    const { terminal, pause } = handoff()
    expectValid(terminal)
    expectRejected(
      decode(set(terminal, ["fact", "outcome", "pause", "intent", "successorInvocationId"], pause.intent.successorRunId)),
      "handoff_intent",
    )
  })

  it("rejects an invalid intent in a handoff opening", () => {
    const { opening, source } = handoff()
    expectValid(opening)
    // The opening stays the named successor; only the pause's successor run collides with the paused run.
    expectRejected(decode(set(opening, ["fact", "input", "pause", "intent", "successorRunId"], source.runId)), "handoff_intent")
  })

  it("rejects remainingSteps of 0 or 257", () => {
    const { terminal } = handoff()
    const path = ["fact", "outcome", "pause", "remainingSteps"]
    expectAccepted(decode(set(terminal, path, 1)))
    expectAccepted(decode(set(terminal, path, 256)))
    expectRejected(decode(set(terminal, path, 0)), "decode")
    expectRejected(decode(set(terminal, path, 257)), "decode")
  })

  it("rejects handoff tool names that are unsorted or duplicated", () => {
    const { terminal } = handoff()
    expectValid(terminal)
    const path = ["fact", "outcome", "pause", "execution", "tools", "names"]
    expectRejected(decode(set(terminal, path, ["read_file", "list_files"])), "handoff_tools")
    expectRejected(decode(set(terminal, path, ["list_files", "list_files", "read_file"])), "handoff_tools")
  })

  it("rejects 129 handoff tool names, an empty name and a name of 129 characters", () => {
    const { terminal } = handoff()
    const path = ["fact", "outcome", "pause", "execution", "tools", "names"]
    const names = (count: number) => Array.from({ length: count }, (_, index) => `tool_${String(index).padStart(3, "0")}`)
    expectAccepted(decode(set(terminal, path, names(128))))
    expectAccepted(decode(set(terminal, path, ["t".repeat(128)])))
    expectRejected(decode(set(terminal, path, names(129))), "decode")
    expectRejected(decode(set(terminal, path, ["", "read_file"])), "decode")
    expectRejected(decode(set(terminal, path, ["t".repeat(129)])), "decode")
  })

  it("rejects a handoff claim whose id differs from the intent's claim id", () => {
    const { opening } = handoff()
    expectValid(opening)
    expectRejected(decode(set(opening, ["fact", "input", "claim", "id"], "another-claim")), "handoff_claim")
  })

  it("rejects a handoff claim with a different route identity", () => {
    const { opening } = handoff()
    expectValid(opening)
    const route = FactBuilders.digestOf("another-route")
    expectRejected(decode(set(opening, ["fact", "input", "claim", "replay", "routeIdentity"], route)), "handoff_claim")
  })

  it("rejects a pause whose replayBase differs from the claim's base highWater", () => {
    const { opening } = handoff()
    const path = ["fact", "input", "pause", "execution", "replayBase"]
    expectAccepted(decode(set(opening, path, 0)))
    expectRejected(decode(set(opening, path, 3)), "handoff_claim")
  })

  it("rejects a handoff opening that is not the intent's successor of the source", () => {
    const { opening } = handoff()
    expectValid(opening)
    expectRejected(decode(set(opening, ["invocation", "turnId"], "turn-2")), "handoff_claim")
    expectRejected(decode(set(opening, ["invocation", "runId"], "run-2")), "handoff_claim")
    expectRejected(decode(set(opening, ["invocation", "invocationId"], "invocation-2")), "handoff_claim")
  })

  it("rejects a continuation or handoff opening without a workspace identity", () => {
    const path = ["fact", "configuration", "workspaceIdentity"]
    const message = messageOpening()
    expectAccepted(decode(remove(message, path)))
    const continuation = continuationOpening()
    expectValid(continuation)
    expectRejected(decode(remove(continuation, path)), "workspace_identity_required")
    const { opening } = handoff()
    expectValid(opening)
    expectRejected(decode(remove(opening, path)), "workspace_identity_required")
  })
})

describe("outcomes (docs/log-format.md §2.3)", () => {
  it("rejects a failure message of 2,049 UTF-16 units and accepts 2,048", () => {
    const event = ended({ kind: "failed", class: "model_provider", message: "x".repeat(2_048) })
    expectValid(event)
    expectAccepted(decode(set(event, ["fact", "outcome", "message"], "😀".repeat(1_024))))
    expectRejected(decode(set(event, ["fact", "outcome", "message"], "x".repeat(2_049))), "decode")
  })

  it("rejects an unknown cancellation source", () => {
    const event = ended({ kind: "cancelled", source: "runtime_cancellation" })
    expectValid(event)
    expectAccepted(decode(set(event, ["fact", "outcome", "source"], "handoff_abandoned")))
    expectRejected(decode(set(event, ["fact", "outcome", "source"], "user_cancelled")), "decode")
  })
})

describe("tool calls (docs/log-format.md §2.8)", () => {
  it("rejects a provider-origin dispatch or rejection whose operationId is not {stepId}:{toolCallId}", () => {
    const { history, run, stepId } = toolRun()
    run.dispatch(stepId, "call-1")
    const dispatched = lastEvent(history)
    run.reject(stepId, "call-2", { kind: "unavailable" })
    const rejected = lastEvent(history)
    for (const event of [dispatched, rejected]) {
      expectValid(event)
      for (const operationId of ["call-1", `${stepId}-call-1`, `call-1:${stepId}`, `${stepId}:call-3`]) {
        expectRejected(decode(set(event, ["fact", "operationId"], operationId)), "operation_id")
      }
    }
  })

  it("accepts any operationId for a standalone origin", () => {
    const { history, run, stepId } = toolRun()
    run.dispatch(stepId, "call-1")
    const event = lastEvent(history)
    const standalone = set(event, ["fact", "call", "origin"], { kind: "standalone" })
    for (const operationId of ["host-operation-7", `${stepId}:call-1`, "x"]) {
      expectAccepted(decode(set(standalone, ["fact", "operationId"], operationId)))
    }
  })

  it("rejects a raw result reference over 64 MiB", () => {
    const { history, run, stepId } = toolRun()
    run.succeed(run.dispatch(stepId, "call-1"), FactBuilders.textOutput("README.md"))
    const event = lastEvent(history)
    expectValid(event)
    const path = ["fact", "outcome", "raw", "bytes"]
    expectAccepted(decode(set(event, path, 64 * MIB)))
    expectRejected(decode(set(event, path, 64 * MIB + 1)), "decode")
  })
})

describe("archive placeholders (docs/log-format.md §2.9)", () => {
  it("accepts a placeholder that prepare produces", () => {
    const { event, placeholder } = archived()
    expect(placeholder.page.offset).toBe(0)
    expect(placeholder.page.next).toBe(placeholder.page.text.length)
    expectValid(event)
  })

  it("rejects a page that does not start at offset 0", () => {
    const { event } = archived()
    expectRejected(decode(set(event, ["fact", "placeholder", "page", "offset"], 1)), "archive_placeholder")
  })

  it("rejects an inconsistent page.next", () => {
    const { event, placeholder } = archived()
    const next = placeholder.page.next!
    expectRejected(decode(set(event, ["fact", "placeholder", "page", "next"], next + 1)), "archive_placeholder")
    expectRejected(decode(set(event, ["fact", "placeholder", "page", "next"], next - 1)), "archive_placeholder")
    expectRejected(decode(remove(event, ["fact", "placeholder", "page", "next"])), "archive_placeholder")
  })

  it("rejects a wrong originalEstimatedTokens", () => {
    const { event, placeholder } = archived()
    expect(placeholder.originalEstimatedTokens).toBe(Math.ceil(placeholder.page.totalChars / 4))
    const tokens = placeholder.originalEstimatedTokens
    expectRejected(decode(set(event, ["fact", "placeholder", "originalEstimatedTokens"], tokens + 1)), "archive_placeholder")
  })

  it("rejects a page whose model value exceeds 7,500 UTF-16 units", () => {
    const { event, placeholder, body } = archived()
    const end = placeholder.page.text.length + 40
    const page = { ...placeholder.page, text: body.slice(0, end), next: end }
    expectRejected(decode(set(event, ["fact", "placeholder", "page"], page)), "archive_placeholder")
  })

  it("rejects a placeholder of a body of at most 7,500 UTF-16 units", () => {
    const { event } = archived()
    expectRejected(decode(set(event, ["fact", "placeholder", "page", "totalChars"], 7_500)), "archive_placeholder")
  })

  it("rejects a reason other than tool_result_pruned", () => {
    const { event } = archived()
    expectValid(event)
    expectRejected(decode(set(event, ["fact", "placeholder", "reason"], "tool_result_compacted")), "decode")
  })
})

describe("execution configuration (docs/log-format.md §2.11)", () => {
  const configurationPath = ["fact", "configuration"]

  it("rejects a blank system prompt", () => {
    const event = messageOpening()
    expectValid(event)
    expectRejected(decode(set(event, [...configurationPath, "systemPrompt", "text"], " \n\t ")), "system_prompt_blank")
    expectRejected(decode(set(event, [...configurationPath, "systemPrompt", "text"], "")), "system_prompt_blank")
  })

  it("rejects a system prompt over 64 KiB of UTF-8", () => {
    const event = messageOpening()
    const exact = "é".repeat(32 * KIB)
    expectAccepted(decode(set(event, [...configurationPath, "systemPrompt", "text"], exact)))
    expectRejected(
      decode(set(event, [...configurationPath, "systemPrompt", "text"], `${exact}a`)),
      "system_prompt_too_large",
    )
  })

  it("rejects a relative cwd or one containing NUL", () => {
    const event = messageOpening()
    expectValid(event)
    expectRejected(decode(set(event, [...configurationPath, "cwd"], "workspace")), "decode")
    expectRejected(decode(set(event, [...configurationPath, "cwd"], "")), "decode")
    expectRejected(decode(set(event, [...configurationPath, "cwd"], "/work\u0000space")), "decode")
  })

  it("rejects a cwd over 4,096 UTF-8 bytes", () => {
    const event = messageOpening()
    expectAccepted(decode(set(event, [...configurationPath, "cwd"], `/${"a".repeat(4_095)}`)))
    // 2,049 UTF-16 units, 4,097 bytes.
    expectRejected(decode(set(event, [...configurationPath, "cwd"], `/${"é".repeat(2_048)}`)), "cwd_too_large")
  })

  it("rejects a workspace identity with a bad prefix, a UUID version of 0 or 9, or a non-RFC 4122 variant", () => {
    const event = messageOpening()
    expectValid(event)
    const path = [...configurationPath, "workspaceIdentity"]
    expectAccepted(decode(set(event, path, "workspace:v1:11111111-2222-7333-B444-00000000000A")))
    for (const identity of [
      "workspace:v2:11111111-2222-4333-8444-000000000001",
      "workspace:11111111-2222-4333-8444-000000000001",
      "11111111-2222-4333-8444-000000000001",
      "workspace:v1:11111111-2222-0333-8444-000000000001",
      "workspace:v1:11111111-2222-9333-8444-000000000001",
      "workspace:v1:11111111-2222-4333-c444-000000000001",
      "workspace:v1:11111111-2222-4333-7444-000000000001",
    ]) {
      expectRejected(decode(set(event, path, identity)), "decode")
    }
  })

  it("rejects a toolMode other than direct", () => {
    const event = messageOpening()
    expectValid(event)
    expectRejected(decode(set(event, [...configurationPath, "toolMode"], "mcp")), "decode")
  })
})

describe("EventWrite (docs/log-format.md §2.13)", () => {
  it("refuses a successful tool_settled and accepts a failed one", () => {
    const { history, run, stepId } = toolRun()
    run.succeed(run.dispatch(stepId, "call-1"), FactBuilders.textOutput("README.md"))
    const succeeded = lastEvent(history)
    expectValid(succeeded)
    expectRejected(EventWrite.plain(succeeded), "tool_success_requires_tool_write")
    run.fail(run.dispatch(stepId, "call-2"), "no such file")
    const failed = lastEvent(history)
    expectAccepted(EventWrite.plain(failed))
  })

  it("refuses an event over 1 MiB", () => {
    const event = modelCompletion()
    expectAccepted(EventWrite.plain(event))
    const large = { ...event, fact: { ...event.fact, output: FactBuilders.textStep("a".repeat(MIB)) } }
    expectRejected(EventWrite.plain(large), "event_too_large")
  })

  it("refuses a raw payload deeper than 64", () => {
    const input = {
      id: FactBuilders.eventId(50),
      recordedAt: 1_767_225_600_000,
      invocation: FactBuilders.invocation(),
      operationId: "step-1:call-1",
    }
    // The raw payload is the output object around the value, so a value of depth 63 gives depth 64.
    const accepted = expectAccepted(EventWrite.toolSuccess({ ...input, output: FactBuilders.jsonOutput(nested(63)) }))
    expect(accepted.rawPayload).toBeDefined()
    expectRejected(
      EventWrite.toolSuccess({ ...input, output: FactBuilders.jsonOutput(nested(64)) }),
      "raw_payload_too_deep",
    )
    // Far deeper than the limit (a recursive measure overflowed the stack here): refused, never thrown.
    const deep = JSON.parse(`${"[".repeat(3_000)}${"]".repeat(3_000)}`) as Identity.Json
    expectRejected(EventWrite.toolSuccess({ ...input, output: FactBuilders.jsonOutput(deep) }), "raw_payload_too_deep")
  })
})
