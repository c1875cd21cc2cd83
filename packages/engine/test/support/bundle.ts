/**
 * Bundles a child-process entry of the engine suites with its workspace sources (never a stale
 * `dist`), so each child starts as plain `node` in well under a second instead of resolving modules
 * through `--import tsx`. better-sqlite3 stays external, resolved from the event log's package.
 */
import { createRequire } from "node:module"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { build } from "vite"

const here = path.dirname(fileURLToPath(import.meta.url))
export const root = path.resolve(here, "../../../..")

/** Builds `entry` (a path under the engine's test folder) into `outputDirectory`; returns the bundle's path. */
export const bundleChild = async (entry: string, outputDirectory: string): Promise<string> => {
  const name = `${path.basename(entry, ".ts")}.mjs`
  const sqlite = createRequire(path.join(root, "packages/event-log/package.json")).resolve("better-sqlite3")
  const built = await build({
    configFile: false,
    logLevel: "silent",
    root,
    resolve: { conditions: ["@maka/source"] },
    ssr: { noExternal: true, external: ["better-sqlite3"], resolve: { conditions: ["@maka/source"] } },
    build: {
      ssr: entry,
      outDir: outputDirectory,
      emptyOutDir: true,
      target: "node20",
      minify: false,
      sourcemap: false,
      rolldownOptions: { output: { format: "es", entryFileNames: name, paths: { "better-sqlite3": sqlite } } },
    },
  })
  // The child must run the sources under test, never a stale `dist` of a workspace package.
  const outputs = (Array.isArray(built) ? built : [built]).flatMap((item) => ("output" in item ? item.output : []))
  const modules = outputs.flatMap((chunk) => (chunk.type === "chunk" ? chunk.moduleIds : []))
  const stale = modules.filter((id) => /[/\\]packages[/\\][^/\\]+[/\\]dist[/\\]/.test(id))
  if (modules.length === 0 || stale.length > 0) throw new Error(`the child bundles built files: ${stale.slice(0, 3).join(", ")}`)
  return path.join(outputDirectory, name)
}
