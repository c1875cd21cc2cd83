import type { Event } from "@maka/facts"
import { assert, describe, it } from "vitest"
import { EventFeed, textAndThinkingOf, textOf } from "../src/internal/event-feed.ts"

const stored = (sequence: number): Event.StoredEvent => ({ sequence, event: { fact: { kind: "model_observed" } } }) as unknown as Event.StoredEvent

describe("EventFeed", () => {
  it("wakes a waiting reader after the adding turn's microtasks and process.nextTick callbacks", async () => {
    const feed = new EventFeed()
    const order: Array<string> = []
    const read = feed
      .events()
      .next()
      .then((result) => {
        order.push(`reader ${result.done === true ? "done" : result.value.sequence}`)
      })
    await Promise.resolve()
    feed.add([stored(1)])
    // What a commit's caller does next in its own turn: an HTTP request's socket write is a
    // process.nextTick of the request's creation.
    void Promise.resolve().then(() => order.push("microtask"))
    process.nextTick(() => order.push("nextTick"))
    await read
    assert.deepStrictEqual(order, ["microtask", "nextTick", "reader 1"])
  })

  it("wakes every reader once for several adds, each reading every event in order, then the end", async () => {
    const feed = new EventFeed()
    const readAll = async () => {
      const sequences: Array<number> = []
      for await (const event of feed.events()) sequences.push(event.sequence)
      return sequences
    }
    const first = readAll()
    const second = readAll()
    await Promise.resolve()
    feed.add([stored(1)])
    feed.add([stored(2), stored(3)])
    await new Promise((resolve) => setImmediate(resolve))
    feed.add([stored(4)])
    feed.end()
    assert.deepStrictEqual(await first, [1, 2, 3, 4])
    assert.deepStrictEqual(await second, [1, 2, 3, 4])
    // A reader that starts after the end reads the whole list at once.
    assert.deepStrictEqual(await readAll(), [1, 2, 3, 4])
  })

  it("wakes a reader that began waiting after the wake was scheduled", async () => {
    const feed = new EventFeed()
    const early = feed.events()
    const earlyRead = early.next()
    await Promise.resolve()
    feed.add([stored(1)])
    // Scheduled, not run: a reader caught up with the list now waits for the next add.
    const late = feed.events()
    assert.strictEqual(((await late.next()) as IteratorYieldResult<Event.StoredEvent>).value.sequence, 1)
    const lateRead = late.next()
    feed.add([stored(2)])
    assert.strictEqual(((await earlyRead) as IteratorYieldResult<Event.StoredEvent>).value.sequence, 1)
    assert.strictEqual(((await lateRead) as IteratorYieldResult<Event.StoredEvent>).value.sequence, 2)
    feed.end()
    assert.strictEqual(((await early.next()) as IteratorYieldResult<Event.StoredEvent>).value.sequence, 2)
    assert.isTrue((await early.next()).done)
    assert.isTrue((await late.next()).done)
  })

  it("return() ends the reader's waiting next() at once, and leaves the other readers waiting", async () => {
    const feed = new EventFeed()
    const leaving = feed.events()
    const staying = feed.events()
    const waiting = [leaving.next(), leaving.next()]
    const stayingRead = staying.next()
    assert.isTrue((await leaving.return!()).done)
    // Settled before any event is added (the run's next commit may be minutes away).
    let settled: unknown = "still waiting"
    void Promise.all(waiting).then((results) => (settled = results))
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepStrictEqual(settled, [
      { done: true, value: undefined },
      { done: true, value: undefined },
    ])
    feed.add([stored(1)])
    assert.strictEqual(((await stayingRead) as IteratorYieldResult<Event.StoredEvent>).value.sequence, 1)
    assert.isTrue((await leaving.next()).done)
  })

  it("serves the text's next() calls in the order they were made, every value before the end", async () => {
    const feed = new EventFeed()
    const observed = (sequence: number, event: object) =>
      ({ sequence, event: { fact: { kind: "model_observed", stepId: "s", event } } }) as unknown as Event.StoredEvent
    feed.add([
      { sequence: 1, event: { fact: { kind: "invocation_opened" } } } as unknown as Event.StoredEvent,
      observed(2, { kind: "part_started", id: "p", textKind: "text" }),
      observed(3, { kind: "part_delta", id: "p", text: "abc" }),
      observed(4, { kind: "part_finished", id: "p" }),
    ])
    feed.end()
    const reader = textOf(feed.events())
    const results = await Promise.all(Array.from({ length: 6 }, () => reader.next()))
    assert.deepStrictEqual(
      results.map((result) => (result.done === true ? "done" : result.value)),
      ["abc", "done", "done", "done", "done", "done"],
    )
  })

  it("return() on the text of a run ends its waiting next() at once too", async () => {
    const feed = new EventFeed()
    for (const reader of [textOf(feed.events()), textAndThinkingOf(feed.events())]) {
      const waiting = reader.next()
      let settled: unknown = "still waiting"
      void waiting.then((result) => (settled = result))
      await reader.return!()
      await new Promise((resolve) => setImmediate(resolve))
      assert.deepStrictEqual(settled, { done: true, value: undefined })
    }
  })
})
