/**
 * The rows the SQLite writer reads through its own prepared statements are checked field by field
 * before a rule reads them: a value of the wrong type is a `Decode` error naming its column, never a
 * row the rules misread.
 */
import { describe, expect, it } from "vitest"
import { EventLogError } from "../src/EventLogError.ts"
import { checkedRow as rowOf } from "../src/internal/rows.ts"

const raw = {
  sequence: 7,
  event_id: "e-7",
  session_id: "session-1",
  turn_id: "turn-1",
  run_id: "run-1",
  invocation_id: "invocation-1",
  kind: "tool_dispatched",
  operation_id: "step-1:a",
  event_json: "{}",
}

const decodeMessage = (value: unknown): string => {
  try {
    rowOf(value)
  } catch (error) {
    if (error instanceof EventLogError && error.reason._tag === "Decode") return error.reason.message
    throw error
  }
  throw new Error(`expected a Decode error for ${JSON.stringify(value)}`)
}

describe("a prepared statement's row", () => {
  it("maps every column, with a bigint sequence as a number and a null operation id kept", () => {
    expect(rowOf(raw)).toEqual({
      sequence: 7,
      eventId: "e-7",
      sessionId: "session-1",
      turnId: "turn-1",
      runId: "run-1",
      invocationId: "invocation-1",
      kind: "tool_dispatched",
      operationId: "step-1:a",
      json: "{}",
    })
    expect(rowOf({ ...raw, sequence: 9n, operation_id: null })).toMatchObject({ sequence: 9, operationId: null })
  })

  it("refuses what is not a row, a sequence that is not an integer, and each column that is not text", () => {
    for (const value of [null, undefined, "row", 3]) expect(decodeMessage(value)).toBe("a row is not an object")
    for (const sequence of ["7", null, undefined]) expect(decodeMessage({ ...raw, sequence })).toBe("column sequence is not an integer")
    for (const key of ["event_id", "session_id", "turn_id", "run_id", "invocation_id", "kind", "operation_id", "event_json"]) {
      expect(decodeMessage({ ...raw, [key]: 5 })).toBe(`column ${key} is not text`)
    }
  })
})
