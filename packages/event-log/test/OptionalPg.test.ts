import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { loadPg } from "../src/internal/open-postgres.ts"
import { childScript, rejection, spawnChild, temporaryDirectory } from "./fixtures/storage.ts"

describe("the optional pg package", () => {
  it("is loaded only for a PostgreSQL URL: SQLite works without it, and a URL names the package to install", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const child = spawnChild(childScript("without-pg.ts"), [file])
    expect(await child.line("sqlite")).toBe("sqlite ok")
    const postgres = await child.line("postgres")
    expect(postgres).toContain('needs the package "pg"')
    expect(postgres).toContain("npm install pg")
    expect((await child.exited).code).toBe(0)
  })

  it("loads pg when it is installed, and names a package that fails to load", async () => {
    const pg = await loadPg()
    expect(typeof pg.Pool).toBe("function")
    const broken = await rejection(loadPg(() => Promise.reject(new Error("native binding missing"))))
    expect(broken.reason._tag).toBe("Database")
    expect(broken.message).toContain('"pg" failed to load: native binding missing')
    const empty = await rejection(loadPg(() => Promise.resolve({ default: {} })))
    expect(empty.message).toContain("no Pool export")
  })
})
