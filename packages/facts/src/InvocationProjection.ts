/**
 * The invocation projection over a log prefix (docs/log-format.md §2.1): the terminal status, the operations
 * dispatched without a settlement (uncertain) and the model requests without a completion or
 * interruption (unfinished), in log order.
 */
import type { RuntimeEvent, StoredEvent } from "./Event.ts"
import { terminalStatus, type TerminalStatus } from "./Outcome.ts"

export interface InvocationProjection {
  readonly terminal?: TerminalStatus
  readonly uncertainOperations: ReadonlyArray<string>
  readonly unfinishedModelSteps: ReadonlyArray<string>
}

const eventOf = (item: RuntimeEvent | StoredEvent): RuntimeEvent => ("sequence" in item ? item.event : item)

/** Projects one invocation from events in log order (a prefix's events, or any ordered slice). */
export const project = (
  events: Iterable<RuntimeEvent | StoredEvent>,
  invocationId: string,
): InvocationProjection => {
  const dispatched = new Set<string>()
  const requested = new Set<string>()
  let terminal: TerminalStatus | undefined
  for (const item of events) {
    const event = eventOf(item)
    if (event.invocation.invocationId !== invocationId) continue
    const fact = event.fact
    switch (fact.kind) {
      case "tool_dispatched":
        dispatched.add(fact.operationId)
        break
      case "tool_settled":
        dispatched.delete(fact.operationId)
        break
      case "model_requested":
        requested.add(fact.stepId)
        break
      case "model_completed":
      case "model_interrupted":
        requested.delete(fact.stepId)
        break
      case "invocation_ended":
        terminal = terminalStatus(fact.outcome)
        break
      default:
        break
    }
  }
  const lists = { uncertainOperations: [...dispatched], unfinishedModelSteps: [...requested] }
  return terminal === undefined ? lists : { terminal, ...lists }
}

/** `projectInvocation(id)` over a `LogPrefix`. */
export const projectPrefix = (
  prefix: { readonly events: ReadonlyArray<StoredEvent> },
  invocationId: string,
): InvocationProjection => project(prefix.events, invocationId)
