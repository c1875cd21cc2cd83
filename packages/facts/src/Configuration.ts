/**
 * Execution configuration committed in every opening and never reinterpreted (docs/log-format.md §2.11):
 * system prompt, working directory, workspace identity, model binding and tool mode. No credential is
 * ever part of it.
 */
import { Schema } from "effect"
import { Id } from "./Identity.ts"

export const SystemPrompt = Schema.Struct({ text: Schema.String })
export type SystemPrompt = typeof SystemPrompt.Type

/** The public model identity of a run. */
export const ModelBinding = Schema.Struct({
  connectionId: Id,
  connectionSlug: Id,
  model: Id,
}).annotate({ identifier: "ModelBinding" })
export type ModelBinding = typeof ModelBinding.Type

export const WORKSPACE_IDENTITY_PREFIX = "workspace:v1:"

/** An RFC 4122 variant UUID of version 1–8, in its exact spelling. */
export const WORKSPACE_UUID_PATTERN = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$/

export const WorkspaceIdentity = Schema.String.check(
  Schema.isPattern(
    /^workspace:v1:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$/,
  ),
).annotate({ identifier: "WorkspaceIdentity" })
export type WorkspaceIdentity = typeof WorkspaceIdentity.Type

export const workspaceIdentity = (uuid: string): string => WORKSPACE_IDENTITY_PREFIX + uuid

/** An absolute POSIX path without NUL (the byte limit is checked by the validator). */
export const AbsolutePath = Schema.String.check(Schema.isPattern(/^\/[^\u0000]*$/))

export const ToolMode = Schema.Literal("direct")

export const InvocationConfiguration = Schema.Struct({
  systemPrompt: Schema.optionalKey(SystemPrompt),
  cwd: AbsolutePath,
  workspaceIdentity: Schema.optionalKey(WorkspaceIdentity),
  model: Schema.optionalKey(ModelBinding),
  toolMode: ToolMode,
}).annotate({ identifier: "InvocationConfiguration" })
export type InvocationConfiguration = typeof InvocationConfiguration.Type
