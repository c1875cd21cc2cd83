import type { PGlite } from "@electric-sql/pglite"
import { freshPglite } from "./support/pglite-snapshot.ts"
import BetterSqlite3 from "better-sqlite3"
import { sql, type Transaction } from "kysely"
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { Database } from "../src/internal/database.ts"
import { INDEXES, LATEST_VERSION, MIGRATIONS, REQUIRED_TABLES } from "../src/internal/migrations.ts"
import { openPglite, openPostgres } from "../src/internal/open-postgres.ts"
import { acquireLease, LOCK_SUFFIX } from "../src/internal/lease.ts"
import { MAKA_APPLICATION_ID, openSqlite } from "../src/internal/open-sqlite.ts"
import { errorCode } from "../src/internal/store-error.ts"
import type { Tables } from "../src/internal/tables.ts"
import {
  buildForeignSqlite,
  buildSqliteAtVersion,
  expectReason,
  listing,
  rawEvent,
  sha256File,
  temporaryDirectory,
  type RawEvent,
} from "./fixtures/storage.ts"

const databaseUrl = process.env["MAKA_TEST_DATABASE_URL"] ?? ""
if (databaseUrl === "") {
  process.stdout.write(
    "note: MAKA_TEST_DATABASE_URL is unset, so the real-PostgreSQL cases of Migrations.test.ts are skipped " +
      "(tools/pg-start prints a URL; .ci/run sets it)\n",
  )
}

// ---------------------------------------------------------------------------------------------
// One store per test, on each dialect.

interface Objects {
  readonly tables: ReadonlyArray<string>
  readonly indexes: ReadonlyArray<string>
}

interface Store {
  /** Opens (or reopens) the log of this store. */
  readonly open: () => Promise<Database>
  /** Runs raw SQL against the store before any open, as another program would (no maka code). */
  readonly prepare: (statements: ReadonlyArray<string>) => Promise<void>
  /** Tables and indexes of the store (maka's naming, internal and primary-key indexes left out). */
  readonly objects: () => Promise<Objects>
}

interface Backend {
  readonly name: string
  readonly isAvailable: boolean
  readonly store: () => Store
  readonly uniqueViolation: string
}

/** Every version a log opened by this code records, in order. */
const ALL_VERSIONS = MIGRATIONS.map((migration) => migration.version)

const sorted = (values: Iterable<string>): ReadonlyArray<string> => [...values].sort()

const textColumn = (rows: ReadonlyArray<unknown>, key: string): Array<string> =>
  rows.flatMap((row) => {
    if (typeof row !== "object" || row === null || !(key in row)) return []
    const value: unknown = Reflect.get(row, key)
    return typeof value === "string" ? [value] : []
  })

const sqliteBackend: Backend = {
  name: "sqlite",
  isAvailable: true,
  uniqueViolation: "SQLITE_CONSTRAINT_UNIQUE",
  store: () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    return {
      open: () => openSqlite(file, { synchronous: "NORMAL" }),
      prepare: async (statements) => {
        // As a maka release leaves its log: in WAL mode.
        const connection = new BetterSqlite3(file)
        connection.pragma("journal_mode = WAL")
        for (const statement of statements) connection.exec(statement)
        connection.close()
      },
      objects: async () => {
        const connection = new BetterSqlite3(file, { readonly: true })
        const rows = connection.prepare("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").all()
        connection.close()
        const of = (type: string) =>
          sorted(textColumn(rows.filter((row) => textColumn([row], "type")[0] === type), "name"))
        return { tables: of("table"), indexes: of("index") }
      },
    }
  },
}

let schemaCount = 0
const freshSchema = (prefix: string) => `${prefix}_${process.pid}_${crypto.randomBytes(3).toString("hex")}_${++schemaCount}`

const postgresObjects = async (query: (text: string, parameters: Array<unknown>) => Promise<ReadonlyArray<unknown>>, schema: string) => ({
  tables: sorted(textColumn(await query("SELECT tablename FROM pg_tables WHERE schemaname = $1", [schema]), "tablename")),
  indexes: sorted(
    textColumn(await query("SELECT indexname FROM pg_indexes WHERE schemaname = $1", [schema]), "indexname").filter(
      (name) => !name.endsWith("_pkey"),
    ),
  ),
})

let pglite: PGlite | undefined
const pgliteBackend: Backend = {
  name: "pglite",
  isAvailable: true,
  uniqueViolation: "23505",
  store: () => {
    const schema = freshSchema("m")
    const instance = () => {
      if (pglite === undefined) throw new Error("PGlite is not started")
      return pglite
    }
    return {
      open: () => openPglite(instance(), { schema }),
      prepare: async (statements) => {
        await instance().exec(`CREATE SCHEMA IF NOT EXISTS "${schema}"; SET search_path TO "${schema}"`)
        for (const statement of statements) await instance().exec(statement)
      },
      objects: () => postgresObjects(async (text, parameters) => (await instance().query(text, parameters)).rows, schema),
    }
  },
}

let pool: pg.Pool | undefined
const serverSchemas: Array<string> = []
const postgresBackend: Backend = {
  name: "postgres",
  isAvailable: databaseUrl !== "",
  uniqueViolation: "23505",
  store: () => {
    const schema = freshSchema("m")
    serverSchemas.push(schema)
    const server = () => {
      pool ??= new pg.Pool({ connectionString: databaseUrl, max: 2 })
      return pool
    }
    return {
      open: () => openPostgres({ url: databaseUrl }, { schema }),
      prepare: async (statements) => {
        const client = await server().connect()
        try {
          await client.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`)
          await client.query(`SET search_path TO "${schema}"`)
          for (const statement of statements) await client.query(statement)
        } finally {
          await client.query("RESET search_path")
          client.release()
        }
      },
      objects: () => postgresObjects(async (text, parameters) => (await server().query(text, parameters)).rows, schema),
    }
  },
}

beforeAll(async () => {
  pglite = freshPglite()
  await pglite.waitReady
}, 180_000)

afterAll(async () => {
  await pglite?.close()
  if (pool !== undefined) {
    for (const schema of serverSchemas) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    await pool.end()
  }
})

const migrationRows = (database: Database) =>
  database.read(async (transaction) =>
    (await transaction.selectFrom("schema_migrations").select(["version", "applied_at"]).orderBy("version").execute()).map(
      (row) => ({ version: Number(row.version), appliedAt: String(row.applied_at) }),
    ),
  )

const insert = (database: Database, row: RawEvent) =>
  database.write((transaction) => transaction.insertInto("event_log").values(row).execute())

/** The error code an insert fails with, or "inserted". */
const insertOutcome = async (database: Database, row: RawEvent): Promise<string> => {
  try {
    await insert(database, row)
    return "inserted"
  } catch (error) {
    return errorCode(error) ?? String(error)
  }
}

const withStore = async (backend: Backend, body: (database: Database, store: Store) => Promise<void>) => {
  const store = backend.store()
  const database = await store.open()
  try {
    await body(database, store)
  } finally {
    await database.close()
  }
}

const opening = (invocation: string, input: Record<string, unknown>, session = "session-1") =>
  rawEvent("invocation_opened", { input }, { invocation_id: invocation, run_id: `run-${invocation}`, session_id: session })

const claim = (id: string, runId: string, highWater: number) => ({
  kind: "continuation",
  claim: { id, source: { invocation: { runId }, highWater } },
})

const handoffEnd = (invocation: string, intent: Record<string, string>) =>
  rawEvent("invocation_ended", { outcome: { kind: "handoff_paused", pause: { intent } } }, { invocation_id: invocation })

const intent = (runId: string, invocationId: string, claimId: string) => ({
  successorRunId: runId,
  successorInvocationId: invocationId,
  claimId,
})

/** Each unique index: rows that must all insert, then a duplicate it must refuse. */
const UNIQUE_CASES: ReadonlyArray<{ readonly name: string; readonly accepted: () => ReadonlyArray<RawEvent>; readonly duplicate: () => RawEvent }> = [
  {
    name: "event identity",
    accepted: () => [rawEvent("model_observed", {}, { event_id: "same-id" })],
    duplicate: () => rawEvent("model_observed", {}, { event_id: "same-id" }),
  },
  {
    name: "one opening per invocation",
    accepted: () => [opening("i-1", { kind: "message" }), rawEvent("invocation_ended", { outcome: { kind: "completed" } }, { invocation_id: "i-1" })],
    duplicate: () => opening("i-1", { kind: "message" }),
  },
  {
    name: "one terminal per invocation",
    accepted: () => [rawEvent("invocation_ended", { outcome: { kind: "completed" } }, { invocation_id: "i-1" })],
    duplicate: () => rawEvent("invocation_ended", { outcome: { kind: "completed" } }, { invocation_id: "i-1" }),
  },
  {
    name: "one fact of each kind per operation",
    accepted: () => [
      rawEvent("tool_dispatched", {}, { operation_id: "step:call" }),
      rawEvent("tool_settled", {}, { operation_id: "step:call" }),
      rawEvent("model_observed", {}, { operation_id: "step" }),
      rawEvent("model_observed", {}, { operation_id: "step" }),
    ],
    duplicate: () => rawEvent("tool_dispatched", {}, { operation_id: "step:call" }),
  },
  {
    name: "steering identity per session",
    accepted: () => [
      rawEvent("message_steered", { message: { messageId: "m-1" } }),
      rawEvent("message_steered", { message: { messageId: "m-1" } }, { session_id: "session-2" }),
    ],
    duplicate: () => rawEvent("message_steered", { message: { messageId: "m-1" } }),
  },
  {
    name: "one archive per settled result",
    accepted: () => [
      rawEvent("tool_result_archived", { placeholder: { identity: { runtimeEventId: "settled-1" } } }),
      rawEvent("tool_result_archived", { placeholder: { identity: { runtimeEventId: "settled-2" } } }),
    ],
    duplicate: () => rawEvent("tool_result_archived", { placeholder: { identity: { runtimeEventId: "settled-1" } } }),
  },
  {
    name: "claim id",
    accepted: () => [opening("i-1", claim("claim-1", "source-run", 4)), opening("i-2", { kind: "message" })],
    duplicate: () => opening("i-3", claim("claim-1", "other-run", 9)),
  },
  {
    name: "one claim per sealed source boundary",
    accepted: () => [
      opening("i-1", claim("claim-1", "source-run", 4)),
      opening("i-2", claim("claim-2", "source-run", 5)),
      opening("i-3", claim("claim-3", "source-run", 4), "session-2"),
    ],
    duplicate: () => opening("i-4", claim("claim-4", "source-run", 4)),
  },
  {
    name: "one successor run per handoff",
    accepted: () => [handoffEnd("i-1", intent("run-a", "inv-a", "claim-a")), handoffEnd("i-2", intent("run-b", "inv-b", "claim-b"))],
    duplicate: () => handoffEnd("i-3", intent("run-a", "inv-c", "claim-c")),
  },
  {
    name: "one successor invocation per handoff",
    accepted: () => [handoffEnd("i-1", intent("run-a", "inv-a", "claim-a"))],
    duplicate: () => handoffEnd("i-3", intent("run-c", "inv-a", "claim-c")),
  },
  {
    name: "one successor claim per handoff",
    accepted: () => [handoffEnd("i-1", intent("run-a", "inv-a", "claim-a"))],
    duplicate: () => handoffEnd("i-3", intent("run-c", "inv-c", "claim-a")),
  },
]

for (const backend of [sqliteBackend, pgliteBackend, postgresBackend]) {
  describe.skipIf(!backend.isAvailable)(`migrations on ${backend.name}`, () => {
    it("create every table and index of the schema and record version 1", () =>
      withStore(backend, async (database, store) => {
        const objects = await store.objects()
        expect(objects.tables).toEqual(sorted(REQUIRED_TABLES))
        expect(objects.indexes).toEqual(sorted(INDEXES))
        const rows = await migrationRows(database)
        expect(rows.map((row) => row.version)).toEqual(ALL_VERSIONS)
        expect(LATEST_VERSION).toBe(MIGRATIONS.length)
      }))

    it("run nothing new when an existing log is reopened", async () => {
      const store = backend.store()
      const first = await store.open()
      const rows = await migrationRows(first)
      await insert(first, rawEvent("model_observed"))
      await first.close()
      const objects = await store.objects()
      const second = await store.open()
      expect(await migrationRows(second)).toEqual(rows)
      expect(await store.objects()).toEqual(objects)
      expect(await second.read(async (transaction) => (await transaction.selectFrom("event_log").selectAll().execute()).length)).toBe(1)
      await second.close()
    })

    it("open a version-1 log built by the release that wrote it, keeping its rows", async () => {
      const store = backend.store()
      const rows = [rawEvent("invocation_opened", { input: { kind: "message" } }), rawEvent("model_observed", {}, { operation_id: "s" })]
      const statements = MIGRATIONS.filter((migration) => migration.version <= 1).flatMap((migration) =>
        backend.name === "sqlite" ? migration.sqlite : migration.postgres,
      )
      const quote = (value: string | null) => (value === null ? "NULL" : `'${value.replaceAll("'", "''")}'`)
      await store.prepare([
        ...statements,
        "INSERT INTO schema_migrations (version, applied_at) VALUES (1, 1700000000000)",
        ...rows.map(
          (row) =>
            `INSERT INTO event_log (event_id, session_id, turn_id, run_id, invocation_id, kind, operation_id, event_json) VALUES (${[
              row.event_id,
              row.session_id,
              row.turn_id,
              row.run_id,
              row.invocation_id,
              row.kind,
              row.operation_id,
              row.event_json,
            ]
              .map(quote)
              .join(", ")})`,
        ),
      ])
      const database = await store.open()
      const migrations = await migrationRows(database)
      expect(migrations[0]).toEqual({ version: 1, appliedAt: "1700000000000" })
      expect(migrations.map((row) => row.version)).toEqual(ALL_VERSIONS)
      const stored = await database.read((transaction) =>
        transaction.selectFrom("event_log").select(["sequence", "event_id", "event_json"]).orderBy("sequence").execute(),
      )
      expect(stored.map((row) => [Number(row.sequence), row.event_id, row.event_json])).toEqual(
        rows.map((row, index) => [index + 1, row.event_id, row.event_json]),
      )
      await database.close()
    })

    it("return sequences in insert order from 1", () =>
      withStore(backend, async (database) => {
        const sequences = await database.write(async (transaction) => {
          const returned: Array<unknown> = []
          for (let index = 0; index < 3; index += 1) {
            const row = await transaction.insertInto("event_log").values(rawEvent("model_observed")).returning("sequence").executeTakeFirstOrThrow()
            returned.push(row.sequence)
          }
          return returned
        })
        // SQLite returns numbers; PostgreSQL returns bigint columns as decimal strings.
        expect(sequences.map(Number)).toEqual([1, 2, 3])
        expect(sequences.every((sequence) => typeof sequence === (backend.name === "sqlite" ? "number" : "string"))).toBe(true)
      }))

    for (const unique of UNIQUE_CASES) {
      it(`back the rule "${unique.name}" with a unique index`, () =>
        withStore(backend, async (database) => {
          for (const row of unique.accepted()) expect(await insertOutcome(database, row)).toBe("inserted")
          expect(await insertOutcome(database, unique.duplicate())).toBe(backend.uniqueViolation)
        }))
    }

    it("store events whose JSON holds NUL and lone-surrogate escapes, and still index their ids", () =>
      withStore(backend, async (database) => {
        const awkward = { kind: "message", content: { text: "nul \u0000 and lone \ud800 surrogate" } }
        const first = opening("i-1", { ...awkward, claim: { id: "claim-\u0001", source: { invocation: { runId: "r" }, highWater: 1 } } })
        expect(first.event_json).toContain("\\u0000")
        expect(first.event_json).toContain("\\ud800")
        expect(await insertOutcome(database, first)).toBe("inserted")
        const steered = rawEvent("message_steered", { message: { messageId: "m", content: { text: "\u0000" } } })
        expect(await insertOutcome(database, steered)).toBe("inserted")
        const stored = await database.read((transaction) =>
          transaction.selectFrom("event_log").select("event_json").where("event_id", "=", first.event_id).executeTakeFirstOrThrow(),
        )
        expect(stored.event_json).toBe(first.event_json)
        expect(await insertOutcome(database, opening("i-2", { kind: "message", claim: { id: "claim-\u0001" } }))).toBe(backend.uniqueViolation)
        expect(await insertOutcome(database, rawEvent("message_steered", { message: { messageId: "m" } }))).toBe(backend.uniqueViolation)
      }))
  })
}

// ---------------------------------------------------------------------------------------------
// The open-order check on SQLite files.

const openRefused = async (file: string, readOnly: boolean, text: string) => {
  const directory = path.dirname(file)
  const before = fs.existsSync(file) ? sha256File(file) : undefined
  const names = listing(directory)
  await expectReason(openSqlite(file, { readOnly }), "UnsupportedDatabase", text)
  expect(fs.existsSync(file) ? sha256File(file) : undefined).toBe(before)
  // No -wal, -shm or -journal sidecar; a writer leaves only its lock file.
  const lockFile = `${path.basename(file)}.writer.lock`
  expect(listing(directory).filter((name) => name !== lockFile)).toEqual(names.filter((name) => name !== lockFile))
}

describe("the SQLite open-order check", () => {
  it("accepts a zero-byte file as an empty database", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    fs.writeFileSync(file, "")
    const database = await openSqlite(file)
    expect((await migrationRows(database)).map((row) => row.version)).toEqual(ALL_VERSIONS)
    await database.close()
  })

  it("accepts an SQLite database without tables as empty", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const connection = new BetterSqlite3(file)
    connection.exec("CREATE TABLE scratch (x); DROP TABLE scratch")
    connection.close()
    expect(fs.statSync(file).size).toBeGreaterThan(0)
    const database = await openSqlite(file)
    expect((await migrationRows(database)).map((row) => row.version)).toEqual(ALL_VERSIONS)
    await database.close()
  })

  for (const readOnly of [false, true]) {
    const mode = readOnly ? "read-only" : "writer"

    it(`refuses a foreign SQLite file unchanged (${mode})`, async () => {
      const file = path.join(temporaryDirectory(), "foreign.sqlite")
      buildForeignSqlite(file)
      await openRefused(file, readOnly, "is not a maka event log")
      const connection = new BetterSqlite3(file, { readonly: true })
      expect(connection.prepare("SELECT value FROM other").all()).toEqual([{ value: "kept" }])
      connection.close()
    })

    it(`refuses a log of a newer schema unchanged (${mode})`, async () => {
      const file = path.join(temporaryDirectory(), "events.sqlite")
      buildSqliteAtVersion(file, 1, { journalMode: "delete", recordedVersions: [1, 99], rows: [rawEvent("model_observed")] })
      await openRefused(file, readOnly, `created by a newer maka (schema 99 > ${LATEST_VERSION})`)
    })

    if (readOnly) {
      it("refuses a log of an older schema unchanged, saying a writer's open migrates it (read-only)", async () => {
        const file = path.join(temporaryDirectory(), "events.sqlite")
        buildSqliteAtVersion(file, 1, { journalMode: "delete", rows: [rawEvent("model_observed")] })
        await openRefused(file, true, `has schema 1 < ${LATEST_VERSION}; open it once for writing to migrate it`)
        // In WAL mode the file is refused unchanged too; SQLite has made its empty -wal and -shm.
        const walFile = path.join(temporaryDirectory(), "events.sqlite")
        buildSqliteAtVersion(walFile, 1, { journalMode: "wal", rows: [rawEvent("model_observed")] })
        const before = sha256File(walFile)
        await expectReason(openSqlite(walFile, { readOnly: true }), "UnsupportedDatabase", "open it once for writing to migrate it")
        expect(sha256File(walFile)).toBe(before)
      })
    }

    it(`refuses a file of random bytes unchanged (${mode})`, async () => {
      const file = path.join(temporaryDirectory(), "random.sqlite")
      fs.writeFileSync(file, crypto.randomBytes(16_384))
      await openRefused(file, readOnly, "not a maka event log")
    })

    if (!readOnly) {
      it("refuses a file the header shows is no maka log before taking the lease: no lock file beside it", async () => {
        const directory = temporaryDirectory()
        const random = path.join(directory, "random.sqlite")
        fs.writeFileSync(random, crypto.randomBytes(4_096))
        const stamped = path.join(directory, "stamped.sqlite")
        const connection = new BetterSqlite3(stamped)
        connection.pragma("application_id = 305419896")
        connection.exec("CREATE TABLE notes (body TEXT)")
        connection.close()
        await expectReason(openSqlite(random), "UnsupportedDatabase", "it is not an SQLite database")
        await expectReason(openSqlite(stamped), "UnsupportedDatabase", "application id is 305419896")
        expect(listing(directory)).toEqual(["random.sqlite", "stamped.sqlite"])
      })
    }

    it(`refuses another program's schema_migrations table unchanged (${mode})`, async () => {
      const file = path.join(temporaryDirectory(), "rails.sqlite")
      const connection = new BetterSqlite3(file)
      connection.exec("CREATE TABLE schema_migrations (version TEXT PRIMARY KEY); INSERT INTO schema_migrations VALUES ('20240101000000')")
      connection.exec("CREATE TABLE event_log (id INTEGER PRIMARY KEY)")
      connection.close()
      await openRefused(file, readOnly, "is not a maka event log")
    })
  }

  /**
   * Another application's WAL-mode database as a crash left it: rows only in its `-wal`. Copying the
   * three files of a live connection gives exactly the state a killed process leaves behind.
   */
  const foreignWal = (applicationId = 0) => {
    const source = path.join(temporaryDirectory(), "app.sqlite")
    const connection = new BetterSqlite3(source)
    connection.pragma("journal_mode = WAL")
    connection.pragma("wal_autocheckpoint = 0")
    if (applicationId !== 0) connection.pragma(`application_id = ${applicationId}`)
    connection.exec("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    for (let index = 0; index < 50; index++) connection.prepare("INSERT INTO notes (body) VALUES (?)").run(`note ${index}`)
    const directory = temporaryDirectory()
    const file = path.join(directory, "app.sqlite")
    for (const suffix of ["", "-wal", "-shm"]) fs.copyFileSync(`${source}${suffix}`, `${file}${suffix}`)
    connection.close()
    return { directory, file }
  }

  const snapshot = (directory: string) =>
    Object.fromEntries(listing(directory).map((name) => [name, sha256File(path.join(directory, name))]))

  for (const readOnly of [false, true]) {
    const mode = readOnly ? "read-only" : "writer"
    for (const applicationId of [0, 0x12345678]) {
      it(`leaves a foreign WAL-mode database, its -wal and -shm byte-for-byte unchanged (${mode}, application id ${applicationId})`, async () => {
        const { directory, file } = foreignWal(applicationId)
        expect(fs.statSync(`${file}-wal`).size).toBeGreaterThan(0)
        const before = snapshot(directory)
        await expectReason(openSqlite(file, { readOnly }), "UnsupportedDatabase", "not a maka event log")
        const after = snapshot(directory)
        delete after[`app.sqlite${LOCK_SUFFIX}`]
        expect(after).toEqual(before)
      })
    }
  }

  it("stops before the lease, with what to do, when no temporary folder can hold the copy to survey", async () => {
    const { directory, file } = foreignWal(0)
    const before = snapshot(directory)
    const previous = process.env["TMPDIR"]
    process.env["TMPDIR"] = path.join(directory, "missing")
    try {
      await expectReason(openSqlite(file), "Io", `in the temporary folder ${path.join(directory, "missing")} (ENOENT); set TMPDIR to a writable folder`)
    } finally {
      if (previous === undefined) delete process.env["TMPDIR"]
      else process.env["TMPDIR"] = previous
    }
    // No lock beside a file that may be no log.
    expect(snapshot(directory)).toEqual(before)
  })

  /** Another program's database without an application id, closed cleanly in `journalMode`: no sidecars. */
  const unstampedForeign = (directory: string, journalMode: "delete" | "wal") => {
    const file = path.join(directory, `app-${journalMode}.sqlite`)
    const connection = new BetterSqlite3(file)
    connection.pragma(`journal_mode = ${journalMode}`)
    connection.exec("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('kept')")
    connection.close()
    return fs.realpathSync(file)
  }

  for (const readOnly of [false, true]) {
    const mode = readOnly ? "read-only" : "writer"

    it(`refuses a database without an application id that is no maka log and leaves nothing beside it (${mode})`, async () => {
      const directory = temporaryDirectory()
      const rails = path.join(directory, "rails.sqlite")
      const connection = new BetterSqlite3(rails)
      connection.exec("CREATE TABLE schema_migrations (version TEXT PRIMARY KEY); INSERT INTO schema_migrations VALUES ('20240101000000')")
      connection.exec("CREATE TABLE event_log (id INTEGER PRIMARY KEY)")
      connection.close()
      const newer = path.join(directory, "newer.sqlite")
      buildSqliteAtVersion(newer, 1, { journalMode: "wal", recordedVersions: [1, 99] })
      const cases = [
        ...(["delete", "wal"] as const).map((journalMode) => {
          const file = unstampedForeign(directory, journalMode)
          return { file, message: `${file} is not a maka event log: it has no schema_migrations and event_log tables (tables: notes)` }
        }),
        { file: fs.realpathSync(rails), message: "its schema_migrations table has columns version" },
        { file: fs.realpathSync(newer), message: `was created by a newer maka (schema 99 > ${LATEST_VERSION})` },
      ]
      const before = snapshot(directory)
      expect(Object.keys(before)).toHaveLength(cases.length)
      for (const { file, message } of cases) {
        const error = await expectReason(openSqlite(file, { readOnly }), "UnsupportedDatabase", message)
        expect(error.message.startsWith(`${file} `)).toBe(true)
      }
      // No lock file, no -wal, -shm or -journal, and every file byte-for-byte as it was.
      expect(snapshot(directory)).toEqual(before)
    })
  }

  it("refuses such a database before the lease, so even while another writer holds the lease", async () => {
    const file = unstampedForeign(temporaryDirectory(), "delete")
    const lease = await acquireLease(file)
    try {
      await expectReason(openSqlite(file), "UnsupportedDatabase", "it has no schema_migrations and event_log tables (tables: notes)")
    } finally {
      await lease.release()
    }
  })

  it("opens a log of every version without an application id, in rollback-journal and WAL mode, and stamps and migrates it", async () => {
    for (const version of ALL_VERSIONS) {
      for (const journalMode of ["delete", "wal"] as const) {
        const directory = temporaryDirectory()
        const file = path.join(directory, "events.sqlite")
        const row = rawEvent("model_observed")
        buildSqliteAtVersion(file, version, { journalMode, rows: [row] })
        expect(listing(directory)).toEqual(["events.sqlite"])
        expect(fs.readFileSync(file).readUInt32BE(68)).toBe(0)
        const database = await openSqlite(file)
        expect((await migrationRows(database)).map((migration) => migration.version)).toEqual(ALL_VERSIONS)
        expect(
          await database.read(async (transaction) => (await transaction.selectFrom("event_log").select("event_id").execute()).map((item) => item.event_id)),
        ).toEqual([row.event_id])
        await database.close()
        expect(fs.readFileSync(file).readUInt32BE(68)).toBe(MAKA_APPLICATION_ID)
      }
    }
  })

  it("leaves a database it cannot read before the lease to the check under the lease: a lock held meanwhile is waited for", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    buildSqliteAtVersion(file, 1, { journalMode: "delete" })
    const holder = new BetterSqlite3(file)
    holder.exec("BEGIN EXCLUSIVE")
    // The check before the lease runs within this call and finds the file locked; the lock is gone
    // by the time the writer, holding the lease, opens the file.
    const opening = openSqlite(file)
    holder.exec("COMMIT")
    holder.close()
    const database = await opening
    expect((await migrationRows(database)).map((migration) => migration.version)).toEqual(ALL_VERSIONS)
    await database.close()
  })

  it("stamps maka's application id on a new log and refuses a file stamped by another application without opening it", async () => {
    const directory = temporaryDirectory()
    const file = path.join(directory, "events.sqlite")
    const database = await openSqlite(file)
    await database.close()
    const header = fs.readFileSync(file).subarray(0, 100)
    expect(header.readUInt32BE(68)).toBe(MAKA_APPLICATION_ID)
    const other = path.join(directory, "other.sqlite")
    const connection = new BetterSqlite3(other)
    connection.pragma("application_id = 7")
    connection.exec("CREATE TABLE schema_migrations (version INTEGER, applied_at INTEGER); CREATE TABLE event_log (x)")
    connection.close()
    await openRefused(other, false, "application id is 7")
  })

  it("opens a version-1 log without the application id that a killed writer left with rows only in its -wal, and stamps it", async () => {
    const source = path.join(temporaryDirectory(), "events.sqlite")
    buildSqliteAtVersion(source, 1, { journalMode: "wal" })
    const connection = new BetterSqlite3(source)
    connection.pragma("wal_autocheckpoint = 0")
    const row = rawEvent("model_observed")
    connection
      .prepare(
        `INSERT INTO event_log (event_id, session_id, turn_id, run_id, invocation_id, kind, operation_id, event_json)
         VALUES (@event_id, @session_id, @turn_id, @run_id, @invocation_id, @kind, @operation_id, @event_json)`,
      )
      .run(row)
    const file = path.join(temporaryDirectory(), "events.sqlite")
    for (const suffix of ["", "-wal", "-shm"]) fs.copyFileSync(`${source}${suffix}`, `${file}${suffix}`)
    connection.close()
    expect(fs.readFileSync(file).readUInt32BE(68)).toBe(0)
    const database = await openSqlite(file)
    expect(await database.read(async (transaction) => (await transaction.selectFrom("event_log").select("event_id").execute()).map((item) => item.event_id))).toEqual([row.event_id])
    await database.close()
    expect(fs.readFileSync(file).readUInt32BE(68)).toBe(MAKA_APPLICATION_ID)
  })

  it("refuses a read-only open of a missing file and creates nothing", async () => {
    const directory = temporaryDirectory()
    await expectReason(openSqlite(path.join(directory, "events.sqlite"), { readOnly: true }), "UnsupportedDatabase", "no event log")
    expect(listing(directory)).toEqual([])
  })

  it("refuses a read-only open of a zero-byte file unchanged", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    fs.writeFileSync(file, "")
    await openRefused(file, true, "empty database")
  })

  it("says a WAL-mode file found empty without its -wal may be a live log copied without it", async () => {
    const source = path.join(temporaryDirectory(), "events.sqlite")
    const writer = await openSqlite(source)
    await insert(writer, rawEvent("model_observed"))
    // The writer is live: its commits are all in its -wal, which this copy leaves behind.
    const file = path.join(temporaryDirectory(), "copy.sqlite")
    fs.copyFileSync(source, file)
    await writer.close()
    await expectReason(openSqlite(file, { readOnly: true }), "UnsupportedDatabase", `is in WAL mode with no ${fs.realpathSync(file)}-wal beside it`)
    // A writer refuses it too (also with the empty -wal the reader's open left), before its lease,
    // rather than make it a new, empty log in silence: the file stays as it was, with no lock file.
    const before = sha256File(file)
    const refused = await expectReason(openSqlite(file), "UnsupportedDatabase", `is in WAL mode with no ${fs.realpathSync(file)}-wal beside it`)
    expect(refused.message).toContain("remove it to start a new log at this path")
    expect(sha256File(file)).toBe(before)
    expect(fs.readdirSync(path.dirname(file))).not.toContain("copy.sqlite.writer.lock")
    // A file in rollback-journal mode found empty is only empty.
    const plain = path.join(temporaryDirectory(), "plain.sqlite")
    const connection = new BetterSqlite3(plain)
    connection.exec("CREATE TABLE scratch (x); DROP TABLE scratch")
    connection.close()
    const error = await expectReason(openSqlite(plain, { readOnly: true }), "UnsupportedDatabase", "is an empty database, not a maka event log")
    expect(error.message).not.toContain("WAL mode")
  })

  it("never changes a log opened read-only", async () => {
    const file = path.join(temporaryDirectory(), "events.sqlite")
    const writer = await openSqlite(file)
    await insert(writer, rawEvent("model_observed"))
    await writer.close()
    const before = sha256File(file)
    const reader = await openSqlite(file, { readOnly: true })
    expect(await reader.read(async (transaction) => (await transaction.selectFrom("event_log").selectAll().execute()).length)).toBe(1)
    await reader.close()
    expect(sha256File(file)).toBe(before)
  })
})

// ---------------------------------------------------------------------------------------------
// The open-order check, transactions and concurrent opens on PostgreSQL.

describe.skipIf(!postgresBackend.isAvailable)("openPostgres over a caller's pool", () => {
  it("opens the log and leaves the pool open at close", async () => {
    const schema = freshSchema("m")
    serverSchemas.push(schema)
    const callerPool = new pg.Pool({ connectionString: databaseUrl, max: 2 })
    try {
      const database = await openPostgres({ pool: callerPool }, { schema })
      expect(database.location).toBe(`a PostgreSQL pool (schema ${schema})`)
      await insert(database, rawEvent("model_observed"))
      await database.close()
      const rows = await callerPool.query(`SELECT count(*) AS count FROM "${schema}".event_log`)
      expect(rows.rows).toEqual([{ count: "1" }])
    } finally {
      await callerPool.end()
    }
  })

  it("names the server without its password", async () => {
    const url = new URL(databaseUrl)
    url.password = "secret-password"
    const schema = freshSchema("m")
    serverSchemas.push(schema)
    const database = await openPostgres({ url: url.toString() }, { schema })
    expect(database.location).not.toContain("secret-password")
    expect(database.location).toContain("***")
    await database.close()
  })
})

for (const backend of [pgliteBackend, postgresBackend]) {
  describe.skipIf(!backend.isAvailable)(`the open-order check on ${backend.name}`, () => {
    it("refuses a schema that holds another program's tables and leaves it unchanged", async () => {
      const store = backend.store()
      await store.prepare(["CREATE TABLE other (id integer PRIMARY KEY, value text)", "INSERT INTO other VALUES (1, 'kept')"])
      const before = await store.objects()
      await expectReason(store.open(), "UnsupportedDatabase", "is not a maka event log")
      expect(await store.objects()).toEqual(before)
    })

    it("refuses a schema of a newer maka and leaves it unchanged", async () => {
      const store = backend.store()
      await store.prepare([
        ...(MIGRATIONS[0]?.postgres ?? []),
        "INSERT INTO schema_migrations (version, applied_at) VALUES (1, 1), (99, 2)",
      ])
      const before = await store.objects()
      await expectReason(store.open(), "UnsupportedDatabase", `created by a newer maka (schema 99 > ${LATEST_VERSION})`)
      expect(await store.objects()).toEqual(before)
    })

    it("writes in READ COMMITTED and reads in one REPEATABLE READ READ ONLY snapshot", () =>
      withStore(backend, async (database) => {
        const settings = async (transaction: Transaction<Tables>) => ({
          isolation: textColumn((await sql`SHOW transaction_isolation`.execute(transaction)).rows, "transaction_isolation")[0],
          readOnly: textColumn((await sql`SHOW transaction_read_only`.execute(transaction)).rows, "transaction_read_only")[0],
        })
        expect(await database.write(settings)).toEqual({ isolation: "read committed", readOnly: "off" })
        expect(await database.read(settings)).toEqual({ isolation: "repeatable read", readOnly: "on" })
      }))

    it("lets several hosts open the same new schema at once, migrating it exactly once", async () => {
      const store = backend.store()
      const databases = await Promise.all([store.open(), store.open(), store.open(), store.open()])
      try {
        const first = databases[0]
        if (first === undefined) throw new Error("no database")
        expect((await migrationRows(first)).map((row) => row.version)).toEqual(ALL_VERSIONS)
      } finally {
        for (const database of databases) await database.close()
      }
    })

    it("leaves a transaction aborted by a failed statement as a Database error, not a commit", () =>
      withStore(backend, async (database) => {
        await insert(database, rawEvent("model_observed", {}, { event_id: "taken" }))
        await expectReason(
          database.write(async (transaction) => {
            await transaction.insertInto("event_log").values(rawEvent("model_observed", {}, { event_id: "taken" })).execute().catch(() => undefined)
          }),
          "Database",
          "rolled back",
        )
      }))
  })
}
