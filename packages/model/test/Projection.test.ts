import { assert, describe, it } from "@effect/vitest"
import type { Prompt } from "@maka/facts"
import { Canonical, Digest } from "@maka/facts"
import { Redacted } from "effect"
import { projectPrompt, ProviderConfig } from "@maka/model"

const ROUTE = ProviderConfig.routeIdentity({ kind: "anthropic", baseUrl: "https://api.anthropic.com", model: "claude" })
const OTHER = ProviderConfig.routeIdentity({ kind: "anthropic", baseUrl: "https://proxy.example", model: "claude" })

const signed = (route: string): Prompt.AssistantThinking => ({
  kind: "thinking",
  text: "signed",
  providerOptions: { anthropic: { signature: "sig" }, maka: { routeIdentity: route } },
})
const unsigned: Prompt.AssistantThinking = { kind: "thinking", text: "plain" }
const text: Prompt.AssistantText = { kind: "text", text: "answer" }

const prompt: Prompt.Prompt = [
  { role: "system", content: "a" },
  { role: "system", content: "b" },
  { role: "user", content: "q1" },
  { role: "assistant", parts: [signed(ROUTE), unsigned, text] },
  { role: "assistant", parts: [signed(OTHER)] },
  { role: "user", content: "q2" },
  { role: "user", content: "q3" },
  { role: "tool", results: [{ toolCallId: "c1", toolName: "t", output: { type: "text", value: "1" } }] },
  { role: "tool", results: [{ toolCallId: "c2", toolName: "t", output: { type: "text", value: "2" } }] },
]

describe("projectPrompt", () => {
  it("sends signed thinking only to the route that produced it, and merges same-role turns for Anthropic", () => {
    assert.deepStrictEqual(projectPrompt("anthropic", ROUTE, prompt), [
      { role: "system", content: "a\n\nb" },
      { role: "user", content: "q1" },
      { role: "assistant", parts: [signed(ROUTE), text] },
      { role: "user", content: "q2\n\nq3" },
      {
        role: "tool",
        results: [
          { toolCallId: "c1", toolName: "t", output: { type: "text", value: "1" } },
          { toolCallId: "c2", toolName: "t", output: { type: "text", value: "2" } },
        ],
      },
    ])
  })

  it("keeps unsigned thinking for OpenAI-compatible routes and merges nothing", () => {
    const route = ProviderConfig.routeIdentity({ kind: "openai-compatible", baseUrl: "http://localhost:8000/v1", model: "m" })
    const projected = projectPrompt("openai-compatible", route, prompt)
    assert.strictEqual(projected.length, prompt.length - 1)
    assert.deepStrictEqual(projected[3], { role: "assistant", parts: [unsigned, text] })
  })

  it("projects a sealed message for each route as its own, however often it was projected before", () => {
    // A sealed message's results are kept per route: another route's must never be handed out.
    const sealed = prompt.map((message) => Canonical.seal(message))
    const openAi = ProviderConfig.routeIdentity({ kind: "openai-compatible", baseUrl: "http://localhost:8000/v1", model: "m" })
    const cases = [
      ["anthropic", ROUTE],
      ["anthropic", OTHER],
      ["openai-compatible", openAi],
    ] as const
    for (let round = 0; round < 2; round++) {
      for (const [kind, route] of cases) assert.deepStrictEqual(projectPrompt(kind, route, sealed), projectPrompt(kind, route, prompt))
    }
    // A message projected unchanged goes on as itself; a filtered one is the same object each time.
    const once = projectPrompt("openai-compatible", openAi, sealed)
    const again = projectPrompt("openai-compatible", openAi, sealed)
    assert.strictEqual(again[3], once[3])
    assert.deepStrictEqual(once[3], { role: "assistant", parts: [unsigned, text] })
    assert.strictEqual(again[4], sealed[5])
  })

  it("hands a prompt it projected back as itself for the same route, and projects it anew for another", () => {
    const once = projectPrompt("anthropic", ROUTE, prompt)
    assert.isTrue(Object.isFrozen(once))
    assert.strictEqual(projectPrompt("anthropic", ROUTE, once), once)
    // The signed thinking ROUTE produced goes to ROUTE only: projected for OTHER, it is dropped.
    const other = projectPrompt("anthropic", OTHER, once)
    assert.notStrictEqual(other, once)
    assert.deepStrictEqual(other[2], { role: "assistant", parts: [text] })
  })

  it("is idempotent and leaves its input alone", () => {
    const copy = structuredClone(prompt)
    const once = projectPrompt("anthropic", ROUTE, prompt)
    assert.deepStrictEqual(projectPrompt("anthropic", ROUTE, once), once)
    assert.deepStrictEqual(prompt, copy)
  })
})

describe("routeIdentity", () => {
  const base = { kind: "openai-compatible" as const, baseUrl: "https://api.example.com/v1", model: "gpt" }

  it("is the route digest of the secret-free configuration, trailing slashes removed", () => {
    assert.strictEqual(ProviderConfig.routeIdentity(base), Digest.route({ kind: base.kind, baseUrl: base.baseUrl, model: "gpt" }))
    assert.strictEqual(ProviderConfig.routeIdentity({ ...base, baseUrl: "https://api.example.com/v1///" }), ProviderConfig.routeIdentity(base))
  })

  it("omits absent headers (never {}) and keeps only the name of a Redacted header", () => {
    assert.notStrictEqual(ProviderConfig.routeIdentity({ ...base, headers: {} }), ProviderConfig.routeIdentity(base))
    assert.deepStrictEqual(ProviderConfig.routeShape({ ...base, headers: { "X-Team": "a", "X-Key": Redacted.make("secret") } }), {
      ...base,
      headers: { "x-team": "a", "x-key": null },
    })
    assert.strictEqual(
      ProviderConfig.routeIdentity({ ...base, headers: { "x-key": Redacted.make("one") } }),
      ProviderConfig.routeIdentity({ ...base, headers: { "x-key": Redacted.make("two") } }),
    )
  })

  it("never depends on the API key or fetch", () => {
    const withSecrets: ProviderConfig.ProviderConfig = { ...base, apiKey: Redacted.make("sk-1"), fetch: (input, init) => fetch(input, init) }
    const otherKey: ProviderConfig.ProviderConfig = { ...withSecrets, apiKey: Redacted.make("sk-2") }
    assert.strictEqual(ProviderConfig.routeIdentity(withSecrets), ProviderConfig.routeIdentity(otherKey))
    assert.strictEqual(ProviderConfig.routeIdentity(withSecrets), ProviderConfig.routeIdentity(base))
  })

  it("changes with the kind, the model and the base URL", () => {
    const identities = new Set([
      ProviderConfig.routeIdentity(base),
      ProviderConfig.routeIdentity({ ...base, kind: "anthropic" }),
      ProviderConfig.routeIdentity({ ...base, model: "gpt-2" }),
      ProviderConfig.routeIdentity({ ...base, baseUrl: "https://api.example.com/v2" }),
    ])
    assert.strictEqual(identities.size, 4)
  })
})
