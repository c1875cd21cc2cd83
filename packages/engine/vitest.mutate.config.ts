import { configDefaults, defineProject, mergeConfig } from "vitest/config"
import base from "./vitest.config.ts"

/**
 * The engine's tests as `pnpm mutate` runs them (tools/mutate/run.mjs): every test but the
 * 3,000-turn long session, a single test of more than two minutes that covers nearly every line of
 * the runner, so every surviving mutant would pay for it. A mutant only it would kill counts as a
 * survivor: the scores measured this way are a lower bound.
 */
export default mergeConfig(
  base,
  defineProject({ test: { exclude: [...configDefaults.exclude, "test/LongSession.test.ts"] } }),
)
