/**
 * A library built on maka emits declarations for what it exports, and TypeScript names each type
 * they hold through a path the packages export. A type declared in an `internal/` module and named
 * by a public declaration only through an alias would be written as `@maka/<pkg>/internal/…`, which
 * the packages' `exports` block: the library's users would get TS2307, or `any` with skipLibCheck.
 * This compiles such a library with declaration emit and reads what it wrote.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { compileProgram } from "./support/workspace-program.ts"


const folder = fs.mkdtempSync(path.join(os.tmpdir(), "maka-declarations-"))
afterAll(() => fs.rmSync(folder, { recursive: true, force: true }))

/** Values whose inferred types reach the public API's less visible corners. */
const LIBRARY = `
import { Agent, Engine, Facade } from "@maka/engine"
import { EventLog } from "@maka/event-log"
import { Digest } from "@maka/facts"

export const deltas = (run: Facade.Run) => run.textAndThinking()
export const agentDeltas = (run: Agent.AgentRun) => run.textAndThinking
export const streamDeltas = Agent.textAndThinking
export const prune = (log: EventLog.EventLogShape) => log.preparePruneCandidates
export const dialect = (log: EventLog.EventLogShape) => log.dialect
export const levels = EventLog.SYNCHRONOUS_LEVELS
export const isLevel = EventLog.isSynchronous
export const makeLog = EventLog.make
export const modelInput = Digest.modelInput
export const closed = (run: Engine.ClosedRun) => run
`

describe("a library's declarations over the packages", () => {
  it("name every type through an exported path, never internal/", () => {
    fs.writeFileSync(path.join(folder, "library.ts"), LIBRARY)
    // The packages' own settings besides the common ones: their sources are checked as they are built.
    const result = compileProgram(folder, ["library.ts"], {
      noUncheckedIndexedAccess: true,
      declaration: true,
      emitDeclarationOnly: true,
      outDir: "out",
    })
    expect(result.output).toBe("")
    expect(result.status).toBe(0)
    const declarations = fs.readFileSync(path.join(folder, "out", "library.d.ts"), "utf8")
    expect(declarations).toContain("TextDelta")
    expect(declarations.split("\n").filter((line) => line.includes("/internal/"))).toEqual([])
  }, 120_000)
})
