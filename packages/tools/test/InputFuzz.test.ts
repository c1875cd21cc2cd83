/**
 * Tool input at the boundary, fuzzed: valid arguments of each tool's schema (the builtins, a nested
 * Effect Schema, a zod schema), mutated as JSON text and as values (wrong types, missing and extra
 * keys, deep nesting, huge strings, lone surrogates, `__proto__`). Preparation commits nothing and
 * ends `Prepared` (the decoded input is the schema's) or `Refused` `invalid_input`, never a defect;
 * the rejection commits exactly one `tool_rejected` holding the input as sent, or fails `ToolError`
 * `InvalidWrite` with nothing committed. `MAKA_FUZZ_INPUTS` sets the inputs (default 2,000; long
 * setting 100,000), `MAKA_FUZZ_SEED` the seed; a failure names the seed and the case.
 */
import { assert, describe, it } from "vitest"
import type { Identity } from "@maka/facts"
import { FactBuilders } from "@maka/testkit"
import { Builtins, Journal, Tool, ToolCatalog, ToolError } from "@maka/tools"
import { RecordingSink, TestIds } from "@maka/tools/testing"
import { Cause, Effect, Exit, Layer, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { z } from "zod"

const INPUTS = Number(process.env["MAKA_FUZZ_INPUTS"] ?? 2_000)
const SEED = Number(process.env["MAKA_FUZZ_SEED"] ?? 0x700_15)
/** Ten minutes, or 30 ms per input at a long setting. */
const TIMEOUT_MS = Math.max(600_000, INPUTS * 30)

/** A small seeded generator (mulberry32), so a failing case can be replayed. */
const generator = (seed: number) => {
  let state = seed | 0
  const next = () => {
    state = (state + 0x6d2b79f5) | 0
    let t = Math.imul(state ^ (state >>> 15), 1 | state)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const int = (below: number) => Math.floor(next() * below)
  const pick = <A>(values: ReadonlyArray<A>): A => values[int(values.length)]!
  const chance = (p: number) => next() < p
  return { next, int, pick, chance }
}
type Random = ReturnType<typeof generator>

// ---------------------------------------------------------------------------------------------
// The tools: the builtins (never run here) and two pure tools whose execute returns what it received.

const Nested = Schema.Struct({
  title: Schema.String.check(Schema.isMinLength(1)),
  tags: Schema.Array(Schema.Literals(["a", "b", "c"])),
  limits: Schema.Struct({ low: Schema.Int, high: Schema.optionalKey(Schema.Number) }),
  mode: Schema.Union([Schema.Literal("fast"), Schema.Struct({ custom: Schema.Boolean })]),
  extra: Schema.optionalKey(Schema.Record(Schema.String, Schema.NullOr(Schema.String))),
})

const ZodInput = z.object({
  query: z.string().min(1).max(200),
  count: z.number().int().min(1).max(50).optional(),
  filters: z.array(z.object({ field: z.string(), value: z.union([z.string(), z.number()]) })).optional(),
})

/** The pure tools hand back what `execute` received, so the test can check it against the schema. */
const received: Array<unknown> = []
const echo = (input: unknown) => Effect.sync(() => (received.push(input), Tool.text("ok")))

const root = fs.mkdtempSync(path.join(os.tmpdir(), "maka-tool-fuzz-"))
const workspace = { root }

const tools = [
  Builtins.readFile(workspace),
  Builtins.listFiles(workspace),
  Builtins.searchText(workspace),
  Builtins.writeFile(workspace),
  Builtins.runCommand(workspace),
  Tool.make({ name: "nested", description: "Nested input.", input: Nested, semantics: "parallel", execute: echo }),
  Tool.make({ name: "zod_query", description: "A zod input.", input: ZodInput, semantics: "parallel", execute: echo }),
]
const captured = ToolCatalog.make(tools).capture()

/** A valid input per tool: the start of every mutation. */
const VALID: Readonly<Record<string, Identity.JsonObject>> = {
  read_file: { path: "README.md", offset: 1, limit: 20 },
  list_files: { path: "." },
  search_text: { pattern: "TODO", path: "src", maxResults: 10 },
  write_file: { path: "notes.txt", content: "hello" },
  run_command: { command: "ls", timeoutSeconds: 5 },
  nested: { title: "t", tags: ["a", "b"], limits: { low: 1, high: 2.5 }, mode: { custom: true }, extra: { k: null } },
  zod_query: { query: "maka", count: 3, filters: [{ field: "kind", value: 2 }] },
}

/** The schemas the pure tools' decoded inputs must satisfy. */
const isNested = Schema.is(Nested)
const isZodQuery = (value: unknown) => ZodInput.safeParse(value).success

// ---------------------------------------------------------------------------------------------
// Generators

const strangeStrings = ["", " ", "\u0000", "\ud800", "\udfff", "😀", "../../etc/passwd", "/abs", "a\nb", "__proto__", "constructor", "%00", "\u202e"]

/** Deep nesting (arrays or objects), built without recursion. */
const nested = (random: Random, depth: number): Identity.Json => {
  const isArray = random.chance(0.5)
  let value: Identity.Json = random.pick([1, "x", null, {}])
  for (let level = 0; level < depth; level++) value = isArray ? [value] : { a: value }
  return value
}

const wrongValue = (random: Random, depth = 0): Identity.Json => {
  switch (random.int(depth > 2 ? 9 : 11)) {
    case 0:
      return null
    case 1:
      return random.pick([0, -1, 1.5, 2 ** 53, -(2 ** 60), 1e308, Number.MAX_SAFE_INTEGER, 51, 2_000_000_000])
    case 2:
      return random.pick(strangeStrings)
    case 3:
      return random.chance(0.5)
    case 4:
      return "x".repeat(random.int(random.chance(0.05) ? 1_200_000 : 5_000))
    case 5:
      return random.pick(["fast", "a", "d", "custom", "1", "true"])
    case 6:
      // Deep, but within what the test's own deep comparisons walk on any stack; deeper than a fact
      // may hold is the deterministic 5,000-level test below.
      return nested(random, 1 + random.int(random.chance(0.2) ? 1_000 : 40))
    case 7:
      return random.int(5)
    case 8:
      return {}
    case 9:
      return [wrongValue(random, depth + 1), wrongValue(random, depth + 1)]
    default: {
      const object: Record<string, Identity.Json> = {}
      setOwn(object, random.pick(["custom", "field", "value", "low", "path", "__proto__"]), wrongValue(random, depth + 1))
      return object
    }
  }
}

/** Every path in a JSON value (objects and arrays), for mutations. */
const pathsOf = (value: unknown): Array<Array<string | number>> => {
  const paths: Array<Array<string | number>> = []
  const stack: Array<[unknown, Array<string | number>]> = [[value, []]]
  while (stack.length > 0 && paths.length < 200) {
    const [current, at] = stack.pop()!
    if (typeof current !== "object" || current === null) continue
    const keys: Array<string | number> = Array.isArray(current) ? Array.from({ length: current.length }, (_, index) => index) : Object.keys(current)
    for (const key of keys) {
      paths.push([...at, key])
      stack.push([Reflect.get(current, key), [...at, key]])
    }
  }
  return paths
}

/** Sets an own property, as `JSON.parse` does (a `__proto__` key stays a key, never the prototype). */
const setOwn = (target: object, key: string | number, value: unknown): void => {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true })
}

/** A value mutation: a key dropped, retyped or added, an array grown, the whole input replaced. */
const mutateValue = (random: Random, input: Identity.JsonObject): unknown => {
  if (random.chance(0.05)) return wrongValue(random)
  const copy: unknown = structuredClone(input)
  for (let round = 1 + random.int(3); round > 0; round--) {
    const paths = pathsOf(copy)
    const at = paths.length === 0 ? undefined : random.pick(paths)
    let parent: unknown = copy
    for (const key of at?.slice(0, -1) ?? []) parent = typeof parent === "object" && parent !== null ? Reflect.get(parent, key) : undefined
    if (typeof parent !== "object" || parent === null) continue
    const key = at?.[at.length - 1] ?? "extra"
    switch (random.int(6)) {
      case 0:
        if (Array.isArray(parent) && typeof key === "number") parent.splice(key, 1)
        else Reflect.deleteProperty(parent, key)
        break
      case 1:
        // A key only objects can have: on an array, an element is added instead.
        if (Array.isArray(parent)) parent.push(wrongValue(random))
        else setOwn(parent, random.pick(["unknown", "__proto__", "constructor", "toString", "PATH", ""]), wrongValue(random))
        break
      case 2:
        if (Array.isArray(parent)) parent.push(wrongValue(random))
        else setOwn(parent, key, [Reflect.get(parent, key)])
        break
      default:
        setOwn(parent, key, wrongValue(random))
    }
  }
  return copy
}

/** A text mutation of the arguments as the model sends them: only text that still parses is kept. */
const mutateText = (random: Random, input: Identity.JsonObject): unknown => {
  let text = JSON.stringify(input)
  for (let round = 1 + random.int(3); round > 0; round--) {
    const at = random.int(text.length + 1)
    text = random.pick([
      () => text.slice(0, at) + text.slice(at + 1),
      () => text.slice(0, at) + random.pick(["{", "}", "[", "]", ",", ":", "\"", "0", "-", "e9", "null", "\\u0000", "\\ud800"]) + text.slice(at),
      () => text.replace(/"[a-zA-Z]+":/, `"__proto__":`),
      () => text.replace(/\d+/, random.pick(["1e400", "-0", "0.0000001", "12345678901234567890", "1.0"])),
      () => text.replace(/"[^"]*"/, JSON.stringify(random.pick(strangeStrings))),
    ])()
  }
  try {
    return JSON.parse(text)
  } catch {
    return mutateValue(random, input)
  }
}

// ---------------------------------------------------------------------------------------------
// The check

const invocation = FactBuilders.invocation()

const defectOf = (exit: Exit.Exit<unknown, unknown>): string | undefined =>
  Exit.isFailure(exit) && Cause.hasDies(exit.cause) ? Cause.pretty(exit.cause).slice(0, 2_000) : undefined

/** An object holding arrays nested `depth` deep. */
const deep = (depth: number): Identity.JsonObject => {
  let value: Identity.Json = 1
  for (let level = 0; level < depth; level++) value = [value]
  return { path: value }
}

describe("tool input fuzz", () => {
  it("refuses input nested 5,000 deep as invalid_input, and its rejection as InvalidWrite with nothing committed", async () => {
    const request = Journal.providerCall("step-1", { id: "call-deep", name: "read_file", input: deep(5_000) })
    const program = Effect.gen(function* () {
      const recording = yield* RecordingSink.RecordingSink
      const prepared = yield* Journal.prepare(captured, request)
      assert.strictEqual(prepared._tag, "Refused")
      if (prepared._tag !== "Refused") return
      assert.strictEqual(prepared.reason.kind, "invalid_input")
      const exit = yield* Effect.exit(Journal.reject(invocation, request, prepared.reason))
      assert.strictEqual(defectOf(exit), undefined)
      const error = Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : undefined
      assert.strictEqual(error?._tag === "Some" && error.value instanceof ToolError.ToolError ? error.value.reason._tag : undefined, "InvalidWrite")
      assert.strictEqual((yield* recording.records).length, 0)
    })
    await Effect.runPromise(program.pipe(Effect.provide(Layer.merge(RecordingSink.layer(), TestIds.layer()))))
  })

  it("prepares every fuzzed input as Prepared or Refused invalid_input, committing nothing; a rejection commits one fact or none", async () => {
    const counts = { prepared: 0, refused: 0, rejectedWritten: 0, rejectedRefused: 0 }
    // Cases in batches, each with a fresh sink, so the recorded writes stay few at any setting.
    const batch = (from: number, to: number) => Effect.gen(function* () {
      const recording = yield* RecordingSink.RecordingSink
      for (let index = from; index < to; index++) {
        const seed = SEED + index
        const random = generator(seed)
        const tool = random.pick(tools)
        const label = `seed ${seed} (MAKA_FUZZ_SEED=${SEED} case ${index}), tool ${tool.name}`
        const mutated = random.chance(0.5) ? mutateText(random, VALID[tool.name]!) : mutateValue(random, VALID[tool.name]!)
        // What reaches the journal is JSON (the model's `tool_call` input); a value that is not is cut to JSON.
        const input = mutated as Identity.Json
        const request = Journal.providerCall("step-1", { id: `call-${index}`, name: tool.name, input })
        const callsBefore = yield* recording.commitCalls
        const preparedExit = yield* Effect.exit(Journal.prepare(captured, request))
        assert.strictEqual(defectOf(preparedExit), undefined, `${label}: preparation died`)
        assert.isTrue(Exit.isSuccess(preparedExit), label)
        const prepared = Exit.isSuccess(preparedExit) ? preparedExit.value : undefined
        assert.strictEqual(yield* recording.commitCalls, callsBefore, `${label}: preparation committed`)
        if (prepared?._tag === "Prepared") {
          counts.prepared++
          assert.isTrue(typeof input === "object" && input !== null && !Array.isArray(input), `${label}: a non-object was prepared`)
          if (tool.name === "nested" || tool.name === "zod_query") {
            received.length = 0
            const execution = prepared.runner({ signal: new AbortController().signal })
            if (Effect.isEffect(execution)) yield* execution
            assert.strictEqual(received.length, 1, label)
            const decoded = received[0]
            assert.isTrue(tool.name === "nested" ? isNested(decoded) : isZodQuery(decoded), `${label}: decoded input outside its schema`)
          }
          continue
        }
        counts.refused++
        assert.strictEqual(prepared?.reason.kind, "invalid_input", `${label}: ${JSON.stringify(prepared?.reason).slice(0, 300)}`)
        const message = prepared?.reason.kind === "invalid_input" ? prepared.reason.message : ""
        assert.isTrue(message.startsWith(`Invalid input for tool "${tool.name}": `), `${label}: ${message.slice(0, 200)}`)
        // The write path: the rejection is one durable fact holding the input as sent, or nothing.
        const recordsBefore = (yield* recording.records).length
        const rejectExit = yield* Effect.exit(Journal.reject(invocation, request, prepared!.reason))
        assert.strictEqual(defectOf(rejectExit), undefined, `${label}: the rejection died`)
        const records = yield* recording.records
        if (Exit.isSuccess(rejectExit)) {
          counts.rejectedWritten++
          assert.strictEqual(records.length, recordsBefore + 1, label)
          const fact = records[records.length - 1]!.write.event.fact
          assert.strictEqual(fact.kind, "tool_rejected", label)
          if (fact.kind === "tool_rejected") assert.deepStrictEqual(fact.input, input, label)
        } else {
          counts.rejectedRefused++
          const error = Cause.findErrorOption(rejectExit.cause)
          assert.isTrue(error._tag === "Some" && error.value instanceof ToolError.ToolError, `${label}: untyped ${Cause.pretty(rejectExit.cause).slice(0, 500)}`)
          if (error._tag === "Some") assert.strictEqual(error.value.reason._tag, "InvalidWrite", label)
          assert.strictEqual(records.length, recordsBefore, `${label}: a refused rejection wrote`)
        }
      }
    })
    for (let from = 0; from < INPUTS; from += 500) {
      await Effect.runPromise(batch(from, Math.min(INPUTS, from + 500)).pipe(Effect.provide(Layer.merge(RecordingSink.layer(), TestIds.layer()))))
    }
    fs.rmSync(root, { recursive: true, force: true })
    // Both ends are reached, and some rejections cannot be written (oversized or ill-formed input).
    assert.isAbove(counts.prepared, INPUTS / 50, JSON.stringify(counts))
    assert.isAbove(counts.refused, INPUTS / 4, JSON.stringify(counts))
    assert.isAbove(counts.rejectedRefused, 0, JSON.stringify(counts))
  }, TIMEOUT_MS)
})
