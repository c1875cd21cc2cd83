/**
 * The OpenAI-compatible chat-completions request body (docs/model.md §4.1). The body is built as plain
 * JSON and written as canonical JSON (keys sorted, no whitespace), so the same request always gives
 * the same bytes. `providerOptions` are merged first; the adapter's own fields win.
 */
import type { Identity, Prompt } from "@maka/facts"
import type { OutputLimitField } from "../ProviderConfig.ts"
import { canonicalJson } from "./json-write.ts"

type Json = Identity.Json

const toolContent = (output: Prompt.ToolResultOutput): string =>
  output.type === "json" ? canonicalJson(output.value) : output.value

const messages = (prompt: Prompt.Prompt): Array<Json> =>
  prompt.flatMap((message): Array<Json> => {
    switch (message.role) {
      case "system":
      case "user":
        return [{ role: message.role, content: message.content }]
      case "assistant": {
        const text = message.parts.flatMap((part) => (part.kind === "text" ? [part.text] : [])).join("")
        const thinking = message.parts.flatMap((part) => (part.kind === "thinking" ? [part.text] : [])).join("")
        const calls = message.parts.flatMap((part): Array<Json> =>
          part.kind === "tool_call"
            ? [{ id: part.toolCallId, type: "function", function: { name: part.toolName, arguments: canonicalJson(part.input) } }]
            : [],
        )
        return [
          {
            role: "assistant",
            content: text,
            ...(thinking === "" ? {} : { reasoning_content: thinking }),
            ...(calls.length === 0 ? {} : { tool_calls: calls }),
          },
        ]
      }
      case "tool":
        return message.results.map((result) => ({ role: "tool", tool_call_id: result.toolCallId, content: toolContent(result.output) }))
    }
  })

/** The request body for `model`, as canonical JSON text; the output limit goes in `limitField`. */
export const openAiBody = (
  model: string,
  request: Prompt.ModelRequest,
  prompt: Prompt.Prompt,
  limitField: OutputLimitField,
): string =>
  canonicalJson({
    ...request.providerOptions,
    model,
    messages: messages(prompt),
    [limitField]: request.maxOutputTokens,
    stream: true,
    stream_options: { include_usage: true },
    ...(request.tools.length === 0
      ? {}
      : {
          tools: request.tools.map((tool) => ({
            type: "function",
            function: { name: tool.name, description: tool.description, parameters: tool.inputSchema },
          })),
        }),
  })
