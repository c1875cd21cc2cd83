/**
 * Splits a text delta longer than `MAX_DELTA_CHARS` UTF-16 units into several deltas of at most that
 * many units, never between the halves of a surrogate pair (docs/model.md §4.2). `providerOptions`
 * travel on the first piece.
 */
import type { Model } from "@maka/facts"

type PartDelta = Extract<Model.ModelEvent, { kind: "part_delta" }>

const isHigh = (code: number): boolean => code >= 0xd800 && code <= 0xdbff
const isLow = (code: number): boolean => code >= 0xdc00 && code <= 0xdfff

/** The pieces of `text`, each at most `max` (≥ 2) UTF-16 units. */
export const splitText = (text: string, max: number): ReadonlyArray<string> => {
  const pieces: Array<string> = []
  let start = 0
  while (text.length - start > max) {
    let end = start + max
    if (isHigh(text.charCodeAt(end - 1)) && isLow(text.charCodeAt(end))) end -= 1
    pieces.push(text.slice(start, end))
    start = end
  }
  pieces.push(text.slice(start))
  return pieces
}

export const splitDelta = (event: PartDelta, max: number): ReadonlyArray<PartDelta> =>
  splitText(event.text, max).map((text, index) =>
    index === 0 && event.providerOptions !== undefined
      ? { kind: "part_delta", id: event.id, text, providerOptions: event.providerOptions }
      : { kind: "part_delta", id: event.id, text },
  )
