/**
 * The adapter's check of a model request against its schema (closed shapes), with what it keeps to
 * check a live run's request quickly: the sealed messages and the sealed tools-and-options pairs that
 * passed, each checked once (docs/model.md §4.1).
 */
import type { Prompt } from "@maka/facts"
import { Canonical, Codec, Prompt as PromptSchema } from "@maka/facts"
import { Result, Schema } from "effect"

const decodeRequest = Schema.decodeUnknownResult(PromptSchema.ModelRequest)
const decodeMessage = Schema.decodeUnknownResult(PromptSchema.PromptMessage)
const hasMessageShape = Codec.shapeGuard(PromptSchema.PromptMessage)
const decodeOutputLimit = Schema.decodeUnknownResult(PromptSchema.ModelRequest.fields.maxOutputTokens)

/**
 * Sealed prompt messages (`Canonical.seal`) that passed the schema: deep-frozen, so they still pass.
 * A live run sends the same sealed messages step after step (docs/architecture.md §12): each is
 * checked once, and goes on as the same object, whose request-body text is kept.
 */
const checkedMessages = new WeakSet<object>()

/**
 * Sealed tool lists and, for each, the sealed provider options that passed the schema with it. A
 * run sends the same sealed tools and options every step (its catalog's definitions, its settings),
 * so the pair is checked once; only the output limit, which changes per step, is checked again.
 */
const checkedEnvelopes = new WeakMap<object, WeakSet<object>>()

const REQUEST_KEYS = new Set(["prompt", "tools", "providerOptions", "maxOutputTokens"])

/** Whether `value` has exactly the request's four own keys (an absent one fails the whole decode). */
const hasRequestKeys = (value: object): boolean => {
  const keys = Object.keys(value)
  return keys.length === REQUEST_KEYS.size && keys.every((key) => REQUEST_KEYS.has(key))
}

/**
 * The request's fields other than its prompt, checked: at once when its tools and options are a
 * sealed pair already checked, else by the schema (and a sealed pair that passes is remembered).
 */
const checkEnvelope = (
  request: Prompt.ModelRequest,
): Result.Result<Omit<Prompt.ModelRequest, "prompt">, Schema.SchemaError> => {
  const { tools, providerOptions } = request
  const isSealedPair = Canonical.isSealed(tools) && Canonical.isSealed(providerOptions) && hasRequestKeys(request)
  if (isSealedPair && checkedEnvelopes.get(tools)?.has(providerOptions) === true) {
    const limit = request.maxOutputTokens
    // A positive safe integer is what the schema accepts (and returns as is); anything else gets its verdict.
    if (Number.isSafeInteger(limit) && limit >= 1) return Result.succeed({ tools, providerOptions, maxOutputTokens: limit })
    return Result.map(decodeOutputLimit(limit), (maxOutputTokens) => ({ tools, providerOptions, maxOutputTokens }))
  }
  const envelope = decodeRequest({ ...request, prompt: [] }, { onExcessProperty: "error" })
  if (isSealedPair && Result.isSuccess(envelope)) {
    const options = checkedEnvelopes.get(tools) ?? new WeakSet<object>()
    options.add(providerOptions)
    checkedEnvelopes.set(tools, options)
    // Sent as themselves: the body and the digest reuse the sealed text.
    return Result.succeed({ tools, providerOptions, maxOutputTokens: envelope.success.maxOutputTokens })
  }
  return envelope
}

/** The request checked against its schema (closed shapes), or the message of the first refusal. */
export const checkRequest = (request: Prompt.ModelRequest): Result.Result<Prompt.ModelRequest, string> => {
  const whole = () => Result.mapError(decodeRequest(request, { onExcessProperty: "error" }), (error) => error.message)
  const prompt: unknown = typeof request === "object" && request !== null ? request.prompt : undefined
  if (!Array.isArray(prompt)) return whole()
  const envelope = checkEnvelope(request)
  if (Result.isFailure(envelope)) return whole()
  const messages: Array<Prompt.PromptMessage> = []
  // Whether every message is the caller's own object (checked in place, no decode's copy).
  let own = true
  for (const message of prompt as ReadonlyArray<unknown>) {
    if (typeof message === "object" && message !== null && checkedMessages.has(message)) {
      messages.push(message as Prompt.PromptMessage)
      continue
    }
    // A sealed message of the right shape, checked in place, is the decode's result itself.
    if (Canonical.isSealed(message) && hasMessageShape(message)) {
      checkedMessages.add(message as object)
      messages.push(message)
      continue
    }
    const decoded = decodeMessage(message, { onExcessProperty: "error" })
    // The whole request's decode names the refusal with its path, as before.
    if (Result.isFailure(decoded)) return whole()
    if (Canonical.isSealed(message)) {
      checkedMessages.add(message as object)
      messages.push(message as Prompt.PromptMessage)
    } else {
      messages.push(decoded.success)
      own = false
    }
  }
  // The caller's own array when its messages are the checked ones: the same prompt, not a copy (a
  // prompt the engine projected is then recognised as projected, docs/model.md §4.1).
  return Result.succeed({ ...envelope.success, prompt: own ? (prompt as Prompt.Prompt) : messages })
}
