import { configDefaults, defineProject, mergeConfig } from "vitest/config"
import { QuickFirstSequencer } from "../../tools/mutate/sequencer.ts"
import base from "./vitest.config.ts"

/**
 * The event log's tests as `pnpm mutate append` runs them (tools/mutate/run.mjs): the tests of the
 * append rules, the safety gate and the reads, without the tests of the process and file boundary
 * (the writer lease, killed writers, storage durability, backups, migrations, the optional
 * PostgreSQL driver, memory), which spend seconds each in child processes and would run for every
 * surviving mutant. A mutant only they would kill counts as a survivor: the score is a lower bound.
 */
export default mergeConfig(
  base,
  defineProject({
    test: {
      exclude: [
        ...configDefaults.exclude,
        "test/Lease.test.ts",
        "test/Crash.test.ts",
        "test/Storage.test.ts",
        "test/Backup.test.ts",
        "test/OptionalPg.test.ts",
        "test/Migrations.test.ts",
        "test/Migration2.test.ts",
        "test/Memory.test.ts",
        "test/append-memory.test.ts",
      ],
      // One module graph for every file of a run and every run of a mutant: the files re-import
      // nothing (a run of this suite in one worker: isolated, twice the time). Safe under Stryker:
      // mutants switch at run time, and static ones (module-level code) are ignored (run.mjs).
      isolate: false,
      // The file that failed last, then the quickest, first: a killed mutant stops at its first failure.
      sequence: { sequencer: QuickFirstSequencer },
    },
  }),
)
