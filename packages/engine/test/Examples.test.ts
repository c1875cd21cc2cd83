import { execFile } from "node:child_process"
import * as path from "node:path"
import { promisify } from "node:util"
import { assert, describe, it } from "vitest"

const root = path.resolve(import.meta.dirname, "../../..")

/** Runs an example as `pnpm example` does: a child Node process over the sources. */
const runExample = (name: string) =>
  promisify(execFile)(process.execPath, ["--conditions=@maka/source", "--import", "tsx", `packages/engine/examples/${name}`], {
    cwd: root,
    timeout: 60_000,
  })

describe("Examples", () => {
  it("runs the Promise example to a completed run and prints the answer from run.text()", async () => {
    const { stdout } = await runExample("offline.ts")
    assert.include(stdout, "It describes **Lantern**, a tiny static-site generator that turns a folder of Markdown into HTML pages.")
    assert.include(stdout, "outcome: completed")
  }, 60_000)

  it("runs the Effect example to a completed run and prints the answer without its thinking", async () => {
    const { stdout } = await runExample("offline-effect.ts")
    assert.include(stdout, "Lantern turns Markdown into HTML pages.")
    assert.notInclude(stdout, "The README says it.")
    assert.include(stdout, "outcome: completed")
  }, 60_000)
})
