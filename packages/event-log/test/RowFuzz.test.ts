/**
 * Stored rows and appended events, fuzzed against a real SQLite file. Rows of a session are damaged
 * in the file by another connection (`event_json` mutated as JSON and as bytes, id, kind and
 * operation columns changed, a raw payload changed); every read API then succeeds or fails with a
 * typed `EventLogError` (`Decode`, `Rejected`, `trace_unavailable`), never a defect nor a driver
 * error, and writes nothing. Hand-built mutations of valid writes are appended: each is stored whole
 * or refused with the log's content unchanged. `MAKA_FUZZ_INPUTS` sets the inputs per decoder
 * (default 2,000; long setting 100,000), `MAKA_FUZZ_SEED` the seed; a failure names both.
 */
import type { EventWrite } from "@maka/facts"
import { FactBuilders, History } from "@maka/testkit"
import BetterSqlite3 from "better-sqlite3"
import { Cause, Effect, Exit } from "effect"
import { createHash } from "node:crypto"
import { describe, expect, it } from "vitest"
import type * as EventLog from "../src/EventLog.ts"
import * as EventLogError from "../src/EventLogError.ts"
import * as Testing from "../src/testing.ts"

const INPUTS = Number(process.env["MAKA_FUZZ_INPUTS"] ?? 2_000)
const SEED = Number(process.env["MAKA_FUZZ_SEED"] ?? 0x20_f022)
/** Ten minutes, or 30 ms per input at a long setting. */
const TIMEOUT_MS = Math.max(600_000, INPUTS * 30)

/** A small seeded generator (mulberry32), so a failing case can be replayed. */
const generator = (seed: number) => {
  let state = seed | 0
  const next = () => {
    state = (state + 0x6d2b79f5) | 0
    let t = Math.imul(state ^ (state >>> 15), 1 | state)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const int = (below: number) => Math.floor(next() * below)
  const pick = <A>(values: ReadonlyArray<A>): A => values[int(values.length)]!
  const chance = (p: number) => next() < p
  return { next, int, pick, chance }
}
type Random = ReturnType<typeof generator>

// ---------------------------------------------------------------------------------------------
// Mutations

const KINDS = [
  "invocation_opened",
  "invocation_ended",
  "model_requested",
  "model_completed",
  "model_interrupted",
  "model_observed",
  "tool_dispatched",
  "tool_settled",
  "tool_rejected",
  "message_steered",
  "context_checkpoint_recorded",
  "tool_result_archived",
  "bogus",
  "",
]
const strangeStrings = ["", " ", "\u0000", "\ud800", "😀", "x".repeat(600), "session-1", "session-2", "turn-1", "run-1", "invocation-1", "call-1"]

const deepText = (random: Random, depth: number): string =>
  random.chance(0.5) ? `${"[".repeat(depth)}1${"]".repeat(depth)}` : `${"{\"a\":".repeat(depth)}1${"}".repeat(depth)}`

const wrongValue = (random: Random, depth = 0): unknown => {
  switch (random.int(depth > 2 ? 8 : 10)) {
    case 0:
      return null
    case 1:
      return random.pick([0, -1, 1.5, 2 ** 53, -(2 ** 60), 1e308, Number.MAX_SAFE_INTEGER])
    case 2:
      return random.pick(strangeStrings)
    case 3:
      return random.chance(0.5)
    case 4:
      return random.pick(KINDS)
    case 5:
      return {}
    case 6:
      return []
    case 7:
      return random.pick(["completed", "failed", "text", "json", "succeeded", "provider", "standalone", "stop", "main"])
    case 8:
      // Deep, but within what a deep comparison walks on any stack (deeper is the stack-dependent case
      // the deterministic 5,000-level tests cover).
      return random.chance(0.2) ? JSON.parse(deepText(random, 1 + random.int(1_000))) : [wrongValue(random, depth + 1)]
    default:
      return { [random.pick(["kind", "id", "text", "value", "outcome", "__proto__"])]: wrongValue(random, depth + 1) }
  }
}

const pathsOf = (value: unknown): Array<Array<string | number>> => {
  const paths: Array<Array<string | number>> = []
  const stack: Array<[unknown, Array<string | number>]> = [[value, []]]
  while (stack.length > 0 && paths.length < 400) {
    const [current, at] = stack.pop()!
    if (typeof current !== "object" || current === null) continue
    const keys: Array<string | number> = Array.isArray(current) ? Array.from({ length: current.length }, (_, index) => index) : Object.keys(current)
    for (const key of keys) {
      paths.push([...at, key])
      stack.push([Reflect.get(current, key), [...at, key]])
    }
  }
  return paths
}

const setOwn = (target: object, key: string | number, value: unknown): void => {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true })
}

/** A JSON mutation of an event: a field dropped, retyped or added, an id swapped. */
const mutateEvent = (random: Random, event: unknown): unknown => {
  const copy: unknown = structuredClone(event)
  for (let round = 1 + random.int(2); round > 0; round--) {
    const paths = pathsOf(copy)
    const at = random.pick(paths)
    let parent: unknown = copy
    for (const key of at.slice(0, -1)) parent = typeof parent === "object" && parent !== null ? Reflect.get(parent, key) : undefined
    if (typeof parent !== "object" || parent === null) continue
    const key = at[at.length - 1]!
    switch (random.int(5)) {
      case 0:
        if (Array.isArray(parent) && typeof key === "number") parent.splice(key, 1)
        else Reflect.deleteProperty(parent, key)
        break
      case 1:
        if (Array.isArray(parent)) parent.push(wrongValue(random))
        else setOwn(parent, random.pick(["extra", "__proto__", "kind", "sequence"]), wrongValue(random))
        break
      case 2: {
        // A number nudged: often still of the right type, so the rules (not the schema) must refuse it.
        const current: unknown = Reflect.get(parent, key)
        setOwn(parent, key, typeof current === "number" ? current + random.pick([-1, 1, 1000]) : wrongValue(random))
        break
      }
      default:
        setOwn(parent, key, wrongValue(random))
    }
  }
  return copy
}

/** Damage to stored JSON text: truncation, byte flips, deep nesting, a huge value. */
const mutateText = (random: Random, json: string): string => {
  const at = random.int(json.length + 1)
  switch (random.int(6)) {
    case 0:
      return json.slice(0, at)
    case 1:
      return json.slice(0, at) + String.fromCharCode(random.int(0x80)) + json.slice(at + 1)
    case 2: {
      // Any string value (the decoder walks some, not others) replaced by deep nesting.
      const values = [...json.matchAll(/:"[^"]*"/g)]
      const chosen = values.length === 0 ? undefined : random.pick(values)
      if (chosen === undefined) return json
      const deep = `:${deepText(random, 1 + random.int(random.chance(0.5) ? 20_000 : 3_000))}`
      return json.slice(0, chosen.index) + deep + json.slice(chosen.index + chosen[0].length)
    }
    case 3:
      return json.replace(/:"[^"]*"/, `:"${"y".repeat(random.chance(0.1) ? 1_100_000 : 10_000)}"`)
    case 4:
      return random.pick(["", "null", "[]", "{}", "\"text\"", "1", "{\"id\":1}"])
    default:
      return json.replace(/"(\w+)":/, "\"$1\":null,\"$1\":")
  }
}

// ---------------------------------------------------------------------------------------------
// The file, seen by another connection

interface RawRow {
  readonly sequence: number
  readonly event_id: string
  readonly session_id: string
  readonly turn_id: string
  readonly run_id: string
  readonly invocation_id: string
  readonly kind: string
  readonly operation_id: string | null
  readonly event_json: string
}

/** The content of the whole log: every row and payload, hashed. */
const contentDigest = (connection: BetterSqlite3.Database): string => {
  const hash = createHash("sha256")
  for (const row of connection.prepare("SELECT * FROM event_log ORDER BY sequence").iterate()) hash.update(JSON.stringify(row))
  for (const row of connection.prepare("SELECT * FROM tool_result_payloads ORDER BY event_id").iterate()) hash.update(JSON.stringify(row))
  return hash.digest("hex")
}

/** A cheap fingerprint of the log's content: rows, the last sequence, and the bytes of events and payloads. */
const contentShape = (connection: BetterSqlite3.Database): string =>
  JSON.stringify(
    connection
      .prepare(
        "SELECT count(*) AS n, max(sequence) AS last, total(length(event_json)) AS bytes, (SELECT count(*) FROM tool_result_payloads) AS payloads, (SELECT total(length(payload)) FROM tool_result_payloads) AS payloadBytes FROM event_log",
      )
      .get(),
  )

const rowCount = (connection: BetterSqlite3.Database): number =>
  (connection.prepare("SELECT count(*) AS n FROM event_log").get() as { n: number }).n

/** The outcome of one read: its value's kind, or the failure's tag; throws on a defect or an untyped failure. */
const outcomeOf = (exit: Exit.Exit<unknown, EventLogError.EventLogError>, label: string): string => {
  if (Exit.isSuccess(exit)) {
    const value = exit.value
    return typeof value === "object" && value !== null && "kind" in value && typeof value.kind === "string" ? `ok:${value.kind}` : "ok"
  }
  expect(Cause.hasDies(exit.cause), `${label}: a defect: ${Cause.pretty(exit.cause).slice(0, 1_500)}`).toBe(false)
  const error = Cause.findErrorOption(exit.cause)
  expect(error._tag === "Some" && EventLogError.isEventLogError(error.value), `${label}: untyped: ${Cause.pretty(exit.cause).slice(0, 500)}`).toBe(true)
  const reason = error._tag === "Some" ? error.value.reason : undefined
  // A damaged row is a decode or rule failure, never a driver error masking a crash in the reader.
  expect(reason?._tag, `${label}: ${reason === undefined ? "" : EventLogError.describe(reason).slice(0, 500)}`).not.toBe("Database")
  return reason?._tag === "Rejected" ? `Rejected:${reason.rejection._tag}` : (reason?._tag ?? "none")
}

/** The read APIs a damaged session goes through. */
const reads = (log: EventLog.EventLogShape, history: History.History) => {
  const sessionId = history.sessionId
  const lastInvocation = history.written[history.written.length - 1]!.stored.event.invocation
  const settled = history.written.find((item) => item.write.rawPayload !== undefined)!.stored.event.id
  return [
    ["events", log.events(sessionId)],
    ["readModelContext", log.readModelContext(sessionId)],
    ["readModelContextWithHash", log.readModelContextWithHash(sessionId, { current: lastInvocation.invocationId })],
    ["readManualMessageContext", log.readManualMessageContext(sessionId)],
    ["latestMainContext", log.latestMainContext(sessionId)],
    ["checkHistorySafety", log.checkHistorySafety(sessionId)],
    ["sessionHash", log.sessionHash(sessionId, history.written.length)],
    ["unfinishedInvocations", log.unfinishedInvocations(100)],
    ["invocationRecovery", log.invocationRecovery(lastInvocation)],
    ["readToolResult", log.readToolResult(sessionId, settled)],
    ["pendingHandoffs", log.pendingHandoffs()],
    ["prefix", log.prefix({ kind: "session", id: sessionId })],
  ] as const
}

/** A small complete run (a tool call, its result, an answer) in its own session with its own ids. */
const runIn = (session: number): History.History => {
  const history = new History.History({ sessionId: `session-${session}`, firstId: 1 + session * 100 })
  const run = history.open({ message: "What is here?", turnId: `turn-${session}`, runId: `run-${session}`, invocationId: `invocation-${session}` })
  const first = run.request()
  run.complete(first, FactBuilders.toolCallStep([{ id: "call-1", name: "list_files", input: { path: "." } }]))
  run.succeed(run.dispatch(first, "call-1"), FactBuilders.jsonOutput([{ name: "README.md", type: "file", size: 120 }]))
  const second = run.request()
  run.complete(second, FactBuilders.textStep("A README."))
  run.end({ kind: "completed" })
  return history
}

describe("stored row fuzz", () => {
  // Deeper than any thread's stack lets a recursive walk go (a worker thread's stack is larger than
  // the main thread's: 5,000 levels overflow one and not the other).
  const DEEP = 200_000
  it("reads a stored tool input nested 200,000 deep as Decode, never a defect or a driver error", async () => {
    const outcomes = await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log, file } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          const history = History.smallRun()
          for (const item of history.written) yield* log.append(item.write)
          const connection = new BetterSqlite3(file)
          yield* Effect.addFinalizer(() => Effect.sync(() => connection.close()))
          const row = connection.prepare("SELECT sequence, event_json FROM event_log WHERE kind = 'model_completed' ORDER BY sequence LIMIT 1").get() as RawRow
          const deep = `${"[".repeat(DEEP)}1${"]".repeat(DEEP)}`
          expect(row.event_json).toContain('"input":{"path":"."}')
          connection.prepare("UPDATE event_log SET event_json = ? WHERE sequence = ?").run(row.event_json.replace('"input":{"path":"."}', `"input":{"path":${deep}}`), row.sequence)
          const apis = reads(log, history)
          const results: Array<string> = []
          for (const [name, read] of apis) {
            if (name === "readModelContextWithHash" || name === "invocationRecovery" || name === "readToolResult") continue
            results.push(`${name} ${outcomeOf(yield* Effect.exit(read as Effect.Effect<unknown, EventLogError.EventLogError>), name)}`)
          }
          return results
        }),
      ),
    )
    expect(outcomes).toContain("events Decode")
  })

  it("reads every damaged row to a value or a typed EventLogError, writing nothing", async () => {
    const tags = new Map<string, number>()
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const { log, file } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
          // A completed run with a tool result, and a second run left live.
          const history = History.smallRun()
          const second = history.open({ message: "And now?" })
          const step = second.request()
          second.complete(step, FactBuilders.textStep("Thinking."))
          for (const item of history.written) yield* log.append(item.write)
          const connection = new BetterSqlite3(file)
          // The damage need not survive a power cut: no sync per update.
          connection.pragma("synchronous = OFF")
          yield* Effect.addFinalizer(() => Effect.sync(() => connection.close()))
          const pristine = connection.prepare("SELECT * FROM event_log ORDER BY sequence").all() as Array<RawRow>
          const payloads = connection.prepare("SELECT event_id, payload FROM tool_result_payloads").all() as Array<{ event_id: string; payload: string }>
          const digest = contentDigest(connection)
          const update = connection.prepare(
            "UPDATE event_log SET event_id = ?, session_id = ?, turn_id = ?, run_id = ?, invocation_id = ?, kind = ?, operation_id = ?, event_json = ? WHERE sequence = ?",
          )
          const restore = (row: RawRow) =>
            update.run(row.event_id, row.session_id, row.turn_id, row.run_id, row.invocation_id, row.kind, row.operation_id, row.event_json, row.sequence)
          const setPayload = connection.prepare("UPDATE tool_result_payloads SET payload = ? WHERE event_id = ?")
          const apis = reads(log, history)
          for (let index = 0; index < INPUTS; index++) {
            const seed = SEED + index
            const random = generator(seed)
            const label = `seed ${seed} (MAKA_FUZZ_SEED=${SEED} case ${index})`
            const row = random.pick(pristine)
            const damaged: { -readonly [K in keyof RawRow]: RawRow[K] } = { ...row }
            const payload = random.chance(0.1) ? random.pick(payloads) : undefined
            if (payload !== undefined) {
              setPayload.run(random.chance(0.5) ? mutateText(random, payload.payload) : payload.payload.replace(/\d/, "7"), payload.event_id)
            } else {
              switch (random.int(8)) {
                case 0:
                  damaged.kind = random.pick(KINDS)
                  break
                case 1: {
                  const column = random.pick(["session_id", "turn_id", "run_id", "invocation_id", "event_id"] as const)
                  damaged[column] = random.pick([...strangeStrings, random.pick(pristine)[column]])
                  break
                }
                case 2:
                  damaged.operation_id = random.chance(0.5) ? null : random.pick([...strangeStrings, "step-1:call-1"])
                  break
                case 3:
                case 4:
                  damaged.event_json = mutateText(random, row.event_json)
                  break
                default:
                  damaged.event_json = JSON.stringify(mutateEvent(random, JSON.parse(row.event_json)))
              }
              try {
                restore(damaged)
              } catch {
                // The schema's own indexes and constraints refused the damage: nothing to read.
                tags.set("unapplied", (tags.get("unapplied") ?? 0) + 1)
                continue
              }
            }
            const count = rowCount(connection)
            // One read per case keeps the default run short; every read is reached many times.
            for (const [name, read] of [random.pick(apis)]) {
              const exit = yield* Effect.exit(read as Effect.Effect<unknown, EventLogError.EventLogError>)
              const tag = `${name} ${outcomeOf(exit, `${label}, ${name}, row ${row.sequence} (${row.kind})`)}`
              tags.set(tag, (tags.get(tag) ?? 0) + 1)
            }
            expect(rowCount(connection), `${label}: a read wrote`).toBe(count)
            if (payload !== undefined) setPayload.run(payload.payload, payload.event_id)
            else restore(row)
          }
          expect(contentDigest(connection)).toBe(digest)
        }),
      ),
    )
    // The damage reaches the decoder: some reads fail Decode, some still succeed.
    const decodes = [...tags].filter(([tag]) => tag.endsWith(" Decode")).reduce((sum, [, n]) => sum + n, 0)
    expect(decodes, JSON.stringify([...tags])).toBeGreaterThan(INPUTS / 20)
    const successes = [...tags].filter(([tag]) => tag.includes(" ok")).reduce((sum, [, n]) => sum + n, 0)
    expect(successes, JSON.stringify([...tags])).toBeGreaterThan(INPUTS / 20)
    if (process.env["MAKA_FUZZ_REPORT"] !== undefined) console.log(JSON.stringify([...tags]))
  }, TIMEOUT_MS)

  it("stores every appended mutation of a valid write whole, or refuses it with the log's content unchanged", async () => {
    const tags = new Map<string, number>()
    // Cases in batches of 1,000, each on a fresh log, so the log stays small at any setting.
    for (let from = 0; from < INPUTS; from += 1_000) {
      await Effect.runPromise(
        Effect.scoped(
          Effect.gen(function* () {
            const { log, file } = yield* Testing.makeTemporary({ synchronous: "NORMAL" })
            const connection = new BetterSqlite3(file, { readonly: true })
            yield* Effect.addFinalizer(() => Effect.sync(() => connection.close()))
            // Valid histories, one session each, appended write by write between the mutations.
            let session = 0
            let template = runIn(session)
            let position = 0
            // The log's content fingerprint, taken again after each write that went in.
            let shape = contentShape(connection)
            for (let index = from; index < Math.min(INPUTS, from + 1_000); index++) {
              const seed = SEED + 0x100000 + index
              const random = generator(seed)
              const label = `seed ${seed} (MAKA_FUZZ_SEED=${SEED} append case ${index})`
              if (position >= template.written.length) {
                session++
                template = runIn(session)
                position = 0
              }
              const original = template.written[position]!.write
              const event = mutateEvent(random, JSON.parse(original.json))
              const json = JSON.stringify(event)
              // The event and its bytes mutated together, or apart (a write whose json is not its event's).
              const pairing = random.int(4)
              const write = {
                event: pairing === 1 ? original.event : event,
                json: pairing === 2 ? original.json : pairing === 3 ? mutateText(random, original.json) : json,
                ...(original.rawPayload === undefined ? {} : { rawPayload: random.chance(0.3) ? mutateText(random, original.rawPayload) : original.rawPayload }),
              } as EventWrite.EventWrite // a hand-built write: the store must check it as it checks outside data
              const before = shape
              const exit = yield* Effect.exit(log.append(write))
              if (Exit.isSuccess(exit)) {
                // Stored whole: one new row holding exactly the event the log validated.
                expect(JSON.parse(contentShape(connection)).n, label).toBe(JSON.parse(before).n + 1)
                const stored = connection.prepare("SELECT event_json FROM event_log WHERE sequence = ?").get(exit.value) as { event_json: string }
                expect(JSON.parse(stored.event_json), label).toEqual(JSON.parse(write.json))
                tags.set("stored", (tags.get("stored") ?? 0) + 1)
                shape = contentShape(connection)
                // The session went its own way: the next case starts a new one.
                position = template.written.length
                continue
              }
              const tag = outcomeOf(exit, label)
              tags.set(tag, (tags.get(tag) ?? 0) + 1)
              expect(contentShape(connection), `${label}: a refused append changed the log`).toBe(before)
              // Between mutations the valid write goes in, so later mutations meet every kind of fact.
              if (random.chance(0.5)) {
                // Refused only when an earlier stored mutation took one of its ids: the session then ends.
                const appended = yield* Effect.exit(log.append(original))
                if (Exit.isFailure(appended)) {
                  const tag = outcomeOf(appended, `${label}: the valid write`)
                  tags.set(`valid write ${tag}`, (tags.get(`valid write ${tag}`) ?? 0) + 1)
                  position = template.written.length
                  continue
                }
                position++
                shape = contentShape(connection)
              }
            }
          }),
        ),
      )
    }
    if (process.env["MAKA_FUZZ_REPORT"] !== undefined) console.log(JSON.stringify([...tags]))
    expect(tags.get("Rejected:InvalidTransition") ?? 0, JSON.stringify([...tags])).toBeGreaterThan(INPUTS / 4)
  }, TIMEOUT_MS)
})
