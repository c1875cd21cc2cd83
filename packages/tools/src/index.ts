/**
 * @maka/tools: tool definitions and catalogs, preparation of model tool calls, the dispatch/settle
 * journal over `EventSink`, the workspace root and its identity, and a confined builtin set.
 */
export * as Builtins from "./Builtins.ts"
export * as Cancellation from "./Cancellation.ts"
export * as Defaults from "./Defaults.ts"
export * as Ids from "./Ids.ts"
export * as Journal from "./Journal.ts"
export * as ReadToolResult from "./ReadToolResult.ts"
export * as Tool from "./Tool.ts"
export * as ToolCatalog from "./ToolCatalog.ts"
export * as ToolError from "./ToolError.ts"
export * as Workspace from "./Workspace.ts"
