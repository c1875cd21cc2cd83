/**
 * Ids and texts at admission through the facade, fuzzed: random UTF-16 with lone surrogates, NUL
 * and very long strings as the session id and the message. Each input is admitted and its run
 * sealed, or refused `InvalidInput` with nothing written; the log always reopens with nothing to seal.
 */
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, assert, describe, it } from "vitest"
import * as EngineError from "../src/EngineError.ts"
import { createEngine } from "../src/Facade.ts"

const cleanups: Array<() => Promise<void> | void> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

/** A small seeded generator (mulberry32), so a failing case can be replayed. */
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const pieces = ["a", "Z", "-", " ", "\u0000", "\ud800", "\udfff", "\ud83d\ude00", "\ud83d", "é", "\uffff", "\u2028", "\n"]

const fuzzText = (next: () => number): string => {
  const shape = Math.floor(next() * 6)
  if (shape === 0) return ""
  if (shape === 1) return "x".repeat(1 + Math.floor(next() * 300_000))
  if (shape === 2) return String.fromCharCode(...Array.from({ length: 1 + Math.floor(next() * 40) }, () => Math.floor(next() * 0x10000)))
  const length = 1 + Math.floor(next() * 30)
  return Array.from({ length }, () => pieces[Math.floor(next() * pieces.length)]!).join("")
}

const sqlitePath = createRequire(path.resolve(import.meta.dirname, "../../event-log/package.json")).resolve("better-sqlite3")

/** The number of stored events, read through a separate read-only connection. */
const storedCount = async (database: string): Promise<number> => {
  const Database = ((await import(sqlitePath)) as { default: new (file: string, options: object) => any }).default
  const connection = new Database(database, { readonly: true, fileMustExist: true })
  try {
    return (connection.prepare("SELECT count(*) AS n FROM event_log").get() as { n: number }).n
  } finally {
    connection.close()
  }
}

describe("Admission fuzz", () => {
  it("admits and seals, or refuses InvalidInput with nothing written, every fuzzed session id and message; the log reopens", async () => {
    const folder = fs.mkdtempSync(path.join(os.tmpdir(), "maka-fuzz-"))
    cleanups.push(() => fs.rmSync(folder, { recursive: true, force: true }))
    const server = await ScriptedServer.start({ script: [{ respond: Respond.sse(OpenAiSse.response({ text: ["Ok."] })), repeat: true }] })
    cleanups.push(() => server.close())
    const database = path.join(folder, "events.sqlite")
    const engine = await createEngine({ database, synchronous: "NORMAL" })
    cleanups.push(() => engine.close())
    const provider = { kind: "openai-compatible", baseUrl: `${server.url}/v1`, model: "test-model" } as const
    const next = random(0x5eed10)
    let admitted = 0
    let refused = 0
    for (let index = 0; index < 100; index++) {
      const sessionId = index % 2 === 0 ? fuzzText(next) : `session-${index}`
      const message = index % 2 === 1 || next() < 0.3 ? fuzzText(next) : "Hi."
      const label = `case ${index}: ${JSON.stringify({ sessionId: sessionId.slice(0, 40), message: message.slice(0, 40) })}`
      const before = await storedCount(database)
      const started = await engine.start({ sessionId, provider, message }).then(
        (run) => ({ run }),
        (error: unknown) => ({ error }),
      )
      if ("error" in started) {
        assert.instanceOf(started.error, EngineError.EngineError, label)
        assert.strictEqual((started.error as EngineError.EngineError).reason._tag, "InvalidInput", label)
        assert.strictEqual(await storedCount(database), before, label)
        refused++
        continue
      }
      const result = await started.run.wait()
      assert.strictEqual(result.outcome.kind, "completed", label)
      const events = await engine.events(sessionId)
      assert.strictEqual(events[events.length - 1]?.event.fact.kind, "invocation_ended", label)
      admitted++
    }
    assert.isAbove(admitted, 10)
    assert.isAbove(refused, 10)
    await engine.close()
    const reopened = await createEngine({ database })
    cleanups.push(() => reopened.close())
    assert.deepStrictEqual(await reopened.recover(), { sealed: [], count: 0, unsealed: [] })
  }, 120_000)
})
