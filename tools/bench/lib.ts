/**
 * What every bench file shares: medians, the result entries `pnpm bench` merges into
 * `bench/results.json`, CPU time, the WAL meter that counts the commits and bytes a SQLite writer
 * makes, the SQL statement counter, and the in-process CPU profiler behind `pnpm bench <name> --profile`.
 */
import Database from "better-sqlite3"
import * as fs from "node:fs"
import * as inspector from "node:inspector"
import * as os from "node:os"
import * as path from "node:path"

export const median = (values: ReadonlyArray<number>): number => {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((left, right) => left - right)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2
}

export const round = (value: number, digits = 3): number => {
  const scale = 10 ** digits
  return Math.round(value * scale) / scale
}

export const integer = (name: string, fallback: number): number => {
  const raw = process.env[name]
  if (raw === undefined || raw === "") return fallback
  const value = Number(raw)
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a non-negative integer, got ${raw}`)
  return value
}

/** One figure of `bench/results.json`: its value, and the baseline it is compared with in the same run. */
export interface Entry {
  readonly value: number
  readonly unit: string
  /** The baseline's figure in the same unit, measured in the same run; `null` when the figure stands alone. */
  readonly baseline: number | null
  /** `value / baseline`, or `null`. */
  readonly ratio: number | null
  /** What the figure is, and what the baseline is. */
  readonly note?: string
}

export const entry = (value: number, unit: string, baseline: number | null = null, note?: string): Entry => ({
  value: round(value),
  unit,
  baseline: baseline === null ? null : round(baseline),
  ratio: baseline === null || baseline === 0 ? null : round(value / baseline),
  ...(note === undefined ? {} : { note }),
})

/** Prints the entries as the last stdout line, which `tools/bench/run.ts` reads. */
export const emit = (entries: Readonly<Record<string, Entry>>): void => {
  console.log(JSON.stringify({ entries, environment: environment() }))
}

export const environment = () => ({
  node: process.version,
  cpus: os.cpus().length,
  loadAverage: os.loadavg().map((load) => round(load, 2)),
  at: new Date().toISOString(),
})

/** User + system CPU time of this whole process (every thread), in milliseconds, since `since`. */
export const cpuMs = (since: NodeJS.CpuUsage): number => {
  const used = process.cpuUsage(since)
  return (used.user + used.system) / 1000
}

export const temporaryDirectory = (prefix: string): string => fs.mkdtempSync(path.join(os.tmpdir(), prefix))

// --- WAL meter ----------------------------------------------------------------------------------

export interface WalCount {
  /** Transactions committed (WAL frames that carry a commit's database size). */
  readonly commits: number
  /** WAL frames written (one per page per commit). */
  readonly frames: number
  /** Bytes appended to the WAL: frames × (page size + 24-byte frame header). */
  readonly bytes: number
  /** Pages written per b-tree (table or index), by name, when SQLite's `dbstat` table is available. */
  readonly pagesByTree: Readonly<Record<string, number>>
}

/** `mxFrame` (the WAL's last valid frame) and `nBackfill` (frames already copied to the database) of an open `-shm`. */
const walIndexOf = (descriptor: number): { readonly lastFrame: number; readonly backfilled: number } => {
  const header = Buffer.alloc(100)
  fs.readSync(descriptor, header, 0, 100, 0)
  const u32 = (offset: number) => (os.endianness() === "LE" ? header.readUInt32LE(offset) : header.readUInt32BE(offset))
  return { lastFrame: u32(16), backfilled: u32(96) }
}

/**
 * The WAL index header's `mxFrame` of the WAL-mode file `file`: its WAL's last valid frame. It opens
 * and closes the `-shm`, which drops this process's POSIX locks on it: only for a file no other
 * process uses meanwhile (`WalMeter` keeps its descriptor open instead).
 */
export const lastWalFrame = (file: string): number => {
  const descriptor = fs.openSync(`${file}-shm`, "r")
  try {
    return walIndexOf(descriptor).lastFrame
  } finally {
    fs.closeSync(descriptor)
  }
}

/**
 * Counts what a writer in another connection (the engine's own, or LangGraph's in the peers'
 * process) commits to a WAL-mode SQLite file between `start` and `stop`, by reading the WAL itself:
 * the WAL index (`-shm`) header gives the last valid frame, each frame header gives its page number
 * and whether it ends a commit. A read transaction held from `start` to `stop` keeps checkpoints from
 * recycling the WAL meanwhile, so every frame written in between is still there at `stop`. Its read
 * lock is a POSIX lock on the `-shm` file, which the process loses as soon as it closes any
 * descriptor of that file: the meter opens the `-shm` once and keeps it open until `close`, after
 * its read has ended (until 2026-12-05 it opened and closed the file at each look, so a writer in
 * another process restarted the WAL under the meter whenever its checkpoint ran, and LangGraph's
 * 40-step loop was counted 1,648 bytes a step). One restart is not prevented: a read that begins
 * when every frame is already in the database reads the database alone, and the writer's next commit
 * restarts the WAL; the frames written since `start` are then the WAL's first ones. SQLite adds one
 * to the WAL header's first salt at each restart, so `stop` refuses a count that any other restart
 * cut short. Hold the meter only in accounting passes, never in timed ones.
 */
export class WalMeter {
  private readonly reader: Database.Database
  private readonly shm: number
  private startFrame = 0
  private startRestarts = 0
  /** Restarts that lose nothing: one when the read began with every frame in the database. */
  private allowedRestarts = 0

  constructor(private readonly file: string) {
    this.reader = new Database(file, { readonly: true, fileMustExist: true })
    this.shm = fs.openSync(`${file}-shm`, "r")
  }

  /** The WAL header's page size, and its first salt, which SQLite raises by one at each restart of the WAL. */
  private walHeader(): { readonly pageSize: number; readonly restarts: number } {
    const descriptor = fs.openSync(`${this.file}-wal`, "r")
    try {
      const header = Buffer.alloc(32)
      fs.readSync(descriptor, header, 0, 32, 0)
      return { pageSize: header.readUInt32BE(8), restarts: header.readUInt32BE(16) }
    } finally {
      fs.closeSync(descriptor)
    }
  }

  start(): void {
    this.reader.exec("BEGIN")
    this.reader.prepare("SELECT count(*) FROM sqlite_master").get()
    const index = walIndexOf(this.shm)
    this.startFrame = index.lastFrame
    this.allowedRestarts = index.backfilled === index.lastFrame ? 1 : 0
    this.startRestarts = this.walHeader().restarts
  }

  stop(): WalCount {
    const { pageSize, restarts } = this.walHeader()
    const endFrame = walIndexOf(this.shm).lastFrame
    // Modulo 2^32, as the salt wraps.
    const restarted = (restarts - this.startRestarts) >>> 0
    if (restarted > this.allowedRestarts) {
      this.reader.exec("COMMIT")
      throw new Error(
        `the WAL of ${this.file} restarted ${restarted} times while it was metered (${this.allowedRestarts} expected): frames written before the last restart are gone, so the count would be short`,
      )
    }
    // After the one restart allowed, the frames written since `start` are the WAL's first ones.
    const firstFrame = restarted === 0 ? this.startFrame : 0
    const frameSize = pageSize + 24
    const descriptor = fs.openSync(`${this.file}-wal`, "r")
    const pages: Array<number> = []
    let commits = 0
    try {
      const frameHeader = Buffer.alloc(8)
      for (let frame = firstFrame; frame < endFrame; frame++) {
        fs.readSync(descriptor, frameHeader, 0, 8, 32 + frame * frameSize)
        pages.push(frameHeader.readUInt32BE(0))
        if (frameHeader.readUInt32BE(4) !== 0) commits++
      }
    } finally {
      fs.closeSync(descriptor)
    }
    this.reader.exec("COMMIT")
    const frames = endFrame - firstFrame
    return { commits, frames, bytes: frames * frameSize, pagesByTree: this.trees(pages) }
  }

  private trees(pages: ReadonlyArray<number>): Record<string, number> {
    const owners = new Map<number, string>()
    try {
      const rows = this.reader.prepare("SELECT name, pageno FROM dbstat").all() as Array<{ name: string; pageno: number }>
      for (const row of rows) owners.set(row.pageno, row.name)
    } catch {
      return {}
    }
    const counts: Record<string, number> = {}
    for (const page of pages) {
      const owner = page === 1 ? "(header)" : (owners.get(page) ?? "(free or new)")
      counts[owner] = (counts[owner] ?? 0) + 1
    }
    return counts
  }

  /** Closes the reader, then the `-shm` descriptor (its read has ended by then). */
  close(): void {
    this.reader.close()
    fs.closeSync(this.shm)
  }
}

// --- statement counter --------------------------------------------------------------------------

type Method = (...args: Array<unknown>) => unknown

/**
 * The prototypes every better-sqlite3 connection and prepared statement of this process share (the
 * engine's log uses the same module), for the benches that wrap their methods while they measure.
 */
export const sqlitePrototypes = (): { readonly statement: Record<string, Method>; readonly database: Record<string, Method> } => {
  const probe = new Database(":memory:")
  const statement = Object.getPrototypeOf(probe.prepare("SELECT 1")) as Record<string, Method>
  const database = Object.getPrototypeOf(probe) as Record<string, Method>
  probe.close()
  return { statement, database }
}

/**
 * Counts the SQL statements every better-sqlite3 connection of this process executes while `body`
 * runs (a prepared statement's `run`/`get`/`all`/`iterate`, a connection's `exec` and `pragma`), by
 * wrapping those methods on the shared prototypes and restoring them afterwards. The engine's log
 * uses the same better-sqlite3 module, so its statements count too. Accounting passes only.
 */
export const countStatements = async (body: () => Promise<void>): Promise<number> => {
  const { statement: statementPrototype, database: databasePrototype } = sqlitePrototypes()
  let count = 0
  const restore: Array<() => void> = []
  const wrap = (prototype: Record<string, unknown>, name: string): void => {
    const original = prototype[name] as (...args: Array<unknown>) => unknown
    prototype[name] = function (this: unknown, ...args: Array<unknown>) {
      count++
      return original.apply(this, args)
    }
    restore.push(() => {
      prototype[name] = original
    })
  }
  for (const name of ["run", "get", "all", "iterate"]) wrap(statementPrototype, name)
  for (const name of ["exec", "pragma"]) wrap(databasePrototype, name)
  try {
    await body()
  } finally {
    for (const undo of restore) undo()
  }
  return count
}

// --- CPU profile --------------------------------------------------------------------------------

interface ProfileNode {
  readonly id: number
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
  readonly children?: ReadonlyArray<number>
}
interface Profile {
  readonly nodes: ReadonlyArray<ProfileNode>
  readonly startTime: number
  readonly endTime: number
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

/** Runs `body` under V8's sampling profiler, writes `<file>.cpuprofile` and returns the profile. */
export const profiled = async (file: string, body: () => Promise<void>): Promise<Profile> => {
  const session = new inspector.Session()
  session.connect()
  const post = (method: string, params: object = {}) =>
    new Promise<unknown>((resolve, reject) =>
      session.post(method, params, (error, result) => (error === null ? resolve(result) : reject(error))),
    )
  await post("Profiler.enable")
  await post("Profiler.setSamplingInterval", { interval: 200 })
  await post("Profiler.start")
  try {
    await body()
  } finally {
    const { profile } = (await post("Profiler.stop")) as { profile: Profile }
    session.disconnect()
    fs.mkdirSync(path.dirname(file), { recursive: true })
    fs.writeFileSync(file, JSON.stringify(profile))
    lastProfile = profile
  }
  return lastProfile!
}
let lastProfile: Profile | undefined

const where = (url: string): string => {
  if (url === "") return "(native or VM)"
  const dependency = /node_modules\/\.pnpm\/[^/]+\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)
  if (dependency !== null) return dependency[1]!
  const workspace = /\/packages\/([^/]+)\//.exec(url)
  if (workspace !== null) return `@maka/${workspace[1]}`
  if (url.startsWith("node:")) return "node internals"
  return "other"
}

/**
 * The functions with the most self time (samples in the function itself, idle excluded), then the
 * same time summed per package (a dependency, a maka package, node internals, native code), as lines.
 */
export const topSelfTime = (profile: Profile, count = 15, root = process.cwd()): Array<string> => {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]))
  const self = new Map<number, number>()
  profile.samples.forEach((id, index) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[index] ?? 0)))
  const functions = new Map<string, number>()
  const packages = new Map<string, number>()
  let all = 0
  for (const [id, micros] of self) {
    const frame = byId.get(id)!.callFrame
    if (frame.functionName === "(idle)") continue
    const location = frame.url === "" ? "" : ` ${frame.url.replace(/^file:\/\//, "").replace(`${root}/`, "")}:${frame.lineNumber + 1}`
    const key = `${frame.functionName === "" ? "(anonymous)" : frame.functionName}${location}`
    functions.set(key, (functions.get(key) ?? 0) + micros)
    const owner = frame.functionName.startsWith("(") ? frame.functionName : where(frame.url)
    packages.set(owner, (packages.get(owner) ?? 0) + micros)
    all += micros
  }
  const lines = (totals: Map<string, number>, limit: number) =>
    [...totals.entries()]
      .sort((left, right) => right[1] - left[1])
      .slice(0, limit)
      .map(([key, micros]) => `${(micros / 1000).toFixed(1).padStart(9)} ms ${((micros / all) * 100).toFixed(1).padStart(5)} %  ${key}`)
  return [...lines(functions, count), "by package:", ...lines(packages, 12)]
}

/**
 * The order of `count` contenders (the history bench's sizes) in round `round`: each comes once a
 * round, and within `count` rounds (an even count) each comes right after every other one exactly once
 * (a Williams square), so no contender's first step always follows the same other one's work (in the
 * history bench, the raw loop's replays of the 10,000-event session's 570 KB requests leave the most
 * to collect).
 */
export const roundOrder = (round: number, count: number): Array<number> =>
  Array.from({ length: count }, (_, position) => {
    const offset = position % 2 === 0 ? position / 2 : count - (position + 1) / 2
    return (round + offset) % count
  })
