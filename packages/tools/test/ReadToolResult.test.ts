import { assert, describe, it } from "@effect/vitest"
import { Archive, Canonical, EventWrite, Limits, type ToolCall } from "@maka/facts"
import { Builtins, ReadToolResult, Tool, ToolCatalog } from "@maka/tools"
import { Effect } from "effect"
import { call, failureOf, jsonOf } from "./fixtures.ts"

const EVENT_ID = "0f8fad5b-d9cb-469f-a165-70867728950e"
const OTHER_ID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
const ref = (eventId: string) => Archive.RESOURCE_REF_PREFIX + eventId

/** A reader over results held in memory, as one session's log would answer. */
const readerOf =
  (results: Record<string, ReadToolResult.StoredResult>): ReadToolResult.Reader =>
  (eventId) =>
    Effect.succeed(results[eventId])

/** The placeholder prune makes of `raw`, settled under `EVENT_ID`. */
const placeholderOf = (toolName: string, raw: ToolCall.ToolOutput) => {
  const source: Archive.ArchiveSource = { kind: "projection", projection: EventWrite.freezeProjection(raw) }
  const placeholder = Archive.prepare(EVENT_ID, "call-1", toolName, source)
  if (placeholder === undefined) throw new Error("the fixture must be large enough to archive")
  return { placeholder, body: Archive.body(source) }
}

/** Reads every page from offset 0, following `next`. */
const readAll = (tool: Tool.Tool, resourceRef: string) =>
  Effect.gen(function* () {
    const pages: Array<Archive.ReadPage> = []
    let offset: number | undefined = 0
    while (offset !== undefined) {
      const page = jsonOf(yield* call(tool, { resourceRef, offset })) as Archive.ReadPage
      pages.push(page)
      offset = page.next
    }
    return pages
  })

// Text with quotes, newlines and astral characters, so pages meet escapes and surrogate pairs.
const line = (index: number) => `line ${index}: "quoted" \\ tab\t😀 𝄞 ${"x".repeat(index % 17)}\n`
const largeText = Array.from({ length: 900 }, (_, index) => line(index)).join("")

describe("read_tool_result", () => {
  it.effect("returns the placeholder's first page at offset 0, then the following pages, which join into the whole body", () =>
    Effect.gen(function* () {
      const cases: ReadonlyArray<ToolCall.ToolOutput> = [
        Tool.text(largeText),
        Tool.json(largeText),
        Tool.json({ rows: Array.from({ length: 600 }, (_, index) => ({ index, text: line(index) })) }),
      ]
      for (const raw of cases) {
        const { placeholder, body } = placeholderOf("search_text", raw)
        const tool = ReadToolResult.make(readerOf({ [EVENT_ID]: { toolName: "search_text", raw } }))
        const pages = yield* readAll(tool, ref(EVENT_ID))
        assert.deepStrictEqual(pages[0], placeholder.page)
        assert.isAbove(pages.length, 2)
        assert.strictEqual(pages.map((page) => page.text).join(""), body)
        for (const page of pages) {
          assert.strictEqual(page.totalChars, body.length)
          assert.isAbove(page.text.length, 0)
          // Each page is the longest that keeps the placeholder's model value within one page.
          assert.isAtMost(Canonical.stringify(Archive.modelValue(placeholder.identity, page)).length, Limits.MAX_PAGE_CHARS)
          assert.deepStrictEqual(page, Archive.pageAt(placeholder.identity, body, page.offset))
        }
        assert.notProperty(pages.at(-1)!, "next")
      }
    }),
  )

  it.effect("reads a page from any offset inside the result, and an empty last page at its end", () =>
    Effect.gen(function* () {
      const raw = Tool.text(largeText)
      const { placeholder, body } = placeholderOf("read_file", raw)
      const tool = ReadToolResult.make(readerOf({ [EVENT_ID]: { toolName: "read_file", raw } }))
      const middle = jsonOf(yield* call(tool, { resourceRef: ref(EVENT_ID), offset: 1234 })) as Archive.ReadPage
      assert.strictEqual(middle.offset, 1234)
      assert.isTrue(body.startsWith(middle.text, 1234))
      assert.deepStrictEqual(middle, Archive.pageAt(placeholder.identity, body, 1234))
      assert.deepStrictEqual(jsonOf(yield* call(tool, { resourceRef: ref(EVENT_ID), offset: body.length })), {
        offset: body.length,
        text: "",
        totalChars: body.length,
      })
    }),
  )

  it.effect("refuses an offset past the end or inside a surrogate pair, as a failure the model reads", () =>
    Effect.gen(function* () {
      const raw = Tool.text(largeText)
      const { body } = placeholderOf("read_file", raw)
      const tool = ReadToolResult.make(readerOf({ [EVENT_ID]: { toolName: "read_file", raw } }))
      assert.include(
        failureOf(yield* call(tool, { resourceRef: ref(EVENT_ID), offset: body.length + 1 })),
        `past the end of the result (${body.length} characters)`,
      )
      const pair = body.indexOf("😀") + 1
      assert.include(failureOf(yield* call(tool, { resourceRef: ref(EVENT_ID), offset: pair })), `offset ${pair} splits a character`)
    }),
  )

  it.effect("rejects an offset that is not a non-negative integer, and any other input shape, before it runs", () =>
    Effect.gen(function* () {
      const tool = ReadToolResult.make(() => Effect.die("never read"))
      for (const input of [
        { resourceRef: ref(EVENT_ID), offset: 1.5 },
        { resourceRef: ref(EVENT_ID), offset: -1 },
        { resourceRef: ref(EVENT_ID), offset: "0" },
        { resourceRef: ref(EVENT_ID) },
        { resourceRef: ref(EVENT_ID), offset: 0, path: "a.txt" },
      ]) {
        const outcome = yield* call(tool, input)
        assert.strictEqual(outcome._tag, "Invalid", JSON.stringify(input))
      }
    }),
  )

  it.effect("refuses a resourceRef that is not an archive address without reading", () =>
    Effect.gen(function* () {
      let reads = 0
      const tool = ReadToolResult.make(() => Effect.sync(() => (reads++, undefined)))
      for (const resourceRef of [
        "/etc/passwd",
        "file:///etc/passwd",
        Archive.RESOURCE_REF_PREFIX,
        `${Archive.RESOURCE_REF_PREFIX}../${EVENT_ID}`,
        `${Archive.RESOURCE_REF_PREFIX}${EVENT_ID.toUpperCase()}`,
        `maka://tool-results/${EVENT_ID}`,
      ]) {
        assert.include(failureOf(yield* call(tool, { resourceRef, offset: 0 })), "resourceRef must be the maka://tool-result/<id> address")
      }
      assert.strictEqual(reads, 0)
    }),
  )

  it.effect("refuses an address its reader does not hold, and passes a failed read on as the model's message", () =>
    Effect.gen(function* () {
      const held = ReadToolResult.make(readerOf({ [EVENT_ID]: { toolName: "read_file", raw: Tool.text(largeText) } }))
      assert.strictEqual(
        failureOf(yield* call(held, { resourceRef: ref(OTHER_ID), offset: 0 })),
        `no settled tool result at ${ref(OTHER_ID)} in this session`,
      )
      const broken = ReadToolResult.make(() => Tool.fail("the stored tool result failed its integrity check"))
      assert.strictEqual(
        failureOf(yield* call(broken, { resourceRef: ref(EVENT_ID), offset: 0 })),
        "the stored tool result failed its integrity check",
      )
    }),
  )

  it("is a parallel tool taking {resourceRef, offset}", () => {
    const tool = ReadToolResult.make(() => Effect.die("never read"))
    assert.strictEqual(tool.name, "read_tool_result")
    assert.strictEqual(tool.semantics, "parallel")
    assert.deepStrictEqual(tool.inputSchema["required"], ["resourceRef", "offset"])
    assert.strictEqual(tool.inputSchema["additionalProperties"], false)
    // The archived placeholder tells the model to call this tool by name.
    assert.include(Archive.modelValue(placeholderOf("read_file", Tool.text(largeText)).placeholder.identity, {
      offset: 0,
      text: "",
      totalChars: 0,
    }).readInstructions, tool.name)
  })
})

describe("ReadToolResult.offer", () => {
  const root = { root: "/workspace" }
  const read: ReadToolResult.Reader = () => Effect.die("never read")

  it("adds read_tool_result to a catalog with tools, and leaves an empty catalog empty", () => {
    const host = ToolCatalog.make(Builtins.read(root))
    const offered = ReadToolResult.offer(host, read)
    assert.deepStrictEqual(offered.names, [...host.names, "read_tool_result"].sort())
    assert.notStrictEqual(offered.digest, host.digest)
    assert.strictEqual(ReadToolResult.offer(ToolCatalog.empty, read).names.length, 0)
    assert.strictEqual(ReadToolResult.offer(ToolCatalog.empty, read).digest, ToolCatalog.empty.digest)
  })

  it("refuses a host catalog that already holds a tool named read_tool_result", () => {
    const host = ToolCatalog.make([...Builtins.read(root), ReadToolResult.make(read)])
    assert.throws(() => ReadToolResult.offer(host, read), /read_tool_result appears twice/)
  })
})
