/**
 * The ways `pnpm bench` runs the same streaming tool loop against the fake server:
 * - maka through the Promise facade (`createEngine`, SQLite, `synchronous=FULL` unless told otherwise, or
 *   PostgreSQL), reading `run.events()`;
 * - the OpenAI Agents SDK (chat completions, streaming, the same `noop` tool), which persists nothing;
 * - LangGraph: a graph of a model node (LangChain's `ChatOpenAI`, its tokens streamed with
 *   `streamMode: "messages"`) and a tool node (`ToolNode`, the same `noop`), checkpointed after every
 *   super-step by `SqliteSaver` (`@langchain/langgraph-checkpoint-sqlite`, WAL, `synchronous=FULL`,
 *   `durability: "sync"`), or with no checkpointer at all;
 * - the durable floor: `fetch` + `eventsource-parser` and two `synchronous=FULL` commits per step with
 *   raw better-sqlite3 (before the request is sent: the previous step's settles and the request; before
 *   the tool runs: the step's observations, its completion and the dispatch), which is the least a
 *   durable engine must do.
 */
import { type AIMessage, HumanMessage, SystemMessage } from "@langchain/core/messages"
import { tool as langChainTool } from "@langchain/core/tools"
import { END, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph"
import { ToolNode } from "@langchain/langgraph/prebuilt"
import { SqliteSaver } from "@langchain/langgraph-checkpoint-sqlite"
import { ChatOpenAI } from "@langchain/openai"
import { Agent, OpenAIProvider, Runner, setTracingDisabled, tool } from "@openai/agents"
import Database from "better-sqlite3"
import { Effect, Schema } from "effect"
import { createParser } from "eventsource-parser"
import * as http from "node:http"
import { createEngine, type Facade } from "@maka/engine"
import { Tool, ToolCatalog } from "@maka/tools"
import { z } from "zod"
import { timelineMark } from "./timeline.ts"

export const SYSTEM = "You are a benchmark agent. Call noop until told otherwise."
export const USER = "Call noop until told otherwise."

// --- maka ---------------------------------------------------------------------------------------

const noop = Tool.make({
  name: "noop",
  description: "Does nothing.",
  input: Schema.Struct({ step: Schema.Number }),
  semantics: "parallel",
  execute: () => {
    timelineMark("tool called")
    return Effect.succeed(Tool.text("ok"))
  },
})
export const makaTools = ToolCatalog.make([noop])

export interface MakaTurn {
  /** `performance.now()` at the call of `start`. */
  readonly startedAt: number
  /** `performance.now()` when each main `model_requested` (purpose `main`) was delivered by `run.events()`. */
  readonly requestedAt: ReadonlyArray<number>
  /** Summary requests (purpose `summary`) the run made: automatic compaction's, in the background or not. */
  readonly summaryRequests: number
  /** `context_checkpoint_recorded` events: summaries adopted into the session's context. */
  readonly checkpoints: number
  /** `performance.now()` when the terminal was delivered. */
  readonly endedAt: number
  readonly events: number
}

export interface MakaContender {
  readonly engine: Facade.MakaEngine
  /** `declaredWindow` overrides the contender's for this turn only; `onMainRequest` runs at each main `model_requested`. */
  readonly turn: (sessionId: string, model: string, message?: string, declaredWindow?: number, onMainRequest?: () => void) => Promise<MakaTurn>
}

export const maka = async (options: {
  /** A SQLite file, or a PostgreSQL URL in `databaseUrl`. */
  readonly database?: string | undefined
  readonly databaseUrl?: string | undefined
  readonly baseUrl: string
  readonly workspace: string
  readonly fetch?: ((input: string, init: RequestInit) => Promise<Response>) | undefined
  /** `context.declaredWindow` of every run (tokens); absent, compaction is due only near the read limits. */
  readonly declaredWindow?: number | undefined
  /** The SQLite file's `synchronous` level (default `FULL`, the engine's own default). */
  readonly synchronous?: "FULL" | "NORMAL" | undefined
}): Promise<MakaContender> => {
  const engine = await createEngine(
    options.databaseUrl === undefined
      ? { database: options.database ?? "", synchronous: options.synchronous ?? "FULL" }
      : { databaseUrl: options.databaseUrl },
  )
  const turn = async (
    sessionId: string,
    model: string,
    message = USER,
    declaredWindow = options.declaredWindow,
    onMainRequest?: () => void,
  ): Promise<MakaTurn> => {
    const startedAt = performance.now()
    const run = await engine.start({
      sessionId,
      provider: { kind: "openai-compatible", baseUrl: options.baseUrl, model, ...(options.fetch === undefined ? {} : { fetch: options.fetch }) },
      message,
      systemPrompt: SYSTEM,
      workspace: options.workspace,
      tools: makaTools,
      maxSteps: 64,
      ...(declaredWindow === undefined ? {} : { context: { declaredWindow } }),
    })
    const requestedAt: Array<number> = []
    let summaryRequests = 0
    let checkpoints = 0
    let events = 0
    for await (const stored of run.events()) {
      events++
      const fact = stored.event.fact
      if (fact.kind === "model_requested") {
        if (fact.purpose === "main") {
          requestedAt.push(performance.now())
          onMainRequest?.()
        }
        else summaryRequests++
      } else if (fact.kind === "context_checkpoint_recorded") checkpoints++
    }
    const endedAt = performance.now()
    const result = await run.wait()
    if (result.outcome.kind !== "completed") throw new Error(`maka's turn ended ${JSON.stringify(result.outcome)}`)
    return { startedAt, requestedAt, summaryRequests, checkpoints, endedAt, events }
  }
  return { engine, turn }
}

// --- OpenAI Agents SDK --------------------------------------------------------------------------

export interface SdkContender {
  readonly loop: (model: string) => Promise<void>
  /** One streamed text answer of the fake server's `text-…` models: when each delta reached the caller. */
  readonly answer: (model: string) => Promise<StampedDeltas>
}

/** The deltas an answer delivered, and per delta its delay from the server's send stamp, in ms. */
export interface StampedDeltas {
  readonly deltas: number
  readonly delaysMs: ReadonlyArray<number>
}

/**
 * Adds the delays of the stamped deltas in `text` (the fake server's `index@hrtime` tokens) as
 * delivered `now` (`process.hrtime.bigint()`: CLOCK_MONOTONIC, shared by every process of the
 * machine) to `into`, and returns how many it found.
 */
export const stampedDelays = (text: string, now: bigint, into: Array<number>): number => {
  let count = 0
  for (const token of text.split(" ")) {
    const at = token.indexOf("@")
    if (at < 0) continue
    into.push(Number(now - BigInt(token.slice(at + 1))) / 1e6)
    count++
  }
  return count
}

export const agentsSdk = (baseUrl: string): SdkContender => {
  setTracingDisabled(true)
  const runner = new Runner({
    modelProvider: new OpenAIProvider({ baseURL: baseUrl, apiKey: "sk-bench", useResponses: false }),
    tracingDisabled: true,
  })
  const noopTool = tool({
    name: "noop",
    description: "Does nothing.",
    parameters: z.object({ step: z.number() }),
    execute: async () => "ok",
  })
  // One agent per model and kind: the tool loop's (the `noop` tool), or the text answer's (no tools).
  const agents = new Map<string, Agent>()
  const agentFor = (model: string, answer = false): Agent => {
    const key = `${answer ? "answer" : "loop"}:${model}`
    const known = agents.get(key)
    if (known !== undefined) return known
    const agent = answer
      ? new Agent({ name: "bench", instructions: "Answer at length.", model })
      : new Agent({ name: "bench", instructions: SYSTEM, model, tools: [noopTool] })
    agents.set(key, agent)
    return agent
  }
  return {
    loop: async (model) => {
      const result = await runner.run(agentFor(model), USER, { stream: true, maxTurns: 64 })
      for await (const _event of result) {
        // Read every streamed event, as a caller rendering the run would.
      }
      await result.completed
      if (result.finalOutput !== "done") throw new Error(`the Agents SDK ended with ${JSON.stringify(result.finalOutput)}`)
    },
    answer: async (model) => {
      const result = await runner.run(agentFor(model, true), "Answer at length.", { stream: true, maxTurns: 1 })
      const delaysMs: Array<number> = []
      let deltas = 0
      for await (const event of result) {
        // The text deltas as the SDK streams them to a caller rendering the answer.
        if (event.type === "raw_model_stream_event" && event.data.type === "output_text_delta") {
          deltas += stampedDelays(event.data.delta, process.hrtime.bigint(), delaysMs)
        }
      }
      await result.completed
      return { deltas, delaysMs }
    },
  }
}

// --- LangGraph ----------------------------------------------------------------------------------

export interface LangGraphContender {
  /** One tool loop in a new thread; returns the model requests it made. */
  readonly loop: (model: string) => Promise<number>
  readonly close: () => void
}

/**
 * The tool loop as a LangGraph graph: `agent` (the chat model with `noop` bound) and `tools`
 * (`ToolNode`), `agent → tools` while the answer calls a tool, `tools → agent` always. With a file,
 * `SqliteSaver` checkpoints every super-step before the next starts (`durability: "sync"`) on a
 * better-sqlite3 connection set to WAL and `synchronous=FULL` (LangGraph leaves SQLite's default,
 * `NORMAL` in WAL mode; FULL matches maka's durability); without one the graph keeps nothing. The run
 * is read with `streamMode: "messages"`, which makes the model node stream its tokens, as a caller
 * rendering the run would. A step is one model request (a super-step of `agent` and the `tools` one
 * after it), as for maka.
 */
export const langGraph = (baseUrl: string, file?: string): LangGraphContender => {
  const database = file === undefined ? undefined : new Database(file)
  database?.pragma("journal_mode = WAL")
  database?.pragma("synchronous = FULL")
  const noopTool = langChainTool(async () => "ok", { name: "noop", description: "Does nothing.", schema: z.object({ step: z.number() }) })
  const models = new Map<string, ReturnType<ChatOpenAI["bindTools"]>>()
  let requests = 0
  const modelFor = (model: string) => {
    const known = models.get(model)
    if (known !== undefined) return known
    const chat = new ChatOpenAI({ model, apiKey: "sk-bench", configuration: { baseURL: baseUrl } })
    // LangChain's token estimate downloads a tokenizer on first use; the bench never reaches outside
    // the machine (and the streamed path does not need the estimate), so it counts locally.
    chat.getNumTokens = async (content) => Math.ceil(JSON.stringify(content).length / 4)
    const bound = chat.bindTools([noopTool])
    models.set(model, bound)
    return bound
  }
  const graph = new StateGraph(MessagesAnnotation)
    .addNode("agent", async (state, config) => {
      requests++
      const model = (config.configurable as { model?: string } | undefined)?.model ?? ""
      return { messages: [await modelFor(model).invoke(state.messages, config)] }
    })
    .addNode("tools", new ToolNode([noopTool]))
    .addEdge(START, "agent")
    .addConditionalEdges("agent", (state) => ((state.messages.at(-1) as AIMessage).tool_calls?.length ? "tools" : END), ["tools", END])
    .addEdge("tools", "agent")
    .compile(database === undefined ? {} : { checkpointer: new SqliteSaver(database) })
  let threads = 0
  return {
    loop: async (model) => {
      const before = requests
      const stream = await graph.stream(
        { messages: [new SystemMessage(SYSTEM), new HumanMessage(USER)] },
        { configurable: { thread_id: `thread-${++threads}`, model }, streamMode: "messages", durability: "sync", recursionLimit: 2 * 64 + 1 },
      )
      let last = ""
      for await (const [message] of stream) {
        // Read every streamed token, as a caller rendering the run would.
        if (typeof message.content === "string" && message.content !== "") last = message.content
      }
      if (last !== "done") throw new Error(`LangGraph's loop ended with ${JSON.stringify(last)}`)
      return requests - before
    },
    close: () => database?.close(),
  }
}

// --- The durable floor --------------------------------------------------------------------------

interface Call {
  id: string
  name: string
  arguments: string
}

export interface FloorStep {
  /** `performance.now()` when the step's first commit began. */
  readonly startedAt: number
}

/** What a raw exchange reads from a streamed chat-completions answer: its text and its tool calls. */
const answerReader = (onData?: (data: string) => void) => {
  let text = ""
  const calls: Array<Call> = []
  const parser = createParser({
    onEvent: (event) => {
      if (event.data === "[DONE]") return
      onData?.(event.data)
      const chunk = JSON.parse(event.data) as {
        choices?: Array<{ delta?: { content?: string | null; tool_calls?: Array<{ index: number; id?: string; function?: { name?: string; arguments?: string } }> } }>
      }
      const delta = chunk.choices?.[0]?.delta
      if (delta === undefined) return
      if (typeof delta.content === "string") text += delta.content
      for (const fragment of delta.tool_calls ?? []) {
        const call = (calls[fragment.index] ??= { id: "", name: "", arguments: "" })
        if (fragment.id !== undefined) call.id = fragment.id
        if (fragment.function?.name !== undefined) call.name += fragment.function.name
        if (fragment.function?.arguments !== undefined) call.arguments += fragment.function.arguments
      }
    },
  })
  return { feed: (text: string) => parser.feed(text), answer: () => ({ text, calls }) }
}

/** One streamed chat-completions exchange read with bare `fetch` + `eventsource-parser`. */
export const rawExchange = async (
  url: string,
  body: string | Uint8Array<ArrayBuffer>,
  onData?: (data: string) => void,
): Promise<{ readonly text: string; readonly calls: ReadonlyArray<Call> }> => {
  const response = await fetch(url, { method: "POST", headers: { "content-type": "application/json", authorization: "Bearer sk-bench" }, body })
  if (!response.ok || response.body === null) throw new Error(`the server answered ${response.status}`)
  const read = answerReader(onData)
  const reader = response.body.getReader()
  const decoder = new TextDecoder()
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    read.feed(decoder.decode(value, { stream: true }))
  }
  return read.answer()
}

/**
 * The same exchange over `node:http` with a keep-alive agent (the transport maka's model client is
 * built on) instead of `fetch`: a raw loop whose requests grow to hundreds of kilobytes spends more
 * in `fetch` than in the transport maka uses, which a comparison with maka would count in maka's favour.
 */
export const rawHttpExchange = (agent: http.Agent) => (
  url: string,
  body: string | Uint8Array<ArrayBuffer>,
  onData?: (data: string) => void,
): Promise<{ readonly text: string; readonly calls: ReadonlyArray<Call> }> =>
  new Promise((resolve, reject) => {
    const request = http.request(
      url,
      {
        method: "POST",
        agent,
        headers: { "content-type": "application/json", authorization: "Bearer sk-bench", "content-length": Buffer.byteLength(body) },
      },
      (response) => {
        if (response.statusCode !== 200) {
          response.resume()
          reject(new Error(`the server answered ${response.statusCode}`))
          return
        }
        const read = answerReader(onData)
        response.setEncoding("utf8")
        response.on("data", (text: string) => read.feed(text))
        response.on("end", () => resolve(read.answer()))
        response.on("error", reject)
      },
    )
    request.on("error", reject)
    request.end(body)
  })

export interface Floor {
  /** The loop with its own growing message list; returns each step's start. */
  readonly loop: (model: string) => Promise<ReadonlyArray<FloorStep>>
  /**
   * The given request bodies, in order, each with its two commits (a replay of another client's loop).
   * Bodies given as bytes are sent as they are: a client holding its request's bytes ready (as maka's
   * cached message fragments are) encodes nothing per step.
   */
  readonly replay: (bodies: ReadonlyArray<string | Uint8Array<ArrayBuffer>>) => Promise<ReadonlyArray<FloorStep>>
  /**
   * One streamed answer with the two commits a durable engine cannot do without: the request before
   * it is sent, then what came back (its text in one row, the completion) once the stream ended.
   * `onData` sees each event's data, as the bare read it is compared with does.
   */
  readonly answer: (model: string, onData?: (data: string) => void) => Promise<void>
  readonly close: () => void
}

/** Commits one transaction of rows: `(session, [kind, json]…)`. */
type FloorWrite = (session: string, rows: ReadonlyArray<readonly [kind: string, json: string]>) => void | Promise<void>

/** The durable floor over raw better-sqlite3: each write is `BEGIN IMMEDIATE`, one prepared insert per row, `COMMIT`. */
export const floor = (file: string, baseUrl: string, options: { readonly transport?: Transport } = {}): Floor => {
  const database = new Database(file)
  database.pragma("journal_mode = WAL")
  database.pragma("synchronous = FULL")
  database.exec(
    "CREATE TABLE IF NOT EXISTS event_log (sequence INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE, session_id TEXT NOT NULL, kind TEXT NOT NULL, event_json TEXT NOT NULL)",
  )
  const insert = database.prepare("INSERT INTO event_log (event_id, session_id, kind, event_json) VALUES (?, ?, ?, ?)")
  const begin = database.prepare("BEGIN IMMEDIATE")
  const commit = database.prepare("COMMIT")
  let ids = 0
  const write: FloorWrite = (session, rows) => {
    begin.run()
    for (const [kind, json] of rows) insert.run(`e${++ids}`, session, kind, json)
    commit.run()
  }
  const { exchange, closeTransport } = transportOf(options.transport ?? "fetch")
  return floorOver(write, baseUrl, exchange, () => {
    closeTransport()
    database.close()
  })
}

/** The least a pg client can do per durable write: one statement, one round trip, one commit. */
export interface PgQueryable {
  readonly query: (text: string, values?: ReadonlyArray<unknown>) => Promise<unknown>
}

/**
 * The durable floor over a raw `pg` client (the driver the PostgreSQL event log uses), in a table of
 * the client's `search_path`: each write is a single autocommitted `INSERT … SELECT FROM unnest(…)` of
 * its rows, one round trip and one commit, which no engine doing two durable writes per step beats.
 */
export const pgFloor = async (client: PgQueryable, baseUrl: string): Promise<Floor> => {
  await client.query(
    "CREATE TABLE IF NOT EXISTS event_log (sequence BIGSERIAL PRIMARY KEY, event_id TEXT NOT NULL UNIQUE, session_id TEXT NOT NULL, kind TEXT NOT NULL, event_json TEXT NOT NULL)",
  )
  let ids = 0
  const write: FloorWrite = async (session, rows) => {
    await client.query(
      "INSERT INTO event_log (event_id, session_id, kind, event_json) SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])",
      [rows.map(() => `e${++ids}`), rows.map(() => session), rows.map(([kind]) => kind), rows.map(([, json]) => json)],
    )
  }
  return floorOver(write, baseUrl, rawExchange, () => undefined)
}

/** How a raw loop sends its requests: `fetch` (the bare read the issue names), or `node:http` with a keep-alive agent. */
export type Transport = "fetch" | "http"

const transportOf = (transport: Transport): { readonly exchange: typeof rawExchange; readonly closeTransport: () => void } => {
  if (transport === "fetch") return { exchange: rawExchange, closeTransport: () => undefined }
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  return { exchange: rawHttpExchange(agent), closeTransport: () => agent.destroy() }
}

const floorOver = (write: FloorWrite, baseUrl: string, exchange: typeof rawExchange, close: () => void): Floor => {
  let sessions = 0
  const url = `${baseUrl}/chat/completions`
  const tools = [
    {
      type: "function",
      function: { name: "noop", description: "Does nothing.", parameters: { type: "object", properties: { step: { type: "number" } }, required: ["step"] } },
    },
  ]

  /** One durable step: commit the request (with the previous settles), stream, commit what came back. */
  const step = async (session: string, index: number, body: string | Uint8Array<ArrayBuffer>, settles: Array<readonly [string, string]>) => {
    await write(session, [...settles.splice(0), ["model_requested", JSON.stringify({ step: index, bytes: body.length })]])
    const observations: Array<readonly [string, string]> = []
    const answer = await exchange(url, body, (data) => observations.push(["model_observed", data]))
    const dispatches = answer.calls.map((call) => ["tool_dispatched", JSON.stringify(call)] as const)
    const last: ReadonlyArray<readonly [string, string]> =
      answer.calls.length === 0 ? [["invocation_completed", JSON.stringify({ text: answer.text })]] : dispatches.slice(0, 1)
    await write(session, [...observations, ["model_completed", JSON.stringify({ text: answer.text, calls: answer.calls })], ...last])
    for (const dispatch of dispatches.slice(1)) settles.push(dispatch)
    for (const call of answer.calls) settles.push(["tool_settled", JSON.stringify({ id: call.id, output: "ok" })])
    return answer
  }

  return {
    loop: async (model) => {
      const session = `floor-${++sessions}`
      const messages: Array<Record<string, unknown>> = [
        { role: "system", content: SYSTEM },
        { role: "user", content: USER },
      ]
      const settles: Array<readonly [string, string]> = []
      const steps: Array<FloorStep> = []
      for (let index = 0; ; index++) {
        steps.push({ startedAt: performance.now() })
        const body = JSON.stringify({ model, messages, tools, stream: true, stream_options: { include_usage: true } })
        const answer = await step(session, index, body, settles)
        if (answer.calls.length === 0) {
          if (answer.text !== "done") throw new Error(`the floor's loop ended with ${answer.text}`)
          return steps
        }
        messages.push({
          role: "assistant",
          content: null,
          tool_calls: answer.calls.map((call) => ({ id: call.id, type: "function", function: { name: call.name, arguments: call.arguments } })),
        })
        for (const call of answer.calls) messages.push({ role: "tool", tool_call_id: call.id, content: "ok" })
      }
    },
    answer: async (model, onData) => {
      const session = `answer-${++sessions}`
      const body = JSON.stringify({ model, messages: [{ role: "user", content: "go" }], stream: true })
      await write(session, [["model_requested", JSON.stringify({ bytes: body.length })]])
      const answer = await exchange(url, body, onData)
      await write(session, [
        ["model_observed", JSON.stringify({ text: answer.text })],
        ["model_completed", JSON.stringify({ text: answer.text })],
      ])
    },
    replay: async (bodies) => {
      const session = `replay-${++sessions}`
      const settles: Array<readonly [string, string]> = []
      const steps: Array<FloorStep> = []
      for (const [index, body] of bodies.entries()) {
        steps.push({ startedAt: performance.now() })
        await step(session, index, body, settles)
      }
      if (settles.length > 0) await write(session, settles)
      return steps
    },
    close,
  }
}
