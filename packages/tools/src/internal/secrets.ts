/**
 * Scrubbing secrets from text a tool produced before it is stored: each secret is replaced in every
 * form it can come back in (as given, trimmed as an HTTP header value is sent, JSON-escaped and
 * URL-encoded), longest form first so no form leaves a fragment of a longer one behind, and so is
 * what a cut left of a form (its first characters, `fragmentLength` of them or more, or its last 8
 * or more).
 */
import { Canonical, type ToolCall } from "@maka/facts"
import { Redacted } from "effect"

/** What replaces a secret. */
export const REDACTED = "[redacted]"

/** Shorter strings are not scrubbed: they would erase ordinary text. */
const MIN_SECRET_LENGTH = 4

/**
 * The URL encodings of `value` a server may echo it in: `encodeURIComponent`'s, RFC 3986's and form
 * encoding's (`URLSearchParams`, Python's `quote_plus`: `!'()*~` escaped too), each with `%20` or `+`
 * for a space and with upper- or lowercase hex.
 */
const urlForms = (value: string): ReadonlyArray<string> => {
  const component = encodeURIComponent(value)
  const strict = component.replace(/[!'()*~]/g, (character) => `%${character.charCodeAt(0).toString(16).toUpperCase()}`)
  const form = new URLSearchParams([["", value]]).toString().slice(1)
  return [component, strict, form].flatMap((encoded) => {
    const plus = encoded.replace(/%20/g, "+")
    return [encoded, plus].flatMap((spelled) => [spelled, spelled.replace(/%[0-9A-F]{2}/g, (hex) => hex.toLowerCase())])
  })
}

/**
 * The credential of an authorization header's value (`Bearer TOKEN`, `Basic …`, `Token …`): a
 * server or a model echoes the token without its scheme, so the token (8 characters or more) is a
 * secret of its own. A value whose credential is a placeholder (`Bearer undefined`, a header built
 * from an unset variable) holds no secret, and scrubbing it would erase a word: it has no forms.
 */
const AUTHORIZATION = /^(?:bearer|basic|token|bot|apikey|api-key|key)\s+(\S{8,})$/i
const PLACEHOLDER = /^(?:undefined|null|none|placeholder|changeme|your[-_]?(?:api[-_]?)?(?:key|token))$/i

/** Every form of `secret` that text can carry, longest first. */
export const formsOf = (secret: string): ReadonlyArray<string> => {
  const forms = new Set<string>()
  const credential = AUTHORIZATION.exec(secret.trim())?.[1]
  if (credential !== undefined && PLACEHOLDER.test(credential)) return []
  for (const value of credential === undefined ? [secret, secret.trim()] : [secret, secret.trim(), credential]) {
    forms.add(value)
    const escaped = JSON.stringify(value).slice(1, -1)
    forms.add(escaped)
    // Escaped twice: a JSON output's string holding the JSON-escaped secret (a command that printed
    // `json.dumps(key)`), as the output's canonical text carries it.
    forms.add(JSON.stringify(escaped).slice(1, -1))
    for (const encoded of urlForms(value)) forms.add(encoded)
  }
  return [...forms].filter((form) => form.length >= MIN_SECRET_LENGTH).sort((left, right) => right.length - left.length)
}

/** Every form of every secret, longest first. */
const allForms = (secrets: ReadonlyArray<Redacted.Redacted<string>>): ReadonlyArray<string> =>
  secrets.flatMap((secret) => formsOf(Redacted.value(secret))).sort((left, right) => right.length - left.length)

/**
 * How long a piece that begins a form must be to be scrubbed: half the form, at least 8 characters
 * and at most 16. Shorter pieces are left: they would erase ordinary text, and a key's first
 * characters are often its vendor's prefix, which code and docs mention (`sk-proj-`,
 * `sk-ant-api03-`: 8 and 13 characters); what a cut leaves of a long key's start is then a few of
 * its random characters at most.
 */
export const fragmentLength = (form: string): number => Math.min(16, Math.max(8, Math.ceil(form.length / 2)))

/** A JSON Web Token's start, alone or after a scheme: its base64url header (`{"` is `eyJ`), then a dot. */
const JWT_START = /(?:^|(?<=\s))eyJ[A-Za-z0-9_-]+\./

/** How long a piece that ends a form must be to be scrubbed: a key's end is random, no prefix. */
export const TAIL_FRAGMENT_LENGTH = 8

/**
 * The ranges of `text` holding a piece of `form` that a cut left: a prefix of at least
 * `fragmentLength(form)` characters (a tool kept the head of its output and cut the secret's end
 * off) or a suffix of at least `TAIL_FRAGMENT_LENGTH` (a page or window that begins inside it);
 * a prefix of a JSON Web Token only past its public header and half of what follows it.
 */
const fragmentsOf = (text: string, form: string): Array<readonly [number, number]> => {
  const ranges: Array<readonly [number, number]> = []
  const least = fragmentLength(form)
  if (form.length <= least) return ranges
  // A JSON Web Token's header (after a scheme, or alone) is shared by many tokens, and so is its
  // payload's start (`{"sub":"…` and the like): a piece of the form's start counts only once it runs
  // past the header, its dot and half of what follows.
  const jwt = JWT_START.exec(form)
  const afterHeader = jwt === null ? 0 : jwt.index + jwt[0].length
  const headLength = jwt === null ? least : Math.max(least, afterHeader + Math.ceil((form.length - afterHeader) / 2))
  const head = form.slice(0, headLength)
  for (let at = headLength >= form.length ? -1 : text.indexOf(head); at !== -1; at = text.indexOf(head, at + 1)) {
    let length = headLength
    while (length < form.length && text[at + length] === form[length]) length++
    ranges.push([at, at + length])
  }
  const tailLeast = Math.min(least, TAIL_FRAGMENT_LENGTH)
  const tail = form.slice(-tailLeast)
  for (let at = text.indexOf(tail); at !== -1; at = text.indexOf(tail, at + 1)) {
    const end = at + tailLeast
    let length = tailLeast
    while (length < form.length && end - length - 1 >= 0 && text[end - length - 1] === form[form.length - length - 1]) length++
    ranges.push([end - length, end])
  }
  return ranges
}

/** `text` with the ranges (in any order, overlapping or not) replaced by one `[redacted]` each run. */
const redactRanges = (text: string, ranges: Array<readonly [number, number]>): string => {
  if (ranges.length === 0) return text
  ranges.sort((left, right) => left[0] - right[0])
  let result = ""
  let position = 0
  let open: [number, number] | undefined
  for (const [start, end] of ranges) {
    if (open !== undefined && start <= open[1]) {
      open[1] = Math.max(open[1], end)
      continue
    }
    if (open !== undefined) {
      result += `${text.slice(position, open[0])}${REDACTED}`
      position = open[1]
    }
    open = [start, end]
  }
  if (open !== undefined) result += `${text.slice(position, open[0])}${REDACTED}`
  return result + text.slice(open === undefined ? position : open[1])
}

const replaceForms = (text: string, forms: ReadonlyArray<string>): string => {
  let current = text
  // Looked for first: most text holds none, and a split would copy it for nothing.
  for (const form of forms) if (current.includes(form)) current = current.split(form).join(REDACTED)
  // What a cut left of a secret (a tool cuts its output before it is scrubbed).
  return redactRanges(current, forms.flatMap((form) => fragmentsOf(current, form)))
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
