/**
 * The adapter's trust boundaries, fuzzed: SSE bodies (random chunk splits, mutated
 * `data:` lines, garbage bytes, invalid UTF-8, huge lines), provider JSON (mutated chat-completion and
 * Anthropic chunks: wrong types, missing fields, deep nesting) and error bodies. Every 25th case goes
 * over a real loopback socket; the rest reach the adapter through its `fetch` option as a `Response`
 * whose body yields exactly the fuzzed chunks (the same read path, without the socket's cost and with
 * exact read boundaries). Every input ends in
 * schema-valid `ModelEvent`s and a clean end, or a `ModelError`; never a defect, never a hang.
 * `MAKA_FUZZ_INPUTS` sets the inputs per decoder (default 2,000; the long setting is 100,000) and
 * `MAKA_FUZZ_SEED` the seed; a failure names the seed and the case.
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { Limits, Model } from "@maka/facts"
import { LanguageModel, ModelError, StepBuilder } from "@maka/model"
import { AnthropicSse, OpenAiSse } from "@maka/testkit"
import type { Respond } from "@maka/testkit"
import { Cause, Effect, Exit, Redacted, Result, Schema, Stream } from "effect"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { API_KEY, request } from "./support.ts"

const INPUTS = Number(process.env["MAKA_FUZZ_INPUTS"] ?? 2_000)
const SEED = Number(process.env["MAKA_FUZZ_SEED"] ?? 0x5eed_5e)
/** Ten minutes, or 30 ms per input at a long setting. */
const TIMEOUT_MS = Math.max(600_000, INPUTS * 30)

/** A small seeded generator (mulberry32), so a failing case can be replayed. */
const generator = (seed: number) => {
  let state = seed | 0
  const next = () => {
    state = (state + 0x6d2b79f5) | 0
    let t = Math.imul(state ^ (state >>> 15), 1 | state)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const int = (below: number) => Math.floor(next() * below)
  const pick = <A>(values: ReadonlyArray<A>): A => values[int(values.length)]!
  const chance = (p: number) => next() < p
  return { next, int, pick, chance }
}
type Random = ReturnType<typeof generator>

// ---------------------------------------------------------------------------------------------
// The scripted wire: each request takes the next queued response, written as the exact bytes given.

interface WireResponse {
  readonly status: number
  readonly contentType: string
  readonly headers?: Readonly<Record<string, string>>
  /** Written one write per chunk, so events and characters straddle reads. */
  readonly chunks: ReadonlyArray<Uint8Array>
}

const queue: Array<WireResponse> = []
let server: Server
let baseUrl = ""

beforeAll(async () => {
  server = createServer((incoming, response) => {
    incoming.resume()
    incoming.on("end", () => {
      const wire = queue.shift()
      if (wire === undefined) {
        response.writeHead(500, { "content-type": "text/plain" }).end("no case queued")
        return
      }
      response.writeHead(wire.status, { "content-type": wire.contentType, ...wire.headers })
      const write = (index: number): void => {
        if (index >= wire.chunks.length || response.destroyed) {
          response.end()
          return
        }
        const more = response.write(wire.chunks[index]!)
        if (more) setImmediate(() => write(index + 1))
        else response.once("drain", () => write(index + 1))
      }
      write(0)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
})

afterAll(async () => {
  server.closeAllConnections()
  await new Promise<void>((resolve) => server.close(() => resolve()))
})

/** The queued response as a `Response` whose body yields one chunk per read. */
const inMemory = (): Response => {
  const wire = queue.shift()
  if (wire === undefined) return new Response("no case queued", { status: 500 })
  let index = 0
  const body = new ReadableStream<Uint8Array>({
    pull: (controller) => {
      const chunk = wire.chunks[index++]
      if (chunk === undefined) controller.close()
      else controller.enqueue(chunk)
    },
  })
  return new Response(body, { status: wire.status, headers: { "content-type": wire.contentType, ...wire.headers } })
}

/** Whether the current case goes over the socket. */
let viaSocket = false

/** The models' `fetch`: the loopback server, or the in-memory response. */
const fuzzFetch = (input: string, init: RequestInit): Promise<Response> =>
  viaSocket ? fetch(input, init) : Promise.resolve().then(inMemory)

// ---------------------------------------------------------------------------------------------
// Generators

const encoder = new TextEncoder()

const textPieces = ["Hello", " world", "é", "\u00e9\u0301", "😀", "\ud83d", "\ude00", "\u0000", "\u2028", "\n", "\r\n", "data: x", "[DONE]", "\"", "\\", "{}", ""]
const randomText = (random: Random): string =>
  Array.from({ length: random.int(6) }, () => random.pick(textPieces)).join("")

/** A JSON value of a wrong or surprising type: the values providers have been seen to send, and worse. */
const wrongValue = (random: Random, depth = 0): unknown => {
  switch (random.int(depth > 2 ? 9 : 12)) {
    case 0:
      return null
    case 1:
      return random.pick([0, -1, 1.5, 2 ** 53, -(2 ** 60), 1e308, Number.MAX_SAFE_INTEGER])
    case 2:
      return randomText(random)
    case 3:
      return random.chance(0.5)
    case 4:
      return ""
    case 5:
      return "x".repeat(random.int(5_000))
    case 6:
      return random.pick(["stop", "tool_calls", "length", "content_filter", "end_turn", "tool_use", "max_tokens", "error", "[DONE]"])
    case 7:
      return random.int(4)
    case 8:
      return nested(random, 1 + random.int(64))
    case 9:
      return [wrongValue(random, depth + 1)]
    case 10:
      return { [random.pick(["index", "id", "type", "content", "text", "function", "arguments", "delta"])]: wrongValue(random, depth + 1) }
    default:
      return Array.from({ length: random.int(4) }, () => wrongValue(random, depth + 1))
  }
}

/** Deep nesting (arrays or objects), built without recursion. */
const nested = (random: Random, depth: number): unknown => {
  const isArray = random.chance(0.5)
  let value: unknown = random.pick([1, "x", null, {}])
  for (let level = 0; level < depth; level++) value = isArray ? [value] : { a: value }
  return value
}

/** Deeply nested JSON text (deeper than a recursive reader's stack), built as text. */
const deepText = (random: Random, depth: number): string =>
  random.chance(0.5) ? `${"[".repeat(depth)}1${"]".repeat(depth)}` : `${"{\"a\":".repeat(depth)}1${"}".repeat(depth)}`

/** A tool call's `arguments` text: JSON, broken JSON, or a deep document. */
const argumentsText = (random: Random): string => {
  switch (random.int(7)) {
    case 0:
      return JSON.stringify({ path: randomText(random) })
    case 1:
      return "{\"path\": "
    case 2:
      return JSON.stringify(wrongValue(random))
    case 3:
      return `{"a":${"[".repeat(1 + random.int(50_000))}${"]".repeat(random.int(50_001))}}`
    case 4:
      return `{"a":${deepText(random, 1 + random.int(random.chance(0.5) ? 30_000 : 200))}}`
    case 5:
      return "   "
    default:
      return randomText(random)
  }
}

/** Every JSON path of a value (objects and arrays), for mutations. */
const pathsOf = (value: unknown, limit = 200): Array<Array<string | number>> => {
  const paths: Array<Array<string | number>> = []
  const stack: Array<[unknown, Array<string | number>]> = [[value, []]]
  while (stack.length > 0 && paths.length < limit) {
    const [current, at] = stack.pop()!
    if (typeof current !== "object" || current === null) continue
    const keys: Array<string | number> = Array.isArray(current) ? Array.from({ length: current.length }, (_, index) => index) : Object.keys(current)
    for (const key of keys) {
      const child: unknown = Reflect.get(current, key)
      paths.push([...at, key])
      stack.push([child, [...at, key]])
    }
  }
  return paths
}

/** A JSON mutation of a valid chunk: a field dropped, retyped, renamed, added or nested. */
const mutateJson = (random: Random, value: unknown): unknown => {
  const copy: unknown = structuredClone(value)
  const paths = pathsOf(copy)
  const times = 1 + random.int(3)
  for (let round = 0; round < times; round++) {
    const at = paths.length === 0 ? [] : random.pick(paths)
    if (at.length === 0) return wrongValue(random)
    let parent: unknown = copy
    for (const key of at.slice(0, -1)) parent = typeof parent === "object" && parent !== null ? Reflect.get(parent, key) : undefined
    if (typeof parent !== "object" || parent === null) continue
    const key = at[at.length - 1]!
    switch (random.int(5)) {
      case 0:
        if (Array.isArray(parent) && typeof key === "number") parent.splice(key, 1)
        else Reflect.deleteProperty(parent, key)
        break
      case 1:
      case 2:
        Reflect.set(parent, key, wrongValue(random))
        break
      case 3: {
        // A key only objects can have (an own key, as `JSON.parse` makes it); on an array, an element.
        const value = wrongValue(random)
        const name = random.pick(["error", "usage", "choices", "tool_calls", "delta", "extra", "__proto__", "constructor"])
        if (Array.isArray(parent)) parent.push(value)
        else Object.defineProperty(parent, name, { value, enumerable: true, writable: true, configurable: true })
        break
      }
      default:
        Reflect.set(parent, key, nested(random, 1 + random.int(100)))
    }
  }
  return copy
}

interface SseEvent {
  readonly event?: string | undefined
  readonly data: string
}

const toEvents = (steps: ReadonlyArray<Respond.SseStep>): Array<SseEvent> =>
  steps.flatMap((step) => (step.kind === "event" ? [{ event: step.event, data: step.data }] : []))

/** A valid OpenAI-compatible stream: text, reasoning and tool calls in random amounts. */
const openAiStream = (random: Random): Array<SseEvent> =>
  toEvents(
    OpenAiSse.response({
      ...(random.chance(0.3) ? { reasoning: ["Let me think", " about it."] } : {}),
      ...(random.chance(0.7) ? { text: ["Hel", "lo", " there."] } : {}),
      ...(random.chance(0.5)
        ? { toolCalls: [{ id: "call_1", name: "read_file", arguments: ["{\"pa", "th\":\"README.md\"}"] }] }
        : {}),
      ...(random.chance(0.2) ? { usage: null } : {}),
      ...(random.chance(0.1) ? { done: false } : {}),
    }),
  )

/** A valid Anthropic Messages stream. */
const anthropicStream = (random: Random): Array<SseEvent> =>
  toEvents(
    AnthropicSse.response({
      ...(random.chance(0.3) ? { thinking: { chunks: ["Hmm", "…"], signature: "sig" } } : {}),
      ...(random.chance(0.7) ? { text: ["Hel", "lo."] } : {}),
      ...(random.chance(0.5) ? { toolUses: [{ id: "toolu_1", name: "read_file", json: ["{\"path\":", "\"a\"}"] }] } : {}),
    }),
  )

/** A provider JSON mutation of one event's data (only when it is JSON). */
const mutateData = (random: Random, data: string): string => {
  if (data === "[DONE]") return random.pick(["[DONE]", "[DONE", " [DONE]", "DONE", "null", "{}", "[]"])
  if (random.chance(0.1)) {
    // A key's value replaced by deep nesting; the old value stays under another key.
    const key = random.pick(["content", "delta", "choices", "usage", "tool_calls", "function", "index", "text", "partial_json", "message", "error", "id"])
    return data.replace(`"${key}":`, `"${key}":${deepText(random, 1 + random.int(random.chance(0.3) ? 30_000 : 500))},"_":`)
  }
  let parsed: unknown
  try {
    // A value already made deep is cut instead of walked again.
    if (data.length > 20_000) throw new Error("deep")
    parsed = JSON.parse(data)
  } catch {
    return data.slice(0, random.int(data.length + 1))
  }
  if (random.chance(0.15)) {
    // Tool-call arguments or a tool-use JSON delta replaced by something odd.
    const text = argumentsText(random)
    return data.replace(/("arguments":|"partial_json":)"(?:[^"\\]|\\.)*"/, (_, key: string) => `${key}${JSON.stringify(text)}`)
  }
  try {
    return JSON.stringify(mutateJson(random, parsed))
  } catch {
    // A value made deep by an earlier mutation is too deep for the generator to copy: it is cut instead.
    return data.slice(0, random.int(data.length + 1))
  }
}

const serialize = (events: ReadonlyArray<SseEvent>): string =>
  events.map((event) => `${event.event === undefined ? "" : `event: ${event.event}\n`}data: ${event.data}\n\n`).join("")

const garbage = (random: Random): Uint8Array =>
  Uint8Array.from({ length: 1 + random.int(64) }, () =>
    random.pick([0x00, 0x0a, 0x0d, 0x3a, 0x80, 0xbf, 0xc0, 0xc3, 0xed, 0xef, 0xf0, 0xf4, 0xfe, 0xff, random.int(256)]),
  )

/** Invalid UTF-8 sequences: lone continuation bytes, overlongs, encoded surrogates, truncated sequences. */
const INVALID_UTF8: ReadonlyArray<ReadonlyArray<number>> = [
  [0x80],
  [0xc0, 0xaf],
  [0xc3],
  [0xe2, 0x82],
  [0xed, 0xa0, 0x80],
  [0xf0, 0x9f, 0x98],
  [0xf4, 0x90, 0x80, 0x80],
  [0xff, 0xfe],
  [0xef, 0xbb, 0xbf],
]

const concat = (parts: ReadonlyArray<Uint8Array>): Uint8Array => {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.byteLength, 0))
  let at = 0
  for (const part of parts) {
    out.set(part, at)
    at += part.byteLength
  }
  return out
}

/** Byte-level damage to an SSE body: garbage, invalid UTF-8, truncation, line damage, a huge line. */
const damageBytes = (random: Random, body: Uint8Array): Uint8Array => {
  const at = () => random.int(body.byteLength + 1)
  switch (random.int(8)) {
    case 0: {
      const cut = at()
      return concat([body.subarray(0, cut), garbage(random), body.subarray(cut)])
    }
    case 1: {
      const cut = at()
      return concat([body.subarray(0, cut), Uint8Array.from(random.pick(INVALID_UTF8)), body.subarray(cut)])
    }
    case 2:
      return body.subarray(0, at())
    case 3: {
      const copy = body.slice()
      for (let flips = 1 + random.int(4); flips > 0 && copy.byteLength > 0; flips--) copy[random.int(copy.byteLength)] = random.int(256)
      return copy
    }
    case 4: {
      const text = new TextDecoder().decode(body)
      const lines = text.split("\n")
      const index = random.int(lines.length)
      const line = lines[index] ?? ""
      lines[index] = random.pick([
        line.replace("data:", "data"),
        line.replace("data:", "dat:"),
        line.replace("data: ", "data:"),
        line.replace("data:", "event: error\ndata:"),
        line.replace("data:", "DATA:"),
        `${line}\r`,
        `: ${line}`,
        `id: ${line}`,
        `retry: ${line}`,
        `data: ${line}`,
        line.slice(0, random.int(line.length + 1)),
        "",
      ])
      return encoder.encode(lines.join(random.pick(["\n", "\n", "\r\n", "\r"])))
    }
    case 5: {
      // A huge line: long enough to stress the parser; now and then over the 8 MiB event limit.
      const size = random.chance(0.02) ? Limits.MAX_STREAM_EVENT_BYTES + 1 : 100_000 + random.int(300_000)
      const filler = random.pick(["x", "é", "{", " "])
      const cut = at()
      return concat([body.subarray(0, cut), encoder.encode(`data: ${filler.repeat(Math.ceil(size / encoder.encode(filler).byteLength))}\n`), body.subarray(cut)])
    }
    case 6: {
      const start = at()
      const end = Math.min(body.byteLength, start + random.int(200))
      return concat([body.subarray(0, end), body.subarray(start, end), body.subarray(end)])
    }
    default:
      return concat([Uint8Array.from([0xef, 0xbb, 0xbf]), body])
  }
}

/** Splits a body into 1..n chunks at random byte offsets (through multi-byte characters too). */
const split = (random: Random, body: Uint8Array): Array<Uint8Array> => {
  if (body.byteLength === 0) return []
  const mode = random.int(100)
  if (mode < 30) return [body]
  const cuts = new Set<number>()
  // Now and then one byte per write; otherwise up to 8 cuts anywhere.
  if (mode === 30 && body.byteLength < 2_000) for (let cut = 1; cut < body.byteLength; cut++) cuts.add(cut)
  else for (let index = 1 + random.int(8); index > 0; index--) cuts.add(1 + random.int(body.byteLength))
  const sorted = [...cuts].sort((left, right) => left - right)
  const chunks: Array<Uint8Array> = []
  let previous = 0
  for (const cut of sorted) {
    if (cut > previous && cut < body.byteLength) chunks.push(body.subarray(previous, cut))
    previous = Math.max(previous, cut)
  }
  chunks.push(body.subarray(previous))
  return chunks
}

/** A fuzzed SSE exchange: a valid stream whose events are mutated, then damaged at the byte level. */
const sseCase = (random: Random, isAnthropic: boolean): WireResponse => {
  const events = isAnthropic ? anthropicStream(random) : openAiStream(random)
  const mutations = random.chance(0.2) ? 0 : 1 + random.int(3)
  for (let round = 0; round < mutations; round++) {
    const index = random.int(events.length)
    const event = events[index]!
    switch (random.int(7)) {
      case 0:
        events.splice(index, 1)
        break
      case 1:
        events.splice(index, 0, { ...event })
        break
      case 2:
        events[index] = { ...event, event: random.pick(["error", "message", "ping", "", "content_block_delta", randomText(random)]) }
        break
      case 3:
        events.splice(random.int(events.length + 1), 0, { data: JSON.stringify(wrongValue(random)) })
        break
      default:
        events[index] = { ...event, data: mutateData(random, event.data) }
    }
  }
  let body: Uint8Array = encoder.encode(serialize(events))
  if (random.chance(0.4)) body = damageBytes(random, body)
  return { status: 200, contentType: random.chance(0.97) ? "text/event-stream" : random.pick(["text/plain", "application/json", ""]), chunks: split(random, body) }
}

/** A fuzzed error response: a status and a mutated provider error body, or bytes that are not JSON at all. */
const errorCase = (random: Random): WireResponse => {
  const status = random.pick([200, 400, 401, 403, 404, 408, 409, 413, 422, 429, 500, 502, 503, 504, 529, 599])
  const base: unknown = random.pick([
    { error: { message: "Rate limit reached", type: "rate_limit_error", code: "rate_limit_exceeded", param: null } },
    { error: { message: "This model's maximum context length is 8192 tokens", type: "invalid_request_error", code: "context_length_exceeded" } },
    { type: "error", error: { type: "overloaded_error", message: "Overloaded" } },
    { type: "error", error: { type: "invalid_request_error", message: "prompt is too long: 210000 tokens > 200000 maximum" } },
    { error: "upstream failed" },
    { message: "Internal error", code: 500 },
    { detail: [{ msg: "field required", loc: ["body", "messages"] }] },
  ])
  let body: Uint8Array
  switch (random.int(5)) {
    case 0:
      body = garbage(random)
      break
    case 1:
      body = encoder.encode(JSON.stringify(base))
      break
    case 2:
      body = encoder.encode(random.chance(0.5) ? deepText(random, 1 + random.int(30_000)) : `{"error":${deepText(random, 1 + random.int(30_000))}}`)
      break
    default:
      body = encoder.encode(JSON.stringify(mutateJson(random, base)))
  }
  if (random.chance(0.3)) body = damageBytes(random, body)
  if (random.chance(0.02)) body = concat([body, encoder.encode(" ".repeat(Limits.MAX_ERROR_BODY_BYTES + 10))])
  const headers: Record<string, string> = {}
  if (random.chance(0.4)) {
    headers["retry-after"] = random.pick(["1", "0", "-1", "1.5", "9999999999999", "abc", "Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", ""])
  }
  if (random.chance(0.2)) headers["retry-after-ms"] = random.pick(["250", "-5", "NaN", "1e400"])
  // A 2xx event stream is not an error response; every other pairing is.
  const types = status === 200 ? ["application/json", "text/html", "text/plain"] : ["application/json", "text/html", "text/plain", "text/event-stream"]
  return { status, contentType: random.pick(types), headers, chunks: split(random, body) }
}

// ---------------------------------------------------------------------------------------------
// The check

const isModelEvent = Schema.is(Model.ModelEvent)
const isModelStep = Schema.is(Model.ModelStep)

interface Verdict {
  readonly ok: boolean
  readonly tag?: string | undefined
}

/** Streams one request against the queued response; the verdict, or a thrown assertion naming the case. */
const runCase = (model: LanguageModel.LanguageModelShape, wire: WireResponse, socket: boolean, label: string) =>
  Effect.gen(function* () {
    queue.push(wire)
    viaSocket = socket
    const events: Array<Model.ModelEvent> = []
    const exit = yield* Effect.exit(
      Stream.runForEach(model.stream(request()), (event) => Effect.sync(() => events.push(event))).pipe(Effect.timeout("20 seconds")),
    )
    queue.length = 0
    for (const event of events) assert.isTrue(isModelEvent(event), `${label}: an event that is not a ModelEvent: ${JSON.stringify(event).slice(0, 200)}`)
    if (Exit.isSuccess(exit)) {
      const step = StepBuilder.fold("step-1", events)
      if (Result.isSuccess(step)) assert.isTrue(isModelStep(step.success), `${label}: a folded step that is not a ModelStep`)
      else assert.strictEqual(step.failure._tag, "ModelError", label)
      return { ok: true } satisfies Verdict
    }
    assert.isFalse(Cause.hasDies(exit.cause), `${label}: a defect: ${Cause.pretty(exit.cause).slice(0, 2_000)}`)
    const error = Cause.findErrorOption(exit.cause)
    assert.isTrue(error._tag === "Some", `${label}: no typed failure: ${Cause.pretty(exit.cause).slice(0, 2_000)}`)
    const failure = error._tag === "Some" ? error.value : undefined
    assert.instanceOf(failure, ModelError.ModelError, `${label}: not a ModelError (a hang is a TimeoutError): ${String(failure)}`)
    const reason = (failure as ModelError.ModelError).reason
    assert.include(["Adapter", "Provider", "ContextOverflow"], reason._tag, label)
    assert.notInclude(reason.message, API_KEY, label)
    return { ok: false, tag: reason._tag === "Provider" ? `Provider:${reason.reason}` : reason._tag } satisfies Verdict
  })

const fuzz = (name: string, seed: number, make: (random: Random) => { readonly wire: WireResponse; readonly isAnthropic: boolean }) =>
  Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const apiKey = Redacted.make(API_KEY)
        const openAi = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${baseUrl}/v1`, model: "fuzz-model", apiKey, fetch: fuzzFetch })
        const anthropic = yield* LanguageModel.make({ kind: "anthropic", baseUrl, model: "claude-fuzz", apiKey, fetch: fuzzFetch })
        const tags = new Map<string, number>()
        for (let index = 0; index < INPUTS; index++) {
          const random = generator(seed + index)
          const { wire, isAnthropic } = make(random)
          const label = `${name}: seed ${seed + index} (MAKA_FUZZ_SEED=${seed} case ${index})`
          const verdict = yield* runCase(isAnthropic ? anthropic : openAi, wire, index % 25 === 0, label)
          const key = verdict.ok ? "ok" : verdict.tag!
          tags.set(key, (tags.get(key) ?? 0) + 1)
        }
        return tags
      }),
    ),
  )

describe("model adapter fuzz", () => {
  it("refuses tool-call arguments nested 5,000 deep as an invalid tool call input, without hanging", async () => {
    const deep = `{"path":${"[".repeat(5_000)}1${"]".repeat(5_000)}}`
    const steps = OpenAiSse.response({ toolCalls: [{ id: "call_1", name: "read_file", arguments: [deep] }] })
    const wire: WireResponse = { status: 200, contentType: "text/event-stream", chunks: [encoder.encode(serialize(toEvents(steps)))] }
    const verdict = await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const model = yield* LanguageModel.make({ kind: "openai-compatible", baseUrl: `${baseUrl}/v1`, model: "fuzz-model", apiKey: Redacted.make(API_KEY), fetch: fuzzFetch })
          return yield* runCase(model, wire, true, "deep arguments")
        }),
      ),
    )
    assert.deepStrictEqual(verdict, { ok: false, tag: "Adapter" })
  }, 60_000)

  it("ends every fuzzed SSE body in valid events and a clean end, or a typed ModelError", async () => {
    const tags = await fuzz("sse", SEED, (random) => {
      const isAnthropic = random.chance(0.3)
      return { wire: sseCase(random, isAnthropic), isAnthropic }
    })
    // Both ends are reached: the fuzz is not all refusals, nor all accepted.
    assert.isAbove(tags.get("ok") ?? 0, INPUTS / 50, JSON.stringify([...tags]))
    assert.isAbove(tags.get("Adapter") ?? 0, INPUTS / 10, JSON.stringify([...tags]))
  }, TIMEOUT_MS)

  it("classifies every fuzzed error response into a typed ModelError, never a success", async () => {
    const tags = await fuzz("error-body", SEED ^ 0x0e77, (random) => ({ wire: errorCase(random), isAnthropic: random.chance(0.3) }))
    assert.strictEqual(tags.get("ok"), undefined, JSON.stringify([...tags]))
    assert.isAbove(tags.size, 3, JSON.stringify([...tags]))
  }, TIMEOUT_MS)
})
