/**
 * The usage text of the `maka` command (DESIGN.md §10). Commands are filled in by the CLI issue;
 * until then the binary prints this text and exits.
 */
export const USAGE = `maka: a durable, event-sourced agent engine

Usage: maka <command> [options]

Commands:
  run [MESSAGE]     one user turn (MESSAGE or stdin)
  chat              interactive turns in one session
  events            the stored events of a session
  inspect           timeline, checkpoints, archives and model inputs of a session
  recover           seal what a crashed host left in flight
  resume            run the successors of sealed handoffs
  compact           standalone compaction of a session
  sessions          list sessions with their state
  demo              an offline tour

Options:
  -h, --help        show this help
  -v, --version     show the version
`
