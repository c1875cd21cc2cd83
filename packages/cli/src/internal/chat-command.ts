/**
 * `maka chat` (docs/cli.md §10.1): interactive turns in one session. One message per line of stdin; a
 * line entered while a turn runs is delivered to it as steering; end of input ends the chat after
 * the current turn; SIGINT cancels the current turn and ends the chat (exit 130); SIGTERM hands the
 * current turn off and ends the chat (exit 75). A line the log would refuse as a message (over its
 * size limit) is reported and skipped, and the chat goes on. The exit code is the last line's: its
 * turn's, or 2 for a skipped line.
 */
import { Limits } from "@maka/facts"
import { StringDecoder } from "node:string_decoder"
import { ExitCode, fromEngineError } from "./exit.ts"
import * as Flags from "./flags.ts"
import { errorCodeOf, messageProblem, openHost, settingsOf, terminalLineProblem, unreadableStdin, type RunContext } from "./run-command.ts"
import { handleSignals } from "./signals.ts"

/**
 * The lines of `input`, each handed to `onLine` as it ends: only `\n` ends a line (a `\r` before
 * it is dropped, a lone `\r` is text), as `maka run` reads its message; at the end of input the
 * last line, if any, then `onEnd`. `close` stops reading.
 */
const readLines = (
  input: NodeJS.ReadStream,
  onLine: (line: string) => void,
  onOverlong: (bytes: number) => void,
  onEnd: () => void,
): {
  readonly close: () => void
  readonly failure: () => string | undefined
  readonly pause: () => void
  readonly resume: () => void
} => {
  const decoder = new StringDecoder("utf8")
  let pending = ""
  // The bytes of a line past what any message holds: its text is dropped as it comes, and only
  // counted (a line of gigabytes, a binary file piped in, costs no more than a message).
  let overlong: number | undefined
  let overlongEndsCr = false
  let atStart = true
  const emit = (line: string) => onLine(line.endsWith("\r") ? line.slice(0, -1) : line)
  const onData = (chunk: Buffer | string) => {
    // Each chunk is searched once: a long line is never searched again as it grows. A byte-order
    // mark that begins the input is no text of its first line.
    const decoded = typeof chunk === "string" ? chunk : decoder.write(chunk)
    const text = atStart && decoded.startsWith("\ufeff") ? decoded.slice(1) : decoded
    if (decoded !== "") atStart = false
    let start = 0
    for (let end = text.indexOf("\n"); end !== -1; end = text.indexOf("\n", start)) {
      const piece = text.slice(start, end)
      if (overlong === undefined) emit(pending + piece)
      else {
        // Counted as `emit` gives a line: without the `\r` before its `\n`.
        const endsCr = piece === "" ? overlongEndsCr : piece.endsWith("\r")
        onOverlong(overlong + Buffer.byteLength(piece) - (endsCr ? 1 : 0))
      }
      pending = ""
      overlong = undefined
      start = end + 1
    }
    const rest = text.slice(start)
    if (overlong !== undefined) {
      overlong += Buffer.byteLength(rest)
      if (rest !== "") overlongEndsCr = rest.endsWith("\r")
    } else {
      pending += rest
      // A UTF-16 unit is at least a byte of UTF-8: a line this long is over the limit, its `\r` aside.
      if (pending.length > LINE_UNITS) {
        overlong = Buffer.byteLength(pending)
        overlongEndsCr = pending.endsWith("\r")
        pending = ""
      }
    }
  }
  let ended = false
  const finish = () => {
    if (ended) return
    ended = true
    const rest = decoder.end()
    if (overlong !== undefined) onOverlong(overlong + Buffer.byteLength(rest) - ((rest === "" ? overlongEndsCr : rest.endsWith("\r")) ? 1 : 0))
    else if (pending + rest !== "") emit(pending + rest)
    pending = ""
    overlong = undefined
    onEnd()
  }
  // An input that cannot be read (a descriptor opened for writing, a directory) ends the lines too,
  // and says why when the chat ends.
  let failure: string | undefined
  const fail = (error: unknown) => {
    failure ??= errorCodeOf(error)
    finish()
  }
  // A directory reads as an empty input rather than failing: it is told apart before any reading.
  const directory = unreadableStdin(input)
  if (directory !== undefined) {
    failure = directory
    setImmediate(finish)
    return { close: () => undefined, failure: () => failure, pause: () => undefined, resume: () => undefined }
  }
  input.on("data", onData)
  input.on("end", finish)
  input.on("error", fail)
  return {
    close: () => {
      input.off("data", onData)
      input.off("end", finish)
      input.off("error", fail)
      input.pause()
    },
    failure: () => failure,
    pause: () => input.pause(),
    resume: () => input.resume(),
  }
}

/** A line as the chat takes it: its text, or the bytes of one too long to be kept. */
type Line = string | { readonly overlongBytes: number }

/** The longest line that may be a message: its bytes' limit and a `\r` before its `\n`. */
const LINE_UNITS = Limits.MAX_MESSAGE_TEXT_BYTES + 1

/** How many lines wait for turns before the input is read no further (until they are taken). */
const QUEUED_LINES = 64

export const chatCommand = async (context: RunContext): Promise<number> => {
  const { values } = Flags.parse("chat", context.args)
  const settings = settingsOf(values, context)
  const signals = handleSignals(context.sink)
  const queued: Array<Line> = []
  let ended = false
  let wake: (() => void) | undefined
  let steer: ((text: string) => Promise<void>) | undefined
  // Whether the last line was skipped: the chat's exit code is then 2, until a later turn's.
  let skipped = false
  // Lines keep their order. A line that comes while a turn runs, with no line waiting for a turn of
  // its own, is that turn's steering: given one at a time, in order. Once one is refused (the turn
  // ended, or holds all the steering it can), it and the lines after it wait for turns of their own.
  const toSteer: Array<Line> = []
  // Whether the input is paused because enough lines wait already.
  let held = false
  let pumping: Promise<void> | undefined
  // A line the log would refuse, or one a terminal may have cut, is reported and skipped.
  const lineProblem = (line: Line): string | undefined =>
    typeof line === "string"
      ? (messageProblem(line) ?? terminalLineProblem(context.stdin, line))
      : `the message is ${line.overlongBytes} bytes of UTF-8; a message holds at most ${Limits.MAX_MESSAGE_TEXT_BYTES}`
  const pumpOnce = async () => {
    while (toSteer.length > 0) {
      const line = toSteer[0]!
      const problem = lineProblem(line)
      if (problem !== undefined) {
        toSteer.shift()
        context.sink.err(`maka: ${problem}; the line is skipped\n`)
        skipped = true
        continue
      }
      const deliver = steer
      // A line with no problem is text: only an overlong one is not.
      const delivered = deliver === undefined || typeof line !== "string" ? false : await deliver(line).then(() => true, () => false)
      if (!delivered) {
        steer = undefined
        queued.unshift(...toSteer.splice(0))
        return
      }
      toSteer.shift()
      skipped = false
    }
  }
  const pump = (): void => {
    if (pumping !== undefined) return
    pumping = pumpOnce().finally(() => {
      pumping = undefined
      // A line that came as the pass ended is given too.
      if (toSteer.length > 0 && steer !== undefined) pump()
      wake?.()
    })
  }
  const onLine = (line: Line) => {
    if (typeof line === "string" && line.trim() === "") return
    if (steer !== undefined && queued.length === 0) {
      toSteer.push(line)
      pump()
    } else {
      queued.push(line)
      // Lines piped faster than turns take them (`yes |`) wait in the pipe, not in memory.
      if (queued.length >= QUEUED_LINES && !held) {
        held = true
        lines.pause()
      }
    }
    wake?.()
  }
  const lines = readLines(
    context.stdin,
    onLine,
    // Reported in its place among the lines, as a line over the limit that was kept whole is.
    (bytes) => onLine({ overlongBytes: bytes }),
    () => {
      ended = true
      wake?.()
    },
  )
  // One listener for the whole chat: a wait for the next line ends on a line, the end of input or a signal.
  signals.signal.addEventListener("abort", () => wake?.(), { once: true })
  /** The next line that can be a message; a line the log would refuse is reported and skipped. */
  const nextLine = async (): Promise<string | undefined> => {
    // A turn whose output failed (its reader went away) cancels the chat before another turn opens.
    await context.sink.outSettled?.(signals.signal)
    for (;;) {
      // A line the last turn is still being given is its, or the next turn's once refused.
      while (pumping !== undefined) await pumping
      queued.unshift(...toSteer.splice(0))
      while (queued.length === 0 && !ended && !signals.signal.aborted) {
        await new Promise<void>((resolve) => {
          wake = resolve
        })
        wake = undefined
      }
      const line = signals.signal.aborted ? undefined : queued.shift()
      if (held && queued.length < QUEUED_LINES / 2) {
        held = false
        lines.resume()
      }
      const problem = line === undefined ? undefined : lineProblem(line)
      if (problem === undefined) return line as string | undefined
      context.sink.err(`maka: ${problem}; the line is skipped\n`)
      skipped = true
    }
  }
  try {
    // Piped input opens the log at its first line: an input without one makes no log and no session.
    // On a terminal the log opens at once, so a refusal (another writer, say) comes before any typing.
    const first = context.stdin.isTTY === true ? undefined : await nextLine()
    if (context.stdin.isTTY !== true && first === undefined) {
      const failure = lines.failure()
      if (failure !== undefined && !signals.signal.aborted) {
        throw new Flags.UsageError(`could not read stdin (${failure}); pipe the chat's lines on stdin, or run it at a terminal`)
      }
      return signals.signal.aborted ? ExitCode.cancelled : skipped ? ExitCode.usage : ExitCode.completed
    }
    const host = await openHost(settings, context.sink, signals.signal, signals.attach)
    let code: number = ExitCode.completed
    try {
      for (let message = first ?? (await nextLine()); message !== undefined; message = await nextLine()) {
        skipped = false
        try {
          code = await host.turn(message, (run) => {
            steer = (text) => run.steer(text)
          })
        } catch (error) {
          // A refused turn (a busy or paused session, invalid input) ends the chat as `maka run` ends.
          throw fromEngineError(error)
        } finally {
          steer = undefined
        }
        // A SIGTERM ends the chat after its turn, whether the turn was handed off or ended first.
        if (code === ExitCode.cancelled || code === ExitCode.handedOff || signals.handoffRequested()) break
      }
      const failure = lines.failure()
      if (failure !== undefined && !signals.signal.aborted) context.sink.err(`maka: could not read stdin (${failure}); the chat ends\n`)
      return signals.signal.aborted ? ExitCode.cancelled : skipped ? ExitCode.usage : code
    } finally {
      await host.close()
    }
  } finally {
    lines.close()
    signals.release()
  }
}
