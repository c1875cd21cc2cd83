/**
 * The host's secrets kept out of what a model stream yields (docs/model.md §4.3): a provider (or a
 * proxy in front of it) that echoes the API key into the answer's text, its reasoning or a tool
 * call's input would otherwise have it shown, stored in the log and sent back in every later request.
 *
 * Text arrives in deltas, and a key may be split across two of them: a part's text that ends with
 * the beginning of a secret is held back until the next delta of the part tells whether the secret
 * follows, and a part that ends so waits (its end too) for the next part's text: a secret that runs
 * from reasoning into text, or from one block into the next, is replaced as well. No secret is
 * ever yielded whole or in two pieces. A stream with no secrets (a local server without a key)
 * passes through untouched.
 */
import { Canonical, type Identity, type Model } from "@maka/facts"
import { REDACTED, scrub } from "./secrets.ts"

export interface SecretFilter {
  /**
   * The events to yield for `events`, in order, every secret replaced, a part's possible secret
   * start held back; `events` itself when there are no secrets.
   */
  readonly filter: (events: Array<Model.ModelEvent>) => Array<Model.ModelEvent>
}

/** Forwards every event as it is. */
const PASS_THROUGH: SecretFilter = { filter: (events) => events }

/** A JSON value with every string (and key) scrubbed; the value itself when nothing changed. */
const scrubJson = (value: Identity.Json, forms: ReadonlyArray<string>): Identity.Json => {
  if (typeof value === "string") return scrub(value, forms)
  if (typeof value !== "object" || value === null) return value
  if (Array.isArray(value)) {
    let changed = false
    const items = value.map((item) => {
      const next = scrubJson(item, forms)
      changed ||= next !== item
      return next
    })
    return changed ? items : value
  }
  let changed = false
  const entries = Object.entries(value).map(([key, item]) => {
    const nextKey = scrub(key, forms)
    const next = scrubJson(item as Identity.Json, forms)
    changed ||= nextKey !== key || next !== item
    return [nextKey, next] as const
  })
  return changed ? Object.fromEntries(entries) : value
}

/**
 * A JSON object (a tool call's input, provider options) with every secret replaced; itself when it holds none (looked for in
 * its canonical text, which is written without recursion, so any depth the provider's JSON had is
 * read). The replaced text is parsed back; should a replacement have broken it (a secret spanning
 * an escape), the input's strings are replaced one by one.
 */
const scrubInput = <A extends Identity.JsonObject>(input: A, forms: ReadonlyArray<string>): A => {
  let text: string
  try {
    text = Canonical.stringify(input)
  } catch {
    // Not canonical JSON (a number JSON.parse made infinite): the call is refused before it is stored.
    return input
  }
  if (!forms.some((form) => text.includes(form))) return input
  try {
    return JSON.parse(scrub(text, forms)) as A
  } catch {
    return scrubJson(input, forms) as A
  }
}

/** The secret filter of one stream over `forms` (`secrets.ts` `formsOf`, longest first). */
export const make = (forms: ReadonlyArray<string>): SecretFilter => {
  if (forms.length === 0) return PASS_THROUGH
  const longest = forms[0]!.length
  // The first characters of the forms: a held-back suffix starts with one of them.
  const starts = new Set(forms.map((form) => form.charCodeAt(0)))
  /** Per part id: the text held back, and the last delta's provider options it goes out with. */
  const held = new Map<string, Model.ModelEvent & { readonly kind: "part_delta" }>()

  /** Where the longest suffix of `text` that begins some secret starts; `text.length` when none does. */
  const heldFrom = (text: string): number => {
    for (let index = Math.max(0, text.length - longest + 1); index < text.length; index++) {
      if (!starts.has(text.charCodeAt(index))) continue
      const suffix = text.slice(index)
      if (forms.some((form) => form.length > suffix.length && form.startsWith(suffix))) return index
    }
    return text.length
  }

  const flush = (id: string, out: Array<Model.ModelEvent>): void => {
    const rest = held.get(id)
    if (rest === undefined) return
    held.delete(id)
    out.push(rest)
  }

  /**
   * A tool call's id with every secret replaced by `redacted`, no brackets: the id goes back to the
   * provider with the call's result, and Anthropic takes only `[A-Za-z0-9_-]` in one.
   */
  const scrubId = (id: string): string => scrub(id, forms, "redacted")

  /** `event` with the strings of its provider options (a signature, redacted thinking) scrubbed. */
  const withScrubbedOptions = (event: Model.ModelEvent): Model.ModelEvent => {
    if (!("providerOptions" in event) || event.providerOptions === undefined) return event
    const providerOptions = scrubInput(event.providerOptions, forms)
    return providerOptions === event.providerOptions ? event : { ...event, providerOptions }
  }

  type Delta = Model.ModelEvent & { readonly kind: "part_delta" }

  /**
   * A part that ended holding the start of a secret (`held`), its finish and the events after it
   * held back until the next part's text shows whether the secret goes on there (a provider that
   * switches from reasoning to text, or from one block to the next, inside the echoed key).
   */
  let crossing:
    | { readonly held: Delta; readonly finish: Model.ModelEvent; readonly between: Array<Model.ModelEvent>; tail: Delta | undefined }
    | undefined

  /** Ends a crossing whose secret did not go on: what was held goes out as it came. */
  const releaseCrossing = (out: Array<Model.ModelEvent>): void => {
    const open = crossing
    if (open === undefined) return
    crossing = undefined
    out.push(open.held, open.finish, ...open.between)
    if (open.tail !== undefined) push(open.tail, out)
  }

  /** The next part's text while a crossing is open: the secret found across both parts is replaced. */
  const continueCrossing = (delta: Delta, out: Array<Model.ModelEvent>): void => {
    const open = crossing!
    const tail: Delta = open.tail === undefined ? delta : { ...delta, text: open.tail.text + delta.text }
    const before = open.held.text
    const combined = before + tail.text
    for (let index = 0; index < before.length; index++) {
      const form = forms.find((candidate) => combined.startsWith(candidate, index))
      if (form === undefined || index + form.length <= before.length) continue
      // The secret spans the two parts: each keeps its text around it, the first a marker.
      crossing = undefined
      out.push({ ...open.held, text: `${before.slice(0, index)}${REDACTED}` }, open.finish, ...open.between)
      const rest = combined.slice(index + form.length)
      if (rest !== "") push({ ...tail, text: rest }, out)
      return
    }
    // Still the start of a secret across the boundary: wait for more of the next part.
    if (heldFrom(combined) < before.length) {
      open.tail = tail
      return
    }
    open.tail = tail
    releaseCrossing(out)
  }

  const push = (given: Model.ModelEvent, out: Array<Model.ModelEvent>): void => {
      const event = withScrubbedOptions(given)
      if (crossing !== undefined) {
        if (event.kind === "part_started") return void crossing.between.push(event)
        if (event.kind === "part_delta" && event.id !== crossing.held.id) return continueCrossing(event, out)
        releaseCrossing(out)
      }
      switch (event.kind) {
        case "part_delta": {
          const before = held.get(event.id)
          held.delete(event.id)
          const text = scrub(before === undefined ? event.text : before.text + event.text, forms)
          const cut = heldFrom(text)
          if (cut < text.length) held.set(event.id, { ...event, text: text.slice(cut) })
          if (cut > 0) out.push(cut === text.length && text === event.text ? event : { ...event, text: text.slice(0, cut) })
          return
        }
        case "part_finished": {
          const rest = held.get(event.id)
          held.delete(event.id)
          // The part ends with the start of a secret: its end waits for the next part's text.
          if (rest !== undefined) crossing = { held: rest, finish: event, between: [], tail: undefined }
          else out.push(event)
          return
        }
        case "tool_call": {
          const input = scrubInput(event.input, forms)
          const name = scrub(event.name, forms)
          const id = scrubId(event.id)
          out.push(input === event.input && name === event.name && id === event.id ? event : { ...event, id, name, input })
          return
        }
        case "response_metadata": {
          const id = event.id === undefined ? undefined : scrub(event.id, forms)
          const model = event.model === undefined ? undefined : scrub(event.model, forms)
          out.push(id === event.id && model === event.model ? event : { ...event, ...(id === undefined ? {} : { id }), ...(model === undefined ? {} : { model }) })
          return
        }
        case "finished":
          // A part the provider never finished still yields its text before the stream's end.
          for (const id of [...held.keys()]) flush(id, out)
          out.push(event)
          return
        default:
          out.push(event)
      }
  }

  return {
    filter: (events) => {
      const out: Array<Model.ModelEvent> = []
      for (const event of events) push(event, out)
      return out
    },
  }
}
