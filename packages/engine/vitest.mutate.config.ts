import { configDefaults, defineProject, mergeConfig } from "vitest/config"
import { QuickFirstSequencer } from "../../tools/mutate/sequencer.ts"
import base from "./vitest.config.ts"

/**
 * The engine's tests as `pnpm mutate` runs them (tools/mutate/run.mjs): every test that runs the
 * engine in this process, without the ones whose engine runs in child processes (crashes, the
 * cross-process handoff, the examples, the native build: Stryker's mutants are switched on only in
 * its own test process, so those children run the code unmutated) and without the 3,000-turn long
 * session, a single test of more than two minutes that covers nearly every line of the runner, so
 * every surviving mutant would pay for it. A mutant only those tests would kill counts as a
 * survivor: the scores measured this way are a lower bound.
 */
export default mergeConfig(
  base,
  defineProject({
    test: {
      exclude: [
        ...configDefaults.exclude,
        "test/LongSession.test.ts",
        "test/CrashAnywhere.test.ts",
        "test/Crash.test.ts",
        "test/HandoffCrash.test.ts",
        "test/CrossProcessHandoff.test.ts",
        "test/Examples.test.ts",
        "test/NativeBuild.test.ts",
      ],
      // One module graph for every file of a run and every run of a mutant: the files re-import
      // nothing (a run of this suite in one worker: isolated, twice the time). Safe under Stryker:
      // mutants switch at run time, and static ones (module-level code) are ignored (run.mjs).
      isolate: false,
      // The file that failed last, then the quickest, first: a killed mutant stops at its first failure.
      sequence: { sequencer: QuickFirstSequencer },
      // The PostgreSQL load test with 10 sessions instead of 50: every plan of a session (plain,
      // handoff, pending, resumed by both engines, simultaneous start, single) still runs twice,
      // in a fifth of the time every surviving mutant pays for.
      env: { MAKA_LOAD_SESSIONS: "10" },
    },
  }),
)
