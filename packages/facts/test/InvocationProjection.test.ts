import { assert, describe, it } from "@effect/vitest"
import { InvocationProjection } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"

describe("InvocationProjection", () => {
  it("projects a completed run with nothing uncertain or unfinished", () => {
    const history = History.smallRun()
    assert.deepStrictEqual(InvocationProjection.project(history.events, "invocation-1"), {
      terminal: "completed",
      uncertainOperations: [],
      unfinishedModelSteps: [],
    })
  })

  it("reports a dispatch without a settlement as uncertain and a request without an end as unfinished", () => {
    const history = new History.History()
    const run = history.open()
    const first = run.request()
    run.complete(first, FactBuilders.toolCallStep([{ id: "a", name: "read_file" }, { id: "b", name: "list_files" }]))
    const settled = run.dispatch(first, "a")
    run.succeed(settled, FactBuilders.textOutput("ok"))
    const open = run.dispatch(first, "b")
    const second = run.request()
    const projection = InvocationProjection.projectPrefix({ events: history.events }, run.invocation.invocationId)
    assert.deepStrictEqual(projection, { uncertainOperations: [open], unfinishedModelSteps: [second] })
    assert.isFalse("terminal" in projection)
  })

  it("ignores other invocations and maps a handoff pause to paused", () => {
    const history = new History.History()
    const first = history.open()
    first.request()
    first.end({ kind: "failed", class: "host_interrupted" })
    const second = history.open()
    second.end({ kind: "handoff_paused", pause: second.pause() })
    assert.deepStrictEqual(InvocationProjection.project(history.events, second.invocation.invocationId), {
      terminal: "paused",
      uncertainOperations: [],
      unfinishedModelSteps: [],
    })
    assert.strictEqual(InvocationProjection.project(history.events, first.invocation.invocationId).terminal, "failed")
  })
})
