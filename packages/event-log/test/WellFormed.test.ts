import { Canonical, Limits, type Event } from "@maka/facts"
import { History } from "@maka/testkit"
import { Effect } from "effect"
import * as fc from "fast-check"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import * as EventLog from "../src/EventLog.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import { temporaryDirectory } from "./fixtures/storage.ts"
import { dialects } from "./support/dialects.ts"
import { failure, withLog } from "./support/harness.ts"

/** Any UTF-16 string, biased towards lone surrogate halves, NUL and pairs. */
const unit = fc.oneof(
  fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)),
  fc.constantFrom("\ud800", "\udfff", "\u0000", "a", "😀"),
)
const anyId = fc.oneof(
  { weight: 8, arbitrary: fc.string({ unit, minLength: 1, maxLength: 12 }) },
  { weight: 1, arbitrary: fc.string({ unit, minLength: 500, maxLength: 520 }) },
)

const isStorable = (id: string) => id.length <= Limits.MAX_ID_UTF16 && !/\p{Cs}/u.test(id) && !id.includes("\u0000")

/** An opening of `sessionId` written by hand, as a careless caller could, bypassing `EventWrite.plain`. */
const handBuiltOpening = (template: Event.RuntimeEvent, sessionId: string, index: number) => {
  const event: Event.RuntimeEvent = {
    ...template,
    id: `00000000-0000-4000-8000-${(0xf00000 + index).toString(16).padStart(12, "0")}`,
    invocation: { sessionId, turnId: `turn-${index}`, runId: `run-${index}`, invocationId: `invocation-${index}` },
  }
  return { event, json: Canonical.stringify(event) }
}

for (const dialect of dialects()) {
  describe(`random ids on ${dialect.name}`, () => {
    it("admits a session id and reads it back unchanged, or refuses it with nothing written", () =>
      withLog(dialect, (log) =>
        Effect.gen(function* () {
          const template = History.smallRun().events[0]!.event
          const ids = [...new Set(fc.sample(anyId, { numRuns: 60, seed: 7 }))]
          let admitted = 0
          for (const [index, sessionId] of ids.entries()) {
            const write = handBuiltOpening(template, sessionId, index)
            if (isStorable(sessionId)) {
              yield* log.append(write)
              const stored = yield* log.events(sessionId)
              expect(stored.map((item) => item.event)).toEqual([write.event])
              admitted++
            } else {
              const error = yield* failure(log.append(write))
              expect(error.reason._tag).toBe("Rejected")
            }
          }
          const page = yield* log.unfinishedInvocationPage()
          expect(page.invocations.map((invocation) => invocation.sessionId)).toEqual(ids.filter(isStorable))
          expect(admitted).toBeGreaterThan(5)
          expect(admitted).toBeLessThan(ids.length)
        }),
      ))
  })
}

describe("a log written with random ids", () => {
  it("always reopens, with every admitted id intact", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const template = History.smallRun().events[0]!.event
    const ids = [...new Set(fc.sample(anyId, { numRuns: 40, seed: 11 }))]
    const open = EventLog.fromDatabase(() => openSqlite(file, { synchronous: "NORMAL" }))
    await Effect.runPromise(
      Effect.scoped(
        Effect.flatMap(open, (log) =>
          Effect.forEach(ids.entries(), ([index, sessionId]) => Effect.ignore(log.append(handBuiltOpening(template, sessionId, index)))),
        ),
      ),
    )
    const reopened = await Effect.runPromise(
      Effect.scoped(Effect.flatMap(open, (log) => log.unfinishedInvocationPage())),
    )
    expect(reopened.invocations.map((invocation) => invocation.sessionId)).toEqual(ids.filter(isStorable))
  })
})
