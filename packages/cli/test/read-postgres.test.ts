/**
 * The read-only commands on PostgreSQL (docs/cli.md §10.1): a database without a maka log is exit 1
 * with one line, and the database is left without a table; and the writing commands where PostgreSQL's
 * round trips open windows SQLite does not. Runs only with `MAKA_TEST_DATABASE_URL`; each case gets a
 * database of its own, dropped afterwards.
 */
import { EventLog } from "@maka/event-log"
import { History } from "@maka/testkit"
import { Context, Effect, Layer } from "effect"
import { createRequire } from "node:module"
import * as path from "node:path"
import { afterAll, afterEach, describe, expect, it } from "vitest"
import { eventLines, folder, maka, packageRoot, when, type Folder } from "./support/cli.ts"

const databaseUrl = process.env["MAKA_TEST_DATABASE_URL"] ?? ""
if (databaseUrl === "") {
  process.stdout.write("note: MAKA_TEST_DATABASE_URL is unset; the PostgreSQL cases of the read-only commands do not run here\n")
}

/** The little of `pg.Client` these tests use. */
interface Client {
  connect(): Promise<void>
  query(text: string): Promise<{ readonly rows: ReadonlyArray<Record<string, unknown>> }>
  end(): Promise<void>
}

/** `pg` as the CLI loads it: an optional peer of `@maka/event-log`, resolved from that package. */
const loadClient = (url: string): Client => {
  const pg = createRequire(path.join(packageRoot, "../event-log/package.json"))("pg") as {
    readonly Client: new (options: { readonly connectionString: string }) => Client
  }
  return new pg.Client({ connectionString: url })
}

const urlOf = (name: string, password?: string): string => {
  const url = new URL(databaseUrl)
  url.pathname = `/${name}`
  if (password !== undefined) url.password = password
  return url.toString()
}

const withClient = async <A>(url: string, body: (client: Client) => Promise<A>): Promise<A> => {
  const client = loadClient(url)
  await client.connect()
  try {
    return await body(client)
  } finally {
    await client.end()
  }
}

const tablesOf = (url: string): Promise<ReadonlyArray<string>> =>
  withClient(url, async (client) =>
    (
      await client.query(`SELECT table_schema || '.' || table_name AS name FROM information_schema.tables
        WHERE table_schema NOT IN ('pg_catalog', 'information_schema')`)
    ).rows
      .map((row) => String(row["name"]))
      .sort(),
  )

const databases: Array<string> = []
let count = 0
const freshDatabase = async (setup: ReadonlyArray<string> = []): Promise<string> => {
  const name = `maka_cli_ro_${process.pid}_${++count}`
  await withClient(databaseUrl, (client) => client.query(`CREATE DATABASE ${name}`))
  databases.push(name)
  await withClient(urlOf(name), async (client) => {
    for (const statement of setup) await client.query(statement)
  })
  return name
}

describe.skipIf(databaseUrl === "")("the read-only commands on a PostgreSQL database without a maka log", () => {
  const folders: Array<Folder> = []
  afterEach(() => {
    for (const created of folders.splice(0)) created.remove()
  })
  afterAll(async () => {
    for (const name of databases.splice(0)) {
      await withClient(databaseUrl, (client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
    }
  })

  it.each([["events", "--session", "s"], ["inspect", "--session", "s"], ["sessions"]])(
    "maka %s on an empty database is exit 1 with one line, creates no table and shows no password",
    async (...args) => {
      const created = folder()
      folders.push(created)
      const name = await freshDatabase()
      const result = await maka([...args, "--database-url", urlOf(name, "hunter2")], { cwd: created.root })
      expect(result.code).toBe(1)
      expect(result.stderr.trim().split("\n")).toHaveLength(1)
      expect(result.stderr).toMatch(/^maka: no maka log at postgres:\/\/\S+:\*\*\*@/)
      expect(result.stderr).not.toContain("hunter2")
      expect(await tablesOf(urlOf(name))).toEqual([])
    },
    30_000,
  )

  it("maka sessions on a database of another application is exit 1 and leaves its tables as they were", async () => {
    const created = folder()
    folders.push(created)
    const name = await freshDatabase([
      `CREATE SCHEMA shop`,
      `CREATE TABLE shop.orders (id int)`,
      `CREATE VIEW shop.recent AS SELECT id FROM shop.orders`,
      `CREATE SEQUENCE shop.order_numbers`,
    ])
    const result = await maka(["sessions", "--database-url", urlOf(name)], { cwd: created.root })
    expect(result.code).toBe(1)
    expect(result.stderr.trim().split("\n")).toHaveLength(1)
    expect(result.stderr).toContain("no maka log at")
    expect(await tablesOf(urlOf(name))).toEqual(["shop.orders", "shop.recent"])
  }, 30_000)

  it("maka sessions reads a log a writing command made", async () => {
    const created = folder()
    folders.push(created)
    const name = await freshDatabase()
    const recovered = await maka(["recover", "--database-url", urlOf(name)], { cwd: created.root })
    expect(recovered.code).toBe(0)
    const result = await maka(["sessions", "--database-url", urlOf(name)], { cwd: created.root })
    expect(result.stderr).toBe("")
    expect(result.code).toBe(0)
  }, 30_000)
})

describe.skipIf(databaseUrl === "")("maka recover on PostgreSQL as a role that cannot write", () => {
  const role = `maka_cli_reader_${process.pid}`
  const folders: Array<Folder> = []
  afterAll(async () => {
    for (const created of folders.splice(0)) created.remove()
    for (const name of databases.splice(0)) {
      await withClient(databaseUrl, (client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
    }
    await withClient(databaseUrl, (client) => client.query(`DROP ROLE IF EXISTS ${role}`))
  })

  it("names the run it could not seal on stderr and exits 1; the log's owner then seals it", async () => {
    const created = folder()
    folders.push(created)
    const name = await freshDatabase()
    expect((await maka(["recover", "--database-url", urlOf(name)], { cwd: created.root })).code).toBe(0)
    // A run left open by a host that ended: its opening alone.
    const crashed = History.smallRun({ sessionId: "crashed" })
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const log = yield* Layer.build(EventLog.layerPostgres({ url: urlOf(name) }))
          yield* Context.get(log, EventLog.EventLog).appendBatch(crashed.writes.slice(0, 1))
        }),
      ),
    )
    await withClient(urlOf(name), async (client) => {
      await client.query(`DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '${role}') THEN CREATE ROLE ${role} LOGIN; END IF; END $$`)
      await client.query(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${role}`)
    })
    const reader = new URL(urlOf(name))
    reader.username = role
    reader.password = ""
    const refused = await maka(["recover", "--database-url", reader.toString()], { cwd: created.root })
    const invocation = crashed.writes[0]!.event.invocation.invocationId
    expect(refused.stdout).toBe("recovered 0 invocations\n")
    expect(refused.stderr).toMatch(new RegExp(`^maka: could not seal crashed ${invocation}: .+\\n$`))
    expect(refused.code).toBe(1)
    const sealed = await maka(["recover", "--database-url", urlOf(name)], { cwd: created.root })
    expect(sealed.stdout).toBe(`crashed ${invocation} host_interrupted\nrecovered 1 invocation\n`)
    expect(sealed.code).toBe(0)
  }, 60_000)
})


describe.skipIf(databaseUrl === "")("a signal while a writing command waits to open the log on PostgreSQL", () => {
  const folders: Array<Folder> = []
  afterAll(async () => {
    for (const created of folders.splice(0)) created.remove()
    for (const name of databases.splice(0)) {
      await withClient(databaseUrl, (client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
    }
  })

  it.each([
    ["run", "SIGINT"],
    ["run", "SIGTERM"],
    ["resume", "SIGINT"],
    ["compact", "SIGINT"],
  ] as const)("maka %s ends at a %s (exit 130) while another host holds the open's lock, and writes nothing", async (command, signal) => {
    const created = folder()
    folders.push(created)
    const url = urlOf(await freshDatabase())
    // Compaction needs a session: one run made the log before.
    if (command === "compact") {
      expect((await maka(["run", "--database-url", url, "--workspace", created.workspace, "--session", "s", "hi"], { cwd: created.root })).code).toBe(0)
    }
    const events = async () => (await maka(["events", "--database-url", url, "--session", "s", "--json"], { cwd: created.root })).stdout
    const tablesBefore = await tablesOf(url)
    const eventsBefore = command === "compact" ? await events() : ""
    // Another host's open (or migration) holds the schema's open lock in its transaction.
    const holder = loadClient(url)
    await holder.connect()
    await holder.query("BEGIN")
    await holder.query("SELECT pg_advisory_xact_lock(hashtextextended('maka.event-log:public', 0))")
    let released = false
    try {
      const args = { run: ["run", "--workspace", created.workspace, "hi"], resume: ["resume"], compact: ["compact", "--session", "s"] }[command]!
      const result = await maka([...args, "--database-url", url], {
        cwd: created.root,
        onSpawn: (child) => {
          void (async () => {
            // Once the command waits for the lock, the signal; the lock is let go only if it never exits.
            const waiting = async () =>
              withClient(url, async (client) =>
                (
                  await client.query(
                    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                  )
                ).rows.length > 0,
              )
            while (child.exitCode === null && !(await waiting())) await new Promise((resolve) => setTimeout(resolve, 100))
            if (child.exitCode !== null) return
            child.kill(signal)
            await new Promise((resolve) => setTimeout(resolve, 20_000))
            if (child.exitCode === null && child.signalCode === null) {
              released = true
              await holder.query("ROLLBACK")
            }
          })()
        },
      })
      expect(released).toBe(false)
      expect(result.code).toBe(130)
    } finally {
      if (!released) await holder.query("ROLLBACK")
      await holder.end()
    }
    expect(await tablesOf(url)).toEqual(tablesBefore)
    if (command === "compact") expect(await events()).toBe(eventsBefore)
  }, 60_000)
})

describe.skipIf(databaseUrl === "")("maka resume on PostgreSQL", () => {
  const folders: Array<Folder> = []
  afterAll(async () => {
    for (const created of folders.splice(0)) created.remove()
    for (const name of databases.splice(0)) {
      await withClient(databaseUrl, (client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
    }
  })

  it.each(["SIGTERM", "SIGINT"])("a %s while it prepares a successor opens nothing: exit 130, the pause still waits", async (signal) => {
    const created = folder()
    folders.push(created)
    const url = urlOf(await freshDatabase())
    const paused = await maka(["run", "--database-url", url, "--workspace", created.workspace, "--session", "p", "--json", "What is this?"], {
      cwd: created.root,
      env: { MAKA_OFFLINE_DELAY_MS: "80" },
      onOutput: when((output) => output.stdout.includes('"kind":"tool_dispatched"'), (child) => child.kill("SIGTERM")),
    })
    expect(paused.code).toBe(75)
    const events = async () => eventLines((await maka(["events", "--database-url", url, "--session", "p", "--json"], { cwd: created.root })).stdout)
    const before = await events()
    // The signal comes as resume checks the paused run's workspace, before the successor's opening.
    const signalled = await maka(["resume", "--database-url", url], {
      cwd: created.root,
      env: { MAKA_TEST_SIGNAL: signal },
      preload: path.join(import.meta.dirname, "fixtures/signal-at-marker.mjs"),
    })
    expect(signalled.code).toBe(130)
    expect(await events()).toEqual(before)
    const resumed = await maka(["resume", "--database-url", url], { cwd: created.root })
    expect(resumed.stderr).toContain("resuming p:")
    expect(resumed.code).toBe(0)
  }, 60_000)
})
