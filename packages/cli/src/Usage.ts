/**
 * The help texts of the `maka` command (docs/cli.md §10): the command list, and for each command every
 * flag it takes with its default, built from the flag table so the two never disagree.
 */
import { COMMANDS, FLAGS, flagText, type CommandName, type FlagName } from "./internal/flags.ts"

const commandLines = (Object.keys(COMMANDS) as Array<CommandName>).map((name) => {
  const spec = COMMANDS[name]
  const head = "arguments" in spec ? `${name} ${spec.arguments}` : name
  return `  ${head.padEnd(16)}${spec.summary}`
})

export const USAGE = `maka: a durable, event-sourced agent engine

Usage: maka <command> [options]

Commands:
${commandLines.join("\n")}

Options:
  -h, --help        show this help (maka <command> --help lists the command's flags)
  -v, --version     show the version

Exit codes: 0 completed · 1 failed · 2 usage or invalid input · 3 reconciliation required ·
75 handed off (SIGTERM; continue with maka resume) · 130 cancelled (SIGINT). The API key comes only from MAKA_API_KEY.
`

const flagHead = (name: FlagName): string => {
  const spec = FLAGS[name]
  return "value" in spec ? `--${name} ${spec.value}` : `--${name}`
}

/** The flags' column: the longest flag with its value, and two spaces before its description. */
const FLAG_COLUMN = Math.max(...(Object.keys(FLAGS) as Array<FlagName>).map((name) => flagHead(name).length)) + 2

const flagLine = (command: CommandName, name: FlagName): string => {
  const text = flagText(command, name)
  const tail = text.defaultText === undefined ? "" : ` (default: ${text.defaultText})`
  return `  ${flagHead(name).padEnd(FLAG_COLUMN)}${text.description}${tail}`
}

/** The help of one command: usage line, summary and every flag with its default. */
export const commandUsage = (name: CommandName): string => {
  const spec = COMMANDS[name]
  const flags: ReadonlyArray<FlagName> = [...spec.flags, "help"]
  return `Usage: maka ${name}${"arguments" in spec ? ` ${spec.arguments}` : ""} [options]

${spec.summary}

Options:
${flags.map((flag) => flagLine(name, flag)).join("\n")}
`
}
