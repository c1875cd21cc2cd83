/**
 * The peers of the engine bench (the OpenAI Agents SDK, LangGraph with and without its SQLite
 * checkpointer) in a Node process of their own, driven round-robin from the bench's process.
 *
 * Both use `AsyncLocalStorage`, which on Node 20 turns on the promise hooks of the whole process
 * once it runs: after one loop of the Agents SDK, 200,000 `await`s of a resolved promise took 68 ms
 * in the same process against 11 ms before it (after a LangGraph loop 42 ms; 2026-12-04). In one
 * process with them maka paid that on every promise of its steps, which neither its own code nor
 * the floor asks for (maka with the SDK in its process: 3.05 and 3.30 times the floor's step; without
 * it 2.74 and 2.76, the same hour). Each peer measures its own loops (wall time and its process's CPU
 * time), so the message round trip to this process is not counted in its figures.
 */
import { fork, type ChildProcess } from "node:child_process"
import { fileURLToPath } from "node:url"
import { agentsSdk, langGraph } from "./contenders.ts"
import { median } from "./lib.ts"

/**
 * The peers this process runs: the tool loop through each, and (`agentsSdkAnswer`) one streamed text
 * answer through the Agents SDK.
 */
export type PeerName = "agentsSdk" | "agentsSdkAnswer" | "langGraph" | "langGraphBare"

export interface PeerRun {
  /** Wall time of the loops, in ms, measured in the peers' process. */
  readonly wallMs: number
  /** CPU time (user + system, every thread) of the peers' process over the loops, in ms. */
  readonly cpuMs: number
  /** Model requests the loops made (LangGraph counts its own; the Agents SDK reports none). */
  readonly requests: number
  /** The text deltas the answers delivered (`agentsSdkAnswer` only; 0 otherwise). */
  readonly deltas: number
  /** The median over those deltas of (delivery − the server's send stamp), in ms; absent without any. */
  readonly delayMs?: number
}

export interface Peers {
  /** Runs `loops` loops of `model` through one peer and resolves with what they took. */
  readonly run: (name: PeerName, model: string, loops: number) => Promise<PeerRun>
  readonly close: () => Promise<void>
}

interface Request {
  readonly id: number
  readonly name: PeerName
  readonly model: string
  readonly loops: number
}

type Reply = { readonly id: number } & ({ readonly run: PeerRun } | { readonly error: string })

/** Forks the peers' process (with this process's Node flags) and resolves once it is ready. */
export const startPeers = async (baseUrl: string, langGraphFile: string): Promise<Peers> => {
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), [baseUrl, langGraphFile], {
    execArgv: process.execArgv,
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  })
  const waiting = new Map<number, { readonly resolve: (run: PeerRun) => void; readonly reject: (error: Error) => void }>()
  let exited = false
  child.on("message", (message: Reply | "ready") => {
    if (message === "ready") return
    const pending = waiting.get(message.id)
    waiting.delete(message.id)
    if ("run" in message) pending?.resolve(message.run)
    else pending?.reject(new Error(`the peers' process failed: ${message.error}`))
  })
  child.once("exit", (code) => {
    exited = true
    for (const pending of waiting.values()) pending.reject(new Error(`the peers' process exited (${code})`))
    waiting.clear()
  })
  await new Promise<void>((resolve, reject) => {
    child.once("message", () => resolve())
    child.once("exit", (code) => reject(new Error(`the peers' process exited before it was ready (${code})`)))
  })
  let ids = 0
  return {
    run: (name, model, loops) =>
      new Promise((resolve, reject) => {
        if (exited) return reject(new Error("the peers' process has exited"))
        const id = ++ids
        waiting.set(id, { resolve, reject })
        child.send({ id, name, model, loops } satisfies Request)
      }),
    close: () =>
      new Promise((resolve) => {
        if (exited) return resolve()
        child.once("exit", () => resolve())
        child.disconnect()
      }),
  }
}

/** The peers' process: runs each request's loops in turn and answers with their timing. */
const serve = () => {
  const [baseUrl, langGraphFile] = process.argv.slice(2)
  if (baseUrl === undefined || langGraphFile === undefined) throw new Error("usage: peers.ts <baseUrl> <langGraphFile>")
  const sdk = agentsSdk(baseUrl)
  const checkpointed = langGraph(baseUrl, langGraphFile)
  const bare = langGraph(baseUrl)
  const delaysMs: Array<number> = []
  let deltas = 0
  const loopOf = (name: PeerName, model: string): Promise<number> => {
    switch (name) {
      case "agentsSdk":
        return sdk.loop(model).then(() => 0)
      case "agentsSdkAnswer":
        return sdk.answer(model).then((answer) => {
          deltas += answer.deltas
          delaysMs.push(...answer.delaysMs)
          return 1
        })
      case "langGraph":
        return checkpointed.loop(model)
      case "langGraphBare":
        return bare.loop(model)
    }
  }
  // One request at a time, in arrival order (the bench sends the next only after this answer).
  let queue = Promise.resolve()
  process.on("message", (request: Request) => {
    queue = queue.then(async () => {
      try {
        const cpuBefore = process.cpuUsage()
        const started = performance.now()
        let requests = 0
        deltas = 0
        delaysMs.length = 0
        for (let loop = 0; loop < request.loops; loop++) requests += await loopOf(request.name, request.model)
        const wallMs = performance.now() - started
        const used = process.cpuUsage(cpuBefore)
        const run: PeerRun = { wallMs, cpuMs: (used.user + used.system) / 1000, requests, deltas, ...(delaysMs.length === 0 ? {} : { delayMs: median(delaysMs) }) }
        process.send!({ id: request.id, run } satisfies Reply)
      } catch (error) {
        process.send!({ id: request.id, error: error instanceof Error ? error.message : String(error) } satisfies Reply)
      }
    })
  })
  process.on("disconnect", () => {
    checkpointed.close()
    process.exit(0)
  })
  process.send!("ready")
}

if (process.argv[1] === fileURLToPath(import.meta.url)) serve()
