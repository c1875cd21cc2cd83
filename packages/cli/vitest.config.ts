import { defineProject } from "vitest/config"

export default defineProject({
  ssr: { resolve: { conditions: ["@maka/source"] } },
  resolve: { conditions: ["@maka/source"] },
  test: {
    name: "cli",
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 300_000,
    // Builds `dist/bin.js` once; the end-to-end tests spawn it.
    globalSetup: ["test/support/build.ts"],
  },
})
