/**
 * Child process of the backup tests, run as `node --import tsx append-loop.ts <database> <first>`:
 * opens the log as its writer and appends one finished run of a new session after another, without
 * pause, from session number `first` on; prints `appending` after the first, and runs until killed.
 */
import { FactBuilders, History } from "@maka/testkit"
import { Effect } from "effect"
import * as EventLog from "../../src/EventLog.ts"
import { openSqlite } from "../../src/internal/open-sqlite.ts"

const [file, first] = process.argv.slice(2)
if (file === undefined || first === undefined) throw new Error("usage: append-loop <database> <first>")
const program = Effect.scoped(
  Effect.gen(function* () {
    const log = yield* EventLog.fromDatabase(() => openSqlite(file, { synchronous: "NORMAL" }))
    for (let index = Number(first); ; index++) {
      const history = new History.History({ sessionId: `loop-${index}`, firstId: 1 + index * 100 })
      const run = history.open({ invocationId: `loop-invocation-${index}`, runId: `loop-run-${index}`, turnId: `loop-turn-${index}` })
      run.complete(run.request(), FactBuilders.textStep(`answer ${index}`))
      run.end()
      yield* log.appendBatch(history.writes)
      if (index === Number(first)) process.stdout.write("appending\n")
    }
  }),
)
Effect.runPromise(program).then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${String(error)}\n`)
    process.exit(1)
  },
)
