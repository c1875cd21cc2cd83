/**
 * The page of `maka inspect --html` built step by step (docs/cli.md §10.1): the steps' sources are
 * read in batches that bound what is held at once, and the page is the same however the batches
 * fall; a step whose source came in another batch than the step before it (other event objects)
 * still names the messages they share.
 */
import type { Event } from "@maka/facts"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { forEachSource, readSession, type SessionView } from "../src/internal/inspect.ts"
import { inspectPage } from "../src/internal/inspect-html.ts"
import { openReadOnly, type OpenLog } from "../src/internal/store.ts"
import { folder, maka, type Folder } from "./support/cli.ts"

describe("the inspect page over batches of sources", () => {
  let shared: Folder
  beforeAll(async () => {
    shared = folder()
    for (const message of ["What is this?", "And the notes?"]) {
      const run = await maka(["run", "--db", shared.db, "--workspace", shared.workspace, "--session", "two", message], { cwd: shared.root })
      expect(run.code).toBe(0)
    }
  }, 120_000)
  afterAll(() => shared.remove())

  /** The page built with `budget`, and the size of each batch of sources it read. */
  const pageWith = async (open: OpenLog, session: SessionView, budget: number) => {
    const requests = session.mainRequests
    const batches: Array<number> = []
    const counted: OpenLog = {
      ...open,
      log: {
        ...open.log,
        readFrozenModelContexts: (evidences, limits) => {
          batches.push(evidences.length)
          return open.log.readFrozenModelContexts(evidences, limits)
        },
      },
    }
    const page = inspectPage("two", session)
    const indexes: Array<number> = []
    await forEachSource(
      counted,
      requests,
      (stored, source, index) => {
        expect(stored).toBe(requests[index])
        expect("unreadable" in source).toBe(false)
        indexes.push(index)
        page.step(stored, source)
      },
      budget,
    )
    expect(indexes).toEqual(requests.map((_, index) => index))
    return { html: page.finish(), batches }
  }

  it("gives the same page in one batch, in a batch per step, and in batches bounded by the steps' tails", async () => {
    const open = await openReadOnly({ kind: "sqlite", path: shared.db })
    try {
      const session = await readSession(open, "two")
      const requests = session.mainRequests
      expect(requests.length).toBeGreaterThanOrEqual(4)
      const whole = await pageWith(open, session, Number.MAX_SAFE_INTEGER)
      expect(whole.batches).toEqual([requests.length])
      // Every step after the first names what it shares with the one before it.
      expect(whole.html.match(/Messages 1–\d+: the same as messages 1–\d+ of <a href="#step-\d+">/g)).toHaveLength(requests.length - 1)
      expect(whole.html.match(/input digest matches/g)).toHaveLength(requests.length)
      const single = await pageWith(open, session, 1)
      expect(single.batches).toEqual(requests.map(() => 1))
      expect(single.html).toBe(whole.html)
      // A budget of the first step's rows: the first batch holds that step alone (its tail is at most
      // its high water), and no batch holds them all.
      const request = requests[0]!.event.fact
      if (request.kind !== "model_requested") throw new Error("expected a request")
      const bounded = await pageWith(open, session, request.sourceHighWater)
      expect(bounded.batches[0]).toBe(1)
      expect(bounded.batches.length).toBeGreaterThan(1)
      expect(bounded.batches.reduce((sum, size) => sum + size, 0)).toBe(requests.length)
      expect(bounded.html).toBe(whole.html)
    } finally {
      await open.close()
    }
  })
})
