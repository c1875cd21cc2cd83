import Database from "better-sqlite3"
import * as fs from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { formatSegments, type Mark, recordTimeline, segments, timelineMark } from "../bench/timeline.ts"

describe("segments", () => {
  const marks: Array<Mark> = [
    ["BEGIN IMMEDIATE", 0],
    ["COMMIT starts", 1],
    ["COMMIT returns", 4],
    ["request written", 5],
    ["BEGIN IMMEDIATE", 10],
    ["COMMIT starts", 12],
    ["COMMIT returns", 13],
    ["request written", 15],
  ]

  it("times every passage between consecutive marks, per step, most time per step first", () => {
    const found = segments(marks, 2)
    expect(found.map((segment) => `${segment.from} → ${segment.to}`)).toEqual([
      "request written → BEGIN IMMEDIATE",
      "COMMIT starts → COMMIT returns",
      "BEGIN IMMEDIATE → COMMIT starts",
      "COMMIT returns → request written",
    ])
    const flush = found.find((segment) => segment.from === "COMMIT starts")!
    expect(flush).toEqual({ from: "COMMIT starts", to: "COMMIT returns", perStep: 1, medianMs: 2, p90Ms: 3, msPerStep: 2 })
    const begin = found.find((segment) => segment.from === "BEGIN IMMEDIATE")!
    expect(begin.medianMs).toBe(1.5)
    expect(begin.p90Ms).toBe(2)
    expect(begin.msPerStep).toBe(1.5)
    const gap = found.find((segment) => segment.from === "request written")!
    expect(gap.perStep).toBe(0.5)
    expect(gap.msPerStep).toBe(2.5)
  })

  it("adds up to the marks' whole span per step", () => {
    const total = segments(marks, 2).reduce((sum, segment) => sum + segment.msPerStep, 0)
    expect(total).toBe(15 / 2)
  })

  it("takes the median and the 90th percentile of a segment's passages", () => {
    const many: Array<Mark> = []
    for (let index = 0; index < 10; index++) many.push(["a", index * 100], ["b", index * 100 + index + 1])
    const [ab] = segments(many, 10).filter((segment) => segment.from === "a")
    expect(ab!.medianMs).toBe(5.5)
    expect(ab!.p90Ms).toBe(10)
  })

  it("refuses marks out of time order and a step count that is not a positive integer", () => {
    expect(() => segments([["a", 2], ["b", 1]], 1)).toThrow(/not in time order/)
    expect(() => segments(marks, 0)).toThrow(/positive integer/)
    expect(() => segments(marks, 1.5)).toThrow(/positive integer/)
  })

  it("formats one line per segment under a header", () => {
    const lines = formatSegments(segments(marks, 2))
    expect(lines).toHaveLength(5)
    expect(lines[0]).toMatch(/^segment\s+per step\s+median ms\s+p90 ms\s+ms per step$/)
    expect(lines[1]).toMatch(/^request written → BEGIN IMMEDIATE\s+0\.50\s+5\.000\s+5\.000\s+2\.500$/)
  })
})

describe("recordTimeline", () => {
  const directories: Array<string> = []
  afterEach(() => {
    for (const directory of directories.splice(0)) fs.rmSync(directory, { recursive: true, force: true })
  })
  const database = () => {
    const directory = fs.mkdtempSync(path.join(os.tmpdir(), "maka-timeline-"))
    directories.push(directory)
    const connection = new Database(path.join(directory, "t.sqlite"))
    connection.pragma("journal_mode = WAL")
    connection.exec("CREATE TABLE t (value TEXT)")
    return connection
  }

  it("marks each transaction's BEGIN, its COMMIT's start and return, and the bench's own marks", async () => {
    const connection = database()
    const insert = connection.prepare("INSERT INTO t VALUES (?)")
    const marks = await recordTimeline(async () => {
      connection.prepare("BEGIN IMMEDIATE").run()
      insert.run("a")
      connection.prepare("COMMIT").run()
      timelineMark("tool called")
      // The engine's driver spells them in lower case.
      connection.prepare("begin").run()
      connection.prepare("SELECT count(*) FROM t").get()
      connection.prepare("commit").run()
    })
    connection.close()
    expect(marks.map(([label]) => label)).toEqual([
      "BEGIN IMMEDIATE",
      "COMMIT starts",
      "COMMIT returns",
      "tool called",
      "BEGIN (read)",
      "COMMIT starts",
      "COMMIT returns",
    ])
    for (let index = 1; index < marks.length; index++) expect(marks[index]![1]).toBeGreaterThanOrEqual(marks[index - 1]![1])
  })

  it("marks an HTTP request once written and its answer's headers", async () => {
    const server = http.createServer((request, response) => {
      request.resume()
      request.on("end", () => response.end("ok"))
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    const { port } = server.address() as AddressInfo
    try {
      const marks = await recordTimeline(
        () =>
          new Promise<void>((resolve, reject) => {
            const request = http.request({ host: "127.0.0.1", port, method: "POST", agent: false }, (response) => {
              response.resume()
              response.on("end", resolve)
            })
            request.on("error", reject)
            request.end("body")
          }),
      )
      expect(marks.map(([label]) => label)).toEqual(["request written", "response headers"])
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })

  it("marks nothing outside a recording, and restores the statements it wrapped", async () => {
    const connection = database()
    const run = Object.getPrototypeOf(connection.prepare("SELECT 1")).run
    timelineMark("before")
    const marks = await recordTimeline(async () => {
      timelineMark("inside")
    })
    timelineMark("after")
    connection.prepare("BEGIN IMMEDIATE").run()
    connection.prepare("COMMIT").run()
    expect(marks.map(([label]) => label)).toEqual(["inside"])
    expect(Object.getPrototypeOf(connection.prepare("SELECT 1")).run).toBe(run)
    connection.close()
  })

  it("restores the statements when the body fails, and refuses a recording inside another", async () => {
    const connection = database()
    const run = Object.getPrototypeOf(connection.prepare("SELECT 1")).run
    await expect(recordTimeline(() => Promise.reject(new Error("body failed")))).rejects.toThrow("body failed")
    expect(Object.getPrototypeOf(connection.prepare("SELECT 1")).run).toBe(run)
    await expect(recordTimeline(() => recordTimeline(async () => undefined).then(() => undefined))).rejects.toThrow(
      /already being recorded/,
    )
    expect(Object.getPrototypeOf(connection.prepare("SELECT 1")).run).toBe(run)
    connection.close()
  })
})
