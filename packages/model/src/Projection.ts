/**
 * The route projection `projectPrompt(kind, routeIdentity, prompt)` (docs/model.md §4.1, docs/engine.md §5.5): what a
 * route is sent of a prompt. Thinking that carries `providerOptions` (a signature) goes only to the
 * route that produced it (`providerOptions.maka.routeIdentity`); unsigned thinking goes to
 * OpenAI-compatible routes only; Anthropic routes get adjacent same-role messages merged. The engine
 * digests the result and the adapter encodes exactly it; projecting twice changes nothing.
 */
import { Canonical, type Identity, type Prompt } from "@maka/facts"
import { isNonEmpty, isObject } from "./internal/provider-options.ts"
import type { ProviderKind } from "./ProviderConfig.ts"

/** The route a `providerOptions` object was stamped with, if any. */
export const producingRoute = (options: Identity.JsonObject | undefined): string | undefined => {
  const maka = options?.["maka"]
  if (!isObject(maka)) return undefined
  const route = maka["routeIdentity"]
  return typeof route === "string" ? route : undefined
}

const keepThinking = (kind: ProviderKind, routeIdentity: string, part: Prompt.AssistantThinking): boolean => {
  if (isNonEmpty(part.providerOptions)) return producingRoute(part.providerOptions) === routeIdentity
  return kind === "openai-compatible" && part.text !== ""
}

const filterParts = (kind: ProviderKind, routeIdentity: string, message: Prompt.AssistantMessage): Prompt.PromptMessage | undefined => {
  // Most messages carry no thinking: they go on as themselves, with nothing allocated.
  if (message.parts.length > 0 && !message.parts.some((part) => part.kind === "thinking")) return message
  const parts = message.parts.filter((part) => part.kind !== "thinking" || keepThinking(kind, routeIdentity, part))
  if (parts.length === 0) return undefined
  return parts.length === message.parts.length ? message : { role: "assistant", parts }
}

/** A route's filtered assistant messages, by sealed message; `null` where every part was dropped. */
type Filtered = WeakMap<Prompt.PromptMessage, Prompt.PromptMessage | null>

/**
 * The filter's results per route (`kind` and identity) for sealed messages (`Canonical.seal`): a
 * sealed message is deep-frozen, so its result never changes, and a prompt that grows by a few
 * messages a step is filtered only in those (its older messages can hold hundreds of parts each).
 */
const filteredByRoute = new Map<string, Filtered>()

/** How many routes' results are kept (a process talks to a handful); past it the cache starts over. */
const MAX_ROUTES = 64

/** The key of a route's results: its kind and identity. */
const routeKey = (kind: ProviderKind, routeIdentity: string): string => `${kind}\u0000${routeIdentity}`

/**
 * The prompts `projectPrompt` returned (frozen, so they stay what it returned), each with the key of
 * the route it projected for.
 */
const projectedFor = new WeakMap<Prompt.Prompt, string>()

/** The filter's results of the route whose key is `key`. */
const filteredOf = (key: string): Filtered => {
  const known = filteredByRoute.get(key)
  if (known !== undefined) return known
  if (filteredByRoute.size >= MAX_ROUTES) filteredByRoute.clear()
  const filtered: Filtered = new WeakMap()
  filteredByRoute.set(key, filtered)
  return filtered
}

const filterThinking = (
  kind: ProviderKind,
  routeIdentity: string,
  message: Prompt.PromptMessage,
  filtered: Filtered,
): Prompt.PromptMessage | undefined => {
  if (message.role !== "assistant") return message
  if (!Canonical.isSealed(message)) return filterParts(kind, routeIdentity, message)
  const known = filtered.get(message)
  if (known !== undefined) return known ?? undefined
  const result = filterParts(kind, routeIdentity, message)
  filtered.set(message, result ?? null)
  return result
}

const merge = (left: Prompt.PromptMessage, right: Prompt.PromptMessage): Prompt.PromptMessage | undefined => {
  if (left.role === "system" && right.role === "system") return { role: "system", content: `${left.content}\n\n${right.content}` }
  if (left.role === "user" && right.role === "user") return { role: "user", content: `${left.content}\n\n${right.content}` }
  if (left.role === "assistant" && right.role === "assistant") return { role: "assistant", parts: [...left.parts, ...right.parts] }
  if (left.role === "tool" && right.role === "tool") return { role: "tool", results: [...left.results, ...right.results] }
  return undefined
}

/** The prompt `kind`/`routeIdentity` is sent; the input is not mutated. */
export const projectPrompt = (
  kind: ProviderKind,
  routeIdentity: string,
  prompt: Prompt.Prompt,
): Prompt.Prompt => {
  // A prompt this function returned for the same route is its own projection: the engine projects
  // each request's prompt, and the adapter projects what it is sent again.
  const key = routeKey(kind, routeIdentity)
  if (projectedFor.get(prompt) === key) return prompt
  const projected: Array<Prompt.PromptMessage> = []
  const results = filteredOf(key)
  for (const message of prompt) {
    const filtered = filterThinking(kind, routeIdentity, message, results)
    if (filtered === undefined) continue
    const previous = projected[projected.length - 1]
    const merged = kind === "anthropic" && previous !== undefined ? merge(previous, filtered) : undefined
    if (merged === undefined) projected.push(filtered)
    else projected[projected.length - 1] = merged
  }
  Object.freeze(projected)
  projectedFor.set(projected, key)
  return projected
}
