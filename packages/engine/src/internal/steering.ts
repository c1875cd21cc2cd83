/**
 * The size of steering: what one request may carry of it (docs/engine.md §5.4 "Steering is delivered
 * or refused, never dropped"). Each message is measured once, serialized as the fact holds it.
 */
import { Canonical, type Input } from "@maka/facts"

const measured = new WeakMap<Input.DeliveredMessage, number>()

/** The serialized bytes of a delivered message. */
export const bytesOf = (message: Input.DeliveredMessage): number => {
  const known = measured.get(message)
  if (known !== undefined) return known
  const bytes = Canonical.utf8Length(Canonical.stringify(message))
  measured.set(message, bytes)
  return bytes
}

/** The steering a run delivered since its last main request: the next request carries it. */
export interface Window {
  readonly bytes: number
  readonly count: number
}

export const emptyWindow: Window = { bytes: 0, count: 0 }
