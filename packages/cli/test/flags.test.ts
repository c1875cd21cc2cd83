import { describe, expect, it } from "vitest"
import { Limits } from "@maka/facts"
import * as Flags from "../src/internal/flags.ts"

/** The message of the usage error `check` throws, or `undefined` when it throws none. */
const usageError = (check: () => unknown): string | undefined => {
  try {
    check()
    return undefined
  } catch (error) {
    expect(error).toBeInstanceOf(Flags.UsageError)
    return (error as Flags.UsageError).message
  }
}

/** The usage error `parse` throws for a command line, or `undefined` when it parses. */
const refusal = (command: Flags.CommandName, ...args: ReadonlyArray<string>): string | undefined =>
  usageError(() => Flags.parse(command, args))

describe("the refusals of the flag parser (docs/cli.md §10.1)", () => {
  it("names the flag and what to write instead, on one line", () => {
    const cases: ReadonlyArray<readonly [Flags.CommandName, ReadonlyArray<string>, string]> = [
      ["run", ["--bogus", "hi"], "unknown flag '--bogus' (an argument that starts with '-' goes after '--'); see maka run --help"],
      ["recover", ["--json"], "unknown flag '--json'; see maka recover --help"],
      // A misspelt flag of the command is named with the one it most likely meant.
      ["run", ["hi", "--sesion", "s"], "unknown flag '--sesion'; did you mean '--session'? see maka run --help"],
      ["sessions", ["--jsn"], "unknown flag '--jsn'; did you mean '--json'? see maka sessions --help"],
      ["run", ["--max-step=3", "hi"], "unknown flag '--max-step'; did you mean '--max-steps'? see maka run --help"],
      ["sessions", ["extra"], "unexpected argument 'extra': maka sessions takes none; see maka sessions --help"],
      ["run", ["--model"], "--model needs a value; see maka run --help"],
      ["events", ["--session"], "--session needs a value; see maka events --help"],
      ["run", ["--json=yes", "hi"], "--json takes no value; see maka run --help"],
      [
        "run",
        ["--context-window", "-5", "hi"],
        "--context-window needs a value (one that starts with '-' is written --context-window=VALUE); see maka run --help",
      ],
    ]
    for (const [command, args, message] of cases) expect(refusal(command, ...args), args.join(" ")).toBe(message)
  })

  it("refuses a flag given twice instead of taking its last value", () => {
    expect(refusal("run", "--session", "a", "--session", "b", "hi")).toBe("--session is given twice; give it once")
    expect(refusal("inspect", "--step", "1", "--session", "s", "--step=2")).toBe("--step is given twice; give it once")
    expect(refusal("run", "--json", "--json", "hi")).toBe("--json is given twice; give it once")
    // After '--' it is the message.
    expect(refusal("run", "--session", "a", "--", "--session")).toBeUndefined()
  })

  it("refuses an empty value of any flag that takes one, for every command: an empty value is never the flag left out", () => {
    for (const [command, spec] of Object.entries(Flags.COMMANDS) as ReadonlyArray<[Flags.CommandName, (typeof Flags.COMMANDS)[Flags.CommandName]]>) {
      for (const flag of spec.flags) {
        if (Flags.FLAGS[flag].type !== "string") continue
        const message = `--${flag} needs a value, not an empty one; leave the flag out for its default`
        expect(refusal(command, `--${flag}`, ""), `${command} --${flag} ""`).toBe(message)
        expect(refusal(command, `--${flag}=`), `${command} --${flag}=`).toBe(message)
      }
    }
    // A message may be empty as far as the parser goes (the command refuses it with its own words).
    expect(refusal("run", "--session", "s", "")).toBeUndefined()
  })

  it("refuses a --session longer than the log's ids, for every command that takes one", () => {
    expect(Flags.MAX_SESSION_ID).toBe(Limits.MAX_ID_UTF16)
    const longest = "s".repeat(Flags.MAX_SESSION_ID)
    for (const command of ["run", "chat", "compact", "events", "inspect", "resume"] as const) {
      expect(refusal(command, "--session", longest), command).toBeUndefined()
      expect(refusal(command, "--session", `${longest}s`), command).toBe(`--session must be at most 512 UTF-16 code units, got 513`)
    }
  })

  it("refuses a new turn's --session that is blank or holds a control character", () => {
    const problem = (value: string) => {
      try {
        Flags.newTurnSession(value)
        return undefined
      } catch (error) {
        return (error as Error).message
      }
    }
    expect(problem("a\nb")).toBe("--session must not contain a line break or another control character")
    expect(problem("a\u0001b")).toBe("--session must not contain a line break or another control character")
    expect(problem("a\u009bb")).toBe("--session must not contain a line break or another control character")
    expect(problem("  ")).toBe("--session must not be blank")
    expect(problem("release 1.2 — ünïcode")).toBeUndefined()
  })

  it("refuses a --database-url that does not parse, without echoing it", () => {
    const secret = "postgres://user:hunter2@[::1"
    let message = ""
    try {
      Flags.database({ "database-url": secret }, {}, "/")
    } catch (error) {
      message = (error as Error).message
    }
    expect(message).toBe("--database-url is not a valid URL (postgres://USER@HOST:PORT/DATABASE)")
    expect(Flags.database({ "database-url": "postgres://user@localhost:5432/maka" }, {}, "/")).toEqual({
      kind: "postgres",
      url: "postgres://user@localhost:5432/maka",
    })
    // The socket: form the log takes too; text of no URL form is refused naming the forms.
    expect(Flags.database({ "database-url": "socket:/tmp/pg?db=maka" }, {}, "/")).toEqual({ kind: "postgres", url: "socket:/tmp/pg?db=maka" })
    expect(() => Flags.database({ "database-url": "/tmp/pg maka" }, {}, "/")).toThrow("--database-url must be a postgres://, postgresql:// or socket: URL")
  })

  it("takes the database a flag names over both variables; refuses both flags, or no flag and both variables", () => {
    const url = "postgres://user@localhost:5432/maka"
    const both = { MAKA_DB: "env.sqlite", MAKA_DATABASE_URL: url }
    const problem = (values: Parameters<typeof Flags.database>[0], environment: Parameters<typeof Flags.database>[1]) => {
      try {
        return Flags.database(values, environment, "/w")
      } catch (error) {
        return (error as Error).message
      }
    }
    expect(problem({ db: "flag.sqlite" }, { MAKA_DATABASE_URL: url })).toEqual({ kind: "sqlite", path: "/w/flag.sqlite" })
    expect(problem({ "database-url": url }, { MAKA_DB: "env.sqlite" })).toEqual({ kind: "postgres", url })
    expect(problem({ db: "flag.sqlite" }, both)).toEqual({ kind: "sqlite", path: "/w/flag.sqlite" })
    expect(problem({}, { MAKA_DB: "env.sqlite" })).toEqual({ kind: "sqlite", path: "/w/env.sqlite" })
    expect(problem({}, { MAKA_DATABASE_URL: url })).toEqual({ kind: "postgres", url })
    expect(problem({ db: "flag.sqlite", "database-url": url }, {})).toBe("pass either --db or --database-url, not both")
    expect(problem({}, both)).toBe("MAKA_DB and MAKA_DATABASE_URL are both set: unset one, or pass --db or --database-url")
  })

  it("takes an argument that starts with '-' after '--', and a value that does with '='", () => {
    expect(refusal("run", "--", "-x is a message")).toBeUndefined()
    expect(Flags.parse("run", ["--", "-x"]).positionals).toEqual(["-x"])
    expect(Flags.parse("run", ["--context-window=-5", "hi"]).values["context-window"]).toBe("-5")
  })

  it("states an integer flag's range as a user would: no upper bound when it has none", () => {
    const message = (name: Flags.FlagName, value: string, minimum: number, maximum: number) => {
      try {
        Flags.integer(name, value, minimum, maximum)
        return undefined
      } catch (error) {
        return (error as Error).message
      }
    }
    expect(message("step", "0", 1, Number.MAX_SAFE_INTEGER)).toBe("--step must be a positive integer, got '0'")
    expect(message("context-window", "-5", 1, Number.MAX_SAFE_INTEGER)).toBe("--context-window must be a positive integer, got '-5'")
    expect(message("max-steps", "0", 1, 256)).toBe("--max-steps must be an integer in 1..256, got '0'")
    expect(message("step", "3", 1, Number.MAX_SAFE_INTEGER)).toBeUndefined()
  })
})

describe("an unknown command", () => {
  it.each([
    ["runn", "run"],
    ["RUN", "run"],
    ["sessoins", "sessions"],
    ["recovr", "recover"],
    ["bakup", "backup"],
    ["inspcet", "inspect"],
  ])("%s suggests %s", (typed, meant) => {
    expect(Flags.unknownCommand(typed)).toBe(`unknown command '${typed}'; did you mean '${meant}'? see maka --help`)
  })

  it.each(["deploy", "x", "ru-n-it", "summarize"])("%s suggests nothing it is not close to", (typed) => {
    expect(Flags.unknownCommand(typed)).toBe(`unknown command '${typed}'; see maka --help`)
  })
})

describe("the API key's characters", () => {
  it("are judged as @maka/model judges them", async () => {
    const { ProviderConfig } = await import("@maka/model")
    const samples = ["sk-abc", "sk-\nabc", "sk-abc\n", "\r\n sk-abc \t", "sk-\u0000abc", "clé", "sk-🙂", "sk-\u2028", "a\r\nX-Other: 1", "\t", "sk-\u0001abc", "sk-abc\u007f", "a\tb"]
    for (const sample of samples) expect(Flags.isHeaderValue(sample), JSON.stringify(sample)).toBe(ProviderConfig.isHeaderValue(sample))
    expect(samples.filter((sample) => !Flags.isHeaderValue(sample))).toHaveLength(7)
  })
})

describe("the ports fetch refuses", () => {
  it("are the ones @maka/model refuses", async () => {
    const { ProviderConfig } = await import("@maka/model")
    expect([...Flags.FETCH_BAD_PORTS].sort((a, b) => a - b)).toEqual([...ProviderConfig.FETCH_BAD_PORTS].sort((a, b) => a - b))
  })
})

describe("the offline provider's flags (docs/cli.md §10.1)", () => {
  const refusalOf = (values: Flags.Values, environment: Flags.Environment = {}): string | undefined =>
    usageError(() => Flags.provider(values, environment))

  it("refuses a --model it cannot run, chosen by default or by name", () => {
    expect(refusalOf({ model: "gpt-4o" })).toBe(
      "--model gpt-4o needs --base-url URL (or MAKA_BASE_URL): without one the provider is offline, whose model is maka-offline",
    )
    expect(refusalOf({ provider: "offline", model: "gpt-4o" }, { MAKA_BASE_URL: "http://x.example/v1" })).toBe(
      "--provider offline runs the built-in model maka-offline; --model gpt-4o needs --provider openai-compatible or anthropic",
    )
  })

  it("refuses a base URL ending in a blank, which fetch would trim and the route identity keep", () => {
    for (const blank of [" ", "\t", "\n"]) {
      expect(refusalOf({ "base-url": `http://127.0.0.1:8080/v1${blank}`, model: "m" })).toBe(
        "--base-url must not end with a space, tab or line break",
      )
    }
    // A value from the environment is named by its variable, not by a flag never given.
    expect(refusalOf({ model: "m" }, { MAKA_BASE_URL: "http://127.0.0.1:8080/v1 " })).toBe("MAKA_BASE_URL must not end with a space, tab or line break")
    expect(refusalOf({ model: "m" }, { MAKA_BASE_URL: "ftp://127.0.0.1/v1" })).toBe("MAKA_BASE_URL must be an http(s) URL, not ftp:")
    expect(usageError(() => Flags.database({}, { MAKA_DATABASE_URL: "mysql://h/db" }, "/"))).toBe(
      "MAKA_DATABASE_URL must be a postgres://, postgresql:// or socket: URL",
    )
    expect(refusalOf({ model: "m" }, { MAKA_BASE_URL: "http://127.0.0.1:8080/v1" })).toBeUndefined()
  })

  it("refuses a --base-url when chosen by name", () => {
    expect(refusalOf({ provider: "offline", "base-url": "http://x.example/v1" })).toBe("--provider offline takes no --base-url: its server is built in")
  })

  it("takes its own model, no model, and the environment's defaults, which may be set for other runs", () => {
    expect(Flags.provider({ model: Flags.OFFLINE_MODEL }, {})).toEqual({ provider: "offline" })
    expect(Flags.provider({ provider: "offline", model: "maka-offline" }, {})).toEqual({ provider: "offline" })
    expect(Flags.provider({}, { MAKA_MODEL: "gpt-4o" })).toEqual({ provider: "offline" })
    expect(Flags.provider({ provider: "offline" }, { MAKA_MODEL: "gpt-4o", MAKA_BASE_URL: "http://x.example/v1" })).toEqual({ provider: "offline" })
  })
})
