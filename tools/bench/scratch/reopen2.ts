import * as fs from "node:fs"
import * as path from "node:path"
import { createEngine } from "@maka/engine"
import { makaTools, SYSTEM } from "../contenders.ts"
import { startFakeServer } from "../fake-server.ts"
import { temporaryDirectory } from "../lib.ts"

const directory = temporaryDirectory("maka-reopen-")
const workspace = path.join(directory, "workspace")
fs.mkdirSync(workspace)
const server = await startFakeServer()
const databaseFile = path.join(directory, "maka.sqlite")
const turn = async (engine: Awaited<ReturnType<typeof createEngine>>, label: string, verbose: boolean) => {
  const t0 = performance.now()
  const run = await engine.start({ sessionId: "s", provider: { kind: "openai-compatible", baseUrl: server.baseUrl, model: "loop-10" }, message: label, systemPrompt: SYSTEM, workspace, tools: makaTools, maxSteps: 64 })
  const t1 = performance.now()
  const marks: string[] = [`start() ${(t1 - t0).toFixed(1)}`]
  let n = 0
  for await (const stored of run.events()) {
    if (n++ < 6 && verbose) marks.push(`${stored.event.fact.kind} ${(performance.now() - t0).toFixed(1)}`)
  }
  await run.wait()
  if (verbose) console.log(label, marks.join(" | "), "total", (performance.now() - t0).toFixed(1))
}
let engine = await createEngine({ database: databaseFile, synchronous: "FULL" })
for (let i = 0; i < 10; i++) await turn(engine, `t${i}`, i >= 8)
for (let i = 0; i < 3; i++) {
  await engine.close()
  engine = await createEngine({ database: databaseFile, synchronous: "FULL" })
  await turn(engine, `cold${i}`, true)
  await turn(engine, `warm${i}`, true)
}
await engine.close()
await server.close()
