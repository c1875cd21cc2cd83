/**
 * The built-in offline model (docs/cli.md §10.1): a deterministic OpenAI-compatible chat-completions
 * server on 127.0.0.1:0, reached through a `fetch` that maps the fixed base URL
 * `http://offline.maka.invalid/v1` to the loopback port, so its route identity is the same in every
 * process. `respond` is the pure decision: the same request body always gives the same bytes.
 */
import { Prompts } from "@maka/facts"
import { createHash } from "node:crypto"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { OFFLINE_MODEL } from "./internal/flags.ts"
import { oneLine } from "./internal/clip.ts"

export { OFFLINE_MODEL }
export const OFFLINE_BASE_URL = "http://offline.maka.invalid/v1"
const OFFLINE_ORIGIN = "http://offline.maka.invalid"

/** How many characters each streamed text delta carries at most. */
const DELTA_CHARS = 24

interface ChatMessage {
  readonly role: string
  readonly content: string
  readonly toolCalls: ReadonlyArray<{ readonly id: string; readonly name: string; readonly arguments: string }>
  readonly toolCallId: string | undefined
}

interface ChatRequest {
  readonly messages: ReadonlyArray<ChatMessage>
  readonly tools: ReadonlyArray<string>
}

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const text = (value: unknown): string => (typeof value === "string" ? value : "")

const parseMessage = (value: unknown): ChatMessage | undefined => {
  if (!isRecord(value) || typeof value["role"] !== "string") return undefined
  const calls = Array.isArray(value["tool_calls"]) ? value["tool_calls"] : []
  return {
    role: value["role"],
    content: text(value["content"]),
    toolCalls: calls.flatMap((call) => {
      const fn = isRecord(call) ? call["function"] : undefined
      return isRecord(call) && isRecord(fn) ? [{ id: text(call["id"]), name: text(fn["name"]), arguments: text(fn["arguments"]) }] : []
    }),
    toolCallId: typeof value["tool_call_id"] === "string" ? value["tool_call_id"] : undefined,
  }
}

/** The parts of an OpenAI-compatible request body the offline model reads; `undefined` when malformed. */
export const parseRequest = (body: string): ChatRequest | undefined => {
  let parsed: unknown
  try {
    parsed = JSON.parse(body)
  } catch {
    return undefined
  }
  if (!isRecord(parsed) || !Array.isArray(parsed["messages"])) return undefined
  const messages = parsed["messages"].map(parseMessage)
  if (messages.some((message) => message === undefined)) return undefined
  const tools = Array.isArray(parsed["tools"]) ? parsed["tools"] : []
  return {
    messages: messages.filter((message): message is ChatMessage => message !== undefined),
    tools: tools.flatMap((tool) => {
      const fn = isRecord(tool) ? tool["function"] : undefined
      return isRecord(fn) && typeof fn["name"] === "string" ? [fn["name"]] : []
    }),
  }
}

/** What the model decided to send back. */
export type Reply =
  | { readonly kind: "text"; readonly text: string }
  | { readonly kind: "tool_call"; readonly name: string; readonly arguments: string }

const isSummaryRequest = (request: ChatRequest): boolean => {
  const last = request.messages.at(-1)
  return last !== undefined && last.role === "user" && last.content.endsWith(Prompts.COMPACTION_ATTEMPT_SUFFIX)
}


/** What a previous summary in the request carries over: its answered messages and the tools it names. */
interface Carried {
  readonly answered: ReadonlyArray<string>
  readonly tools: ReadonlyArray<string>
}

const carriedOver = (request: ChatRequest): Carried => {
  const previous = request.messages.find(
    (message) => message.role === "user" && message.content.startsWith(Prompts.PREVIOUS_CONTINUATION_SUMMARY_PREFIX),
  )
  if (previous === undefined) return { answered: [], tools: [] }
  const lines = previous.content.split("\n")
  const answered = lines.flatMap((line) => (line.startsWith("- Answered: ") ? [line.slice("- Answered: ".length)] : []))
  const toolsLine = lines.find((line) => line.startsWith("- Tools used: ") && line !== "- Tools used: (none)")
  return { answered, tools: toolsLine === undefined ? [] : toolsLine.slice("- Tools used: ".length).split(", ") }
}

/**
 * A `sections_v1` summary of the user messages and tool names the request shows, updating the
 * previous summary when the request carries one (its answered messages and tools are kept). Its fixed
 * lines keep it above the fold floor (200 output tokens, i.e. 800 characters at ceil(characters / 4)).
 */
export const summaryText = (request: ChatRequest): string => {
  const carried = carriedOver(request)
  const users = [
    ...carried.answered,
    ...request.messages
      .filter(
        (message) =>
          message.role === "user" &&
          !message.content.endsWith(Prompts.COMPACTION_ATTEMPT_SUFFIX) &&
          !message.content.startsWith(Prompts.PREVIOUS_CONTINUATION_SUMMARY_PREFIX),
      )
      .map((message) => oneLine(message.content, 200)),
  ]
  const toolNames = [...new Set([...carried.tools, ...request.messages.flatMap((message) => message.toolCalls.map((call) => call.name))])].sort()
  const lines = [
    "## Goal",
    users.length === 0 ? "- Answer the user's questions about the workspace." : `- ${users.at(-1)}`,
    "",
    "## Progress",
    "### Done",
    ...(users.length === 0 ? ["- (nothing yet)"] : users.map((user) => `- Answered: ${user}`)),
    "### In Progress",
    "- (none)",
    "",
    "## Key Decisions",
    "- **Offline model**: answers come from the workspace files it listed and read, never from outside knowledge.",
    "- **Tools**: list the workspace root once per turn, then read the first README file found there.",
    "- **Determinism**: the same conversation always gives the same summary, so a repeated compaction reproduces it.",
    "",
    "## Next Steps",
    "1. Wait for the next user message.",
    "2. List the workspace again before answering a question about its files.",
    "3. Read the README again when the question concerns the project itself.",
    "",
    "## Critical Context",
    toolNames.length === 0 ? "- Tools used: (none)" : `- Tools used: ${toolNames.join(", ")}`,
    `- User messages so far: ${users.length}`,
    "- The workspace is the directory the run was started in; its files may have changed since they were read.",
    "- Re-list and re-read files before relying on their content in a later turn.",
  ]
  return lines.join("\n")
}

/** The `list_files` entries of a tool result: the names of the files. */
const listedFiles = (content: string): ReadonlyArray<string> => {
  let parsed: unknown
  try {
    parsed = JSON.parse(content)
  } catch {
    return []
  }
  if (!Array.isArray(parsed)) return []
  return parsed.flatMap((entry) =>
    isRecord(entry) && typeof entry["name"] === "string" && entry["type"] === "file" ? [entry["name"]] : [],
  )
}

/** The first line of `read_file` output with text (its lines are `number<TAB>text`). */
const firstLineOf = (content: string): string | undefined => {
  for (const line of content.split("\n")) {
    const body = line.includes("\t") ? line.slice(line.indexOf("\t") + 1) : line
    const trimmed = body.replace(/^#+\s*/, "").trim()
    if (trimmed !== "" && !trimmed.startsWith("[")) return oneLine(trimmed, 160)
  }
  return undefined
}

/** What the model does next in the current turn (the messages after the last user message). */
export const decide = (request: ChatRequest): Reply => {
  if (isSummaryRequest(request)) return { kind: "text", text: summaryText(request) }
  const lastUser = request.messages.findLastIndex((message) => message.role === "user")
  const turn = request.messages.slice(lastUser + 1)
  const calls = turn.flatMap((message) => message.toolCalls)
  const resultOf = (name: string): string | undefined => {
    const call = calls.find((candidate) => candidate.name === name)
    return call === undefined ? undefined : turn.find((message) => message.role === "tool" && message.toolCallId === call.id)?.content
  }
  if (request.tools.includes("list_files") && !calls.some((call) => call.name === "list_files")) {
    return { kind: "tool_call", name: "list_files", arguments: JSON.stringify({ path: "." }) }
  }
  const listing = resultOf("list_files")
  const files = listing === undefined ? [] : listedFiles(listing)
  const readme = files.find((name) => /^readme/i.test(name))
  if (readme !== undefined && request.tools.includes("read_file") && !calls.some((call) => call.name === "read_file")) {
    return { kind: "tool_call", name: "read_file", arguments: JSON.stringify({ path: readme }) }
  }
  const question = lastUser < 0 ? "" : oneLine(request.messages[lastUser]!.content, 120)
  const parts: Array<string> = [`You asked: "${question}". `]
  if (listing === undefined) {
    parts.push("I had no tool to look at the workspace, so I can only answer from the conversation. ")
  } else if (files.length === 0) {
    parts.push("The workspace holds no files. ")
  } else {
    const shown = files.slice(0, 8)
    parts.push(`The workspace holds ${files.length} file${files.length === 1 ? "" : "s"}: ${shown.join(", ")}${files.length > shown.length ? ", …" : ""}. `)
  }
  const readmeText = resultOf("read_file")
  if (readme !== undefined && readmeText !== undefined) {
    const first = firstLineOf(readmeText)
    parts.push(first === undefined ? `${readme} is empty. ` : `${readme} begins with "${first}". `)
  } else if (listing !== undefined) {
    parts.push("I found no README to read. ")
  }
  parts.push("(This answer comes from maka's built-in offline model.)")
  return { kind: "text", text: parts.join("") }
}

/** Splits text into deltas of at most `DELTA_CHARS` characters, cut after spaces where possible. */
export const deltas = (value: string): ReadonlyArray<string> => {
  const pieces: Array<string> = []
  let rest = value
  while (rest.length > DELTA_CHARS) {
    const space = rest.lastIndexOf(" ", DELTA_CHARS)
    const cut = space > 0 ? space + 1 : DELTA_CHARS
    pieces.push(rest.slice(0, cut))
    rest = rest.slice(cut)
  }
  if (rest !== "") pieces.push(rest)
  return pieces
}

const tokens = (characters: number): number => Math.ceil(characters / 4)

/** The SSE response for a request body, event by event: deterministic, `[DONE]` at the end. */
export const respond = (body: string): { readonly status: number; readonly events: ReadonlyArray<string> } => {
  const request = parseRequest(body)
  if (request === undefined) {
    return {
      status: 400,
      events: [JSON.stringify({ error: { message: "malformed chat-completions request", type: "invalid_request_error" } })],
    }
  }
  const digest = createHash("sha256").update(body).digest("hex").slice(0, 16)
  const header = { id: `chatcmpl-offline-${digest}`, object: "chat.completion.chunk", created: 0, model: OFFLINE_MODEL }
  const chunk = (delta: Readonly<Record<string, unknown>>, finishReason: string | null = null) =>
    `data: ${JSON.stringify({ ...header, choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }] })}\n\n`
  const reply = decide(request)
  const events: Array<string> = [chunk({ role: "assistant", content: "" })]
  let outputCharacters: number
  if (reply.kind === "text") {
    for (const piece of deltas(reply.text)) events.push(chunk({ content: piece }))
    events.push(chunk({}, "stop"))
    outputCharacters = reply.text.length
  } else {
    const id = `call_${digest}`
    events.push(chunk({ tool_calls: [{ index: 0, id, type: "function", function: { name: reply.name, arguments: reply.arguments } }] }))
    events.push(chunk({}, "tool_calls"))
    outputCharacters = reply.name.length + reply.arguments.length
  }
  const promptTokens = tokens(body.length)
  const completionTokens = tokens(outputCharacters)
  events.push(
    `data: ${JSON.stringify({ ...header, choices: [], usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens } })}\n\n`,
  )
  events.push("data: [DONE]\n\n")
  return { status: 200, events }
}

/** A running offline model: its provider settings (with the loopback `fetch`) and `close`. */
export interface OfflineModel {
  readonly provider: {
    readonly kind: "openai-compatible"
    readonly baseUrl: string
    readonly model: string
    readonly fetch: (input: string, init: RequestInit) => Promise<Response>
  }
  readonly url: string
  readonly close: () => Promise<void>
}

const readBody = (request: http.IncomingMessage): Promise<string> =>
  new Promise((resolve, reject) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    request.on("error", reject)
  })

export interface StartOptions {
  /** A pause before each SSE event after the first, so the answer streams as a real model's does (default 0). */
  readonly delayMs?: number | undefined
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Writes the events one by one, pausing between them; stops when the client goes away. */
const stream = async (response: http.ServerResponse, events: ReadonlyArray<string>, delayMs: number): Promise<void> => {
  for (const [index, event] of events.entries()) {
    if (index > 0 && delayMs > 0) await sleep(delayMs)
    if (response.destroyed) return
    response.write(event)
  }
  response.end()
}

/** Starts the offline model on 127.0.0.1 with an ephemeral port. */
export const start = async (options: StartOptions = {}): Promise<OfflineModel> => {
  const delayMs = options.delayMs ?? 0
  const server = http.createServer((request, response) => {
    readBody(request).then(
      (body) => {
        if (request.method !== "POST" || request.url !== "/v1/chat/completions") {
          response.writeHead(404, { "content-type": "application/json" })
          response.end(JSON.stringify({ error: { message: "not found", type: "invalid_request_error" } }))
          return
        }
        const reply = respond(body)
        response.writeHead(reply.status, {
          "content-type": reply.status === 200 ? "text/event-stream" : "application/json",
          "cache-control": "no-cache",
        })
        if (reply.status !== 200) {
          response.end(reply.events.join(""))
          return
        }
        return stream(response, reply.events, delayMs)
      },
      () => response.destroy(),
    )
  })
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => resolve())
  })
  const { port } = server.address() as AddressInfo // a TCP listen always has an AddressInfo
  const url = `http://127.0.0.1:${port}`
  return {
    provider: {
      kind: "openai-compatible",
      baseUrl: OFFLINE_BASE_URL,
      model: OFFLINE_MODEL,
      fetch: (input, init) => fetch(input.startsWith(OFFLINE_ORIGIN) ? url + input.slice(OFFLINE_ORIGIN.length) : input, init),
    },
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
