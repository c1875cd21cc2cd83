/**
 * One streamed model request over HTTP + `eventsource-parser` (docs/model.md §4.2, §4.5, §4.6): the
 * body's reader read directly, one TextDecoder in stream mode feeding the parser, and each network
 * chunk's normalised events delivered together by one pull; one watchdog fiber per request on the
 * Effect `Clock` for the idle timer (reset by every received byte, counting only while a read waits),
 * the deadline and the grace after the finish; error responses classified, long deltas split, replay
 * safety tracked, stream limits enforced. The response is released when the stream's scope closes.
 */
import type { Model } from "@maka/facts"
import { Canonical, Limits } from "@maka/facts"
import { Array as Arr, Cause, Clock, Effect, Scope, Stream } from "effect"
import { createParser, type EventSourceMessage } from "eventsource-parser"
import * as ErrorClassification from "../ErrorClassification.ts"
import * as ModelError from "../ModelError.ts"
import type { BodyRead, BodyReader, HttpRequest, HttpResponse, RequestBody } from "./http-client.ts"
import * as HttpClient from "./http-client.ts"
import { splitDelta } from "./delta-split.ts"
import * as SurrogateCarry from "./surrogate-carry.ts"
import { INVALID, parseJson } from "./json-read.ts"
import type { Normalizer, NormalizerFailure, SseMessage } from "./normalizer.ts"
import { ReplayTracker } from "./replay-tracker.ts"
import * as SecretFilter from "./secret-filter.ts"
import { scrub, withoutCutSecret } from "./secrets.ts"

export interface TransportRequest {
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: RequestBody
  /** The host's `fetch`, or the adapter's own client (`http-client.ts`): either answers what is read here. */
  readonly send: (url: string, request: HttpRequest) => Promise<HttpResponse>
  readonly idleTimeoutMs: number
  /** The overall deadline of the request from send to its end, when the host set one. */
  readonly deadlineMs: number | undefined
  readonly cleanupGraceMs: number
  readonly maxDeltaChars: number
  readonly maxOutputBytes: number
  readonly maxEventBytes: number
  readonly maxErrorBodyBytes: number
  /** How long the body may stay open after the finish before the step completes without its end. */
  readonly afterFinishGraceMs: number
  /** Every form of the secrets scrubbed from every error message (`secrets.ts` `formsOf`). */
  readonly secrets: ReadonlyArray<string>
  readonly normalizer: Normalizer
}

type Events = readonly [Model.ModelEvent, ...Array<Model.ModelEvent>]

const describe = (cause: unknown): string => {
  if (cause instanceof Error) {
    const inner = cause.cause instanceof Error ? `: ${cause.cause.message}` : ""
    return `${cause.message}${inner}`
  }
  return String(cause)
}

/** A provider's tool-call id or name becomes a fact's: 1–512 UTF-16 units of well-formed text, no NUL. */
const isStoredName = (value: string): boolean =>
  value.length >= 1 && value.length <= Limits.MAX_ID_UTF16 && !/\p{Cs}/u.test(value) && !value.includes("\u0000")

/**
 * Why a tool call cannot be recorded, or `undefined`. A name the catalog lacks is the engine's
 * `unavailable` rejection, which the model reads; one no fact can hold (empty, NUL, a lone surrogate,
 * past 512 units) fails the attempt here instead of a rejection the log would refuse.
 */
const toolCallProblem = (event: Model.ModelEvent): string | undefined =>
  event.kind !== "tool_call"
    ? undefined
    : !isStoredName(event.id)
      ? ModelError.AdapterMessage.invalidToolCallId
      : !isStoredName(event.name)
        ? ModelError.AdapterMessage.invalidToolCallName
        : undefined

const isAbortError = (cause: unknown): boolean => cause instanceof Error && cause.name === "AbortError"

/** How a pending wait on the network ends early: with the expiry, or (after the finish) the grace's end. */
type WaitEnd = ModelError.ModelError | typeof GRACE_OVER
const GRACE_OVER = Symbol("grace over")
/** A read that found the finish with the body still open: the rest is read under the grace. */
const FINISHED = Symbol("finished")

/** The most bytes decoded into one string: a longer one costs V8 several times more per byte. */
const DECODE_SLICE_BYTES = 64 * 1024

const CR = 13
const LF = 10

/**
 * Resumes after `ms` of real time (0: the event loop's next turn, its pending socket reads included),
 * whatever the `Clock`: it waits for the loop and the thread pool, not for a test clock's time.
 */
const afterRealTime = (ms: number): Effect.Effect<void> =>
  Effect.callback<void>((resume) => {
    const handle = setTimeout(() => resume(Effect.void), ms)
    return Effect.sync(() => clearTimeout(handle))
  })

/** How late the idle timer may fire before the process is taken to have been unable to run. */
const LATE_TIMER_MS = 100

/** How long an idle wait whose timer fired late looks again before it expires. */
const LATE_LOOK_MS = 250

/**
 * Sends the request and returns the stream of its `ModelEvent`s; the response is released when the
 * scope closes (the caller's `Stream.unwrap`, shared with the permit it acquired before).
 */
export const open: (
  request: TransportRequest,
) => Effect.Effect<Stream.Stream<Model.ModelEvent, ModelError.ModelError>, ModelError.ModelError, Scope.Scope> = Effect.fnUntraced(function* (request: TransportRequest) {
  const clock = yield* Clock.Clock
  // Elapsed time (the idle timer, the deadline, the grace after the finish) on the monotonic clock:
  // a wall clock stepped by NTP or a resumed virtual machine moves neither. A `Retry-After` date is
  // read against the wall clock.
  const now = () => Number(clock.monotonicTimeNanosUnsafe()) / 1_000_000
  const wallNow = () => clock.currentTimeMillisUnsafe()
  const controller = new AbortController()
  const tracker = new ReplayTracker()
  const secretFilter = SecretFilter.make(request.secrets)
  const carry = SurrogateCarry.make()
  const scope = yield* Scope.Scope
  const startedAt = now()
  // The idle timer's state: it counts only while a wait on the network is pending.
  let reading = false
  let lastActivity = startedAt
  // When the normaliser emitted `finished`: the body then gets `afterFinishGraceMs` to end.
  let finishedAt: number | undefined
  // Set once the idle timeout or the deadline expired: every wait, pending or to come, ends with it,
  // whether or not the `fetch` honours the abort.
  let expiry: ModelError.ModelError | undefined
  // Ends the pending wait, if any (one at a time: the stream is pulled sequentially).
  let endWait: ((end: WaitEnd) => void) | undefined
  let reader: BodyReader | undefined
  // The body was read to its end: nothing is left to abort or cancel.
  let bodyEnded = false

  const expire = (error: ModelError.ModelError): void => {
    expiry ??= error
    controller.abort()
    endWait?.(expiry)
  }

  yield* Scope.addFinalizer(
    scope,
    Effect.suspend(() => {
      if (bodyEnded) return Effect.void
      controller.abort()
      const open = reader
      if (open === undefined) return Effect.void
      return Effect.promise(() => open.cancel().catch(() => undefined)).pipe(Effect.timeoutOption(request.cleanupGraceMs), Effect.asVoid)
    }),
  )

  // The watchdog, one fiber per request on the Effect `Clock`: expires the request once a wait has
  // gone `idleTimeoutMs` without a byte or at the deadline, and ends a wait after the finish once the
  // grace is over. It never sleeps past the grace, so a finish that arrives mid-sleep is seen in time.
  // A wait that looks idle past the timeout looks again before it expires: bytes that reached the
  // socket while the process could not run (stopped, the machine asleep, its loop held) are read
  // first, so only a wait that is still idle expires. The look is one turn of the event loop, or,
  // when the timer itself fired late (the process could not run), `LATE_LOOK_MS` of real time: a
  // compressed body's bytes come out of the decompressor turns after the socket read them.
  const deadlineMs = request.deadlineMs
  let lookedAgain = false
  let wakeAt: number | undefined
  const watchdog: Effect.Effect<void> = Effect.suspend(() => {
    const at = now()
    const late = wakeAt === undefined ? 0 : at - wakeAt
    wakeAt = undefined
    if (deadlineMs !== undefined && at - startedAt >= deadlineMs) return Effect.sync(() => expire(ModelError.deadlineExceeded(deadlineMs)))
    const idleLeft = lastActivity + request.idleTimeoutMs - at
    const graceLeft = finishedAt === undefined ? request.afterFinishGraceMs : finishedAt + request.afterFinishGraceMs - at
    // The grace first: a finished step whose grace is over ends its wait (which stops the reading),
    // even when its idle timeout falls due at the same time (both 1 s).
    if (reading && finishedAt !== undefined && graceLeft <= 0) endWait?.(GRACE_OVER)
    if (reading && idleLeft <= 0) {
      if (lookedAgain) return Effect.sync(() => expire(ModelError.timedOut()))
      lookedAgain = true
      return Effect.flatMap(afterRealTime(late > LATE_TIMER_MS ? LATE_LOOK_MS : 0), () => watchdog)
    }
    lookedAgain = false
    let sleep = Math.min(reading ? idleLeft : request.idleTimeoutMs, graceLeft > 0 ? graceLeft : request.afterFinishGraceMs)
    if (deadlineMs !== undefined) sleep = Math.min(sleep, startedAt + deadlineMs - at)
    wakeAt = at + Math.max(sleep, 0)
    return Effect.flatMap(Effect.sleep(sleep), () => watchdog)
  })
  yield* Effect.forkScoped(watchdog, { startImmediately: true })

  const abortedOr = (cause: unknown, onFailure: (cause: unknown) => ModelError.ModelError): ModelError.ModelError =>
    expiry ?? (isAbortError(cause) ? ModelError.cancelled() : onFailure(cause))

  /**
   * One wait on the network (docs/model.md §4.2): a single callback, no fiber, ended by the promise or
   * by the watchdog (`endWait`), whichever comes first.
   */
  const waitFor = <A>(start: () => Promise<A>, onFailure: (cause: unknown) => ModelError.ModelError) =>
    Effect.callback<A, ModelError.ModelError>((resume) => {
      if (expiry !== undefined) return resume(Effect.fail(expiry))
      let settled = false
      const settle = (effect: Effect.Effect<A, ModelError.ModelError>) => {
        if (settled) return
        settled = true
        endWait = undefined
        reading = false
        lastActivity = now()
        resume(effect)
      }
      reading = true
      lastActivity = now()
      endWait = (end) => {
        if (end !== GRACE_OVER) settle(Effect.fail(end))
      }
      start().then(
        (value) => settle(Effect.succeed(value)),
        (cause) => settle(Effect.fail(abortedOr(cause, onFailure))),
      )
      return Effect.sync(() => {
        settled = true
        endWait = undefined
        reading = false
      })
    })

  const response = yield* waitFor(
    // Called from a promise, so that a `fetch` that throws is a rejection like any other.
    () =>
      Promise.resolve().then(() =>
        request.send(request.url, { method: "POST", headers: request.headers, body: request.body, signal: controller.signal }),
      ),
    (cause) =>
      cause instanceof HttpClient.HostFetchError
        ? ModelError.adapter(cause.message)
        : ModelError.provider({
            reason: "network",
            message: scrub(`request failed: ${describe(cause)}`, request.secrets),
            replaySafe: true,
          }),
  )
  const body = response.body
  if (body === null) bodyEnded = true
  else reader = body.getReader()
  const truncated = (message: string): ModelError.ModelError =>
    ModelError.provider({
      reason: "stream_truncated",
      message: scrub(message, request.secrets),
      status: response.status,
      replaySafe: tracker.replaySafe,
    })
  const bodyFailed = (cause: unknown) => truncated(`response body failed: ${describe(cause)}`)

  const contentType = response.headers.get("content-type") ?? ""
  if (!response.ok || !contentType.toLowerCase().includes("text/event-stream")) {
    const read = (): Effect.Effect<BodyRead, ModelError.ModelError> => {
      const open = reader
      return open === undefined ? Effect.succeed({ done: true, value: undefined }) : waitFor(() => open.read(), bodyFailed)
    }
    const text = yield* readErrorBody(read, request.maxErrorBodyBytes, request.secrets)
    const nowMs = wallNow()
    if (response.ok) {
      const payload = ErrorClassification.parsePayload(text)
      if (payload === undefined || !ErrorClassification.hasErrorField(payload)) {
        return yield* Effect.fail(ModelError.adapter("unsupported provider event: the response is not an event stream"))
      }
      return yield* Effect.fail(
        ErrorClassification.classify({ payload, body: text, nowMs, replaySafe: true, observedOutput: false, secrets: request.secrets }),
      )
    }
    return yield* Effect.fail(
      ErrorClassification.classify({
        status: response.status,
        headers: response.headers,
        body: text,
        nowMs,
        replaySafe: true,
        observedOutput: false,
        secrets: request.secrets,
      }),
    )
  }

  // The event stream.
  const decoder = new TextDecoder()
  const messages: Array<SseMessage> = []
  let parseFailure: NormalizerFailure | undefined
  const parser = createParser({
    onEvent: (message: EventSourceMessage) => {
      messages.push(message)
    },
    onError: (error) => {
      if (error.type === "max-buffer-size-exceeded") {
        parseFailure = { kind: "adapter", message: "provider event exceeds 8 MiB" }
      }
    },
    maxBufferSize: request.maxEventBytes,
  })
  // A CR that ends a piece of text ends its line (a lone CR is a line ending in SSE): the parser,
  // which waits for the LF a CRLF may bring, is given that LF at once, and an LF that then opens the
  // next piece (the rest of a CRLF split between two reads) is dropped. Without it an event whose
  // blank line is a lone CR waited for the next read, and the body's last one was never delivered.
  let lineFeedOwed = false
  const feed = (text: string): void => {
    if (text === "") return
    const rest = lineFeedOwed && text.charCodeAt(0) === LF ? text.slice(1) : text
    lineFeedOwed = false
    if (rest === "") return
    parser.feed(rest)
    if (rest.charCodeAt(rest.length - 1) === CR && parseFailure === undefined) {
      parser.feed("\n")
      lineFeedOwed = true
    }
  }
  let receivedBytes = 0
  let failure: ModelError.ModelError | undefined
  let ended = false

  const toError = (found: NormalizerFailure): ModelError.ModelError => {
    switch (found.kind) {
      case "adapter":
        return ModelError.adapter(scrub(found.message, request.secrets))
      case "truncated":
        return truncated(found.message)
      case "provider_payload":
        return ErrorClassification.classify({
          payload: found.payload,
          nowMs: wallNow(),
          replaySafe: tracker.replaySafe,
          observedOutput: tracker.observedOutput || request.normalizer.hasBufferedOutput(),
          secrets: request.secrets,
        })
    }
  }

  /** Normalises the buffered SSE messages into `out`, recording the first failure. */
  const drainMessages = (out: Array<Model.ModelEvent>): void => {
    const produced: Array<Model.ModelEvent> = []
    let found: NormalizerFailure | undefined
    for (const message of messages) {
      if (found !== undefined) break
      // Once the stream finished, any further event breaks the vocabulary, but for a comment and a
      // message that says nothing (Anthropic's `ping`, a `[DONE]`), which servers send after it.
      if (request.normalizer.isFinished()) {
        if (request.normalizer.saysNothing(message)) continue
        found = { kind: "adapter", message: ModelError.AdapterMessage.eventAfterFinish }
        break
      }
      if (message.data.length > request.maxEventBytes / 3 && Canonical.utf8Length(message.data) > request.maxEventBytes) {
        found = { kind: "adapter", message: "provider event exceeds 8 MiB" }
        break
      }
      found = request.normalizer.message(message, produced)
    }
    messages.length = 0
    for (const event of carry(secretFilter.filter(produced))) {
      const problem = toolCallProblem(event)
      if (problem !== undefined) {
        found ??= { kind: "adapter", message: problem }
        break
      }
      if (event.kind === "part_delta" && event.text.length > request.maxDeltaChars) {
        for (const piece of splitDelta(event, request.maxDeltaChars)) {
          tracker.observe(piece)
          out.push(piece)
        }
      } else {
        tracker.observe(event)
        out.push(event)
      }
    }
    // Classified after the events before it were tracked, so the error sees what the stream showed.
    if (found !== undefined && failure === undefined) failure = toError(found)
  }

  /** Folds one network chunk (or the body's end) into `out`: decoded, parsed and normalised at once. */
  const onChunk = (chunk: BodyRead, out: Array<Model.ModelEvent>): void => {
    if (chunk.done) {
      ended = true
      bodyEnded = true
      if (parseFailure === undefined) feed(decoder.decode())
      // The body's last event without its blank line (or without its last line's ending) is
      // delivered by the two line endings the body left out, and kept only when it is complete.
      const delivered = messages.length
      if (parseFailure === undefined) {
        feed("\n")
        feed("\n")
      }
      parser.reset()
      const last = messages[messages.length - 1]
      if (messages.length > delivered && last!.data !== "[DONE]" && parseJson(last!.data) === INVALID) messages.pop()
      drainMessages(out)
      if (failure === undefined && !request.normalizer.isFinished()) {
        const produced: Array<Model.ModelEvent> = []
        let found = request.normalizer.end(produced)
        for (const event of carry(secretFilter.filter(produced))) {
          const problem = toolCallProblem(event)
          if (problem !== undefined) {
            found ??= { kind: "adapter", message: problem }
            break
          }
          tracker.observe(event)
          out.push(event)
        }
        if (found !== undefined) failure = toError(found)
      }
      return
    }
    receivedBytes += chunk.value.byteLength
    if (receivedBytes > request.maxOutputBytes) {
      failure = ModelError.adapter(ModelError.AdapterMessage.outputTooLarge)
      return
    }
    const bytes = chunk.value
    // The parser refuses any input after its buffer limit (it throws): the slices after it are not fed.
    for (let offset = 0; offset < bytes.byteLength && parseFailure === undefined; offset += DECODE_SLICE_BYTES) {
      feed(decoder.decode(bytes.subarray(offset, offset + DECODE_SLICE_BYTES), { stream: true }))
    }
    if (parseFailure !== undefined) {
      failure = toError(parseFailure)
      return
    }
    drainMessages(out)
  }

  // The events of the chunk that finished the stream, held until the body is known to carry nothing more.
  const held: Array<Model.ModelEvent> = []
  const release = (): Effect.Effect<Events, Cause.Done> => {
    ended = true
    const events = held.splice(0)
    return Arr.isArrayNonEmpty(events) ? Effect.succeed(events) : Cause.done()
  }

  /*
   * The lean read path (docs/model.md §4.2): a pull is one callback that reads the body's reader
   * directly, chunk after chunk, until a chunk yields events, and delivers all of that chunk's events
   * at once: one wakeup per network chunk, no fiber and no stream layer per read, and the callbacks
   * below made once per request. A pull also ends on a failure, at the body's end and at the finish;
   * after the finish it reads on until the body ends, an event breaks the vocabulary, or the grace is over.
   */
  type PullEffect = Effect.Effect<Events | typeof FINISHED, ModelError.ModelError | Cause.Done>
  // The waiting pull's resumption; undefined between pulls.
  let resumePull: ((effect: PullEffect) => void) | undefined
  // Whether the waiting pull began after the finish.
  let pullAfterFinish = false
  // A read is in flight (at most one); what it brings while no pull waits is kept for the next pull.
  let readPending = false
  let parked: (() => void) | undefined

  const settle = (effect: PullEffect): void => {
    const resume = resumePull
    if (resume === undefined) return
    resumePull = undefined
    endWait = undefined
    reading = false
    lastActivity = now()
    resume(effect)
  }
  const consume = (chunk: BodyRead): void => {
    reading = false
    lastActivity = now()
    const out: Array<Model.ModelEvent> = []
    try {
      onChunk(chunk, out)
    } catch {
      // A decoder that throws would otherwise leave this pull waiting forever (it runs in the read's
      // callback, outside any fiber): the stream fails as an adapter error instead.
      failure ??= ModelError.adapter(ModelError.AdapterMessage.decoderFailed)
    }
    if (request.normalizer.isFinished()) {
      // Nothing of a finished stream is yielded until its body is known to carry nothing more.
      if (failure !== undefined) return settle(Effect.fail(failure))
      for (const event of out) held.push(event)
      if (ended) return settle(release())
      if (!pullAfterFinish) {
        finishedAt = now()
        return settle(Effect.succeed(FINISHED))
      }
      return next()
    }
    // The events before a failure are delivered first; the next pull reports the failure.
    if (Arr.isArrayNonEmpty(out)) return settle(Effect.succeed(out))
    if (failure !== undefined) return settle(Effect.fail(failure))
    if (ended) return settle(release())
    next()
  }
  const onRead = (chunk: BodyRead): void => {
    readPending = false
    if (resumePull === undefined) parked = () => consume(chunk)
    else consume(chunk)
  }
  const onReadFailure = (cause: unknown): void => {
    readPending = false
    const error = abortedOr(cause, bodyFailed)
    // After the finish the body only has to end: one that breaks instead (a reset after `[DONE]`)
    // ends it as well, and the finished stream is delivered. A cancellation or an expiry still fails.
    const broken = request.normalizer.isFinished() && failure === undefined && error.reason._tag === "Provider"
    const effect = broken ? Effect.suspend(release) : Effect.fail(error)
    if (resumePull === undefined) parked = () => settle(effect)
    else settle(effect)
  }
  const next = (): void => {
    reading = true
    lastActivity = now()
    if (readPending || reader === undefined) return
    readPending = true
    reader.read().then(onRead, onReadFailure)
  }
  const endPull = (end: WaitEnd): void => settle(end === GRACE_OVER ? release() : Effect.fail(end))
  const leavePull = Effect.sync(() => {
    resumePull = undefined
    endWait = undefined
    reading = false
  })

  const readEvents: PullEffect = Effect.callback((resume) => {
    if (expiry !== undefined) return resume(Effect.fail(expiry))
    if (reader === undefined || (finishedAt !== undefined && now() - finishedAt >= request.afterFinishGraceMs)) return resume(release())
    resumePull = resume
    pullAfterFinish = finishedAt !== undefined
    endWait = endPull
    const waiting = parked
    parked = undefined
    if (waiting !== undefined) waiting()
    else next()
    return leavePull
  })

  const afterRead = (outcome: Events | typeof FINISHED): Effect.Effect<Events, ModelError.ModelError | Cause.Done> =>
    outcome === FINISHED ? pull : Effect.succeed(outcome)
  const pull: Effect.Effect<Events, ModelError.ModelError | Cause.Done> = Effect.suspend(() => {
    if (failure !== undefined) return Effect.fail(failure)
    if (ended) return release()
    return Effect.flatMap(readEvents, afterRead)
  })
  return Stream.fromPull(Effect.succeed(pull))
})


/**
 * Reads at most `limit` bytes of an error body as text. A body cut short (at the limit, or failing
 * half-way) loses a tail that may be the start of a secret the cut split (`withoutCutSecret`).
 */
const readErrorBody = (
  read: () => Effect.Effect<BodyRead, ModelError.ModelError>,
  limit: number,
  secrets: ReadonlyArray<string>,
): Effect.Effect<string, ModelError.ModelError> => {
  const decoder = new TextDecoder()
  const parts: Array<string> = []
  let size = 0
  const cut = (text: string) => withoutCutSecret(text, secrets)
  const loop: Effect.Effect<string, ModelError.ModelError> = Effect.flatMap(read(), (chunk) => {
    if (chunk.done) return Effect.succeed(parts.join("") + decoder.decode())
    const room = limit - size
    const bytes = chunk.value.byteLength > room ? chunk.value.subarray(0, room) : chunk.value
    size += bytes.byteLength
    parts.push(decoder.decode(bytes, { stream: true }))
    return size >= limit ? Effect.succeed(cut(parts.join("") + decoder.decode())) : loop
  })
  // A body that fails half-way is classified with what arrived; an idle timeout stays `timed_out`.
  return Effect.suspend(() => loop).pipe(
    Effect.catch((error) => (error.reason._tag === "TimedOut" ? Effect.fail(error) : Effect.succeed(cut(parts.join(""))))),
  )
}
