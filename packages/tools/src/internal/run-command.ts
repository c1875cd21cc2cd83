/**
 * `run_command`: `/bin/sh -c command` in the workspace root, detached in its own process group
 * (so a timeout or cancellation kills everything it started, and a crashed host leaves it running).
 * stdout and stderr keep at most their cap each; a non-zero exit is a result, not a failure. The
 * call returns when the shell exits: a background process it left running may hold the pipes open
 * for as long as it lives, so after the exit the pipes are closed on our side once they stayed quiet
 * for `outputDrainMs` (at the latest after 20 times that), keeping what was still buffered.
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
    const decoded = new TextDecoder("utf-8").decode(Buffer.concat(this.chunks), { stream: true })
    const kept = encodedLength(decoded) <= maxEncodedBytes ? decoded : cutEncoded(decoded, maxEncodedBytes)
    const dropped = this.dropped + (kept.length === decoded.length ? 0 : Buffer.byteLength(decoded.slice(kept.length)))
    return dropped === 0 ? kept : `${kept}\n[truncated: ${dropped} more bytes]`
  }
}

/**
 * Each stream's share of the model-visible projection (`MAX_PROJECTION_BYTES` of canonical JSON):
 * half of it, less room for the other fields and a stream's truncation note, so a result of two full
 * streams of control characters still fits.
 */
const STREAM_ENCODED_BYTES = Math.floor((Limits.MAX_PROJECTION_BYTES - 1_024) / 2) - 64

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
      }, options.timeoutSeconds * 1000)
      const onAbort = () => stop()
      const cleanup = () => {
        clearTimeout(timer)
        clearTimeout(drain)
        abortSignal.removeEventListener("abort", onAbort)
        interruption.removeEventListener("abort", onAbort)
      }
      if (abortSignal.aborted) stop()
      else abortSignal.addEventListener("abort", onAbort, { once: true })
      interruption.addEventListener("abort", onAbort, { once: true })
      child.once("error", (error) => {
        cleanup()
        resume(Effect.fail(failure(`could not run /bin/sh: ${describeDefect(error)}`)))
      })
      // The shell exited: what it wrote is in the pipes; a background process may keep them open.
      // They are closed once they stayed quiet for `outputDrainMs`, and at the latest 20 times that.
      let exited = false
      const close = () => {
        child.stdout.destroy()
        child.stderr.destroy()
      }
      const quiet = () => {
        if (!exited) return
        clearTimeout(drain)
        drain = setTimeout(close, options.outputDrainMs)
      }
      child.stdout.on("data", quiet)
      child.stderr.on("data", quiet)
      child.once("exit", () => {
        exited = true
        quiet()
        const latest = setTimeout(close, options.outputDrainMs * 20)
        child.once("close", () => clearTimeout(latest))
      })
      child.once("close", (exitCode, signal) => {
        cleanup()
        resume(
          Effect.succeed({
            format: "json",
            value: {
              exitCode,
              ...(signal === null ? {} : { signal }),
              stdout: stdout.text(STREAM_ENCODED_BYTES),
              stderr: stderr.text(STREAM_ENCODED_BYTES),
              timedOut,
            },
          }),
        )
      })
    }),
  )
