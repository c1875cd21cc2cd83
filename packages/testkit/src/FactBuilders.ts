/**
 * Pure builders of valid facts and records for tests: deterministic ids, a configuration, messages,
 * model steps and a valid `sections_v1` summary. They never read a clock or a random source, so a
 * test that builds the same values twice gets the same bytes.
 */
import type {
  Configuration,
  Input,
  Identity,
  Model,
  ToolCall,
} from "@maka/facts"
import { Digest } from "@maka/facts"
import { defined } from "./internal/defined.ts"

/** The last UUID group: 12 hex digits of `n`, an integer in 0..2^48 − 1, or a `RangeError`. */
const lastGroup = (builder: string, n: number): string => {
  if (!Number.isSafeInteger(n) || n < 0 || n >= 2 ** 48) {
    throw new RangeError(`testkit: ${builder}(n) needs an integer n from 0 to 2^48 - 1, got ${String(n)}`)
  }
  return n.toString(16).padStart(12, "0")
}

/** The n-th deterministic lowercase UUIDv4, n an integer in 0..2^48 − 1 (else a `RangeError`). */
export const eventId = (n: number): string => `00000000-0000-4000-8000-${lastGroup("eventId", n)}`

/** A workspace UUID (version 4, RFC 4122 variant) derived from `n`, as `eventId` takes it. */
export const workspaceUuid = (n = 1): string => `11111111-2222-4333-8444-${lastGroup("workspaceUuid", n)}`

export const WORKSPACE_IDENTITY = `workspace:v1:${workspaceUuid()}`

export const SYSTEM_PROMPT = "You are a careful assistant."

/**
 * The fields a builder takes in place of its defaults: any of them, each possibly `undefined`, which
 * keeps the default (under `exactOptionalPropertyTypes` too, as the `Respond` options).
 */
export type Overrides<T> = { readonly [K in keyof T]?: T[K] | undefined }

export const invocation = (overrides: Overrides<Identity.Invocation> = {}): Identity.Invocation => ({
  sessionId: "session-1",
  turnId: "turn-1",
  runId: "run-1",
  invocationId: "invocation-1",
  ...defined(overrides),
})

export const modelBinding = (overrides: Overrides<Configuration.ModelBinding> = {}): Configuration.ModelBinding => ({
  connectionId: "openai-compatible:http://127.0.0.1:8080/v1",
  connectionSlug: "openai-compatible",
  model: "test-model",
  ...defined(overrides),
})

export const configuration = (
  overrides: Overrides<Configuration.InvocationConfiguration> = {},
): Configuration.InvocationConfiguration => ({
  systemPrompt: { text: SYSTEM_PROMPT },
  cwd: "/workspace",
  workspaceIdentity: WORKSPACE_IDENTITY,
  model: modelBinding(),
  toolMode: "direct",
  ...defined(overrides),
})

export const message = (text: string, displayText?: string): Input.MessageInput =>
  displayText === undefined ? { text } : { text, displayText }

export const deliveredMessage = (messageId: string, text: string): Input.DeliveredMessage => {
  const content = message(text)
  return { messageId, content, submittedContentDigest: Digest.messageContent(content) }
}

/** A digest over a label, for fields whose exact value a test does not care about. */
export const digestOf = (label: string): string => Digest.tagged("maka.testkit.v1", label)

export const usage = (inputTokens: number, outputTokens: number): Model.ModelUsage => ({ inputTokens, outputTokens })

export const textStep = (text: string, stepUsage: Model.ModelUsage = usage(10, 5)): Model.ModelStep => ({
  parts: [{ kind: "text", textKind: "text", text }],
  finishReason: "stop",
  usage: stepUsage,
})

export interface CallSpec {
  readonly id: string
  readonly name: string
  readonly input?: { readonly [key: string]: Identity.Json } | undefined
}

export const toolCallPart = (call: CallSpec): Model.ToolCallPart => ({
  kind: "tool_call",
  id: call.id,
  name: call.name,
  input: call.input ?? {},
  providerExecuted: false,
})

export const toolCallStep = (
  calls: ReadonlyArray<CallSpec>,
  text?: string,
  stepUsage: Model.ModelUsage = usage(20, 8),
): Model.ModelStep => ({
  parts: [
    ...(text === undefined ? [] : [{ kind: "text" as const, textKind: "text" as const, text }]),
    ...calls.map(toolCallPart),
  ],
  finishReason: "tool-calls",
  usage: stepUsage,
})

export const textOutput = (value: string): ToolCall.ToolOutput => ({ format: "text", value })
export const jsonOutput = (value: Identity.Json): ToolCall.ToolOutput => ({ format: "json", value })

/** A summary that passes the `sections_v1` validator. */
export const VALID_SUMMARY = [
  "## Goal",
  "Summarise the repository layout for the user.",
  "",
  "## Progress",
  "### Done",
  "- Listed the root folder and read README.md.",
  "### In Progress",
  "- Writing the answer.",
  "",
  "## Key Decisions",
  "- **Read the README first**: it names every package.",
  "",
  "## Next Steps",
  "1. Answer with the package list.",
  "",
  "## Critical Context",
  "- README.md lists seven packages.",
].join("\n")
