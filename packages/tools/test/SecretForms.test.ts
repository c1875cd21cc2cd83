/**
 * The URL encodings a secret is scrubbed from a tool's output in (docs/tools.md): as
 * `encodeURIComponent` writes it, as form encoding writes it (`URLSearchParams`, Python's
 * `quote_plus`: `!'()*~` escaped too), and with lowercase hex.
 */
import { Redacted } from "effect"
import { describe, expect, it } from "vitest"
import { REDACTED, scrub, scrubOutput } from "../src/internal/secrets.ts"

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

describe("an authorization value given as a secret (Bearer TOKEN)", () => {
  it("is scrubbed with its scheme and as its token alone, which a tool's output shows without the scheme", () => {
    const token = "tok-ZZZZ9999YYYY8888XXXX"
    const secrets = [Redacted.make(`Bearer ${token}`)]
    expect(scrub(`Authorization: Bearer ${token}`, secrets)).toBe(`Authorization: ${REDACTED}`)
    expect(scrub(`token=${token};`, secrets)).toBe(`token=${REDACTED};`)
    // What a cut left of the token's start, as of any secret's.
    expect(scrub("head tok-ZZZZ9999YYYY", secrets)).not.toContain("tok-ZZZZ9999")
    // A short word after a scheme is no credential of its own: ordinary text keeps it.
    expect(scrub("abc1234 is a word", [Redacted.make("Token abc1234")])).toBe("abc1234 is a word")
  })

  it("leaves the public header another JSON Web Token shares, and scrubs the token and its signature", () => {
    const header = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    const token = `${header}.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U`
    const other = `${header}.eyJzdWIiOiJvdGhlciJ9.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c`
    const secrets = [Redacted.make(`Bearer ${token}`)]
    expect(scrub(`mine ${token}; another ${other}`, secrets)).toBe(`mine ${REDACTED}; another ${other}`)
    expect(scrub(`cut …${token.slice(-20)}`, secrets)).toBe(`cut …${REDACTED}`)
    // Another token after the scheme keeps its header and all after it.
    expect(scrub(`Authorization: Bearer ${other}`, secrets)).toBe(`Authorization: Bearer ${other}`)
    // A piece of the token's start that runs past its header is scrubbed, as any secret's is, the
    // token alone given or after its scheme.
    for (const given of [token, `Bearer ${token}`]) {
      expect(scrub(`TOKEN=${token.slice(0, -10)}`, [Redacted.make(given)])).toBe(`TOKEN=${REDACTED}`)
    }
  })

  it("gives a placeholder credential (Bearer undefined) no forms: it holds no secret, and its word stays", () => {
    expect(scrub("the value is undefined here", [Redacted.make("Bearer undefined")])).toBe("the value is undefined here")
    expect(scrub("Bearer undefined", [Redacted.make("Bearer undefined")])).toBe("Bearer undefined")
  })
})

describe("a secret holding a quote or a backslash, JSON-escaped inside a JSON output's string", () => {
  it("is scrubbed whole, as in a text output (a command that printed json.dumps of it)", () => {
    const key = 'sk-te"st\\Ab+c/d=ef 0123456789XYZ'
    const printed = `${JSON.stringify(key)}\n`
    expect(scrubOutput({ format: "text", value: printed }, [Redacted.make(key)])).toEqual({ format: "text", value: `"${REDACTED}"\n` })
    expect(scrubOutput({ format: "json", value: { stdout: printed } }, [Redacted.make(key)])).toEqual({
      format: "json",
      value: { stdout: `"${REDACTED}"\n` },
    })
  })
})
