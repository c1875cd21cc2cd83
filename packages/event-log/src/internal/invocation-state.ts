/**
 * The resolution state of one invocation, folded from its events in log order: requests and how
 * they ended, dispatches and settlements, rejections, and the local calls of completed main steps.
 * The append validators, the safety gate and recovery all read it; it is a pure function.
 */
import { Model, type Event, type Fact } from "@maka/facts"

export interface LocalCall {
  readonly stepId: string
  readonly operationId: string
  readonly toolCallId: string
  readonly name: string
  readonly input: Model.ToolCallPart["input"]
}

export interface InvocationState {
  readonly opening?: Event.StoredEvent
  readonly terminal?: Event.StoredEvent
  /** Requests by step id with their purpose, in request order. */
  readonly requests: ReadonlyMap<string, Fact.ModelRequested>
  /** Step ids that completed or were interrupted. */
  readonly resolvedSteps: ReadonlySet<string>
  readonly completions: ReadonlyMap<string, Model.ModelStep>
  readonly dispatched: ReadonlyMap<string, Fact.ToolDispatched>
  readonly settled: ReadonlyMap<string, Event.StoredEvent>
  readonly rejected: ReadonlySet<string>
  /** Local calls of completed main steps, in step and call order. */
  readonly localCalls: ReadonlyArray<LocalCall>
  /** Whether a completed step holds a provider-executed call. */
  readonly hasProviderExecutedCall: boolean
}

/**
 * The state built one event at a time: `fold` runs it over stored events, and the writer's in-memory
 * index keeps one per live invocation, adding each event it commits.
 */
export class Accumulator implements InvocationState {
  opening?: Event.StoredEvent
  terminal?: Event.StoredEvent
  readonly requests: Map<string, Fact.ModelRequested> = new Map()
  readonly resolvedSteps: Set<string> = new Set()
  readonly completions: Map<string, Model.ModelStep> = new Map()
  readonly dispatched: Map<string, Fact.ToolDispatched> = new Map()
  readonly settled: Map<string, Event.StoredEvent> = new Map()
  readonly rejected: Set<string> = new Set()
  readonly localCalls: Array<LocalCall> = []
  hasProviderExecutedCall = false

  add(stored: Event.StoredEvent): void {
    const fact = stored.event.fact
    switch (fact.kind) {
      case "invocation_opened":
        this.opening = stored
        break
      case "invocation_ended":
        this.terminal = stored
        break
      case "model_requested":
        this.requests.set(fact.stepId, fact)
        break
      case "model_completed": {
        this.resolvedSteps.add(fact.stepId)
        this.completions.set(fact.stepId, fact.output)
        if (fact.output.parts.some((part) => part.kind === "tool_call" && part.providerExecuted)) {
          this.hasProviderExecutedCall = true
        }
        if (this.requests.get(fact.stepId)?.purpose === "main") {
          for (const part of Model.localToolCalls(fact.output)) {
            this.localCalls.push({
              stepId: fact.stepId,
              operationId: `${fact.stepId}:${part.id}`,
              toolCallId: part.id,
              name: part.name,
              input: part.input,
            })
          }
        }
        break
      }
      case "model_interrupted":
        this.resolvedSteps.add(fact.stepId)
        break
      case "tool_dispatched":
        this.dispatched.set(fact.operationId, fact)
        break
      case "tool_settled":
        this.settled.set(fact.operationId, stored)
        break
      case "tool_rejected":
        this.rejected.add(fact.operationId)
        break
      default:
        break
    }
  }
}

/** An empty state that `add` folds events into one at a time (for reads that come in pages). */
export const accumulator = (): InvocationState & { readonly add: (stored: Event.StoredEvent) => void } => new Accumulator()

export const fold = (events: Iterable<Event.StoredEvent>): InvocationState => {
  const state = new Accumulator()
  for (const stored of events) state.add(stored)
  return state
}

/** Steps that were requested and never completed (interrupted, or still unresolved). */
export const incompleteSteps = (state: InvocationState): ReadonlyArray<string> =>
  [...state.requests.keys()].filter((stepId) => !state.completions.has(stepId))

export const unresolvedRequests = (state: InvocationState, purpose?: Model.ModelPurpose): ReadonlyArray<string> =>
  [...state.requests.entries()]
    .filter(([stepId, request]) => !state.resolvedSteps.has(stepId) && (purpose === undefined || request.purpose === purpose))
    .map(([stepId]) => stepId)

/** `isSettled`: whether an operation settled (the state's own settlements by default; a read may know them by id only). */
export const unsettledDispatches = (
  state: InvocationState,
  isSettled: (operationId: string) => boolean = (operationId) => state.settled.has(operationId),
): ReadonlyArray<string> => [...state.dispatched.keys()].filter((operationId) => !isSettled(operationId))

export const unresolvedLocalCalls = (state: InvocationState): ReadonlyArray<LocalCall> =>
  state.localCalls.filter((call) => !state.dispatched.has(call.operationId) && !state.rejected.has(call.operationId))

/**
 * Why the invocation is not at a settled boundary, or `undefined` when it is. With `purpose`, only
 * an unresolved request of that purpose counts (compaction asks for `main`: its own summary request
 * is not its caller's concern).
 */
export const unsettledReason = (
  state: InvocationState,
  purpose?: Model.ModelPurpose,
  isSettled?: (operationId: string) => boolean,
): string | undefined => {
  if (unsettledDispatches(state, isSettled).length > 0) return "a dispatched tool is unsettled"
  if (unresolvedRequests(state, purpose).length > 0) return "a model request is unresolved"
  if (unresolvedLocalCalls(state).length > 0) return "a local tool call is neither rejected nor settled"
  return undefined
}
