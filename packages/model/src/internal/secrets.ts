/**
 * The forms a secret can come back in, and scrubbing them from text: as given, as sent (Node trims
 * a header value's surrounding whitespace, so a key read from a file with a trailing newline is sent
 * without it), JSON-escaped and URL-encoded (`%20` or `+` for a space), each of the given and the
 * trimmed value. Forms are replaced longest first, so no form leaves a fragment of a longer one.
 */

/** What replaces a secret. */
export const REDACTED = "[redacted]"

/** Shorter forms are not scrubbed: they would erase ordinary text. */
const MIN_FORM_LENGTH = 4

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

/** Every form of every secret, longest first; empty secrets give none. */
export const formsOf = (secrets: ReadonlyArray<string>): ReadonlyArray<string> => {
  const forms = new Set<string>()
  for (const secret of secrets) {
    const credential = AUTHORIZATION.exec(secret.trim())?.[1]
    if (credential !== undefined && PLACEHOLDER.test(credential)) continue
    for (const value of credential === undefined ? [secret, secret.trim()] : [secret, secret.trim(), credential]) {
      forms.add(value)
      forms.add(JSON.stringify(value).slice(1, -1))
      for (const encoded of urlForms(value)) forms.add(encoded)
    }
  }
  return [...forms].filter((form) => form.length >= MIN_FORM_LENGTH).sort((left, right) => right.length - left.length)
}

/**
 * `text` that was cut short (at a size limit, or by a body that failed half-way), without a tail of
 * two characters or more that begins one of `forms`: the cut may have split a secret, and the start
 * it left is none of its whole forms, so `scrub` would let it through. Such a tail is `[redacted]`.
 */
export const withoutCutSecret = (text: string, forms: ReadonlyArray<string>): string => {
  const longest = forms.reduce((most, form) => Math.max(most, form.length), 0)
  for (let length = Math.min(text.length, longest - 1); length >= 2; length--) {
    const tail = text.slice(text.length - length)
    if (forms.some((form) => form.length > length && form.startsWith(tail))) return text.slice(0, text.length - length) + REDACTED
  }
  return text
}

/** `text` with every one of `forms` (from `formsOf`) replaced by `replacement` (`[redacted]`). */
export const scrub = (text: string, forms: ReadonlyArray<string>, replacement = REDACTED): string => {
  let current = text
  // Looked for first: most text holds none, and a split would copy it for nothing.
  for (const form of forms) if (current.includes(form)) current = current.split(form).join(replacement)
  return current
}
