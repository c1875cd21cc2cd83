/**
 * The builtin `read_tool_result` of a run (docs/engine.md §5.11): the tool reads archived results
 * through the run's log, in the run's session only, and the engine adds it to the run's catalog
 * unless the host offered no tools at all.
 */
import type { EventLog } from "@maka/event-log"
import { ReadToolResult, Tool, ToolCatalog } from "@maka/tools"
import { Effect } from "effect"

/**
 * Reads a settled result of `sessionId` through the log. A refusal (no successful settlement with
 * that id in the session) is `undefined`; a failed integrity check or store failure is a known
 * failure whose message names only its kind, never a store detail.
 */
export const reader =
  (log: EventLog.EventLogShape, sessionId: string): ReadToolResult.Reader =>
  (eventId) =>
    log.readToolResult(sessionId, eventId).pipe(
      Effect.catchTag("EventLogError", (error) => {
        const reason = error.reason
        if (reason._tag === "Rejected" && reason.rejection._tag === "InvalidTransition") return Effect.succeed(undefined)
        if (reason._tag === "Rejected" && reason.rejection._tag === "PayloadMismatch") {
          return Effect.fail(new Tool.ToolFailure({ message: "the stored tool result failed its integrity check" }))
        }
        return Effect.fail(new Tool.ToolFailure({ message: `the tool result could not be read from the log (${reason._tag})` }))
      }),
    )

/** The problem with a host catalog that already holds a tool under the builtin's name, if it does. */
export const reservedNameProblem = (tools: ToolCatalog.ToolCatalog): string | undefined =>
  tools.get(ReadToolResult.NAME) === undefined
    ? undefined
    : `the tool name ${ReadToolResult.NAME} is reserved: the engine adds its own tool under it`

/** The run's catalog: the host's tools plus `read_tool_result` over the run's log, or none when the host passed none. */
export const catalogOf = (tools: ToolCatalog.ToolCatalog, log: EventLog.EventLogShape, sessionId: string): ToolCatalog.ToolCatalog =>
  ReadToolResult.offer(tools, reader(log, sessionId))
