/**
 * Every tunable of `@maka/tools` in one frozen object (docs/architecture.md §7): the caps of the builtin set,
 * the bounds of their inputs, the cap on a recorded failure message and the workspace marker name.
 * Hosts override the builtin caps per set (`Builtins.read(workspace, overrides)`), never globally.
 */
import { Limits } from "@maka/facts"

const KIB = 1024
const MIB = 1024 * KIB

export const defaults = Object.freeze({
  /** `read_file`: lines per page when `limit` is absent. */
  readFileLimitLines: 2_000,
  /** `read_file`: the largest `limit` a call may ask for. */
  readFileMaxLimitLines: 100_000,
  /**
   * `read_file`: UTF-8 bytes of a page as its model-visible projection encodes it (JSON escapes and
   * the closing note counted). A larger value is held to `MAX_PROJECTION_BYTES`, which a page must fit.
   */
  readFilePageBytes: Limits.MAX_PROJECTION_BYTES,
  /** `read_file`, `search_text`: bytes a file is probed for NUL to call it binary. */
  binaryProbeBytes: 8 * KIB,
  /** `search_text`: matches returned when `maxResults` is absent. */
  searchMaxResults: 200,
  /** `search_text`: the largest `maxResults` a call may ask for. */
  searchMaxResultsLimit: 1_000,
  /**
   * `search_text`: UTF-16 units of a matching line kept in a result. Whatever the caps, a search stops
   * (`truncated`) before its result would exceed the projection's bytes or JSON values.
   */
  searchLineChars: 500,
  /** `search_text`: files larger than this are skipped. */
  searchMaxFileBytes: 8 * MIB,
  /** `run_command`: seconds before the process group is killed, when `timeoutSeconds` is absent. */
  commandTimeoutSeconds: 120,
  /** `run_command`: the largest `timeoutSeconds` a call may ask for. */
  commandMaxTimeoutSeconds: 3_600,
  /** `run_command`: bytes of stdout, and separately of stderr, kept per command. */
  commandOutputBytes: 64 * KIB,
  /** `run_command`: milliseconds the pipes may still deliver output after the shell exited. */
  commandOutputDrainMs: 100,
  /** The journal: UTF-16 units of a failure message recorded in `tool_settled {failed}`. */
  failureMessageUnits: Limits.MAX_FAILURE_MESSAGE,
  /** The workspace identity marker at the workspace root (docs/cli.md §10.1). */
  workspaceMarker: ".maka-workspace.json",
} as const)

export type Defaults = typeof defaults

/** The caps a builtin set can be built with. */
export interface BuiltinLimits {
  readonly readFileLimitLines: number
  readonly readFileMaxLimitLines: number
  readonly readFilePageBytes: number
  readonly binaryProbeBytes: number
  readonly searchMaxResults: number
  readonly searchMaxResultsLimit: number
  readonly searchLineChars: number
  readonly searchMaxFileBytes: number
  readonly commandTimeoutSeconds: number
  readonly commandMaxTimeoutSeconds: number
  readonly commandOutputBytes: number
}
