/**
 * The PostgreSQL location that store errors name: the server and database, never a secret of the
 * connection string, which may carry a password in its user info or its query.
 */
import { describe, expect, it } from "vitest"
import { redactUrl } from "../src/internal/open-postgres.ts"

describe("redactUrl", () => {
  it("hides the password of the user info", () => {
    expect(redactUrl("postgres://maka:hunter2@db.example:5432/agents")).toBe("postgres://maka:***@db.example:5432/agents")
  })

  it.each([
    ["password", "postgres://maka@db.example/agents?password=hunter2", "postgres://maka@db.example/agents?password=***"],
    ["sslpassword", "postgres://db.example/agents?sslpassword=hunter2&sslmode=verify-full", "postgres://db.example/agents?sslpassword=***&sslmode=verify-full"],
    ["an unknown parameter", "postgres://db.example/agents?token=hunter2", "postgres://db.example/agents?token=***"],
    ["a parameter name that is no name", "postgres://db.example/agents?hunter2%21", "postgres://db.example/agents?***"],
    ["a fragment", "postgres://db.example/agents#hunter2", "postgres://db.example/agents"],
  ])("hides the query's values but a few harmless ones: %s", (_, url, shown) => {
    expect(redactUrl(url)).toBe(shown)
    expect(redactUrl(url)).not.toContain("hunter2")
  })

  it("keeps harmless parameters, so the message still says how the connection was made", () => {
    expect(redactUrl("postgres://db.example/agents?sslmode=require&application_name=worker")).toBe(
      "postgres://db.example/agents?sslmode=require&application_name=worker",
    )
  })

  it("hides a password holding an unescaped slash, which a parser would read as a host and a path", () => {
    const shown = redactUrl("postgres://maka:123/hunter2@db.example:5432/agents")
    expect(shown).toBe("postgres://maka:***@db.example:5432/agents")
    expect(shown).not.toContain("hunter2")
    expect(redactUrl("postgres://maka:hunt/er@2@db.example/agents")).not.toMatch(/hunt|er@2/)
  })

  it("names an unparsable URL without echoing it", () => {
    expect(redactUrl("postgres://maka:hunter2@[bad")).toBe("postgres (unparsable URL)")
  })
})
