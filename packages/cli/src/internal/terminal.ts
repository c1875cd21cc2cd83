/**
 * Output to a terminal (docs/cli.md §10.1 "Output"). What maka prints comes from the log: the
 * model's text, user messages, tool results read from workspace files, provider messages. Any of
 * them may hold control characters a terminal acts on (an escape sequence that retitles the window,
 * writes the clipboard, hides or rewrites what was printed). On a terminal they are shown as visible
 * escapes (`\u001b`, valid in a JSON string too, so `--json` lines stay JSON); a pipe or a file gets
 * the text byte for byte.
 */
import type { Sink } from "./render.ts"

/**
 * C0 controls but tab and line feed, a carriage return that does not end a line, DEL and the C1
 * controls (U+0080–U+009F, which some terminals read as ESC sequences); the bidirectional
 * embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069), which reorder what follows them
 * (a file name `…\u202Egnp.exe` shows as `…exe.png`); and the line and paragraph separators.
 */
const CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069\u2028\u2029]|\r(?!\n)/g

const visible = (control: string): string => {
  if (control === "\r") return "\\r"
  return `\\u${control.charCodeAt(0).toString(16).padStart(4, "0")}`
}

/** `text` with every control character a terminal would act on written as a visible escape. */
export const terminalSafe = (text: string): string => text.replace(CONTROL, visible)

/** Where a sink writes: a stream that may be a terminal, and that reports a failed write. */
export interface OutputStream {
  readonly isTTY?: boolean | undefined
  /**
   * False when the stream's buffer is full (Node's writable streams): `drain` follows. `written` is
   * called once the text went through or failed, after every earlier write.
   */
  readonly write: (text: string, written?: (error?: Error | null) => void) => unknown
  readonly on?: (event: "error", listener: (error: Error) => void) => unknown
  readonly once?: (event: "drain", listener: () => void) => unknown
}

/** The process's sink, which also tells how stdout failed, if it did. */
export interface ProcessSink extends Sink {
  /**
   * The error code of stdout's first failed write (`EPIPE` when its reader went away, `ENOSPC` for a
   * full disk, `EIO` when the error has none), or undefined while every write went through.
   */
  readonly outFailure: () => string | undefined
  /** Writes what a terminal's stream still holds back (a carriage return that ended the last write). */
  readonly flush: () => void
}

/**
 * The process's sink: each stream that is a terminal gets its text through `terminalSafe`. A stream
 * whose write fails (its reader went away: `maka run … | head`, EPIPE; or a full disk) takes no more
 * text, and the failure is not thrown: a run must never die half-way because nobody reads its output.
 * When stdout fails, `outClosed` is aborted, and a running turn is cancelled as on SIGINT (its
 * terminal is written, docs/cli.md §10.1 "Signals").
 */
export const processSink = (stdout: OutputStream, stderr: OutputStream): ProcessSink => {
  const outClosed = new AbortController()
  let outFailure: string | undefined
  const writer = (stream: OutputStream, onFailed: (error: Error) => void) => {
    let failed = false
    // Set while the stream's buffer is full, until it drains; what waits for that.
    let draining: Promise<void> | undefined
    let drainedNow: (() => void) | undefined
    const drained = () => {
      draining = undefined
      drainedNow?.()
      drainedNow = undefined
    }
    stream.on?.("error", (error) => {
      if (failed) return
      failed = true
      drained()
      onFailed(error)
    })
    const safe = stream.isTTY === true
    const write = (text: string) => {
      if (failed) return
      if (stream.write(text) === false && draining === undefined && stream.once !== undefined) {
        draining = new Promise<void>((resolve) => {
          drainedNow = resolve
        })
        stream.once("drain", drained)
      }
    }
    // A carriage return that ends a write is held back until the next one tells whether a line feed
    // follows it: a CR LF split across two writes (two deltas of a stream) still ends a line.
    let heldReturn = false
    return {
      write: (text: string) => {
        if (!safe) return write(text)
        let next = heldReturn ? `\r${text}` : text
        heldReturn = next.endsWith("\r")
        if (heldReturn) next = next.slice(0, -1)
        if (next !== "") write(terminalSafe(next))
      },
      flush: () => {
        if (heldReturn) write(terminalSafe("\r"))
        heldReturn = false
      },
      drained: () => draining,
      // An empty write's callback comes after every earlier write went through or failed; a failure's
      // error event, emitted on a later tick, comes before the next turn of the event loop. A reader
      // that stopped reading holds the callback back: `stop` (a signal) ends the wait.
      settled: (stop?: AbortSignal) =>
        failed || stop?.aborted === true
          ? Promise.resolve()
          : new Promise<void>((resolve) => {
              const done = () => {
                stop?.removeEventListener("abort", done)
                resolve()
              }
              stop?.addEventListener("abort", done, { once: true })
              stream.write("", () => setImmediate(done))
            }),
    }
  }
  const out = writer(stdout, (error) => {
      const code = (error as { readonly code?: unknown }).code
    outFailure = typeof code === "string" && code !== "" ? code : "EIO"
    outClosed.abort()
  })
  const err = writer(stderr, () => undefined)
  return {
    out: out.write,
    err: err.write,
    outClosed: outClosed.signal,
    outFailure: () => outFailure,
    outDrained: out.drained,
    outSettled: out.settled,
    flush: () => {
      out.flush()
      err.flush()
    },
  }
}

/**
 * The exit of a command whose stdout failed with something other than a reader going away (a full
 * disk, an I/O error): what it printed is lost, so a command that would exit 0 exits 1, and stderr
 * says so. EPIPE keeps the command's own code (docs/cli.md §10.1 "Signals"): the reader took what it
 * wanted.
 */
export const afterOutput = (code: number, outFailure: string | undefined): { readonly code: number; readonly line?: string } => {
  if (outFailure === undefined || outFailure === "EPIPE") return { code }
  return { code: code === 0 ? 1 : code, line: `maka: error: could not write to stdout (${outFailure}); what was printed is incomplete\n` }
}
