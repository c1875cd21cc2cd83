/**
 * Scrubbing secrets from text a tool produced before it is stored: each secret is replaced in every
 * form it can come back in (as given, trimmed as an HTTP header value is sent, JSON-escaped and
 * URL-encoded), longest form first so no form leaves a fragment of a longer one behind.
 */
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

/** `text` with every form of every secret replaced by `[redacted]`. */
export const scrub = (text: string, secrets: ReadonlyArray<Redacted.Redacted<string>>): string => {
  if (secrets.length === 0) return text
  const forms = secrets
    .flatMap((secret) => formsOf(Redacted.value(secret)))
    .sort((left, right) => right.length - left.length)
  return forms.reduce((current, form) => current.split(form).join(REDACTED), text)
}
