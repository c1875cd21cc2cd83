/**
 * Opens a PostgreSQL event log over `pg` (docs/log-format.md §3.1): the open-order check and the
 * migrations run in one transaction under a transaction-scoped advisory lock, so two hosts opening
 * the same schema at once never race. Writes are READ COMMITTED transactions (the caller locks the
 * session row); reads are REPEATABLE READ READ ONLY, one snapshot. A read-only open (inspection)
 * takes no lock and runs nothing but READ ONLY transactions: it classifies the schema and refuses
 * anything but a maka log of the current version, creating and migrating nothing. `bigint` columns
 * (`sequence`, `created_at`, `count(*)`) come back as decimal strings, as pg returns them by default.
 */
import { Kysely, PostgresDialect, sql, type PostgresPool, type PostgresPoolClient, type Transaction } from "kysely"
import * as EventLogError from "../EventLogError.ts"
import type { Database } from "./database.ts"
import { makeDatabase } from "./database-handle.ts"
import { classifySchema, LATEST_VERSION, migrate, type SchemaSurvey } from "./migrations.ts"
import { pglitePool, type PgliteLike } from "./pglite-dialect.ts"
import { storeError } from "./store-error.ts"
import type { Tables } from "./tables.ts"

/** A URL (a pool this log owns), or a caller's pool (`pg.Pool` or anything with its `connect`). */
export type PostgresConnection = { readonly url: string } | { readonly pool: PostgresPool }

/** The package a PostgreSQL URL needs; an optional peer dependency, loaded only when used. */
export const PG_PACKAGE = "pg"

/** The options of `pg.Pool` this log sets (its clients take `keepAlive` and `query_timeout` from them). */
export interface PgPoolOptions {
  readonly connectionString: string
  readonly connectionTimeoutMillis: number
  readonly query_timeout: number
  readonly keepAlive: boolean
}

/** A `pg.Client` as the pool's `connect` event hands it over: its error events and its `query`. */
export interface PgClientEvents {
  on(event: "error", listener: (error: Error) => void): unknown
  query: (...args: Array<never>) => unknown
}

export type PgPool = PostgresPool & {
  on(event: "error", listener: () => void): unknown
  on(event: "connect", listener: (client: PgClientEvents) => void): unknown
}

export interface PgModule {
  readonly Pool: new (options: PgPoolOptions) => PgPool
}

const isPgModule = (value: unknown): value is PgModule =>
  typeof value === "object" && value !== null && "Pool" in value && typeof value.Pool === "function"

/**
 * Loads `pg` on first use of a PostgreSQL URL, so SQLite users never load or install it. A missing
 * package is a `Database` error that names the package to install.
 */
export const loadPg = async (importPg: () => Promise<unknown> = () => import("pg")): Promise<PgModule> => {
  let loaded: unknown
  try {
    loaded = await importPg()
  } catch (error) {
    const code = typeof error === "object" && error !== null && "code" in error ? error.code : undefined
    const missing = code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND"
    throw EventLogError.make({
      _tag: "Database",
      message: missing
        ? `a PostgreSQL log needs the package "${PG_PACKAGE}", which is not installed: add it next to @maka/event-log (npm install ${PG_PACKAGE})`
        : `the package "${PG_PACKAGE}" failed to load: ${error instanceof Error ? error.message : String(error)}`,
    })
  }
  // An ES module namespace of a CommonJS package keeps its exports under `default`.
  const candidate = typeof loaded === "object" && loaded !== null && "default" in loaded ? loaded.default : loaded
  if (isPgModule(candidate)) return candidate
  if (isPgModule(loaded)) return loaded
  throw EventLogError.make({ _tag: "Database", message: `the package "${PG_PACKAGE}" has no Pool export` })
}

export interface PostgresOptions {
  /** The schema that holds the log (created when missing); default: the connection's `current_schema()`. */
  readonly schema?: string | undefined
  /** Inspection: no lock, READ ONLY transactions only; the schema must hold a maka log of the current version. */
  readonly readOnly?: boolean | undefined
  /** Milliseconds a new connection of a URL's pool may take (default `POSTGRES_DEFAULTS.connectTimeout`). */
  readonly connectTimeout?: number | undefined
  /** Milliseconds a query of a URL's pool may wait for its answer (default `POSTGRES_DEFAULTS.queryTimeout`). */
  readonly queryTimeout?: number | undefined
}

/**
 * The bounds of the pool a URL opens (docs/log-format.md §3.1), so that a server that accepts the
 * connection but never answers fails the open or the operation instead of hanging it (and the
 * cancellation that waits for it) for good. `connectTimeout` bounds a new connection, and a wait for
 * a free client of the pool (so it is generous: a busy process may wait for a client). `queryTimeout`
 * bounds each query on the client side; it is far above the largest legitimate read (a session of
 * 100,000 events, about 2 s) and leaves room for a migration's index build on a large log, so it
 * cuts only a server that has stopped answering. TCP keepalive is on, so a peer that vanished is noticed by the system too.
 */
export const POSTGRES_DEFAULTS = Object.freeze({
  connectTimeout: 30_000,
  queryTimeout: 300_000,
})

/**
 * The pool of a URL: bounded as `POSTGRES_DEFAULTS`, and with an `error` listener on the pool and on
 * every client it hands out. A client's connection can fail while it is idle (the pool's own
 * listener takes it) or while the log holds it between queries; without a listener of its own, the
 * client's `error` event would then be an uncaught exception that ends the process. With it, the
 * client is no longer queryable: its next query fails (a store error), and the pool drops it when it
 * is released instead of handing it out again.
 */
export const makePool = (pg: PgModule, url: string, options: PostgresOptions = {}): PgPool => {
  const pool = new pg.Pool({
    connectionString: pgConnectionString(url),
    connectionTimeoutMillis: options.connectTimeout ?? POSTGRES_DEFAULTS.connectTimeout,
    query_timeout: options.queryTimeout ?? POSTGRES_DEFAULTS.queryTimeout,
    keepAlive: true,
  })
  pool.on("error", () => undefined)
  // A query past `query_timeout` fails, but pg leaves it running on the client's connection: the
  // client's next query would wait behind it. Such a client is dropped when it is released.
  const timedOut = new WeakSet<object>()
  pool.on("connect", (client) => {
    client.on("error", () => undefined)
    const query = client.query
    client.query = (...args) => {
      const result = Reflect.apply(query, client, args) as unknown
      if (result instanceof Promise) {
        result.then(undefined, (error: unknown) => {
          if (error instanceof Error && error.message === QUERY_READ_TIMEOUT) timedOut.add(client)
        })
      }
      return result
    }
  })
  const connect = pool.connect.bind(pool)
  return Object.assign(pool, {
    connect: async () => {
      const client = await connect()
      const release = client.release.bind(client) as (error?: Error | boolean) => void
      // A client released as broken (`release(true)`) is dropped, as one whose query timed out.
      return Object.assign(client, {
        release: (destroy?: boolean) => release(destroy === true ? true : timedOut.has(client) ? new Error(QUERY_READ_TIMEOUT) : undefined),
      })
    },
  })
}

/** pg's error for a query past `query_timeout` (pg 8). */
const QUERY_READ_TIMEOUT = "Query read timeout"

/** How one store is reached. Kysely's `destroy()` (at `close()`) ends `pool`. */
export interface PostgresStore {
  readonly pool: PostgresPool
  readonly location: string
  readonly schema: string | undefined
}

export const quoteIdentifier = (name: string): string => `"${name.replaceAll('"', '""')}"`

/** Connection parameters whose values a message may show; every other one may be a secret. */
const SHOWN_PARAMETERS: ReadonlySet<string> = new Set([
  "sslmode",
  "application_name",
  "connect_timeout",
  "uselibpqcompat",
  // Where the server is and which database: a `socket:` URL and a `?host=` folder name them here.
  "host",
  "port",
  "db",
  "dbname",
  "user",
])

/**
 * A URL without its secrets, for messages: the password, and the value of every query parameter
 * but a few known harmless ones (`?password=` and `?sslpassword=` are as secret as the user info).
 */
export const redactUrl = (url: string): string => {
  try {
    const parsed = new URL(url)
    // An `@` in the path: a user info with an unescaped `/` in its password, which the parser cut
    // at that `/` (`postgres://u:abc/def@host/db` reads as host `u`, port `abc`). All before the
    // path's last `@` is taken for the user info and hidden, the host shown from after it.
    const at = parsed.pathname.lastIndexOf("@")
    if (at >= 0) return redactUrl(`${parsed.protocol}//***@${parsed.pathname.slice(at + 1)}${parsed.search}`)
    if (parsed.password !== "") parsed.password = "***"
    const query = [...parsed.searchParams].map(([name, value]) =>
      SHOWN_PARAMETERS.has(name) ? `${name}=${value}` : /^[a-z_]{1,64}$/.test(name) ? `${name}=***` : "***",
    )
    parsed.search = ""
    parsed.hash = ""
    return query.length === 0 ? parsed.toString() : `${parsed.toString()}?${query.join("&")}`
  } catch {
    return "postgres (unparsable URL)"
  }
}

/**
 * The `sslmode` values pg 8 implements (docs/log-format.md §3.1): its own set, and the libpq set it
 * reads with `uselibpqcompat=true`. pg takes any other value silently (as full verification, or an
 * empty one as no TLS at all), so the log refuses it.
 */
export const SSL_MODES = Object.freeze({
  pg: Object.freeze(["disable", "prefer", "require", "verify-ca", "verify-full", "no-verify"]),
  libpq: Object.freeze(["disable", "prefer", "require", "verify-ca", "verify-full"]),
})

/**
 * Without `uselibpqcompat=true`, pg 8 treats these as `verify-full` (TLS required, the certificate
 * chain and the host name checked) and prints a multi-line SECURITY WARNING on first use.
 */
const VERIFY_FULL_ALIASES: ReadonlySet<string> = new Set(["prefer", "require", "verify-ca"])

/** The name and value of one `name=value` item of a query, decoded as pg's URL parser decodes them. */
const queryItem = (item: string): readonly [string, string] | undefined =>
  // The leading `&` keeps a `?` that starts the item from being taken for the query's own `?`.
  [...new URLSearchParams(`&${item}`)][0]

/**
 * Whether a URL's query settles TLS for pg 8, so pg never reads `PGSSLMODE`: an `ssl` parameter (any
 * value), a non-empty `sslmode`, `sslrootcert`, `sslcert` or `sslkey`, or `sslnegotiation=direct`
 * (pg-connection-string 2.14). Otherwise pg takes `PGSSLMODE` from the environment, and any value it
 * does not know (a misspelling, `allow`, an empty one) as no TLS at all.
 */
const namesTls = (values: (name: string) => ReadonlyArray<string>): boolean =>
  // pg reads the last value of a repeated parameter.
  values("ssl").length > 0 ||
  ["sslmode", "sslrootcert", "sslcert", "sslkey"].some((name) => (values(name).at(-1) ?? "") !== "") ||
  values("sslnegotiation").at(-1) === "direct"

/** URL parameters other clients read as the schema (Prisma's `schema`, JDBC's `currentSchema`). */
const SCHEMA_PARAMETERS: ReadonlyArray<string> = ["schema", "currentSchema", "search_path"]

/**
 * The connection string `pg` is given for `url` (docs/log-format.md §3.1). Text that is not a
 * PostgreSQL URL (`postgres://`, `postgresql://`, `socket:` or a socket folder's path), an `sslmode` pg does not
 * implement, a `PGSSLMODE` in `environment` pg would read and does not implement, a
 * `uselibpqcompat` other than `true` or `false`, and a schema named as other clients name it
 * (`SCHEMA_PARAMETERS`, which pg passes by unread) are refused (`UnsupportedDatabase`, before
 * anything connects). Without `uselibpqcompat=true`, `prefer`, `require` and `verify-ca` are
 * given as `verify-full`: what pg 8 makes of them anyway, without its warning. Every other byte of
 * the URL is kept, so pg reads the rest (host, `sslrootcert`, `uselibpqcompat`, …) as before.
 */
export const pgConnectionString = (url: string, environment: Readonly<Record<string, string | undefined>> = process.env): string => {
  const refuse = (message: string) => EventLogError.make({ _tag: "UnsupportedDatabase", message: `${redactUrl(url)}: ${message}` })
  // pg reads any other text as a path below `postgres://base` (a DNS look-up of the host `base`),
  // and any other scheme as if it were postgres://.
  if (!/^\s*(postgres(ql)?:\/\/|socket:|\/(?!\/))/i.test(url)) {
    throw refuse("not a PostgreSQL URL: give postgres://USER@HOST:PORT/DATABASE (or postgresql://, socket:, or a socket folder's path)")
  }
  // A socket path has no query (pg splits it at spaces); as pg's URL parser, the query runs from
  // the first `?` to the fragment.
  const fragment = url.indexOf("#") === -1 ? url.length : url.indexOf("#")
  const start = url.startsWith("/") ? -1 : url.indexOf("?")
  const items = start === -1 || start > fragment ? [] : url.slice(start + 1, fragment).split("&")
  const parameters = items.map(queryItem)
  const values = (name: string) => parameters.flatMap((parameter) => (parameter?.[0] === name ? [parameter[1]] : []))
  const fromEnvironment = environment["PGSSLMODE"]
  if (fromEnvironment !== undefined && !namesTls(values) && !SSL_MODES.pg.includes(fromEnvironment)) {
    throw refuse(
      `PGSSLMODE ${JSON.stringify(fromEnvironment)} (the URL sets no TLS parameter, so pg reads the environment) is not one pg implements; use one of ${SSL_MODES.pg.join(", ")}`,
    )
  }
  if (items.length === 0) return url
  // Other tools' ways of naming a schema in the URL, which pg passes by unread: the log would open
  // in the search_path's schema instead, without a word.
  const schemaName = SCHEMA_PARAMETERS.find((name) => values(name).length > 0)
  if (schemaName !== undefined) {
    throw refuse(
      `the URL's ${schemaName} parameter names no schema PostgreSQL reads; use options=-c search_path=NAME (or EventLog.layerPostgres's schema)`,
    )
  }
  const compatibility = values("uselibpqcompat")
  const badCompatibility = compatibility.find((value) => value !== "true" && value !== "false")
  if (badCompatibility !== undefined) {
    throw refuse(`uselibpqcompat must be true or false, not ${JSON.stringify(badCompatibility)}`)
  }
  // pg reads the last value of a repeated parameter.
  const isLibpq = compatibility.at(-1) === "true"
  const known = isLibpq ? SSL_MODES.libpq : SSL_MODES.pg
  const badMode = values("sslmode").find((value) => !known.includes(value))
  if (badMode !== undefined) {
    throw refuse(
      `sslmode ${JSON.stringify(badMode)} is not one pg implements${isLibpq ? " with uselibpqcompat=true" : ""}; use one of ${known.join(", ")}`,
    )
  }
  if (isLibpq) return url
  const query = items.map((item, position) => {
    const parameter = parameters[position]
    return parameter !== undefined && parameter[0] === "sslmode" && VERIFY_FULL_ALIASES.has(parameter[1]) ? "sslmode=verify-full" : item
  })
  return `${url.slice(0, start + 1)}${query.join("&")}${url.slice(fragment)}`
}

const textOf = (row: unknown, key: string): string | undefined => {
  if (typeof row !== "object" || row === null || !(key in row)) return undefined
  const value: unknown = Reflect.get(row, key)
  return typeof value === "string" ? value : undefined
}

const names = (rows: ReadonlyArray<unknown>, key: string): Array<string> =>
  rows.flatMap((row) => {
    const name = textOf(row, key)
    return name === undefined ? [] : [name]
  })

/** The open-order survey of one schema, read inside the migration transaction. */
export const surveyPostgres = async (
  transaction: Transaction<Tables>,
  schema: string,
  location: string,
): Promise<SchemaSurvey> => {
  const objects = await sql<{ name: unknown; kind: unknown }>`
    SELECT c.relname AS name, c.relkind::text AS kind
    FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = ${schema} AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S', 'i', 'I')`.execute(transaction)
  const tables = objects.rows.flatMap((row) => {
    const name = textOf(row, "name")
    const kind = textOf(row, "kind")
    return name !== undefined && (kind === "r" || kind === "p") ? [name] : []
  })
  const migrationColumns = tables.includes("schema_migrations")
    ? names(
        (
          // From the catalog, which shows every column to every role (information_schema hides the
          // columns a role may not read, and a role without privileges saw a foreign database).
          await sql<{ name: unknown }>`
            SELECT a.attname AS name
            FROM pg_catalog.pg_attribute a
              JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
              JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = ${schema} AND c.relname = 'schema_migrations' AND a.attnum > 0 AND NOT a.attisdropped`.execute(
            transaction,
          )
        ).rows,
        "name",
      )
    : []
  const versions = migrationColumns.includes("version")
    ? (
        await sql<{ version: unknown }>`SELECT version FROM ${sql.id(schema, "schema_migrations")}`.execute(
          transaction,
        )
      ).rows.map((row) => row.version)
    : []
  return { location, objects: names(objects.rows, "name"), tables, migrationColumns, versions }
}

/**
 * The open order on PostgreSQL, in one READ COMMITTED transaction: take the advisory lock of the
 * schema (waited for without the role's lock or statement timeout), create the schema if it is
 * missing, survey and classify it (refusing a foreign or newer one, which rolls back and leaves
 * it unchanged), then migrate.
 */
const checkAndMigrate = async (db: Kysely<Tables>, store: PostgresStore): Promise<void> => {
  await db
    .transaction()
    .setIsolationLevel("read committed")
    .execute(async (transaction) => {
      const schema = store.schema ?? (await currentSchema(transaction, store.location))
      // Hosts opening at once wait their turn at the lock whatever the role's `lock_timeout` or
      // `statement_timeout` (an open is never tried again); the role's own hold for the rest.
      const saved = await sql<{ lock: string; statement: string }>`
        SELECT current_setting('lock_timeout') AS lock, current_setting('statement_timeout') AS statement`.execute(transaction)
      await sql`SELECT set_config('lock_timeout', '0', true), set_config('statement_timeout', '0', true)`.execute(transaction)
      await sql`SELECT pg_advisory_xact_lock(hashtextextended(${`maka.event-log:${schema}`}, 0))`.execute(
        transaction,
      )
      const { lock, statement } = saved.rows[0] ?? { lock: "0", statement: "0" }
      await sql`SELECT set_config('lock_timeout', ${lock}, true), set_config('statement_timeout', ${statement}, true)`.execute(
        transaction,
      )
      const exists = await sql<{ found: unknown }>`
        SELECT 1 AS found FROM pg_catalog.pg_namespace WHERE nspname = ${schema}`.execute(transaction)
      if (exists.rows.length === 0) await sql`CREATE SCHEMA ${sql.id(schema)}`.execute(transaction)
      await sql`SELECT set_config('search_path', ${quoteIdentifier(schema)}, true)`.execute(transaction)
      const state = classifySchema(await surveyPostgres(transaction, schema, store.location))
      await migrate(transaction, "postgres", state)
    })
}

const unsupported = (message: string): EventLogError.EventLogError =>
  EventLogError.make({ _tag: "UnsupportedDatabase", message })

/**
 * The open-order check of a read-only open (docs/log-format.md §3.1), in one READ ONLY transaction
 * that PostgreSQL itself keeps from writing: survey and classify the schema, and refuse an empty or
 * missing one (a read-only open never creates a log), a foreign or newer one (as a writer does) and
 * an older maka log (a read-only open never migrates; the next writer does).
 */
const checkReadOnly = async (db: Kysely<Tables>, store: PostgresStore): Promise<void> => {
  await db
    .transaction()
    .setIsolationLevel("repeatable read")
    .setAccessMode("read only")
    .execute(async (transaction) => {
      const schema = store.schema ?? (await currentSchema(transaction, store.location))
      const state = classifySchema(await surveyPostgres(transaction, schema, store.location))
      if (state.kind === "empty") {
        throw unsupported(
          `no maka log at ${store.location}: schema ${schema} holds none (a read-only open never creates one)`,
        )
      }
      if (state.version < LATEST_VERSION) {
        throw unsupported(
          `${store.location} has schema ${state.version} < ${LATEST_VERSION}; open it once for writing to migrate it`,
        )
      }
    })
}

const currentSchema = async (transaction: Transaction<Tables>, location: string): Promise<string> => {
  const result = await sql<{ schema: unknown; path: unknown }>`SELECT current_schema() AS schema, current_setting('search_path') AS path`.execute(
    transaction,
  )
  const schema = textOf(result.rows[0], "schema")
  if (schema === undefined) {
    // The search path is named (the location hides a URL's options): a URL's own search_path may
    // name a schema that does not exist yet.
    const path = textOf(result.rows[0], "path") ?? ""
    throw EventLogError.make({
      _tag: "Database",
      message: `${location}: no schema of the search_path (${path}) exists that the role may use; create one (CREATE SCHEMA), or name the log's schema (the URL's options=-c search_path=NAME, or EventLog.layerPostgres's schema, which a writer creates when missing)`,
    })
  }
  return schema
}

/**
 * `pool` whose clients get the log's session settings (`prepare`) before they are first handed out. A
 * client whose settings fail (its connection dropped meanwhile) is released as broken, never kept out
 * of the pool: the pool's `end()`, at the log's close, waits for every client handed out, and would
 * wait for that one for ever (Kysely's own `onCreateConnection` releases no client that fails it).
 */
const preparing = (pool: PostgresPool, prepare: (client: PostgresPoolClient) => Promise<void>): PostgresPool => {
  const prepared = new WeakSet<PostgresPoolClient>()
  return {
    connect: async () => {
      const client = await pool.connect()
      if (!prepared.has(client)) {
        try {
          await prepare(client)
        } catch (error) {
          client.release(true)
          throw error
        }
        prepared.add(client)
      }
      return client
    },
    end: () => pool.end(),
  }
}

/**
 * Opens a log over an already reachable store (a `pg` pool, or the PGlite adapter). Read-only, every
 * session's transactions default to READ ONLY too, so nothing but a read can reach the store.
 */
export const openPostgresStore = async (store: PostgresStore, access: { readonly readOnly?: boolean } = {}): Promise<Database> => {
  const readOnly = access.readOnly === true
  // The schema every client works in: the one given, or else the first client's `current_schema()`,
  // pinned for every later client. Unpinned, each client would follow the search_path, and a schema
  // created later ahead of it (`"$user"`'s) would move the log to another one under a live engine.
  let pinned = store.schema
  const db = new Kysely<Tables>({
    dialect: new PostgresDialect({
      // Once per client the pool hands out (the PGlite adapter hands out a new one every time).
      pool: preparing(store.pool, async (client) => {
        if (pinned === undefined) {
          const found = await client.query<unknown>("SELECT current_schema() AS schema", [])
          // None (no schema of the search_path exists): the open refuses it (`currentSchema`).
          pinned = textOf(found.rows[0], "schema")
        }
        if (pinned !== undefined) await client.query(`SET search_path TO ${quoteIdentifier(pinned)}`, [])
        if (readOnly) await client.query("SET default_transaction_read_only = on", [])
      }),
    }),
  })
  try {
    await (readOnly ? checkReadOnly(db, store) : checkAndMigrate(db, store))
  } catch (error) {
    // Kysely's destroy() ends the pool it was given (a caller's pool and PGlite's are wrapped so it does not).
    await db.destroy()
    throw storeError(error, store.location)
  }
  return makeDatabase({
    dialect: "postgres",
    location: store.location,
    db,
    beginWrite: readOnly ? undefined : (handle) => handle.transaction().setIsolationLevel("read committed"),
    beginRead: (handle) => handle.transaction().setIsolationLevel("repeatable read").setAccessMode("read only"),
    release: () => undefined,
  })
}

/**
 * Opens the log over a PostgreSQL URL (a pool this log owns and ends at `close()`) or a caller's
 * pool (never ended by the log). Each client of the pool gets the log's `search_path` (`schema`, or
 * the schema the first client found) when the log first uses it, so a caller's pool should serve
 * this log alone. The timeouts apply to
 * a URL's pool only: a caller's pool keeps its own settings.
 */
/**
 * What PostgreSQL cannot hold as the name of the log's schema: an empty name or a NUL (the
 * connection's `SET search_path` would fail where nothing awaits it, and the open would never
 * settle), or one over 63 bytes, which PostgreSQL cuts to 63 without a word (two such names would
 * open the same schema).
 */
const schemaProblem = (schema: string): string | undefined => {
  if (schema === "") return "the schema name is empty"
  if (schema.includes("\u0000")) return "the schema name holds a NUL character"
  const bytes = Buffer.byteLength(schema, "utf8")
  return bytes > MAX_IDENTIFIER_BYTES
    ? `the schema name is ${bytes} bytes of UTF-8; PostgreSQL keeps only the first ${MAX_IDENTIFIER_BYTES} of a name`
    : undefined
}

/** The longest identifier PostgreSQL keeps whole (NAMEDATALEN − 1). */
const MAX_IDENTIFIER_BYTES = 63

export const openPostgres = async (connection: PostgresConnection, options: PostgresOptions = {}): Promise<Database> => {
  const { schema } = options
  const problem = schema === undefined ? undefined : schemaProblem(schema)
  if (problem !== undefined) throw EventLogError.make({ _tag: "UnsupportedDatabase", message: `${problem}; pass another schema` })
  const where = schema === undefined ? "" : ` (schema ${schema})`
  const access = { readOnly: options.readOnly === true }
  if ("url" in connection) {
    const pg = await loadPg()
    return openPostgresStore(
      { pool: makePool(pg, connection.url, options), location: `${redactUrl(connection.url)}${where}`, schema },
      access,
    )
  }
  const { pool } = connection
  return openPostgresStore(
    {
      // The caller owns the pool: closing the log never ends it.
      pool: { connect: () => pool.connect(), end: async () => undefined },
      location: `a PostgreSQL pool${where}`,
      schema,
    },
    access,
  )
}

/**
 * Opens the log in `schema` of an in-process PGlite (tests: one instance per test file, a fresh
 * schema per test). Every acquisition sets the `search_path`, so several logs may share one
 * instance one at a time; the instance stays open after `close()`.
 */
export const openPglite = async (pglite: PgliteLike, options: { readonly schema: string }): Promise<Database> =>
  openPostgresStore({
    pool: pglitePool(pglite),
    location: `PGlite (schema ${options.schema})`,
    schema: options.schema,
  })
