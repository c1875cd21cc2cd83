/**
 * Anthropic Messages stream event builders for the scripted server: `message_start`, text, thinking
 * (with its `signature_delta`) and tool-use blocks, `message_delta` with the stop reason and usage,
 * `message_stop`, `ping` and `error`, plus `response`, a whole stream at once.
 */
import { event, type SseStep } from "./Respond.ts"

const typed = (type: string, body: Readonly<Record<string, unknown>>): SseStep => event({ type, ...body }, { event: type })

export const messageStart = (
  options: {
    readonly id?: string | undefined
    readonly model?: string | undefined
    readonly usage?: Readonly<Record<string, number>> | undefined
  } = {},
): SseStep =>
  typed("message_start", {
    message: {
      id: options.id ?? "msg_test",
      type: "message",
      role: "assistant",
      content: [],
      model: options.model ?? "claude-test",
      stop_reason: null,
      stop_sequence: null,
      usage: options.usage ?? { input_tokens: 10, output_tokens: 1 },
    },
  })

export const blockStart = (index: number, contentBlock: Readonly<Record<string, unknown>>): SseStep =>
  typed("content_block_start", { index, content_block: contentBlock })

export const blockDelta = (index: number, delta: Readonly<Record<string, unknown>>): SseStep =>
  typed("content_block_delta", { index, delta })

export const blockStop = (index: number): SseStep => typed("content_block_stop", { index })

export const textBlock = (index: number, chunks: ReadonlyArray<string>): ReadonlyArray<SseStep> => [
  blockStart(index, { type: "text", text: "" }),
  ...chunks.map((text) => blockDelta(index, { type: "text_delta", text })),
  blockStop(index),
]

export const thinkingBlock = (index: number, chunks: ReadonlyArray<string>, signature?: string): ReadonlyArray<SseStep> => [
  blockStart(index, { type: "thinking", thinking: "" }),
  ...chunks.map((thinking) => blockDelta(index, { type: "thinking_delta", thinking })),
  ...(signature === undefined ? [] : [blockDelta(index, { type: "signature_delta", signature })]),
  blockStop(index),
]

export const toolUseBlock = (
  index: number,
  call: { readonly id: string; readonly name: string },
  jsonChunks: ReadonlyArray<string>,
): ReadonlyArray<SseStep> => [
  blockStart(index, { type: "tool_use", id: call.id, name: call.name, input: {} }),
  ...jsonChunks.map((partial_json) => blockDelta(index, { type: "input_json_delta", partial_json })),
  blockStop(index),
]

export const messageDelta = (stopReason: string, usage: Readonly<Record<string, number>> = { output_tokens: 5 }): SseStep =>
  typed("message_delta", { delta: { stop_reason: stopReason, stop_sequence: null }, usage })

export const messageStop = (): SseStep => typed("message_stop", {})

export const ping = (): SseStep => typed("ping", {})

export const error = (type: string, message: string): SseStep => typed("error", { error: { type, message } })

export interface ResponseOptions {
  readonly id?: string | undefined
  readonly model?: string | undefined
  readonly thinking?: { readonly chunks: ReadonlyArray<string>; readonly signature?: string | undefined } | undefined
  readonly text?: ReadonlyArray<string> | undefined
  readonly toolUses?:
    | ReadonlyArray<{ readonly id: string; readonly name: string; readonly json: ReadonlyArray<string> }>
    | undefined
  readonly stopReason?: string | undefined
  readonly inputUsage?: Readonly<Record<string, number>> | undefined
  readonly outputUsage?: Readonly<Record<string, number>> | undefined
}

/** A whole stream: start, ping, thinking, text and tool-use blocks, delta, stop. */
export const response = (options: ResponseOptions = {}): ReadonlyArray<SseStep> => {
  const steps: Array<SseStep> = [
    messageStart({
      ...(options.id === undefined ? {} : { id: options.id }),
      ...(options.model === undefined ? {} : { model: options.model }),
      ...(options.inputUsage === undefined ? {} : { usage: options.inputUsage }),
    }),
    ping(),
  ]
  let index = 0
  if (options.thinking !== undefined) steps.push(...thinkingBlock(index++, options.thinking.chunks, options.thinking.signature))
  if (options.text !== undefined) steps.push(...textBlock(index++, options.text))
  for (const call of options.toolUses ?? []) steps.push(...toolUseBlock(index++, call, call.json))
  const stopReason = options.stopReason ?? ((options.toolUses ?? []).length > 0 ? "tool_use" : "end_turn")
  steps.push(messageDelta(stopReason, options.outputUsage), messageStop())
  return steps
}
