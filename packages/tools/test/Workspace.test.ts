import * as fs from "node:fs"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Configuration } from "@maka/facts"
import { Ids, Workspace } from "@maka/tools"
import { TestIds } from "@maka/tools/testing"
import { Effect, Schema } from "effect"
import { tempDirectory } from "./fixtures.ts"

const open = (root: string) => Effect.provide(Workspace.open(root), Ids.layer)

const reasonOf = (root: string) =>
  Effect.map(Effect.flip(open(root)), (error) => {
    assert.strictEqual(error.reason._tag, "WorkspaceInvalid")
    return error.message
  })

describe("Workspace.open", () => {
  it.effect("refuses a root that is no path as an invalid workspace, never a defect", () =>
    Effect.gen(function* () {
      for (const root of [null, 5, { path: "/tmp" }]) {
        const error = yield* Effect.flip(Effect.provide(Workspace.open(root as unknown as string), Ids.layer))
        assert.strictEqual(error.reason._tag, "WorkspaceInvalid")
        assert.include(error.message, "the workspace root must be a path (a string)")
      }
    }),
  )

  it.effect("creates the marker with a fresh UUIDv4 and derives the identity from it", () =>
    Effect.gen(function* () {
      const root = yield* tempDirectory
      const workspace = yield* open(root)
      assert.strictEqual(workspace.root, root)
      assert.match(workspace.uuid, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
      assert.strictEqual(workspace.identity, `workspace:v1:${workspace.uuid}`)
      assert.isTrue(Schema.is(Configuration.WorkspaceIdentity)(workspace.identity))
      const marker = fs.readFileSync(path.join(root, ".maka-workspace.json"), "utf8")
      assert.deepStrictEqual(JSON.parse(marker), { uuid: workspace.uuid })
      assert.deepStrictEqual(
        fs.readdirSync(root),
        [".maka-workspace.json"],
        "no temporary file is left behind",
      )
      // Opening again reads the same identity.
      assert.deepStrictEqual(yield* open(root), workspace)
    }),
  )

  it.effect("takes the UUID from Ids and keeps an existing marker's exact spelling", () =>
    Effect.gen(function* () {
      const root = yield* tempDirectory
      const created = yield* Effect.provide(Workspace.open(root), TestIds.layer(5))
      assert.strictEqual(created.uuid, TestIds.id(5))
      const other = yield* tempDirectory
      const uuid = "6BA7B810-9DAD-11D1-80B4-00C04FD430C8"
      fs.writeFileSync(path.join(other, ".maka-workspace.json"), JSON.stringify({ uuid }))
      const workspace = yield* open(other)
      assert.strictEqual(workspace.identity, `workspace:v1:${uuid}`)
    }),
  )

  it.effect("reads a marker that changed since the last open: rewritten in place, replaced, made corrupt or removed", () =>
    Effect.gen(function* () {
      const root = yield* tempDirectory
      const file = path.join(root, ".maka-workspace.json")
      const first = yield* open(root)
      assert.deepStrictEqual(yield* open(root), first)
      // The same size and the same path: only the file's times tell the new contents apart.
      const rewritten = "0f9c2b1e-5a3d-4c7b-9e21-7d4a6b8c9e10"
      fs.writeFileSync(file, Workspace.markerText(rewritten))
      assert.strictEqual((yield* open(root)).uuid, rewritten)
      const replaced = "1a2b3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d"
      fs.writeFileSync(`${file}.new`, Workspace.markerText(replaced))
      fs.renameSync(`${file}.new`, file)
      assert.strictEqual((yield* open(root)).uuid, replaced)
      fs.writeFileSync(file, "not json")
      assert.include(yield* reasonOf(root), "not valid JSON")
      fs.rmSync(file)
      const recreated = yield* open(root)
      assert.notStrictEqual(recreated.uuid, replaced)
      assert.deepStrictEqual(JSON.parse(fs.readFileSync(file, "utf8")), { uuid: recreated.uuid })
    }),
  )

  it.effect("canonicalises the root through symlinks and relative paths", () =>
    Effect.gen(function* () {
      const base = yield* tempDirectory
      fs.mkdirSync(path.join(base, "real"))
      fs.symlinkSync(path.join(base, "real"), path.join(base, "link"))
      const workspace = yield* open(path.join(base, "link", "..", "link"))
      assert.strictEqual(workspace.root, path.join(base, "real"))
      const relative = path.relative(process.cwd(), path.join(base, "real"))
      assert.strictEqual((yield* open(relative)).root, path.join(base, "real"))
    }),
  )

  it.effect("refuses a missing root, a file as root, and corrupt markers with clear errors", () =>
    Effect.gen(function* () {
      const base = yield* tempDirectory
      // The path is named once: `workspace <path>: <reason>`.
      assert.strictEqual(yield* reasonOf(path.join(base, "missing")), `workspace ${path.join(base, "missing")}: no such file or directory`)
      fs.writeFileSync(path.join(base, "file"), "x")
      assert.include(yield* reasonOf(path.join(base, "file")), "workspace root is not a directory")
      const cases: ReadonlyArray<readonly [string, string]> = [
        ["not json", "not valid JSON"],
        [JSON.stringify({ uuid: "not-a-uuid" }), "must be exactly"],
        [JSON.stringify({ uuid: "6ba7b810-9dad-11d1-80b4-00c04fd430c8", extra: 1 }), "must be exactly"],
        [JSON.stringify(["6ba7b810-9dad-11d1-80b4-00c04fd430c8"]), "must be exactly"],
      ]
      for (const [index, [text, expected]] of cases.entries()) {
        const root = path.join(base, `corrupt-${index}`)
        fs.mkdirSync(root)
        fs.writeFileSync(path.join(root, ".maka-workspace.json"), text)
        assert.include(yield* reasonOf(root), expected)
        assert.strictEqual(fs.readFileSync(path.join(root, ".maka-workspace.json"), "utf8"), text, "left unchanged")
      }
      // A marker of 3 GB (sparse) is refused by its size, never read whole.
      const huge = path.join(base, "huge-marker")
      fs.mkdirSync(huge)
      const hugeMarker = path.join(huge, ".maka-workspace.json")
      fs.writeFileSync(hugeMarker, "")
      fs.truncateSync(hugeMarker, 3 * 1024 ** 3)
      assert.include(yield* reasonOf(huge), `workspace marker is ${3 * 1024 ** 3} bytes; a marker holds at most 4096`)
      const directoryMarker = path.join(base, "directory-marker")
      fs.mkdirSync(path.join(directoryMarker, ".maka-workspace.json"), { recursive: true })
      assert.include(yield* reasonOf(directoryMarker), "not a regular file")
    }),
  )

  it.effect("says that the marker cannot be created in a root maka cannot write to", () =>
    Effect.gen(function* () {
      // A process's folder under /proc exists and takes no new file, whoever asks (root included).
      const root = fs.realpathSync("/proc/1")
      assert.strictEqual(
        yield* reasonOf(root),
        `workspace ${root}/.maka-workspace.json: cannot create the workspace marker: no such file or directory; the workspace must be a folder maka can write to`,
      )
    }),
  )
})
