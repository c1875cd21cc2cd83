/**
 * Text deltas joined across a surrogate pair (docs/model.md §4.2): a provider that streams UTF-16
 * units may end one delta with the first half of a character and begin the next with the second. Each
 * delta is stored as a fact of its own, whose text must be well-formed, so a delta's trailing first
 * half is held back and given to the next delta of its part; one still held when the part finishes is
 * given back as it is (the output then holds a broken character, and is refused as one).
 */
import type { Model } from "@maka/facts"

type PartDelta = Extract<Model.ModelEvent, { kind: "part_delta" }>

const endsHigh = (text: string): boolean => {
  const code = text.charCodeAt(text.length - 1)
  return code >= 0xd800 && code <= 0xdbff
}

const endsWithFirstHalf = (event: Model.ModelEvent): boolean => event.kind === "part_delta" && endsHigh(event.text)

/** The carry of one stream: events in, the same events with every split pair joined. */
export const make = (): ((events: Array<Model.ModelEvent>) => Array<Model.ModelEvent>) => {
  const held = new Map<string, string>()
  return (events) => {
    if (held.size === 0 && !events.some(endsWithFirstHalf)) return events
    const out: Array<Model.ModelEvent> = []
    for (const event of events) {
      if (event.kind === "part_delta") {
        const before = held.get(event.id)
        if (before !== undefined) held.delete(event.id)
        let text = before === undefined ? event.text : before + event.text
        if (endsHigh(text)) {
          held.set(event.id, text.slice(-1))
          text = text.slice(0, -1)
        }
        if (text === event.text) out.push(event)
        else if (text !== "" || event.providerOptions !== undefined) out.push(withText(event, text))
        continue
      }
      if (event.kind === "part_finished") {
        const rest = held.get(event.id)
        if (rest !== undefined) {
          held.delete(event.id)
          out.push({ kind: "part_delta", id: event.id, text: rest })
        }
      }
      out.push(event)
    }
    return out
  }
}

const withText = (event: PartDelta, text: string): PartDelta =>
  event.providerOptions === undefined
    ? { kind: "part_delta", id: event.id, text }
    : { kind: "part_delta", id: event.id, text, providerOptions: event.providerOptions }
