/**
 * Digests: `"sha256:" + 64 lowercase hex` with a domain tag per digest kind (docs/log-format.md §2.1), the
 * framed log-prefix and run-prefix digests (docs/log-format.md §3.5), and the bare SHA-256 of archive bodies.
 * A tagged digest hashes `utf8(tag) ‖ 0x00 ‖ canonical JSON`; prefix digests frame every variable
 * part with a u64-BE length so no two inputs share bytes.
 */
import { createHash, type Hash } from "node:crypto"
import * as Canonical from "./Canonical.ts"
import * as Writer from "./internal/canonical-writer.ts"

export const DIGEST_PATTERN = /^sha256:[0-9a-f]{64}$/

export const isDigest = (text: string): boolean => DIGEST_PATTERN.test(text)

/** The domain tag of every digest kind. */
export const DigestTag = Object.freeze({
  logPrefix: "maka.log-prefix.v3",
  runPrefix: "maka.run-prefix.v1",
  modelInput: "maka.model-input.v1",
  route: "maka.route.v1",
  effectiveSource: "maka.effective-source.v1",
  toolProjection: "maka.tool-projection.v1",
  toolRaw: "maka.tool-raw.v1",
  messageContent: "maka.message-content.v1",
  toolCatalog: "maka.tool-catalog.v1"
} as const)

export type DigestTag = (typeof DigestTag)[keyof typeof DigestTag]

/** The `projection` field of every model-input digest. */
export const MODEL_HISTORY_PROJECTION = "maka.model-history.v1"

const SEPARATOR = Uint8Array.of(0)

const startHash = (tag: string): Hash => createHash("sha256").update(tag, "utf8").update(SEPARATOR)

const finish = (hash: Hash): string => `sha256:${hash.digest("hex")}`

const checkU64 = (name: string, value: number): void => {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`${name} must be a non-negative safe integer, got ${value}`)
  }
}

const u64 = (name: string, value: number): Buffer => {
  checkU64(name, value)
  const bytes = Buffer.alloc(8)
  bytes.writeBigUInt64BE(BigInt(value))
  return bytes
}

/** Appends `u64-BE(byte length) ‖ bytes`. */
const updateFramed = (hash: Hash, text: string): Hash =>
  hash.update(u64("length", Buffer.byteLength(text, "utf8"))).update(text, "utf8")

/** The bytes an event adds to a prefix digest before `hash` sees them: at most this many at once. */
const PENDING_BYTES = 64 * 1024

/** Writes `value` (a non-negative safe integer, checked by the caller) as u64-BE at `offset`. */
const writeU64 = (bytes: Buffer, offset: number, value: number): void => {
  bytes.writeUInt32BE(Math.floor(value / 0x1_0000_0000), offset)
  bytes.writeUInt32BE(value % 0x1_0000_0000, offset + 4)
}

/**
 * Frames events (`u64-BE(sequence) ‖ u64-BE(byte length) ‖ utf8(json)`) into `hash` through one
 * buffer: a session's events go to the hash in updates of up to 64 KiB instead of three small
 * updates each (the per-call cost of `Hash.update` dominated reading a long session). The bytes
 * hashed are exactly those of the framing; only the calls are fewer. Every hasher shares the one
 * buffer (kept hashers cost no memory): a hasher that takes it first hands the bytes its last
 * user left in it to that user's hash, which are older than anything that user adds later.
 */
class FramedEvents {
  constructor(private readonly hash: Hash) {}

  /** Frames one event; returns the UTF-8 byte length of its text. */
  add(sequence: number, json: string): number {
    checkU64("sequence", sequence)
    if (shared.owner !== this) shared.owner?.flush()
    // UTF-8 takes at most 3 bytes per UTF-16 unit: the text fits when that bound does.
    const bound = 16 + 3 * json.length
    if (shared.used + bound > PENDING_BYTES) this.flush()
    if (bound > PENDING_BYTES) {
      const bytes = Buffer.byteLength(json, "utf8")
      this.hash.update(u64("sequence", sequence)).update(u64("length", bytes)).update(json, "utf8")
      return bytes
    }
    const at = shared.used
    const length = shared.bytes.write(json, at + 16, "utf8")
    writeU64(shared.bytes, at, sequence)
    writeU64(shared.bytes, at + 8, length)
    shared.used = at + 16 + length
    shared.owner = this
    return length
  }

  /** Hands this hasher's buffered bytes to `hash`; call before reading or copying it. */
  flush(): Hash {
    if (shared.owner === this) {
      if (shared.used > 0) this.hash.update(shared.bytes.subarray(0, shared.used))
      shared.used = 0
      shared.owner = undefined
    }
    return this.hash
  }
}

/** The buffer every `FramedEvents` shares, and whose bytes it holds. */
const shared: { readonly bytes: Buffer; used: number; owner: FramedEvents | undefined } = {
  bytes: Buffer.alloc(PENDING_BYTES),
  used: 0,
  owner: undefined,
}

/** `"sha256:" + hex(SHA-256(utf8(tag) ‖ 0x00 ‖ bytes))` over bytes already serialized. */
export const taggedBytes = (tag: string, bytes: string | Uint8Array): string =>
  finish(typeof bytes === "string" ? startHash(tag).update(bytes, "utf8") : startHash(tag).update(bytes))

/** `"sha256:" + hex(SHA-256(utf8(tag) ‖ 0x00 ‖ utf8(canonical JSON of value)))`; throws `CanonicalJsonError`. */
export const tagged = (tag: string, value: unknown): string => taggedBytes(tag, Canonical.stringify(value))

/** Bare 64 lowercase hex SHA-256, no prefix and no tag (an archive's `bodySha256`). */
export const sha256Hex = (bytes: string | Uint8Array): string =>
  (typeof bytes === "string" ? createHash("sha256").update(bytes, "utf8") : createHash("sha256").update(bytes)).digest(
    "hex"
  )

/** The request object's keys in canonical order, as `modelInput` frames its fragments. */
const MODEL_INPUT_OPENING = `{"maxOutputTokens":`
const MODEL_INPUT_PROMPT = `,"projection":${JSON.stringify(MODEL_HISTORY_PROJECTION)},"prompt":[`

/**
 * A model-input hash kept after a request's last prompt message, for the next request of the same
 * prompt to extend: the state covers `head` and the fragments of `prompt[0..count)`, every one of
 * them a sealed (frozen) message, so the same objects always mean the same bytes.
 */
interface Extendable {
  readonly head: string
  readonly prompt: ReadonlyArray<unknown>
  readonly count: number
  readonly hash: Hash
}

/** Keyed by the last message a kept hash covers; one per prompt that grows step after step. */
const extendable = new WeakMap<object, Extendable>()

/** How far back from a prompt's end a kept hash is looked for (a step adds a few messages). */
const EXTEND_SEARCH = 64

/** The kept hash that `prompt` (after `head`) extends, with how many messages it covers. */
const extendableFor = (head: string, prompt: ReadonlyArray<unknown>): Extendable | undefined => {
  for (let index = prompt.length - 1; index >= 0 && index >= prompt.length - EXTEND_SEARCH; index -= 1) {
    const message = prompt[index]
    if (typeof message !== "object" || message === null) continue
    const kept = extendable.get(message)
    if (kept === undefined || kept.count !== index + 1 || kept.head !== head) continue
    for (let at = 0; at < kept.count; at += 1) if (kept.prompt[at] !== prompt[at]) return undefined
    return kept
  }
  return undefined
}

/**
 * The tagged digest of the request object's canonical JSON, assembled from fragments: the text of
 * each sealed prompt message is reused (`Canonical.seal`), any other is written. A hash kept after
 * an earlier request whose prompt this one extends (the same sealed message objects, then more) is
 * copied and extended with the new messages only; the bytes hashed are the same as the whole
 * text's. `undefined` when some part is not plain JSON, so the whole request goes to `tagged`,
 * which refuses it with the path.
 */
const modelInputByFragments = (input: ModelInputFields): string | undefined => {
  const prompt: unknown = input.prompt
  if (!Array.isArray(prompt) || Object.getPrototypeOf(prompt) !== Array.prototype) return undefined
  const messages: ReadonlyArray<unknown> = prompt
  const maxOutputTokens = Writer.writeText(input.maxOutputTokens)
  const providerOptions = Writer.sealedText(input.providerOptions) ?? Writer.writeText(input.providerOptions)
  const tools = Writer.sealedText(input.tools) ?? Writer.writeText(input.tools)
  if (maxOutputTokens === undefined || providerOptions === undefined || tools === undefined) return undefined
  const head = `${MODEL_INPUT_OPENING}${maxOutputTokens}${MODEL_INPUT_PROMPT}`
  const kept = extendableFor(head, messages)
  const from = kept?.count ?? 0
  const fragments: Array<string> = new Array(messages.length - from)
  // The kept prefix is sealed; the hash after this prompt is kept only if every new message is too.
  let isSealed = true
  // An index loop: a hole reads as undefined, which no writer accepts.
  for (let index = from; index < messages.length; index += 1) {
    const message = messages[index]
    const sealed = Writer.sealedText(message)
    if (sealed === undefined) isSealed = false
    const fragment = sealed ?? Writer.writeText(message)
    if (fragment === undefined) return undefined
    fragments[index - from] = fragment
  }
  const hash = kept === undefined ? startHash(DigestTag.modelInput).update(head, "utf8") : kept.hash.copy()
  if (fragments.length > 0) {
    hash.update(`${from > 0 ? "," : ""}${fragments.join(",")}`, "utf8")
    if (isSealed) {
      // A copy of the prompt's references: the caller's array may change, its sealed messages cannot.
      extendable.set(messages[messages.length - 1] as object, { head, prompt: messages.slice(), count: messages.length, hash: hash.copy() })
      // The hash this one extends is not looked for again: the prompt has grown past it.
      if (kept !== undefined) extendable.delete(kept.prompt[kept.count - 1] as object)
    }
  }
  return finish(hash.update(`],"providerOptions":${providerOptions},"tools":${tools}}`, "utf8"))
}

export interface ModelInputFields {
  readonly prompt: unknown
  readonly tools: unknown
  readonly providerOptions: unknown
  readonly maxOutputTokens: number
}

/**
 * `inputDigest` of one model request (docs/engine.md §5.5): the tagged canonical JSON of
 * `{projection, prompt, tools, providerOptions, maxOutputTokens}`. Built from one fragment per
 * prompt message, so a prompt whose messages are sealed (`Canonical.seal`) and reused step after
 * step costs only its new messages: their text, and their bytes added to a copy of the hash kept
 * after the previous request; the bytes hashed are the same either way.
 */
export const modelInput = (input: ModelInputFields): string =>
  modelInputByFragments(input) ??
  tagged(DigestTag.modelInput, {
    projection: MODEL_HISTORY_PROJECTION,
    prompt: input.prompt,
    tools: input.tools,
    providerOptions: input.providerOptions,
    maxOutputTokens: input.maxOutputTokens
  })

/** `routeIdentity`: a provider configuration without secrets (docs/model.md §4.1). */
export const route = (configuration: unknown): string => tagged(DigestTag.route, configuration)

/** `effectiveSourceDigest`; `replacements` are hashed in the order given (settled-sequence order). */
export const effectiveSource = (
  sourceDigest: string,
  replacements: ReadonlyArray<{ readonly settledEventId: string; readonly archiveEventId: string }>
): string =>
  tagged(DigestTag.effectiveSource, {
    sourceDigest,
    replacements: replacements.map(({ settledEventId, archiveEventId }) => ({ settledEventId, archiveEventId }))
  })

/** `sourceProjectionDigest` of a `DurableToolProjection`. */
export const toolProjection = (projection: unknown): string => tagged(DigestTag.toolProjection, projection)

/** `RawToolResultRef.digest` over the stored raw payload bytes (already canonical JSON). */
export const toolRaw = (bytes: string | Uint8Array): string => taggedBytes(DigestTag.toolRaw, bytes)

/** `submittedContentDigest` of a `MessageInput`. */
export const messageContent = (content: unknown): string => tagged(DigestTag.messageContent, content)

export interface ToolCatalogEntry {
  readonly name: string
  readonly description: string
  readonly inputSchema: unknown
  readonly semantics: unknown
}

/** Tool catalog digest over the entries sorted by name (UTF-16 code units); the input is not mutated. */
export const toolCatalog = (entries: ReadonlyArray<ToolCatalogEntry>): string =>
  tagged(
    DigestTag.toolCatalog,
    entries
      .map(({ name, description, inputSchema, semantics }) => ({ name, description, inputSchema, semantics }))
      .sort((left, right) => (left.name < right.name ? -1 : left.name > right.name ? 1 : 0))
  )

/** One stored event as the prefix digests read it: its sequence and its stored JSON text. */
export interface PrefixEvent {
  readonly sequence: number
  readonly json: string
}

/**
 * Running log-prefix digest (docs/log-format.md §3.5): `"maka.log-prefix.v3\0"`, the scope's canonical JSON framed,
 * then each event framed; `digest(highWater)` appends `highWater` on a copy, so the same hasher can
 * keep being extended afterwards.
 */
export class LogPrefixHash {
  private readonly events: FramedEvents

  private constructor(hash: Hash) {
    this.events = new FramedEvents(hash)
  }

  static start(scope: unknown): LogPrefixHash {
    return new LogPrefixHash(updateFramed(startHash(DigestTag.logPrefix), Canonical.stringify(scope)))
  }

  /** Appends one event to this hasher and returns it. */
  update(sequence: number, json: string): this {
    this.events.add(sequence, json)
    return this
  }

  /**
   * Appends one event to this hasher, as `update` does, and returns the size of its text in UTF-8
   * bytes (measured as it is hashed: a reader that also charges each event's bytes scans it once).
   */
  append(sequence: number, json: string): number {
    return this.events.add(sequence, json)
  }

  /** An independent hasher with the same state. */
  copy(): LogPrefixHash {
    return new LogPrefixHash(this.events.flush().copy())
  }

  /** The digest of the events so far with `highWater` last; this hasher stays usable. */
  digest(highWater: number): string {
    const highWaterBytes = u64("highWater", highWater)
    return finish(this.events.flush().copy().update(highWaterBytes))
  }
}

/** Log-prefix digest of `events` (in sequence order) in `scope`, ending at `highWater`. */
export const logPrefix = (scope: unknown, events: Iterable<PrefixEvent>, highWater: number): string => {
  const hash = LogPrefixHash.start(scope)
  for (const event of events) hash.update(event.sequence, event.json)
  return hash.digest(highWater)
}

/** Run-prefix digest (docs/log-format.md §3.5): `highWater` (the run's event count), the opening's `Invocation`, then each event. */
export const runPrefix = (highWater: number, invocation: unknown, events: Iterable<PrefixEvent>): string => {
  const framed = new FramedEvents(updateFramed(startHash(DigestTag.runPrefix).update(u64("highWater", highWater)), Canonical.stringify(invocation)))
  for (const event of events) framed.add(event.sequence, event.json)
  return finish(framed.flush())
}
