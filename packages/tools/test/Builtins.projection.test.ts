/**
 * The builtins' results fit the model-visible projection (docs/log-format.md, `DurableToolProjection`:
 * 256 KiB encoded, 20,000 JSON values): a `read_file` page with its JSON escapes and closing note,
 * a `search_text` result that stops (`truncated`) before it would not fit, and a `list_files`
 * listing too large for one result refused in words. A long line costs `read_file` only its page.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { EventWrite, Limits } from "@maka/facts"
import { Builtins, type Tool } from "@maka/tools"
import { Effect } from "effect"
import { call, failureOf, jsonOf, type Outcome, textOf, workspaceFixture } from "./fixtures.ts"

const KIB = 1024
const MIB = 1024 * KIB

/** The kind of projection the journal would freeze for a successful outcome. */
const projectionKind = (outcome: Outcome): string => {
  if (outcome._tag !== "Succeeded") throw new Error(`expected a result, got ${JSON.stringify(outcome).slice(0, 300)}`)
  return EventWrite.freezeProjection(outcome.output).kind
}

const NOTE = /^\[(?:showing lines \d+-\d+; the file continues|page cut at its byte limit after line \d+|line \d+ is longer than one page \(.*\); it was cut); read on with offset (\d+)\]$/

/**
 * Reads `file` page after page, each from the offset its closing note gives, checking that every
 * page's projection is text; returns the lines read by number and whether a line was cut.
 */
const readAll = (tool: Tool.Tool, file: string) =>
  Effect.gen(function* () {
    const lines = new Map<number, string>()
    let offset = 1
    let pages = 0
    let cut = false
    while (true) {
      const outcome = yield* call(tool, { path: file, offset })
      assert.strictEqual(projectionKind(outcome), "text", `page at offset ${offset}`)
      pages++
      const text = textOf(outcome).split("\n")
      const note = NOTE.exec(text.at(-1)!)
      if (note !== null) {
        text.pop()
        cut ||= note[0].includes("it was cut")
      }
      for (const line of text) {
        const numbered = /^ *(\d+)\t([^]*)$/.exec(line)
        assert.isNotNull(numbered, line.slice(0, 80))
        lines.set(Number(numbered![1]), numbered![2]!)
      }
      if (note === null) return { lines, pages, cut }
      assert.strictEqual(Number(note[1]), Math.max(...lines.keys()) + 1)
      offset = Number(note[1])
    }
  })

const fileLines = (content: string): Array<string> => {
  const lines = content.split("\n")
  if (lines.at(-1) === "") lines.pop()
  return lines.map((line) => (line.endsWith("\r") ? line.slice(0, -1) : line))
}

describe("read_file pages fit the model-visible projection", () => {
  it.effect("cuts a page where its encoded text and note would pass 256 KiB, escapes counted, and reads on from there", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const tool = Builtins.readFile(workspace)
      const files: Record<string, string> = {
        // An ordinary source file: 2,000 lines of 140 characters, two quotes each.
        "big.ts": Array.from({ length: 2000 }, (_, i) => `export const value${String(i).padStart(5, "0")} = "${"x".repeat(110)}" // line`).join("\n"),
        // Control characters are written \u0001 (6 bytes), quotes and backslashes \" and \\ (2 bytes).
        "escapes.txt": Array.from({ length: 1500 }, (_, i) => `${"\u0001".repeat(i % 200)}"\\${"\t".repeat(50)}`).join("\r\n"),
        // Multibyte text whose characters straddle the 64 KiB chunks it is read in.
        "wide.txt": Array.from({ length: 3000 }, (_, i) => `é😀${"ü".repeat(i % 97)}€`).join("\n") + "\n",
      }
      for (const [name, content] of Object.entries(files)) {
        fs.writeFileSync(path.join(root, name), content)
        const { lines, pages, cut } = yield* readAll(tool, name)
        const expected = fileLines(content)
        assert.isFalse(cut, name)
        assert.isAtLeast(pages, 2, name)
        assert.deepStrictEqual([...lines.keys()], expected.map((_, index) => index + 1), name)
        assert.deepStrictEqual([...lines.values()], expected, name)
      }
      const first = textOf(yield* call(tool, { path: "big.ts" }))
      assert.match(first.split("\n").at(-1)!, /^\[page cut at its byte limit after line \d+; read on with offset \d+\]$/)
      // Cut near the limit, not far before it: within a line and the longest note.
      assert.isAbove(Buffer.byteLength(JSON.stringify({ kind: "text", text: first })), Limits.MAX_PROJECTION_BYTES - KIB)
      // A host's larger page is held to what the projection holds.
      const wide = yield* call(Builtins.readFile(workspace, { readFilePageBytes: 4 * MIB }), { path: "escapes.txt" })
      assert.strictEqual(projectionKind(wide), "text")
    }),
  )

  it.effect("shows the page-worth of a line longer than a page, marked as cut, within the projection", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const tool = Builtins.readFile(workspace)
      const long: Record<string, string> = {
        "long.txt": "y".repeat(1 * MIB),
        "quotes.json": '"'.repeat(300 * KIB),
        "emoji.txt": "😀".repeat(100 * KIB),
      }
      for (const [name, line] of Object.entries(long)) {
        fs.writeFileSync(path.join(root, name), `${line}\nnext\n`)
        const outcome = yield* call(tool, { path: name })
        assert.strictEqual(projectionKind(outcome), "text", name)
        const page = textOf(outcome)
        assert.isTrue(page.endsWith(`\n[line 1 is longer than one page (${name}); it was cut; read on with offset 2]`), name)
        const shown = page.slice(0, page.lastIndexOf("\n"))
        assert.isTrue(shown.startsWith(`     1\t${line.slice(0, 100)}`), name)
        assert.isAbove(shown.length, 64 * KIB, name)
        assert.notMatch(shown, /[\uD800-\uDBFF](?![\uDC00-\uDFFF])/, `${name}: half a surrogate pair`)
        assert.strictEqual(textOf(yield* call(tool, { path: name, offset: 2 })), "     2\tnext")
      }
    }),
  )

  it.effect("a 32 MiB line: its page is cut with the note, and the line after it is read past it", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const tool = Builtins.readFile(workspace)
      fs.writeFileSync(path.join(root, "min.js"), `${"x".repeat(32 * MIB)}\nsecond line\n`)
      const first = yield* call(tool, { path: "min.js", limit: 1 })
      assert.match(textOf(first), /\[line 1 is longer than one page \(min\.js\); it was cut; read on with offset 2\]$/)
      const skipped = { outcome: yield* call(tool, { path: "min.js", offset: 2 }) }
      assert.strictEqual(textOf(skipped.outcome), "     2\tsecond line")
    }),
  )
})

describe("search_text reads files as read_file does", () => {
  it.effect("leaves a leading byte-order mark out of the first line, and skips a file with a NUL anywhere", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      fs.writeFileSync(path.join(root, "bom.txt"), "\ufeffneedle here\nneedle again\n")
      // Text for 16 KiB, then a NUL: past the first 8 KiB read_file probes, still a binary file.
      fs.writeFileSync(path.join(root, "late.bin"), `${"needle\n".repeat(2_400)}needle\u0000here\n`)
      const tool = Builtins.searchText(workspace)
      const found = jsonOf(yield* call(tool, { pattern: "needle" })) as { matches: ReadonlyArray<{ path: string; line: number; text: string }> }
      assert.deepStrictEqual(found.matches, [
        { path: "bom.txt", line: 1, text: "needle here" },
        { path: "bom.txt", line: 2, text: "needle again" },
      ])
      const marked = jsonOf(yield* call(tool, { pattern: "\ufeffneedle" })) as { matches: ReadonlyArray<unknown> }
      assert.deepStrictEqual(marked.matches, [])
      assert.include(failureOf(yield* call(Builtins.readFile(workspace), { path: "late.bin" })), "binary file")
    }),
  )
})

describe("search_text stops before its result would not fit the projection", () => {
  it.effect("stops, truncated, before the encoded result would pass 256 KiB", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      fs.writeFileSync(path.join(root, "log.txt"), Array.from({ length: 600 }, () => `ERROR ${"y".repeat(494)}`).join("\n"))
      fs.writeFileSync(path.join(root, "quotes.txt"), Array.from({ length: 600 }, () => `ERROR ${'"'.repeat(494)}`).join("\n"))
      const tool = Builtins.searchText(workspace)
      for (const file of ["log.txt", "quotes.txt"]) {
        const outcome = yield* call(tool, { pattern: "ERROR", path: file, maxResults: 600 })
        assert.strictEqual(projectionKind(outcome), "json", file)
        const result = jsonOf(outcome) as { matches: ReadonlyArray<{ path: string; line: number; text: string }>; truncated: boolean }
        assert.isTrue(result.truncated, file)
        assert.isAbove(result.matches.length, 200, file)
        assert.isBelow(result.matches.length, 600, file)
        assert.deepStrictEqual(result.matches.map((match) => match.line), result.matches.map((_, index) => index + 1))
        // It stopped at the first match that would not have fitted.
        const next = { ...result.matches[0]!, line: result.matches.length + 1 }
        const withNext = { kind: "json", value: { matches: [...result.matches, next], truncated: false } }
        assert.isAbove(Buffer.byteLength(JSON.stringify(withNext)), Limits.MAX_PROJECTION_BYTES, file)
      }
    }),
  )

  it.effect("stops, truncated, before the result would pass 20,000 JSON values", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      fs.writeFileSync(path.join(root, "short.txt"), "x\n".repeat(6_000))
      const tool = Builtins.searchText(workspace, { searchMaxResultsLimit: 10_000 })
      const outcome = yield* call(tool, { pattern: "x", maxResults: 6_000 })
      assert.strictEqual(projectionKind(outcome), "json")
      const result = jsonOf(outcome) as { matches: ReadonlyArray<unknown>; truncated: boolean }
      assert.isTrue(result.truncated)
      // The result object, its list and its flag, then four values a match.
      assert.strictEqual(result.matches.length, Math.floor((Limits.MAX_PROJECTION_NODES - 3) / 4))
    }),
  )
})

describe("list_files refuses a listing too large for one result", () => {
  it.effect("lists what the projection holds and refuses more, saying how many and what to do", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const tool = Builtins.listFiles(workspace)
      fs.mkdirSync(path.join(root, "many"))
      const holds = Math.floor((Limits.MAX_PROJECTION_NODES - 1) / 4)
      for (let index = 0; index < holds; index++) fs.writeFileSync(path.join(root, "many", `file-${String(index).padStart(5, "0")}.json`), "")
      const fits = yield* call(tool, { path: "many" })
      assert.strictEqual(projectionKind(fits), "json")
      assert.strictEqual((jsonOf(fits) as ReadonlyArray<unknown>).length, holds)
      fs.writeFileSync(path.join(root, "many", "one-more.json"), "")
      assert.strictEqual(
        failureOf(yield* call(tool, { path: "many" })),
        `many: has ${holds + 1} entries; one list_files result holds only the first ${holds} (at most 20000 JSON values and 256 KiB); list a subdirectory, or find what you need with search_text`,
      )
    }),
  )

  it.effect("refuses a listing whose names pass 256 KiB encoded", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      fs.mkdirSync(path.join(root, "long"))
      // 1,200 names of 240 bytes: about 300 KB of JSON in only 4,801 values.
      for (let index = 0; index < 1_200; index++) fs.writeFileSync(path.join(root, "long", `${String(index).padStart(4, "0")}${"n".repeat(236)}`), "")
      assert.match(failureOf(yield* call(Builtins.listFiles(workspace), { path: "long/" })), /^long\/: has 1200 entries; one list_files result holds only the first \d+ /)
    }),
  )
})

describe("run_command's result fits the projection", () => {
  it.effect("two full streams of control characters and unreadable bytes are cut to fit, each with its note", () =>
    Effect.gen(function* () {
      const { workspace } = yield* workspaceFixture
      // 64 KiB of \x01 on stdout (6 bytes each in JSON) and of \xff on stderr (U+FFFD, 3 bytes each).
      const outcome = yield* call(Builtins.runCommand(workspace), {
        command: "head -c 70000 /dev/zero | tr '\\0' '\\001'; head -c 70000 /dev/zero | tr '\\0' '\\377' >&2",
      })
      assert.strictEqual(projectionKind(outcome), "json")
      const { stdout, stderr } = jsonOf(outcome) as { readonly stdout: string; readonly stderr: string }
      assert.match(stdout, /^\x01+\n\[truncated: \d+ more bytes\]$/)
      assert.match(stderr, /^\uFFFD+\n\[truncated: \d+ more bytes\]$/)
      // Every byte is either shown or counted in the note.
      assert.strictEqual(stdout.indexOf("\n") + Number(/(\d+) more bytes/.exec(stdout)![1]), 70_000)
      assert.isAbove(stdout.indexOf("\n"), 10 * KIB)
    }),
  )
})
