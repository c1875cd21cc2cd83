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

const never: Guard = () => false

const passes = (check: SchemaAST.Check<unknown>, input: unknown, ast: SchemaAST.AST): boolean =>
  check._tag === "Filter"
    ? check.run(input, ast, PARSE_OPTIONS) === undefined
    : check.checks.every((inner) => passes(inner, input, ast))

/** The options the checks run under: the closed decode's. */
const PARSE_OPTIONS: SchemaAST.ParseOptions = { onExcessProperty: "error", errors: "first" }

/** The node's own checks after its type test. */
const withChecks = (ast: SchemaAST.AST, test: Guard): Guard => {
  const checks = ast.checks
  if (checks === undefined) return test
  return (input) => {
    if (!test(input)) return false
    for (const check of checks) if (!passes(check, input, ast)) return false
    return true
  }
}

const isRecord = (input: unknown): input is Record<string, unknown> =>
  typeof input === "object" && input !== null && !Array.isArray(input)

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

/** Compiles `ast`; nodes met again (a recursive schema) share one guard. */
export const compile = (ast: SchemaAST.AST): Guard => {
  const compiled = new Map<SchemaAST.AST, Guard>()
  const go = (node: SchemaAST.AST): Guard => {
    const known = compiled.get(node)
    if (known !== undefined) return known
    // A recursive reference sees this forwarder until the node's own guard is built.
    let built: Guard | undefined
    compiled.set(node, (input) => built!(input))
    built = node.encoding === undefined ? build(node) : never
    compiled.set(node, built)
    return built
  }
  const build = (node: SchemaAST.AST): Guard => {
    switch (node._tag) {
      case "Null":
        return withChecks(node, (input) => input === null)
      case "String":
        return withChecks(node, (input) => typeof input === "string")
      case "Number":
        return withChecks(node, (input) => typeof input === "number")
      case "Boolean":
        return withChecks(node, (input) => typeof input === "boolean")
      case "Literal": {
        const literal = node.literal
        return withChecks(node, (input) => input === literal)
      }
      case "Suspend":
        return withChecks(node, go(node.thunk()))
      case "Union": {
        const members = node.types.map(go)
        const byTag = discriminated(node)
        if (byTag !== undefined) {
          // A tagged union: the member is chosen by its tag, as only it can accept the value.
          const { name, tags } = byTag
          const chosen = new Map<unknown, Guard>([...tags].map(([tag, index]) => [tag, members[index]!]))
          return withChecks(node, (input) => {
            if (!isRecord(input)) return false
            const member = chosen.get(input[name])
            return member !== undefined && member(input)
          })
        }
        return withChecks(node, (input) => {
          for (const member of members) if (member(input)) return true
          return false
        })
      }
      case "Arrays": {
        // Only a plain array of one element type: tuples are left to the decoder.
        if (node.elements.length > 0 || node.rest.length !== 1) return never
        const item = go(node.rest[0]!)
        return withChecks(node, (input) => {
          if (!Array.isArray(input)) return false
          for (const value of input) if (!item(value)) return false
          return true
        })
      }
      case "Objects":
        return objects(node)
      default:
        return never
    }
  }
  const objects = (node: SchemaAST.Objects): Guard => {
    const properties = node.propertySignatures.map((property) => ({
      name: property.name,
      optional: SchemaAST.isOptional(property.type),
      guard: go(property.type),
    }))
    if (properties.some((property) => typeof property.name !== "string")) return never
    // Only string-keyed records: other parameters are left to the decoder.
    if (node.indexSignatures.some((index) => index.parameter._tag !== "String" || index.parameter.checks !== undefined)) return never
    const values = node.indexSignatures.map((index) => go(index.type))
    return withChecks(node, (input) => {
      if (!isRecord(input)) return false
      let present = 0
      for (const property of properties) {
        const name = property.name as string
        // JSON holds no `undefined`: a read that gives it is a missing key (or one set to
        // `undefined`, which the key count below then refuses).
        const value = input[name]
        if (value === undefined) {
          if (!property.optional) return false
          continue
        }
        // A value inherited rather than own (a name `Object.prototype` has) is never accepted.
        if (!Object.hasOwn(input, name)) return false
        present++
        if (!property.guard(value)) return false
      }
      // Closed: a key no property names needs an index signature; an index signature's type
      // holds for every key (the decoder reads the named properties through it too).
      if (values.length === 0) return Object.keys(input).length === present
      for (const key of Object.keys(input)) for (const value of values) if (!value(input[key])) return false
      return true
    })
  }
  return go(ast)
}
