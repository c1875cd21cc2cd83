/**
 * Scrubbing secrets from text a tool produced before it is stored: each secret is replaced in every
 * form it can come back in (as given, trimmed as an HTTP header value is sent, JSON-escaped and
 * URL-encoded), longest form first so no form leaves a fragment of a longer one behind.
 */
import { Canonical, type ToolCall } from "@maka/facts"
import { Redacted } from "effect"

/** What replaces a secret. */
export const REDACTED = "[redacted]"

/** Shorter strings are not scrubbed: they would erase ordinary text. */
const MIN_SECRET_LENGTH = 4

/** Every form of `secret` that text can carry, longest first. */
export const formsOf = (secret: string): ReadonlyArray<string> => {
  const forms = new Set<string>()
  for (const value of [secret, secret.trim()]) {
    forms.add(value)
    forms.add(JSON.stringify(value).slice(1, -1))
    forms.add(encodeURIComponent(value))
    forms.add(encodeURIComponent(value).replace(/%20/g, "+"))
  }
  return [...forms].filter((form) => form.length >= MIN_SECRET_LENGTH).sort((left, right) => right.length - left.length)
}

/** Every form of every secret, longest first. */
const allForms = (secrets: ReadonlyArray<Redacted.Redacted<string>>): ReadonlyArray<string> =>
  secrets.flatMap((secret) => formsOf(Redacted.value(secret))).sort((left, right) => right.length - left.length)

const replaceForms = (text: string, forms: ReadonlyArray<string>): string => {
  let current = text
  // Looked for first: most text holds none, and a split would copy it for nothing.
  for (const form of forms) if (current.includes(form)) current = current.split(form).join(REDACTED)
  return current
}

/** `text` with every form of every secret replaced by `[redacted]`. */
export const scrub = (text: string, secrets: ReadonlyArray<Redacted.Redacted<string>>): string =>
  secrets.length === 0 ? text : replaceForms(text, allForms(secrets))

/**
 * A tool's output with every form of every secret replaced by `[redacted]` (a text's value, each
 * string and key of a JSON value); the output itself when it holds none. A JSON value is looked
 * through in its canonical text (written without recursion, any depth) and parsed back; one that
 * is no canonical JSON is left to the store's check, which refuses it.
 */
export const scrubOutput = (output: ToolCall.ToolOutput, secrets: ReadonlyArray<Redacted.Redacted<string>>): ToolCall.ToolOutput => {
  if (secrets.length === 0) return output
  const forms = allForms(secrets)
  if (output.format === "text") {
    const value = replaceForms(output.value, forms)
    return value === output.value ? output : { format: "text", value }
  }
  let text: string
  try {
    text = Canonical.stringify(output.value)
  } catch {
    return output
  }
  const replaced = replaceForms(text, forms)
  if (replaced === text) return output
  try {
    return { format: "json", value: JSON.parse(replaced) as ToolCall.ToolOutput["value"] }
  } catch {
    // A secret across an escape (`\u0001` beside it): what is left of the value is not stored.
    return { format: "text", value: REDACTED }
  }
}
