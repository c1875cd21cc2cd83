import { EventLogError } from "@maka/event-log"
import { assert, describe, it } from "vitest"
import * as EngineError from "../src/EngineError.ts"
import * as Hints from "../src/Hints.ts"

/** What `bindings` reports when better-sqlite3's native build was never compiled. */
const MISSING_BUILD =
  "/project/agent.sqlite: Could not locate the bindings file. Tried:\n" +
  " → /project/node_modules/better-sqlite3/build/better_sqlite3.node\n" +
  " → /project/node_modules/better-sqlite3/build/Release/better_sqlite3.node"

/** What Node reports when the build belongs to another Node.js. */
const OTHER_NODE =
  "The module '/project/node_modules/better-sqlite3/build/Release/better_sqlite3.node' was compiled against a " +
  "different Node.js version using NODE_MODULE_VERSION 127. This version of Node.js requires NODE_MODULE_VERSION 115."

describe("Hints", () => {
  it("tells how to build better-sqlite3 when its native build is missing or built for another Node.js", () => {
    for (const message of [MISSING_BUILD, OTHER_NODE]) {
      const error = EngineError.fromStore(EventLogError.make({ _tag: "Database", message }))
      assert.strictEqual(error.reason._tag, "Store")
      assert.strictEqual(error.reason._tag === "Store" ? error.reason.storeReason : undefined, "Database")
      assert.include(error.message, "--allow-build=better-sqlite3")
      assert.include(error.message, "pnpm approve-builds")
      assert.include(error.message, "npm rebuild better-sqlite3")
    }
  })

  it("tells a writer that lost its lease to open the log again, not that another engine holds it", () => {
    const lost = EngineError.fromStore(EventLogError.make({ _tag: "WriterBusy", path: "/project/agent.sqlite", lost: true }))
    assert.include(lost.message, EventLogError.LEASE_LOST_MESSAGE)
    assert.include(lost.message, Hints.WRITER_LOST_HINT)
    assert.notInclude(lost.message, Hints.WRITER_BUSY_HINT)
    const busy = EngineError.fromStore(EventLogError.make({ _tag: "WriterBusy", path: "/project/agent.sqlite" }))
    assert.include(busy.message, Hints.WRITER_BUSY_HINT)
    assert.notInclude(busy.message, Hints.WRITER_LOST_HINT)
    // A writer whose file left its path: opening it again would start an empty log.
    const removed = EngineError.fromStore(
      EventLogError.make({ _tag: "WriterBusy", path: "/project/agent.sqlite", lost: true, why: EventLogError.FILE_REPLACED }),
    )
    assert.include(removed.message, EventLogError.FILE_REPLACED)
    assert.include(removed.message, Hints.FILE_REPLACED_HINT)
    assert.notInclude(removed.message, Hints.WRITER_LOST_HINT)
  })

  it("adds nothing to a store failure it has no way out for", () => {
    const error = EngineError.fromStore(EventLogError.make({ _tag: "Database", message: "disk I/O error" }))
    assert.strictEqual(error.message, "database: disk I/O error")
  })

  it("adds the allowPriorUnknown way out once, and never where the message already names one", () => {
    assert.strictEqual(Hints.forReconciliation("Session contains unsealed or unresolved prior execution"), Hints.PRIOR_UNKNOWN_HINT)
    assert.isUndefined(Hints.forReconciliation("start again with allowPriorUnknown"))
    assert.isUndefined(Hints.forReconciliation(EngineError.UNSEALED_RUN_MESSAGE))
    // A terminal this engine owes is written once the log takes writes: allowPriorUnknown is refused
    // the same way meanwhile, so it is not offered.
    assert.isUndefined(Hints.forReconciliation(EngineError.UNWRITTEN_TERMINAL_MESSAGE))
    // A run that had allowPriorUnknown is told what else the refusal can be, not to start again with it.
    assert.strictEqual(
      Hints.forReconciliation("Session contains unsealed or unresolved prior execution", true),
      Hints.PRIOR_UNKNOWN_NOT_COVERED_HINT,
    )
    assert.isUndefined(Hints.forReconciliation(EngineError.UNSEALED_RUN_MESSAGE, true))
    const once = Hints.append("refused", Hints.PRIOR_UNKNOWN_HINT)
    assert.strictEqual(Hints.append(once, Hints.PRIOR_UNKNOWN_HINT), once)
  })
})
