/**
 * The one error of `@maka/facts`: a value that does not decode, or breaks a rule of docs/log-format.md §2.
 * `rule` names the broken rule so callers and tests can tell the cases apart without parsing text.
 */
import { Data } from "effect"

export type FactRule =
  | "decode"
  | "canonical_json"
  | "event_too_large"
  | "message_too_large"
  | "delivered_message_too_large"
  | "message_digest"
  | "system_prompt_blank"
  | "system_prompt_too_large"
  | "cwd_too_large"
  | "workspace_identity_required"
  | "summary_invalid"
  | "claim_target"
  | "handoff_intent"
  | "handoff_tools"
  | "handoff_claim"
  | "operation_id"
  | "archive_placeholder"
  | "tool_success_requires_tool_write"
  | "raw_payload_too_large"
  | "raw_payload_too_deep"
  | "text_ill_formed"
  | "id_has_nul"
  | "write_not_canonical"

export class FactError extends Data.TaggedError("FactError")<{
  readonly rule: FactRule
  readonly message: string
}> {}

export const factError = (rule: FactRule, message: string): FactError => new FactError({ rule, message })
