/**
 * `ToolCatalog`, an immutable set of tools with a stable digest (`maka.tool-catalog.v1`), and its
 * per-step capture: `capture()` freezes the definitions and handlers one logical step uses (its
 * retries reuse the capture). `admit` applies the step's exclusivity rule (docs/engine.md §5.7).
 */
import { Canonical, Digest } from "@maka/facts"
import { Result } from "effect"
import { NAME_PATTERN, type Semantics, type Tool, type ToolDefinition } from "./Tool.ts"
import { invalidDefinition } from "./ToolError.ts"

/** Marks a catalog built by `make`, so a plain array of tools can be told apart. */
const CatalogBrand: unique symbol = Symbol.for("@maka/tools/ToolCatalog")

export interface ToolCatalog {
  /** The tools, sorted by name. */
  readonly tools: ReadonlyArray<Tool>
  /** The names, sorted and unique. */
  readonly names: ReadonlyArray<string>
  readonly digest: string
  readonly get: (name: string) => Tool | undefined
  /** Freezes the definitions and handlers for one logical step. */
  readonly capture: () => CapturedCatalog
}

/** The catalog one step was built with: what the model was offered and what runs its calls. */
export interface CapturedCatalog {
  readonly digest: string
  readonly names: ReadonlyArray<string>
  /** The provider-facing definitions, sorted by name. */
  readonly definitions: ReadonlyArray<ToolDefinition>
  readonly get: (name: string) => Tool | undefined
}

const byName = (left: { readonly name: string }, right: { readonly name: string }): number =>
  left.name < right.name ? -1 : left.name > right.name ? 1 : 0

/** The catalog digest of a set of tools (docs/log-format.md §2.1). */
export const digestOf = (tools: ReadonlyArray<Tool>): string =>
  Digest.toolCatalog(
    tools.map((tool) => ({
      name: tool.name,
      description: tool.description,
      inputSchema: tool.inputSchema,
      semantics: tool.semantics,
    })),
  )

/** How many distinct sealed definition lists are kept for reuse; the least recently used goes first. */
const SEALED_LISTS = 32

/** Sealed definition lists by their canonical JSON. */
const sealedLists = new Map<string, ReadonlyArray<ToolDefinition>>()

/**
 * The definitions of `tools` as one sealed list (`Canonical.seal`): the same object for the same
 * definitions, in every catalog and every step (a run's catalog is built per run), so the model's
 * request check, body and digest take it once (docs/architecture.md §12). A hand-built tool's
 * definition, checked plain JSON by `make`, is sealed here (a frozen plain list should sealing fail).
 */
const sealedDefinitions = (tools: ReadonlyArray<Tool>): ReadonlyArray<ToolDefinition> => {
  const definitions = tools.map((tool) => tool.definition)
  if (!definitions.every(Canonical.isSealed)) {
    const sealed = Result.try({ try: () => Canonical.seal(definitions), catch: () => undefined })
    return Result.isSuccess(sealed) ? sealed.success : Object.freeze(definitions)
  }
  // Canonical JSON is compositional: the list's text is its items' kept texts joined.
  const text = `[${definitions.map((definition) => Canonical.stringify(definition)).join(",")}]`
  const kept = sealedLists.get(text)
  if (kept !== undefined) {
    sealedLists.delete(text)
    sealedLists.set(text, kept)
    return kept
  }
  const sealed = Canonical.seal(definitions)
  sealedLists.set(text, sealed)
  if (sealedLists.size > SEALED_LISTS) {
    const oldest = sealedLists.keys().next()
    if (oldest.done !== true) sealedLists.delete(oldest.value)
  }
  return sealed
}

const SEMANTICS: ReadonlySet<unknown> = new Set<Semantics>(["parallel", "exclusive_step", "finish_turn"])

const isRecord = (value: unknown): value is { readonly [key: string]: unknown } => typeof value === "object" && value !== null

/**
 * What is wrong with a tool a catalog is given, or `undefined`. `Tool.make` builds tools that pass; a
 * hand-built object is checked here, before a run is opened with it, rather than at its first request.
 */
const toolProblem = (tool: unknown): string | undefined => {
  if (!isRecord(tool)) return "a tool must be an object (build it with Tool.make)"
  const { name, semantics, decode, definition } = tool
  if (typeof name !== "string" || !NAME_PATTERN.test(name)) {
    return `tool name ${JSON.stringify(name) ?? String(name)} must be 1-64 characters of [A-Za-z0-9_-]`
  }
  if (!SEMANTICS.has(semantics)) return `tool ${name} has unknown semantics ${JSON.stringify(semantics) ?? String(semantics)}`
  if (typeof decode !== "function") return `tool ${name} has no decode function (build it with Tool.make)`
  const inputSchema = isRecord(definition) ? definition["inputSchema"] : undefined
  if (
    !isRecord(definition) ||
    definition["name"] !== name ||
    typeof definition["description"] !== "string" ||
    !isRecord(inputSchema) ||
    inputSchema["type"] !== "object"
  ) {
    return `tool ${name} has no definition {name, description, inputSchema} of a JSON object input (build it with Tool.make)`
  }
  if (!Canonical.isSealed(definition) && Result.isFailure(Canonical.tryStringify(definition))) {
    return `tool ${name}: its definition is not plain JSON`
  }
  return undefined
}

/**
 * Builds a catalog; throws `ToolError` (`InvalidDefinition`) when two tools share a name, or a tool is
 * not one `Tool.make` builds (its name, semantics, decoder or definition).
 */
export const make = (tools: Iterable<Tool>): ToolCatalog => {
  const iterable = typeof tools === "object" && tools !== null && Symbol.iterator in tools
  if (!iterable) throw invalidDefinition("tools must be a list of tools (Tool.make)")
  const given = [...tools]
  for (const tool of given) {
    const problem = toolProblem(tool)
    if (problem !== undefined) throw invalidDefinition(problem)
  }
  const sorted = given.sort(byName)
  const index = new Map<string, Tool>()
  for (const tool of sorted) {
    if (index.has(tool.name)) throw invalidDefinition(`tool name ${tool.name} appears twice in one catalog`)
    index.set(tool.name, tool)
  }
  const names = Object.freeze(sorted.map((tool) => tool.name))
  const digest = digestOf(sorted)
  const get = (name: string): Tool | undefined => index.get(name)
  const captured: CapturedCatalog = Object.freeze({
    digest,
    names,
    definitions: sealedDefinitions(sorted),
    get,
  })
  return Object.freeze({
    [CatalogBrand]: true,
    tools: Object.freeze(sorted),
    names,
    digest,
    get,
    capture: () => captured,
  })
}

export const empty: ToolCatalog = make([])

/** What a host may pass where a catalog is expected: a catalog, or a plain array of tools (`[]` is none). */
export type Tools = ToolCatalog | ReadonlyArray<Tool>

/** Whether `value` is a catalog built by `make` (a plain array of tools is not). */
export const isToolCatalog = (value: unknown): value is ToolCatalog =>
  typeof value === "object" && value !== null && CatalogBrand in value

/** The catalog of `tools`: a catalog as it is, an array built with `make` (throws like `make`). */
export const from = (tools: Tools): ToolCatalog => (isToolCatalog(tools) ? tools : make(tools))

/** A new catalog with `tools` added; throws like `make` on a repeated name. */
export const extend = (catalog: ToolCatalog, tools: Iterable<Tool>): ToolCatalog => make([...catalog.tools, ...tools])

/** Whether a call of this tool was admitted into its step, or conflicts with its exclusivity. */
export type Admission = "admitted" | "exclusive_conflict"

const isExclusive = (semantics: Semantics): boolean => semantics !== "parallel"

/**
 * The exclusivity rule over a step's calls, in order (docs/engine.md §5.7): a step starts fresh; a
 * `parallel` call makes it parallel; an `exclusive_step` or `finish_turn` call is admitted only into a
 * fresh step and makes it exclusive; any call into an exclusive step, or an exclusive call into a
 * parallel step, conflicts. A name outside the catalog leaves the mode unchanged (its call is
 * rejected `unavailable` afterwards) unless the step is already exclusive.
 */
export const admit = (captured: CapturedCatalog, names: ReadonlyArray<string>): ReadonlyArray<Admission> => {
  let mode: "fresh" | "parallel" | "exclusive" = "fresh"
  return names.map((name): Admission => {
    if (mode === "exclusive") return "exclusive_conflict"
    const tool = captured.get(name)
    if (tool === undefined) return "admitted"
    if (!isExclusive(tool.semantics)) {
      mode = "parallel"
      return "admitted"
    }
    if (mode === "parallel") return "exclusive_conflict"
    mode = "exclusive"
    return "admitted"
  })
}
