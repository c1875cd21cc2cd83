import { describe, expect, it } from "vitest"
import * as fc from "fast-check"
import * as Canonical from "../src/Canonical.ts"
import * as Digest from "../src/Digest.ts"
import * as Reference from "../src/internal/canonical-reference.ts"

/** `inputDigest` as it was defined before fragments: the tagged reference JSON of the whole request object. */
const referenceDigest = (request: {
  readonly prompt: unknown
  readonly tools: unknown
  readonly providerOptions: unknown
  readonly maxOutputTokens: number
}): string =>
  Digest.taggedBytes(
    Digest.DigestTag.modelInput,
    Reference.stringify({
      projection: Digest.MODEL_HISTORY_PROJECTION,
      prompt: request.prompt,
      tools: request.tools,
      providerOptions: request.providerOptions,
      maxOutputTokens: request.maxOutputTokens,
    }),
  )

const unit = fc.oneof(
  fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)),
  fc.constantFrom("\ud83d\ude00", "\ud800", "\n", '"', "é", "a"),
)
const text = fc.string({ unit, maxLength: 10 })
const json = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    fc.constant(null),
    fc.boolean(),
    fc.oneof(fc.double({ noNaN: true, noDefaultInfinity: true }), fc.constantFrom(-0, 1e21)),
    text,
    tie("array"),
    tie("object"),
  ),
  array: fc.array(tie("value"), { maxLength: 4 }),
  object: fc.dictionary(text, tie("value"), { maxKeys: 4 }),
})).value

const message = fc.oneof(
  fc.record({ role: fc.constant("user"), content: text }),
  fc.record({
    role: fc.constant("assistant"),
    parts: fc.array(fc.record({ kind: fc.constant("tool_call"), toolCallId: text, input: fc.dictionary(text, json, { maxKeys: 3 }) }), { maxLength: 3 }),
  }),
  fc.record({ role: fc.constant("tool"), results: fc.array(fc.record({ toolCallId: text, output: fc.record({ type: fc.constant("json"), value: json }) }), { maxLength: 2 }) }),
  json,
)
const request = fc.record({
  prompt: fc.array(message, { maxLength: 12 }),
  tools: fc.array(fc.record({ name: text, description: text, inputSchema: fc.dictionary(text, json, { maxKeys: 3 }) }), { maxLength: 3 }),
  providerOptions: fc.dictionary(text, json, { maxKeys: 3 }),
  maxOutputTokens: fc.oneof(fc.integer({ min: 1, max: 200_000 }), fc.constantFrom(-0, 1e21, 0.5)),
})

const refusal = (run: () => string): { readonly digest: string } | { readonly message: string; readonly path: ReadonlyArray<string | number> } => {
  try {
    return { digest: run() }
  } catch (error) {
    if (!(error instanceof Canonical.CanonicalJsonError)) throw error
    return { message: error.message, path: error.path }
  }
}

describe("Digest.modelInput from message fragments", () => {
  it("gives the digest of the whole request, with fresh, sealed and reused message objects alike", () => {
    fc.assert(
      fc.property(request, fc.array(fc.boolean(), { maxLength: 12 }), (input, sealing) => {
        const expected = referenceDigest(input)
        expect(Digest.modelInput(input)).toBe(expected)
        const sealedPrompt = input.prompt.map((item, index) => (sealing[index] === true ? Canonical.seal(item) : item))
        const sealed = { ...input, prompt: sealedPrompt, tools: Canonical.seal(input.tools) }
        expect(Digest.modelInput(sealed)).toBe(expected)
        // The same sealed objects again, one step later with one message more.
        const next = { ...sealed, prompt: [...sealedPrompt, { role: "user", content: "next" }] }
        expect(Digest.modelInput(next)).toBe(referenceDigest(next))
        expect(Digest.modelInput(sealed)).toBe(expected)
        const fresh = JSON.parse(JSON.stringify(input)) as typeof input
        expect(Digest.modelInput(fresh)).toBe(referenceDigest(fresh))
      }),
      { numRuns: 500 },
    )
  })

  it("extends a kept hash only over the same sealed messages: growing, interleaved, retried and edited prompts", () => {
    // Each operation acts on one of two prompts that grow step after step (as two sessions do).
    const operation = fc.oneof(
      fc.record({ kind: fc.constant("grow" as const), chain: fc.integer({ min: 0, max: 1 }), added: fc.array(message, { minLength: 1, maxLength: 3 }), sealed: fc.boolean() }),
      fc.record({ kind: fc.constant("retry" as const), chain: fc.integer({ min: 0, max: 1 }) }),
      fc.record({ kind: fc.constant("replace" as const), chain: fc.integer({ min: 0, max: 1 }), at: fc.nat(), by: message }),
      fc.record({ kind: fc.constant("mutate" as const), chain: fc.integer({ min: 0, max: 1 }), at: fc.nat() }),
      fc.record({ kind: fc.constant("edit" as const), chain: fc.integer({ min: 0, max: 1 }), at: fc.nat() }),
      fc.record({ kind: fc.constant("shorten" as const), chain: fc.integer({ min: 0, max: 1 }), by: fc.integer({ min: 1, max: 3 }) }),
      fc.record({ kind: fc.constant("budget" as const), chain: fc.integer({ min: 0, max: 1 }), maxOutputTokens: fc.integer({ min: 1, max: 9 }) }),
    )
    fc.assert(
      fc.property(fc.array(operation, { minLength: 1, maxLength: 30 }), (operations) => {
        const chains = [0, 1].map(() => ({ prompt: [Canonical.seal({ role: "system", content: "s" })] as Array<unknown>, maxOutputTokens: 100 }))
        for (const step of operations) {
          const chain = chains[step.chain]!
          switch (step.kind) {
            case "grow":
              chain.prompt.push(...step.added.map((item) => (step.sealed ? Canonical.seal(item) : item)))
              break
            case "replace":
              chain.prompt[step.at % chain.prompt.length] = Canonical.seal(step.by)
              break
            case "mutate": {
              // The caller's own array changes in place: the kept hash must not follow it.
              chain.prompt.splice(step.at % chain.prompt.length, 1, { role: "user", content: `changed ${step.at}` })
              break
            }
            case "edit": {
              // An unsealed message object changes in place: no hash may have been kept over it.
              const target = chain.prompt[step.at % chain.prompt.length]
              if (typeof target === "object" && target !== null && !Object.isFrozen(target)) (target as Record<string, unknown>)["edited"] = step.at
              break
            }
            case "shorten":
              chain.prompt.length = Math.max(1, chain.prompt.length - step.by)
              break
            case "budget":
              chain.maxOutputTokens = step.maxOutputTokens
              break
            case "retry":
              break
          }
          const input = { prompt: chain.prompt, tools: [], providerOptions: {}, maxOutputTokens: chain.maxOutputTokens }
          expect(Digest.modelInput(input)).toBe(referenceDigest(input))
        }
      }),
      { numRuns: 400 },
    )
  })

  it("refuses a request that is not plain JSON exactly as the whole request's canonical JSON does", () => {
    const base = { prompt: [{ role: "user", content: "hi" }], tools: [], providerOptions: {}, maxOutputTokens: 8_000 }
    const cases: ReadonlyArray<Parameters<typeof Digest.modelInput>[0]> = [
      { ...base, prompt: [Canonical.seal({ role: "user", content: "ok" }), { role: "user", content: undefined }] },
      { ...base, prompt: [1, , 3] },
      { ...base, prompt: "not an array" },
      { ...base, prompt: new (class List extends Array<unknown> {})() },
      { ...base, tools: [new Date(0)] },
      { ...base, providerOptions: undefined },
      { ...base, maxOutputTokens: Number.NaN },
    ]
    for (const input of cases) {
      const expected = refusal(() => referenceDigest(input))
      expect(refusal(() => Digest.modelInput(input))).toEqual(expected)
    }
    expect(refusal(() => Digest.modelInput(cases[0]!))).toMatchObject({ path: ["prompt", 1, "content"] })
  })

  it("keeps a sealed message's digest right: the sealed copy cannot change", () => {
    const original = { role: "tool", results: [{ toolCallId: "c1", output: { type: "json", value: { files: ["a.ts"] } } }] }
    const sealed = Canonical.seal(original)
    const input = { prompt: [sealed], tools: [], providerOptions: {}, maxOutputTokens: 100 }
    const before = Digest.modelInput(input)
    expect(() => {
      ;(sealed.results[0]!.output.value.files as Array<string>).push("b.ts")
    }).toThrow(TypeError)
    expect(() => {
      ;(sealed as { role: string }).role = "user"
    }).toThrow(TypeError)
    expect(Digest.modelInput(input)).toBe(before)
    expect(Digest.modelInput(input)).toBe(referenceDigest(input))
    // The caller's value stays its own and unfrozen; changing it changes only its own digest.
    original.results[0]!.output.value.files.push("c.ts")
    expect(Digest.modelInput({ ...input, prompt: [original] })).toBe(referenceDigest({ ...input, prompt: [original] }))
    expect(Digest.modelInput({ ...input, prompt: [original] })).not.toBe(before)
  })
})

describe("Canonical.seal", () => {
  it("returns a deep-frozen copy with the same canonical JSON, and leaves scalars and the original alone", () => {
    const value = { b: [1, { c: -0 }], a: "é" }
    const sealed = Canonical.seal(value)
    expect(sealed).not.toBe(value)
    expect(Object.isFrozen(value)).toBe(false)
    expect(Object.isFrozen(sealed) && Object.isFrozen(sealed.b) && Object.isFrozen(sealed.b[1])).toBe(true)
    expect(Canonical.stringify(sealed)).toBe(Reference.stringify(value))
    expect(Canonical.seal(sealed)).toBe(sealed)
    expect(Canonical.seal("text")).toBe("text")
    expect(() => Canonical.seal({ a: undefined })).toThrow(Canonical.CanonicalJsonError)
  })
})
