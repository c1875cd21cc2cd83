/**
 * `ToolError`, the one error of `@maka/tools`. Callers switch on `reason._tag`: an invalid tool or
 * catalog definition, a refused or uncertain commit of `tool_dispatched` or `tool_rejected` (no
 * effect started), a write the facts refused to build, or a workspace that cannot be opened.
 */
import { Data } from "effect"
import type { EventSink, FactError } from "@maka/facts"

/** A tool or catalog that breaks a definition rule (name, uniqueness, input schema). */
export class InvalidDefinition extends Data.TaggedClass("InvalidDefinition")<{
  readonly message: string
}> {}

/** A journal commit that did not prove durable; for `tool_dispatched` no effect was started. */
export class CommitFailed extends Data.TaggedClass("CommitFailed")<{
  readonly fact: "tool_dispatched" | "tool_rejected"
  readonly error: EventSink.CommitError
}> {}

/** A journal write that `EventWrite` refused to build (an operation id, an oversized input). */
export class InvalidWrite extends Data.TaggedClass("InvalidWrite")<{
  readonly fact: "tool_dispatched" | "tool_rejected" | "tool_settled"
  readonly error: FactError.FactError
}> {}

/** A workspace root or marker that cannot be used. */
export class WorkspaceInvalid extends Data.TaggedClass("WorkspaceInvalid")<{
  readonly path: string
  readonly message: string
}> {}

export type ToolErrorReason = InvalidDefinition | CommitFailed | InvalidWrite | WorkspaceInvalid

export class ToolError extends Data.TaggedError("ToolError")<{ readonly reason: ToolErrorReason }> {
  override get message(): string {
    const reason = this.reason
    switch (reason._tag) {
      case "InvalidDefinition":
        return `invalid tool definition: ${reason.message}`
      case "CommitFailed":
        return `${reason.fact} commit ${reason.error.kind}: ${reason.error.reason}`
      case "InvalidWrite":
        return `invalid ${reason.fact} write (${reason.error.rule}): ${reason.error.message}`
      case "WorkspaceInvalid":
        return `workspace ${reason.path}: ${reason.message}`
    }
  }

  /** No reason is retryable by the journal itself: a retry is an engine decision over facts. */
  get isRetryable(): boolean {
    return false
  }
}

export const invalidDefinition = (message: string): ToolError =>
  new ToolError({ reason: new InvalidDefinition({ message }) })

export const commitFailed = (fact: CommitFailed["fact"], error: EventSink.CommitError): ToolError =>
  new ToolError({ reason: new CommitFailed({ fact, error }) })

export const invalidWrite = (fact: InvalidWrite["fact"], error: FactError.FactError): ToolError =>
  new ToolError({ reason: new InvalidWrite({ fact, error }) })

export const workspaceInvalid = (path: string, message: string): ToolError =>
  new ToolError({ reason: new WorkspaceInvalid({ path, message }) })
