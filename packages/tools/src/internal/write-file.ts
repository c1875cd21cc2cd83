/**
 * `write_file`: creates or overwrites one file under the workspace root, creating its parent
 * directories. The workspace marker is never written, whatever path (a symlink, a hard link) leads to it.
 */
import type { Stats } from "node:fs"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import type { ToolCall } from "@maka/facts"
import { Effect, Option } from "effect"
import { defaults } from "../Defaults.ts"
import type { ToolFailure } from "../Tool.ts"
import { canonicalRoot, failure, fsFailure, writable } from "./confine.ts"
import { tryFs } from "./fs.ts"

export interface WriteFileInput {
  readonly path: string
  readonly content: string
}

const sameFile = (left: { dev: number; ino: number }, right: { dev: number; ino: number }): boolean =>
  left.dev === right.dev && left.ino === right.ino

const statOption = (file: string): Effect.Effect<Option.Option<Stats>> =>
  tryFs(() => fs.stat(file)).pipe(
    Effect.map(Option.some),
    Effect.orElseSucceed(() => Option.none<Stats>()),
  )

export const writeFile = (root: string, input: WriteFileInput): Effect.Effect<ToolCall.ToolOutput, ToolFailure> =>
  Effect.gen(function* () {
    const canonical = yield* canonicalRoot(root)
    const marker = path.join(canonical, defaults.workspaceMarker)
    const refused = failure(`${input.path}: the workspace marker ${defaults.workspaceMarker} is never written`)
    const target = yield* writable(canonical, input.path)
    if (target === marker) return yield* Effect.fail(refused)
    const [targetStat, markerStat] = yield* Effect.all([statOption(target), statOption(marker)])
    if (Option.isSome(targetStat) && Option.isSome(markerStat) && sameFile(targetStat.value, markerStat.value)) {
      return yield* Effect.fail(refused)
    }
    yield* tryFs(() => fs.writeFile(target, input.content, { encoding: "utf8" })).pipe(
      Effect.mapError(fsFailure(input.path)),
    )
    const bytes = Buffer.byteLength(input.content, "utf8")
    return { format: "text", value: `Wrote ${bytes} bytes to ${input.path}` } satisfies ToolCall.ToolOutput
  })
