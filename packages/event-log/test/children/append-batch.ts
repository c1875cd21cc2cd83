/**
 * Child process for crash tests: opens the log at argv[2] and appends the small run as one batch.
 * The parent sets MAKA_TEST_FAULT to kill this process at a fault point inside the batch. With
 * `opening` as argv[3] it appends the run's opening alone (a run left unsealed); with `rest`, the
 * run after its opening (through its terminal).
 */
import { History } from "@maka/testkit"
import { Effect } from "effect"
import * as EventLog from "../../src/EventLog.ts"
import { openSqlite } from "../../src/internal/open-sqlite.ts"

const [file, part] = process.argv.slice(2)
if (file === undefined) throw new Error("usage: append-batch <database> [opening | rest]")
const program = Effect.scoped(
  Effect.gen(function* () {
    const log = yield* EventLog.fromDatabase(() => openSqlite(file))
    const writes = History.smallRun().writes
    const sequences = yield* log.appendBatch(part === "opening" ? writes.slice(0, 1) : part === "rest" ? writes.slice(1) : writes)
    process.stdout.write(`appended ${sequences.length}\n`)
  }),
)
Effect.runPromise(program).then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${String(error)}\n`)
    process.exit(1)
  },
)
