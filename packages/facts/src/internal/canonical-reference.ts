/**
 * The reference canonical JSON writer (docs/log-format.md §2.1): a plain two-step walk that classifies each value,
 * then writes it, with the path to every refusal. `Canonical.ts` answers from a faster single-pass
 * writer and falls back to this one for every value the fast writer does not accept, so refusals
 * (message and path) come only from here. Tests compare the two on random values.
 */
import { Data } from "effect"

/** A value canonical JSON refuses; `path` leads from the root to the offending value. */
export class CanonicalJsonError extends Data.TaggedError("CanonicalJsonError")<{
  readonly message: string
  readonly path: ReadonlyArray<string | number>
}> {}

type Path = Array<string | number>

const formatPath = (path: ReadonlyArray<string | number>): string =>
  path
    .map((step) =>
      typeof step === "number"
        ? `[${step}]`
        : /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(step)
          ? `.${step}`
          : `[${JSON.stringify(step)}]`
    )
    .reduce((text, step) => text + step, "$")

const refuse = (path: ReadonlyArray<string | number>, what: string): never => {
  throw new CanonicalJsonError({ message: `canonical JSON refuses ${what} at ${formatPath(path)}`, path: [...path] })
}

type Shape =
  | { readonly kind: "scalar" }
  | { readonly kind: "array"; readonly container: object; readonly items: ReadonlyArray<unknown> }
  | { readonly kind: "object"; readonly container: object; readonly entries: ReadonlyArray<readonly [string, unknown]> }

const SCALAR: Shape = { kind: "scalar" }

const byKey = (left: readonly [string, unknown], right: readonly [string, unknown]): number =>
  left[0] < right[0] ? -1 : left[0] > right[0] ? 1 : 0

/** Classifies one value, refusing anything that is not plain JSON (cycles included). */
const shapeOf = (value: unknown, path: Path, ancestors: ReadonlySet<object>): Shape => {
  if (value === null || typeof value === "string" || typeof value === "boolean") return SCALAR
  if (typeof value === "number") {
    return Number.isFinite(value) ? SCALAR : refuse(path, `the non-finite number ${String(value)}`)
  }
  if (typeof value !== "object") return refuse(path, value === undefined ? "undefined" : `a ${typeof value}`)
  if (ancestors.has(value)) return refuse(path, "a cycle")
  const prototype: unknown = Object.getPrototypeOf(value)
  if (Array.isArray(value)) {
    if (prototype !== Array.prototype) return refuse(path, "an array subclass")
    const items: ReadonlyArray<unknown> = value
    return { kind: "array", container: value, items }
  }
  if (prototype !== Object.prototype && prototype !== null) {
    const name: unknown = value.constructor?.name
    return refuse(path, `a non-plain object${typeof name === "string" && name !== "" ? ` (${name})` : ""}`)
  }
  if (Object.getOwnPropertySymbols(value).some((key) => Object.prototype.propertyIsEnumerable.call(value, key))) {
    return refuse(path, "a symbol-keyed property")
  }
  const entries: Array<readonly [string, unknown]> = Object.entries(value)
  return { kind: "object", container: value, entries: entries.sort(byKey) }
}

/** Turns a stack overflow or an over-long string (both `RangeError`) into a typed refusal. */
const guarded = <A>(run: () => A): A => {
  try {
    return run()
  } catch (error) {
    if (error instanceof RangeError) {
      throw new CanonicalJsonError({
        message: `canonical JSON refuses a value too deep or too large to serialize (${error.message})`,
        path: []
      })
    }
    throw error
  }
}

const write = (value: unknown, path: Path, ancestors: Set<object>, out: Array<string>): void => {
  const shape = shapeOf(value, path, ancestors)
  if (shape.kind === "scalar") {
    out.push(JSON.stringify(value))
    return
  }
  ancestors.add(shape.container)
  if (shape.kind === "array") {
    out.push("[")
    // An index loop, not forEach: a hole in a sparse array must reach shapeOf as undefined.
    for (let index = 0; index < shape.items.length; index += 1) {
      if (index > 0) out.push(",")
      path.push(index)
      write(shape.items[index], path, ancestors, out)
      path.pop()
    }
    out.push("]")
  } else {
    out.push("{")
    shape.entries.forEach(([key, item], index) => {
      out.push(index > 0 ? "," : "", JSON.stringify(key), ":")
      path.push(key)
      write(item, path, ancestors, out)
      path.pop()
    })
    out.push("}")
  }
  ancestors.delete(shape.container)
}

/** Canonical JSON text of `value`; throws `CanonicalJsonError` for anything that is not plain JSON. */
export const stringify = (value: unknown): string =>
  guarded(() => {
    const out: Array<string> = []
    write(value, [], new Set(), out)
    return out.join("")
  })


/**
 * JSON size of `value`: `nodes` counts every value, containers included; `depth` is 1 for a scalar
 * or an empty container, and 1 + the deepest child for a non-empty container (so `{"a":[1]}` has
 * 3 nodes and depth 3). Refuses what `stringify` refuses, with the same error.
 */
export const measure = (value: unknown): { readonly nodes: number; readonly depth: number } =>
  guarded(() => {
    let nodes = 0
    const ancestors = new Set<object>()
    const path: Path = []
    const depthOf = (current: unknown): number => {
      nodes += 1
      const shape = shapeOf(current, path, ancestors)
      if (shape.kind === "scalar") return 1
      ancestors.add(shape.container)
      let deepest = 0
      const visit = (step: string | number, child: unknown): void => {
        path.push(step)
        deepest = Math.max(deepest, depthOf(child))
        path.pop()
      }
      if (shape.kind === "array") {
        for (let index = 0; index < shape.items.length; index += 1) visit(index, shape.items[index])
      } else {
        for (const [key, child] of shape.entries) visit(key, child)
      }
      ancestors.delete(shape.container)
      return 1 + deepest
    }
    const depth = depthOf(value)
    return { nodes, depth }
  })

