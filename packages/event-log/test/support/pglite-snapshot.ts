/**
 * A freshly initialised PGlite data directory, made once per machine and PGlite build and loaded by
 * every PGlite the tests open: PGlite's initdb takes seconds (up to 9 on a loaded 2-core machine),
 * loading its snapshot a fraction of that. The vitest global setup of this project makes the
 * snapshot; `freshPglite()` loads it, or initialises from scratch when there is none. A loaded
 * snapshot is the same empty cluster initdb makes; nothing of any test is ever written back to it.
 */
import { PGlite } from "@electric-sql/pglite"
import { createHash } from "node:crypto"
import { createRequire } from "node:module"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

/** Where the snapshot of this PGlite build lives: the build's resolved entry names it. */
export const snapshotFile = (): string => {
  const build = createHash("sha256").update(createRequire(import.meta.url).resolve("@electric-sql/pglite")).digest("hex").slice(0, 16)
  return path.join(os.tmpdir(), "maka-pglite-snapshots", `${build}.tar`)
}

/** Makes the snapshot if it is missing (written aside, then renamed: a reader never sees half of it). */
export const ensureSnapshot = async (): Promise<string> => {
  const file = snapshotFile()
  if (fs.existsSync(file)) return file
  fs.mkdirSync(path.dirname(file), { recursive: true })
  const instance = new PGlite()
  try {
    await instance.waitReady
    const dump = await instance.dumpDataDir("none")
    const partial = `${file}.${process.pid}.partial`
    fs.writeFileSync(partial, new Uint8Array(await dump.arrayBuffer()))
    fs.renameSync(partial, file)
  } finally {
    await instance.close()
  }
  return file
}

/** A new, empty PGlite: loaded from the snapshot when there is one. */
export const freshPglite = (): PGlite => {
  const file = snapshotFile()
  return fs.existsSync(file) ? new PGlite({ loadDataDir: new Blob([fs.readFileSync(file)]) }) : new PGlite()
}

/**
 * The vitest global setup: the snapshot exists before any test file starts. Making it may fail (a
 * full temporary folder, say); every PGlite then initialises from scratch, only slower.
 */
export default async function setup(): Promise<void> {
  // PGlite's start holds no handle of the event loop while it waits: this one keeps the setup alive.
  const keepAlive = setInterval(() => undefined, 1_000)
  try {
    await ensureSnapshot()
  } catch (error) {
    process.stderr.write(`note: no PGlite snapshot (${String(error)}); each PGlite initialises from scratch\n`)
  } finally {
    clearInterval(keepAlive)
  }
}
