/**
 * Opens an engine on the SQLite file named by the first argument through the facade and prints the
 * outcome as one JSON line: `{opened: true}` or `{reason, storeReason?, message}` of the rejection.
 */
import { createEngine, EngineError } from "@maka/engine"

const database = process.argv[2] ?? ""
try {
  const engine = await createEngine({ database })
  await engine.close()
  process.stdout.write(`${JSON.stringify({ opened: true })}\n`)
} catch (error) {
  if (!(error instanceof EngineError.EngineError)) throw error
  const reason = error.reason
  process.stdout.write(
    `${JSON.stringify({ reason: reason._tag, storeReason: reason._tag === "Store" ? reason.storeReason : undefined, message: error.message })}\n`,
  )
}
