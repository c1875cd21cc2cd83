import { defineConfig } from "vitest/config"

export default defineConfig({
  ssr: { resolve: { conditions: ["@maka/source"] } },
  resolve: { conditions: ["@maka/source"] },
  test: { projects: ["packages/*", "tools"] },
})
