/**
 * The URL encodings a secret is scrubbed in (docs/model.md §4.3): as `encodeURIComponent` writes it,
 * as RFC 3986 and form encoding write it (`URLSearchParams`, Python's `quote_plus`: `!'()*~`
 * escaped too), with `+` for a space, and with lowercase hex.
 */
import { describe, expect, it } from "vitest"
import { formsOf, REDACTED, scrub } from "../src/internal/secrets.ts"

const KEY = "sk-Test!key(with)*odd~chars/and+plus=end 42"

describe("a secret echoed URL-encoded", () => {
  it.each([
    ["encodeURIComponent", encodeURIComponent(KEY)],
    ["URLSearchParams", new URLSearchParams([["api_key", KEY]]).toString().slice("api_key=".length)],
    ["lowercase hex", encodeURIComponent(KEY).replace(/%[0-9A-F]{2}/g, (hex) => hex.toLowerCase())],
    ["RFC 3986, lowercase hex", encodeURIComponent(KEY).replace(/[!'()*~]/g, (c) => `%${c.charCodeAt(0).toString(16)}`).replace(/%[0-9A-F]{2}/g, (hex) => hex.toLowerCase())],
  ])("is scrubbed as %s writes it", (_, encoded) => {
    expect(scrub(`denied for ?api_key=${encoded} (retry)`, formsOf([KEY]))).toBe(`denied for ?api_key=${REDACTED} (retry)`)
  })
})
