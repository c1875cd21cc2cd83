import { ProviderConfig } from "@maka/model"
import { describe, expect, it } from "vitest"
import * as Configuration from "../src/Configuration.ts"
import { CLI_SYSTEM_PROMPT } from "../src/index.ts"

describe("the CLI's configuration", () => {
  it("exports CLI_SYSTEM_PROMPT from @maka/cli", () => {
    expect(CLI_SYSTEM_PROMPT).toBe(Configuration.CLI_SYSTEM_PROMPT)
    expect(CLI_SYSTEM_PROMPT.length).toBeGreaterThan(20)
  })

  it.each(["http://x/v1", "http://x/v1/", "http://x/v1///", "https://api.example.com"])(
    "normalises %s as the model package does",
    (url) => expect(Configuration.normalizeBaseUrl(url)).toBe(ProviderConfig.normalizeBaseUrl(url)),
  )

  it("names the connection <provider>:<normalised base URL> with the provider as slug", () => {
    expect(Configuration.connectionOf("anthropic", "https://api.anthropic.com/v1/")).toEqual({
      id: "anthropic:https://api.anthropic.com/v1",
      slug: "anthropic",
    })
  })

  it("writes the context with absent flags as absent fields", () => {
    expect(Configuration.contextOf("offline", {})).toEqual({ providerId: "offline" })
    expect(Configuration.contextOf("openai-compatible", { contextWindow: 1000, declaredWindow: 800 })).toEqual({
      providerId: "openai-compatible",
      contextWindow: 1000,
      modelContextWindow: 1000,
      declaredWindow: 800,
    })
  })
})
