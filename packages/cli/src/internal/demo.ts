/**
 * `maka demo`: an offline tour in a temporary folder, narrated step by step. A tool loop on the
 * offline model; then a run killed with SIGKILL in the middle of its answer (a child process started
 * as `process.execPath` with this CLI's own entry) and its recovery; then the session's timeline and
 * the exact model input of its first step, checked against the recorded digest; then a standalone
 * compaction and a run that starts from its summary; then a run in a child process handed off with
 * SIGTERM (exit 75) and `maka resume` in a second child completing it. The other legs run in this
 * process, through the same command code. However the tour ends (done, a failed step, SIGINT or
 * SIGTERM, a closed stdout, a crash), its child processes are stopped and its folder is removed
 * (unless `--keep`).
 */
import { spawn, type ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { CliError, ExitCode, fsReasonOf } from "./exit.ts"
import * as Flags from "./flags.ts"
import { main } from "./main.ts"
import type { CommandContext } from "./read-commands.ts"

/** The CLI's own entry, with the Node options it runs under (e.g. a source loader in development). */
const self = (): ReadonlyArray<string> => [...process.execArgv, process.argv[1]!]

interface Child {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

/** The tour's child processes still running, each with a promise that resolves once it has ended. */
type Running = Map<ChildProcess, Promise<void>>

/** Runs `maka ARGS` as a child; the first stdout line that `signalOn.line` accepts sends it `signalOn.signal`, once. */
const maka = (
  args: ReadonlyArray<string>,
  options: {
    readonly cwd: string
    readonly running: Running
    readonly environment?: NodeJS.ProcessEnv
    readonly signalOn?: { readonly line: (line: string) => boolean; readonly signal: NodeJS.Signals }
  },
): Promise<Child> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...self(), ...args], {
      cwd: options.cwd,
      env: { ...process.env, MAKA_DB: "", MAKA_DATABASE_URL: "", MAKA_BASE_URL: "", ...options.environment },
      stdio: ["ignore", "pipe", "pipe"],
    })
    // `close` follows `exit`, or `error` when the spawn failed: the child is gone either way.
    options.running.set(child, new Promise((ended) => child.once("close", () => ended())))
    let stdout = ""
    let stderr = ""
    let pending = ""
    let hasSignalled = false
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk
      if (options.signalOn === undefined || hasSignalled) return
      pending += chunk
      const lines = pending.split("\n")
      pending = lines.pop() ?? ""
      if (lines.some(options.signalOn.line)) {
        hasSignalled = true
        child.kill(options.signalOn.signal)
      }
    })
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
    child.on("error", reject)
    child.on("close", (code, signal) => {
      options.running.delete(child)
      resolve({ code, signal, stdout, stderr })
    })
  })

/** How long a child asked to stop with SIGINT (a run then seals itself `cancelled`) has before SIGKILL. */
const STOP_GRACE_MS = 3_000

/**
 * Stops every running child and resolves once all have ended: SIGINT first, SIGKILL after the grace
 * or at once when `now`. A child already asked is not asked again, so its grace runs from the first ask.
 */
const stopChildren = (running: Running, asked: WeakSet<ChildProcess>, now = false): Promise<ReadonlyArray<void>> =>
  Promise.all(
    [...running].map(([child, ended]) => {
      if (now) child.kill("SIGKILL")
      else if (!asked.has(child)) {
        asked.add(child)
        child.kill("SIGINT")
        const escalation = setTimeout(() => child.kill("SIGKILL"), STOP_GRACE_MS)
        void ended.then(() => clearTimeout(escalation))
      }
      return ended
    }),
  )

/**
 * Runs `maka ARGS` in this process (quicker than a child), offline, with its output captured. Once
 * `stopped` aborts nobody wants that output: it stands for the sink's closed stdout, so a run in
 * flight is cancelled (on SIGTERM its own handler would hand it off instead, at its next step).
 */
const inProcess = async (args: ReadonlyArray<string>, cwd: string, stopped: AbortSignal): Promise<Child> => {
  let stdout = ""
  let stderr = ""
  const code = await main({
    argv: args,
    environment: {},
    cwd,
    sink: { out: (text) => void (stdout += text), err: (text) => void (stderr += text), outClosed: stopped },
    stdin: process.stdin,
    version: "",
  })
  return { code, signal: null, stdout, stderr }
}

const indent = (text: string): string =>
  text
    .trimEnd()
    .split("\n")
    .map((line) => `    ${line}`)
    .join("\n")

/** A new folder for the tour; when none can be made, one line says where it was to go and why. */
const temporaryFolder = (): string => {
  try {
    return fs.mkdtempSync(path.join(os.tmpdir(), "maka-demo-"))
  } catch (error) {
    throw new CliError(
      `demo: cannot make a temporary folder in ${os.tmpdir()}: ${fsReasonOf(error)} (TMPDIR names the folder for temporary files)`,
      ExitCode.failed,
    )
  }
}

/** Removes the tour's folder; returns why it could not, if it could not. */
const removeFolder = (folder: string): string | undefined => {
  try {
    fs.rmSync(folder, { recursive: true, force: true })
    return undefined
  } catch (error) {
    return fsReasonOf(error)
  }
}

export const demoCommand = async (context: CommandContext): Promise<number> => {
  const { values } = Flags.parse("demo", context.args)
  const keep = values.keep === true
  const say = (text: string) => context.sink.out(`${text}\n`)
  const folder = temporaryFolder()
  const workspace = path.join(folder, "workspace")
  const db = path.join(folder, "events.sqlite")
  const common = ["--db", db, "--workspace", workspace]
  const check = (step: string, child: Child, expected: number) => {
    if (child.code !== expected) {
      throw new CliError(`demo: ${step} exited ${child.code ?? child.signal} (expected ${expected}):\n${child.stderr.trim()}`, ExitCode.failed)
    }
  }
  // Without these listeners SIGINT, SIGTERM and SIGHUP would end the process at once, skipping the `finally`
  // below, with the folder left behind and a child still running. They stop the tour instead: the
  // children are asked to stop now, the leg in flight ends, and the `finally` cleans up. A second
  // signal kills the children that are still running.
  const running: Running = new Map()
  const asked = new WeakSet<ChildProcess>()
  const stop = new AbortController()
  const stopWith = (reason: string) => () => {
    if (stop.signal.aborted) return void stopChildren(running, asked, true)
    stop.abort(reason)
    void stopChildren(running, asked)
  }
  const onInterrupt = stopWith("cancelled by SIGINT")
  const onTerminate = stopWith("cancelled by SIGTERM")
  const onHangup = stopWith("cancelled by SIGHUP")
  // Nobody reads the tour any more (`maka demo | head`): it stops rather than run on for nothing.
  // A full disk is no closed stdout: the line says which it was (the exit is 130 either way).
  const onClosed = () => {
    const failure = context.sink.outFailure?.()
    stopWith(failure === undefined || failure === "EPIPE" ? "stopped: stdout was closed" : `stopped: stdout failed (${failure})`)()
  }
  // A crash (an uncaught exception, `process.exit`) skips the `finally`; only synchronous work runs here.
  const onExit = () => {
    for (const child of running.keys()) child.kill("SIGKILL")
    if (!keep) removeFolder(folder)
  }
  /** Each leg starts only while the tour goes on; one that ends after a stop ends the tour, whatever its result. */
  const leg = async (work: () => Promise<Child>): Promise<Child> => {
    const halt = () => {
      if (!stop.signal.aborted) return
      const kept = keep ? `; the tour's files are kept in ${folder}` : ""
      throw new CliError(`demo: ${String(stop.signal.reason)}${kept}`, ExitCode.cancelled)
    }
    halt()
    const result = await work()
    halt()
    return result
  }
  const here = (args: ReadonlyArray<string>) => leg(() => inProcess(args, folder, stop.signal))
  const spawned = (args: ReadonlyArray<string>, options: Omit<Parameters<typeof maka>[1], "running">) =>
    leg(() => maka(args, { ...options, running }))
  try {
    process.on("SIGINT", onInterrupt)
    process.on("SIGTERM", onTerminate)
    process.on("SIGHUP", onHangup)
    process.on("exit", onExit)
    if (context.sink.outClosed?.aborted === true) onClosed()
    else context.sink.outClosed?.addEventListener("abort", onClosed, { once: true })
    try {
      fs.mkdirSync(workspace)
      fs.writeFileSync(
        path.join(workspace, "README.md"),
        "# Lantern\n\nA tiny static-site generator: it turns a folder of Markdown into HTML pages.\n",
      )
      fs.writeFileSync(path.join(workspace, "lantern.js"), "export const build = (folder) => folder\n")
    } catch (error) {
      throw new CliError(`demo: cannot write the tour's workspace in ${folder}: ${fsReasonOf(error)}`, ExitCode.failed)
    }
    say(`maka demo: an offline tour in ${folder}`)
    say("The model is maka's built-in offline model: a deterministic OpenAI-compatible server on 127.0.0.1.\n")

    say("1. A tool loop. `maka run` asks about the workspace; the model lists it, reads the README, and answers.")
    say(`   $ maka run --session tour "What is this project?"`)
    const first = await here(["run", ...common, "--session", "tour", "What is this project?"])
    check("the tool loop", first, 0)
    say(indent(first.stderr))
    say(indent(first.stdout))
    say("   Every line above came from an event committed to the log before it was shown.\n")

    say("2. A crash. A second run streams its answer slowly; it is killed with SIGKILL after its first delta.")
    // The child runs in the caller's directory, where its Node options (e.g. `--import tsx`) resolve;
    // every path it gets is absolute.
    const crashed = await spawned(["run", ...common, "--session", "crash", "--json", "Summarise the README, please."], {
      cwd: context.cwd,
      environment: { MAKA_OFFLINE_DELAY_MS: "120" },
      signalOn: { line: (line) => line.includes('"kind":"part_delta"'), signal: "SIGKILL" },
    })
    if (crashed.signal !== "SIGKILL") {
      throw new CliError(`demo: the run to crash ended on its own (exit ${crashed.code}) before it could be killed`, ExitCode.failed)
    }
    const committed = crashed.stdout.split("\n").filter((line) => line.startsWith("{")).length
    say(`   The process died with SIGKILL after ${committed} committed events; its run has an opening and no terminal.`)
    const before = await here(["sessions", "--db", db])
    check("sessions", before, 0)
    say("   $ maka sessions")
    say(indent(before.stdout))
    say("")

    say("3. Recovery. `maka recover` takes the log's writer lease and seals what the dead host left open.")
    const recovered = await here(["recover", "--db", db])
    check("recover", recovered, 0)
    say("   $ maka recover")
    say(indent(recovered.stdout))
    const after = await here(["sessions", "--db", db])
    check("sessions", after, 0)
    say("   $ maka sessions")
    say(indent(after.stdout))
    say("   The interrupted request was sealed `failed`, the run `failed {host_interrupted}`; the session is usable again.")
    const again = await here(["run", ...common, "--session", "crash", "Summarise the README, please."])
    check("the run after recovery", again, 0)
    say("   $ maka run --session crash \"Summarise the README, please.\"")
    say(indent(again.stdout))
    say("")

    say("4. Inspection. The timeline of the first session, and the exact input of its first model step,")
    say("   rebuilt from the log and checked against the digest recorded when it was sent.")
    const timeline = await here(["inspect", "--db", db, "--session", "tour"])
    check("inspect", timeline, 0)
    say("   $ maka inspect --session tour")
    say(indent(timeline.stdout))
    const step = await here(["inspect", "--db", db, "--session", "tour", "--step", "1"])
    check("inspect --step 1", step, 0)
    say("   $ maka inspect --session tour --step 1")
    say(indent(step.stdout.split("\n").filter((line) => line.startsWith("input digest")).join("\n")))
    say("")

    say("5. Compaction. `maka compact` summarises the first session's history into a checkpoint (a")
    say("   structured summary: goal, progress, key decisions, next steps, critical context). The log keeps")
    say("   every event; the next run's prompt starts from the summary instead of the whole history.")
    const compacted = await here(["compact", ...common, "--session", "tour"])
    check("compact", compacted, 0)
    say("   $ maka compact --session tour")
    say(indent(compacted.stdout))
    const next = await here(["run", ...common, "--session", "tour", "Which file holds the code?"])
    check("the run after compaction", next, 0)
    say("   $ maka run --session tour \"Which file holds the code?\"")
    say(indent(next.stdout))
    const summarised = await here(["inspect", "--db", db, "--session", "tour", "--step", "4"])
    check("inspect --step 4", summarised, 0)
    const lines = summarised.stdout.split("\n")
    const opening = lines.findIndex((line) => line.includes("Continuation summary:"))
    say("   $ maka inspect --session tour --step 4   (its input, after the system prompt)")
    say(indent([...lines.slice(opening - 1, opening + 3), "    …", ...lines.filter((line) => line.startsWith("input digest"))].join("\n")))
    say("   With --declared-window N, `maka run` compacts by itself once a request on the same model used N tokens.")
    say("")

    say("6. Handoff. A run in a child process is sent SIGTERM after its first tool call: the tool batch in")
    say("   flight settles, and the top of the next step seals the run `handoff_paused` with its settings and")
    say("   the steps it has left. The process exits 75 and releases the log.")
    const paused = await spawned(["run", ...common, "--session", "relay", "--json", "What is this project?"], {
      cwd: context.cwd,
      environment: { MAKA_OFFLINE_DELAY_MS: "80" },
      signalOn: { line: (line) => line.includes('"kind":"tool_dispatched"'), signal: "SIGTERM" },
    })
    check("the run to hand off", paused, ExitCode.handedOff)
    say(`   $ maka run --session relay "What is this project?"   (SIGTERM after its first tool call; exit ${paused.code})`)
    say(indent(paused.stderr))
    const waiting = await here(["sessions", "--db", db])
    check("sessions", waiting, 0)
    say("   $ maka sessions")
    say(indent(waiting.stdout.split("\n").filter((line) => line.startsWith("relay ")).join("\n")))
    say("   A second process takes it up: `maka resume` finds the sealed pause, checks that its connection has")
    say("   the pause's route and its tools the pause's catalog, replays the settled facts and runs the steps left.")
    const resumed = await spawned(["resume", "--db", db], { cwd: context.cwd })
    check("maka resume", resumed, 0)
    say("   $ maka resume")
    say(indent(resumed.stderr))
    say(indent(resumed.stdout))
    const relay = await here(["events", "--db", db, "--session", "relay"])
    check("events", relay, 0)
    const names = relay.stdout
      .split("\n")
      .filter((line) => line.includes(" tool_dispatched "))
      .map((line) => line.trim().split(/\s+/)[2])
    const endings = relay.stdout
      .split("\n")
      .filter((line) => line.includes(" invocation_ended "))
      .map((line) => line.trim().split(/\s+/).at(-1))
    const once = new Set(names).size === names.length ? ", each once" : ""
    say(`   Across both processes the session called ${names.join(" and ")}${once}; its runs ended ${endings.join(", then ")}.`)
    say("\nDone.")
    if (keep) say(`The tour's files are kept in ${folder}`)
    return ExitCode.completed
  } finally {
    // A child left by a failed step (or an exception) may still write to the folder: it ends first.
    // The listeners stay until the folder is gone, so a second signal meanwhile kills the children
    // rather than the demo.
    await stopChildren(running, asked)
    const notRemoved = keep ? undefined : removeFolder(folder)
    process.off("SIGINT", onInterrupt)
    process.off("SIGTERM", onTerminate)
    process.off("SIGHUP", onHangup)
    process.off("exit", onExit)
    context.sink.outClosed?.removeEventListener("abort", onClosed)
    if (notRemoved !== undefined) {
      throw new CliError(`demo: cannot remove its temporary folder ${folder}: ${notRemoved}`, ExitCode.failed)
    }
  }
}
