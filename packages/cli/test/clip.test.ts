import { describe, expect, it } from "vitest"
import { clip, oneLine } from "../src/internal/clip.ts"

describe("clip", () => {
  it("cuts to max units with … last, never between the halves of a surrogate pair", () => {
    expect(clip("abcdef", 6)).toBe("abcdef")
    expect(clip("abcdefg", 6)).toBe("abcde…")
    // The fifth and sixth units are one emoji: the cut goes before it, not through it.
    const cut = clip("abcd\u{1F600}xyz", 6)
    expect(cut).toBe("abcd…")
    expect(/\p{Cs}/u.test(cut)).toBe(false)
    expect(clip("abc\u{1F600}xyz", 6)).toBe("abc\u{1F600}…")
  })

  it("puts text on one line first", () => {
    expect(oneLine("  a\n\tb   c ", 10)).toBe("a b c")
    expect(oneLine("a\n\n\u{1F600}\u{1F600}\u{1F600}", 5)).toBe("a \u{1F600}…")
  })
})
