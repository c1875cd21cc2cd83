/**
 * A pure builder of small, valid session histories: openings, model steps, tool calls, steering,
 * checkpoints and terminals, with deterministic ids, times and sequences, and request digests computed
 * from the history built so far. Every event goes through `EventWrite`, so a history that builds is a
 * history `@maka/facts` accepts.
 */
import { Codec, Digest, EventWrite, Result } from "./internal/facts.ts"
import { defined } from "./internal/defined.ts"
import type {
  Archive,
  Configuration,
  Event,
  Fact,
  Identity,
  Input,
  Lineage,
  Model,
  ModelContext,
  Outcome,
  ToolCall,
} from "@maka/facts"
import * as Builders from "./FactBuilders.ts"

export interface HistoryOptions {
  readonly sessionId?: string | undefined
  /**
   * The first event id number (ids are `FactBuilders.eventId(n)`, n in 0..2^48 − 1). Two histories
   * written to one log need ranges that do not overlap.
   */
  readonly firstId?: number | undefined
  /** A positive integer (default 1). */
  readonly firstSequence?: number | undefined
  readonly startTime?: number | undefined
}

export interface OpenOptions {
  readonly message?: string | Input.MessageInput | undefined
  readonly input?: Input.InvocationInput | undefined
  readonly configuration?: Builders.Overrides<Configuration.InvocationConfiguration> | undefined
  readonly turnId?: string | undefined
  readonly runId?: string | undefined
  readonly invocationId?: string | undefined
}

export interface RequestOptions {
  readonly stepId?: string | undefined
  readonly purpose?: Model.ModelPurpose | undefined
  readonly modelId?: string | undefined
  readonly routeIdentity?: string | undefined
  readonly inputDigest?: string | undefined
  readonly checkpointEventId?: string | undefined
  readonly context?: ModelContext.ModelRequestContext | undefined
}

export interface Written {
  readonly write: EventWrite.EventWrite
  readonly stored: Event.StoredEvent
}

/** One session's history under construction. */
export class History {
  readonly sessionId: string
  readonly written: Array<Written> = []
  private nextId: number
  private nextSequence: number
  private time: number
  private runCount = 0

  /** Throws a `RangeError` for a `firstId` outside 0..2^48 − 1 or a `firstSequence` below 1. */
  constructor(options: HistoryOptions = {}) {
    const firstId = options.firstId ?? 1
    const firstSequence = options.firstSequence ?? 1
    if (!Number.isSafeInteger(firstId) || firstId < 0 || firstId >= 2 ** 48) {
      throw new RangeError(`testkit: History firstId needs an integer from 0 to 2^48 - 1, got ${String(firstId)}`)
    }
    if (!Number.isSafeInteger(firstSequence) || firstSequence < 1) {
      throw new RangeError(`testkit: History firstSequence needs a positive integer, got ${String(firstSequence)}`)
    }
    this.sessionId = options.sessionId ?? "session-1"
    this.nextId = firstId
    this.nextSequence = firstSequence
    this.time = options.startTime ?? 1_767_225_600_000
  }

  get events(): ReadonlyArray<Event.StoredEvent> {
    return this.written.map((item) => item.stored)
  }

  get writes(): ReadonlyArray<EventWrite.EventWrite> {
    return this.written.map((item) => item.write)
  }

  get highWater(): number {
    return this.nextSequence - 1
  }

  /** The session-scope prefix digest of everything built so far. */
  prefixDigest(): string {
    return Digest.logPrefix(
      { kind: "session", id: this.sessionId },
      this.written.map(({ stored, write }) => ({ sequence: stored.sequence, json: write.json })),
      this.highWater,
    )
  }

  /** The next informational timestamp (one millisecond per event). */
  tick(): number {
    return this.time++
  }

  /** Allocates the next event id without writing. */
  allocateId(): string {
    return Builders.eventId(this.nextId++)
  }

  /** Appends an already built write (its event must be valid); returns the stored event. */
  push(write: EventWrite.EventWrite): Event.StoredEvent {
    const stored = { sequence: this.nextSequence++, event: write.event }
    this.written.push({ write, stored })
    return stored
  }

  /** Builds and appends a plain event of `invocation`. */
  append(invocation: Identity.Invocation, fact: Fact.Fact, id = this.allocateId()): Event.StoredEvent {
    const event: Event.RuntimeEvent = { id, recordedAt: this.tick(), invocation, fact }
    return this.push(unwrap(EventWrite.plain(event)))
  }

  /** Opens a new invocation (a message opening unless `input` is given). */
  open(options: OpenOptions = {}): Run {
    this.runCount++
    const invocation = Builders.invocation({
      sessionId: this.sessionId,
      turnId: options.turnId ?? `turn-${this.runCount}`,
      runId: options.runId ?? `run-${this.runCount}`,
      invocationId: options.invocationId ?? `invocation-${this.runCount}`,
    })
    const content =
      typeof options.message === "string" || options.message === undefined
        ? Builders.message(typeof options.message === "string" ? options.message : "Describe this repository.")
        : options.message
    const input: Input.InvocationInput = options.input ?? { kind: "message", content }
    const opening = this.append(invocation, {
      kind: "invocation_opened",
      input,
      configuration: Builders.configuration(options.configuration),
    })
    return new Run(this, invocation, opening)
  }
}

/** One invocation of a `History`. */
export class Run {
  private steps = 0
  private readonly completed = new Map<string, Model.ModelStep>()

  constructor(
    readonly history: History,
    readonly invocation: Identity.Invocation,
    readonly opening: Event.StoredEvent,
  ) {}

  /** Appends `model_requested` bound to the session prefix built so far; returns its step id. */
  request(options: RequestOptions = {}): string {
    const stepId = options.stepId ?? `${this.invocation.invocationId}-step-${++this.steps}`
    const fact: Fact.ModelRequested = {
      kind: "model_requested",
      stepId,
      modelId: options.modelId ?? "test-model",
      purpose: options.purpose ?? "main",
      sourceScope: { kind: "session", id: this.history.sessionId },
      sourceHighWater: this.history.highWater,
      sourceDigest: this.history.prefixDigest(),
      inputDigest: options.inputDigest ?? Builders.digestOf(`input:${stepId}`),
      routeIdentity: options.routeIdentity ?? Builders.digestOf("route"),
      ...(options.checkpointEventId === undefined ? {} : { checkpointEventId: options.checkpointEventId }),
      ...(options.context === undefined ? {} : { context: options.context }),
    }
    this.history.append(this.invocation, fact)
    return stepId
  }

  observe(stepId: string, event: Model.ModelEvent): Event.StoredEvent {
    return this.history.append(this.invocation, { kind: "model_observed", stepId, event })
  }

  complete(stepId: string, output: Model.ModelStep): Event.StoredEvent {
    this.completed.set(stepId, output)
    return this.history.append(this.invocation, { kind: "model_completed", stepId, output })
  }

  interrupt(stepId: string, status: Model.ModelInterruption): Event.StoredEvent {
    return this.history.append(this.invocation, { kind: "model_interrupted", stepId, status })
  }

  private call(stepId: string, toolCallId: string): Model.ToolCallPart {
    const step = this.completed.get(stepId)
    const part = step?.parts.find((item): item is Model.ToolCallPart => item.kind === "tool_call" && item.id === toolCallId)
    if (part === undefined) throw new Error(`no completed tool call ${toolCallId} in step ${stepId}`)
    return part
  }

  /** Dispatches a call of a completed step; returns the operation id. */
  dispatch(stepId: string, toolCallId: string): string {
    const part = this.call(stepId, toolCallId)
    const operationId = `${stepId}:${toolCallId}`
    this.history.append(this.invocation, {
      kind: "tool_dispatched",
      operationId,
      call: { toolCallId, origin: { kind: "provider", stepId } },
      name: part.name,
      input: part.input,
    })
    return operationId
  }

  reject(stepId: string, toolCallId: string, reason: ToolCall.ToolRejection): Event.StoredEvent {
    const part = this.call(stepId, toolCallId)
    return this.history.append(this.invocation, {
      kind: "tool_rejected",
      operationId: `${stepId}:${toolCallId}`,
      call: { toolCallId, origin: { kind: "provider", stepId } },
      name: part.name,
      input: part.input,
      reason,
    })
  }

  /** Settles an operation successfully through `EventWrite.toolSuccess`. */
  succeed(operationId: string, output: ToolCall.ToolOutput): Event.StoredEvent {
    return this.history.push(
      unwrap(
        EventWrite.toolSuccess({
          id: this.history.allocateId(),
          recordedAt: this.history.tick(),
          invocation: this.invocation,
          operationId,
          output,
        }),
      ),
    )
  }

  fail(operationId: string, message: string): Event.StoredEvent {
    return this.history.append(this.invocation, {
      kind: "tool_settled",
      operationId,
      outcome: { kind: "failed", message },
    })
  }

  steer(messageId: string, text: string): Event.StoredEvent {
    return this.history.append(this.invocation, {
      kind: "message_steered",
      message: Builders.deliveredMessage(messageId, text),
    })
  }

  checkpoint(checkpoint: ModelContext.ContextCheckpoint): Event.StoredEvent {
    return this.history.append(this.invocation, { kind: "context_checkpoint_recorded", checkpoint })
  }

  archive(placeholder: Archive.ArchivedPlaceholder): Event.StoredEvent {
    return this.history.append(this.invocation, { kind: "tool_result_archived", placeholder })
  }

  end(outcome: Outcome.InvocationOutcome = { kind: "completed" }): Event.StoredEvent {
    return this.history.append(this.invocation, { kind: "invocation_ended", outcome })
  }

  /** A pause of this run with valid ids, for handoff terminals. */
  pause(overrides: Builders.Overrides<Lineage.HandoffIntent> = {}, remainingSteps = 8): Lineage.HandoffPause {
    return {
      intent: {
        handoffId: `${this.invocation.runId}-handoff`,
        hostEpoch: "host-epoch-1",
        rootRunId: this.invocation.runId,
        successorRunId: `${this.invocation.runId}-successor`,
        successorInvocationId: `${this.invocation.invocationId}-successor`,
        claimId: `${this.invocation.runId}-claim`,
        ...defined(overrides),
      },
      remainingSteps,
      execution: {
        replay: { version: 1, digest: Builders.digestOf("replay"), routeIdentity: Builders.digestOf("route") },
        providerOptions: {},
        tools: { catalogDigest: Builders.digestOf("catalog"), names: ["list_files", "read_file"] },
        compaction: "available",
      },
    }
  }
}

const unwrap = <A, E extends { readonly message: string }>(result: Result.Result<A, E>): A => {
  if (Result.isFailure(result)) throw new Error(`testkit built an invalid event: ${result.failure.message}`)
  return result.success
}

/** Decodes a stored event's JSON back, for round-trip assertions. */
export const reread = (written: Written): Event.RuntimeEvent => unwrap(Codec.decodeEventJson(written.write.json))

/**
 * One complete small run: a message, a `list_files` call and its settlement, then a text answer.
 * Opening → request → completion → dispatch → settle → request → completion → `completed`.
 */
export const smallRun = (options: HistoryOptions = {}): History => {
  const history = new History(options)
  const run = history.open({ message: "What is in this repository?" })
  const first = run.request()
  run.complete(first, Builders.toolCallStep([{ id: "call-1", name: "list_files", input: { path: "." } }]))
  const operation = run.dispatch(first, "call-1")
  run.succeed(
    operation,
    Builders.jsonOutput([
      { name: "README.md", type: "file", size: 120 },
      { name: "src", type: "directory", size: 4096 },
    ]),
  )
  const second = run.request()
  run.complete(second, Builders.textStep("The repository holds README.md and a src folder."))
  run.end({ kind: "completed" })
  return history
}
