/**
 * A guard compiled from a schema's AST: whether a JSON value has the schema's closed shape, checked
 * in place. It answers `true` only when the closed decode (`Codec.closed`) would accept the value
 * and return it unchanged (a schema without transformations returns the same structure), so a
 * reader may keep the parsed value instead of the decoder's copy (docs/architecture.md §12: the
 * context read decodes every row of a session). `false` says nothing more: the caller asks the
 * decoder for the verdict and its message. A schema node the guard does not know (a transformation,
 * a declaration, a tuple) compiles to a guard that always answers `false`.
 */
import { SchemaAST } from "effect"

export type Guard = (input: unknown) => boolean

const passes = (check: SchemaAST.Check<unknown>, input: unknown, ast: SchemaAST.AST): boolean =>
  check._tag === "Filter"
    ? check.run(input, ast, PARSE_OPTIONS) === undefined
    : check.checks.every((inner) => passes(inner, input, ast))

/**
 * A check of Effect's own that the guard writes as an expression of `v` instead of calling it, or
 * undefined: the integer, range, length and pattern filters, known by their `representation` and
 * met on nearly every field of an event (an event id's pattern, `recordedAt`, the ids' lengths).
 * Each expression holds only where the filter holds (a `NaN`, which a range filter lets through,
 * fails it, and the decoder then answers), so the guard stays sound; anything else is called.
 */
const inlined = (check: SchemaAST.Check<unknown>, node: SchemaAST.AST, value: (held: unknown) => string): string | undefined => {
  if (check._tag !== "Filter") return undefined
  const representation = check.annotations?.["representation"] as { readonly id?: unknown; readonly payload?: unknown } | undefined
  const payload = (representation?.payload ?? undefined) as Record<string, unknown> | undefined
  const finite = (field: unknown): field is number => typeof field === "number" && Number.isFinite(field)
  switch (representation?.id) {
    case "effect/schema/isInt":
      return "Number.isSafeInteger(v)"
    case "effect/schema/isBetween": {
      if (node._tag !== "Number" || payload === undefined || !finite(payload["minimum"]) || !finite(payload["maximum"])) return undefined
      const above = payload["exclusiveMinimum"] === true ? ">" : ">="
      const below = payload["exclusiveMaximum"] === true ? "<" : "<="
      return `v ${above} ${value(payload["minimum"])} && v ${below} ${value(payload["maximum"])}`
    }
    case "effect/schema/isMinLength":
      return node._tag === "String" && payload !== undefined && finite(payload["minLength"]) ? `v.length >= ${value(payload["minLength"])}` : undefined
    case "effect/schema/isMaxLength":
      return node._tag === "String" && payload !== undefined && finite(payload["maxLength"]) ? `v.length <= ${value(payload["maxLength"])}` : undefined
    case "effect/schema/isPattern": {
      const source = payload?.["source"]
      const flags = payload?.["flags"]
      // A global or sticky pattern carries state between tests: left to the filter.
      if (node._tag !== "String" || typeof source !== "string" || typeof flags !== "string" || /[gy]/.test(flags)) return undefined
      return `${value(new RegExp(source, flags))}.test(v)`
    }
    default:
      return undefined
  }
}

/** The options the checks run under: the closed decode's. */
const PARSE_OPTIONS: SchemaAST.ParseOptions = { onExcessProperty: "error", errors: "first" }

/**
 * A union whose members are all objects with one required property whose type is a distinct string
 * literal (a tag such as `kind`): the property's name and each tag's member index.
 */
const discriminated = (node: SchemaAST.Union): { readonly name: string; readonly tags: Map<string, number> } | undefined => {
  const first = node.types[0]
  if (first === undefined || first._tag !== "Objects") return undefined
  for (const candidate of first.propertySignatures) {
    if (typeof candidate.name !== "string") continue
    const name = candidate.name
    const tags = new Map<string, number>()
    const tagged = node.types.every((member, index) => {
      if (member._tag !== "Objects" || member.encoding !== undefined) return false
      const property = member.propertySignatures.find((signature) => signature.name === name)
      if (property === undefined || SchemaAST.isOptional(property.type)) return false
      const type = property.type
      if (type._tag !== "Literal" || typeof type.literal !== "string" || type.checks !== undefined || type.encoding !== undefined) return false
      if (tags.has(type.literal)) return false
      tags.set(type.literal, index)
      return true
    })
    if (tagged) return { name, tags }
  }
  return undefined
}

/**
 * Compiles `ast` into JavaScript source, one function per schema node (nodes met again, as in a
 * recursive schema, call the same function), so every property is read at a site of its own with a
 * constant key: a closure walking a list of names reads every object of every shape at one shared
 * site, which V8 can no longer specialise, and a stored event is checked at every read of a session
 * (docs/architecture.md §12). Checks, literals and tags reach the code as values, never as text,
 * except property names and string tags, written with `JSON.stringify` (a valid string literal).
 */
export const compile = (ast: SchemaAST.AST): Guard => {
  const functions = new Map<SchemaAST.AST, number>()
  const bodies: Array<string> = []
  const values: Array<unknown> = []
  /** Slots of the compiled code: the last string that passed at a property (`m0`, `m1`, …). */
  let memos = 0
  const value = (held: unknown): string => {
    values.push(held)
    return `r[${values.length - 1}]`
  }
  const go = (node: SchemaAST.AST): string => {
    const known = functions.get(node)
    if (known !== undefined) return `f${known}`
    const index = bodies.length
    functions.set(node, index)
    bodies.push("")
    bodies[index] = node.encoding === undefined ? build(node) : "return false"
    return `f${index}`
  }
  /** The node's own checks after its type test, as statements. */
  const checks = (node: SchemaAST.AST): string => {
    if (node.checks === undefined) return ""
    const at = value(node)
    return node.checks
      .map((check) => {
        const test = inlined(check, node, value)
        return test === undefined ? `if (!passes(${value(check)}, v, ${at})) return false;` : `if (!(${test})) return false;`
      })
      .join("")
  }
  const build = (node: SchemaAST.AST): string => {
    switch (node._tag) {
      case "Null":
        return `if (v !== null) return false;${checks(node)}return true`
      case "String":
        return `if (typeof v !== "string") return false;${checks(node)}return true`
      case "Number":
        return `if (typeof v !== "number") return false;${checks(node)}return true`
      case "Boolean":
        return `if (typeof v !== "boolean") return false;${checks(node)}return true`
      case "Literal":
        return `if (v !== ${value(node.literal)}) return false;${checks(node)}return true`
      case "Suspend":
        return `if (!${go(node.thunk())}(v)) return false;${checks(node)}return true`
      case "Union": {
        const members = node.types.map(go)
        const byTag = discriminated(node)
        if (byTag === undefined) return `if (!(${members.map((member) => `${member}(v)`).join(" || ") || "false"})) return false;${checks(node)}return true`
        // A tagged union: the member is chosen by its tag, as only it can accept the value.
        const cases = [...byTag.tags].map(([tag, at]) => `case ${JSON.stringify(tag)}: if (!${members[at]!}(v)) return false; break;`)
        return `if (typeof v !== "object" || v === null || isArray(v)) return false;switch (v[${JSON.stringify(byTag.name)}]) {${cases.join("")}default: return false}${checks(node)}return true`
      }
      case "Arrays": {
        // Only a plain array of one element type: tuples are left to the decoder.
        if (node.elements.length > 0 || node.rest.length !== 1) return "return false"
        const item = go(node.rest[0]!)
        return `if (!isArray(v)) return false;for (let i = 0; i < v.length; i++) if (!${item}(v[i])) return false;${checks(node)}return true`
      }
      case "Objects":
        return objects(node)
      default:
        return "return false"
    }
  }
  const objects = (node: SchemaAST.Objects): string => {
    if (node.propertySignatures.some((property) => typeof property.name !== "string")) return "return false"
    // Only string-keyed records: other parameters are left to the decoder.
    if (node.indexSignatures.some((index) => index.parameter._tag !== "String" || index.parameter.checks !== undefined)) return "return false"
    const lines = [`if (typeof v !== "object" || v === null || isArray(v)) return false;`, "let present = 0;", "let x;"]
    for (const property of node.propertySignatures) {
      const name = JSON.stringify(property.name)
      const type = go(property.type)
      // A check is a predicate of the string alone, and a property's strings repeat from event to
      // event (every event of an invocation carries the same four ids): the last string that passed
      // at this property is not checked again.
      const memo = property.type._tag === "String" && property.type.checks !== undefined ? `m${memos++}` : undefined
      const guard = memo === undefined ? `${type}(x)` : `(x === ${memo} || (${type}(x) && ((${memo} = x), true)))`
      // JSON holds no `undefined`: a read that gives it is a missing key (or one set to `undefined`,
      // which the key count below then refuses). A value inherited rather than own (a name
      // `Object.prototype` has) is never accepted.
      lines.push(
        `x = v[${name}];`,
        SchemaAST.isOptional(property.type)
          ? `if (x !== undefined) { if (!hasOwn(v, ${name}) || !${guard}) return false; present++; }`
          : `if (x === undefined || !hasOwn(v, ${name}) || !${guard}) return false; present++;`,
      )
    }
    // Closed: a key no property names needs an index signature; an index signature's type holds for
    // every key (the decoder reads the named properties through it too).
    const indexed = node.indexSignatures.map((index) => go(index.type))
    if (indexed.length === 0) lines.push("if (keys(v).length !== present) return false;")
    else lines.push(`for (const key of keys(v)) { const y = v[key]; if (${indexed.map((guard) => `!${guard}(y)`).join(" || ")}) return false; }`)
    return `${lines.join("")}${checks(node)}return true`
  }
  const root = go(ast)
  const slots = Array.from({ length: memos }, (_, index) => `let m${index};`).join("")
  const source = `${slots}\n${bodies.map((body, index) => `function f${index}(v) {${body}}`).join("\n")}\nreturn ${root}`
  const make = new Function("r", "passes", "hasOwn", "isArray", "keys", source) as (
    values: ReadonlyArray<unknown>,
    check: typeof passes,
    own: typeof Object.hasOwn,
    array: typeof Array.isArray,
    ownKeys: typeof Object.keys,
  ) => Guard
  return make(values, passes, Object.hasOwn, Array.isArray, Object.keys)
}
