/**
 * The in-place shape check of stored events (`Codec.hasRuntimeEventShape`, which lets
 * `Codec.decodeEventJson` keep the parsed value, docs/architecture.md §12) against the closed
 * decode it stands in for. Sound: whenever it says yes, the closed decode accepts the same value
 * and returns the same structure. Useful: it says yes to every generated event of every fact kind,
 * so the stored rows a read decodes take the fast path. Mutated values (a key dropped, a key added
 * at any depth, a value of another type, a string broken) are checked for soundness too, and
 * `decodeEventJson` gives the closed decode's verdict on each; a row of the right shape still meets the
 * fact's rules.
 */
import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Effect, Result, Schema } from "effect"
import { Canonical, Codec, Event, EventWrite, Fact, Prompt, Validation } from "@maka/facts"
import { compile } from "../src/internal/shape-guard.ts"

const closedEvent = Codec.decodeClosed(Event.RuntimeEvent)

/** A small seeded generator (mulberry32), so a failing case can be replayed. */
const generator = (seed: number) => {
  let state = seed | 0
  const next = () => {
    state = (state + 0x6d2b79f5) | 0
    let t = Math.imul(state ^ (state >>> 15), 1 | state)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return { int: (below: number) => Math.floor(next() * below) }
}

/** Every object and array inside `value` (itself included), with its parent path. */
const containers = (value: unknown, found: Array<Record<string, unknown> | Array<unknown>> = []) => {
  if (typeof value !== "object" || value === null) return found
  found.push(value as Record<string, unknown> | Array<unknown>)
  for (const inner of Object.values(value)) containers(inner, found)
  return found
}

const REPLACEMENTS: ReadonlyArray<unknown> = [null, 0, -0, -1, 1.5, "", "x", "\u0000", true, false, [], {}, [1], { a: 1 }]

/** One random change of a copy of `value`. */
const mutate = (value: unknown, random: ReturnType<typeof generator>): unknown => {
  const copy = JSON.parse(JSON.stringify(value)) as unknown
  const targets = containers(copy)
  const target = targets[random.int(targets.length)]!
  const keys = Object.keys(target)
  const mode = random.int(4)
  if (mode === 0 || keys.length === 0) {
    if (Array.isArray(target)) target.push(REPLACEMENTS[random.int(REPLACEMENTS.length)])
    else {
      // An own key, as JSON.parse makes it (an assignment to `__proto__` would set the prototype).
      const key = ["extra", "kind", "__proto__", "constructor", "toString"][random.int(5)]!
      Object.defineProperty(target, key, { value: REPLACEMENTS[random.int(REPLACEMENTS.length)], enumerable: true, writable: true, configurable: true })
    }
    return copy
  }
  const key = keys[random.int(keys.length)]!
  if (mode === 1) {
    if (Array.isArray(target)) target.splice(Number(key), 1)
    else delete target[key]
  } else if (mode === 2) {
    ;(target as Record<string, unknown>)[key] = REPLACEMENTS[random.int(REPLACEMENTS.length)]
  } else {
    const old = (target as Record<string, unknown>)[key]
    ;(target as Record<string, unknown>)[key] = typeof old === "string" ? `${old}\u0000` : typeof old === "number" ? old + 0.5 : String(old)
  }
  return copy
}

/** An observed local tool call whose input is `input`. */
const observed = (input: unknown) => ({
  id: "00000000-0000-4000-8000-000000000002",
  recordedAt: 1,
  invocation: { sessionId: "session-1", turnId: "turn-1", runId: "run-1", invocationId: "invocation-1" },
  fact: { kind: "model_observed", stepId: "step-1", event: { kind: "tool_call", id: "call-1", name: "noop", input, providerExecuted: false } },
})

/** The guard agrees with the closed decode wherever it says yes. */
const sound = (value: unknown): boolean => {
  if (!Codec.hasRuntimeEventShape(value)) return true
  const decoded = closedEvent(value)
  return Result.isSuccess(decoded) && Canonical.stringify(decoded.success) === Canonical.stringify(value)
}

/** What `EventWrite.plain` answers by the closed decode alone: its verdict (the rule) or the stored JSON. */
const plainByDecode = (value: unknown): string => {
  const event = value as Event.RuntimeEvent
  if (event.fact?.kind === "tool_settled" && event.fact.outcome?.kind === "succeeded") return "refused tool_success_requires_tool_write"
  const decoded = Codec.decodeEvent(value)
  if (Result.isFailure(decoded)) return `refused ${decoded.failure.rule}`
  const wellFormed = Validation.wellFormedEvent(decoded.success)
  if (Result.isFailure(wellFormed)) return `refused ${wellFormed.failure.rule}`
  const json = Codec.encodeEventChecked(decoded.success)
  return Result.isFailure(json) ? `refused ${json.failure.rule}` : json.success
}

const plainVerdict = (value: unknown): string => {
  const write = EventWrite.plain(value as Event.RuntimeEvent)
  if (Result.isFailure(write)) return `refused ${write.failure.rule}`
  // The write's event is the closed decode's, value for value (-0 included), not only its JSON.
  const decoded = Codec.decodeEvent(value)
  if (Result.isFailure(decoded) || !sameValue(write.success.event, decoded.success)) return "a different event"
  return write.success.json
}

/** Deep equality with `Object.is` on every leaf: -0 and 0 differ. */
const sameValue = (left: unknown, right: unknown): boolean => {
  if (typeof left !== "object" || left === null || typeof right !== "object" || right === null) return Object.is(left, right)
  if (Array.isArray(left) !== Array.isArray(right)) return false
  const keys = Object.keys(left)
  if (keys.length !== Object.keys(right).length) return false
  return keys.every((key) => Object.hasOwn(right, key) && sameValue((left as Record<string, unknown>)[key], (right as Record<string, unknown>)[key]))
}

/**
 * Over 300 values of `schema` (seed `seed`): `first` holds for each, then `agrees` for six mutations of
 * its canonical JSON's parse; fails the test with the first counterexample.
 */
const agreesWithMutations = <S extends Schema.Top>(
  schema: S,
  first: (value: S["Type"]) => boolean,
  agrees: (value: unknown) => boolean,
  random: ReturnType<typeof generator>,
  seed: number,
) =>
  Effect.gen(function* () {
    const result = yield* Arbitrary.checkEffect(
      Arbitrary.schema(schema),
      (value) => {
        if (!first(value)) return false
        const parsed = JSON.parse(Canonical.stringify(value)) as unknown
        for (let round = 0; round < 6; round++) if (!agrees(mutate(parsed, random))) return false
        return true
      },
      { runs: 300, seed },
    )
    assert.strictEqual(Arbitrary.formatCheckFailure(result), undefined)
  })

describe("the in-place shape check of stored events", () => {
  it.effect("says yes to every generated event, each of which the closed decode accepts unchanged", () =>
    Effect.gen(function* () {
      const result = yield* Arbitrary.checkEffect(
        Arbitrary.schema(Event.RuntimeEvent),
        (event) => {
          const parsed = JSON.parse(Canonical.stringify(event)) as unknown
          return Codec.hasRuntimeEventShape(parsed) && sound(parsed)
        },
        { runs: 400, seed: 5 },
      )
      assert.strictEqual(Arbitrary.formatCheckFailure(result), undefined)
    }),
  )

  it.effect("never says yes where the closed decode refuses, over mutated events", () =>
    Effect.gen(function* () {
      const random = generator(0x5a9e)
      let refused = 0
      let accepted = 0
      const result = yield* Arbitrary.checkEffect(
        Arbitrary.schema(Event.RuntimeEvent),
        (event) => {
          const parsed = JSON.parse(Canonical.stringify(event)) as unknown
          for (let round = 0; round < 8; round++) {
            const mutated = mutate(parsed, random)
            if (!sound(mutated)) return false
            if (Codec.hasRuntimeEventShape(mutated)) accepted++
            else if (Result.isFailure(closedEvent(mutated))) refused++
          }
          return true
        },
        { runs: 300, seed: 9 },
      )
      assert.strictEqual(Arbitrary.formatCheckFailure(result), undefined)
      // The mutations reach both verdicts: most break the shape, some (a changed free text) keep it.
      assert.isAbove(refused, 1_000)
      assert.isAbove(accepted, 10)
    }),
  )

  it.effect("EventWrite.plain, which checks the shape in place, answers as the closed decode does, over generated and mutated events", () =>
    Effect.gen(function* () {
      const random = generator(0x77e1)
      const verdicts = { written: 0, refused: 0 }
      const agrees = (value: unknown): boolean => {
        const expected = plainByDecode(value)
        if (plainVerdict(value) !== expected) return false
        verdicts[expected.startsWith("refused ") ? "refused" : "written"]++
        return true
      }
      // The decoded event itself first (not its parse): the writer meets the generated values as they are.
      yield* agreesWithMutations(Event.RuntimeEvent, (event) => agrees(event), agrees, random, 13)
      assert.isAbove(verdicts.written, 100)
      assert.isAbove(verdicts.refused, 1_000)
    }),
  )

  it.effect("Codec.checkFact, which checks the shape in place, gives decodeFact's verdict and message, over generated and mutated facts", () =>
    Effect.gen(function* () {
      const random = generator(0x4f2b)
      const invocation = { sessionId: "session-1", turnId: "turn-1", runId: "run-1", invocationId: "invocation-1" }
      const verdicts = { accepted: 0, refused: 0 }
      const verdictOf = (result: Result.Result<unknown, { readonly rule: string; readonly message: string }>) =>
        Result.isSuccess(result) ? "accepted" : `refused ${result.failure.rule}: ${result.failure.message}`
      const agrees = (value: unknown): boolean => {
        const expected = verdictOf(Codec.decodeFact(value, invocation))
        if (verdictOf(Codec.checkFact(value, invocation)) !== expected) return false
        verdicts[expected === "accepted" ? "accepted" : "refused"]++
        return true
      }
      yield* agreesWithMutations(Fact.Fact, (fact) => agrees(JSON.parse(Canonical.stringify(fact))), agrees, random, 17)
      // Both verdicts are reached, the accepted ones by the in-place path.
      assert.isAbove(verdicts.accepted, 50)
      assert.isAbove(verdicts.refused, 500)
    }),
  )

  it("keeps the parsed value of a stored event, and gives the closed decode's verdict and message otherwise", () => {
    const json = Canonical.stringify(observed({ path: "README.md" }))
    const decoded = Codec.decodeEventJson(json)
    assert.isTrue(Result.isSuccess(decoded) && Canonical.stringify(decoded.success) === json)
    const extra = json.replace('"recordedAt":1', '"extra":1,"recordedAt":1')
    const refused = Codec.decodeEventJson(extra)
    assert.isTrue(Result.isFailure(refused))
    const closed = closedEvent(JSON.parse(extra))
    assert.isTrue(Result.isFailure(closed))
    if (Result.isFailure(refused) && Result.isFailure(closed)) assert.strictEqual(refused.failure.message, closed.failure.message)
  })

  it("keeps the fact's rules on the in-place path: a row of the right shape that breaks one is refused", () => {
    const dispatched = (operationId: string) => ({
      id: "00000000-0000-4000-8000-000000000003",
      recordedAt: 1,
      invocation: { sessionId: "session-1", turnId: "turn-1", runId: "run-1", invocationId: "invocation-1" },
      fact: {
        kind: "tool_dispatched",
        operationId,
        call: { toolCallId: "call-1", origin: { kind: "provider", stepId: "step-1" } },
        name: "noop",
        input: {},
      },
    })
    // A provider call's operation id is its step's id and its call's id.
    assert.isTrue(Result.isSuccess(Codec.decodeEventJson(Canonical.stringify(dispatched("step-1:call-1")))))
    const broken = dispatched("step-2:call-1")
    assert.isTrue(Codec.hasRuntimeEventShape(JSON.parse(Canonical.stringify(broken))))
    const refused = Codec.decodeEventJson(Canonical.stringify(broken))
    assert.isTrue(Result.isFailure(refused))
    const closed = Codec.decodeEvent(JSON.parse(Canonical.stringify(broken)))
    if (Result.isFailure(refused) && Result.isFailure(closed)) assert.strictEqual(refused.failure.message, closed.failure.message)
    else assert.fail("the closed decode accepted a row that breaks a rule")
  })

  it("answers no, never throws, for nodes it does not compile and for values nested too deeply", () => {
    // A transformation: the decoder's output differs from its input, so no value is kept as parsed.
    const transformed = compile(Schema.NumberFromString.ast)
    assert.isFalse(transformed("1"))
    const tuple = compile(Schema.Tuple([Schema.String]).ast)
    assert.isFalse(tuple(["a"]))
    let deep: unknown = 1
    for (let depth = 0; depth < 200_000; depth++) deep = [deep]
    assert.isTrue(Codec.hasRuntimeEventShape(observed({ a: [1] })))
    assert.isFalse(Codec.hasRuntimeEventShape(observed({ a: deep })))
  })

  it("reads every property by its own name, whatever characters the name holds", () => {
    const names = ['a"b', "back\\slash", "line\nbreak", "sep\u2028arator", "", "constructor", "0"]
    const schema = Schema.Struct(Object.fromEntries(names.map((name) => [name, Schema.Literal(name)])))
    const guard = compile(schema.ast)
    const value = Object.fromEntries(names.map((name) => [name, name]))
    assert.isTrue(guard(value))
    for (const name of names) {
      const missing: Record<string, unknown> = { ...value }
      delete missing[name]
      assert.isFalse(guard(missing), `without ${JSON.stringify(name)}`)
      assert.isFalse(guard({ ...value, [name]: `${name}!` }), `another value of ${JSON.stringify(name)}`)
    }
  })

  it("counts only own keys: an inherited or undefined property is not a present one", () => {
    const schema = Schema.Struct({ kind: Schema.String, note: Schema.optionalKey(Schema.String) })
    const guard = compile(schema.ast)
    const decodes = (input: unknown) => Result.isSuccess(Codec.decodeClosed(schema)(input))
    assert.isTrue(guard({ kind: "a" }) && guard({ kind: "a", note: "b" }))
    // `kind` inherited, and an unknown own key: the count of own keys alone would match.
    const inherited = Object.assign(Object.create({ kind: "a" }) as object, { note: "b", extra: 1 })
    assert.isFalse(decodes(inherited))
    assert.isFalse(guard(inherited))
    // The same with the optional key inherited: counted as present, it would stand in for the extra key.
    const inheritedOptional = Object.assign(Object.create({ note: "b" }) as object, { kind: "a", extra: 1 })
    assert.isFalse(decodes(inheritedOptional))
    assert.isFalse(guard(inheritedOptional))
    // An optional key present with `undefined`: the closed decode refuses it.
    assert.isFalse(decodes({ kind: "a", note: undefined }))
    assert.isFalse(guard({ kind: "a", note: undefined }))
  })

  it("passes a string again without its checks only when that very string passed them last", () => {
    const schema = Schema.Struct({ id: Schema.String.check(Schema.isPattern(/^id-[0-9]+$/)), other: Schema.String.check(Schema.isMaxLength(3)) })
    const guard = compile(schema.ast)
    // A refused string stays refused when it comes again (it is never remembered as passing).
    assert.isFalse(guard({ id: "bad", other: "x" }))
    assert.isFalse(guard({ id: "bad", other: "x" }))
    assert.isTrue(guard({ id: "id-1", other: "x" }))
    assert.isTrue(guard({ id: "id-1", other: "y" }))
    // Another string after a remembered one is checked, and each property remembers its own strings.
    assert.isFalse(guard({ id: "id-x", other: "x" }))
    assert.isFalse(guard({ id: "id-1", other: "id-1" }))
    assert.isTrue(guard({ id: "id-1", other: "abc" }))
    assert.isFalse(guard({ id: "abc", other: "abc" }))
    // One checked node at two properties: each property remembers its own last string.
    const Id = Schema.String.check(Schema.isPattern(/^id-[0-9]+$/))
    const pair = compile(Schema.Struct({ a: Id, b: Id }).ast)
    assert.isTrue(pair({ a: "id-1", b: "id-2" }))
    assert.isFalse(pair({ a: "id-2", b: "id-x" }))
    assert.isFalse(pair({ a: "id-x", b: "id-2" }))
    assert.isTrue(pair({ a: "id-2", b: "id-2" }))
  })

  it("writes Effect's integer, range, length and pattern filters inline, each answering as the filter does at its edges", () => {
    const cases: ReadonlyArray<{ readonly schema: Schema.Codec<unknown>; readonly yes: ReadonlyArray<unknown>; readonly no: ReadonlyArray<unknown> }> = [
      { schema: Schema.Number.check(Schema.isInt()), yes: [0, -3, Number.MAX_SAFE_INTEGER], no: [1.5, Number.MAX_SAFE_INTEGER + 1, -0.5] },
      { schema: Schema.Number.check(Schema.isBetween({ minimum: 2, maximum: 5 })), yes: [2, 3.5, 5], no: [1.999, 5.001, -2] },
      {
        schema: Schema.Number.check(Schema.isBetween({ minimum: 2, maximum: 5, exclusiveMinimum: true, exclusiveMaximum: true })),
        yes: [2.5, 4.999],
        no: [2, 5],
      },
      { schema: Schema.String.check(Schema.isMinLength(2)), yes: ["ab", "abc"], no: ["", "a"] },
      { schema: Schema.String.check(Schema.isMaxLength(3)), yes: ["", "abc"], no: ["abcd"] },
      { schema: Schema.String.check(Schema.isPattern(/^[a-c]+$/i)), yes: ["abc", "ABC"], no: ["abd", ""] },
      // A sticky pattern keeps state between tests: the filter itself is called, with the same answers.
      { schema: Schema.String.check(Schema.isPattern(/[a-c]+$/y)), yes: ["abc", "abc"], no: ["xabc"] },
    ]
    for (const { schema, yes, no } of cases) {
      const guard = compile(schema.ast)
      const closed = Codec.decodeClosed(schema)
      for (const value of yes) {
        assert.isTrue(Result.isSuccess(closed(value)), `the filter accepts ${String(value)}`)
        assert.isTrue(guard(value), `the guard accepts ${String(value)}`)
      }
      for (const value of no) {
        assert.isTrue(Result.isFailure(closed(value)), `the filter refuses ${String(value)}`)
        assert.isFalse(guard(value), `the guard refuses ${String(value)}`)
      }
    }
    // The stored event's own fields at their edges: the guard refuses what the decoder refuses.
    const event = JSON.parse(JSON.stringify(observed({ path: "a" }))) as Record<string, unknown> & { fact: Record<string, unknown> }
    assert.isTrue(Codec.hasRuntimeEventShape(event))
    const edges: ReadonlyArray<[string, (copy: typeof event) => void]> = [
      ["an unsafe integer recordedAt", (copy) => void (copy.recordedAt = Number.MAX_SAFE_INTEGER + 1)],
      ["a negative recordedAt", (copy) => void (copy.recordedAt = -1)],
      ["an event id of another UUID version", (copy) => void (copy.id = "00000000-0000-1000-8000-000000000002")],
      ["an event id in capitals", (copy) => void (copy.id = "0000000A-0000-4000-8000-000000000002")],
      ["an empty step id", (copy) => void (copy.fact.stepId = "")],
      ["a step id over its length", (copy) => void (copy.fact.stepId = "s".repeat(513))],
    ]
    for (const [what, change] of edges) {
      const copy = JSON.parse(JSON.stringify(event)) as typeof event
      change(copy)
      assert.isTrue(Result.isFailure(closedEvent(copy)), `the closed decode refuses ${what}`)
      assert.isFalse(Codec.hasRuntimeEventShape(copy), `the guard refuses ${what}`)
    }
    const longest = JSON.parse(JSON.stringify(event)) as typeof event
    longest.fact.stepId = "s".repeat(512)
    assert.isTrue(Codec.hasRuntimeEventShape(longest))
  })

  it.effect("Codec.shapeGuard of prompt messages: yes to every generated message, never where the closed decode refuses", () =>
    Effect.gen(function* () {
      const hasShape = Codec.shapeGuard(Prompt.PromptMessage)
      const closedMessage = Codec.decodeClosed(Prompt.PromptMessage)
      const soundMessage = (value: unknown): boolean => {
        if (!hasShape(value)) return true
        const decoded = closedMessage(value)
        return Result.isSuccess(decoded) && Canonical.stringify(decoded.success) === Canonical.stringify(value)
      }
      const random = generator(0x3c1d)
      let refused = 0
      const result = yield* Arbitrary.checkEffect(
        Arbitrary.schema(Prompt.PromptMessage),
        (message) => {
          const parsed = JSON.parse(Canonical.stringify(message)) as unknown
          if (!hasShape(parsed) || !soundMessage(parsed)) return false
          for (let round = 0; round < 8; round++) {
            const mutated = mutate(parsed, random)
            if (!soundMessage(mutated)) return false
            if (!hasShape(mutated)) refused++
          }
          return true
        },
        { runs: 300, seed: 21 },
      )
      assert.strictEqual(Arbitrary.formatCheckFailure(result), undefined)
      assert.isAbove(refused, 500)
    }),
  )
})
