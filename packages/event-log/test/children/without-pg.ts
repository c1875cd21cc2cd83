/**
 * Child process of the optional-`pg` test, run as `node --import tsx without-pg.ts <database>`: it
 * makes the package `pg` unresolvable, then opens a SQLite log (which must not need it) and a
 * PostgreSQL URL (which must fail naming the package). Prints `sqlite ok` and `postgres <message>`.
 */
import { register } from "node:module"

const hook = `export async function resolve(specifier, context, next) {
  if (specifier === "pg" || specifier.startsWith("pg/")) {
    const error = new Error("Cannot find package 'pg'")
    error.code = "ERR_MODULE_NOT_FOUND"
    throw error
  }
  return next(specifier, context)
}`
register(`data:text/javascript,${encodeURIComponent(hook)}`)

const [file] = process.argv.slice(2)
if (file === undefined) throw new Error("usage: without-pg.ts <database>")

const main = async (): Promise<void> => {
  // The package's entry, as a SQLite user imports it, must load without pg.
  await import("../../src/index.ts")
  const { openSqlite } = await import("../../src/internal/open-sqlite.ts")
  const { openPostgres } = await import("../../src/internal/open-postgres.ts")
  const database = await openSqlite(file)
  await database.close()
  process.stdout.write("sqlite ok\n")
  try {
    await openPostgres({ url: "postgres://nobody@127.0.0.1:1/none" })
    process.stdout.write("postgres opened\n")
  } catch (error) {
    process.stdout.write(`postgres ${error instanceof Error ? error.message : String(error)}\n`)
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${String(error)}\n`)
  process.exit(1)
})
