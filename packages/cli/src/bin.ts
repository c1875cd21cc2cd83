#!/usr/bin/env node
/**
 * The `maka` executable: runs the command line and exits with its code once stdout and stderr are
 * flushed.
 */
import * as fs from "node:fs"
import { main } from "./internal/main.ts"
import { processSink } from "./internal/terminal.ts"

// `src/bin.ts` and `dist/bin.js` both sit one folder below the package root.
const manifest: unknown = JSON.parse(fs.readFileSync(new URL("../package.json", import.meta.url), "utf8"))
const VERSION =
  typeof manifest === "object" && manifest !== null && "version" in manifest && typeof manifest.version === "string" ? manifest.version : "unknown"

const code = await main({
  argv: process.argv.slice(2),
  environment: process.env,
  cwd: process.cwd(),
  sink: processSink(process.stdout, process.stderr),
  stdin: process.stdin,
  version: VERSION,
})
process.exitCode = code
