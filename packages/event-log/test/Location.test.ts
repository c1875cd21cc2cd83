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

  it("keeps where the server is and which database, as a socket: URL or a ?host= names them", () => {
    expect(redactUrl("socket:/tmp/pg?db=agents&port=5433")).toBe("socket:/tmp/pg?db=agents&port=5433")
    expect(redactUrl("postgres:///agents?host=/tmp/pg&port=5433&user=maka&password=hunter2")).toBe(
      "postgres:///agents?host=/tmp/pg&port=5433&user=maka&password=***",
    )
  })

  it("hides a password holding an unescaped slash, which a parser would read as a host and a path", () => {
    expect(redactUrl("postgres://maka:123/hunter2@db.example:5432/agents")).toBe("postgres://***@db.example:5432/agents")
    // A port that is no number: no URL at all, and nothing of it shown.
    expect(redactUrl("postgres://maka:hunt/er@2@db.example/agents")).toBe("postgres (unparsable URL)")
    expect(redactUrl("postgres://u:p@ss/word@db.example/agents?sslmode=require")).toBe("postgres://***@db.example/agents?sslmode=require")
  })

  it("keeps the host of a URL whose query holds an @", () => {
    expect(redactUrl("postgres://db.example:5432/maka?application_name=ci@runner")).toBe(
      "postgres://db.example:5432/maka?application_name=ci@runner",
    )
    expect(redactUrl("postgres://db.example:5432/db?password=x@y")).toBe("postgres://db.example:5432/db?password=***")
  })

  it("names an unparsable URL without echoing it", () => {
    expect(redactUrl("postgres://maka:hunter2@[bad")).toBe("postgres (unparsable URL)")
  })
})
