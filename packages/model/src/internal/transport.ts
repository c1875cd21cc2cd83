/**
 * One streamed model request over `fetch` + `eventsource-parser` (docs/model.md §4.2, §4.5, §4.6): the
 * idle timer (a watchdog fiber on the Effect `Clock`, reset by every received byte, counting only while
 * a read waits), error responses classified, SSE messages normalised, long deltas split, replay safety
 * tracked, stream limits enforced. The response is released when the stream's scope closes.
 */
import type { Model } from "@maka/facts"
import { Canonical, Limits } from "@maka/facts"
import { Cause, Clock, Deferred, Effect, Scope, Stream } from "effect"
import { createParser, type EventSourceMessage } from "eventsource-parser"
import * as ErrorClassification from "../ErrorClassification.ts"
import * as ModelError from "../ModelError.ts"
import type { FetchFunction } from "../ProviderConfig.ts"
import { splitDelta } from "./delta-split.ts"
import type { Normalizer, NormalizerFailure, SseMessage } from "./normalizer.ts"
import { ReplayTracker } from "./replay-tracker.ts"
import { scrub } from "./secrets.ts"

export interface TransportRequest {
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  readonly fetch: FetchFunction
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

interface IdleState {
  reading: boolean
  lastActivity: number
}

const describe = (cause: unknown): string => {
  if (cause instanceof Error) {
    const inner = cause.cause instanceof Error ? `: ${cause.cause.message}` : ""
    return `${cause.message}${inner}`
  }
  return String(cause)
}

/** A provider's tool-call id becomes a fact's id: 1–512 UTF-16 units of well-formed text, no NUL. */
const isToolCallId = (id: string): boolean =>
  id.length >= 1 && id.length <= Limits.MAX_ID_UTF16 && !/\p{Cs}/u.test(id) && !id.includes("\u0000")

const isAbortError = (cause: unknown): boolean => cause instanceof Error && cause.name === "AbortError"

/** Streams the `ModelEvent`s of one request; the caller's scope handling is the stream's own. */
export const stream = (request: TransportRequest): Stream.Stream<Model.ModelEvent, ModelError.ModelError> =>
  Stream.unwrap(open(request))

const open = Effect.fn("LanguageModel.stream")(function* (request: TransportRequest) {
  const clock = yield* Clock.Clock
  const controller = new AbortController()
  const idle: IdleState = { reading: false, lastActivity: clock.currentTimeMillisUnsafe() }
  const tracker = new ReplayTracker()
  const scope = yield* Scope.Scope
  yield* Scope.addFinalizer(scope, Effect.sync(() => controller.abort()))

  // Set once the idle timeout or the deadline expired: every wait, running or to come, ends with it,
  // whether or not the `fetch` honours the abort.
  const expired = yield* Deferred.make<never, ModelError.ModelError>()
  let expiry: ModelError.ModelError | undefined
  const expire = (error: ModelError.ModelError) =>
    Effect.suspend(() => {
      expiry ??= error
      controller.abort()
      return Deferred.fail(expired, expiry)
    })

  // The watchdog: expires the request once a read has waited `idleTimeoutMs` without a byte.
  const watchdog: Effect.Effect<void> = Effect.suspend(() => {
    const now = clock.currentTimeMillisUnsafe()
    const remaining = idle.lastActivity + request.idleTimeoutMs - now
    if (idle.reading && remaining <= 0) return Effect.asVoid(expire(ModelError.timedOut()))
    return Effect.flatMap(Effect.sleep(idle.reading ? remaining : request.idleTimeoutMs), () => watchdog)
  })
  yield* Effect.forkScoped(watchdog)
  const deadlineMs = request.deadlineMs
  if (deadlineMs !== undefined) {
    yield* Effect.forkScoped(Effect.andThen(Effect.sleep(deadlineMs), expire(ModelError.deadlineExceeded(deadlineMs))))
  }

  /** Runs one wait on the network under the idle timer and the deadline, raced against their expiry. */
  const waitFor = <A>(promise: () => Promise<A>, onFailure: (cause: unknown) => ModelError.ModelError) =>
    Effect.suspend(() => {
      idle.reading = true
      idle.lastActivity = clock.currentTimeMillisUnsafe()
      const waiting = Effect.tryPromise({
        try: promise,
        catch: (cause) => expiry ?? (isAbortError(cause) ? ModelError.cancelled() : onFailure(cause)),
      })
      return Effect.raceFirst(waiting, Deferred.await(expired)).pipe(
        Effect.ensuring(
          Effect.sync(() => {
            idle.reading = false
            idle.lastActivity = clock.currentTimeMillisUnsafe()
          }),
        ),
      )
    })

  const response = yield* waitFor(
    () =>
      request.fetch(request.url, {
        method: "POST",
        headers: request.headers,
        body: request.body,
        signal: controller.signal,
      }),
    (cause) =>
      ModelError.provider({
        reason: "network",
        message: scrub(`request failed: ${describe(cause)}`, request.secrets),
        replaySafe: true,
      }),
  )
  const body = response.body
  const reader = body === null ? undefined : body.getReader()
  if (reader !== undefined) {
    yield* Scope.addFinalizer(
      scope,
      Effect.promise(() => reader.cancel().catch(() => undefined)).pipe(
        Effect.timeoutOption(request.cleanupGraceMs),
        Effect.asVoid,
      ),
    )
  }
  const truncated = (message: string): ModelError.ModelError =>
    ModelError.provider({
      reason: "stream_truncated",
      message: scrub(message, request.secrets),
      status: response.status,
      replaySafe: tracker.replaySafe,
    })
  const read = (): Effect.Effect<ReadableStreamReadResult<Uint8Array>, ModelError.ModelError> =>
    reader === undefined
      ? Effect.succeed({ done: true, value: undefined })
      : waitFor(
          () => reader.read(),
          (cause) => truncated(`response body failed: ${describe(cause)}`),
        )

  const contentType = response.headers.get("content-type") ?? ""
  if (!response.ok || !contentType.toLowerCase().includes("text/event-stream")) {
    const text = yield* readErrorBody(read, request.maxErrorBodyBytes)
    const nowMs = clock.currentTimeMillisUnsafe()
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
          nowMs: clock.currentTimeMillisUnsafe(),
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
      // Once the stream finished, any further event (not a comment) breaks the vocabulary.
      if (request.normalizer.isFinished()) {
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
    for (const event of produced) {
      if (event.kind === "tool_call" && !isToolCallId(event.id)) {
        found ??= { kind: "adapter", message: ModelError.AdapterMessage.invalidToolCallId }
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

  const onChunk = (chunk: ReadableStreamReadResult<Uint8Array>, out: Array<Model.ModelEvent>): void => {
    if (chunk.done) {
      ended = true
      const tail = decoder.decode()
      if (tail !== "") parser.feed(tail)
      parser.reset({ consume: true })
      // A last event without its blank line is kept only when it is complete.
      const last = messages[messages.length - 1]
      if (last !== undefined && last.data !== "[DONE]" && ErrorClassification.parsePayload(last.data) === undefined) messages.pop()
      drainMessages(out)
      if (failure === undefined && !request.normalizer.isFinished()) {
        const produced: Array<Model.ModelEvent> = []
        let found = request.normalizer.end(produced)
        for (const event of produced) {
          if (event.kind === "tool_call" && !isToolCallId(event.id)) {
            found ??= { kind: "adapter", message: ModelError.AdapterMessage.invalidToolCallId }
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
    parser.feed(decoder.decode(chunk.value, { stream: true }))
    if (parseFailure !== undefined) {
      failure = toError(parseFailure)
      return
    }
    drainMessages(out)
  }

  // The events of the chunk that finished the stream, held until the body is known to carry nothing more.
  const held: Array<Model.ModelEvent> = []
  const release = (): Effect.Effect<Events, Cause.Done> => {
    const [first, ...rest] = held.splice(0)
    return first === undefined ? Cause.done() : Effect.succeed<Events>([first, ...rest])
  }
  /** After the finish: the rest of the body, for at most the grace; a body left open ends the stream. */
  const readAfterFinish = Effect.map(Effect.timeoutOption(read(), request.afterFinishGraceMs), (chunk) =>
    chunk._tag === "Some" ? chunk.value : ({ done: true, value: undefined } as const),
  )

  const pull: Effect.Effect<Events, ModelError.ModelError | Cause.Done> = Effect.suspend(() => {
    if (failure !== undefined) return Effect.fail(failure)
    if (ended) return release()
    const finished = request.normalizer.isFinished()
    return Effect.flatMap(finished ? readAfterFinish : read(), (chunk) => {
      const out: Array<Model.ModelEvent> = []
      onChunk(chunk, out)
      if (request.normalizer.isFinished()) {
        // Nothing of a finished stream is yielded until its body is known to carry nothing more.
        if (failure !== undefined) return Effect.fail(failure)
        held.push(...out)
        return ended ? release() : pull
      }
      const [first, ...rest] = out
      if (first !== undefined) return Effect.succeed<Events>([first, ...rest])
      return pull
    })
  })
  return Stream.fromPull(Effect.succeed(pull))
})


/** Reads at most `limit` bytes of an error body as text. */
const readErrorBody = (
  read: () => Effect.Effect<ReadableStreamReadResult<Uint8Array>, ModelError.ModelError>,
  limit: number,
): Effect.Effect<string, ModelError.ModelError> => {
  const decoder = new TextDecoder()
  const parts: Array<string> = []
  let size = 0
  const loop: Effect.Effect<string, ModelError.ModelError> = Effect.flatMap(read(), (chunk) => {
    if (chunk.done) return Effect.succeed(parts.join("") + decoder.decode())
    const room = limit - size
    const bytes = chunk.value.byteLength > room ? chunk.value.subarray(0, room) : chunk.value
    size += bytes.byteLength
    parts.push(decoder.decode(bytes, { stream: true }))
    return size >= limit ? Effect.succeed(parts.join("") + decoder.decode()) : loop
  })
  // A body that fails half-way is classified with what arrived; an idle timeout stays `timed_out`.
  return Effect.suspend(() => loop).pipe(
    Effect.catch((error) => (error.reason._tag === "TimedOut" ? Effect.fail(error) : Effect.succeed(parts.join("")))),
  )
}
