/**
 * The parts of the load suite (test/LoadPostgres.test.ts) that hold no scenario: the scripted server's
 * routing of many concurrent sessions (each request answered by its session, turn and step, read from
 * the request itself), a `work` tool whose effect is counted per operation key, a log wrapper that
 * records every sequence the store acknowledged, and the re-append of a whole log into a fresh one.
 */
import { assert } from "@effect/vitest"
import type { Event } from "@maka/facts"
import { EventWrite } from "@maka/facts"
import type { EventLog } from "@maka/event-log"
import * as LogTesting from "@maka/event-log/testing"
import { History, OpenAiSse, Respond, type ScriptedServer } from "@maka/testkit"
import { Tool, ToolCatalog } from "@maka/tools"
import { Deferred, Effect, Result, Schema } from "effect"

/** The user message of a session's turn; the server routes on it. */
export const messageOf = (sessionId: string, turn: string): string => `load ${sessionId} ${turn}`

/** The operation key the `work` tool receives for step `step` (from 0) of a turn. */
export const operationKey = (sessionId: string, turn: string, step: number): string => `${sessionId}/${turn}/${step}`

interface WireMessage {
  readonly role?: unknown
  readonly content?: unknown
}

const textOf = (content: unknown): string =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
      ? content.map((part: { readonly text?: unknown }) => (typeof part?.text === "string" ? part.text : "")).join("")
      : ""

/**
 * `session|turn|step` of a chat-completions request: the last user message names the session and
 * the turn, and the tool results after it count the steps already taken.
 */
const routeOf = (request: ScriptedServer.RecordedRequest): string | undefined => {
  const json = request.json as { readonly messages?: ReadonlyArray<WireMessage> } | undefined
  const messages = json?.messages ?? []
  let last = -1
  messages.forEach((message, index) => {
    if (message.role === "user") last = index
  })
  if (last === -1) return undefined
  const match = /^load (\S+) (\S+)$/.exec(textOf(messages[last]!.content).trim())
  if (match === null) return undefined
  const step = messages.slice(last + 1).filter((message) => message.role === "tool").length
  return `${match[1]}|${match[2]}|${step}`
}

const routes = new WeakMap<ScriptedServer.RecordedRequest, string | undefined>()
const routeOfCached = (request: ScriptedServer.RecordedRequest): string | undefined => {
  if (!routes.has(request)) routes.set(request, routeOf(request))
  return routes.get(request)
}

/**
 * The script of one turn: steps 0 … steps−1 each call `work` once, step `steps` answers. Every entry
 * is used once, so a request sent twice finds no entry and is answered 500 (its run fails).
 */
export const turnScript = (sessionId: string, turn: string, steps: number): ReadonlyArray<ScriptedServer.ScriptEntry> =>
  Array.from({ length: steps + 1 }, (_, step) => ({
    match: (request: ScriptedServer.RecordedRequest) => routeOfCached(request) === `${sessionId}|${turn}|${step}`,
    respond:
      step < steps
        ? Respond.sse(
            OpenAiSse.response({
              toolCalls: [
                { id: `call-${sessionId}-${turn}-${step}`, name: "work", arguments: [JSON.stringify({ key: operationKey(sessionId, turn, step) })] },
              ],
            }),
          )
        : Respond.sse(OpenAiSse.response({ text: [`Done ${turn}.`] })),
  }))

/** A hold on one operation: `entered` once its effect starts, which then waits for `release`. */
export interface Gate {
  readonly entered: Deferred.Deferred<void>
  readonly release: Deferred.Deferred<void>
}

export interface Work {
  readonly catalog: ToolCatalog.ToolCatalog
  /** How many times each operation key's effect ran. */
  readonly effects: Map<string, number>
  /** Holds the effect of `key` until the gate's release; call before the run reaches it. */
  readonly hold: (key: string) => Effect.Effect<Gate>
}

/** The `work` tool, one catalog for both engines (a successor must see the paused run's catalog). */
export const makeWork = (): Work => {
  const effects = new Map<string, number>()
  const gates = new Map<string, Gate>()
  const catalog = ToolCatalog.make([
    Tool.make({
      name: "work",
      description: "Does one unit of work, named by its key.",
      input: Schema.Struct({ key: Schema.String }),
      semantics: "parallel",
      execute: ({ key }) =>
        Effect.gen(function* () {
          const gate = gates.get(key)
          if (gate !== undefined) {
            yield* Deferred.succeed(gate.entered, undefined)
            yield* Deferred.await(gate.release)
          }
          effects.set(key, (effects.get(key) ?? 0) + 1)
          return Tool.text(`worked ${key}`)
        }),
    }),
  ])
  const hold = (key: string) =>
    Effect.gen(function* () {
      const gate: Gate = { entered: yield* Deferred.make<void>(), release: yield* Deferred.make<void>() }
      gates.set(key, gate)
      return gate
    })
  return { catalog, effects, hold }
}

/** Every write a log acknowledged, by sequence: the event id it stored there. */
export type Acknowledged = Map<number, string>

/**
 * The same log, recording the sequence and event id of every write an append acknowledged (the
 * trailing writes a batch builds included). A write acknowledged twice must name the same event.
 */
export const acknowledging = (log: EventLog.EventLogShape, acknowledged: Acknowledged): EventLog.EventLogShape => {
  const record = (writes: ReadonlyArray<EventWrite.EventWrite>, sequences: ReadonlyArray<number>) =>
    Effect.sync(() => {
      assert.strictEqual(sequences.length, writes.length, "one acknowledged sequence per write")
      sequences.forEach((sequence, index) => {
        const id = writes[index]!.event.id
        const known = acknowledged.get(sequence)
        assert.isTrue(known === undefined || known === id, `sequence ${sequence} acknowledged for ${known} and ${id}`)
        acknowledged.set(sequence, id)
      })
    })
  return {
    ...log,
    append: (write) => Effect.tap(log.append(write), (sequence) => record([write], [sequence])),
    appendBatch: (writes, complete) => {
      let trailing: ReadonlyArray<EventWrite.EventWrite> = []
      const completing =
        complete === undefined
          ? undefined
          : (sequences: ReadonlyArray<number>, prior?: (sessionId: string) => number | undefined) => {
              trailing = complete(sequences, prior)
              return trailing
            }
      return Effect.tap(log.appendBatch(writes, completing), (sequences) => record([...writes, ...trailing], sequences))
    },
  }
}

/** The write that stored `stored` again: a successful settlement rebuilt from its raw result. */
const rewrite = (log: EventLog.EventLogShape, stored: Event.StoredEvent) =>
  Effect.gen(function* () {
    const fact = stored.event.fact
    if (fact.kind === "tool_settled" && fact.outcome.kind === "succeeded") {
      const raw = yield* log.readToolResult(stored.event.invocation.sessionId, stored.event.id)
      return Result.getOrThrow(
        EventWrite.toolSuccess({
          id: stored.event.id,
          recordedAt: stored.event.recordedAt,
          invocation: stored.event.invocation,
          operationId: fact.operationId,
          output: raw.raw,
        }),
      )
    }
    return Result.getOrThrow(EventWrite.plain(stored.event))
  })

/**
 * Re-appends `events` (every stored event of the log, in sequence order) into a fresh SQLite log in
 * one batch: the store's own validation accepts each again. A sequence the server never committed
 * (an identity value a rolled-back transaction took) is filled by the opening of an unrelated
 * session, so every event keeps its sequence and every digest that names sequences still holds.
 * Returns the fresh log, the sequence each of `events` got there, and how many were filled.
 */
export const reappend = (log: EventLog.EventLogShape, events: ReadonlyArray<Event.StoredEvent>) =>
  Effect.gen(function* () {
    const writes: Array<EventWrite.EventWrite> = []
    const originals: Array<number> = []
    let next = 1
    let filled = 0
    for (const stored of events) {
      while (next < stored.sequence) {
        filled++
        const filler = new History.History({ sessionId: `filler-${filled}`, firstId: 1_000_000_000 + filled })
        filler.open({ turnId: `filler-turn-${filled}`, runId: `filler-run-${filled}`, invocationId: `filler-invocation-${filled}` })
        writes.push(...filler.writes)
        next++
      }
      originals.push(writes.length)
      writes.push(yield* rewrite(log, stored))
      next = stored.sequence + 1
    }
    const { log: fresh } = yield* LogTesting.makeTemporary({ synchronous: "NORMAL" })
    const sequences = yield* fresh.appendBatch(writes)
    return { fresh, sequences: originals.map((index) => sequences[index]!), filled }
  })
