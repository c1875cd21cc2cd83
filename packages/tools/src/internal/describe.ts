/**
 * Readable one-line descriptions of defects and unknown errors, for the messages of uncertain
 * outcomes and preparation failures, and UTF-8 aware text cutting. Never throws.
 */
import { Result } from "effect"

export const describeDefect = (defect: unknown): string => {
  if (defect instanceof Error) return defect.message.length > 0 ? `${defect.name}: ${defect.message}` : defect.name
  if (typeof defect === "string") return defect
  if (typeof defect === "object" && defect !== null && "_tag" in defect && typeof defect._tag === "string") {
    const message = "message" in defect && typeof defect.message === "string" ? `: ${defect.message}` : ""
    return defect._tag + message
  }
  return Result.getOrElse(
    Result.try(() => JSON.stringify(defect) ?? String(defect)),
    () => Object.prototype.toString.call(defect),
  )
}

/** The longest prefix of `text` within `maxBytes` UTF-8 bytes that never splits a surrogate pair. */
export const cutUtf8 = (text: string, maxBytes: number): string => {
  if (Buffer.byteLength(text, "utf8") <= maxBytes) return text
  let bytes = 0
  let end = 0
  while (end < text.length) {
    const code = text.codePointAt(end)!
    const width = code <= 0x7f ? 1 : code <= 0x7ff ? 2 : code <= 0xffff ? 3 : 4
    if (bytes + width > maxBytes) break
    bytes += width
    end += code > 0xffff ? 2 : 1
  }
  return text.slice(0, end)
}
