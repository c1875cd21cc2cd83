/**
 * The order of test files in a mutant's run (`vitest.mutate.config.ts` of the engine and the event
 * log): a file that failed in the last run first (it likely kills the next mutant too), then the
 * quickest first. Stryker stops a mutant's run at its first failing test, so a killed mutant costs
 * the time until that test; vitest's own order runs the slowest file first, which suits parallel
 * workers, not one worker that stops early.
 */
import * as path from "node:path"
import { BaseSequencer, type TestSpecification } from "vitest/node"

export class QuickFirstSequencer extends BaseSequencer {
  override async sort(files: Array<TestSpecification>): Promise<Array<TestSpecification>> {
    const state = (file: TestSpecification) =>
      this.ctx.cache.getFileTestResults(`${file.project.name}:${path.relative(this.ctx.config.root, file.moduleId)}`)
    return [...files].sort((a, b) => {
      const [first, second] = [state(a), state(b)]
      const failed = Number(second?.failed ?? false) - Number(first?.failed ?? false)
      if (failed !== 0) return failed
      return (first?.duration ?? 0) - (second?.duration ?? 0)
    })
  }
}
