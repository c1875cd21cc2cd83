/**
 * `text` cut to at most `max` UTF-16 units, `…` its last, never between the halves of a surrogate
 * pair (a half alone prints as U+FFFD, or as an escape in an inspected session).
 */
export const clip = (text: string, max: number): string => {
  if (text.length <= max) return text
  let end = max - 1
  const code = text.charCodeAt(end - 1)
  if (code >= 0xd800 && code <= 0xdbff) end -= 1
  return `${text.slice(0, end)}…`
}

/** `text` on one line (each run of whitespace one space, trimmed), clipped to `max` units. */
export const oneLine = (text: string, max: number): string => clip(text.replace(/\s+/g, " ").trim(), max)
