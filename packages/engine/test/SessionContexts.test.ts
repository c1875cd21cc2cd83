/**
 * The contexts an engine keeps across runs (src/internal/run-context.ts `SessionContexts`,
 * docs/engine.md §5.4 "Kept context"): bounded by count and by the bytes they hold together.
 */
import { describe, expect, it } from "vitest"
import { SESSION_CONTEXT_BYTES, SESSION_CONTEXTS } from "../src/internal/options.ts"
import { SessionContexts } from "../src/internal/run-context.ts"

/** A context of `bytes`, as the read limits count them. */
const context = (name: string, bytes: number) => ({ name, size: () => ({ events: 1, bytes }) })
type Fake = ReturnType<typeof context>

const keptNames = (contexts: SessionContexts<Fake>, names: ReadonlyArray<string>) =>
  names.filter((name) => {
    const taken = contexts.take(name)
    if (taken !== undefined) contexts.put(name, taken)
    return taken !== undefined
  })

describe("the kept contexts", () => {
  it("keep 256 sessions' contexts within 32 MiB", () => {
    expect([SESSION_CONTEXTS, SESSION_CONTEXT_BYTES]).toEqual([256, 32 * 1024 * 1024])
  })

  it("drop the least recently used session beyond their count", () => {
    const contexts = new SessionContexts<Fake>(3, 1_000)
    for (const name of ["a", "b", "c"]) contexts.put(name, context(name, 10))
    // Taking a context and putting it back makes it the most recently used.
    contexts.put("a", contexts.take("a")!)
    contexts.put("d", context("d", 10))
    expect(contexts.take("b")).toBeUndefined()
    expect(keptNames(contexts, ["a", "c", "d"])).toEqual(["a", "c", "d"])
    expect(contexts.held()).toEqual({ count: 3, bytes: 30 })
  })

  it("drop the least recently used sessions until their bytes fit, and keep no context over the whole bound", () => {
    const contexts = new SessionContexts<Fake>(100, 1_000)
    contexts.put("a", context("a", 400))
    contexts.put("b", context("b", 400))
    contexts.put("c", context("c", 300))
    expect(contexts.held()).toEqual({ count: 2, bytes: 700 })
    expect(contexts.take("a")).toBeUndefined()
    contexts.put("huge", context("huge", 1_001))
    expect(contexts.take("huge")).toBeUndefined()
    expect(contexts.held()).toEqual({ count: 2, bytes: 700 })
    // A context that grew is counted at its new size when it is put back.
    contexts.take("b")
    contexts.put("b", context("b", 650))
    expect(contexts.held()).toEqual({ count: 2, bytes: 950 })
    // c, the least recently put back, goes first.
    contexts.put("d", context("d", 100))
    expect(contexts.held()).toEqual({ count: 2, bytes: 750 })
    expect(contexts.take("c")).toBeUndefined()
    expect(keptNames(contexts, ["b", "d"])).toEqual(["b", "d"])
  })

  it("count a taken context out until it is put back, and hold nothing once cleared", () => {
    const contexts = new SessionContexts<Fake>(10, 1_000)
    contexts.put("a", context("a", 600))
    const taken = contexts.take("a")
    expect(contexts.held()).toEqual({ count: 0, bytes: 0 })
    contexts.put("b", context("b", 600))
    contexts.put("a", taken!)
    expect(contexts.take("b")).toBeUndefined()
    contexts.clear()
    expect(contexts.held()).toEqual({ count: 0, bytes: 0 })
    expect(contexts.take("a")).toBeUndefined()
  })
})
