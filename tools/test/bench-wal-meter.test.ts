/**
 * The bench's WAL meter (tools/bench/lib.ts) against real SQLite files: what a writer commits while
 * the meter holds its read, in this process and in another one.
 */
import Database from "better-sqlite3"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { lastWalFrame, WalMeter } from "../bench/lib.ts"

const directories: Array<string> = []
afterEach(() => {
  for (const directory of directories.splice(0)) fs.rmSync(directory, { recursive: true, force: true })
})

/** A WAL-mode file with a writer whose automatic checkpoint is off, and a row already in the WAL. */
const writerOf = () => {
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "maka-wal-meter-"))
  directories.push(directory)
  const file = path.join(directory, "meter.sqlite")
  const writer = new Database(file)
  writer.pragma("journal_mode = WAL")
  writer.pragma("wal_autocheckpoint = 0")
  writer.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
  const insert = writer.prepare("INSERT INTO t (body) VALUES (?)")
  const commit = (count: number) => {
    for (let index = 0; index < count; index++) insert.run("x".repeat(3000))
  }
  commit(1)
  return { file, writer, commit, checkpoint: () => writer.pragma("wal_checkpoint(PASSIVE)") }
}

/** Commits `rows` rows from another process, whose writer checkpoints the WAL every 100 pages. */
const commitElsewhere = (file: string, rows: number) => {
  const driver = createRequire(import.meta.url).resolve("better-sqlite3")
  const script = [
    `const Database = require(${JSON.stringify(driver)})`,
    `const writer = new Database(${JSON.stringify(file)})`,
    `writer.pragma("wal_autocheckpoint = 100")`,
    `const insert = writer.prepare("INSERT INTO t (body) VALUES (?)")`,
    `for (let index = 0; index < ${rows}; index++) insert.run("y".repeat(3000))`,
    `writer.close()`,
  ].join("\n")
  execFileSync(process.execPath, ["-e", script])
}

/** The WAL header's first salt, which SQLite raises by one at each restart of the WAL. */
const firstSalt = (file: string): number => {
  const header = Buffer.alloc(32)
  const descriptor = fs.openSync(`${file}-wal`, "r")
  try {
    fs.readSync(descriptor, header, 0, 32, 0)
  } finally {
    fs.closeSync(descriptor)
  }
  return header.readUInt32BE(16)
}

describe("WalMeter", () => {
  it("counts every commit made while its read pins the WAL, a checkpoint meanwhile included", () => {
    const { file, writer, commit, checkpoint } = writerOf()
    const meter = new WalMeter(file)
    meter.start()
    commit(5)
    checkpoint()
    commit(4)
    const count = meter.stop()
    meter.close()
    writer.close()
    expect(count.commits).toBe(9)
    expect(count.frames).toBeGreaterThanOrEqual(9 * 3)
  })

  it("counts every commit of a writer in another process whose checkpoints run meanwhile", () => {
    const { file, writer } = writerOf()
    const meter = new WalMeter(file)
    meter.start()
    const salt = firstSalt(file)
    // 300 rows of 3 KB: far more than the 100 pages at which that writer checkpoints.
    commitElsewhere(file, 300)
    expect(firstSalt(file)).toBe(salt)
    const count = meter.stop()
    meter.close()
    writer.close()
    expect(count.commits).toBe(300)
  })

  it("counts the commits after the one restart a read that pins nothing lets the writer make", () => {
    const { file, writer, commit, checkpoint } = writerOf()
    // Every frame is in the database: the meter's read uses none of the WAL, and the next commit restarts it.
    checkpoint()
    const salt = firstSalt(file)
    const meter = new WalMeter(file)
    meter.start()
    commit(6)
    expect(firstSalt(file)).toBe(salt + 1)
    const count = meter.stop()
    meter.close()
    // Every frame of the restarted WAL was written since `start`.
    expect(count.frames).toBe(lastWalFrame(file))
    writer.close()
    expect(count.commits).toBe(6)
  })

  it("refuses a count that a restart it did not expect cut short", () => {
    const { file, writer } = writerOf()
    const meter = new WalMeter(file)
    meter.start()
    // Closing any descriptor of the -shm drops this process's locks on it, the meter's read lock
    // included: the other process's checkpoints then restart the WAL under the meter.
    fs.closeSync(fs.openSync(`${file}-shm`, "r"))
    commitElsewhere(file, 300)
    expect(() => meter.stop()).toThrow(/restarted \d+ times while it was metered \(0 expected\)/)
    meter.close()
    writer.close()
  })
})
