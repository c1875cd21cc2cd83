/**
 * The fake OpenAI-compatible chat-completions server every contender of `pnpm bench` talks to. It runs
 * in its own process (`startFakeServer` spawns it), so its work never counts in the measured process's
 * time or CPU, and it is stateless: each response follows from the request alone, so the engine, the
 * OpenAI Agents SDK and the raw loop all meet exactly the same server behaviour.
 *
 * The scenario is the request's `model`:
 * - `loop-<steps>`: a tool loop. With `k` tool results after the last user message, it answers a call
 *   of `noop` while `k < steps - 1`, then the text `done`: `steps` requests per turn.
 * - `build-<calls>`: `calls` parallel `noop` calls when the turn has no tool result yet, then `done`
 *   (grows a session's history quickly while still running real turns).
 * - `text-<deltas>` and `text-<deltas>-paced-<ms>`: an answer of `deltas` text deltas, written as fast as
 *   possible or one every `ms` milliseconds. Each delta is `<index>@<send time> `, the send time being
 *   `process.hrtime.bigint()` in nanoseconds (CLOCK_MONOTONIC, shared by every process on the machine),
 *   so a reader can compute the delay from a delta's sending to its delivery.
 *
 * Whatever the model, a summary request (its last user message ends with the compaction instruction,
 * docs/engine.md §5.12) is answered with a valid `sections_v1` summary. A loop's position is read
 * from the `step` argument of the last `noop` call after the last user message, not from a count of
 * tool results, so it survives a mid-turn compaction that folds the turn's earlier steps away (the
 * checkpoint then re-sends the opening, and the tail keeps at least the latest call). Call ids carry
 * a digest of the request body, so they stay unique in a session whose history was folded. The body
 * is parsed (JSON.parse) in this process, whose work is never counted.
 *
 * Usage: `prompt_tokens` is ceil(request body bytes / 4) and `completion_tokens` ceil(answer bytes /
 * 4), so a declared context window (`context.declaredWindow`) is reached as a real one would be.
 *
 * Capture: a request under `/capture/` (a base URL of `<origin>/capture/v1`) is answered like any
 * other, and its body is also kept in this process; `GET /captured` answers the bodies kept since the
 * last such call, as a JSON array of strings. A contender is then measured with its own HTTP client,
 * not through a capturing `fetch` wrapper.
 *
 * Run directly (`node --import tsx fake-server.ts`), it prints `{"port":N}` once listening.
 */
import { spawn, type ChildProcess } from "node:child_process"
import { createHash } from "node:crypto"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"

/** What every chunk of one response carries: the request's model, and an id of its own, as a real provider gives. */
interface Reply {
  readonly model: string
  readonly id: string
}

const header = (reply: Reply) => ({ id: reply.id, object: "chat.completion.chunk", created: 1_767_225_600, model: reply.model })

const chunk = (model: Reply, delta: Readonly<Record<string, unknown>>, finishReason: string | null = null): string =>
  `data: ${JSON.stringify({ ...header(model), choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }] })}\n\n`

/** Token counts in proportion to the bytes, about as a tokenizer counts English text. */
const tokens = (bytes: number): number => Math.max(1, Math.ceil(bytes / 4))

interface Usage {
  readonly prompt: number
  readonly completion: number
}

const usage = (model: Reply, counted: Usage): string =>
  `data: ${JSON.stringify({
    ...header(model),
    choices: [],
    usage: { prompt_tokens: counted.prompt, completion_tokens: counted.completion, total_tokens: counted.prompt + counted.completion },
  })}\n\n`

const DONE = "data: [DONE]\n\n"

const toolCalls = (model: Reply, promptTokens: number, ids: ReadonlyArray<{ readonly id: string; readonly step: number }>): Array<string> => {
  const calls = ids.map((call, index) => ({ index, id: call.id, type: "function", function: { name: "noop", arguments: `{"step":${call.step}}` } }))
  return [
    chunk(model, { role: "assistant", content: "" }),
    ...calls.map((call) => chunk(model, { tool_calls: [call] })),
    chunk(model, {}, "tool_calls"),
    usage(model, { prompt: promptTokens, completion: tokens(Buffer.byteLength(JSON.stringify(calls))) }),
    DONE,
  ]
}

const textAnswer = (model: Reply, promptTokens: number, pieces: ReadonlyArray<string>): Array<string> => [
  chunk(model, { role: "assistant", content: "" }),
  ...pieces.map((piece) => chunk(model, { content: piece })),
  chunk(model, {}, "stop"),
  usage(model, { prompt: promptTokens, completion: tokens(pieces.reduce((bytes, piece) => bytes + Buffer.byteLength(piece), 0)) }),
  DONE,
]

/** The end of the compaction instruction (docs/engine.md §5.12). */
const SUMMARY_INSTRUCTION_END = "\n\nNow write the structured summary of the conversation above. Output only the summary."

/** Where the turn stands. */
interface Position {
  readonly model: string
  readonly users: number
  readonly toolResults: number
  /** The request's last user message is the compaction instruction. */
  readonly summary: boolean
  /** The `step` argument of the last `noop` call after the last user message, or -1 when there is none. */
  readonly lastStep: number
}

interface Message {
  readonly role?: string
  readonly content?: string | ReadonlyArray<{ readonly text?: string }> | null
  readonly tool_calls?: ReadonlyArray<{ readonly function?: { readonly arguments?: string } }>
}

const textOf = (content: Message["content"]): string =>
  typeof content === "string" ? content : (content ?? []).map((part) => part.text ?? "").join("")

const position = (body: string): Position => {
  const parsed = JSON.parse(body) as { model?: string; messages?: ReadonlyArray<Message> }
  const messages = parsed.messages ?? []
  let users = 0
  let toolResults = 0
  let lastUser = -1
  messages.forEach((message, index) => {
    if (message.role === "user") {
      users++
      lastUser = index
    } else if (message.role === "tool") toolResults++
  })
  let lastStep = -1
  for (const message of messages.slice(lastUser + 1)) {
    for (const call of message.tool_calls ?? []) {
      const step = (JSON.parse(call.function?.arguments ?? "{}") as { step?: unknown }).step
      if (typeof step === "number") lastStep = step
    }
  }
  const summary = lastUser >= 0 && textOf(messages[lastUser]!.content).endsWith(SUMMARY_INSTRUCTION_END)
  return { model: parsed.model ?? "", users, toolResults, summary, lastStep }
}

/** A `sections_v1` summary of about 1.3 KB (over the fold floor's 200 output tokens), in lines. */
const summaryLines = (at: Position): Array<string> => [
    "## Goal\n",
    "- Keep calling the noop tool until told otherwise, as the benchmark's user asked in every turn.\n",
    "\n## Progress\n",
    "### Done\n",
    `- Folded a conversation of ${at.users - 1} user messages and ${at.toolResults} tool results into this summary.\n`,
    "- Every noop call so far returned ok; no error, no refusal, no retry was needed.\n",
    "### In Progress\n",
    "- The current turn's tool loop continues from its latest noop call.\n",
    "\n## Key Decisions\n",
    "- **Keep the loop going**: the user asked for noop calls until told otherwise, so each step calls it once more.\n",
    "\n## Next Steps\n",
    "1. Call noop with the next step number.\n",
    "2. Answer done once the scenario ends the loop, then wait for the next user message.\n",
    "\n## Critical Context\n",
    "- Tool: noop, input {step: number}, output the text ok; it has no side effect and needs no workspace file.\n",
    "- The system prompt asks for noop calls until told otherwise; every user message is a numbered turn of the same session.\n",
    "- Nothing else from the folded conversation is needed to continue: there were no files, commands or errors in it.",
]

const digest = (body: string): string => createHash("sha1").update(body).digest("hex").slice(0, 16)

const respond = (body: string, response: http.ServerResponse): void => {
  const at = position(body)
  // A response id per request body (a client that keys messages by id, as LangChain does, must not see two alike).
  const model: Reply = { model: at.model, id: `chatcmpl-${digest(body)}` }
  const promptTokens = tokens(Buffer.byteLength(body))
  response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
  if (at.summary) {
    response.end(textAnswer(model, promptTokens, summaryLines(at)).join(""))
    return
  }
  const loop = /^loop-(\d+)$/.exec(at.model)
  const build = /^build-(\d+)$/.exec(at.model)
  const text = /^text-(\d+)(?:-paced-(\d+))?$/.exec(at.model)
  if (loop !== null) {
    const steps = Number(loop[1])
    const step = at.lastStep + 1
    const chunks =
      step < steps - 1 ? toolCalls(model, promptTokens, [{ id: `call_${digest(body)}_${step}`, step }]) : textAnswer(model, promptTokens, ["done"])
    response.end(chunks.join(""))
    return
  }
  if (build !== null) {
    const calls = Number(build[1])
    const id = digest(body)
    const chunks =
      at.lastStep < 0
        ? toolCalls(model, promptTokens, Array.from({ length: calls }, (_, index) => ({ id: `call_${id}_${index}`, step: index })))
        : textAnswer(model, promptTokens, ["done"])
    response.end(chunks.join(""))
    return
  }
  if (text !== null) {
    const deltas = Number(text[1])
    const paceMs = text[2] === undefined ? 0 : Number(text[2])
    let answered = 0
    const stamp = (index: number) => {
      const content = `${index}@${process.hrtime.bigint()} `
      answered += content.length
      return chunk(model, { content })
    }
    const tail = () => [chunk(model, {}, "stop"), usage(model, { prompt: promptTokens, completion: tokens(answered) }), DONE].join("")
    response.write(chunk(model, { role: "assistant", content: "" }))
    if (paceMs === 0) {
      for (let index = 0; index < deltas; index++) response.write(stamp(index))
      response.end(tail())
      return
    }
    let index = 0
    const next = (): void => {
      if (response.destroyed) return
      if (index === deltas) {
        response.end(tail())
        return
      }
      response.write(stamp(index++))
      setTimeout(next, paceMs)
    }
    setTimeout(next, paceMs)
    return
  }
  response.end(textAnswer(model, promptTokens, [`unknown scenario ${at.model}`]).join(""))
}

const serve = (): void => {
  let captured: Array<string> = []
  const server = http.createServer((request, response) => {
    if (request.method === "GET" && request.url === "/captured") {
      response.writeHead(200, { "content-type": "application/json" })
      response.end(JSON.stringify(captured))
      captured = []
      return
    }
    const capture = request.url?.startsWith("/capture/") === true
    const parts: Array<Buffer> = []
    request.on("data", (part: Buffer) => parts.push(part))
    request.on("end", () => {
      const body = Buffer.concat(parts).toString("utf8")
      if (capture) captured.push(body)
      respond(body, response)
    })
  })
  server.keepAliveTimeout = 60_000
  server.listen(0, "127.0.0.1", () => {
    process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`)
  })
  process.on("disconnect", () => process.exit(0))
  process.stdin.on("end", () => process.exit(0))
  process.stdin.resume()
}

export interface FakeServer {
  /** `http://127.0.0.1:<port>/v1` */
  readonly baseUrl: string
  /** `http://127.0.0.1:<port>/capture/v1`: the same answers, and the bodies kept for `captured`. */
  readonly capturingBaseUrl: string
  /** The bodies of the requests sent to `capturingBaseUrl` since the last call, in arrival order. */
  readonly captured: () => Promise<Array<string>>
  readonly close: () => Promise<void>
}

/** Spawns the server in its own Node process and resolves once it listens. */
export const startFakeServer = async (): Promise<FakeServer> => {
  const child: ChildProcess = spawn(process.execPath, ["--import", "tsx", fileURLToPath(import.meta.url)], {
    stdio: ["pipe", "pipe", "inherit"],
  })
  const lines = createInterface({ input: child.stdout! })
  const port = await new Promise<number>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`the fake server exited (${code})`)))
    lines.once("line", (line) => resolve((JSON.parse(line) as { port: number }).port))
  })
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    capturingBaseUrl: `http://127.0.0.1:${port}/capture/v1`,
    captured: async () => (await (await fetch(`http://127.0.0.1:${port}/captured`)).json()) as Array<string>,
    close: () =>
      new Promise((resolve) => {
        child.once("exit", () => resolve())
        child.stdin!.end()
      }),
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) serve()
