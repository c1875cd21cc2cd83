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
 * Run directly (`node --import tsx fake-server.ts`), it prints `{"port":N}` once listening.
 */
import { spawn, type ChildProcess } from "node:child_process"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"

const header = (model: string) => ({ id: "chatcmpl-bench", object: "chat.completion.chunk", created: 1_767_225_600, model })

const chunk = (model: string, delta: Readonly<Record<string, unknown>>, finishReason: string | null = null): string =>
  `data: ${JSON.stringify({ ...header(model), choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }] })}\n\n`

const usage = (model: string): string =>
  `data: ${JSON.stringify({ ...header(model), choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } })}\n\n`

const DONE = "data: [DONE]\n\n"

const toolCalls = (model: string, ids: ReadonlyArray<{ readonly id: string; readonly step: number }>): Array<string> => [
  chunk(model, { role: "assistant", content: "" }),
  ...ids.map((call, index) =>
    chunk(model, { tool_calls: [{ index, id: call.id, type: "function", function: { name: "noop", arguments: `{"step":${call.step}}` } }] }),
  ),
  chunk(model, {}, "tool_calls"),
  usage(model),
  DONE,
]

const textAnswer = (model: string, pieces: ReadonlyArray<string>): Array<string> => [
  chunk(model, { role: "assistant", content: "" }),
  ...pieces.map((piece) => chunk(model, { content: piece })),
  chunk(model, {}, "stop"),
  usage(model),
  DONE,
]

/** Counts the user messages, and the tool results after the last one, without parsing the body. */
const turnPosition = (body: string): { readonly users: number; readonly toolResults: number } => {
  let users = 0
  let toolResults = 0
  for (const match of body.matchAll(/"role"\s*:\s*"(user|tool)"/g)) {
    if (match[1] === "user") {
      users++
      toolResults = 0
    } else toolResults++
  }
  return { users, toolResults }
}

const respond = (body: string, response: http.ServerResponse): void => {
  const model = /"model"\s*:\s*"([^"]+)"/.exec(body)?.[1] ?? ""
  const position = turnPosition(body)
  response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
  const loop = /^loop-(\d+)$/.exec(model)
  const build = /^build-(\d+)$/.exec(model)
  const text = /^text-(\d+)(?:-paced-(\d+))?$/.exec(model)
  if (loop !== null) {
    const steps = Number(loop[1])
    const chunks =
      position.toolResults < steps - 1
        ? toolCalls(model, [{ id: `call_${position.users}_${position.toolResults}`, step: position.toolResults }])
        : textAnswer(model, ["done"])
    response.end(chunks.join(""))
    return
  }
  if (build !== null) {
    const calls = Number(build[1])
    const chunks =
      position.toolResults === 0
        ? toolCalls(model, Array.from({ length: calls }, (_, index) => ({ id: `call_${position.users}_${index}`, step: index })))
        : textAnswer(model, ["done"])
    response.end(chunks.join(""))
    return
  }
  if (text !== null) {
    const deltas = Number(text[1])
    const paceMs = text[2] === undefined ? 0 : Number(text[2])
    const stamp = (index: number) => chunk(model, { content: `${index}@${process.hrtime.bigint()} ` })
    const tail = [chunk(model, {}, "stop"), usage(model), DONE].join("")
    response.write(chunk(model, { role: "assistant", content: "" }))
    if (paceMs === 0) {
      for (let index = 0; index < deltas; index++) response.write(stamp(index))
      response.end(tail)
      return
    }
    let index = 0
    const next = (): void => {
      if (response.destroyed) return
      if (index === deltas) {
        response.end(tail)
        return
      }
      response.write(stamp(index++))
      setTimeout(next, paceMs)
    }
    setTimeout(next, paceMs)
    return
  }
  response.end(textAnswer(model, [`unknown scenario ${model}`]).join(""))
}

const serve = (): void => {
  const server = http.createServer((request, response) => {
    const parts: Array<Buffer> = []
    request.on("data", (part: Buffer) => parts.push(part))
    request.on("end", () => respond(Buffer.concat(parts).toString("utf8"), response))
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
    close: () =>
      new Promise((resolve) => {
        child.once("exit", () => resolve())
        child.stdin!.end()
      }),
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) serve()
