/**
 * OpenAI-compatible chat-completion chunk builders for the scripted server: text deltas, reasoning
 * deltas (`reasoning_content` as DeepSeek and vLLM send it, or `reasoning` as OpenRouter does), tool-call
 * fragments, the finish chunk, the usage chunk and `[DONE]`, plus `response`, a whole stream at once.
 */
import { event, type SseStep } from "./Respond.ts"

export interface ChunkHeader {
  readonly id?: string | undefined
  readonly model?: string | undefined
  /** Epoch seconds. */
  readonly created?: number | undefined
}

const DEFAULT_HEADER: { readonly id: string; readonly model: string; readonly created: number } = { id: "chatcmpl-test", model: "test-model", created: 1_767_225_600 }

/** One `chat.completion.chunk` with a single choice. */
export const chunk = (
  delta: Readonly<Record<string, unknown>>,
  options: ChunkHeader & { readonly finishReason?: string | null | undefined } = {},
): SseStep =>
  event({
    id: options.id ?? DEFAULT_HEADER.id,
    object: "chat.completion.chunk",
    created: options.created ?? DEFAULT_HEADER.created,
    model: options.model ?? DEFAULT_HEADER.model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: options.finishReason ?? null }],
  })

export const role = (header: ChunkHeader = {}): SseStep => chunk({ role: "assistant", content: "" }, header)

export const text = (content: string, header: ChunkHeader = {}): SseStep => chunk({ content }, header)

/** A reasoning delta in `reasoning_content` (DeepSeek, vLLM) or `reasoning` (OpenRouter, Ollama). */
export const reasoning = (
  content: string,
  field: "reasoning_content" | "reasoning" = "reasoning_content",
  header: ChunkHeader = {},
): SseStep => chunk({ [field]: content }, header)

/** A tool-call fragment: the first one of an index carries `id` and `name`, later ones only arguments. */
export const toolCall = (
  fragment: {
    readonly index: number
    readonly id?: string | undefined
    readonly name?: string | undefined
    readonly arguments?: string | undefined
  },
  header: ChunkHeader = {},
): SseStep =>
  chunk(
    {
      tool_calls: [
        {
          index: fragment.index,
          ...(fragment.id === undefined ? {} : { id: fragment.id, type: "function" }),
          function: {
            ...(fragment.name === undefined ? {} : { name: fragment.name }),
            arguments: fragment.arguments ?? "",
          },
        },
      ],
    },
    header,
  )

export const finish = (reason: string, header: ChunkHeader = {}): SseStep => chunk({}, { ...header, finishReason: reason })

export interface Usage {
  readonly prompt_tokens?: number | undefined
  readonly completion_tokens?: number | undefined
  readonly total_tokens?: number | undefined
  readonly prompt_tokens_details?: { readonly cached_tokens?: number | undefined } | undefined
  readonly completion_tokens_details?: { readonly reasoning_tokens?: number | undefined } | undefined
}

/** The final usage chunk (`stream_options.include_usage`): no choices. */
export const usage = (value: Usage, header: ChunkHeader = {}): SseStep =>
  event({
    id: header.id ?? DEFAULT_HEADER.id,
    object: "chat.completion.chunk",
    created: header.created ?? DEFAULT_HEADER.created,
    model: header.model ?? DEFAULT_HEADER.model,
    choices: [],
    usage: value,
  })

export const done = (): SseStep => event("[DONE]")

/** An in-stream error payload. */
export const error = (
  message: string,
  options: { readonly type?: string | undefined; readonly code?: string | number | null | undefined } = {},
): SseStep =>
  event({ error: { message, type: options.type ?? "server_error", code: options.code ?? null } })

export interface ResponseOptions extends ChunkHeader {
  readonly reasoning?: ReadonlyArray<string> | undefined
  readonly reasoningField?: "reasoning_content" | "reasoning" | undefined
  readonly text?: ReadonlyArray<string> | undefined
  readonly toolCalls?:
    | ReadonlyArray<{ readonly id: string; readonly name: string; readonly arguments: ReadonlyArray<string> }>
    | undefined
  readonly finishReason?: string | undefined
  /** The usage chunk's value; `null` leaves the chunk out. */
  readonly usage?: Usage | null | undefined
  /** `false` leaves `[DONE]` out. */
  readonly done?: boolean | undefined
}

/** A whole stream: role, reasoning deltas, text deltas, tool-call fragments, finish, usage, `[DONE]`. */
export const response = (options: ResponseOptions = {}): ReadonlyArray<SseStep> => {
  const header: ChunkHeader = { id: options.id ?? DEFAULT_HEADER.id, model: options.model ?? DEFAULT_HEADER.model, created: options.created ?? DEFAULT_HEADER.created }
  const steps: Array<SseStep> = [role(header)]
  for (const piece of options.reasoning ?? []) steps.push(reasoning(piece, options.reasoningField, header))
  for (const piece of options.text ?? []) steps.push(text(piece, header))
  ;(options.toolCalls ?? []).forEach((call, index) => {
    call.arguments.forEach((piece, position) =>
      steps.push(toolCall(position === 0 ? { index, id: call.id, name: call.name, arguments: piece } : { index, arguments: piece }, header)),
    )
    if (call.arguments.length === 0) steps.push(toolCall({ index, id: call.id, name: call.name }, header))
  })
  const reason = options.finishReason ?? ((options.toolCalls ?? []).length > 0 ? "tool_calls" : "stop")
  steps.push(finish(reason, header))
  if (options.usage !== null) steps.push(usage(options.usage ?? { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }, header))
  if (options.done !== false) steps.push(done())
  return steps
}
