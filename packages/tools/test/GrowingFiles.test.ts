/**
 * A file that grows while a builtin reads it (a log a background job writes): read_file reads no
 * further than a bounded margin past its size when it was opened, and search_text no further than
 * that size (at most its 8 MiB limit), so neither chases a file that never stops growing (the
 * tools README, the builtin set). The file here never ends: every read returns what it asks.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type * as fs from "node:fs/promises"
import { defaults } from "../src/Defaults.ts"
import { readPage } from "../src/internal/read-file.ts"
import { readOpened } from "../src/internal/search-text.ts"

/** A handle over an endless file of `x\n` lines; `asked` adds up the bytes its reads returned. */
const endless = () => {
  const counts = { asked: 0 }
  const handle = {
    read: async (buffer: Buffer, offset: number, length: number) => {
      // A turn of the event loop per read, as a real read takes: a test timeout can fire.
      await new Promise((resolve) => setImmediate(resolve))
      for (let index = 0; index < length; index++) buffer[offset + index] = index % 2 === 0 ? 0x78 : 0x0a
      counts.asked += length
      return { bytesRead: length, buffer }
    },
  } as unknown as fs.FileHandle
  return { counts, handle }
}

describe("a file that grows while it is read", () => {
  it.effect("read_file reads no further than a bounded margin past the size it had when opened", () =>
    Effect.gen(function* () {
      const { counts, handle } = endless()
      // An offset past any line the file had: the read scans to its end, which never comes.
      const page = yield* readPage(handle, "grow.log", 1e12, 10, defaults, new AbortController().signal, 100)
      assert.deepStrictEqual(page.lines, [])
      assert.isAtMost(counts.asked, 100 + 1024 * 1024)
      assert.isAbove(page.seen, 0)
    }),
  )

  it.effect("read_file leaves the line the bound cut for the next page, which its note asks for", () =>
    Effect.gen(function* () {
      const { handle } = endless()
      // 5 bytes at opening, read to 1 MiB past them: lines 1..524290 are whole, 524291 is cut.
      const page = yield* readPage(handle, "grow.log", 524_289, 10, defaults, new AbortController().signal, 5)
      assert.strictEqual(page.lines.length, 2)
      assert.strictEqual(page.stop, "limit")
    }),
  )

  it.effect("search_text reads no more than the file held when opened (at most its limit)", () =>
    Effect.gen(function* () {
      const { counts, handle } = endless()
      const content = yield* readOpened(handle, 10)
      assert.strictEqual(content.toString("latin1"), "x\nx\nx\nx\nx\n")
      assert.strictEqual(counts.asked, 10)
    }),
  )
})
