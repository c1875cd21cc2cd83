import * as fs from "node:fs"
import * as path from "node:path"
import { maka } from "../contenders.ts"
import { startFakeServer } from "../fake-server.ts"
import { profiled, temporaryDirectory, topSelfTime } from "../lib.ts"

const directory = temporaryDirectory("maka-reopen-")
const workspace = path.join(directory, "workspace")
fs.mkdirSync(workspace)
const server = await startFakeServer()
const databaseFile = path.join(directory, "maka.sqlite")
const open = () => maka({ database: databaseFile, baseUrl: server.baseUrl, workspace })
let engine = await open()
for (let i = 0; i < 10; i++) await engine.turn("s", "loop-10", `turn ${i}`)
const steady: number[] = []
for (let i = 0; i < 3; i++) {
  const t = await engine.turn("s", "loop-10", `w ${i}`)
  steady.push(t.requestedAt[5]! - t.requestedAt[4]!)
}
console.log("steady", steady)
for (let i = 0; i < 4; i++) {
  const closeStart = performance.now()
  await engine.engine.close()
  const t0 = performance.now()
  engine = await open()
  const t1 = performance.now()
  let t: Awaited<ReturnType<typeof engine.turn>>
  if (i === 3) {
    const profile = await profiled("/tmp/reopen.cpuprofile", async () => { t = await engine.turn("s", "loop-10", `cold ${i}`) })
    console.log(topSelfTime(profile, 25).join("\n"))
  } else t = await engine.turn("s", "loop-10", `cold ${i}`)
  console.log(`close ${(t0 - closeStart).toFixed(1)} create ${(t1 - t0).toFixed(1)} first step ${(t!.requestedAt[0]! - t!.startedAt).toFixed(1)} to req1 ${(t!.requestedAt[1]! - t!.startedAt).toFixed(1)}`)
}
await engine.engine.close()
await server.close()
