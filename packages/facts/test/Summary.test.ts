import { Result, Schema } from "effect"
import { assert, describe, it } from "@effect/vitest"
import {
  fromModelStep,
  isRepairable,
  REQUIRED_SECTIONS,
  SUMMARY_FORMAT,
  SUMMARY_FORMAT_TEMPLATE,
  SummaryDefect,
  type SummarySourceStep,
  validateSummary,
} from "../src/Summary.ts"

const VALID = [
  "## Goal",
  "Fix the flaky login test in packages/auth.",
  "",
  "## Progress",
  "### Done",
  "- Reproduced the failure with `pnpm vitest run auth`.",
  "### In Progress",
  "- Patching the retry helper.",
  "",
  "## Next Steps",
  "1. Run the auth suite again.",
  "",
  "## Critical Context",
  "- The failure is `ECONNRESET` from the mock server.",
].join("\n")

const sections = (goal: string, progress: string, nextSteps: string, criticalContext: string): string =>
  ["## Goal", goal, "", "## Progress", progress, "", "## Next Steps", nextSteps, "", "## Critical Context", criticalContext].join(
    "\n",
  )

const assertAccepted = (text: string, expected: string = text.trim()): void => {
  const result = validateSummary(text)
  assert.deepStrictEqual(result, Result.succeed(expected))
}

const assertDefect = (text: string, defect: SummaryDefect, usage?: { inputTokens?: number; outputTokens?: number }): void => {
  assert.deepStrictEqual(validateSummary(text, usage), Result.fail(defect))
}

describe("SUMMARY_FORMAT_TEMPLATE", () => {
  it("reproduces the template of docs/log-format.md §2.5 exactly", () => {
    const fromSpecification: unknown = JSON.parse(
      String.raw`"## Goal\n[What the user is trying to accomplish]\n\n## Progress\n### Done\n- [Completed work and changes]\n### In Progress\n- [Current work]\n\n## Key Decisions\n- **[Decision]**: [Brief rationale]\n\n## Next Steps\n1. [Ordered list of what should happen next]\n\n## Critical Context\n- [Files, commands/results, errors, anything needed to continue; or \"(none)\"]"`,
    )
    assert.strictEqual(SUMMARY_FORMAT_TEMPLATE, fromSpecification)
    assert.strictEqual(SUMMARY_FORMAT, "sections_v1")
    assert.deepStrictEqual(REQUIRED_SECTIONS, ["## Goal", "## Progress", "## Next Steps", "## Critical Context"])
  })

  it("is rejected as a summary, because template lines are never content", () => {
    assertDefect(SUMMARY_FORMAT_TEMPLATE, "malformed_summary_missing_section")
  })
})

describe("SummaryDefect", () => {
  it("decodes the seven defect strings and nothing else", () => {
    const isDefect = Schema.is(SummaryDefect)
    for (const defect of [
      "empty_summary",
      "summary_too_large",
      "malformed_summary_missing_section",
      "malformed_summary_truncated",
      "malformed_summary_too_small_for_fold",
      "summary_contains_tool_content",
      "summary_has_invalid_finish_reason",
    ]) {
      assert.isTrue(isDefect(defect), defect)
    }
    assert.isFalse(isDefect("malformed_summary"))
  })

  it("marks only the malformed defects repairable", () => {
    assert.isTrue(isRepairable("malformed_summary_missing_section"))
    assert.isTrue(isRepairable("malformed_summary_truncated"))
    assert.isTrue(isRepairable("malformed_summary_too_small_for_fold"))
    assert.isFalse(isRepairable("empty_summary"))
    assert.isFalse(isRepairable("summary_too_large"))
    assert.isFalse(isRepairable("summary_contains_tool_content"))
    assert.isFalse(isRepairable("summary_has_invalid_finish_reason"))
  })
})

describe("validateSummary", () => {
  describe("accepts", () => {
    it("a summary with every required section and returns it trimmed", () => {
      assertAccepted(`\n  ${VALID}\n\n`, VALID)
    })

    it("a summary with fenced code and a Key Decisions section", () => {
      const text = [
        "## Goal",
        "Make the parser accept trailing commas.",
        "## Progress",
        "- Changed the tokenizer:",
        "```ts",
        "const isTrailing = next === ']'",
        "```",
        "## Key Decisions",
        "- **Keep the old API**: callers depend on it.",
        "## Next Steps",
        "~~~",
        "pnpm test",
        "~~~",
        "## Critical Context",
        "- (none)",
      ].join("\n")
      assertAccepted(text)
    })

    it("CRLF line endings", () => {
      assertAccepted(VALID.replace(/\n/g, "\r\n"))
    })

    it("headings matched with up to three leading spaces and trailing whitespace", () => {
      assertAccepted(sections("goal text", "progress text", "next text", "context text").replace("## Progress", "   ## Progress  "))
    })

    it("an indented (4-space) heading as content of the section it sits in", () => {
      assertAccepted(sections("    ## Overview", "progress text", "next text", "context text"))
    })

    it("a fence closed by a wider run of the same family", () => {
      assertAccepted(sections("goal", "progress", "next", "```\nnpm run build\n`````\nBuild passes."))
    })

    it("a heading inside an open fence as content, not structure", () => {
      assertAccepted(sections("```md\n## Progress\n```", "progress", "next", "context"))
    })
  })

  describe("empty_summary", () => {
    it("rejects empty and blank text", () => {
      assertDefect("", "empty_summary")
      assertDefect(" \n\t\r\n ", "empty_summary")
    })
  })

  describe("summary_too_large", () => {
    it("measures UTF-8 bytes before trimming", () => {
      assertDefect(VALID + " ".repeat(257 * 1024), "summary_too_large")
    })

    it("counts multi-byte characters by their UTF-8 length", () => {
      // 130 Ki two-byte characters: 260 KiB of UTF-8 in 130 Ki UTF-16 units.
      assertDefect(sections("é".repeat(130 * 1024), "p", "n", "c"), "summary_too_large")
    })

    it("is checked before emptiness", () => {
      assertDefect(" ".repeat(257 * 1024), "summary_too_large")
    })
  })

  describe("malformed_summary_missing_section", () => {
    it("rejects a missing required section", () => {
      assertDefect(VALID.replace("## Next Steps\n1. Run the auth suite again.\n\n", ""), "malformed_summary_missing_section")
    })

    it("rejects required sections out of order", () => {
      assertDefect(
        ["## Goal", "g", "## Next Steps", "n", "## Progress", "p", "## Critical Context", "c"].join("\n"),
        "malformed_summary_missing_section",
      )
    })

    it("rejects a section holding only template lines", () => {
      assertDefect(
        sections("goal", "### Done\n- [Completed work and changes]\n### In Progress\n- [Current work]", "next", "context"),
        "malformed_summary_missing_section",
      )
    })

    it("never lets another level-2 heading give content to the section before it", () => {
      assertDefect(
        sections("goal", "## Key Decisions\n- **Use SQLite**: it is embedded.", "next", "context"),
        "malformed_summary_missing_section",
      )
    })

    it("never counts headings of other levels or thematic breaks as content", () => {
      assertDefect(sections("goal", "### Done\n---\n* * *\n#### Notes", "next", "context"), "malformed_summary_missing_section")
    })

    it("does not treat an indented (4-space) heading as structure", () => {
      assertDefect(VALID.replace("## Progress", "    ## Progress"), "malformed_summary_missing_section")
    })

    it("never counts a bare fence run as content", () => {
      assertDefect(sections("goal", "progress", "next", "    ```"), "malformed_summary_missing_section")
    })

    it("rejects a summary whose headings are swallowed by an unclosed fence", () => {
      assertDefect(sections("```\ncode", "progress", "next", "context"), "malformed_summary_missing_section")
    })
  })

  describe("malformed_summary_truncated", () => {
    for (const ending of ["...", ":", "：", ",", "，", "、", ";", "；", "…", "(", "（", "—"]) {
      it(`rejects text ending with ${JSON.stringify(ending)}`, () => {
        assertDefect(`${VALID} and then${ending}\n\n`, "malformed_summary_truncated")
      })
    }

    it("rejects a fence still open at the end", () => {
      assertDefect(sections("goal", "progress", "next", "```sh\npnpm test"), "malformed_summary_truncated")
    })

    it("does not close a fence with a narrower run", () => {
      assertDefect(sections("goal", "progress", "next", "````\ncode\n```\nmore"), "malformed_summary_truncated")
    })

    it("does not close a tilde fence with backticks", () => {
      assertDefect(sections("goal", "progress", "next", "~~~\ncode\n```\nmore"), "malformed_summary_truncated")
    })

    it("does not close a fence with a run followed by text", () => {
      assertDefect(sections("goal", "progress", "next", "```\ncode\n``` trailing"), "malformed_summary_truncated")
    })
  })

  describe("malformed_summary_too_small_for_fold", () => {
    it("rejects a first fold of a large input with a tiny output", () => {
      assertDefect(VALID, "malformed_summary_too_small_for_fold", { inputTokens: 12_000, outputTokens: 150 })
    })

    it("accepts when either usage number is unknown", () => {
      assert.isTrue(Result.isSuccess(validateSummary(VALID, { inputTokens: 12_000 })))
      assert.isTrue(Result.isSuccess(validateSummary(VALID, { outputTokens: 150 })))
      assert.isTrue(Result.isSuccess(validateSummary(VALID, {})))
    })

    it("accepts at the floor boundaries", () => {
      assert.isTrue(Result.isSuccess(validateSummary(VALID, { inputTokens: 10_000, outputTokens: 150 })))
      assert.isTrue(Result.isSuccess(validateSummary(VALID, { inputTokens: 12_000, outputTokens: 200 })))
    })
  })
})

describe("fromModelStep", () => {
  const step = (overrides: Partial<SummarySourceStep>): SummarySourceStep => ({
    finishReason: "stop",
    usage: { inputTokens: 12_000, outputTokens: 150 },
    parts: [{ kind: "text", textKind: "text", text: VALID }],
    ...overrides,
  })

  it("concatenates text parts without separator and ignores thinking", () => {
    const parts: SummarySourceStep["parts"] = [
      { kind: "text", textKind: "thinking", text: "Let me think..." },
      { kind: "text", textKind: "text", text: "\n## Goal\nFix the bu" },
      { kind: "text", textKind: "thinking", text: "## Progress\nthinking only" },
      { kind: "text", textKind: "text", text: "g.\n## Progress\n- done\n## Next Steps\n1. ship\n## Critical Context\n- (none)\n" },
    ]
    assert.deepStrictEqual(
      fromModelStep(step({ parts }), false),
      Result.succeed("## Goal\nFix the bug.\n## Progress\n- done\n## Next Steps\n1. ship\n## Critical Context\n- (none)"),
    )
  })

  it("applies the fold floor only to an initial fold", () => {
    assert.deepStrictEqual(fromModelStep(step({}), true), Result.fail("malformed_summary_too_small_for_fold"))
    assert.deepStrictEqual(fromModelStep(step({}), false), Result.succeed(VALID))
    assert.deepStrictEqual(fromModelStep(step({ usage: { inputTokens: 12_000 } }), true), Result.succeed(VALID))
  })

  it("rejects a step containing a tool call", () => {
    const parts: SummarySourceStep["parts"] = [{ kind: "text", textKind: "text", text: VALID }, { kind: "tool_call" }]
    assert.deepStrictEqual(fromModelStep(step({ parts }), false), Result.fail("summary_contains_tool_content"))
  })

  it("rejects a finish reason other than stop, before looking at the parts", () => {
    assert.deepStrictEqual(fromModelStep(step({ finishReason: "length" }), false), Result.fail("summary_has_invalid_finish_reason"))
    assert.deepStrictEqual(
      fromModelStep(step({ finishReason: "tool-calls", parts: [{ kind: "tool_call" }] }), false),
      Result.fail("summary_has_invalid_finish_reason"),
    )
  })

  it("reports an empty summary when only thinking was produced", () => {
    const parts: SummarySourceStep["parts"] = [{ kind: "text", textKind: "thinking", text: VALID }]
    assert.deepStrictEqual(fromModelStep(step({ parts }), false), Result.fail("empty_summary"))
  })
})
