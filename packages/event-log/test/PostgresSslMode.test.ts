/**
 * `sslmode` in a PostgreSQL URL (docs/log-format.md §3.1): a value pg does not implement is refused
 * at open before anything connects, without a secret of the URL in the message; the modes pg 8 treats
 * as `verify-full` reach it as `verify-full`, so its multi-line warning is never printed and the
 * certificate is still checked. Against local fake servers (one that records what the client asks
 * for, one that answers TLS with a self-signed certificate) and a child process whose stderr must stay
 * empty; the last case uses the real server of MAKA_TEST_DATABASE_URL when it is set.
 */
import * as net from "node:net"
import * as tls from "node:tls"
import { pathToFileURL } from "node:url"
import { afterEach, describe, expect, it } from "vitest"
import type { Database } from "../src/internal/database.ts"
import type * as EventLogError from "../src/EventLogError.ts"
import { makePool, openPostgres, pgConnectionString, SSL_MODES, type PgModule, type PgPoolOptions } from "../src/internal/open-postgres.ts"
import { expectReason, spawnChild } from "./fixtures/storage.ts"

// A self-signed certificate for localhost and 127.0.0.1 (P-256, valid until 2126): no CA trusts it.
const KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgAhrYuXpNVcZGUoWS
7MDClMvetsO85ESNoGeZQnmFlvOhRANCAARnU/SmjhZ3zOuffbBVESi5jd9pmULx
TKZxBlrQ1W4Ki5bziRV4IRkUkl9GmSN7Za4mle6qcEOSANYLLoNjUbxW
-----END PRIVATE KEY-----
`
const CERTIFICATE = `-----BEGIN CERTIFICATE-----
MIIBmzCCAUGgAwIBAgIUTwcjth76V4uzkbishJgOsooWrQgwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTIwNjAyNTM1MloYDzIxMjYxMTEy
MDI1MzUyWjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAARnU/SmjhZ3zOuffbBVESi5jd9pmULxTKZxBlrQ1W4Ki5bziRV4IRkU
kl9GmSN7Za4mle6qcEOSANYLLoNjUbxWo28wbTAdBgNVHQ4EFgQUOLU/9VxULPdM
h8F+zW9njPDtu6MwHwYDVR0jBBgwFoAUOLU/9VxULPdMh8F+zW9njPDtu6MwDwYD
VR0TAQH/BAUwAwEB/zAaBgNVHREEEzARgglsb2NhbGhvc3SHBH8AAAEwCgYIKoZI
zj0EAwIDSAAwRQIgaDPWH6Hc4lHH78w2crYjAal1B/vdNWf48OsZc1qZ45ACIQDG
facRBDpprV02l2+uUiPxebdqyRuNmSyAv4vc/TB7Xw==
-----END CERTIFICATE-----
`

/** The first 8 bytes of a PostgreSQL SSLRequest: length 8, code 80877103. */
const isSslRequest = (chunk: Buffer): boolean => chunk.length >= 8 && chunk.readInt32BE(0) === 8 && chunk.readInt32BE(4) === 80_877_103

interface FakeServer {
  readonly port: number
  /** Per connection: `plain` (a startup message without TLS), `ssl-request`, then `tls` once a handshake completed. */
  readonly seen: Array<string>
}

const servers: Array<net.Server> = []
afterEach(async () => {
  for (const server of servers.splice(0)) await new Promise((resolve) => server.close(resolve))
})

/**
 * A server on 127.0.0.1 that records whether each client asks for TLS, completes the handshake with
 * the self-signed certificate when it does, and then hangs up (it is no PostgreSQL).
 */
const fakeServer = async (): Promise<FakeServer> => {
  const seen: Array<string> = []
  const server = net.createServer((socket) => {
    socket.on("error", () => undefined)
    socket.once("data", (chunk) => {
      if (!isSslRequest(chunk)) {
        seen.push("plain")
        socket.destroy()
        return
      }
      seen.push("ssl-request")
      socket.write("S")
      const secure = new tls.TLSSocket(socket, { isServer: true, key: KEY, cert: CERTIFICATE })
      secure.on("error", () => undefined)
      secure.on("secure", () => {
        seen.push("tls")
        secure.destroy()
      })
    })
  })
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const address = server.address()
  if (address === null || typeof address === "string") throw new Error("the fake server has no port")
  return { port: address.port, seen }
}

/** A URL whose password and `?password=` are secrets a message must not show. */
const secretUrl = (port: number, query: string) => `postgres://maka:hunter2@127.0.0.1:${port}/agents?password=hunter3&${query}`

/** A schema of its own for each open, so the server's `public` schema is never touched. */
let schemas = 0
const attempt = (url: string): Promise<Database> =>
  openPostgres({ url }, { connectTimeout: 5_000, schema: `sslmode_${process.pid}_${Date.now().toString(36)}_${++schemas}` })

describe("sslmode values pg does not implement", () => {
  it.each([
    ["a misspelling", "sslmode=requir"],
    ["libpq's allow, which pg reads as verify-full", "sslmode=allow"],
    ["an empty value, which pg reads as no TLS", "sslmode="],
    ["another case", "sslmode=VERIFY-FULL"],
    ["a trailing space", "sslmode=require%20"],
    ["a second, unknown sslmode", "sslmode=verify-full&sslmode=bogus"],
  ])("are refused at open, before anything connects, without a secret in the message: %s", async (_, query) => {
    const server = await fakeServer()
    const error = await expectReason(attempt(secretUrl(server.port, query)), "UnsupportedDatabase", "sslmode")
    expect(error.message).toContain("is not one pg implements; use one of")
    expect(error.message).not.toContain("hunter2")
    expect(error.message).not.toContain("hunter3")
    expect(server.seen).toEqual([])
  })

  it("are the libpq reading's with uselibpqcompat=true: pg's own no-verify is refused there", async () => {
    const server = await fakeServer()
    const error = await expectReason(attempt(secretUrl(server.port, "uselibpqcompat=true&sslmode=no-verify")), "UnsupportedDatabase")
    expect(error.message).toContain(`with uselibpqcompat=true; use one of ${SSL_MODES.libpq.join(", ")}`)
    expect(error.message).not.toContain("hunter2")
    expect(server.seen).toEqual([])
  })

  it("refuses a uselibpqcompat that is neither true nor false, which pg would ignore", async () => {
    const server = await fakeServer()
    const error = await expectReason(attempt(secretUrl(server.port, "uselibpqcompat=1&sslmode=require")), "UnsupportedDatabase", "uselibpqcompat must be true or false")
    expect(error.message).not.toContain("hunter2")
    expect(server.seen).toEqual([])
  })
})

describe("a schema named in the URL, which pg passes by unread", () => {
  it.each(["schema=agents", "currentSchema=agents", "search_path=agents", "sslmode=disable&schema=agents"])(
    "is refused at open, before anything connects, naming what to write instead: %s",
    async (query) => {
      const server = await fakeServer()
      const error = await expectReason(attempt(secretUrl(server.port, query)), "UnsupportedDatabase", "names no schema PostgreSQL reads")
      expect(error.message).toContain("use options=-c search_path=NAME")
      expect(error.message).not.toContain("hunter2")
      expect(server.seen).toEqual([])
    },
  )

  it("is not what options=-c search_path=NAME is: that one is passed on", () => {
    const url = "postgres://db.example/agents?options=-c%20search_path%3Dagents"
    expect(pgConnectionString(url)).toBe(url)
  })
})

describe("text that is not a PostgreSQL URL", () => {
  it.each(["not a url", "localhost:5432/agents", "mysql://u:hunter2@db.example/agents", "postgres//db.example/agents", "//db.example:5432/agents", ""])(
    "is refused at open, before any look-up or connection: %j",
    (url) => {
      const refused = (() => {
        try {
          pgConnectionString(url)
        } catch (error) {
          return error as EventLogError.EventLogError
        }
        return undefined
      })()
      expect(refused?.reason._tag).toBe("UnsupportedDatabase")
      expect(refused?.message).toContain("not a PostgreSQL URL: give postgres://USER@HOST:PORT/DATABASE")
      expect(refused?.message).not.toContain("hunter2")
    },
  )

  it.each(["postgres://db.example/agents", "postgresql://db.example/agents", "POSTGRES://db.example/agents", "\tpostgres://db.example/agents", "socket:/var/run/postgresql?db=agents", "/var/run/postgresql agents"])(
    "is not a URL pg reads as one: %s is passed on",
    (url) => expect(pgConnectionString(url)).toBe(url),
  )
})

describe("the connection string pg is given", () => {
  it.each([
    ["prefer", "postgres://db.example/agents?sslmode=prefer", "postgres://db.example/agents?sslmode=verify-full"],
    ["require", "postgres://db.example/agents?sslmode=require&application_name=a%20b", "postgres://db.example/agents?sslmode=verify-full&application_name=a%20b"],
    ["verify-ca", "postgres://u:p%40ss@db.example:5433/agents?sslrootcert=/ca.pem&sslmode=verify-ca#x", "postgres://u:p%40ss@db.example:5433/agents?sslrootcert=/ca.pem&sslmode=verify-full#x"],
    ["require, encoded", "postgres://db.example/agents?ssl%6Dode=requir%65", "postgres://db.example/agents?sslmode=verify-full"],
    ["every occurrence", "postgres://db.example/agents?sslmode=require&sslmode=prefer", "postgres://db.example/agents?sslmode=verify-full&sslmode=verify-full"],
  ])("names the aliases of verify-full as verify-full and keeps every other byte: %s", (_, url, given) => {
    expect(pgConnectionString(url)).toBe(given)
  })

  it.each([
    "postgres://db.example/agents",
    "postgres://db.example/agents?sslmode=disable",
    "postgres://db.example/agents?sslmode=verify-full",
    "postgres://db.example/agents?sslmode=no-verify&application_name=x",
    "postgres://db.example/agents?uselibpqcompat=true&sslmode=require",
    "postgres://db.example/agents?uselibpqcompat=true&sslmode=prefer",
    "postgres://db.example/agents#sslmode=bogus",
    "/var/run/postgresql agents",
  ])("keeps a URL that needs no translation as it is: %s", (url) => {
    expect(pgConnectionString(url)).toBe(url)
  })

  it("is what the pool of a URL is built with", () => {
    const given: Array<PgPoolOptions> = []
    const pg: PgModule = {
      Pool: class {
        constructor(options: PgPoolOptions) {
          given.push(options)
        }
        connect() {
          return Promise.reject(new Error("not connected"))
        }
        end() {
          return Promise.resolve()
        }
        on() {
          return this
        }
      },
    }
    makePool(pg, "postgres://db.example/agents?sslmode=require")
    expect(given.map((options) => options.connectionString)).toEqual(["postgres://db.example/agents?sslmode=verify-full"])
  })
})

describe("the meaning of each known sslmode", () => {
  it("disable asks for no TLS", async () => {
    const server = await fakeServer()
    await expectReason(attempt(`postgres://maka@127.0.0.1:${server.port}/agents?sslmode=disable`), "Database")
    expect(server.seen).toEqual(["plain"])
  })

  it.each(["prefer", "require", "verify-ca", "verify-full"])(
    "%s demands TLS and refuses a certificate no CA vouches for (pg 8: verify-full)",
    async (mode) => {
      const server = await fakeServer()
      await expectReason(attempt(`postgres://maka@127.0.0.1:${server.port}/agents?sslmode=${mode}`), "Database", "certificate")
      expect(server.seen).toEqual(["ssl-request"])
    },
  )

  it("no-verify takes TLS without checking the certificate", async () => {
    const server = await fakeServer()
    await expectReason(attempt(`postgres://maka@127.0.0.1:${server.port}/agents?sslmode=no-verify`), "Database")
    expect(server.seen).toEqual(["ssl-request", "tls"])
  })
})

describe("PGSSLMODE, which pg reads when the URL sets no TLS parameter", () => {
  const saved = process.env["PGSSLMODE"]
  afterEach(() => {
    if (saved === undefined) delete process.env["PGSSLMODE"]
    else process.env["PGSSLMODE"] = saved
  })

  it.each([
    ["libpq's allow", "allow", "postgres://db.example/agents"],
    ["an empty value", "", "postgres://db.example/agents?application_name=x"],
    ["a misspelling", "verify_full", "postgres://db.example/agents"],
    ["another case", "REQUIRE", "/var/run/postgresql agents"],
    ["an sslrootcert emptied by its repetition", "allow", "postgres://db.example/agents?sslrootcert=/ca.pem&sslrootcert="],
    ["a negotiation other than direct", "allow", "postgres://db.example/agents?sslnegotiation=postgres"],
  ])("is refused when pg does not implement it, which pg reads as no TLS: %s", (_, mode, url) => {
    expect(() => pgConnectionString(url, { PGSSLMODE: mode })).toThrow(
      `PGSSLMODE ${JSON.stringify(mode)} (the URL sets no TLS parameter, so pg reads the environment) is not one pg implements`,
    )
  })

  it.each([
    "postgres://db.example/agents?sslmode=verify-full",
    "postgres://db.example/agents?sslrootcert=/ca.pem",
    "postgres://db.example/agents?sslcert=/c.pem&sslkey=/k.pem",
    "postgres://db.example/agents?ssl=true",
    "postgres://db.example/agents?ssl=0",
    "postgres://db.example/agents?sslnegotiation=direct",
  ])("is not looked at when the URL settles TLS, as pg does not read it then: %s", (url) => {
    expect(pgConnectionString(url, { PGSSLMODE: "allow" })).toBe(url)
  })

  it.each(SSL_MODES.pg)("is taken as pg implements it: %s", (mode) => {
    expect(pgConnectionString("postgres://db.example/agents", { PGSSLMODE: mode })).toBe("postgres://db.example/agents")
  })

  it("refuses before anything connects, without a secret in the message", async () => {
    const server = await fakeServer()
    process.env["PGSSLMODE"] = "allow"
    const error = await expectReason(attempt(`postgres://maka:hunter2@127.0.0.1:${server.port}/agents?password=hunter3`), "UnsupportedDatabase", "PGSSLMODE \"allow\"")
    expect(error.message).not.toContain("hunter2")
    expect(error.message).not.toContain("hunter3")
    expect(server.seen).toEqual([])
  })

  it("require from the environment demands TLS and checks the certificate, as in the URL", async () => {
    const server = await fakeServer()
    process.env["PGSSLMODE"] = "require"
    await expectReason(attempt(`postgres://maka@127.0.0.1:${server.port}/agents`), "Database", "certificate")
    expect(server.seen).toEqual(["ssl-request"])
  })
})

/**
 * A child that opens each URL once, through maka's open or through `pg` directly, and prints each
 * outcome on stdout as `outcome <tag> <message>`, then `done`; pg's warnings would go to its stderr
 * (pg prints its warning once per process).
 */
const CHILD = `
const { openPostgres, loadPg } = await import(${JSON.stringify(pathToFileURL(new URL("../src/internal/open-postgres.ts", import.meta.url).pathname).href)})
const [through, ...urls] = process.argv.slice(1)
for (const url of urls) {
  try {
    if (through === "maka") {
      await openPostgres({ url }, { connectTimeout: 5000 })
    } else {
      const pg = await loadPg()
      const pool = new pg.Pool({ connectionString: url, connectionTimeoutMillis: 5000 })
      try { await pool.connect() } finally { await pool.end() }
    }
    process.stdout.write("outcome opened\\n")
  } catch (error) {
    process.stdout.write("outcome " + (error.reason?._tag ?? "thrown") + " " + error.message + "\\n")
  }
}
await new Promise((resolve) => setTimeout(resolve, 50))
process.stdout.write("done\\n")
`

/** The outcome lines of a child run, and everything else it printed (its stderr). */
const runChild = async (through: "maka" | "pg", urls: ReadonlyArray<string>) => {
  const child = spawnChild("--input-type=module", ["-e", CHILD, through, ...urls])
  await child.line("done")
  const exited = await child.exited
  const lines = child.output().split("\n")
  return {
    exited,
    outcomes: lines.filter((line) => line.startsWith("outcome ")),
    stderr: lines.filter((line) => !line.startsWith("outcome ") && line !== "done").join("\n").trim(),
  }
}

const closedPortUrl = (mode: string) => `postgres://maka:hunter2@127.0.0.1:1/agents?sslmode=${mode}`

describe("the driver's warning", () => {
  it("is printed by pg for sslmode=require, so the check below can see it", async () => {
    const { stderr } = await runChild("pg", [closedPortUrl("require")])
    expect(stderr).toContain("SECURITY WARNING")
  })

  it("is never printed when the log opens URLs with sslmode=prefer, require and verify-ca", async () => {
    const { outcomes, exited, stderr } = await runChild("maka", ["prefer", "require", "verify-ca"].map(closedPortUrl))
    expect(outcomes.length).toBe(3)
    for (const outcome of outcomes) {
      expect(outcome).toMatch(/^outcome (Io|Database) /)
      expect(outcome).not.toContain("hunter2")
    }
    expect(stderr).toBe("")
    expect(exited.code).toBe(0)
  })
})

const databaseUrl = process.env["MAKA_TEST_DATABASE_URL"] ?? ""

describe.skipIf(databaseUrl === "")("on the PostgreSQL server (it serves no TLS)", () => {
  const withMode = (mode: string) => {
    const url = new URL(databaseUrl)
    url.searchParams.set("sslmode", mode)
    return url.toString()
  }

  it("opens with sslmode=disable, and prefer does not fall back to a connection without TLS", async () => {
    const database = await attempt(withMode("disable"))
    await database.close()
    await expectReason(attempt(withMode("prefer")), "Database", "does not support SSL")
  })
})

if (databaseUrl === "") {
  process.stdout.write("note: MAKA_TEST_DATABASE_URL is unset; the server case of PostgresSslMode.test.ts does not run here\n")
}
