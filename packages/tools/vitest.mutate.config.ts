import { configDefaults, defineProject, mergeConfig } from "vitest/config"
import base from "./vitest.config.ts"

/**
 * The tools' tests as `pnpm mutate` runs them (tools/mutate/run.mjs): Stryker's vitest runner runs
 * them in worker threads, where `process.chdir` is not supported, so the built-in tools' file (one
 * of its cases changes directory) is left out; it tests the built-in tools, not the journal, whose
 * own suites (Journal.test.ts, JournalEventLog.test.ts) kill its mutants. A mutant only that file
 * would kill counts as a survivor: the score measured this way is a lower bound.
 */
export default mergeConfig(
  base,
  defineProject({
    test: { exclude: [...configDefaults.exclude, "test/Builtins.test.ts"] },
  }),
)
