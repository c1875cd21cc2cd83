/**
 * Readable one-line descriptions of defects and unknown errors, for the messages of uncertain
 * outcomes and preparation failures, and UTF-8 aware text cutting. Never throws.
 */
import { Canonical } from "@maka/facts"
import { Result } from "effect"

/** What `describeDefect` says of a value that threw while it was described (a getter, a proxy). */
const UNDESCRIBABLE = "an error that could not be described"

const describe = (defect: unknown): string => {
  if (defect instanceof Error) {
    // Read once, and only a string is a message: a getter may answer anything, differently each time.
    const message: unknown = defect.message
    return typeof message === "string" && message.length > 0 ? `${defect.name}: ${message}` : String(defect.name)
  }
  if (typeof defect === "string") return defect
  if (typeof defect === "object" && defect !== null && "_tag" in defect) {
    const tag: unknown = defect._tag
    if (typeof tag === "string") {
      const message: unknown = "message" in defect ? defect.message : undefined
      return typeof message === "string" ? `${tag}: ${message}` : tag
    }
  }
  return Result.getOrElse(
    Result.try(() => JSON.stringify(defect) ?? String(defect)),
    () => Object.prototype.toString.call(defect),
  )
}

/**
 * A defect or unknown error in one line. The value may be anyone's (a tool's thrown error, a
 * validator's), so reading it can throw (a getter, a proxy's trap); that gives `UNDESCRIBABLE`.
 */
export const describeDefect = (defect: unknown): string => {
  try {
    return describe(defect)
  } catch {
    return UNDESCRIBABLE
  }
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

/** UTF-8 bytes of `code` inside a JSON string, as `JSON.stringify` writes it. */
const encodedWidth = (code: number): number => {
  if (code === 0x22 || code === 0x5c) return 2
  if (code < 0x20) return code === 0x08 || code === 0x09 || code === 0x0a || code === 0x0c || code === 0x0d ? 2 : 6
  if (code < 0x80) return 1
  if (code < 0x800) return 2
  if (code >= 0xd800 && code <= 0xdfff) return 6 // a lone surrogate, escaped as \uXXXX
  return code <= 0xffff ? 3 : 4
}

/** UTF-8 bytes of `text` inside a JSON string: escapes counted, quotes not. */
export const encodedLength = (text: string): number => Canonical.utf8Length(JSON.stringify(text)) - 2

/** The longest prefix of `text` whose `encodedLength` is at most `maxBytes`, never half a surrogate pair. */
export const cutEncoded = (text: string, maxBytes: number): string => {
  let bytes = 0
  let end = 0
  while (end < text.length) {
    const code = text.codePointAt(end)!
    const width = encodedWidth(code)
    if (bytes + width > maxBytes) break
    bytes += width
    end += code > 0xffff ? 2 : 1
  }
  return text.slice(0, end)
}
