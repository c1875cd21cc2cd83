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

/** A container being walked: its shape and the index of its next child. */
interface Frame {
  readonly shape: Exclude<Shape, { readonly kind: "scalar" }>
  next: number
}

const lengthOf = (shape: Frame["shape"]): number => (shape.kind === "array" ? shape.items.length : shape.entries.length)

/**
 * Walks `value` depth first in canonical order, with a stack of its own rather than the call stack,
 * so how deep a value may nest never depends on how deep the caller already is: `enter` is called for
 * every value (with its depth, the root's 1) before its children, `leave` after a container's last.
 * Every value is classified (and refused) by `shapeOf` with its path, as a recursive walk would.
 */
const walk = (
  value: unknown,
  enter: (value: unknown, shape: Shape, depth: number, index: number) => void,
  leave: (shape: Frame["shape"]) => void,
): void => {
  const path: Path = []
  const ancestors = new Set<object>()
  const stack: Array<Frame> = []
  const open = (current: unknown, index: number): void => {
    const shape = shapeOf(current, path, ancestors)
    enter(current, shape, stack.length + 1, index)
    if (shape.kind === "scalar") return
    ancestors.add(shape.container)
    stack.push({ shape, next: 0 })
  }
  open(value, 0)
  while (stack.length > 0) {
    const frame = stack[stack.length - 1]!
    // The previous child is done (a scalar, or a container closed): its step leaves the path.
    if (frame.next > 0) path.pop()
    if (frame.next === lengthOf(frame.shape)) {
      stack.pop()
      ancestors.delete(frame.shape.container)
      leave(frame.shape)
      continue
    }
    const index = frame.next
    frame.next += 1
    if (frame.shape.kind === "array") {
      path.push(index)
      // An index read, not forEach: a hole in a sparse array must reach shapeOf as undefined.
      open(frame.shape.items[index], index)
    } else {
      const [key, item] = frame.shape.entries[index]!
      path.push(key)
      open(item, index)
    }
  }
}

const write = (value: unknown, out: Array<string>): void => {
  // The key of each object entry is written before its value; the stack of open objects gives it.
  const objects: Array<ReadonlyArray<readonly [string, unknown]> | undefined> = []
  walk(
    value,
    (current, shape, depth, index) => {
      const parent = objects[depth - 2]
      if (depth > 1) {
        if (index > 0) out.push(",")
        if (parent !== undefined) out.push(JSON.stringify(parent[index]![0]), ":")
      }
      if (shape.kind === "scalar") out.push(JSON.stringify(current))
      else {
        out.push(shape.kind === "array" ? "[" : "{")
        objects[depth - 1] = shape.kind === "object" ? shape.entries : undefined
      }
    },
    (shape) => out.push(shape.kind === "array" ? "]" : "}"),
  )
}

/** Canonical JSON text of `value`; throws `CanonicalJsonError` for anything that is not plain JSON. */
export const stringify = (value: unknown): string =>
  guarded(() => {
    const out: Array<string> = []
    write(value, out)
    return out.join("")
  })


/**
 * JSON size of `value`: `nodes` counts every value, containers included; `depth` is 1 for a scalar
 * or an empty container, and 1 + the deepest child for a non-empty container (so `{"a":[1]}` has
 * 3 nodes and depth 3). Refuses what `stringify` refuses, with the same error.
 */
export const measure = (value: unknown): { readonly nodes: number; readonly depth: number } =>
  guarded(() => {
    // A value's depth is the deepest level any value in it stands at (the root's 1).
    let nodes = 0
    let depth = 0
    walk(
      value,
      (_current, _shape, level) => {
        nodes += 1
        if (level > depth) depth = level
      },
      () => undefined,
    )
    return { nodes, depth }
  })
