/**
 * The URL encodings a secret is scrubbed from a tool's output in (docs/tools.md): as
 * `encodeURIComponent` writes it, as form encoding writes it (`URLSearchParams`, Python's
 * `quote_plus`: `!'()*~` escaped too), and with lowercase hex.
 */
import { Redacted } from "effect"
import { describe, expect, it } from "vitest"
import { REDACTED, scrub } from "../src/internal/secrets.ts"

const KEY = "sk-Test!key(with)*odd~chars/and+plus=end 42"

describe("a secret a tool's output carries URL-encoded", () => {
  it.each([
    ["encodeURIComponent", encodeURIComponent(KEY)],
    ["URLSearchParams", new URLSearchParams([["api_key", KEY]]).toString().slice("api_key=".length)],
    ["lowercase hex", encodeURIComponent(KEY).replace(/%[0-9A-F]{2}/g, (hex) => hex.toLowerCase())],
  ])("is scrubbed as %s writes it", (_, encoded) => {
    expect(scrub(`GET /v1?api_key=${encoded} HTTP/1.1`, [Redacted.make(KEY)])).toBe(`GET /v1?api_key=${REDACTED} HTTP/1.1`)
  })
})
