import { spawn } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it, vi } from "vitest"
import {
  acquireLease,
  canonicalDatabasePath,
  keeperProcessId,
  LEASE_DEFAULTS,
  LOCK_SUFFIX,
  lockHolderOf,
  MAX_DATABASE_PATH_BYTES,
  processState,
} from "../src/internal/lease.ts"
import { MIGRATIONS } from "../src/internal/migrations.ts"
import { openSqlite } from "../src/internal/open-sqlite.ts"
import { childScript, expectReason, listing, rejection, spawnChild, temporaryDirectory } from "./fixtures/storage.ts"

/**
 * A busy lease is refused after at most the contender wait (plus a process's start-up slack), well
 * under better-sqlite3's default 5 s busy timeout.
 */
const AT_ONCE_MS = LEASE_DEFAULTS.contenderWaitMs + 1_000

/** Whether a process of this id runs: there, and no zombie (one init has not reaped yet is gone). */
const isAlive = (pid: number): boolean => {
  const state = processState(pid)
  return state !== undefined && state !== "Z" && state !== "X"
}

/** Whether `pid` is stopped (its state in /proc is T). */
const isStoppedProcess = (pid: number): boolean => {
  const state = processState(pid)
  return state === "T" || state === "t"
}

const elapsed = async (run: () => Promise<unknown>): Promise<number> => {
  const started = performance.now()
  await run().catch(() => undefined)
  return performance.now() - started
}

/** Opens `file` as its writer, retrying WriterBusy for at most `PROMPTLY_MS` (a killed holder's lock is being freed). */
const PROMPTLY_MS = 2_000
const openPromptly = async (file: string) => {
  const started = performance.now()
  for (;;) {
    try {
      return await openSqlite(file)
    } catch (error) {
      const busy = typeof error === "object" && error !== null && "reason" in error && (error as { reason: { _tag: string } }).reason._tag === "WriterBusy"
      if (!busy || performance.now() - started > PROMPTLY_MS) throw error
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }
}

describe("the writer lease", () => {
  it("refuses a second writer in the same process at once with WriterBusy", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const first = await openSqlite(file)
    const started = performance.now()
    const error = await expectReason(openSqlite(file), "WriterBusy")
    expect(performance.now() - started).toBeLessThan(AT_ONCE_MS)
    expect(error.reason._tag === "WriterBusy" ? error.reason.path : "").toBe(fs.realpathSync(file))
    // The refusal names the holder: this process's own keeper holds the lock.
    expect(error.reason._tag === "WriterBusy" ? error.reason.holder : "").toBe("this process")
    expect(error.message).toBe(`another writer holds the log ${fs.realpathSync(file)} (this process)`)
    // A refused attempt does not disturb the holder: the lock is still held.
    await expectReason(openSqlite(file), "WriterBusy")
    await first.close()
    const next = await openSqlite(file)
    await next.close()
  })

  it("refuses a second lease on the same file and grants it again after release", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const lease = await acquireLease(file)
    expect(lease.isHeld()).toBe(true)
    const busy = await acquireLease(file).catch((error: unknown) => error)
    expect(busy).toMatchObject({ reason: { _tag: "WriterBusy", path: file } })
    await lease.release()
    await lease.release()
    expect(lease.isHeld()).toBe(false)
    const again = await acquireLease(file)
    await again.release()
  })

  it("never deletes the lock file and leaves no journal beside it", async () => {
    const directory = temporaryDirectory()
    const file = path.join(directory, "events.sqlite")
    const database = await openSqlite(file)
    await database.close()
    expect(listing(directory)).toEqual(["events.sqlite", `events.sqlite${LOCK_SUFFIX}`])
  })

  it("shares one lease between a symlink and its target", async () => {
    const directory = temporaryDirectory()
    const file = path.join(directory, "events.sqlite")
    const link = path.join(directory, "link.sqlite")
    const first = await openSqlite(file)
    fs.symlinkSync(file, link)
    expect(canonicalDatabasePath(link)).toBe(fs.realpathSync(file))
    await expectReason(openSqlite(link), "WriterBusy")
    await first.close()
  })

  it("canonicalises a path through a symlinked directory", () => {
    const directory = temporaryDirectory()
    fs.mkdirSync(path.join(directory, "real"))
    fs.symlinkSync(path.join(directory, "real"), path.join(directory, "alias"))
    expect(canonicalDatabasePath(path.join(directory, "alias", "events.sqlite"))).toBe(
      path.join(fs.realpathSync(directory), "real", "events.sqlite"),
    )
  })

  it("refuses a dangling symlink and creates nothing", async () => {
    const directory = temporaryDirectory()
    const link = path.join(directory, "events.sqlite")
    fs.symlinkSync(path.join(directory, "missing.sqlite"), link)
    await expectReason(openSqlite(link), "UnsupportedDatabase", "dangling symbolic link")
    await expectReason(openSqlite(link, { readOnly: true }), "UnsupportedDatabase", "dangling symbolic link")
    expect(listing(directory)).toEqual(["events.sqlite"])
  })

  it("refuses a hard-linked database under either name", async () => {
    const directory = temporaryDirectory()
    const file = path.join(directory, "events.sqlite")
    const database = await openSqlite(file)
    await database.close()
    fs.linkSync(file, path.join(directory, "second.sqlite"))
    await expectReason(openSqlite(file), "UnsupportedDatabase", "2 hard links")
    await expectReason(openSqlite(path.join(directory, "second.sqlite")), "UnsupportedDatabase", "hard links")
    await expectReason(openSqlite(file, { readOnly: true }), "UnsupportedDatabase", "hard links")
  })

  it("refuses a database's sidecar as a log, and creates nothing beside it", async () => {
    const directory = temporaryDirectory()
    const file = path.join(directory, "events.sqlite")
    const database = await openSqlite(file)
    // The open log has its -wal, -shm and writer's lock; a -journal is refused by name alone.
    for (const suffix of ["-wal", "-shm", LOCK_SUFFIX, "-journal"]) {
      await expectReason(openSqlite(`${file}${suffix}`), "UnsupportedDatabase", `is the ${suffix} file of the database ${file}`)
      await expectReason(openSqlite(`${file}${suffix}`, { readOnly: true }), "UnsupportedDatabase", `is the ${suffix} file`)
    }
    expect(listing(directory)).toEqual(["events.sqlite", "events.sqlite-shm", "events.sqlite-wal", `events.sqlite${LOCK_SUFFIX}`].sort())
    await database.close()
    // Once the log is closed its -wal and -shm are gone: the names stay refused while the database exists.
    await expectReason(openSqlite(`${file}-wal`), "UnsupportedDatabase", "is the -wal file")
    expect(listing(directory)).toEqual(["events.sqlite", `events.sqlite${LOCK_SUFFIX}`].sort())
    // A name ending so, with no database of the shorter name beside it, is a log like any other.
    const own = await openSqlite(path.join(directory, "notes-wal"))
    await own.close()
    const bare = await openSqlite(path.join(directory, "-wal"))
    await bare.close()
  })

  it("refuses a directory and a path in a missing directory", async () => {
    const directory = temporaryDirectory()
    await expectReason(openSqlite(directory), "UnsupportedDatabase", "not a regular file")
    await expectReason(openSqlite(path.join(directory, "missing", "events.sqlite")), "Io", "does not exist")
  })

  it("refuses a path ending in whitespace, which the driver would open without it, and creates nothing", async () => {
    const directory = temporaryDirectory()
    const held = await openSqlite(path.join(directory, "events.sqlite"))
    // A link whose target ends in whitespace is refused as its target would be.
    fs.writeFileSync(path.join(directory, "events.sqlite "), "")
    fs.symlinkSync("events.sqlite ", path.join(directory, "alias.sqlite"))
    await expectReason(openSqlite(path.join(directory, "alias.sqlite")), "UnsupportedDatabase", "ends in whitespace")
    fs.unlinkSync(path.join(directory, "alias.sqlite"))
    fs.unlinkSync(path.join(directory, "events.sqlite "))
    for (const name of ["events.sqlite ", "events.sqlite\t", "events.sqlite\n", "events.sqlite\u00a0", "   "]) {
      await expectReason(openSqlite(path.join(directory, name)), "UnsupportedDatabase", "ends in whitespace")
      await expectReason(openSqlite(path.join(directory, name), { readOnly: true }), "UnsupportedDatabase", "ends in whitespace")
    }
    expect(listing(directory)).toEqual(["events.sqlite", "events.sqlite-shm", "events.sqlite-wal", `events.sqlite${LOCK_SUFFIX}`])
    await held.close()
  })

  it("lets a read-only open in while a writer holds the lease", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const writer = await openSqlite(file)
    const reader = await openSqlite(file, { readOnly: true })
    const versions = await reader.read((transaction) => transaction.selectFrom("schema_migrations").select("version").execute())
    expect(versions).toEqual(MIGRATIONS.map((migration) => ({ version: migration.version })))
    await reader.close()
    await writer.close()
  })
})

/**
 * Runs writer.ts in `mode` as a user who cannot write a file of mode 0444: this process's own user,
 * or, under root (which writes any file), `nobody` through `setpriv`.
 */
const asUnprivileged = (mode: string, file: string) =>
  process.getuid?.() === 0
    ? spawnChild(childScript("writer.ts"), [mode, file], { HOME: os.tmpdir() }, ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    : spawnChild(childScript("writer.ts"), [mode, file])

describe("a lock file this user cannot write", () => {
  it("is refused, naming it, by the lease and by the writer's open: a read-only lock would lock nothing", async () => {
    const directory = temporaryDirectory()
    fs.chmodSync(directory, 0o777)
    const file = path.join(directory, "events.sqlite")
    await (await openSqlite(file)).close()
    fs.chmodSync(file, 0o666)
    fs.chmodSync(`${file}${LOCK_SUFFIX}`, 0o444)
    const lease = asUnprivileged("try-lease", file)
    await lease.exited
    expect(lease.output()).toBe(`refused Io: io: ${file}${LOCK_SUFFIX}: this user cannot write the writer's lock file (EACCES)\n`)
    const open = asUnprivileged("try-message", file)
    await open.exited
    expect(open.output()).toBe(`refused Io: io: ${file}${LOCK_SUFFIX} is not writable by this user; a writer of ${file} needs to write it\n`)
    expect(listing(directory)).toEqual(["events.sqlite", `events.sqlite${LOCK_SUFFIX}`])
  })
})

describe("files of a new log", () => {
  it("are this user's and its group's, never others': the log, its -wal and -shm, and the lock", async () => {
    const directory = temporaryDirectory()
    const file = path.join(directory, "events.sqlite")
    const previous = process.umask(0o002)
    try {
      const database = await openSqlite(file)
      const modes = Object.fromEntries(listing(directory).map((name) => [name, fs.statSync(path.join(directory, name)).mode & 0o777]))
      await database.close()
      // The lock is made by the keeper, started earlier with another umask: the host's of now applies.
      expect(modes).toEqual({
        "events.sqlite": 0o660,
        "events.sqlite-shm": 0o660,
        "events.sqlite-wal": 0o660,
        [`events.sqlite${LOCK_SUFFIX}`]: 0o660,
      })
      process.umask(0o077)
      const closed = path.join(temporaryDirectory(), "closed.sqlite")
      await (await openSqlite(closed)).close()
      expect([fs.statSync(closed).mode & 0o777, fs.statSync(`${closed}${LOCK_SUFFIX}`).mode & 0o777]).toEqual([0o600, 0o600])
    } finally {
      process.umask(previous)
    }
    // A log that exists keeps its own bits.
    const shared = path.join(temporaryDirectory(), "shared.sqlite")
    fs.writeFileSync(shared, "")
    fs.chmodSync(shared, 0o644)
    await (await openSqlite(shared)).close()
    expect(fs.statSync(shared).mode & 0o777).toBe(0o644)
  })

  it("refuses a link, or a file of several names, at the lock's name, leaving what it points to as it was", async () => {
    const directory = temporaryDirectory()
    const file = path.join(directory, "events.sqlite")
    const other = path.join(temporaryDirectory(), "app.sqlite")
    const connection = new (createRequire(import.meta.url)("better-sqlite3"))(other)
    connection.pragma("journal_mode = WAL")
    connection.exec("CREATE TABLE notes (body TEXT)")
    connection.close()
    const before = fs.readFileSync(other)
    fs.symlinkSync(other, `${file}${LOCK_SUFFIX}`)
    await expectReason(openSqlite(file), "Io", `${file}${LOCK_SUFFIX}: the writer's lock file is a symbolic link; remove it (the writer makes its own)`)
    fs.rmSync(`${file}${LOCK_SUFFIX}`)
    fs.linkSync(other, `${file}${LOCK_SUFFIX}`)
    await expectReason(openSqlite(file), "Io", "the writer's lock file is a file of 2 hard links")
    expect(fs.readFileSync(other).equals(before)).toBe(true)
    expect(listing(directory)).toEqual([`events.sqlite${LOCK_SUFFIX}`])
    // A lock file with other content is said to be one, not taken for a log that is none.
    fs.rmSync(`${file}${LOCK_SUFFIX}`)
    fs.writeFileSync(`${file}${LOCK_SUFFIX}`, "x".repeat(4096))
    await expectReason(openSqlite(file), "Io", `${file}${LOCK_SUFFIX}: the writer's lock file holds something else (SQLite: file is not a database); remove it`)
  })
})

/** Only root makes a file another user owns; elsewhere the case cannot be set up (and says so). */
const asRoot = process.getuid?.() === 0
if (!asRoot) console.log("a sidecar of another user: not run, only root can make a file another user owns")

describe.runIf(asRoot)("a sidecar of another user", () => {
  it("is refused, naming it, by a writer and a reader in a folder every user can write: SQLite would read it into the log", async () => {
    const directory = temporaryDirectory()
    const file = path.join(directory, "events.sqlite")
    await (await openSqlite(file)).close()
    // A sticky folder every user can write, as /tmp; on macOS its files take the folder's group.
    fs.chmodSync(directory, 0o3777)
    for (const suffix of ["-wal", "-journal"]) {
      const planted = `${file}${suffix}`
      fs.writeFileSync(planted, "planted history")
      fs.chmodSync(planted, 0o666)
      fs.chownSync(planted, 65534, fs.statSync(file).gid)
      const message = `${planted} belongs to another user (uid 65534) than the log (uid 0), in a folder every user can write`
      for (const readOnly of [false, true]) await expectReason(openSqlite(file, { readOnly }), "Io", message)
      expect(fs.readFileSync(planted, "utf8")).toBe("planted history")
      fs.rmSync(planted)
    }
    // Nor an empty -wal or a -shm of another account (a reader that ended without its close): SQLite
    // reads nothing of them into the log.
    for (const suffix of ["-wal", "-shm"]) {
      fs.writeFileSync(`${file}${suffix}`, "")
      fs.chownSync(`${file}${suffix}`, 65534, 65534)
    }
    const untouched = await openSqlite(file, { readOnly: true }).then(
      (database) => database.close().then(() => "opened"),
      (error: unknown) => String(error),
    )
    expect(untouched).not.toContain("belongs to another user")
    for (const suffix of ["-wal", "-shm"]) fs.rmSync(`${file}${suffix}`, { force: true })
    // In a folder others cannot write, its writers are the owner's choice (a log a group shares).
    fs.chmodSync(directory, 0o775)
    const planted = `${file}-wal`
    fs.writeFileSync(planted, "")
    fs.chownSync(planted, 65534, 65534)
    const opened = await openSqlite(file, { readOnly: true }).then(
      (database) => database.close().then(() => "opened"),
      (error: unknown) => String(error),
    )
    expect(opened).toBe("opened")
  })
})

describe("the writer lease across processes", () => {
  it("refuses a second writer process while the first is alive, and frees the lease at once when it is killed", async () => {
    const directory = temporaryDirectory()
    const file = path.join(directory, "events.sqlite")
    const holder = spawnChild(childScript("writer.ts"), ["hold", file])
    try {
      await holder.line("ready")
      // Start this process's lease keeper first, so the timing below is the refusal alone.
      await (await openSqlite(path.join(directory, "warm-up.sqlite"))).close()

      // This process is a second writer; so is another child. The refusal names the holding host.
      expect(await elapsed(() => expectReason(openSqlite(file), "WriterBusy"))).toBeLessThan(AT_ONCE_MS)
      const refused = await expectReason(openSqlite(file), "WriterBusy")
      expect(refused.reason._tag === "WriterBusy" ? refused.reason.holder : "").toBe(`process ${holder.process.pid}`)
      const contender = spawnChild(childScript("writer.ts"), ["try", file])
      expect(await contender.line("refused")).toBe("refused WriterBusy")
      expect((await contender.exited).code).toBe(0)

      holder.process.kill("SIGKILL")
      expect((await holder.exited).signal).toBe("SIGKILL")
      const started = performance.now()
      const next = await openSqlite(file)
      expect(performance.now() - started).toBeLessThan(AT_ONCE_MS)
      const versions = await next.read((transaction) => transaction.selectFrom("schema_migrations").select("version").execute())
      expect(versions).toEqual(MIGRATIONS.map((migration) => ({ version: migration.version })))
      await next.close()
      expect(listing(directory)).toContain(`events.sqlite${LOCK_SUFFIX}`)
    } finally {
      holder.process.kill("SIGKILL")
    }
  })

  it("names another program that holds a read lock on the lock file as the holder", async () => {
    const directory = temporaryDirectory()
    const file = path.join(directory, "events.sqlite")
    await (await openSqlite(file)).close()
    const reader = spawnChild(childScript("writer.ts"), ["read-lock", file])
    try {
      await reader.line("ready")
      const refused = await expectReason(openSqlite(file), "WriterBusy")
      expect(refused.reason._tag === "WriterBusy" ? refused.reason.holder : "").toBe(`process ${reader.process.pid}`)
    } finally {
      reader.process.kill("SIGKILL")
      await reader.exited
    }
  })

  it("keeps the lease while its holder reads the lock and database files and copies the folder, and frees it when the holder is killed", async () => {
    const directory = temporaryDirectory()
    const file = path.join(directory, "events.sqlite")
    const holder = spawnChild(childScript("writer.ts"), ["hold-io", file])
    try {
      await holder.line("ready")
      const contender = spawnChild(childScript("writer.ts"), ["try", file])
      expect(await contender.line("refused")).toBe("refused WriterBusy")
      await expectReason(openSqlite(file), "WriterBusy")
      holder.process.kill("SIGKILL")
      await holder.exited
      const next = await openPromptly(file)
      await next.close()
    } finally {
      holder.process.kill("SIGKILL")
    }
  })

  it("keeps this process's lease while it reads the lock file, copies the folder and opens the database file", async () => {
    const directory = temporaryDirectory()
    const file = path.join(directory, "events.sqlite")
    const database = await openSqlite(file)
    const copies = temporaryDirectory()
    for (let round = 0; round < 10; round++) {
      fs.readFileSync(`${file}${LOCK_SUFFIX}`)
      fs.closeSync(fs.openSync(`${file}${LOCK_SUFFIX}`, "r+"))
      fs.readFileSync(file)
      fs.cpSync(directory, path.join(copies, String(round)), { recursive: true })
    }
    const contender = spawnChild(childScript("writer.ts"), ["try", file])
    expect(await contender.line("refused")).toBe("refused WriterBusy")
    await database.close()
    const free = spawnChild(childScript("writer.ts"), ["try", file])
    expect(await free.line("opened")).toBe("opened")
  })

  it("closes when its keeper does not answer (stopped), ending that keeper: the lease is free at once", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const database = await openSqlite(file)
    const keeper = keeperProcessId()!
    process.kill(keeper, "SIGSTOP")
    // Should the keeper be left, it runs again after 10 s; the close must not have waited for it.
    let resumed = false
    const resume = setTimeout(() => {
      resumed = true
      process.kill(keeper, "SIGCONT")
    }, 10_000)
    await database.close()
    expect(resumed).toBe(false)
    // The lease was its last: the keeper was ended, its lock with it, without running again.
    const next = await openPromptly(file)
    clearTimeout(resume)
    expect(resumed).toBe(false)
    expect(isAlive(keeper)).toBe(false)
    await next.close()
  }, 20_000)

  it("fails an acquire whose keeper does not answer (stopped) after the acquire wait, ending that keeper", async () => {
    // A keeper of its own: the one a test before left idle is ended first.
    const earlier = keeperProcessId()
    if (earlier !== undefined) {
      process.kill(earlier, "SIGKILL")
      while (keeperProcessId() !== undefined) await new Promise((resolve) => setTimeout(resolve, 10))
    }
    const file = path.join(temporaryDirectory(), "events.sqlite")
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] })
    let acquiring: Promise<unknown>
    let keeper: number
    try {
      acquiring = acquireLease(canonicalDatabasePath(file)).then(
        () => "acquired",
        (error: unknown) => error,
      )
      // Stopped before it has started, so before it can answer; the wait runs out once the stop has
      // taken effect (a signal is delivered a moment after it is sent, later on a loaded machine).
      keeper = keeperProcessId()!
      process.kill(keeper, "SIGSTOP")
      const started = performance.now()
      while (!isStoppedProcess(keeper) && performance.now() - started < 10_000) await new Promise((resolve) => setImmediate(resolve))
      expect(isStoppedProcess(keeper)).toBe(true)
      vi.advanceTimersByTime(LEASE_DEFAULTS.acquireWaitMs)
    } finally {
      vi.useRealTimers()
    }
    try {
      const failure = await acquiring
      expect(failure).toMatchObject({ reason: { _tag: "Io" } })
      expect(String((failure as Error).message)).toContain(`did not answer within ${LEASE_DEFAULTS.acquireWaitMs} ms`)
      for (let waited = 0; isAlive(keeper) && waited < 5_000; waited += 20) await new Promise((resolve) => setTimeout(resolve, 20))
      expect(isAlive(keeper)).toBe(false)
      const next = await openPromptly(file)
      await next.close()
    } finally {
      // Whatever failed above, the tests after this one get a keeper of their own.
      if (isAlive(keeper)) process.kill(keeper, "SIGKILL")
      while (keeperProcessId() === keeper) await new Promise((resolve) => setTimeout(resolve, 10))
    }
  }, 20_000)

  it("lets a host that never closes its log exit on its own, and frees the lease when it does", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const child = spawnChild(childScript("writer.ts"), ["open-and-leave", file])
    await child.line("left")
    expect((await child.exited).code).toBe(0)
    const next = await openPromptly(file)
    await next.close()
  })

  it("never ends a keeper that is only slow: a release queued behind contended acquires leaves it serving them", async () => {
    const directory = temporaryDirectory()
    const [own, first, second] = ["own.sqlite", "first.sqlite", "second.sqlite"].map((name) => path.join(directory, name))
    const holders = [first!, second!].map((file) => spawnChild(childScript("writer.ts"), ["hold", file]))
    try {
      for (const holder of holders) await holder.line("ready")
      const lease = await acquireLease(canonicalDatabasePath(own!))
      const keeper = keeperProcessId()!
      // Two acquires the keeper serves one after the other, each waiting the contender wait, then
      // the release: its answer comes after more than the release wait.
      const contended = [first!, second!].map((file) =>
        acquireLease(canonicalDatabasePath(file)).then(
          () => "acquired",
          (error: unknown) => (error as { readonly reason: { readonly _tag: string } }).reason._tag,
        ),
      )
      await lease.release()
      expect(await Promise.all(contended)).toEqual(["WriterBusy", "WriterBusy"])
      expect(isAlive(keeper)).toBe(true)
      expect(keeperProcessId()).toBe(keeper)
    } finally {
      for (const holder of holders) holder.process.kill("SIGKILL")
    }
  }, 20_000)

  it("names a stopped keeper whose host was killed as the holder, and how to end it", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const holder = spawnChild(childScript("writer.ts"), ["hold", file])
    let keeper: number | undefined
    try {
      await holder.line("ready")
      keeper = lockHolderOf(`${file}${LOCK_SUFFIX}`)
      expect(keeper).toBeDefined()
      expect(keeper).not.toBe(holder.process.pid)
      process.kill(keeper!, "SIGSTOP")
      await vi.waitFor(() => expect(isStoppedProcess(keeper!)).toBe(true), { timeout: 5_000 })
      // Killed by a signal it cannot handle, the host leaves its stopped keeper holding the lock.
      holder.process.kill("SIGKILL")
      await holder.exited
      const refused = await expectReason(openSqlite(file), "WriterBusy")
      expect(refused.reason._tag === "WriterBusy" ? refused.reason.holder : "").toBe(
        `lease keeper process ${keeper}, whose host process ${holder.process.pid} has ended and which is stopped: ending it (kill -KILL ${keeper}) frees the log`,
      )
      process.kill(keeper!, "SIGKILL")
      const next = await openPromptly(file)
      await next.close()
    } finally {
      holder.process.kill("SIGKILL")
      if (keeper !== undefined && isAlive(keeper)) process.kill(keeper, "SIGKILL")
    }
  })

  it("names the parent of a lock holder it did not start (an earlier build's keeper, naming no host) as the holder", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const driver = createRequire(import.meta.url).resolve("better-sqlite3")
    // Shaped as an earlier keeper: `node -e SOURCE <driver> <wait>`, its last argument no host's id.
    const source = `const Database = require(process.argv[1]); const c = new Database(${JSON.stringify(`${file}${LOCK_SUFFIX}`)}); c.pragma("journal_mode = MEMORY"); c.pragma("locking_mode = EXCLUSIVE"); c.exec("BEGIN EXCLUSIVE"); console.log("locked"); setInterval(() => {}, 60000)`
    const holder = spawn(process.execPath, ["-e", source, driver, "1000"], { stdio: ["ignore", "pipe", "inherit"] })
    try {
      await new Promise((resolve) => holder.stdout.once("data", resolve))
      const refused = await expectReason(openSqlite(file), "WriterBusy")
      expect(refused.reason._tag === "WriterBusy" ? refused.reason.holder : "").toBe(`process ${process.pid}`)
    } finally {
      holder.kill("SIGKILL")
    }
  })

  it("starts its keeper with only the variables node may need to start: none of the host's credentials", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const holder = spawnChild(childScript("writer.ts"), ["hold", file], { MAKA_API_KEY: "sk-keeper-must-not-hold-this", ELECTRON_RUN_AS_NODE: "1" })
    try {
      await holder.line("ready")
      const keeper = lockHolderOf(`${file}${LOCK_SUFFIX}`)
      expect(keeper).toBeDefined()
      const names = fs.readFileSync(`/proc/${keeper}/environ`, "utf8").split("\0").filter((entry) => entry !== "").map((entry) => entry.split("=")[0])
      expect(names).toContain("ELECTRON_RUN_AS_NODE")
      expect(names).not.toContain("MAKA_API_KEY")
      expect(names.every((name) => ["PATH", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "ELECTRON_RUN_AS_NODE", "SystemRoot", "TMPDIR", "TEMP", "TMP"].includes(name!))).toBe(true)
      // It holds the lease all the same.
      await expectReason(openSqlite(file), "WriterBusy")
    } finally {
      holder.process.kill("SIGKILL")
    }
  })

  it("names another program holding the lock file as itself, not its parent", async () => {
    const directory = temporaryDirectory()
    const file = path.join(directory, "events.sqlite")
    const driver = createRequire(import.meta.url).resolve("better-sqlite3")
    const script = path.join(directory, "holder.cjs")
    fs.writeFileSync(
      script,
      `const Database = require(${JSON.stringify(driver)}); const c = new Database(${JSON.stringify(`${file}${LOCK_SUFFIX}`)}); c.pragma("journal_mode = MEMORY"); c.pragma("locking_mode = EXCLUSIVE"); c.exec("BEGIN EXCLUSIVE"); console.log("locked"); setInterval(() => {}, 60000)`,
    )
    const holder = spawn(process.execPath, [script], { stdio: ["ignore", "pipe", "inherit"] })
    try {
      await new Promise((resolve) => holder.stdout.once("data", resolve))
      const refused = await expectReason(openSqlite(file), "WriterBusy")
      expect(refused.reason._tag === "WriterBusy" ? refused.reason.holder : "").toBe(`process ${holder.pid}`)
    } finally {
      holder.kill("SIGKILL")
    }
  })

  it("ends a stopped keeper when its host exits, so the lease is free once the host is gone", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const child = spawnChild(childScript("writer.ts"), ["stop-keeper-and-leave", file])
    const keeper = Number((await child.line("left")).split(" ")[1])
    expect((await child.exited).code).toBe(0)
    const next = await openPromptly(file)
    await next.close()
    expect(isAlive(keeper)).toBe(false)
  })

  it("keeps the lease through SIGINT, SIGTERM and SIGHUP sent to its keeper (the host's process group gets them)", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const database = await openSqlite(file)
    const keeper = keeperProcessId()
    expect(keeper).toBeDefined()
    for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.kill(keeper!, signal)
    // A keeper that died of them would be noticed within this wait (see the test below).
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect(keeperProcessId()).toBe(keeper)
    expect(await database.write(async () => 1)).toBe(1)
    const busy = spawnChild(childScript("writer.ts"), ["try", file])
    expect(await busy.line("refused")).toBe("refused WriterBusy")
    await database.close()
  })

  it("refuses writes once the keeper holding the lease is gone, and lets the next writer in", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const database = await openSqlite(file)
    const keeper = keeperProcessId()
    expect(keeper).toBeDefined()
    process.kill(keeper!, "SIGKILL")
    for (let waited = 0; keeperProcessId() !== undefined && waited < 5_000; waited += 20) {
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    const lost = await expectReason(database.write(async () => 1), "WriterBusy")
    // Its own lease was lost, not taken by another writer: it says so.
    expect(lost.reason).toEqual({ _tag: "WriterBusy", path: file, lost: true })
    const free = spawnChild(childScript("writer.ts"), ["try", file])
    expect(await free.line("opened")).toBe("opened")
    await database.close()
    const next = await openSqlite(file)
    await next.close()
  })

  it("hands the lease to another process after a clean close", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const database = await openSqlite(file)
    const busy = spawnChild(childScript("writer.ts"), ["try", file])
    expect(await busy.line("refused")).toBe("refused WriterBusy")
    await database.close()
    const free = spawnChild(childScript("writer.ts"), ["try", file])
    expect(await free.line("opened")).toBe("opened")
    expect((await free.exited).code).toBe(0)
    const error = await rejection(database.read(async () => 1))
    expect(error.reason._tag).toBe("ConnectionClosed")
  })
})

describe("a lease asked for without a file descriptor to spare", () => {
  it("is refused with the spawn's error, and the process goes on", async () => {
    const folder = temporaryDirectory()
    // Under a small descriptor limit the child takes every free one; the keeper cannot be spawned.
    const child = spawnChild(childScript("lease-emfile.ts"), [path.join(folder, "events.sqlite")], {}, ["/bin/sh", "-c", 'ulimit -n 1024 && exec "$@"', "sh"])
    const { code } = await child.exited
    expect(code, child.output()).toBe(0)
    expect(child.output()).toMatch(/^refused .*EMFILE/m)
  }, 60_000)
})

describe("a log path SQLite cannot open with its lock file", () => {
  it("is refused before anything is made: a path past SQLite's limit, a name whose lock file's is past the file system's", async () => {
    const root = temporaryDirectory()
    let folder = root
    while (Buffer.byteLength(folder) < 460) folder = path.join(folder, "d".repeat(40))
    fs.mkdirSync(folder, { recursive: true })
    const long = path.join(folder, `${"b".repeat(60)}.sqlite`)
    const refused = await expectReason(openSqlite(long), "UnsupportedDatabase")
    expect(refused.message).toContain(`bytes long; SQLite opens a log path of at most ${MAX_DATABASE_PATH_BYTES} bytes`)
    expect(fs.readdirSync(folder)).toEqual([])
    // A reader makes no lock file: a log at a path a writer is refused (a backup's copy) opens read-only.
    const within = path.join(folder, `${"r".repeat(MAX_DATABASE_PATH_BYTES + 6 - Buffer.byteLength(folder) - 8)}.sqlite`)
    expect(Buffer.byteLength(within)).toBe(MAX_DATABASE_PATH_BYTES + 6)
    const source = await openSqlite(path.join(root, "events.sqlite"))
    await source.close()
    fs.copyFileSync(path.join(root, "events.sqlite"), within)
    await expectReason(openSqlite(within), "UnsupportedDatabase")
    const reader = await openSqlite(within, { readOnly: true })
    await reader.close()
    // A name the file system takes, whose lock file's name (12 bytes longer) it does not.
    const named = path.join(root, `${"n".repeat(248)}.sqlite`)
    const lock = await expectReason(openSqlite(named), "Io")
    expect(lock.message).toContain("the writer's lock file's name is too long (ENAMETOOLONG)")
    expect(fs.existsSync(named)).toBe(false)
  })
})
