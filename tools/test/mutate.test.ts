import { describe, expect, it } from "vitest"
// @ts-expect-error: a plain JavaScript module of the repository's tools, without types
import { score, survivors, vitestConfig } from "../mutate/run.mjs"

const mutant = (status: string, line: number, replacement?: string) => ({
  status,
  mutatorName: "ConditionalExpression",
  location: { start: { line, column: 1 }, end: { line, column: 5 } },
  ...(replacement === undefined ? {} : { replacement }),
})

describe("pnpm mutate's reading of a report", () => {
  it("lists the surviving and uncovered mutants with their source line, never the detected ones", () => {
    const report = {
      files: {
        "a.ts": { source: "first()\n  if (x) y()\nlast()", mutants: [mutant("Killed", 1, "{}"), mutant("Survived", 2, "false"), mutant("NoCoverage", 3), mutant("Timeout", 2)] },
      },
    }
    expect(survivors(report)).toEqual([
      'a.ts:2 Survived ConditionalExpression "false"\n    if (x) y()',
      'a.ts:3 NoCoverage ConditionalExpression ""\n    last()',
    ])
  })

  it("scores killed and timed-out mutants over every one tested or left uncovered", () => {
    const results = [mutant("Killed", 1), mutant("Timeout", 1), mutant("Survived", 1), mutant("NoCoverage", 1), mutant("Ignored", 1)]
    expect(score(results)).toMatchObject({ detected: 2, undetected: 2, ignored: 1, score: 50 })
  })

  it("runs a package's mutants against its vitest.mutate.config.ts when it has one", () => {
    expect(vitestConfig("engine")).toBe("packages/engine/vitest.mutate.config.ts")
    expect(vitestConfig("facts")).toBe("packages/facts/vitest.config.ts")
  })
})
