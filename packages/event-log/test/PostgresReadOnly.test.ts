/**
 * The read-only PostgreSQL open (docs/log-format.md §3.1): it creates, migrates and changes nothing,
 * refuses a database without a maka log of the current version, and runs only reads. And the pool a
 * URL opens: a held client whose connection drops fails its next query instead of ending the process,
 * and a server that accepts connections but never answers fails the open after the connect timeout.
 * The log keeps the schema it found at open in every client of its pool, and a role without
 * privileges hears so. Each server case gets a database of its own, dropped afterwards.
 */
import * as net from "node:net"
import { sql } from "kysely"
import pg from "pg"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import type { Database } from "../src/internal/database.ts"
import { MIGRATIONS } from "../src/internal/migrations.ts"
import { openPostgres } from "../src/internal/open-postgres.ts"
import { childScript, expectReason, spawnChild } from "./fixtures/storage.ts"

const databaseUrl = process.env["MAKA_TEST_DATABASE_URL"] ?? ""
if (databaseUrl === "") {
  process.stdout.write("note: MAKA_TEST_DATABASE_URL is unset; the PostgreSQL-server cases of the read-only open do not run here\n")
}

/** The URL of database `name` on the test server. */
const urlOf = (name: string): string => {
  const url = new URL(databaseUrl)
  url.pathname = `/${name}`
  return url.toString()
}

let admin: pg.Pool | undefined
let count = 0
const created: Array<string> = []

/** A new empty database; `setup` runs in it first (through a connection of its own). */
const freshDatabase = async (setup: ReadonlyArray<string> = []): Promise<string> => {
  admin ??= new pg.Pool({ connectionString: databaseUrl, max: 1 })
  const name = `maka_ro_${process.pid}_${++count}`
  await admin.query(`CREATE DATABASE ${name}`)
  created.push(name)
  const client = new pg.Client({ connectionString: urlOf(name) })
  await client.connect()
  try {
    for (const statement of setup) await client.query(statement)
  } finally {
    await client.end()
  }
  return urlOf(name)
}

/** Every relation and schema outside the system's, as `schema.name kind`, and the schemas. */
const objectsOf = async (url: string): Promise<ReadonlyArray<string>> => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    const relations = await client.query<{ entry: string }>(`
      SELECT n.nspname || '.' || c.relname || ' ' || c.relkind::text AS entry
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'`)
    const schemas = await client.query<{ entry: string }>(`
      SELECT 'schema ' || nspname AS entry FROM pg_catalog.pg_namespace
      WHERE nspname NOT IN ('pg_catalog', 'information_schema') AND nspname NOT LIKE 'pg\\_%'`)
    return [...relations.rows, ...schemas.rows].map((row) => row.entry).sort()
  } finally {
    await client.end()
  }
}

/** The tables information_schema lists outside the system's schemas. */
const userTables = async (url: string): Promise<ReadonlyArray<string>> => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    const result = await client.query<{ name: string }>(`
      SELECT table_schema || '.' || table_name AS name FROM information_schema.tables
      WHERE table_schema NOT IN ('pg_catalog', 'information_schema')`)
    return result.rows.map((row) => row.name).sort()
  } finally {
    await client.end()
  }
}

const opened: Array<Database> = []
const open = async (url: string, options: Parameters<typeof openPostgres>[1]): Promise<Database> => {
  const database = await openPostgres({ url }, options)
  opened.push(database)
  return database
}

afterEach(async () => {
  for (const database of opened.splice(0)) await database.close()
})

afterAll(async () => {
  if (admin === undefined) return
  for (const name of created.splice(0)) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
  await admin.end()
})

/** The statements of maka's schema at `version`, recorded in `schema_migrations` as a writer does. */
const makaAtVersion = (version: number): ReadonlyArray<string> =>
  MIGRATIONS.filter((migration) => migration.version <= version).flatMap((migration) => [
    ...migration.postgres,
    `INSERT INTO schema_migrations (version, applied_at) VALUES (${migration.version}, 0)`,
  ])

describe.skipIf(databaseUrl === "")("the read-only PostgreSQL open", () => {
  it("refuses an empty database and creates nothing in it", async () => {
    const url = await freshDatabase()
    const before = await objectsOf(url)
    await expectReason(open(url, { readOnly: true }), "UnsupportedDatabase", "no maka log at")
    await expectReason(open(url, { readOnly: true, schema: "maka" }), "UnsupportedDatabase", "schema maka holds none")
    expect(await objectsOf(url)).toEqual(before)
    expect(await userTables(url)).toEqual([])
  })

  it("refuses a database holding another application's tables, views and sequences, and leaves it as it was", async () => {
    const url = await freshDatabase([
      `CREATE TABLE accounts (id serial PRIMARY KEY, name text)`,
      `CREATE VIEW account_names AS SELECT name FROM accounts`,
      `CREATE SEQUENCE invoice_numbers`,
      `CREATE SCHEMA billing`,
      `CREATE TABLE billing.invoices (id int)`,
    ])
    const before = await objectsOf(url)
    await expectReason(open(url, { readOnly: true }), "UnsupportedDatabase", "is not a maka event log")
    await expectReason(open(url, { readOnly: true, schema: "billing" }), "UnsupportedDatabase", "is not a maka event log")
    await expectReason(open(url, { readOnly: true, schema: "maka" }), "UnsupportedDatabase", "no maka log at")
    expect(await objectsOf(url)).toEqual(before)
  })

  it("refuses a maka log of an older version without migrating it, and a writer migrates it", async () => {
    const url = await freshDatabase(makaAtVersion(1))
    const before = await objectsOf(url)
    await expectReason(open(url, { readOnly: true }), "UnsupportedDatabase", "has schema 1 < 2; open it once for writing")
    expect(await objectsOf(url)).toEqual(before)
    await (await open(url, {})).close()
    const reader = await open(url, { readOnly: true })
    expect(await reader.read(async (transaction) => (await sql<{ n: string }>`SELECT max(version) AS n FROM schema_migrations`.execute(transaction)).rows[0]?.n)).toBe(2)
  })

  it("refuses a maka log of a newer version", async () => {
    const url = await freshDatabase([...makaAtVersion(2), `INSERT INTO schema_migrations (version, applied_at) VALUES (3, 0)`])
    await expectReason(open(url, { readOnly: true }), "UnsupportedDatabase", "newer maka (schema 3 > 2)")
  })

  it("reads a migrated log and never writes: a write is refused and a statement that writes fails in its READ ONLY transaction", async () => {
    const url = await freshDatabase()
    const writer = await open(url, {})
    await writer.write(async (transaction) => {
      await sql`INSERT INTO sessions (session_id, created_at) VALUES ('s', 1)`.execute(transaction)
    })
    const reader = await open(url, { readOnly: true })
    const sessions = await reader.read(async (transaction) =>
      (await sql<{ session_id: string }>`SELECT session_id FROM sessions`.execute(transaction)).rows.map((row) => row.session_id),
    )
    expect(sessions).toEqual(["s"])
    await expectReason(reader.write(async () => undefined), "Database", "opened read-only")
    await expect(
      reader.read(async (transaction) => {
        await sql`INSERT INTO sessions (session_id, created_at) VALUES ('t', 2)`.execute(transaction)
      }),
    ).rejects.toThrow(/read-only transaction/)
    // Outside the log's transactions too: every session of the read-only pool defaults to READ ONLY.
    await expect(sql`INSERT INTO sessions (session_id, created_at) VALUES ('u', 3)`.execute(reader.db)).rejects.toThrow(/read-only transaction/)
    expect(await userTables(url)).toEqual(["public.event_log", "public.schema_migrations", "public.sessions", "public.tool_result_payloads"])
  })
})

describe.skipIf(databaseUrl === "")("the schema a PostgreSQL log works in", () => {
  it("stays the one found at open, in every client, when a schema created later comes first in the search_path", async () => {
    const url = await freshDatabase()
    const log = await open(url, {})
    const schemaOf = () => log.read(async (transaction) => (await sql<{ schema: string }>`SELECT current_schema() AS schema`.execute(transaction)).rows[0]?.schema)
    expect(await schemaOf()).toBe("public")
    await log.write(async (transaction) => {
      await sql`INSERT INTO sessions (session_id, created_at) VALUES ('s', 1)`.execute(transaction)
    })
    // `"$user"` comes first in the default search_path: a schema named after the role takes over it.
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    try {
      await client.query(`CREATE SCHEMA AUTHORIZATION CURRENT_USER`)
      const role = (await client.query<{ role: string }>(`SELECT current_user AS role`)).rows[0]!.role
      await client.query(`CREATE TABLE "${role.replaceAll('"', '""')}".sessions (session_id text, created_at bigint)`)
    } finally {
      await client.end()
    }
    // Reads at once make the pool hand out new clients: each works in the log's schema still.
    const schemas = await Promise.all(
      Array.from({ length: 4 }, () =>
        log.read(async (transaction) => {
          const row = (await sql<{ schema: string }>`SELECT current_schema() AS schema, pg_sleep(0.05)`.execute(transaction)).rows[0]
          const sessions = (await sql<{ session_id: string }>`SELECT session_id FROM sessions`.execute(transaction)).rows
          return `${row?.schema}: ${sessions.map((entry) => entry.session_id).join(",")}`
        }),
      ),
    )
    expect(schemas).toEqual(Array.from({ length: 4 }, () => "public: s"))
  })

  it("tells a role without privileges on the log so, rather than calling the log foreign", async () => {
    const url = await freshDatabase()
    await (await open(url, {})).close()
    const role = `maka_noprivs_${process.pid}`
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    try {
      await client.query(`DROP ROLE IF EXISTS ${role}`)
      await client.query(`CREATE ROLE ${role} LOGIN`)
    } finally {
      await client.end()
    }
    const asRole = new URL(url)
    asRole.username = role
    try {
      // It sees the tables (the catalog shows them to every role), and may read none of them.
      for (const options of [{}, { readOnly: true }]) {
        const error = await expectReason(open(asRole.toString(), options), "Database", "permission denied for table schema_migrations")
        expect(error.message).not.toContain("is not a maka event log")
      }
      // Without use of the schema either, the search_path holds nothing it may use.
      const owner = new pg.Client({ connectionString: url })
      await owner.connect()
      await owner.query(`REVOKE ALL ON SCHEMA public FROM PUBLIC`).finally(() => owner.end())
      await expectReason(open(asRole.toString(), {}), "Database", 'no schema of the search_path ("$user", public) exists that the role may use')
      // A URL naming a schema that does not exist yet: the message names it.
      const missing = new URL(url)
      missing.searchParams.set("options", "-c search_path=agentlog")
      await expectReason(open(missing.toString(), {}), "Database", "no schema of the search_path (agentlog) exists")
    } finally {
      admin ??= new pg.Pool({ connectionString: databaseUrl, max: 1 })
      for (const name of created) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      created.length = 0
      await admin.query(`DROP ROLE IF EXISTS ${role}`)
    }
  })
})

describe.skipIf(databaseUrl === "")("a client of the log's pool whose connection drops", () => {
  it("fails its next query and leaves the process running; the pool then hands out a working client", async () => {
    const url = await freshDatabase()
    const child = spawnChild(childScript("dropped-client.ts"), [url])
    expect(await child.line("held")).toMatch(/^held \d+$/)
    expect(await child.line("failed")).toMatch(/^failed (?!nothing)/)
    expect(await child.line("reconnected")).toBe('reconnected {"one":1}')
    const exit = await child.exited
    expect(child.output()).not.toContain("Unhandled")
    expect(exit).toEqual({ code: 0, signal: null })
  }, 30_000)
})

describe("a server that accepts connections and never answers", () => {
  let server: net.Server | undefined
  const sockets: Array<net.Socket> = []
  let port = 0
  beforeAll(async () => {
    const silent = net.createServer((socket) => {
      sockets.push(socket)
    })
    server = silent
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve))
    port = (silent.address() as net.AddressInfo).port
  })
  afterAll(async () => {
    for (const socket of sockets) socket.destroy()
    await new Promise((resolve) => server?.close(resolve))
  })

  it.each([false, true])("fails the open after the connect timeout (read-only: %s)", async (readOnly) => {
    const started = Date.now()
    const error = await expectReason(
      openPostgres({ url: `postgres://maka:secret@127.0.0.1:${port}/log` }, { readOnly, connectTimeout: 300 }),
      "Database",
      "timeout",
    )
    expect(Date.now() - started).toBeLessThan(5_000)
    expect(error.message).not.toContain("secret")
    expect(sockets.length).toBeGreaterThan(0)
  })
})

describe("a schema name PostgreSQL cannot hold", () => {
  it.each([
    ["empty", "", "the schema name is empty"],
    ["with a NUL", "a\u0000b", "holds a NUL character"],
    ["of 64 bytes", "x".repeat(64), "is 64 bytes of UTF-8; PostgreSQL keeps only the first 63"],
    ["of 32 two-byte characters", "é".repeat(32), "is 64 bytes of UTF-8"],
  ])("is refused before any connection: %s", async (_, schema, text) => {
    // Nothing listens on port 1: an open that connected would fail otherwise.
    for (const readOnly of [false, true]) {
      const error = await expectReason(openPostgres({ url: "postgres://maka:secret@127.0.0.1:1/log" }, { schema, readOnly }), "UnsupportedDatabase", text)
      expect(error.message).not.toContain("secret")
    }
  })
})
