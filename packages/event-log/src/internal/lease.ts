/**
 * The single-writer lease of an SQLite log (docs/log-format.md §3.1): an exclusive SQLite lock on the
 * sibling file `<database>.writer.lock`, taken without waiting and held until `release()`, plus the
 * canonicalisation of database paths. The lock file is never deleted.
 *
 * The lock is a POSIX lock, and POSIX drops every lock a process holds on a file when that process
 * closes any descriptor of the file: a host that reads the lock file or copies the log folder would
 * silently lose a lock held in its own process. So the lock is held by a small keeper process that
 * opens the lock files and nothing else. The keeper serves every lease of this process over a pipe
 * and exits when the pipe closes, that is when this process closes it or dies (SIGKILL included); the
 * operating system then drops its locks. The host's own file I/O can never touch them. It ignores
 * SIGINT, SIGTERM and SIGHUP, which reach it with the host's process group: the host still needs the
 * lease to seal what those signals ask of it.
 */
import BetterSqlite3 from "better-sqlite3"
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import * as EventLogError from "../EventLogError.ts"
import { errorCode, storeError } from "./store-error.ts"

export const LOCK_SUFFIX = ".writer.lock"

/** The longest path SQLite opens a WAL-mode database at (its `-wal` beside it). */
export const SQLITE_MAX_PATH_BYTES = 504

/** The longest log path a writer opens: its lock file's name is the log's and `LOCK_SUFFIX`. */
export const MAX_DATABASE_PATH_BYTES = SQLITE_MAX_PATH_BYTES - LOCK_SUFFIX.length

export interface Lease {
  /** The canonical database path the lease guards. */
  readonly databasePath: string
  readonly lockPath: string
  /** False once released, or when the keeper holding the lock is gone. */
  readonly isHeld: () => boolean
  /** Releases the lock and waits until the keeper confirms it; later calls do nothing. */
  readonly release: () => Promise<void>
}

/** Tunables of the lease keeper. */
export const LEASE_DEFAULTS = Object.freeze({
  /**
   * How long a contender waits for a lock held by another process before `WriterBusy`: long enough
   * for the keeper of a holder that was just killed to see its pipe close and exit, far below the
   * database's busy timeout. A second writer in the same process is refused without waiting.
   */
  contenderWaitMs: 1_000,
  /** How long an idle keeper (no lease held) stays up for the next lease before it exits. */
  idleExitMs: 30_000,
  /**
   * How long a release waits for the keeper's answer: a keeper that does not answer because it is
   * stopped (`Keeper.isStopped`) is killed when the lease was its last, which drops the lock; the
   * host's close goes on.
   */
  releaseWaitMs: 2_000,
  /**
   * How long an acquire waits for the keeper's answer, its start included, before it fails: a keeper
   * stopped before it answered would hold the host's open forever. It is then killed when it serves
   * no other lease of the host, so a lock it took late goes with it.
   */
  acquireWaitMs: 30_000,
})

const unsupported = (message: string): EventLogError.EventLogError =>
  EventLogError.make({ _tag: "UnsupportedDatabase", message })

const io = (message: string): EventLogError.EventLogError => EventLogError.make({ _tag: "Io", message })

/** `lstat` of `file` (a dangling symbolic link is there too), `undefined` when nothing is. */
export const lstatOrUndefined = (file: string): fs.Stats | undefined => {
  try {
    return fs.lstatSync(file)
  } catch (error) {
    if (errorCode(error) === "ENOENT") return undefined
    throw storeError(error, file)
  }
}

/** The files SQLite and the lease keep beside a database, named by its name and these suffixes. */
const SIDECAR_SUFFIXES = ["-wal", "-shm", "-journal", LOCK_SUFFIX] as const

/**
 * The database beside `file` whose sidecar `file` names (its `-wal`, `-shm`, `-journal` or writer's
 * lock), or `undefined`: a file of that name with no database of the shorter name beside it is
 * nobody's sidecar.
 */
export const sidecarOf = (file: string): { readonly database: string; readonly suffix: string } | undefined => {
  const name = path.basename(file)
  for (const suffix of SIDECAR_SUFFIXES) {
    if (!name.endsWith(suffix) || name === suffix) continue
    const database = file.slice(0, -suffix.length)
    if (lstatOrUndefined(database) !== undefined) return { database, suffix }
  }
  return undefined
}

/**
 * The canonical path of a database file: symlinks resolved (a dangling one is refused), the
 * directory's real path plus the basename when the file does not exist yet. An existing file must
 * be a regular file with exactly one link: a hard-linked database would split its WAL sidecars. A
 * path naming a sidecar of a database beside it (its `-wal`, `-shm`, `-journal` or writer's lock)
 * is refused: opened as a log of its own, it would be deleted or overwritten by the database's next
 * open, with every fact written into it. So is a path ending in whitespace, which the driver trims.
 */
export const canonicalDatabasePath = (databasePath: string, access: "writer" | "reader" = "writer"): string => {
  const absolute = path.resolve(databasePath)
  // better-sqlite3 trims the name it opens: its lock and checks would name another file than SQLite.
  if (absolute.trimEnd() !== absolute) {
    throw unsupported(`${JSON.stringify(absolute)} ends in whitespace, which the SQLite driver drops; refusing to open it as an event log`)
  }
  const stats = lstatOrUndefined(absolute)
  let canonical: string
  if (stats?.isSymbolicLink() === true) {
    try {
      canonical = fs.realpathSync(absolute)
    } catch (error) {
      const code = errorCode(error)
      if (code === "ENOENT" || code === "ELOOP") {
        throw unsupported(`${absolute} is a dangling symbolic link; refusing to open it as an event log`)
      }
      throw storeError(error, absolute)
    }
  } else {
    const directory = path.dirname(absolute)
    try {
      canonical = path.join(fs.realpathSync(directory), path.basename(absolute))
    } catch (error) {
      if (errorCode(error) === "ENOENT") throw io(`${absolute}: the directory ${directory} does not exist`)
      throw storeError(error, absolute)
    }
  }
  // SQLite opens no path past its limit (with the file's `-wal`), and names the failure "unable to
  // open database file"; a writer's lock file's name is the longest the log adds.
  const bytes = Buffer.byteLength(canonical, "utf8")
  const limit = access === "writer" ? MAX_DATABASE_PATH_BYTES : SQLITE_MAX_PATH_BYTES
  if (bytes > limit) {
    const why = access === "writer" ? ` (with its lock file's ${LOCK_SUFFIX})` : ""
    throw unsupported(`${canonical} is ${bytes} bytes long; SQLite opens a log path of at most ${limit} bytes${why}: use a shorter path`)
  }
  // A symbolic link may name a target that ends in whitespace, as the path itself may.
  if (canonical.trimEnd() !== canonical) {
    throw unsupported(`${JSON.stringify(canonical)} ends in whitespace, which the SQLite driver drops; refusing to open it as an event log`)
  }
  const sidecar = sidecarOf(canonical)
  if (sidecar !== undefined) {
    throw unsupported(`${canonical} is the ${sidecar.suffix} file of the database ${sidecar.database}, not an event log; refusing to open it`)
  }
  const target = lstatOrUndefined(canonical)
  if (target !== undefined) {
    if (!target.isFile()) throw unsupported(`${canonical} is not a regular file; refusing to open it as an event log`)
    if (target.nlink !== 1) {
      throw unsupported(
        `${canonical} has ${target.nlink} hard links; an event log must have exactly one (its WAL files would be split)`,
      )
    }
  }
  return canonical
}

/**
 * The keeper, run as `node -e KEEPER_SOURCE <better-sqlite3 path> <contender wait> <host pid>` (the
 * last only for `leaseHolderOf` to read in `/proc`: a keeper whose parent is no longer it has lost
 * its host). It reads one
 * JSON request per line on stdin (`acquire` or `release` of a lock file) and answers one JSON line on
 * stdout. Each lock is a better-sqlite3 connection in `locking_mode=EXCLUSIVE` inside `BEGIN
 * EXCLUSIVE` with its journal in memory (a killed keeper leaves no `-journal` beside the lock file).
 * End of stdin, or any pipe error, ends the process and with it every lock.
 */
const KEEPER_SOURCE = String.raw`"use strict";
const fs = require("node:fs");
const Database = require(process.argv[1]);
const wait = Number(process.argv[2]);
const held = new Map();
const reply = (message) => process.stdout.write(JSON.stringify(message) + "\n");
const acquire = (request) => {
  if (held.has(request.path)) return reply({ id: request.id, busy: true });
  // A new lock file is made this user's, and its group's when the umask lets it, but never others':
  // another user who could open it could hold it and keep every writer out.
  // The host's umask of this request, not the keeper's of its start.
  const mode = typeof request.umask === "number" ? 0o660 & ~request.umask : 0o660;
  try {
    const descriptor = fs.openSync(request.path, fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_WRONLY, mode);
    try { if (typeof request.umask === "number") fs.fchmodSync(descriptor, mode); } finally { fs.closeSync(descriptor); }
  } catch (error) {
    if (error.code === "ENAMETOOLONG") return reply({ id: request.id, code: error.code, message: "the writer's lock file's name is too long (ENAMETOOLONG): use a shorter file name for the log" });
    if (error.code !== "EEXIST" && error.code !== "EACCES") return reply({ id: request.id, code: error.code, message: "the writer's lock file cannot be made (" + error.code + ")" });
  }
  // Only a regular file of one name: SQLite follows a link, so one planted at the lock's name (in a
  // folder others can write) would have the keeper lock, and change, the file it points to.
  let entry;
  try { entry = fs.lstatSync(request.path); } catch (error) { return reply({ id: request.id, code: error.code, message: "the writer's lock file cannot be read (" + error.code + ")" }); }
  if (!entry.isFile() || entry.nlink !== 1) {
    const what = entry.isSymbolicLink() ? "a symbolic link" : entry.isFile() ? "a file of " + entry.nlink + " hard links" : "not a regular file";
    return reply({ id: request.id, code: "ELOOP", message: "the writer's lock file is " + what + "; remove it (the writer makes its own)" });
  }
  // SQLite opens a lock file it cannot write read-only, and BEGIN EXCLUSIVE then locks nothing: two
  // writers would share the log. (access() opens no descriptor, which would drop a held lock.)
  try {
    fs.accessSync(request.path, fs.constants.W_OK);
  } catch (error) {
    if (error.code === "ENAMETOOLONG") return reply({ id: request.id, code: error.code, message: "the writer's lock file's name is too long (ENAMETOOLONG): use a shorter file name for the log" });
    if (error.code !== "ENOENT") return reply({ id: request.id, code: error.code, message: "this user cannot write the writer's lock file (" + error.code + ")" });
  }
  let connection;
  try {
    connection = new Database(request.path, { timeout: wait });
    connection.pragma("journal_mode = MEMORY");
    connection.pragma("locking_mode = EXCLUSIVE");
    connection.exec("BEGIN EXCLUSIVE");
    held.set(request.path, connection);
    reply({ id: request.id, ok: true });
  } catch (error) {
    try { if (connection !== undefined) connection.close(); } catch {}
    const code = error !== null && typeof error === "object" ? error.code : undefined;
    if (code === "SQLITE_BUSY" || code === "SQLITE_LOCKED") return reply({ id: request.id, busy: true });
    reply({ id: request.id, code, message: String(error && error.message ? error.message : error) });
  }
};
const release = (request) => {
  const connection = held.get(request.path);
  held.delete(request.path);
  try { if (connection !== undefined) connection.close(); } catch {}
  reply({ id: request.id, ok: true });
};
let buffer = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  buffer += chunk;
  for (let newline = buffer.indexOf("\n"); newline >= 0; newline = buffer.indexOf("\n")) {
    const line = buffer.slice(0, newline);
    buffer = buffer.slice(newline + 1);
    if (line.length === 0) continue;
    const request = JSON.parse(line);
    if (request.op === "acquire") acquire(request);
    else release(request);
  }
});
const end = () => process.exit(0);
process.stdin.on("end", end);
process.stdin.on("error", end);
process.stdout.on("error", end);
// A signal sent to the host's whole process group (Ctrl-C at a terminal, a service manager's stop)
// is the host's to act on: it cancels or hands off its runs and writes their terminals under this
// lease. The keeper ends with its pipe, when the host closes it or dies.
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(signal, () => undefined);
`

interface KeeperReply {
  readonly id: number
  readonly ok?: boolean
  readonly busy?: boolean
  readonly code?: string
  readonly message?: string
}

const parseReply = (line: string): KeeperReply | undefined => {
  try {
    const value: unknown = JSON.parse(line)
    if (typeof value !== "object" || value === null || !("id" in value) || typeof value.id !== "number") return undefined
    const field = (key: string): unknown => Reflect.get(value, key)
    const code = field("code")
    const message = field("message")
    return {
      id: value.id,
      ok: field("ok") === true,
      busy: field("busy") === true,
      ...(typeof code === "string" ? { code } : {}),
      ...(typeof message === "string" ? { message } : {}),
    }
  } catch {
    return undefined
  }
}

/**
 * The file of the better-sqlite3 this process loaded, for the keeper to load the same one: found in
 * the module cache by its export (so it also holds when a bundler rewrote the import to a path),
 * else resolved from this module.
 */
const driverPath = (): string => {
  // A CommonJS bundle of this module has its own `require` and no `import.meta.url` (an ES module
  // bundle may name a `require` of its own too, a shim with neither `cache` nor `resolve`).
  const resolver = typeof require === "function" && typeof require.resolve === "function" ? require : createRequire(import.meta.url)
  for (const entry of Object.values(resolver.cache)) {
    if (entry !== undefined && entry.exports === BetterSqlite3) return entry.filename
  }
  return resolver.resolve("better-sqlite3")
}

/**
 * The variables a keeper gets of its host's environment: what the node it runs as may need to start
 * (its libraries' path, Electron's switch to plain node, Windows' system folder) and nothing else.
 * The host's `NODE_OPTIONS` (loaders, inspectors) and the credentials it holds have no business there.
 */
const KEEPER_VARIABLES: ReadonlyArray<string> = ["PATH", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "ELECTRON_RUN_AS_NODE", "SystemRoot", "TMPDIR", "TEMP", "TMP"]

export const keeperEnvironment = (environment: NodeJS.ProcessEnv): Record<string, string> =>
  Object.fromEntries(KEEPER_VARIABLES.flatMap((name) => (environment[name] === undefined ? [] : [[name, environment[name]!]])))

/**
 * This process's umask now, for a lock file the keeper (started earlier, with the umask of then)
 * makes, read from `/proc/self/status` (Linux): never set, even for a moment, as reading it through
 * `process.umask` would be (a file another thread made meanwhile would take the wrong bits).
 * Undefined where there is no such line (macOS): the keeper's umask then applies.
 */
const currentUmask = (): number | undefined => {
  try {
    const line = /^Umask:\s*([0-7]+)$/m.exec(fs.readFileSync("/proc/self/status", "utf8"))
    return line === null ? undefined : Number.parseInt(line[1]!, 8)
  } catch {
    return undefined
  }
}

/** The keeper process of this process, started on the first lease and shared by all of them. */
class Keeper {
  private readonly child: ChildProcessWithoutNullStreams
  private readonly pending = new Map<number, (reply: KeeperReply | Error) => void>()
  private nextId = 1
  private buffer = ""
  private stderr = ""
  private held = 0
  private idleTimer: NodeJS.Timeout | undefined
  private exitedFlag = false
  private retiring = false
  /** Whether the keeper's pipes were made (a spawn short of file descriptors makes none). */
  private readonly hasPipes: boolean

  constructor() {
    const driver = driverPath()
    // The host's NODE_OPTIONS (loaders, inspectors) have no business in the keeper.
    this.child = spawn(process.execPath, ["-e", KEEPER_SOURCE, driver, String(LEASE_DEFAULTS.contenderWaitMs), String(process.pid)], {
      stdio: ["pipe", "pipe", "pipe"],
      env: keeperEnvironment(process.env),
      windowsHide: true,
    })
    this.child.on("error", (error) => this.gone(error))
    // A spawn that failed at once (no file descriptor left for the pipes: EMFILE) gives a child
    // without pipes; its 'error' comes in the next turn and fails what waits for the keeper.
    this.hasPipes = [this.child.stdin, this.child.stdout, this.child.stderr].every((pipe: unknown) => pipe !== undefined && pipe !== null)
    if (!this.hasPipes) return
    this.child.stdout.setEncoding("utf8").on("data", (chunk: string) => this.receive(chunk))
    this.child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      this.stderr = `${this.stderr}${chunk}`.slice(-2_000)
    })
    this.child.stdin.on("error", () => undefined)
    this.child.on("exit", (code, signal) =>
      this.gone(new Error(`the lease keeper exited (${signal ?? code})${this.stderr === "" ? "" : `: ${this.stderr.trim()}`}`)),
    )
    process.on("exit", this.killOnExit)
    this.updateReference()
  }

  /** This process is exiting: a keeper still there (stopped, say) must not outlive it with its locks. */
  private readonly killOnExit = (): void => this.kill()

  /** How many leases the keeper holds for this process. */
  get leasesHeld(): number {
    return this.held
  }

  /**
   * Whether the keeper is stopped (SIGSTOP, a job-control stop): its state in `/proc` is `T`. A
   * keeper that is only slow (busy with earlier requests, each waiting up to the contender wait)
   * is not; where `/proc` is not there, none is taken to be.
   */
  isStopped(): boolean {
    const pid = this.child.pid
    if (pid === undefined || this.exitedFlag) return false
    const state = processState(pid)
    return state === "T" || state === "t"
  }

  /**
   * Ends the keeper at once (SIGKILL reaches a stopped process too): the operating system drops its
   * locks. Used when it does not answer and holds nothing else of this process's, and when this
   * process exits while it is still there (a stopped keeper never sees its pipe close).
   */
  kill(): void {
    if (this.exitedFlag) return
    // From now on the next lease starts a new keeper.
    this.retiring = true
    try {
      this.child.kill("SIGKILL")
    } catch {
      // Already gone.
    }
  }

  /** Whether the keeper is gone or ending: it takes no new request. */
  get exited(): boolean {
    return this.exitedFlag || this.retiring
  }

  get pid(): number | undefined {
    return this.child.pid
  }

  /**
   * Sends one request and waits for its answer; with `waitMs`, for at most that long (then rejects,
   * and the answer, if it comes, is dropped).
   */
  request(op: "acquire" | "release", lockPath: string, waitMs?: number): Promise<KeeperReply> {
    if (this.exited) return Promise.reject(new Error("the lease keeper is gone"))
    const id = this.nextId++
    return new Promise<KeeperReply>((resolve, reject) => {
      const timer =
        waitMs === undefined
          ? undefined
          : setTimeout(() => {
              this.pending.delete(id)
              this.updateReference()
              reject(new Error(`the lease keeper did not answer within ${waitMs} ms`))
            }, waitMs)
      this.pending.set(id, (reply) => {
        if (timer !== undefined) clearTimeout(timer)
        if (reply instanceof Error) reject(reply)
        else resolve(reply)
      })
      this.updateReference()
      // Without pipes the request waits for the spawn's 'error', which fails it.
      if (this.hasPipes) this.child.stdin.write(`${JSON.stringify({ id, op, path: lockPath, umask: currentUmask() })}\n`)
    })
  }

  /** Counts a held lease (the keeper stays up while any is held). */
  retain(): void {
    this.held++
    if (this.idleTimer !== undefined) clearTimeout(this.idleTimer)
    this.idleTimer = undefined
  }

  /** Uncounts a lease; with none left the keeper exits after a while, unless a new lease comes. */
  releaseOne(): void {
    this.held--
    this.idle()
  }

  /** With no lease held, ends the keeper after `idleExitMs` unless a lease is taken meanwhile. */
  idle(): void {
    if (this.held > 0 || this.exitedFlag || this.idleTimer !== undefined) return
    this.idleTimer = setTimeout(() => {
      this.idleTimer = undefined
      if (this.held > 0 || this.pending.size > 0) return
      // From now on the next lease starts a new keeper; this one ends with its pipe.
      this.retiring = true
      this.child.stdin.end()
    }, LEASE_DEFAULTS.idleExitMs)
    this.idleTimer.unref()
  }

  private receive(chunk: string): void {
    this.buffer += chunk
    for (let newline = this.buffer.indexOf("\n"); newline >= 0; newline = this.buffer.indexOf("\n")) {
      const reply = parseReply(this.buffer.slice(0, newline))
      this.buffer = this.buffer.slice(newline + 1)
      const settle = reply === undefined ? undefined : this.pending.get(reply.id)
      if (reply === undefined || settle === undefined) continue
      this.pending.delete(reply.id)
      settle(reply)
    }
    this.updateReference()
  }

  private gone(error: Error): void {
    if (this.exitedFlag) return
    this.exitedFlag = true
    process.off("exit", this.killOnExit)
    if (this.idleTimer !== undefined) clearTimeout(this.idleTimer)
    for (const settle of this.pending.values()) settle(error)
    this.pending.clear()
    if (keeper === this) keeper = undefined
  }

  /**
   * The keeper keeps this process alive only while a request waits for its answer: a host that ends
   * without closing its log exits as it would without the keeper (which then sees its pipe close).
   */
  private updateReference(): void {
    const hold = this.pending.size > 0
    if (hold) this.child.ref()
    else this.child.unref()
    // The pipes are sockets at run time (typed as plain streams): each holds the loop on its own.
    if (!this.hasPipes) return
    for (const stream of [this.child.stdin, this.child.stdout, this.child.stderr]) {
      const method: unknown = Reflect.get(stream, hold ? "ref" : "unref")
      if (typeof method === "function") Reflect.apply(method, stream, [])
    }
  }

}

/**
 * The fields of `/proc/PID/stat` after the command's closing parenthesis (its state letter first,
 * then its parent's id, …); `undefined` when `/proc` does not say (no such process, or no `/proc`
 * on this system).
 */
const statFields = (pid: number): ReadonlyArray<string> | undefined => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  } catch {
    return undefined
  }
}

/** A process's state letter (`R`, `S`, `T` stopped, `Z` zombie, …), or `undefined`. */
export const processState = (pid: number): string | undefined => statFields(pid)?.[0] || undefined

/** A process's parent, or `undefined`. */
const parentOf = (pid: number): number | undefined => {
  const parent = Number(statFields(pid)?.[1])
  return Number.isSafeInteger(parent) ? parent : undefined
}

/**
 * The process holding a write lock on the file `lockPath`, as `/proc/locks` (Linux) lists it: the
 * entry whose device and inode are the file's. `undefined` when it does not say (no `/proc`, the file
 * gone, a lock of another kind, or another namespace's process).
 */
export const lockHolderOf = (lockPath: string): number | undefined => {
  try {
    const stat = fs.statSync(lockPath, { bigint: true })
    // `/proc/locks` names a device as hexadecimal major:minor, the kernel's split of its number.
    const major = ((stat.dev >> 8n) & 0xfffn) | ((stat.dev >> 32n) & ~0xfffn)
    const minor = (stat.dev & 0xffn) | ((stat.dev >> 12n) & ~0xffn)
    // A keeper's exclusive lock is a write lock; another program reading the file as a database
    // holds a read lock, which keeps a writer out as well: named when no write lock is there.
    let reader: number | undefined
    for (const line of fs.readFileSync("/proc/locks", "utf8").split("\n")) {
      // `N: POSIX ADVISORY WRITE PID MAJOR:MINOR:INODE START END`
      const fields = line.trim().split(/\s+/)
      const device = fields[5]?.split(":") ?? []
      if (fields[1] !== "POSIX" || (fields[3] !== "WRITE" && fields[3] !== "READ") || device.length !== 3) continue
      if (BigInt(`0x${device[0]}`) !== major || BigInt(`0x${device[1]}`) !== minor || BigInt(device[2]!) !== stat.ino) continue
      const pid = Number(fields[4])
      if (!Number.isSafeInteger(pid) || pid <= 0) continue
      if (fields[3] === "WRITE") return pid
      reader ??= pid
    }
    return reader
  } catch {
    return undefined
  }
}

/**
 * Who holds the lease of the log whose lock file is `lockPath`, in words for a `WriterBusy` refusal:
 * this process, the host of the keeper that holds it, or a keeper whose host is gone (say, killed by
 * a signal while its keeper was stopped) and that holds the log for no one. `undefined` when unknown.
 */
export const leaseHolderOf = (lockPath: string): string | undefined => {
  const pid = lockHolderOf(lockPath)
  if (pid === undefined) return undefined
  if (pid === keeper?.pid) return "this process"
  const parent = parentOf(pid)
  if (parent === undefined) return undefined
  const argv = readCommandLine(pid)
  const host = keeperHostOf(argv)
  if (host === undefined) {
    // An earlier build's keeper (`node -e SOURCE <driver> <wait>`, naming no host) holds it for its
    // parent while that is no init or subreaper; any other program holds it itself.
    const earlierKeeper = argv !== undefined && argv[1] === "-e" && argv[2]?.includes("locking_mode = EXCLUSIVE") === true
    return earlierKeeper && parent > 1 ? `process ${parent}` : `process ${pid}`
  }
  if (parent === host) return `process ${host}`
  // Its parent is not the host it was started by: the host has ended (a keeper is re-parented only
  // then), whatever runs under that id now.
  const state = processState(pid)
  const stopped = state === "T" || state === "t"
  return `lease keeper process ${pid}, whose host process ${host} has ended${stopped ? " and which is stopped" : ""}: ending it (kill -KILL ${pid}) frees the log`
}

/**
 * The host id a keeper of this build was started with, from its command line `argv`: exactly `node
 * -e KEEPER_SOURCE <driver> <contender wait> <host pid>`. `undefined` for any other process.
 */
const keeperHostOf = (argv: ReadonlyArray<string> | undefined): number | undefined => {
  if (argv === undefined || argv.length !== 6 || argv[1] !== "-e" || argv[2] !== KEEPER_SOURCE) return undefined
  const host = Number(argv[5])
  return Number.isSafeInteger(host) && host > 1 ? host : undefined
}

/** The arguments of a process (`/proc/PID/cmdline`), or `undefined`. */
const readCommandLine = (pid: number): ReadonlyArray<string> | undefined => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter((argument) => argument !== "")
  } catch {
    return undefined
  }
}

let keeper: Keeper | undefined

const currentKeeper = (): Keeper => {
  if (keeper === undefined || keeper.exited) keeper = new Keeper()
  return keeper
}

/**
 * `currentKeeper`, or the `Io` failure saying that the keeper could not start, and why: a spawn that
 * throws at once (Node's permission model without `--allow-child-process`), or its driver not found.
 */
const startedKeeper = (lockPath: string): Keeper => {
  try {
    return currentKeeper()
  } catch (error) {
    const denied = (error as { readonly code?: unknown } | null)?.code === "ERR_ACCESS_DENIED"
    throw io(
      `${lockPath}: the lease keeper (a node child process every SQLite writer runs) could not start: ` +
        `${error instanceof Error ? error.message : String(error)}` +
        (denied ? " (under Node's permission model, allow it with --allow-child-process)" : ""),
    )
  }
}

/** The process id of the running keeper, if any (for tests). */
export const keeperProcessId = (): number | undefined => (keeper === undefined || keeper.exited ? undefined : keeper.pid)

/**
 * Takes the writer lease of the database at `canonicalPath` (already canonical) or fails with
 * `WriterBusy`: at once when this process already holds it, after at most
 * `LEASE_DEFAULTS.contenderWaitMs` when another process does.
 */
export const acquireLease = async (canonicalPath: string): Promise<Lease> => {
  const lockPath = `${canonicalPath}${LOCK_SUFFIX}`
  const owner = startedKeeper(lockPath)
  let reply: KeeperReply
  try {
    reply = await owner.request("acquire", lockPath, LEASE_DEFAULTS.acquireWaitMs)
  } catch (error) {
    // A keeper that does not answer because it is stopped, and holds nothing else of this process's,
    // is ended, so a lock it takes late is not held for no one.
    if (owner.leasesHeld === 0 && owner.isStopped()) owner.kill()
    throw io(`${lockPath}: ${error instanceof Error ? error.message : String(error)}`)
  }
  if (reply.ok !== true) owner.idle()
  if (reply.busy === true) {
    const holder = leaseHolderOf(lockPath)
    throw EventLogError.make({ _tag: "WriterBusy", path: canonicalPath, ...(holder === undefined ? {} : { holder }) })
  }
  // A lock file with other content (made by hand, or by another program) is no log: say what it is.
  if (reply.ok !== true && reply.code === "SQLITE_NOTADB") {
    throw io(`${lockPath}: the writer's lock file holds something else (SQLite: ${reply.message ?? "file is not a database"}); remove it (the writer makes its own)`)
  }
  if (reply.ok !== true) {
    throw storeError(Object.assign(new Error(reply.message ?? "the lease keeper refused"), { code: reply.code }), lockPath)
  }
  owner.retain()
  let released: Promise<void> | undefined
  return {
    databasePath: canonicalPath,
    lockPath,
    isHeld: () => released === undefined && !owner.exited,
    release: () => {
      released ??= (async () => {
        if (owner.exited) return
        try {
          await owner.request("release", lockPath, LEASE_DEFAULTS.releaseWaitMs)
        } catch {
          // The keeper is gone (its locks went with it), or does not answer: a stopped one is ended
          // when this was its last lease, which drops the lock; otherwise (busy, or serving other
          // leases) it holds the lock until it answers or this process exits.
          if (owner.leasesHeld === 1 && owner.isStopped()) owner.kill()
        } finally {
          owner.releaseOne()
        }
      })()
      return released
    },
  }
}
