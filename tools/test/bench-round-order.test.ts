import { describe, expect, it } from "vitest"
import { roundOrder } from "../bench/lib.ts"

describe("roundOrder", () => {
  it.each([2, 4, 6])("puts each of %i contenders once in a round, and within as many rounds right after every other once", (count) => {
    const follows = new Map<string, number>()
    for (let round = 0; round < count; round++) {
      const order = roundOrder(round, count)
      expect([...order].sort((left, right) => left - right)).toEqual(Array.from({ length: count }, (_, index) => index))
      for (let position = 1; position < count; position++) {
        const pair = `${order[position - 1]}>${order[position]}`
        follows.set(pair, (follows.get(pair) ?? 0) + 1)
      }
    }
    // Every ordered pair of distinct contenders, each exactly once.
    expect(follows.size).toBe(count * (count - 1))
    expect([...follows.values()].every((times) => times === 1)).toBe(true)
  })

  it("starts each round with a different contender", () => {
    expect(Array.from({ length: 4 }, (_, round) => roundOrder(round, 4)[0])).toEqual([0, 1, 2, 3])
  })
})
