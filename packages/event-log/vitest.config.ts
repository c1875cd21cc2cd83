import { fileURLToPath } from "node:url"
import { defineProject } from "vitest/config"

export default defineProject({
  ssr: { resolve: { conditions: ["@maka/source"] } },
  resolve: { conditions: ["@maka/source"] },
  test: {
    name: "event-log",
    include: ["test/**/*.test.ts"],
    testTimeout: 30_000,
    // One PGlite data directory, initialised once and loaded by every PGlite a test opens.
    // (An absolute path: a runner whose root is the repository, as `pnpm mutate`, finds it too.)
    globalSetup: [fileURLToPath(new URL("./test/support/pglite-snapshot.ts", import.meta.url))],
  },
})
