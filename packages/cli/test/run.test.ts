import { Canonical } from "@maka/facts"
import BetterSqlite3 from "better-sqlite3"
import { OpenAiSse, Respond, ScriptedServer } from "@maka/testkit"
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { CLI_SYSTEM_PROMPT } from "../src/index.ts"
import { PRIOR_UNKNOWN_COMPACT } from "../src/internal/compact-command.ts"
import { WRITER_BUSY_HINT } from "../src/internal/store.ts"
import { bin, closedPort, eventLines, folder, maka, NOWHERE_BASE_URL, sessionOf, when, type Folder } from "./support/cli.ts"

const folders: Array<Folder> = []
const servers: Array<ScriptedServer.ScriptedServer> = []
const fresh = () => {
  const created = folder()
  folders.push(created)
  return created
}
const serve = async (script: ReadonlyArray<ScriptedServer.ScriptEntry | Respond.Responder>) => {
  const server = await ScriptedServer.start({ script })
  servers.push(server)
  return server
}
afterEach(async () => {
  for (const server of servers.splice(0)) await server.close()
  for (const created of folders.splice(0)) created.remove()
})

const answer = (text: ReadonlyArray<string>) => Respond.sse(OpenAiSse.response({ text, model: "test-model" }))
const KEY = "sk-test-secret-key-0123456789"

describe("maka run on the offline model", () => {
  it("streams the answer to stdout, tool activity and the session to stderr, and exits 0", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "What is this project?"], { cwd: root })
    expect(result.stderr).toMatch(/^session: [0-9a-f-]{36}$/m)
    expect(result.stderr).toContain('tool: list_files {"path":"."}')
    expect(result.stderr).toContain('tool: read_file {"path":"README.md"}')
    expect(result.stdout).toContain("README.md")
    expect(result.stdout).toContain("Lantern")
    expect(result.code).toBe(0)
  })

  it("uses .maka/events.sqlite under the current directory by default, and MAKA_DB when set", async () => {
    const { root, workspace } = fresh()
    expect((await maka(["run", "--workspace", workspace, "hi"], { cwd: root })).code).toBe(0)
    expect(fs.existsSync(path.join(root, ".maka/events.sqlite"))).toBe(true)
    const other = path.join(root, "elsewhere/log.sqlite")
    expect((await maka(["run", "--workspace", workspace, "hi"], { cwd: root, env: { MAKA_DB: other } })).code).toBe(0)
    expect(fs.existsSync(other)).toBe(true)
  })

  it("uses the current directory as the workspace by default", async () => {
    const { workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--json", "hi"], { cwd: workspace })
    const opening = eventLines(result.stdout)[0]!.event.fact
    expect(opening.configuration.cwd).toBe(workspace)
    expect(fs.existsSync(path.join(workspace, ".maka-workspace.json"))).toBe(true)
  })

  it("reads the message from stdin when it is absent, without the line end that closes it", async () => {
    const { root, workspace, db } = fresh()
    // A byte-order mark that begins it, as some editors write, is no part of it either.
    const input = "\ufefffrom stdin\n\n  second line \r\n"
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--json"], { cwd: root, input })
    expect(result.code).toBe(0)
    const opening = eventLines(result.stdout)[0]!.event.fact
    expect(opening.input.content.text).toBe("from stdin\n\n  second line ")
  })

  it("leaves no folder it made for a log that then failed to open", async () => {
    const { root, workspace } = fresh()
    // A file name longer than a name can be: the folders are made, the open fails.
    const db = path.join(root, "made", "deeper", `${"a".repeat(300)}.sqlite`)
    const result = await maka(["run", "--db", db, "--workspace", workspace, "hi"], { cwd: root })
    expect(result.code).toBe(1)
    expect(result.stderr).toContain("ENAMETOOLONG")
    expect(fs.existsSync(path.join(root, "made"))).toBe(false)
    // A folder that was there before stays.
    fs.mkdirSync(path.join(root, "kept"))
    expect((await maka(["run", "--db", path.join(root, "kept", `${"a".repeat(300)}.sqlite`), "--workspace", workspace, "hi"], { cwd: root })).code).toBe(1)
    expect(fs.existsSync(path.join(root, "kept"))).toBe(true)
  })

  it("refuses a message on stdin as soon as more came than a message holds, reading no further", () => {
    const { root, workspace, db } = fresh()
    // Endless input: it was read to the end (never), or into a string past V8's length (a stack).
    const endless = fs.openSync("/dev/zero", "r")
    try {
      const result = spawnSync(process.execPath, [bin, "run", "--db", db, "--workspace", workspace, "-"], {
        cwd: root,
        stdio: [endless, "pipe", "pipe"],
        encoding: "utf8",
        timeout: 60_000,
      })
      expect([result.status, result.stderr]).toEqual([2, "maka: the message on stdin is over 65536 bytes of UTF-8; a message holds at most 65536\n"])
    } finally {
      fs.closeSync(endless)
    }
    expect(fs.existsSync(db)).toBe(false)
  })

  it("reads the message from stdin when MESSAGE is -", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--json", "-"], { cwd: root, input: "piped in\n" })
    expect(result.code).toBe(0)
    expect(eventLines(result.stdout)[0]!.event.fact.input.content.text).toBe("piped in")
  })

  it("prints every committed event with --json, the same lines maka events --json prints", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--session", "s1", "--json", "hi"], { cwd: root })
    expect(result.code).toBe(0)
    const lines = eventLines(result.stdout)
    expect(lines[0]!.event.fact.kind).toBe("invocation_opened")
    expect(lines.at(-1)!.event.fact.kind).toBe("invocation_ended")
    expect(lines.some((line) => line.event.fact.kind === "model_observed")).toBe(true)
    expect(lines.map((line) => line.sequence)).toEqual(lines.map((_, index) => index + 1))
    const events = await maka(["events", "--db", db, "--session", "s1", "--json"], { cwd: root })
    expect(events.code).toBe(0)
    expect(events.stdout).toBe(result.stdout)
    // A session given with --session is not announced.
    expect(result.stderr).not.toContain("session:")
  })

  it("writes the configuration and context as pure functions of the flags", async () => {
    const { root, workspace, db } = fresh()
    const args = ["run", "--db", db, "--workspace", workspace, "--json", "--context-window", "100000", "--declared-window", "90000", "hi"]
    const first = eventLines((await maka(args, { cwd: root })).stdout)
    const second = eventLines((await maka(args, { cwd: root })).stdout)
    const opening = first[0]!.event.fact as Record<string, any>
    expect(opening["configuration"]).toEqual({
      systemPrompt: { text: CLI_SYSTEM_PROMPT },
      cwd: workspace,
      workspaceIdentity: expect.stringMatching(/^workspace:v1:[0-9a-f-]{36}$/),
      model: { connectionId: "offline:http://offline.maka.invalid/v1", connectionSlug: "offline", model: "maka-offline" },
      toolMode: "direct",
    })
    expect((second[0]!.event.fact as Record<string, any>)["configuration"]).toEqual(opening["configuration"])
    const requests = first.filter((line) => line.event.fact.kind === "model_requested").map((line) => line.event.fact as Record<string, any>)
    expect(requests[0]!["context"]).toEqual({ providerId: "offline", contextWindow: 100000, modelContextWindow: 100000, declaredWindow: 90000 })
    // The same route in every process: the offline model's port is not part of it.
    const secondRequests = second.filter((line) => line.event.fact.kind === "model_requested").map((line) => line.event.fact as Record<string, any>)
    expect(secondRequests[0]!["routeIdentity"]).toBe(requests[0]!["routeIdentity"])
  })

  it("writes the context without windows when no window flag is given", async () => {
    const { root, workspace, db } = fresh()
    const lines = eventLines((await maka(["run", "--db", db, "--workspace", workspace, "--json", "hi"], { cwd: root })).stdout)
    const request = lines.find((line) => line.event.fact.kind === "model_requested")!.event.fact as Record<string, any>
    expect(request["context"]).toEqual({ providerId: "offline" })
  })

  it("offers no tool with --tools none, so the model answers at once", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--tools", "none", "--json", "hi"], { cwd: root })
    expect(result.code).toBe(0)
    expect(eventLines(result.stdout).filter((line) => line.event.fact.kind === "tool_dispatched")).toEqual([])
  })

  it("fails step_limit with exit 1 when --max-steps is spent", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--max-steps", "1", "hi"], { cwd: root })
    expect(result.stderr).toMatch(/^failed: step_limit/m)
    expect(result.code).toBe(1)
  })
})

describe("a log folder that cannot be made", () => {
  it("maka run says which part of --db is not a folder: exit 1, the file untouched", async () => {
    const { root, workspace } = fresh()
    const file = path.join(root, "notes.txt")
    fs.writeFileSync(file, "kept\n")
    const db = path.join(file, "logs", "events.sqlite")
    const result = await maka(["run", "--db", db, "--workspace", workspace, "hi"], { cwd: root })
    expect(result.stderr.trim()).toBe(`maka: store error: cannot make the folder ${path.dirname(db)} of the log: ${file} is not a directory`)
    expect(result.code).toBe(1)
    expect(fs.readFileSync(file, "utf8")).toBe("kept\n")
  })

  it("maka run ends at once with exit 1 where the system refuses a folder under one that exists (/proc)", async () => {
    const { root, workspace } = fresh()
    const db = path.join("/proc", `maka-none-${process.pid}`, "events.sqlite")
    const result = await maka(["run", "--db", db, "--workspace", workspace, "hi"], { cwd: root })
    expect(result.stderr.trim()).toMatch(new RegExp(`^maka: store error: cannot make the folder ${path.dirname(db)} of the log: `))
    expect(result.code).toBe(1)
  })

  it.each(["recover", "resume"])("maka %s says so for the default log under a file named .maka", async (command) => {
    const { root } = fresh()
    const file = path.join(root, ".maka")
    fs.writeFileSync(file, "kept\n")
    const result = await maka([command], { cwd: root })
    expect(result.stderr.trim()).toBe(`maka: store error: cannot make the folder ${file} of the log: ${file} is not a directory`)
    expect(result.code).toBe(1)
    expect(fs.readFileSync(file, "utf8")).toBe("kept\n")
  })
})

describe("maka run refuses bad input with exit 2 and writes nothing", () => {
  interface Case {
    readonly name: string
    readonly args: ReadonlyArray<string>
    readonly env?: Readonly<Record<string, string>>
  }
  const table: ReadonlyArray<readonly [string, ReadonlyArray<string>, Readonly<Record<string, string>>?]> = [
    ["an unknown flag", ["--no-such-flag", "hi"]],
    ["an empty message", [""]],
    ["a blank message", ["  \n "]],
    ["two messages", ["one", "two"]],
    ["--max-steps 0", ["--max-steps", "0", "hi"]],
    ["--max-steps 257", ["--max-steps", "257", "hi"]],
    ["--idle-timeout 0", ["--idle-timeout", "0", "hi"]],
    ["--idle-timeout 301", ["--idle-timeout", "301", "hi"]],
    ["--idle-timeout 1.5", ["--idle-timeout", "1.5", "hi"]],
    ["--tools everything", ["--tools", "everything", "hi"]],
    ["--provider nope", ["--provider", "nope", "hi"]],
    ["a base URL that is not http(s)", ["--base-url", "ftp://example.com", "--model", "m", "hi"]],
    ["a base URL that is not a URL", ["--base-url", "not a url", "--model", "m", "hi"]],
    ["a base URL without a host", ["--base-url", "http:/v1", "--model", "m", "hi"]],
    ["a base URL on a port fetch refuses", ["--base-url", "http://127.0.0.1:6000/v1", "--model", "m", "hi"]],
    ["a base URL with credentials", ["--base-url", `http://user:${KEY}@127.0.0.1:8080/v1`, "--model", "m", "hi"]],
    ["a base URL with a query", ["--base-url", `http://127.0.0.1:8080/v1?key=${KEY}`, "--model", "m", "hi"]],
    ["a base URL with credentials that is not http(s)", ["--base-url", `ftp://user:${KEY}@127.0.0.1/v1`, "--model", "m", "hi"]],
    ["a key given as the base URL", ["--base-url", KEY, "--model", "m", "hi"]],
    ["MAKA_API_KEY with a line break inside", ["--base-url", NOWHERE_BASE_URL, "--model", "m", "hi"], { MAKA_API_KEY: `${KEY}\nX-Other: 1` }],
    ["openai-compatible without a base URL", ["--provider", "openai-compatible", "--model", "m", "hi"]],
    ["anthropic without a model", ["--provider", "anthropic", "--base-url", NOWHERE_BASE_URL, "hi"]],
    ["MAKA_BASE_URL without a model", ["hi"], { MAKA_BASE_URL: NOWHERE_BASE_URL }],
    ["--db and --database-url", ["--database-url", "postgres://x@127.0.0.1:1/x", "hi"]],
    ["--api-key (the key is never a flag)", ["--api-key", "k", "hi"]],
    ["a message over 64 KiB", ["x".repeat(65_537)]],
    ["a session id over 512 characters", ["--session", "s".repeat(513), "hi"]],
    ["a session id with a line break", ["--session", "a\nb", "hi"]],
    ["a blank session id", ["--session", " ", "hi"]],
    ["a flag given twice", ["--session", "a", "--session", "b", "hi"]],
  ]
  const cases: ReadonlyArray<Case> = table.map(([name, args, env]) => ({ name, args, ...(env === undefined ? {} : { env }) }))
  it.each(cases)("$name", async ({ args, env }) => {
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, ...args], { cwd: root, ...(env === undefined ? {} : { env }) })
    expect(result.code).toBe(2)
    expect(result.stderr.trim().split("\n")).toHaveLength(1)
    expect(result.stdout).toBe("")
    expect(fs.existsSync(db)).toBe(false)
    expect(fs.existsSync(path.join(workspace, ".maka-workspace.json"))).toBe(false)
    // A key in the base URL, or given as it, is never echoed.
    expect(result.stderr).not.toContain(KEY)
  })

  it("a --model the offline provider cannot run: exit 2, nothing created", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--model", "gpt-4o", "hi"], { cwd: root })
    expect(result.code).toBe(2)
    expect(result.stderr).toContain("--model gpt-4o needs --base-url URL (or MAKA_BASE_URL)")
    expect(fs.existsSync(db)).toBe(false)
    expect(fs.existsSync(path.join(workspace, ".maka-workspace.json"))).toBe(false)
  })

  it("a blank message on stdin", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace], { cwd: root, input: "   \n" })
    expect(result.code).toBe(2)
    expect(fs.existsSync(db)).toBe(false)
  })

  it("a missing workspace, and a workspace that is a file", async () => {
    const { root, db } = fresh()
    const missing = await maka(["run", "--db", db, "--workspace", path.join(root, "nope"), "hi"], { cwd: root })
    expect(missing.code).toBe(2)
    expect(missing.stderr).toContain("does not exist")
    fs.writeFileSync(path.join(root, "file"), "x")
    const file = await maka(["run", "--db", db, "--workspace", path.join(root, "file"), "hi"], { cwd: root })
    expect(file.code).toBe(2)
    expect(file.stderr).toContain("is not a directory; pass a directory with --workspace")
    expect(fs.existsSync(db)).toBe(false)
  })
})

describe("maka run against an endpoint", () => {
  it("sends the key from MAKA_API_KEY as a bearer token and never shows or stores it", async () => {
    const server = await serve([answer(["Hello ", "from ", "the server."])])
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--model", "test-model", "--tools", "none", "hi"], {
      cwd: root,
      env: { MAKA_BASE_URL: `${server.url}/v1`, MAKA_API_KEY: KEY },
    })
    expect(result.stdout).toBe("Hello from the server.\n")
    expect(result.code).toBe(0)
    expect(server.requests()[0]!.headers["authorization"]).toBe(`Bearer ${KEY}`)
    expect(result.stdout + result.stderr).not.toContain(KEY)
    for (const file of fs.readdirSync(path.dirname(db))) {
      const full = path.join(path.dirname(db), file)
      if (fs.statSync(full).isFile()) expect(fs.readFileSync(full).includes(KEY), file).toBe(false)
    }
    const events = await maka(["events", "--db", db, "--session", sessionOf(result.stderr), "--json"], { cwd: root })
    expect(events.stdout).not.toContain(KEY)
    expect(events.stdout).toContain(`"connectionId":"openai-compatible:${server.url}/v1"`)
  })

  it("keeps MAKA_API_KEY and the log's PGPASSWORD out of run_command's shell, which inherits the rest of the environment", async () => {
    const command = 'echo "key=[$MAKA_API_KEY] pg=[$PGPASSWORD] other=[$MAKA_TEST_INHERITED]"'
    const server = await serve([
      Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "run_command", arguments: [JSON.stringify({ command })] }] })),
      answer(["Ran it."]),
    ])
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--model", "test-model", "--tools", "all", "run it"], {
      cwd: root,
      env: { MAKA_BASE_URL: `${server.url}/v1`, MAKA_API_KEY: KEY, PGPASSWORD: "pg-secret-42", MAKA_TEST_INHERITED: "yes" },
    })
    expect(result.code, result.stderr).toBe(0)
    // What the command printed reached the model in the next request: no key in it.
    const next = server.requests()[1]!.body
    expect(next).toContain("key=[] pg=[] other=[yes]")
    expect(next).not.toContain(KEY)
    const events = await maka(["events", "--db", db, "--session", sessionOf(result.stderr), "--json"], { cwd: root })
    expect(events.stdout).toContain("key=[] pg=[] other=[yes]")
    expect(events.stdout).not.toContain(KEY)
    expect(events.stdout).not.toContain("pg-secret-42")
  })

  it("sends x-api-key and anthropic-version to an Anthropic endpoint", async () => {
    const { AnthropicSse } = await import("@maka/testkit")
    const server = await serve([Respond.sse(AnthropicSse.response({ text: ["Hi ", "there."] }))])
    const { root, workspace, db } = fresh()
    const result = await maka(
      ["run", "--db", db, "--workspace", workspace, "--provider", "anthropic", "--base-url", `${server.url}/v1`, "--model", "claude-test", "--tools", "none", "hi"],
      { cwd: root, env: { MAKA_API_KEY: KEY } },
    )
    expect(result.stderr).not.toContain(KEY)
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("Hi there.\n")
    const headers = server.requests()[0]!.headers
    expect(headers["x-api-key"]).toBe(KEY)
    expect(headers["anthropic-version"]).toBe("2023-06-01")
  })

  it("never follows a provider's redirect: the key and the prompt stay on the configured route (exit 1)", async () => {
    const { AnthropicSse } = await import("@maka/testkit")
    const elsewhere = await serve([Respond.sse(AnthropicSse.response({ text: ["stolen"] }))])
    const server = await serve([Respond.json(307, {}, { location: `${elsewhere.url}/v1/messages` })])
    const { root, workspace, db } = fresh()
    const result = await maka(
      ["run", "--db", db, "--workspace", workspace, "--provider", "anthropic", "--base-url", `${server.url}/v1`, "--model", "claude-test", "--tools", "none", "hi"],
      { cwd: root, env: { MAKA_API_KEY: KEY } },
    )
    expect(result.code).toBe(1)
    expect(result.stderr).toContain("failed: model_provider: Provider: HTTP 307: the provider answered with a redirect, which is not followed")
    expect(result.stderr).not.toContain(KEY)
    expect(server.requests()).toHaveLength(1)
    expect(elsewhere.requests()).toHaveLength(0)
  })

  it("names each retry by its own attempt's failure: a stream that broke after a rate limit is not the rate limit", async () => {
    const server = await serve([
      Respond.json(429, Respond.openAiError("slow down", { type: "rate_limit_error", code: "rate_limit_exceeded" }), { "retry-after-ms": "100" }),
      Respond.dropAfter([OpenAiSse.text("partial ")]),
      answer(["after ", "the retries"]),
    ])
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "test-model", "--tools", "none", "hi"], {
      cwd: root,
    })
    expect(result.code).toBe(0)
    expect(result.stderr.split("\n").filter((line) => line.startsWith("retrying"))).toEqual([
      "retrying in 0.1 s: rate_limit",
      "retrying in 2 s: the streamed response failed",
    ])
  })

  it("names a retry by its class and requested wait also when the error body is larger than the adapter reads", async () => {
    const body = Respond.openAiError(`slow down ${"x".repeat(100_000)}`, { type: "rate_limit_error", code: "rate_limit_exceeded" })
    const server = await serve([Respond.json(429, body, { "retry-after": "2" }), answer(["after ", "the retry"])])
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "test-model", "--tools", "none", "hi"], {
      cwd: root,
    })
    expect(result.stderr.split("\n").filter((line) => line.startsWith("retrying"))).toEqual(["retrying in 2 s: rate_limit"])
    expect(result.stdout).toBe("after the retry\n")
    expect(result.code).toBe(0)
  })

  it("reads MAKA_OFFLINE_DELAY_MS only for the offline model it paces", async () => {
    const server = await serve([answer(["served"])])
    const { root, workspace, db } = fresh()
    const env = { MAKA_OFFLINE_DELAY_MS: "20000" }
    const served = await maka(["run", "--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "test-model", "--tools", "none", "hi"], {
      cwd: root,
      env,
    })
    expect([served.code, served.stdout]).toEqual([0, "served\n"])
    const offline = await maka(["run", "--db", db, "--workspace", workspace, "--tools", "none", "hi"], { cwd: root, env })
    expect([offline.code, offline.stderr.trim()]).toEqual([2, "maka: MAKA_OFFLINE_DELAY_MS must be an integer in 0..10000"])
  })

  it("shows a waiting retry with its delay and reason, then completes", async () => {
    const server = await serve([
      Respond.json(429, Respond.openAiError("slow down", { type: "rate_limit_error", code: "rate_limit_exceeded" }), { "retry-after": "1" }),
      answer(["after ", "the retry"]),
    ])
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "test-model", "--tools", "none", "hi"], {
      cwd: root,
    })
    expect(result.stderr).toContain("retrying in 1 s: rate_limit")
    expect(result.stdout).toBe("after the retry\n")
    expect(result.code).toBe(0)
    // The inspector shows the retry, and the retried attempt's input is the one recorded.
    const session = sessionOf(result.stderr)
    const timeline = await maka(["inspect", "--db", db, "--session", session], { cwd: root })
    expect(timeline.stdout).toMatch(/step 1 interrupted: retryable_failure \(retried\)/)
    expect(timeline.stdout).toMatch(/step 2 completed/)
    const step = await maka(["inspect", "--db", db, "--session", session, "--step", "2"], { cwd: root })
    expect(step.stdout).toMatch(/^input digest: \S+ matches the rebuilt input \(tools none\)$/m)
    expect(step.code).toBe(0)
  })

  it("fails model_provider with exit 1 and the class on stderr when the provider refuses", async () => {
    const server = await serve([Respond.json(400, Respond.openAiError("bad request body", { type: "invalid_request_error" }))])
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "test-model", "hi"], {
      cwd: root,
      env: { MAKA_API_KEY: KEY },
    })
    expect(result.stderr).toMatch(/^failed: model_provider: /m)
    expect(result.stderr).not.toContain(KEY)
    expect(result.code).toBe(1)
  })

  it("shows each retry of an endpoint that cannot be reached, and SIGINT cancels with exit 130", async () => {
    const { root, workspace, db } = fresh()
    const baseUrl = `http://127.0.0.1:${await closedPort()}/v1`
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--base-url", baseUrl, "--model", "m", "hi"], {
      cwd: root,
      onOutput: when((output) => output.stderr.includes("retrying in"), (child) => child.kill("SIGINT")),
    })
    expect(result.stderr).toMatch(/retrying in \d+(\.\d)? s: network/)
    expect(result.stderr).toMatch(/^cancelled$/m)
    expect(result.code).toBe(130)
    const events = eventLines((await maka(["events", "--db", db, "--session", sessionOf(result.stderr), "--json"], { cwd: root })).stdout)
    expect(events.at(-1)!.event.fact).toEqual({ kind: "invocation_ended", outcome: { kind: "cancelled", source: "runtime_cancellation" } })
  })
})

describe("timeouts and long tool calls", () => {
  it("--idle-timeout bounds a silent model request: failed model_timeout, exit 1", async () => {
    const server = await serve([Respond.hang()])
    const { root, workspace, db } = fresh()
    const started = performance.now()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "m", "--idle-timeout", "1", "hi"], {
      cwd: root,
    })
    expect(result.stderr).toMatch(/^failed: model_timeout/m)
    expect(result.code).toBe(1)
    expect(performance.now() - started).toBeLessThan(30_000)
  })

  it("shows progress while a tool call runs long", async () => {
    const server = await serve([
      Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "run_command", arguments: ['{"command":"sleep 6"}'] }] })),
      answer(["slept"]),
    ])
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "m", "--tools", "all", "nap"], {
      cwd: root,
    })
    expect(result.stderr).toContain('tool: run_command {"command":"sleep 6"}')
    expect(result.stderr).toMatch(/^tool: run_command still running \(\d+ s\)$/m)
    expect(result.stderr).toMatch(/^tool: run_command done \(\d+ ms\)$/m)
    expect(result.stdout).toBe("slept\n")
    expect(result.code).toBe(0)
  })
})

describe("a log its user cannot write", () => {
  it("is refused before anything is opened, naming the file or the folder to change (exit 1)", async () => {
    const { root, workspace, db } = fresh()
    expect((await maka(["run", "--db", db, "--workspace", workspace, "hi"], { cwd: root })).code).toBe(0)
    const unprivileged = (args: ReadonlyArray<string>) => maka(args, { cwd: root, withoutPrivileges: true })
    fs.chmodSync(db, 0o444)
    const readOnlyFile = await unprivileged(["run", "--db", db, "--workspace", workspace, "hi"])
    expect(readOnlyFile.stderr).toBe(`maka: store error: io: ${db} is read-only; a writer needs to write it\n`)
    expect(readOnlyFile.code).toBe(1)
    fs.chmodSync(db, 0o644)
    fs.chmodSync(root, 0o555)
    try {
      const writer = await unprivileged(["run", "--db", db, "--workspace", workspace, "hi"])
      expect(writer.stderr).toBe(
        `maka: store error: io: ${db}: its folder ${root} is not writable; a writer needs to make the log's -wal, -shm and lock files there\n`,
      )
      expect(writer.code).toBe(1)
      const reader = await unprivileged(["sessions", "--db", db])
      expect(reader.stderr).toBe(
        `maka: store error: io: ${db}: reading the log needs its folder ${root} to be writable; SQLite makes the log's -wal and -shm files there\n`,
      )
      expect(reader.code).toBe(1)
      // With the log open elsewhere its -wal and -shm are there, and a reader needs nothing more.
      const open = new BetterSqlite3(db)
      try {
        expect(open.prepare("SELECT count(*) AS n FROM event_log").get()).toMatchObject({ n: expect.any(Number) })
        expect(fs.existsSync(`${db}-wal`) && fs.existsSync(`${db}-shm`)).toBe(true)
        const live = await unprivileged(["sessions", "--db", db])
        expect(live.stderr).toBe("")
        expect(live.code).toBe(0)
      } finally {
        open.close()
      }
    } finally {
      fs.chmodSync(root, 0o755)
    }
    // The log is as it was: one session, readable again.
    const sessions = await maka(["sessions", "--db", db], { cwd: root })
    expect(sessions.stdout.trim().split("\n")).toHaveLength(1)
    expect(sessions.code).toBe(0)
  })
})

describe("a log kept in the workspace", () => {
  it("is never written by write_file: the calls fail, the run goes on and the log keeps its sessions", async () => {
    const server = await serve([
      Respond.sse(
        OpenAiSse.response({
          toolCalls: [
            { id: "call-1", name: "write_file", arguments: ['{"path":".maka/events.sqlite","content":"oops"}'] },
            { id: "call-2", name: "write_file", arguments: ['{"path":".maka/events.sqlite-wal","content":"oops"}'] },
          ],
        }),
      ),
      answer(["kept"]),
    ])
    const { workspace } = fresh()
    // The default log, .maka/events.sqlite under the current directory: here the workspace.
    const earlier = await maka(["run", "--session", "earlier", "hi"], { cwd: workspace })
    expect(earlier.code).toBe(0)
    const result = await maka(["run", "--session", "w", "--base-url", `${server.url}/v1`, "--model", "m", "--tools", "write", "go"], { cwd: workspace })
    const refusals = result.stderr.split("\n").filter((line) => line.startsWith("tool: write_file failed"))
    expect(refusals.map((line) => line.replace(/ \(\d+ ms\)/, ""))).toEqual([
      "tool: write_file failed: .maka/events.sqlite: a file of the event log, never written by a tool",
      "tool: write_file failed: .maka/events.sqlite-wal: a file of the event log, never written by a tool",
    ])
    expect(result.stdout).toBe("kept\n")
    expect(result.code).toBe(0)
    const sessions = await maka(["sessions"], { cwd: workspace })
    expect(sessions.stdout).toMatch(/^earlier\s/m)
    expect(sessions.stdout).toMatch(/^w\s/m)
    expect(sessions.code).toBe(0)
  })
})

describe("how a command ended", () => {
  it("a run_command line says exited N, killed by SIGNAL or timed out where the command did not exit 0", async () => {
    const server = await serve([
      Respond.sse(
        OpenAiSse.response({
          toolCalls: [
            { id: "call-1", name: "run_command", arguments: ['{"command":"exit 3"}'] },
            { id: "call-2", name: "run_command", arguments: ['{"command":"kill -TERM $$"}'] },
            { id: "call-3", name: "run_command", arguments: ['{"command":"sleep 30","timeoutSeconds":1}'] },
            { id: "call-4", name: "run_command", arguments: ['{"command":"true"}'] },
          ],
        }),
      ),
      answer(["seen"]),
    ])
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "m", "--tools", "all", "go"], {
      cwd: root,
    })
    const ends = result.stderr.split("\n").filter((line) => /^tool: run_command [a-z]/.test(line) && !line.includes("{") && !line.includes("still running"))
    expect(ends.map((line) => line.replace(/ \(\d+ ms\)$/, "")).sort()).toEqual([
      "tool: run_command done",
      "tool: run_command exited 3",
      "tool: run_command killed by SIGTERM",
      "tool: run_command timed out, killed",
    ])
    expect(result.stdout).toBe("seen\n")
    expect(result.code).toBe(0)
  })
})

describe("signals and store conditions", () => {
  const hanging = async () => serve([Respond.hang()])

  it("SIGINT while the model streams cancels: terminal cancelled, exit 130", async () => {
    const server = await hanging()
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "m", "--json", "hi"], {
      cwd: root,
      onOutput: when((output) => output.stdout.includes('"kind":"model_requested"'), (child) => child.kill("SIGINT")),
    })
    expect(result.code).toBe(130)
    const lines = eventLines(result.stdout)
    expect(lines.at(-1)!.event.fact).toEqual({ kind: "invocation_ended", outcome: { kind: "cancelled", source: "runtime_cancellation" } })
  })

  it.each(["SIGINT", "SIGTERM", "SIGHUP"] as const)(
    "%s while the message is still read from stdin ends with exit 130 and nothing made",
    async (signal) => {
      const { root, db } = fresh()
      // No MESSAGE and stdin left open: maka waits for stdin's end, before any handler of the run's own.
      const child = spawn(process.execPath, [bin, "run", "--db", db], { cwd: root, stdio: ["pipe", "pipe", "pipe"] })
      let stderr = ""
      child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
      const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
        child.on("close", (code, received) => resolve({ code, signal: received })),
      )
      await new Promise((resolve) => setTimeout(resolve, 2_000))
      child.kill(signal)
      expect(await closed).toEqual({ code: 130, signal: null })
      expect(stderr).toBe("")
      expect(fs.existsSync(db)).toBe(false)
    },
    30_000,
  )

  it("a signal after the run ended, while its output still drains, keeps the run's exit code and every line", async () => {
    // Twelve deltas of 30 KB: far more than a pipe holds, so the output waits for its reader.
    const server = await serve([answer(Array.from({ length: 12 }, (_, index) => String(index % 10).repeat(30_000)))])
    const { root, workspace, db } = fresh()
    const child = spawn(
      process.execPath,
      [bin, "run", "--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "m", "--session", "late", "--json", "hi"],
      { cwd: root, stdio: ["ignore", "pipe", "pipe"] },
    )
    let stdout = ""
    let stderr = ""
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
    const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.on("close", (code, received) => resolve({ code, signal: received })),
    )
    // stdout is not read until the log holds the run's terminal.
    for (let waited = 0; ; waited += 100) {
      const events = await maka(["events", "--db", db, "--session", "late", "--json"], { cwd: root })
      if (events.stdout.includes('"kind":"invocation_ended"')) break
      if (waited > 20_000) throw new Error(`no terminal: ${events.stderr}`)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    child.kill("SIGTERM")
    await new Promise((resolve) => setTimeout(resolve, 500))
    expect(child.exitCode).toBeNull()
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
    expect(await closed).toEqual({ code: 0, signal: null })
    const facts = eventLines(stdout).map((line) => line.event.fact)
    expect(facts.at(-1)).toEqual({ kind: "invocation_ended", outcome: { kind: "completed" } })
    const deltas = facts.filter((fact) => fact.kind === "model_observed" && fact.event.kind === "part_delta")
    expect(deltas.map((fact) => fact.event.text).join("").length).toBe(12 * 30_000)
    expect(stderr).toContain("maka: the command has ended; its output is still being written (signal again to stop now)\n")
  }, 60_000)

  it("SIGHUP (the terminal went away) cancels as SIGINT does: terminal cancelled, exit 130, the session usable", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--session", "h", "--json", "What is this project?"], {
      cwd: root,
      env: { MAKA_OFFLINE_DELAY_MS: "50" },
      onOutput: when((output) => output.stdout.includes('"kind":"tool_dispatched"'), (child) => child.kill("SIGHUP")),
    })
    expect(result.signal).toBeNull()
    expect(result.code, result.stderr).toBe(130)
    const facts = eventLines(result.stdout).map((line) => line.event.fact)
    // The dispatched tool finished and settled before the terminal: nothing is left unknown.
    expect(facts.filter((fact) => fact.kind === "tool_settled")).toHaveLength(1)
    expect(facts.at(-1)).toEqual({ kind: "invocation_ended", outcome: { kind: "cancelled", source: "runtime_cancellation" } })
    const next = await maka(["run", "--db", db, "--workspace", workspace, "--session", "h", "again"], { cwd: root })
    expect(next.code, next.stderr).toBe(0)
  })

  // A terminal's Ctrl-C, or a service manager's stop, signals the whole process group: the log's
  // lease keeper too, which must not drop the lease before the run's terminal is written.
  it.each([
    ["SIGINT", 130, "cancelled"],
    ["SIGTERM", 75, "handoff_paused"],
  ] as const)("%s sent to maka's whole process group ends the run as it does sent to maka alone (exit %i)", async (signal, code, outcome) => {
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--session", "g", "--json", "What is this project?"], {
      cwd: root,
      group: true,
      env: { MAKA_OFFLINE_DELAY_MS: "50" },
      onOutput: when((output) => output.stdout.includes('"kind":"model_requested"'), (child) => process.kill(-child.pid!, signal)),
    })
    expect(result.stderr).not.toContain("lease keeper")
    expect(result.code, result.stderr).toBe(code)
    expect(eventLines(result.stdout).at(-1)!.event.fact).toMatchObject({ kind: "invocation_ended", outcome: { kind: outcome } })
    const sessions = await maka(["sessions", "--db", db], { cwd: root })
    expect(sessions.stdout).toMatch(signal === "SIGINT" ? /^g {2}idle / : /^g {2}paused \(handoff\) /)
  })

  it("SIGTERM waits for the model attempt in flight to hand off; a second SIGTERM cancels (exit 130)", async () => {
    const server = await hanging()
    const { root, workspace, db } = fresh()
    let terms = 0
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "m", "--json", "hi"], {
      cwd: root,
      onOutput: (child, output) => {
        if (terms === 0 && output.stdout.includes('"kind":"model_requested"')) {
          terms = 1
          child.kill("SIGTERM")
        } else if (terms === 1 && output.stderr.includes("handing off at the next step boundary")) {
          terms = 2
          child.kill("SIGTERM")
        }
      },
    })
    expect(result.code).toBe(130)
    expect(eventLines(result.stdout).at(-1)!.event.fact).toEqual({
      kind: "invocation_ended",
      outcome: { kind: "cancelled", source: "runtime_cancellation" },
    })
  })

  it("a second process on a live log fails with exit 1 and says another writer holds it", async () => {
    const server = await hanging()
    const { root, workspace, db } = fresh()
    // The refused run's workspace is a folder no run used yet: it is left without a marker.
    const elsewhere = path.join(root, "elsewhere")
    fs.mkdirSync(elsewhere)
    let second: Promise<readonly [Awaited<ReturnType<typeof maka>>, Awaited<ReturnType<typeof maka>>]> | undefined
    const first = await maka(["run", "--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "m", "--json", "hi"], {
      cwd: root,
      onOutput: when(
        (output) => output.stdout.includes('"kind":"model_requested"'),
        (child) => {
          second = Promise.all([
            maka(["run", "--db", db, "--workspace", elsewhere, "hi"], { cwd: root }),
            maka(["recover", "--db", db], { cwd: root }),
          ]).finally(() => child.kill("SIGINT"))
        },
      ),
    })
    expect(first.code).toBe(130)
    const [busy, recovering] = await second!
    expect(busy.code).toBe(1)
    expect(busy.stderr).toContain("another writer holds the log")
    expect(fs.readdirSync(elsewhere)).toEqual([])
    // maka recover says why it has nothing to do beside a live writer.
    expect(recovering.code).toBe(1)
    // The holder is named: the first command's process.
    const named = `maka: store error: another writer holds the log ${db} (process `
    expect(recovering.stderr.startsWith(named)).toBe(true)
    const rest = recovering.stderr.slice(named.length)
    expect(rest).toMatch(/^[1-9][0-9]*\); /)
    expect(rest.endsWith(`; ${WRITER_BUSY_HINT}\n`)).toBe(true)
  })
})

describe("reconciliation", () => {
  it("the next writing command says what opening the log sealed: a run a killed process left open", async () => {
    const server = await serve([
      Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "run_command", arguments: ['{"command":"sleep 10"}'] }] })),
    ])
    const { root, workspace, db } = fresh()
    const base = ["--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "m", "--session", "k1"]
    const killed = await maka(["run", ...base, "--tools", "all", "--json", "run it"], {
      cwd: root,
      onOutput: when((output) => output.stdout.includes('"kind":"tool_dispatched"'), (child) => child.kill("SIGKILL")),
    })
    expect(killed.signal).toBe("SIGKILL")
    const invocationId = (JSON.parse(killed.stdout.split("\n")[0]!) as { event: { invocation: { invocationId: string } } }).event.invocation.invocationId
    const next = await maka(["run", ...base, "next"], { cwd: root })
    expect(next.code).toBe(3)
    expect(next.stderr.split("\n")[0]).toBe(`recovered: session k1: run ${invocationId}, left open by a writer that no longer holds the log, sealed outcome_unknown`)
    // Sealed once: the command after it has nothing to say about recovery.
    const again = await maka(["run", ...base, "next"], { cwd: root })
    expect(again.code).toBe(3)
    expect(again.stderr).not.toContain("recovered:")
  })

  it("a run killed during a tool call leaves outcome_unknown; the next message exits 3 until --allow-prior-unknown", async () => {
    const server = await serve([
      Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "run_command", arguments: ['{"command":"sleep 10"}'] }] })),
      answer(["noted"]),
    ])
    const { root, workspace, db } = fresh()
    const base = ["--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "m", "--session", "r1"]
    const killed = await maka(["run", ...base, "--tools", "all", "--json", "run it"], {
      cwd: root,
      onOutput: when((output) => output.stdout.includes('"kind":"tool_dispatched"'), (child) => child.kill("SIGKILL")),
    })
    expect(killed.signal).toBe("SIGKILL")
    const recovered = await maka(["recover", "--db", db], { cwd: root })
    expect(recovered.code).toBe(0)
    expect(recovered.stdout).toMatch(/^r1 [0-9a-f-]{36} outcome_unknown$/m)
    expect(recovered.stdout).toContain("recovered 1 invocation")
    const sessions = await maka(["sessions", "--db", db], { cwd: root })
    expect(sessions.stdout).toMatch(/^r1 {2}needs reconciliation /m)
    // No compaction covers an unknown outcome: compact says so, and does not send the user to run.
    const compacted = await maka(["compact", ...base], { cwd: root })
    expect(compacted.stderr).toBe(`failed: reconciliation_required: ${PRIOR_UNKNOWN_COMPACT}\n`)
    expect(compacted.code).toBe(3)
    const refused = await maka(["run", ...base, "next"], { cwd: root })
    expect(refused.stderr).toMatch(/reconciliation_required/)
    // The way out names the flag, not the engine's option.
    expect(refused.stderr).toContain("--allow-prior-unknown")
    expect(refused.stderr).not.toContain("allowPriorUnknown")
    expect(refused.code).toBe(3)
    const allowed = await maka(["run", ...base, "--allow-prior-unknown", "next"], { cwd: root })
    expect(allowed.stdout).toBe("noted\n")
    expect(allowed.code).toBe(0)
    // The outcome stays unknown: sessions says so, and the next plain message is refused again.
    const after = await maka(["sessions", "--db", db], { cwd: root })
    expect(after.stdout).toMatch(/^r1 {2}needs reconciliation /m)
    const again = await maka(["run", ...base, "plain"], { cwd: root })
    expect(again.code).toBe(3)
    // The inspector rebuilds the admitted run's input with its notice, and the digest matches.
    const inspected = await maka(["inspect", "--db", db, "--session", "r1", "--step", "2"], { cwd: root })
    expect(inspected.code).toBe(0)
    expect(inspected.stdout).toContain("Prior execution was interrupted after these tools were dispatched.")
    expect(inspected.stdout.trim().split("\n").at(-1)).toMatch(/^input digest: sha256:[0-9a-f]{64} matches the rebuilt input \(tools read\)$/)
  })
})

describe("a history --allow-prior-unknown does not cover", () => {
  it("is refused without sending the user to the flag they gave, and says what else it can be", async () => {
    const server = await serve([
      Respond.sse(OpenAiSse.response({ toolCalls: [{ id: "call-1", name: "list_files", arguments: ["{}"] }] })),
      answer(["listed"]),
    ])
    const { root, workspace, db } = fresh()
    const base = ["--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "m", "--session", "h1"]
    expect((await maka(["run", ...base, "list it"], { cwd: root })).code).toBe(0)
    // A settlement removed by hand: its dispatch is left without one, which no flag covers.
    const database = new BetterSqlite3(db)
    database.exec(
      "DELETE FROM tool_result_payloads WHERE event_id IN (SELECT event_id FROM event_log WHERE kind = 'tool_settled'); DELETE FROM event_log WHERE kind = 'tool_settled'",
    )
    database.close()
    const plain = await maka(["run", ...base, "again"], { cwd: root })
    expect(plain.code).toBe(3)
    expect(plain.stderr).toContain("send it with `maka run --allow-prior-unknown`")
    const allowed = await maka(["run", ...base, "--allow-prior-unknown", "again"], { cwd: root })
    expect(allowed.code).toBe(3)
    expect(allowed.stderr).not.toContain("send it with")
    expect(allowed.stderr).toContain(
      "--allow-prior-unknown only lets a message follow a run sealed `outcome_unknown`; this history holds another unresolved step: a run left open (`maka recover` seals it) or rows changed by hand (`maka events --session ID` shows them)",
    )
  })
})

// docs/cli.md §10.1: each line is {"sequence":N,"event":{…}} in that order, the event canonical (sorted keys).
describe("event lines", () => {
  it("put the sequence first and the event in canonical form", async () => {
    const { root, workspace, db } = fresh()
    const result = await maka(["run", "--db", db, "--workspace", workspace, "--tools", "none", "--json", "hi"], { cwd: root })
    const lines = result.stdout.trim().split("\n")
    expect(lines.length).toBeGreaterThan(2)
    lines.forEach((line, index) => {
      const parsed = JSON.parse(line) as { sequence: number; event: unknown }
      expect(Object.keys(parsed)).toEqual(["sequence", "event"])
      expect(parsed.sequence).toBe(index + 1)
      expect(line).toBe(`{"sequence":${parsed.sequence},"event":${Canonical.stringify(parsed.event)}}`)
    })
  })
})

// docs/cli.md §10.1: the page shows the model's outputs: thinking marked as such, and the text an
// interrupted request showed before it ended (never part of the history).
describe("maka inspect --html on outputs that are not plain answers", () => {
  it("marks thinking in an output, and shows the text a failed request streamed before it ended", async () => {
    const server = await serve([
      Respond.sse(OpenAiSse.response({ reasoning: ["Weighing it."], text: ["Forty-two."] })),
      Respond.sse([
        OpenAiSse.role(),
        OpenAiSse.text("partial answer"),
        OpenAiSse.error("The request is invalid.", { type: "invalid_request_error", code: "invalid_request" }),
      ]),
    ])
    const { root, workspace, db } = fresh()
    const base = ["--db", db, "--workspace", workspace, "--base-url", `${server.url}/v1`, "--model", "m", "--tools", "none", "--session", "o1"]
    expect((await maka(["run", ...base, "first"], { cwd: root })).code).toBe(0)
    const failed = await maka(["run", ...base, "second"], { cwd: root })
    expect(failed.stdout).toContain("partial answer")
    expect(failed.code).toBe(1)
    const page = path.join(root, "page.html")
    expect((await maka(["inspect", "--db", db, "--session", "o1", "--html", page], { cwd: root })).code).toBe(0)
    const html = fs.readFileSync(page, "utf8")
    expect(html).toContain("<pre>(thinking) Weighing it.\nForty-two.</pre>")
    expect(html).toContain(
      "<p>No output: the request did not complete. The text it showed before it ended (never part of the history):</p><pre>partial answer</pre>",
    )
  })
})
