/**
 * Spawning the built `maka` binary in tests: a temp folder per test with a workspace and a log path,
 * a child process with its own environment, its output, and helpers to read the log's JSON lines.
 */
import { spawn, type ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as net from "node:net"
import { fileURLToPath } from "node:url"

export const packageRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
export const bin = path.join(packageRoot, "dist/bin.js")

export interface Result {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

export interface SpawnOptions {
  readonly cwd: string
  readonly env?: Readonly<Record<string, string>>
  /** Written to stdin, then closed; absent: stdin is closed at once (not a TTY); `open`: left to `onOutput`. */
  readonly input?: string | { readonly open: string }
  /** Called with the child and each stdout/stderr chunk seen so far. */
  readonly onOutput?: (child: ChildProcess, output: { readonly stdout: string; readonly stderr: string }) => void
  /**
   * Runs maka as the leader of a process group of its own, so a test can signal the whole group
   * (`process.kill(-child.pid, signal)`) as a terminal's Ctrl-C or a service manager's stop does.
   */
  readonly group?: boolean
  /**
   * Runs maka without the capabilities that let root ignore file modes (`setpriv` empties the
   * bounding set, so a root test process's child meets a file's mode as any user does): a test of a
   * read-only file or folder then holds whoever runs it.
   */
  readonly withoutPrivileges?: boolean
  /** A module node loads before maka (`node --import FILE`). */
  readonly preload?: string
  /** Closes the read end of maka's stdout before it writes anything (`maka … | false`). */
  readonly stdoutClosed?: boolean
  /** Never reads maka's stdout (a reader that stopped: a suspended pipeline), so its pipe fills. */
  readonly stdoutUnread?: boolean
  /** Called with the child once it is spawned. */
  readonly onSpawn?: (child: ChildProcess) => void
}

/** A clean environment: no MAKA_* of the developer's shell leaks into a test. */
const baseEnvironment = (): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith("MAKA_")) env[key] = value
  return env
}

/** A base URL no request ever reaches: a test that fails before connecting, or never connects. */
export const NOWHERE_BASE_URL = "http://127.0.0.1:59999/v1"

/** A loopback port that refuses connections: one the system just gave out and took back. */
export const closedPort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })

export const maka = (args: ReadonlyArray<string>, options: SpawnOptions): Promise<Result> =>
  new Promise((resolve, reject) => {
    const command = options.withoutPrivileges === true && process.getuid?.() === 0
      ? ["setpriv", "--bounding-set=-all", "--inh-caps=-all", process.execPath]
      : [process.execPath]
    const preload = options.preload === undefined ? [] : ["--import", options.preload]
    const child = spawn(command[0]!, [...command.slice(1), ...preload, bin, ...args], {
      cwd: options.cwd,
      env: { ...baseEnvironment(), ...options.env },
      stdio: ["pipe", "pipe", "pipe"],
      detached: options.group === true,
    })
    if (options.stdoutClosed === true) child.stdout.destroy()
    options.onSpawn?.(child)
    let stdout = ""
    let stderr = ""
    const seen = () => options.onOutput?.(child, { stdout, stderr })
    if (options.stdoutUnread !== true) {
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
        stdout += chunk
        seen()
      })
    }
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk
      seen()
    })
    child.on("error", reject)
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }))
    if (typeof options.input === "object") child.stdin.write(options.input.open)
    else child.stdin.end(options.input ?? "")
  })

export interface Folder {
  readonly root: string
  readonly workspace: string
  readonly db: string
  readonly remove: () => void
}

/** A temp folder with a workspace holding a README and a log path (not created). */
export const folder = (): Folder => {
  const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "maka-cli-")))
  const workspace = path.join(root, "workspace")
  fs.mkdirSync(workspace)
  fs.writeFileSync(path.join(workspace, "README.md"), "# Lantern\n\nA tiny static-site generator.\n")
  fs.writeFileSync(path.join(workspace, "notes.txt"), "notes\n")
  return { root, workspace, db: path.join(root, "events.sqlite"), remove: () => fs.rmSync(root, { recursive: true, force: true }) }
}

export interface EventLine {
  readonly sequence: number
  readonly event: {
    readonly id: string
    readonly recordedAt: number
    readonly invocation: { readonly sessionId: string; readonly invocationId: string }
    // Test data, read field by field by the assertions.
    readonly fact: { readonly kind: string; readonly [field: string]: any }
  }
}

/** Parses JSON lines; every non-empty line must be one. */
export const eventLines = (stdout: string): ReadonlyArray<EventLine> =>
  stdout
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line) as EventLine) // test data: asserted field by field by the callers

export const sessionOf = (stderr: string): string => {
  const match = /^session: (.+)$/m.exec(stderr)
  if (match === null) throw new Error(`no session line in stderr:\n${stderr}`)
  return match[1]!
}

/** Resolves once `predicate` holds for the output seen so far (to send a signal at the right time). */
export const when = (predicate: (output: { readonly stdout: string; readonly stderr: string }) => boolean, act: (child: ChildProcess) => void) => {
  let done = false
  return (child: ChildProcess, output: { readonly stdout: string; readonly stderr: string }) => {
    if (!done && predicate(output)) {
      done = true
      act(child)
    }
  }
}

/**
 * Watches a child that will stop making progress (its output unread): once `measure` has given the
 * same value three looks in a row (200 ms apart) and `started` holds for it, runs `beforeSignals`,
 * then sends SIGINT every 200 ms until the child exits; one that never does gets SIGKILL after 150
 * rounds, so a test leaves no process behind.
 */
export const signalWhenStill = (
  child: ChildProcess,
  options: {
    readonly measure: () => Promise<number>
    readonly started: (value: number) => boolean
    readonly beforeSignals: (value: number) => Promise<void>
  },
): void => {
  let exited = false
  child.on("exit", () => {
    exited = true
  })
  void (async () => {
    let last = -1
    let still = 0
    while (!exited && still < 3) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      const value = await options.measure()
      still = options.started(value) && value === last ? still + 1 : 0
      last = value
    }
    await options.beforeSignals(last)
    for (let round = 0; !exited; round++) {
      child.kill(round < 150 ? "SIGINT" : "SIGKILL")
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
  })()
}
