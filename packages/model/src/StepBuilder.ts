/**
 * `StepBuilder` folds `ModelEvent`s into one `ModelStep` (docs/model.md §4.4): parts in order of first
 * appearance, text from started/delta/finished events, `tool_call` events as parts, `providerOptions`
 * deep-merged, metadata into `responseId`/`model`/`timestamp`, `finished` into reason and usage.
 * Every broken rule is an `Adapter` error; nothing is thrown.
 */
import type { Identity, Model } from "@maka/facts"
import { Result } from "effect"
import { deepMerge } from "./internal/provider-options.ts"
import * as ModelError from "./ModelError.ts"

type Json = Identity.ProviderOptions

interface TextSlot {
  readonly kind: "text"
  readonly id: string
  readonly textKind: Model.TextKind
  readonly chunks: Array<string>
  providerOptions: Json | undefined
  isOpen: boolean
}

type Slot = TextSlot | { readonly kind: "tool_call"; readonly part: Model.ToolCallPart }

const FINISH_REASONS: ReadonlySet<string> = new Set(["stop", "tool-calls", "length"])

export class StepBuilder {
  private readonly slots: Array<Slot> = []
  private readonly textById = new Map<string, TextSlot>()
  private readonly toolCallIds = new Set<string>()
  private finished: Extract<Model.ModelEvent, { kind: "finished" }> | undefined
  private responseId: string | undefined
  private model: string | undefined
  private timestamp: number | undefined

  private constructor(readonly stepId: string) {}

  /** A fresh builder for the step `stepId`. */
  static forStep(stepId: string): StepBuilder {
    return new StepBuilder(stepId)
  }

  /** Whether a `finished` event was folded. */
  get isFinished(): boolean {
    return this.finished !== undefined
  }

  /** Folds one event; the builder is unusable after an error. */
  add(event: Model.ModelEvent): Result.Result<void, ModelError.ModelError> {
    if (this.finished !== undefined) return Result.fail(ModelError.adapter(ModelError.AdapterMessage.eventAfterFinish))
    const unsupported = (): Result.Result<void, ModelError.ModelError> =>
      Result.fail(ModelError.adapter(ModelError.AdapterMessage.unsupportedEvent))
    switch (event.kind) {
      case "part_started": {
        if (this.textById.has(event.id)) return unsupported()
        const slot: TextSlot = {
          kind: "text",
          id: event.id,
          textKind: event.textKind,
          chunks: [],
          providerOptions: event.providerOptions,
          isOpen: true,
        }
        this.textById.set(event.id, slot)
        this.slots.push(slot)
        return Result.void
      }
      case "part_delta": {
        const slot = this.textById.get(event.id)
        if (slot === undefined || !slot.isOpen) return unsupported()
        slot.chunks.push(event.text)
        slot.providerOptions = deepMerge(slot.providerOptions, event.providerOptions)
        return Result.void
      }
      case "part_finished": {
        const slot = this.textById.get(event.id)
        if (slot === undefined || !slot.isOpen) return unsupported()
        slot.isOpen = false
        slot.providerOptions = deepMerge(slot.providerOptions, event.providerOptions)
        return Result.void
      }
      case "tool_call": {
        if (this.toolCallIds.has(event.id)) {
          return Result.fail(ModelError.adapter(`${ModelError.AdapterMessage.unsupportedEvent}: two tool calls of one output share an id`))
        }
        this.toolCallIds.add(event.id)
        const { kind: _kind, ...call } = event
        this.slots.push({ kind: "tool_call", part: { kind: "tool_call", ...call } })
        return Result.void
      }
      case "response_metadata": {
        if (event.id !== undefined) this.responseId = event.id
        if (event.model !== undefined) this.model = event.model
        if (event.timestamp !== undefined) this.timestamp = event.timestamp
        return Result.void
      }
      case "finished": {
        if (!FINISH_REASONS.has(event.reason)) {
          return Result.fail(ModelError.adapter(`unknown finish reason: ${String(event.reason)}`))
        }
        if (this.hasOpenPart()) return Result.fail(ModelError.adapter(ModelError.AdapterMessage.openPart))
        this.finished = event
        return Result.void
      }
    }
  }

  /** The step; an `Adapter` error when no `finished` was folded or a part is still open. */
  finish(): Result.Result<Model.ModelStep, ModelError.ModelError> {
    if (this.finished === undefined) return Result.fail(ModelError.adapter(ModelError.AdapterMessage.endedWithoutFinish))
    if (this.hasOpenPart()) return Result.fail(ModelError.adapter(ModelError.AdapterMessage.openPart))
    const parts: Array<Model.ModelPart> = this.slots.map((slot) =>
      slot.kind === "tool_call"
        ? slot.part
        : {
            kind: "text",
            textKind: slot.textKind,
            text: slot.chunks.join(""),
            ...(slot.providerOptions === undefined ? {} : { providerOptions: slot.providerOptions }),
          },
    )
    const finished = this.finished
    return Result.succeed({
      parts,
      finishReason: finished.reason,
      usage: finished.usage,
      ...(finished.providerOptions === undefined ? {} : { providerOptions: finished.providerOptions }),
      ...(this.responseId === undefined ? {} : { responseId: this.responseId }),
      ...(this.model === undefined ? {} : { model: this.model }),
      ...(this.timestamp === undefined ? {} : { timestamp: this.timestamp }),
    })
  }

  private hasOpenPart(): boolean {
    for (const slot of this.textById.values()) if (slot.isOpen) return true
    return false
  }
}

/** A fresh builder for the step `stepId` (`StepBuilder.forStep(stepId)` from the package entry). */
export const forStep = (stepId: string): StepBuilder => StepBuilder.forStep(stepId)

/** Folds a whole event list into a step (tests, the fake model, replays). */
export const fold = (
  stepId: string,
  events: Iterable<Model.ModelEvent>,
): Result.Result<Model.ModelStep, ModelError.ModelError> => {
  const builder = StepBuilder.forStep(stepId)
  for (const event of events) {
    const added = builder.add(event)
    if (Result.isFailure(added)) return Result.fail(added.failure)
  }
  return builder.finish()
}
