import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Builtins, Defaults, ToolCatalog } from "@maka/tools"
import { Effect } from "effect"
import { call, definitionError, failureOf, jsonOf, textOf, workspaceFixture } from "./fixtures.ts"

const KIB = 1024

describe("Builtins sets", () => {
  it.effect("offer read tools by default and write and command tools only when asked", () =>
    Effect.gen(function* () {
      const { workspace } = yield* workspaceFixture
      const names = (level: Builtins.Level) => ToolCatalog.make(Builtins.forLevel(level, workspace)).names
      assert.deepStrictEqual(names("none"), [])
      assert.deepStrictEqual(names("read"), ["list_files", "read_file", "search_text"])
      assert.deepStrictEqual(names("write"), ["list_files", "read_file", "search_text", "write_file"])
      assert.deepStrictEqual(names("all"), ["list_files", "read_file", "run_command", "search_text", "write_file"])
      // The catalog digest does not depend on where the workspace is.
      const other = yield* workspaceFixture
      assert.strictEqual(
        ToolCatalog.make(Builtins.all(workspace)).digest,
        ToolCatalog.make(Builtins.all(other.workspace)).digest,
      )
    }),
  )

  it.effect("refuse limit overrides that are not positive integers of a known name, or a default above its maximum", () =>
    Effect.gen(function* () {
      const { workspace } = yield* workspaceFixture
      const refused = (overrides: object) => definitionError(() => Builtins.all(workspace, overrides))
      assert.include(refused({ commandTimeoutSeconds: 0 }), "commandTimeoutSeconds must be a positive integer, got 0")
      assert.include(refused({ commandOutputBytes: Infinity }), "commandOutputBytes must be a positive integer, got Infinity")
      assert.include(refused({ readFilePageBytes: 1.5 }), "readFilePageBytes must be a positive integer, got 1.5")
      assert.include(refused({ searchLineChars: "500" }), 'searchLineChars must be a positive integer, got "500"')
      assert.include(refused({ commandTimeoutSecond: 5 }), 'builtin limit "commandTimeoutSecond" is not one')
      assert.include(refused({ workspaceMarker: "x" }), 'builtin limit "workspaceMarker" is not one')
      assert.include(
        refused({ commandMaxTimeoutSeconds: 60 }),
        "commandTimeoutSeconds (120) exceeds commandMaxTimeoutSeconds (60)",
      )
      assert.include(refused({ binaryProbeBytes: 2 ** 40 }), "binaryProbeBytes must be at most 1048576, got 1099511627776")
      assert.include(refused({ searchMaxFileBytes: 2 ** 31 }), "searchMaxFileBytes must be at most 1073741824")
      assert.include(refused({ commandOutputBytes: 64 * 1024 * 1024 }), "commandOutputBytes must be at most 33554432")
      assert.strictEqual(Builtins.all(workspace, { binaryProbeBytes: 2 ** 20, searchMaxFileBytes: 2 ** 30, commandOutputBytes: 2 ** 25 }).length, 5)
      assert.include(refused({ readFileLimitLines: 200_000 }), "readFileLimitLines (200000) exceeds readFileMaxLimitLines")
      assert.include(refused({ searchMaxResults: 5_000 }), "searchMaxResults (5000) exceeds searchMaxResultsLimit")
      // In range, both ways round, and an absent value keeps its default.
      const overrides: object = { commandTimeoutSeconds: 30, commandMaxTimeoutSeconds: 30, commandOutputBytes: undefined }
      const tool = Builtins.runCommand(workspace, overrides)
      assert.strictEqual((jsonOf(yield* call(tool, { command: "echo ok" })) as { stdout: string }).stdout, "ok\n")
      assert.strictEqual(Builtins.read(workspace, { readFileLimitLines: 1, readFileMaxLimitLines: 1 }).length, 3)
    }),
  )
})

describe("read_file", () => {
  it.effect("returns numbered lines, pages with offset and limit, and says how to read on", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      fs.writeFileSync(path.join(root, "a.txt"), "one\r\ntwo\nthree\nfour")
      const tool = Builtins.readFile(workspace)
      assert.strictEqual(textOf(yield* call(tool, { path: "a.txt" })), "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour")
      assert.strictEqual(
        textOf(yield* call(tool, { path: "a.txt", offset: 2, limit: 2 })),
        "     2\ttwo\n     3\tthree\n[showing lines 2-3; the file continues; read on with offset 4]",
      )
      assert.strictEqual(textOf(yield* call(tool, { path: "./a.txt", offset: 4 })), "     4\tfour")
      assert.include(failureOf(yield* call(tool, { path: "a.txt", offset: 5 })), "past the end of the file (4 lines)")
      fs.writeFileSync(path.join(root, "empty.txt"), "")
      assert.strictEqual(textOf(yield* call(tool, { path: "empty.txt" })), "(empty file)")
    }),
  )

  it.effect("reads the default 2,000 lines of a huge file within the 256 KiB page", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const line = "x".repeat(99)
      fs.writeFileSync(path.join(root, "many.txt"), `${line}\n`.repeat(200_000))
      const tool = Builtins.readFile(workspace)
      const page = textOf(yield* call(tool, { path: "many.txt" }))
      const lines = page.split("\n")
      assert.strictEqual(lines.length, Defaults.defaults.readFileLimitLines + 1)
      assert.strictEqual(lines.at(-1), "[showing lines 1-2000; the file continues; read on with offset 2001]")
      const wide = textOf(yield* call(tool, { path: "many.txt", offset: 100_000, limit: 100_000 }))
      assert.isAtMost(Buffer.byteLength(wide), Defaults.defaults.readFilePageBytes + 200)
      assert.match(wide.split("\n").at(-1)!, /^\[page cut at its byte limit after line \d+; read on with offset \d+\]$/)
      assert.match(wide, /^100000\t/)
      // One line longer than a page is cut to the page and marked.
      fs.writeFileSync(path.join(root, "long.txt"), "y".repeat(1024 * KIB))
      const long = textOf(yield* call(tool, { path: "long.txt" }))
      assert.isAtMost(Buffer.byteLength(long), Defaults.defaults.readFilePageBytes + 200)
      assert.match(long, /\[line 1 is longer than one page \(long\.txt\); it was cut; read on with offset 2\]$/)
    }),
  )

  it.effect("refuses a binary file, a directory and a missing file as ToolFailures", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      fs.writeFileSync(path.join(root, "image.png"), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0x0d, 0x0a]))
      fs.mkdirSync(path.join(root, "dir"))
      const tool = Builtins.readFile(workspace)
      assert.include(failureOf(yield* call(tool, { path: "image.png" })), "binary file")
      assert.include(failureOf(yield* call(tool, { path: "dir" })), "is a directory")
      assert.strictEqual(failureOf(yield* call(tool, { path: "nope.txt" })), "nope.txt: no such file or directory")
    }),
  )

  it.effect("refuses paths that escape the root through .., absolute paths and symlinks", () =>
    Effect.gen(function* () {
      const { root, outside, workspace } = yield* workspaceFixture
      fs.writeFileSync(path.join(outside, "secret.txt"), "secret")
      fs.writeFileSync(path.join(root, "inside.txt"), "inside")
      fs.symlinkSync(path.join(outside, "secret.txt"), path.join(root, "leak.txt"))
      fs.symlinkSync(outside, path.join(root, "leakdir"))
      fs.symlinkSync(path.join(outside, "missing.txt"), path.join(root, "dangle"))
      fs.symlinkSync("missing-inside.txt", path.join(root, "dangle-inside"))
      fs.symlinkSync(path.join(root, "inside.txt"), path.join(root, "alias.txt"))
      fs.symlinkSync("../workspace/inside.txt", path.join(root, "relative-alias.txt"))
      const tool = Builtins.readFile(workspace)
      const refusals: ReadonlyArray<readonly [string, string]> = [
        ["../outside/secret.txt", "outside the workspace"],
        ["sub/../../outside/secret.txt", "outside the workspace"],
        [path.join(outside, "secret.txt"), "absolute paths are refused"],
        ["/etc/passwd", "absolute paths are refused"],
        ["leak.txt", "resolves outside the workspace"],
        ["leakdir/secret.txt", "resolves outside the workspace"],
        // What does not exist out there, or is no folder, is not the workspace's to tell.
        ["leakdir/no-such-file", "resolves outside the workspace"],
        ["leakdir/no/such/folder", "resolves outside the workspace"],
        ["leakdir/secret.txt/x", "resolves outside the workspace"],
        ["dangle", "resolves outside the workspace"],
        ["dangle/x", "resolves outside the workspace"],
        ["", "path is empty"],
        ["a\u0000b", "NUL"],
      ]
      for (const [input, expected] of refusals) {
        const outcome = yield* call(tool, { path: input })
        assert.include(failureOf(outcome), expected, input)
        assert.notInclude(JSON.stringify(outcome), "secret\\n")
      }
      // The same for listing and searching.
      for (const other of [Builtins.listFiles(workspace), Builtins.searchText(workspace)]) {
        for (const input of ["leakdir/no-such-file", "leakdir/secret.txt/x"]) {
          const outcome = yield* call(other, other.name === "list_files" ? { path: input } : { pattern: "s", path: input })
          assert.include(failureOf(outcome), "resolves outside the workspace", `${other.name} ${input}`)
        }
      }
      // Inside, a missing file is named as missing, through a dangling link too.
      assert.include(failureOf(yield* call(tool, { path: "no-such-file" })), "no such file or directory")
      assert.include(failureOf(yield* call(tool, { path: "dangle-inside" })), "no such file or directory")
      // Symlinks that stay inside are followed.
      assert.strictEqual(textOf(yield* call(tool, { path: "alias.txt" })), "     1\tinside")
      assert.strictEqual(textOf(yield* call(tool, { path: "relative-alias.txt" })), "     1\tinside")
      assert.strictEqual(textOf(yield* call(tool, { path: "sub/../inside.txt" })), "     1\tinside")
    }),
  )

  it.effect("rejects schema-invalid input before touching the disk", () =>
    Effect.gen(function* () {
      const { workspace } = yield* workspaceFixture
      const tool = Builtins.readFile(workspace)
      for (const input of [{}, { path: 1 }, { path: "a", offset: 0 }, { path: "a", limit: 1.5 }, { path: "a", extra: 1 }]) {
        assert.strictEqual((yield* call(tool, input))._tag, "Invalid", JSON.stringify(input))
      }
    }),
  )
})

describe("list_files", () => {
  it.effect("lists a directory sorted by name with types and sizes, symlinks unfollowed", () =>
    Effect.gen(function* () {
      const { root, outside, workspace } = yield* workspaceFixture
      fs.writeFileSync(path.join(root, "b.txt"), "12345")
      fs.mkdirSync(path.join(root, "a-dir"))
      fs.writeFileSync(path.join(root, "a-dir", "inner.txt"), "x")
      fs.symlinkSync(outside, path.join(root, "c-link"))
      const tool = Builtins.listFiles(workspace)
      const listed = jsonOf(yield* call(tool, {})) as ReadonlyArray<{ name: string; type: string; size: number }>
      assert.deepStrictEqual(
        listed.map(({ name, type }) => [name, type]),
        [
          [".maka-workspace.json", "file"],
          ["a-dir", "directory"],
          ["b.txt", "file"],
          ["c-link", "symlink"],
        ],
      )
      assert.strictEqual(listed.find((entry) => entry.name === "b.txt")!.size, 5)
      assert.deepStrictEqual(jsonOf(yield* call(tool, { path: "a-dir" })), [{ name: "inner.txt", type: "file", size: 1 }])
      assert.include(failureOf(yield* call(tool, { path: "c-link" })), "resolves outside the workspace")
      assert.include(failureOf(yield* call(tool, { path: ".." })), "outside the workspace")
      assert.include(failureOf(yield* call(tool, { path: outside })), "absolute paths are refused")
      assert.include(failureOf(yield* call(tool, { path: "b.txt" })), "is not a directory")
    }),
  )

  it.effect("lists an entry whose name is not valid UTF-8, its unreadable bytes as U+FFFD", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      fs.mkdirSync(path.join(root, "odd"))
      fs.writeFileSync(Buffer.concat([Buffer.from(path.join(root, "odd", "caf")), Buffer.from([0xe9]), Buffer.from(".txt")]), "abc")
      fs.writeFileSync(path.join(root, "odd", "plain.txt"), "x")
      const listed = jsonOf(yield* call(Builtins.listFiles(workspace), { path: "odd" }))
      assert.deepStrictEqual(listed, [
        { name: "caf\ufffd.txt", type: "file", size: 3 },
        { name: "plain.txt", type: "file", size: 1 },
      ])
    }),
  )
})

describe("search_text", () => {
  it.effect("searches files and folders whose names are not valid UTF-8, shown as list_files shows them", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const odd = (...parts: Array<string | number>) =>
        Buffer.concat(parts.map((part) => (typeof part === "number" ? Buffer.from([part]) : Buffer.from(part))))
      fs.mkdirSync(path.join(root, "odd"))
      fs.mkdirSync(odd(path.join(root, "odd", "dir"), 0xff))
      fs.writeFileSync(odd(path.join(root, "odd", "caf"), 0xe9, ".txt"), "needle one\n")
      fs.writeFileSync(odd(path.join(root, "odd", "dir"), 0xff, "/inner.txt"), "x\nneedle two\n")
      fs.writeFileSync(path.join(root, "odd", "plain.txt"), "needle three\n")
      assert.deepStrictEqual(jsonOf(yield* call(Builtins.searchText(workspace), { pattern: "needle", path: "odd" })), {
        matches: [
          { path: "odd/caf\ufffd.txt", line: 1, text: "needle one" },
          { path: "odd/dir\ufffd/inner.txt", line: 2, text: "needle two" },
          { path: "odd/plain.txt", line: 1, text: "needle three" },
        ],
        truncated: false,
      })
    }),
  )

  it.effect("finds a literal pattern in text files, skipping binaries, .git and symlinks out", () =>
    Effect.gen(function* () {
      const { root, outside, workspace } = yield* workspaceFixture
      fs.mkdirSync(path.join(root, "src", "deep"), { recursive: true })
      fs.mkdirSync(path.join(root, ".git"))
      fs.writeFileSync(path.join(root, "src", "a.ts"), "const a = b.c(1)\nnothing here\nb.c(2)\n")
      fs.writeFileSync(path.join(root, "src", "deep", "z.ts"), "b.c(3)")
      fs.writeFileSync(path.join(root, "src", "bin.dat"), Buffer.concat([Buffer.from("b.c("), Buffer.from([0])]))
      fs.writeFileSync(path.join(root, ".git", "config"), "b.c(")
      fs.writeFileSync(path.join(outside, "secret.ts"), "b.c(secret)")
      fs.symlinkSync(outside, path.join(root, "src", "link"))
      const tool = Builtins.searchText(workspace)
      assert.deepStrictEqual(jsonOf(yield* call(tool, { pattern: "b.c(" })), {
        matches: [
          { path: "src/a.ts", line: 1, text: "const a = b.c(1)" },
          { path: "src/a.ts", line: 3, text: "b.c(2)" },
          { path: "src/deep/z.ts", line: 1, text: "b.c(3)" },
        ],
        truncated: false,
      })
      assert.deepStrictEqual(jsonOf(yield* call(tool, { pattern: "b.c(", maxResults: 2, path: "src" })), {
        matches: [
          { path: "src/a.ts", line: 1, text: "const a = b.c(1)" },
          { path: "src/a.ts", line: 3, text: "b.c(2)" },
        ],
        truncated: true,
      })
      assert.deepStrictEqual(jsonOf(yield* call(tool, { pattern: "b.c(", path: "src/deep/z.ts" })), {
        matches: [{ path: "src/deep/z.ts", line: 1, text: "b.c(3)" }],
        truncated: false,
      })
      assert.include(failureOf(yield* call(tool, { pattern: "b", path: "../outside" })), "outside the workspace")
      assert.include(failureOf(yield* call(tool, { pattern: "b", path: "src/link" })), "resolves outside the workspace")
      assert.strictEqual((yield* call(tool, { pattern: "" }))._tag, "Invalid")
    }),
  )
})

describe("write_file", () => {
  it.effect("creates parent directories and overwrites", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const tool = Builtins.writeFile(workspace)
      assert.strictEqual(textOf(yield* call(tool, { path: "new/deep/file.txt", content: "héllo" })), "Wrote 6 bytes to new/deep/file.txt")
      assert.strictEqual(fs.readFileSync(path.join(root, "new/deep/file.txt"), "utf8"), "héllo")
      yield* call(tool, { path: "new/deep/file.txt", content: "bye" })
      assert.strictEqual(fs.readFileSync(path.join(root, "new/deep/file.txt"), "utf8"), "bye")
      fs.writeFileSync(path.join(root, "target.txt"), "old")
      fs.symlinkSync("target.txt", path.join(root, "alias.txt"))
      yield* call(tool, { path: "alias.txt", content: "through the link" })
      assert.strictEqual(fs.readFileSync(path.join(root, "target.txt"), "utf8"), "through the link")
    }),
  )

  it.effect("never writes the workspace marker, whatever path leads to it", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const marker = path.join(root, ".maka-workspace.json")
      const before = fs.readFileSync(marker, "utf8")
      fs.symlinkSync(".maka-workspace.json", path.join(root, "marker-link"))
      fs.linkSync(marker, path.join(root, "marker-hardlink"))
      fs.mkdirSync(path.join(root, "sub"))
      const tool = Builtins.writeFile(workspace)
      for (const input of [".maka-workspace.json", "./sub/../.maka-workspace.json", "marker-link", "marker-hardlink"]) {
        assert.include(failureOf(yield* call(tool, { path: input, content: "{}" })), "workspace marker", input)
      }
      assert.strictEqual(fs.readFileSync(marker, "utf8"), before)
    }),
  )

  it.effect("never writes a protected file, a file beside it named after it, or a link to it", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const folder = path.join(root, ".maka")
      fs.mkdirSync(folder)
      const log = path.join(folder, "events.sqlite")
      fs.writeFileSync(log, "the log")
      fs.writeFileSync(`${log}-wal`, "its wal")
      fs.symlinkSync(".maka/events.sqlite", path.join(root, "log-link"))
      fs.linkSync(log, path.join(root, "log-hardlink"))
      // Given relative to the process's directory, through a link to the workspace's folder.
      fs.symlinkSync(root, path.join(path.dirname(root), "alias"))
      const given = path.relative(process.cwd(), path.join(path.dirname(root), "alias", ".maka", "events.sqlite"))
      const tool = Builtins.writeFile({ ...workspace, protectedFiles: [given, path.join(root, "absent", "other.sqlite")] })
      // A protected file whose folder does not exist yet is refused too: the write would make the folder.
      const refused = [
        ".maka/events.sqlite",
        ".maka/events.sqlite-wal",
        ".maka/events.sqlite-shm",
        ".maka/events.sqlite.writer.lock",
        "log-link",
        "log-hardlink",
        "absent/other.sqlite",
        "absent/other.sqlite-wal",
        "./absent/../absent/other.sqlite",
        // A folder named like a sidecar, which SQLite could then not create: the log would not open.
        ".maka/events.sqlite-journal/x",
        ".maka/events.sqlite-wal2/deeper/x",
        "absent/other.sqlite-shm/x",
      ]
      // An existing folder of such a name is no file of the log: written into.
      fs.mkdirSync(path.join(folder, "events.sqlite-backups"))
      for (const input of refused) {
        assert.include(failureOf(yield* call(tool, { path: input, content: "oops" })), "a file of the event log, never written by a tool", input)
      }
      assert.strictEqual(fs.readFileSync(log, "utf8"), "the log")
      assert.strictEqual(fs.readFileSync(`${log}-wal`, "utf8"), "its wal")
      assert.deepStrictEqual(fs.readdirSync(folder).sort(), ["events.sqlite", "events.sqlite-backups", "events.sqlite-wal"])
      assert.strictEqual(
        textOf(yield* call(tool, { path: ".maka/events.sqlite-backups/notes.txt", content: "ok" })),
        "Wrote 2 bytes to .maka/events.sqlite-backups/notes.txt",
      )
      // Refused before anything is made: not even the missing folder.
      assert.isFalse(fs.existsSync(path.join(root, "absent")))
      // Other files of the folder, a file of the same name in another folder, and another file of a
      // protected file's folder that does not exist yet, are written.
      assert.strictEqual(textOf(yield* call(tool, { path: ".maka/notes.txt", content: "ok" })), "Wrote 2 bytes to .maka/notes.txt")
      assert.strictEqual(textOf(yield* call(tool, { path: "absent/notes.txt", content: "ok" })), "Wrote 2 bytes to absent/notes.txt")
      assert.strictEqual(textOf(yield* call(tool, { path: "events.sqlite-wal", content: "ok" })), "Wrote 2 bytes to events.sqlite-wal")
    }),
  )

  it.effect("keeps a relative protected file's protection where it was when the set was built, after a change of directory", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      fs.writeFileSync(path.join(root, "events.sqlite"), "the log")
      const before = process.cwd()
      process.chdir(root)
      const tool = yield* Effect.ensuring(
        Effect.sync(() => Builtins.writeFile({ ...workspace, protectedFiles: ["events.sqlite"] })),
        Effect.sync(() => process.chdir(os.tmpdir())),
      )
      const written = yield* Effect.ensuring(call(tool, { path: "events.sqlite", content: "garbage" }), Effect.sync(() => process.chdir(before)))
      assert.include(failureOf(written), "a file of the event log, never written by a tool")
      assert.strictEqual(fs.readFileSync(path.join(root, "events.sqlite"), "utf8"), "the log")
    }),
  )

  it.effect("refuses a write through a link to a protected log outside as outside, never as the log's", () =>
    Effect.gen(function* () {
      const { root, outside, workspace } = yield* workspaceFixture
      fs.writeFileSync(path.join(outside, "events.sqlite"), "the log")
      fs.symlinkSync(outside, path.join(root, "outlink"))
      const tool = Builtins.writeFile({ ...workspace, protectedFiles: [path.join(outside, "events.sqlite")] })
      for (const input of ["outlink/events.sqlite", "outlink/new/events.sqlite"]) {
        const message = failureOf(yield* call(tool, { path: input, content: "oops" }))
        assert.include(message, "resolves outside the workspace", input)
        assert.notInclude(message, "event log", input)
      }
      assert.strictEqual(fs.readFileSync(path.join(outside, "events.sqlite"), "utf8"), "the log")
    }),
  )

  it.effect("protects the files of a log given as a symbolic link under its target's name", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      const folder = path.join(root, ".maka")
      fs.mkdirSync(folder)
      const log = path.join(folder, "real.sqlite")
      fs.writeFileSync(log, "the log")
      fs.writeFileSync(`${log}-wal`, "its wal")
      // The store opens the link's target, whose -wal and lock are named after it.
      fs.symlinkSync(".maka/real.sqlite", path.join(root, "link.sqlite"))
      const tool = Builtins.writeFile({ ...workspace, protectedFiles: [path.join(root, "link.sqlite")] })
      for (const input of [".maka/real.sqlite-wal", ".maka/real.sqlite.writer.lock", ".maka/real.sqlite-shm", "link.sqlite", "link.sqlite-wal"]) {
        assert.include(failureOf(yield* call(tool, { path: input, content: "oops" })), "a file of the event log, never written by a tool", input)
      }
      assert.strictEqual(fs.readFileSync(`${log}-wal`, "utf8"), "its wal")
      assert.deepStrictEqual(fs.readdirSync(folder).sort(), ["real.sqlite", "real.sqlite-wal"])
    }),
  )

  it.effect("refuses writes that escape the root and leaves the outside untouched", () =>
    Effect.gen(function* () {
      const { root, outside, workspace } = yield* workspaceFixture
      fs.writeFileSync(path.join(outside, "victim.txt"), "intact")
      fs.symlinkSync(path.join(outside, "victim.txt"), path.join(root, "victim-link"))
      fs.symlinkSync(outside, path.join(root, "outdir"))
      fs.symlinkSync(path.join(outside, "missing.txt"), path.join(root, "dangling"))
      fs.mkdirSync(path.join(root, "dir"))
      const tool = Builtins.writeFile(workspace)
      const refusals: ReadonlyArray<readonly [string, string]> = [
        ["../outside/victim.txt", "outside the workspace"],
        [path.join(outside, "victim.txt"), "absolute paths are refused"],
        ["victim-link", "resolves outside the workspace"],
        ["outdir/victim.txt", "resolves outside the workspace"],
        ["outdir/new/file.txt", "resolves outside the workspace"],
        ["dangling", "symbolic link whose target does not exist"],
        ["dir", "is a directory"],
        [".", "is the workspace root"],
      ]
      for (const [input, expected] of refusals) {
        assert.include(failureOf(yield* call(tool, { path: input, content: "pwned" })), expected, input)
      }
      assert.strictEqual(fs.readFileSync(path.join(outside, "victim.txt"), "utf8"), "intact")
      assert.deepStrictEqual(fs.readdirSync(outside), ["victim.txt"])
    }),
  )
})

describe("a path ending with /", () => {
  it.effect("names a directory: read_file and write_file refuse it, list_files and search_text list one", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      fs.writeFileSync(path.join(root, "notes.txt"), "hello\n")
      fs.mkdirSync(path.join(root, "dir"))
      fs.writeFileSync(path.join(root, "dir", "inner.txt"), "hello inside\n")
      const [read, list, search, write] = Builtins.write(workspace)
      const refused = (input: string, ending: string) =>
        `${input}: is not a file (the path ends with ${ending}, which names a directory); give the file's path without it`
      assert.strictEqual(failureOf(yield* call(read!, { path: "notes.txt/" })), refused("notes.txt/", "/"))
      assert.strictEqual(failureOf(yield* call(read!, { path: "notes.txt/." })), refused("notes.txt/.", "/."))
      assert.include(failureOf(yield* call(read!, { path: "dir/" })), "dir/: is a directory; use list_files")
      assert.strictEqual(failureOf(yield* call(write!, { path: "newdir/", content: "x" })), refused("newdir/", "/"))
      assert.strictEqual(failureOf(yield* call(write!, { path: "notes.txt/", content: "x" })), refused("notes.txt/", "/"))
      assert.strictEqual(failureOf(yield* call(write!, { path: "dir/.", content: "x" })), refused("dir/.", "/."))
      assert.isFalse(fs.existsSync(path.join(root, "newdir")))
      assert.strictEqual(fs.readFileSync(path.join(root, "notes.txt"), "utf8"), "hello\n")
      assert.deepStrictEqual(fs.readdirSync(path.join(root, "dir")), ["inner.txt"])
      assert.deepStrictEqual(jsonOf(yield* call(list!, { path: "dir/" })), [{ name: "inner.txt", type: "file", size: 13 }])
      assert.deepStrictEqual(jsonOf(yield* call(search!, { pattern: "hello", path: "dir/" })), {
        matches: [{ path: "dir/inner.txt", line: 1, text: "hello inside" }],
        truncated: false,
      })
      assert.strictEqual(failureOf(yield* call(search!, { pattern: "hello", path: "notes.txt/" })), "notes.txt/: is not a directory (the path ends with /)")
      assert.include(failureOf(yield* call(list!, { path: "notes.txt/" })), "is not a directory")
    }),
  )
})

describe("non-regular files", () => {
  it.effect("write_file, read_file and search_text refuse or pass over a FIFO without blocking", () =>
    Effect.gen(function* () {
      const { root, workspace } = yield* workspaceFixture
      execFileSync("mkfifo", [path.join(root, "pipe")])
      fs.writeFileSync(path.join(root, "a.txt"), "needle\n")
      assert.include(failureOf(yield* call(Builtins.writeFile(workspace), { path: "pipe", content: "x" })), "pipe: is not a regular file")
      assert.include(failureOf(yield* call(Builtins.readFile(workspace), { path: "pipe" })), "pipe: is not a regular file")
      assert.deepStrictEqual(jsonOf(yield* call(Builtins.searchText(workspace), { pattern: "needle" })), {
        matches: [{ path: "a.txt", line: 1, text: "needle" }],
        truncated: false,
      })
      assert.deepStrictEqual(jsonOf(yield* call(Builtins.listFiles(workspace), {})), [
        { name: ".maka-workspace.json", type: "file", size: fs.statSync(path.join(root, ".maka-workspace.json")).size },
        { name: "a.txt", type: "file", size: 7 },
        { name: "pipe", type: "file", size: 0 },
      ])
    }),
  )
})
