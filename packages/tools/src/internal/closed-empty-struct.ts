/**
 * The one rule for `Schema.Struct({})` in a tool input, at any depth: Effect reads an empty struct
 * as TypeScript's `{}` (any value but null, JSON Schema `{not: {type: "null"}}`), but what a model
 * sends is JSON, where a struct without fields can only mean the object without keys. So wherever
 * the model's input reaches an empty struct, it is offered and decoded as the closed empty object.
 */
import { Schema, SchemaAST, SchemaIssue, SchemaTransformation } from "effect"

/** The closed empty object, written as Effect writes a closed struct with fields; fresh for each use. */
const closedEmptyObject = () => ({ type: "object", properties: {}, additionalProperties: false })

/** An empty struct: no fields and no index signatures (a record is not one). */
const isEmpty = (ast: SchemaAST.Objects): boolean => ast.propertySignatures.length === 0 && ast.indexSignatures.length === 0

/**
 * The check that makes a value the closed empty object, in Effect's words for a closed struct
 * (`Expected object`, then `Expected no excess property` at each key); it refuses keys whatever
 * `onExcessProperty` says, as the offered JSON Schema does. It carries the struct's own annotations
 * (a description, an identifier), so the JSON Schema keeps them beside its own and Effect still
 * names the struct by them; and it aborts, so no later check meets a value that is not an object.
 */
const closedCheck = (annotations: SchemaAST.AST["annotations"]): SchemaAST.Filter<unknown> => {
  // What the issues name: an object that admits no key (`Record<string, never>`), named as the struct.
  const object = new SchemaAST.Objects([], [new SchemaAST.IndexSignature(SchemaAST.string, SchemaAST.never)], annotations)
  return new SchemaAST.Filter<unknown>(
    (input, _self, options) => {
      if (typeof input !== "object" || input === null || Array.isArray(input)) {
        return new SchemaIssue.InvalidType(object, input, options)
      }
      const excess = Object.entries(input).map(
        ([key, value]) => new SchemaIssue.Pointer([key], new SchemaIssue.UnexpectedKey(object, value, options)),
      )
      const [first, ...rest] = excess
      if (first === undefined) return undefined
      return new SchemaIssue.Composite(object, options.errors === "all" ? [first, ...rest] : [first], input, options)
    },
    { ...annotations, toJsonSchema: closedEmptyObject },
    true,
  )
}

/**
 * An empty struct closed: `Any` narrowed by `closedCheck`. Effect derives `{}` for `Any`, so the
 * check's JSON Schema is the whole of it (an `Objects` node would keep its "not null" beside it, and
 * `Unknown` gets a JSON encoding of its own that hides its checks). The struct's own checks follow,
 * its context (optional, mutable) stays.
 */
const closedStruct = (ast: SchemaAST.Objects): SchemaAST.AST =>
  new SchemaAST.Any(
    undefined,
    [closedCheck(ast.annotations), ...(ast.encodingChecks ?? []), ...(ast.checks ?? [])],
    undefined,
    ast.context,
  )

/**
 * What a node with an encoding decodes from: the last link's schema, the wire form (an encoding is
 * never empty). The model's input meets it, not the node's own members, which meet decoded values.
 */
const wireOf = (encoding: SchemaAST.Encoding): SchemaAST.AST => encoding[encoding.length - 1]!.to

/** Closed nodes by their original: schemas are immutable, and a shared or recursive node stays one node. */
const closedAsts = new WeakMap<SchemaAST.AST, SchemaAST.AST>()

/**
 * `ast` with every empty struct the model's input reaches closed, rebuilt only on the way to one
 * (a lazy schema always, its body is not read here). The input reaches the members of a node, or,
 * when the node has an encoding, its wire form: that one is closed and put in front of the node
 * (passed through unchanged), which then decodes what it let through as before.
 */
const close = (ast: SchemaAST.AST): SchemaAST.AST => {
  const known = closedAsts.get(ast)
  if (known !== undefined) return known
  const closed = closeNode(ast)
  closedAsts.set(ast, closed)
  return closed
}

const closeNode = (ast: SchemaAST.AST): SchemaAST.AST => {
  if (ast.encoding !== undefined) {
    const wire = wireOf(ast.encoding)
    const closedWire = close(wire)
    return closedWire === wire ? ast : SchemaAST.decodeTo(closedWire, ast, SchemaTransformation.passthrough())
  }
  switch (ast._tag) {
    case "Objects": {
      if (isEmpty(ast)) return closedStruct(ast)
      const properties = SchemaAST.mapOrSame(ast.propertySignatures, (property) => {
        const type = close(property.type)
        return type === property.type ? property : new SchemaAST.PropertySignature(property.name, type)
      })
      const indexes = SchemaAST.mapOrSame(ast.indexSignatures, (index) => {
        const type = close(index.type)
        return type === index.type ? index : new SchemaAST.IndexSignature(index.parameter, type)
      })
      return properties === ast.propertySignatures && indexes === ast.indexSignatures
        ? ast
        : new SchemaAST.Objects(properties, indexes, ast.annotations, ast.checks, undefined, ast.context, ast.encodingChecks)
    }
    case "Arrays": {
      const elements = SchemaAST.mapOrSame(ast.elements, close)
      const rest = SchemaAST.mapOrSame(ast.rest, close)
      return elements === ast.elements && rest === ast.rest
        ? ast
        : new SchemaAST.Arrays(ast.isMutable, elements, rest, ast.annotations, ast.checks, undefined, ast.context, ast.encodingChecks)
    }
    case "Union": {
      const types = SchemaAST.mapOrSame(ast.types, close)
      return types === ast.types
        ? ast
        : new SchemaAST.Union(types, ast.options, ast.annotations, ast.checks, undefined, ast.context, ast.encodingChecks)
    }
    case "Declaration": {
      const parameters = SchemaAST.mapOrSame(ast.typeParameters, close)
      return parameters === ast.typeParameters
        ? ast
        : new SchemaAST.Declaration(
            parameters,
            ast.run,
            ast.annotations,
            ast.checks,
            undefined,
            ast.context,
            ast.encodingChecks,
            ast.encodingRun,
          )
    }
    case "Suspend":
      return new SchemaAST.Suspend(() => close(ast.thunk()), ast.annotations, undefined, undefined, ast.context)
    default:
      return ast
  }
}

/**
 * Whether an empty struct is anywhere the model's input reaches: the walk of `closeNode`, reading
 * lazy schemas and looking at each node once.
 */
const reachesEmptyStruct = (ast: SchemaAST.AST, seen: Set<SchemaAST.AST> = new Set()): boolean => {
  if (seen.has(ast)) return false
  seen.add(ast)
  const reaches = (member: SchemaAST.AST) => reachesEmptyStruct(member, seen)
  if (ast.encoding !== undefined) return reaches(wireOf(ast.encoding))
  switch (ast._tag) {
    case "Objects":
      return (
        isEmpty(ast) ||
        ast.propertySignatures.some((property) => reaches(property.type)) ||
        ast.indexSignatures.some((index) => reaches(index.type))
      )
    case "Arrays":
      return ast.elements.some(reaches) || ast.rest.some(reaches)
    case "Union":
      return ast.types.some(reaches)
    case "Declaration":
      return ast.typeParameters.some(reaches)
    case "Suspend":
      return reaches(ast.thunk())
    default:
      return false
  }
}

/**
 * `schema` with every empty struct the model's input reaches closed, or `schema` itself when there
 * is none (so every other schema is offered and decoded exactly as Effect does). It keeps the
 * schema's transformations, so its types and decoding services are the schema's: it is typed as
 * `schema`, as `Schema.make` types a schema over a derived AST.
 */
export const closeEmptyStructs = <S extends Schema.Constraint>(schema: S): S =>
  reachesEmptyStruct(schema.ast) ? Schema.make<S>(close(schema.ast)) : schema
