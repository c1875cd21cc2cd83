import { defineProject } from "vitest/config"

export default defineProject({
  ssr: { resolve: { conditions: ["@maka/source"] } },
  resolve: { conditions: ["@maka/source"] },
  test: { name: "repo-tools", include: ["test/**/*.test.ts"], testTimeout: 30_000 },
})
