/**
 * On SQLite the writer checks the append rules against its in-memory index of each session
 * (docs/log-format.md §3.3): once a session is loaded, a write reads no rows back, except the one lookup
 * that a new step or operation id is not another session's (ids are unique in the whole log, and the
 * index holds one session). Counted here as the SELECT statements better-sqlite3 runs per append.
 */
import BetterSqlite3 from "better-sqlite3"
import { FactBuilders, History } from "@maka/testkit"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import * as Testing from "../src/testing.ts"

/** Runs `body`, returning the SQL text of every SELECT better-sqlite3 executed meanwhile. */
const selectsDuring = async (body: () => Promise<void>): Promise<Array<string>> => {
  const probe = new BetterSqlite3(":memory:")
  const prototype = Object.getPrototypeOf(probe.prepare("SELECT 1")) as Record<string, (...args: Array<unknown>) => unknown>
  probe.close()
  const seen: Array<string> = []
  const originals = new Map<string, (...args: Array<unknown>) => unknown>()
  for (const name of ["get", "all", "iterate"]) {
    const original = prototype[name]!
    originals.set(name, original)
    prototype[name] = function (this: { readonly source: string }, ...args: Array<unknown>) {
      if (/^\s*select/i.test(this.source)) seen.push(this.source)
      return original.apply(this, args)
    }
  }
  try {
    await body()
  } finally {
    for (const [name, original] of originals) prototype[name] = original
  }
  return seen
}

describe("the SQLite writer validates from memory", () => {
  it("reads no rows for a settlement, a completion or a terminal, and one id lookup for a new step or operation", async () => {
    const history = new History.History()
    const run = history.open()
    const step = run.request()
    run.complete(step, FactBuilders.toolCallStep([{ id: "a", name: "read_file", input: { path: "x" } }]))
    const loaded = history.writes.length
    const operation = run.dispatch(step, "a")
    run.succeed(operation, FactBuilders.textOutput("ok"))
    const next = run.request()
    run.complete(next, FactBuilders.textStep("done"))
    run.end()
    const counts = await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          for (const write of history.writes.slice(0, loaded)) yield* log.append(write)
          const counts: Array<string> = []
          for (const write of history.writes.slice(loaded)) {
            const selects = yield* Effect.promise(() => selectsDuring(() => Effect.runPromise(Effect.asVoid(log.append(write)))))
            counts.push(`${write.event.fact.kind} ${selects.length}`)
          }
          return counts
        }),
      ),
    )
    expect(counts).toEqual(["tool_dispatched 1", "tool_settled 0", "model_requested 1", "model_completed 0", "invocation_ended 0"])
  })
})
