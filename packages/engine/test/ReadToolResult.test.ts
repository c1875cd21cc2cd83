/**
 * `read_tool_result` in a run (docs/engine.md §5.11, scenario 47): over a real SQLite log and the
 * scripted server on loopback, a large result is archived before the next request, the model reads
 * the placeholder's first page and pages on with `page.next` through the log, and a reference of
 * another session is refused. The scripted model answers each request from what it was sent.
 */
import { assert, describe, it } from "@effect/vitest"
import { Archive, Canonical, Limits } from "@maka/facts"
import { FactBuilders, OpenAiSse, Respond, type ScriptedServer } from "@maka/testkit"
import { ReadToolResult, Tool, ToolCatalog } from "@maka/tools"
import Database from "better-sqlite3"
import { Effect, Schema } from "effect"
import { reader } from "../src/internal/read-tool-result.ts"
import { factsOf, kinds } from "./support/harness.ts"
import { input, setup, type Setup } from "./support/setup.ts"

// Quotes, backslashes, newlines and astral characters, so pages meet escapes and surrogate pairs.
const big = Array.from({ length: 700 }, (_, index) => `row ${index}: "value" \\ 😀 ${"x".repeat(index % 13)}\n`).join("")

/** A tool whose result is `big`, far over one page. */
const dump = Tool.make({
  name: "dump",
  description: "Dumps the table.",
  input: Schema.Struct({ table: Schema.String }),
  semantics: "parallel",
  execute: () => Effect.succeed(Tool.text(big)),
})

interface WireMessage {
  readonly role: string
  readonly content?: string | null
  readonly tool_call_id?: string
}

interface WireBody {
  readonly messages: ReadonlyArray<WireMessage>
  readonly tools?: ReadonlyArray<{ readonly function: { readonly name: string } }>
}

const bodyOf = (request: ScriptedServer.RecordedRequest): WireBody => request.json as WireBody

/** The tool messages answering the request's last assistant message. */
const latestResults = (request: ScriptedServer.RecordedRequest): ReadonlyArray<WireMessage> => {
  const messages = bodyOf(request).messages
  const last = messages.findLastIndex((message) => message.role === "assistant")
  return last < 0 ? [] : messages.slice(last + 1).filter((message) => message.role === "tool")
}

const callOf = (id: string, name: string, args: unknown) => ({ id, name, arguments: [JSON.stringify(args)] })
const toolCalls = (...calls: ReadonlyArray<ReturnType<typeof callOf>>) => Respond.sse(OpenAiSse.response({ toolCalls: calls }))
const answer = (text: string) => Respond.sse(OpenAiSse.response({ text: [text] }))

/** The archived placeholder a tool message holds, or `undefined` when it holds something else. */
const placeholderIn = (content: string | null | undefined): { readonly resourceRef: string; readonly page: Archive.ReadPage } | undefined => {
  try {
    const value = JSON.parse(content ?? "") as { readonly kind?: unknown; readonly resourceRef: string; readonly page: Archive.ReadPage }
    return value.kind === Archive.ARCHIVED_RESULT_KIND ? value : undefined
  } catch {
    return undefined
  }
}

const FOREIGN_CALL = "call-foreign"
const MALFORMED_CALL = "call-malformed"

/**
 * The scripted model: it calls `dump` first; given the archived placeholder it reads on from
 * `page.next` (and tries a reference of another session and a malformed one); it reads each page's
 * `next` until the last page, then answers.
 */
const modelFor = (foreignRef: () => string) => (request: ScriptedServer.RecordedRequest): Respond.Responder => {
  const results = latestResults(request)
  if (results.length === 0) return toolCalls(callOf("call-dump", "dump", { table: "rows" }))
  const dumped = results.find((result) => result.tool_call_id === "call-dump")
  if (dumped !== undefined) {
    // A result sent whole (not archived) is no placeholder: the model answers, and the test's checks tell.
    const placeholder = placeholderIn(dumped.content)
    if (placeholder === undefined || foreignRef() === "") return answer("Stored.")
    return toolCalls(
      callOf("call-read-1", ReadToolResult.NAME, { resourceRef: placeholder.resourceRef, offset: placeholder.page.next }),
      callOf(FOREIGN_CALL, ReadToolResult.NAME, { resourceRef: foreignRef(), offset: 0 }),
      callOf(MALFORMED_CALL, ReadToolResult.NAME, { resourceRef: "maka://tool-result/../events.sqlite", offset: 0 }),
    )
  }
  const read = results.find((result) => result.tool_call_id?.startsWith("call-read-") === true)!
  const page = JSON.parse(read.content!) as Archive.ReadPage
  if (page.next === undefined) return answer("Done.")
  const index = Number(read.tool_call_id!.slice("call-read-".length)) + 1
  const resourceRef = JSON.parse(bodyOf(request).messages.find((message) => message.tool_call_id === "call-dump")!.content!).resourceRef
  return toolCalls(callOf(`call-read-${index}`, ReadToolResult.NAME, { resourceRef, offset: page.next }))
}

/** The server answers each request with the scripted model's reply to it. */
const reactive = (model: (request: ScriptedServer.RecordedRequest) => Respond.Responder) => {
  let server: ScriptedServer.ScriptedServer | undefined
  return {
    options: {
      onProgress: (progress: ScriptedServer.Progress) => {
        if (progress.type === "request") server!.push(model(progress.request))
      },
    },
    attach: (context: Setup) => {
      server = context.server
    },
  }
}

const run = (context: Setup, sessionId: string, index: number) =>
  context.engine.run(
    input(context, "Dump the table and read all of it.", ToolCatalog.make([dump]), {
      invocation: FactBuilders.invocation({ sessionId, turnId: `turn-${index}`, runId: `run-${index}`, invocationId: `invocation-${index}` }),
    }),
  )

describe("read_tool_result (docs/engine.md §5.11)", () => {
  it.live("pages through an archived result from page.next to the end, reads it through the log, and refuses another session's reference (scenario 47)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        let foreignRef = ""
        const server = reactive(modelFor(() => foreignRef))
        const context = yield* setup(server.options)
        server.attach(context)
        // Another session settles (and archives) a large result of its own.
        assert.deepStrictEqual((yield* run(context, "session-other", 1)).outcome, { kind: "completed" })
        const foreign = factsOf(yield* context.log.events("session-other"), "tool_result_archived")
        assert.strictEqual(foreign.length, 1)
        foreignRef = Archive.resourceRef(foreign[0]!.placeholder.identity.runtimeEventId)
        const before = context.server.requests().length

        assert.deepStrictEqual((yield* run(context, "session-1", 2)).outcome, { kind: "completed" })
        const events = yield* context.log.events("session-1")
        const requests = context.server.requests().slice(before)
        const body = Canonical.stringify(big)

        // Every request of a run with tools offers read_tool_result beside the host's tools.
        for (const request of requests) {
          assert.deepStrictEqual(bodyOf(request).tools?.map((tool) => tool.function.name), ["dump", ReadToolResult.NAME])
        }
        // The large result is archived before the next request, which holds the placeholder and its first page.
        const archives = factsOf(events, "tool_result_archived")
        assert.strictEqual(archives.length, 1, "only the dumped result is archived; the pages read are each within one page")
        const identity = archives[0]!.placeholder.identity
        const settled = events.find((stored) => stored.event.id === identity.runtimeEventId)!
        assert.strictEqual(settled.event.fact.kind, "tool_settled")
        const placeholderText = latestResults(requests[1]!).find((result) => result.tool_call_id === "call-dump")!.content!
        // The request carries the placeholder instead of the result: no message of it holds the
        // result's last row, which lies pages past the first (docs/log-format.md §2.9).
        const lastRow = big.slice(big.lastIndexOf("row "))
        for (const message of bodyOf(requests[1]!).messages) assert.notInclude(message.content ?? "", lastRow)
        assert.isAtMost(placeholderText.length, Limits.MAX_PAGE_CHARS)
        const placeholder = JSON.parse(placeholderText) as ReturnType<typeof Archive.modelValue>
        assert.strictEqual(placeholder.kind, Archive.ARCHIVED_RESULT_KIND)
        assert.strictEqual(placeholder.resourceRef, `maka://tool-result/${settled.event.id}`)
        assert.strictEqual(placeholder.page.offset, 0)
        assert.isTrue(body.startsWith(placeholder.page.text))
        assert.isDefined(placeholder.page.next)

        // Each read returns the page at the offset the model passed: page.next of the one before.
        const pages: Array<Archive.ReadPage> = [placeholder.page]
        for (const request of requests.slice(2)) {
          const read = latestResults(request).find((result) => result.tool_call_id?.startsWith("call-read-") === true)!
          const page = JSON.parse(read.content!) as Archive.ReadPage
          assert.strictEqual(page.offset, pages.at(-1)!.next)
          assert.deepStrictEqual(page, Archive.pageAt(identity, body, page.offset))
          pages.push(page)
        }
        assert.isAbove(pages.length, 2)
        assert.isUndefined(pages.at(-1)!.next)
        assert.strictEqual(pages.map((page) => page.text).join(""), body)

        // References of another session, or that are no archive address, are known failures the model reads.
        const refused = latestResults(requests[2]!)
        assert.strictEqual(
          refused.find((result) => result.tool_call_id === FOREIGN_CALL)!.content,
          `no settled tool result at ${foreignRef} in this session`,
        )
        assert.include(refused.find((result) => result.tool_call_id === MALFORMED_CALL)!.content!, "resourceRef must be the maka://tool-result/<id> address")
        const outcomes = kinds(events).filter((kind) => kind.startsWith("tool_settled"))
        assert.deepStrictEqual(outcomes, [
          "tool_settled:succeeded",
          "tool_settled:succeeded",
          "tool_settled:failed",
          "tool_settled:failed",
          ...pages.slice(2).map(() => "tool_settled:succeeded"),
        ])

        // The raw result stays readable through the log, in its own session only.
        const raw = yield* context.log.readToolResult("session-1", settled.event.id)
        assert.deepStrictEqual(raw, { toolName: "dump", raw: { format: "text", value: big } })
        const elsewhere = yield* Effect.flip(context.log.readToolResult("session-other", settled.event.id))
        assert.strictEqual(elsewhere.reason._tag, "Rejected")
      }),
    ))

  it.live("refuses a host tool named read_tool_result at run start, writing nothing", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* setup({ script: [] })
        const own = ReadToolResult.make(() => Tool.fail("the host's own reader"))
        const error = yield* Effect.flip(
          context.engine.run(input(context, "Read.", ToolCatalog.make([dump, own]), { invocation: FactBuilders.invocation({ sessionId: "session-own" }) })),
        )
        assert.strictEqual(error.reason._tag, "InvalidInput")
        assert.include(error.message, "the tool name read_tool_result is reserved")
        assert.deepStrictEqual(yield* context.log.events("session-own"), [])
        assert.strictEqual(context.server.requests().length, 0)
      }),
    ))

  it.live("reads through the log: a result whose stored bytes changed fails its integrity check", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const server = reactive(modelFor(() => ""))
        const context = yield* setup(server.options)
        server.attach(context)
        assert.deepStrictEqual((yield* run(context, "session-1", 3)).outcome, { kind: "completed" })
        const identity = factsOf(yield* context.log.events("session-1"), "tool_result_archived")[0]!.placeholder.identity
        const read = reader(context.log, "session-1")
        assert.deepStrictEqual(yield* read(identity.runtimeEventId), { toolName: "dump", raw: { format: "text", value: big } })
        assert.isUndefined(yield* read("0f8fad5b-d9cb-469f-a165-70867728950e"))
        assert.isUndefined(yield* reader(context.log, "session-other")(identity.runtimeEventId))
        // Another process rewrites the stored payload with bytes of the same length.
        const database = new Database(context.file)
        const row = database.prepare("SELECT payload FROM tool_result_payloads WHERE event_id = ?").get(identity.runtimeEventId) as {
          readonly payload: string
        }
        database.prepare("UPDATE tool_result_payloads SET payload = ? WHERE event_id = ?").run(row.payload.replace("row 0", "row O"), identity.runtimeEventId)
        database.close()
        const failure = yield* Effect.flip(read(identity.runtimeEventId))
        assert.strictEqual(failure.message, "the stored tool result failed its integrity check")
      }),
    ))
})
