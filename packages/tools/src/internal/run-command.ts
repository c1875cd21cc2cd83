/**
 * `run_command`: `/bin/sh -c command` in the workspace root, detached in its own process group
 * (so a timeout or cancellation kills everything it started, and a crashed host leaves it running).
 * stdout and stderr keep at most their cap each; a non-zero exit is a result, not a failure. The
 * call returns when the shell exits: a background process it left running may hold the pipes open
 * for as long as it lives, so after the exit the call ends once they stayed quiet for `outputDrainMs`
 * (at the latest after 20 times that), keeping what was still buffered; the pipes then stay open for
 * that process, read and dropped, without holding the host.
 */
import { spawn } from "node:child_process"
import { Limits, type ToolCall } from "@maka/facts"
import { Effect, Result } from "effect"
import type { ToolFailure } from "../Tool.ts"
import { canonicalRoot, failure } from "./confine.ts"
import { cutEncoded, describeDefect, encodedLength } from "./describe.ts"

export interface RunCommandInput {
  readonly command: string
  readonly timeoutSeconds?: number | undefined
}

export interface RunCommandOptions {
  readonly timeoutSeconds: number
  readonly outputBytes: number
  /** How long after the shell exits its pipes may still deliver buffered output. */
  readonly outputDrainMs: number
  /** Variables of the host's environment the shell does not inherit. */
  readonly hiddenEnvironment: ReadonlyArray<string>
}

/** The host's environment without `hidden`; undefined (inherit it whole) when nothing is hidden. */
const environmentWithout = (hidden: ReadonlyArray<string>): NodeJS.ProcessEnv | undefined => {
  if (hidden.length === 0) return undefined
  const environment: NodeJS.ProcessEnv = { ...process.env }
  for (const name of hidden) delete environment[name]
  return environment
}

/**
 * A stream's bytes as text: a leading byte-order mark kept, an unreadable byte as U+FFFD, and a
 * character the cap split (`capped`) left out; an output that ends inside a character by itself
 * shows it as U+FFFD.
 */
const decode = (raw: Buffer, capped: boolean): string => new TextDecoder("utf-8", { ignoreBOM: true }).decode(raw, { stream: capped })

/**
 * How many leading bytes of `raw` decode to `kept`, a prefix of its text: the shortest prefix whose
 * decoding, a partial last character left out, is as long (found by halving, each probe decoding
 * the prefix), or a few bytes less, when the character that brought it there came with the U+FFFD of
 * an interrupted sequence before it (which only the byte after it ends): the longest of those that
 * decodes, flushed, to `kept` itself. Text that ends in a partial character of its own (its U+FFFD)
 * is the whole of `raw`.
 */
const rawLengthOf = (raw: Buffer, kept: string): number => {
  let low = 0
  let high = raw.length
  while (low < high) {
    const middle = (low + high) >>> 1
    if (decode(raw.subarray(0, middle), true).length >= kept.length) high = middle
    else low = middle + 1
  }
  for (let bytes = low; bytes >= Math.max(0, low - 4); bytes--) {
    if (decode(raw.subarray(0, bytes), false) === kept) return bytes
  }
  return low
}

/** Keeps the first `cap` bytes of a stream and counts the rest. */
class Capture {
  private readonly chunks: Array<Buffer> = []
  private kept = 0
  dropped = 0

  constructor(private readonly cap: number) {}

  push(chunk: Buffer): void {
    const room = this.cap - this.kept
    if (room <= 0) {
      this.dropped += chunk.length
      return
    }
    const taken = chunk.length <= room ? chunk : chunk.subarray(0, room)
    this.chunks.push(taken)
    this.kept += taken.length
    this.dropped += chunk.length - taken.length
  }

  /**
   * The kept bytes as text (a trailing partial character dropped), cut further where its JSON form
   * would pass `maxEncodedBytes` (a control character takes 6 bytes there, an unreadable byte 3),
   * with a note when cut.
   */
  text(maxEncodedBytes: number): string {
    const raw = Buffer.concat(this.chunks)
    const capped = this.dropped > 0
    const decoded = decode(raw, capped)
    const kept = encodedLength(decoded) <= maxEncodedBytes ? decoded : cutEncoded(decoded, maxEncodedBytes)
    // Counted in the command's own bytes (an unreadable byte is one, not its U+FFFD's three), the
    // partial character left at the end of what was kept included.
    const dropped = this.dropped + raw.length - rawLengthOf(raw, kept)
    return dropped === 0 ? kept : `${kept}\n[truncated: ${dropped} more bytes]`
  }

  /** Lets the kept bytes go (the call has its result; a background process may hold the pipes on). */
  release(): void {
    this.chunks.length = 0
  }
}

/**
 * Each stream's share of the model-visible projection (`MAX_PROJECTION_BYTES` of canonical JSON):
 * half of it, less room for the other fields and a stream's truncation note, so a result of two full
 * streams of control characters still fits.
 */
const STREAM_ENCODED_BYTES = Math.floor((Limits.MAX_PROJECTION_BYTES - 1_024) / 2) - 64

/** The longest timer Node keeps (2^31 − 1 ms, about 24.8 days): a longer one would fire at once. */
const MAX_TIMER_MS = 2 ** 31 - 1

/** A timeout in seconds as a timer's milliseconds, never past what a timer can wait. */
const timeoutMs = (seconds: number): number => Math.min(seconds * 1000, MAX_TIMER_MS)

/** Sends `signal` to the whole process group led by `pid`; a group already gone is not an error. */
const killGroup = (pid: number | undefined, signal: NodeJS.Signals): void => {
  if (pid !== undefined) Result.try(() => process.kill(-pid, signal))
}

export const runCommand = (
  root: string,
  options: RunCommandOptions,
  input: RunCommandInput,
  abortSignal: AbortSignal,
): Effect.Effect<ToolCall.ToolOutput, ToolFailure> =>
  Effect.flatMap(canonicalRoot(root), (cwd) =>
    Effect.callback<ToolCall.ToolOutput, ToolFailure>((resume, interruption) => {
      const env = environmentWithout(options.hiddenEnvironment)
      const child = spawn("/bin/sh", ["-c", input.command], {
        cwd,
        ...(env === undefined ? {} : { env }),
        detached: true,
        stdio: ["ignore", "pipe", "pipe"],
      })
      // A spawn that failed at once (no file descriptor left for the pipes: EMFILE) gives a child
      // without pipes, and its 'error' comes in the next turn: the call fails with it, never the host.
      const pipes: ReadonlyArray<unknown> = [child.stdout, child.stderr]
      if (pipes.some((pipe) => pipe === undefined || pipe === null)) {
        child.once("error", (error) => resume(Effect.fail(failure(`could not run /bin/sh: ${describeDefect(error)}`))))
        return
      }
      const stdout = new Capture(options.outputBytes)
      const stderr = new Capture(options.outputBytes)
      child.stdout.on("data", (chunk: Buffer) => stdout.push(chunk))
      child.stderr.on("data", (chunk: Buffer) => stderr.push(chunk))
      let timedOut = false
      let drain: ReturnType<typeof setTimeout> | undefined
      let latest: ReturnType<typeof setTimeout> | undefined
      // How the shell ended, once it has: from then on the call only waits for the pipes to drain.
      let exitedWith: { readonly code: number | null; readonly signal: NodeJS.Signals | null } | undefined
      let finished = false
      // Killing the group ends the shell and everything it started; destroying the pipes ends the
      // wait even if a process that left the group still holds them.
      const stop = () => {
        killGroup(child.pid, "SIGKILL")
        child.stdout.destroy()
        child.stderr.destroy()
      }
      const timer = setTimeout(() => {
        timedOut = true
        stop()
      }, timeoutMs(options.timeoutSeconds))
      // Before the shell exits a cancellation kills the group; after, the call is over but for the
      // drain, and what the shell left running is left alone: the call ends with what it has.
      const onAbort = () => (exitedWith === undefined ? stop() : release())
      const cleanup = () => {
        clearTimeout(timer)
        clearTimeout(drain)
        clearTimeout(latest)
        abortSignal.removeEventListener("abort", onAbort)
        interruption.removeEventListener("abort", onAbort)
      }
      const finish = (code: number | null, signal: NodeJS.Signals | null) => {
        if (finished) return
        finished = true
        cleanup()
        const value = {
          exitCode: code,
          ...(signal === null ? {} : { signal }),
          stdout: stdout.text(STREAM_ENCODED_BYTES),
          stderr: stderr.text(STREAM_ENCODED_BYTES),
          timedOut,
        }
        // Nothing of the output stays with a pipe a background process holds on.
        stdout.release()
        stderr.release()
        resume(Effect.succeed({ format: "json", value }))
      }
      if (abortSignal.aborted) stop()
      else abortSignal.addEventListener("abort", onAbort, { once: true })
      interruption.addEventListener("abort", onAbort, { once: true })
      child.once("error", (error) => {
        if (finished) return
        finished = true
        cleanup()
        resume(Effect.fail(failure(`could not run /bin/sh: ${describeDefect(error)}`)))
      })
      // The shell exited, and a process it left running holds the pipes: the call ends, and the pipes
      // stay open for that process, read and dropped, without holding the host (as a terminal stays
      // open for a job left in it: closed, its next write would kill it with SIGPIPE).
      const release = () => {
        if (exitedWith === undefined || finished) return
        child.removeAllListeners("close")
        for (const pipe of [child.stdout, child.stderr]) {
          pipe.removeAllListeners("data")
          pipe.on("data", () => undefined)
          pipe.on("error", () => undefined)
          const unref: unknown = Reflect.get(pipe, "unref")
          if (typeof unref === "function") Reflect.apply(unref, pipe, [])
        }
        finish(exitedWith.code, exitedWith.signal)
      }
      // After the exit the pipes deliver what the shell wrote; the call ends once they stayed quiet
      // for `outputDrainMs`, and at the latest 20 times that, when a background process holds them.
      const quiet = () => {
        if (exitedWith === undefined) return
        clearTimeout(drain)
        drain = setTimeout(release, options.outputDrainMs)
      }
      child.stdout.on("data", quiet)
      child.stderr.on("data", quiet)
      child.once("exit", (code, signal) => {
        exitedWith = { code, signal }
        // The timeout is the shell's: what it left running outlives it, as documented.
        clearTimeout(timer)
        quiet()
        latest = setTimeout(release, options.outputDrainMs * 20)
      })
      child.once("close", (code, signal) => finish(code, signal))
    }),
  )
