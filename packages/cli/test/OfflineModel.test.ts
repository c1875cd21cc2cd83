import { Prompts, Summary } from "@maka/facts"
import { ProviderConfig } from "@maka/model"
import { Result } from "effect"
import { afterEach, describe, expect, it } from "vitest"
import * as OfflineModel from "../src/OfflineModel.ts"

const body = (messages: ReadonlyArray<unknown>, tools: ReadonlyArray<string> = ["list_files", "read_file", "search_text"]) =>
  JSON.stringify({
    model: "maka-offline",
    messages,
    stream: true,
    ...(tools.length === 0 ? {} : { tools: tools.map((name) => ({ type: "function", function: { name, description: name, parameters: {} } })) }),
  })

const chunks = (events: ReadonlyArray<string>) =>
  events.filter((event) => event !== "data: [DONE]\n\n").map((event) => JSON.parse(event.slice("data: ".length)) as Record<string, any>)

const text = (events: ReadonlyArray<string>) =>
  chunks(events)
    .flatMap((chunk) => chunk["choices"] ?? [])
    .map((choice: any) => choice.delta?.content ?? "")
    .join("")

const listed = (id: string) => [
  { role: "user", content: "What is this?" },
  { role: "assistant", content: "", tool_calls: [{ id, type: "function", function: { name: "list_files", arguments: '{"path":"."}' } }] },
  { role: "tool", tool_call_id: id, content: '[{"name":"README.md","size":10,"type":"file"},{"name":"src","size":0,"type":"directory"}]' },
]

describe("the offline model", () => {
  it("gives the same bytes for the same request", () => {
    const request = body([{ role: "user", content: "hello" }])
    expect(OfflineModel.respond(request)).toEqual(OfflineModel.respond(request))
    expect(OfflineModel.respond(request).events.join("")).not.toBe(OfflineModel.respond(body([{ role: "user", content: "hello!" }])).events.join(""))
  })

  it("calls list_files on '.' first when it is offered", () => {
    const reply = OfflineModel.decide(OfflineModel.parseRequest(body([{ role: "user", content: "hi" }]))!)
    expect(reply).toEqual({ kind: "tool_call", name: "list_files", arguments: '{"path":"."}' })
  })

  it("calls list_files once per turn: again after a new user message", () => {
    const messages = [...listed("c1"), { role: "assistant", content: "done" }, { role: "user", content: "and now?" }]
    expect(OfflineModel.decide(OfflineModel.parseRequest(body(messages))!)).toMatchObject({ kind: "tool_call", name: "list_files" })
  })

  it("then reads the first README it found", () => {
    const reply = OfflineModel.decide(OfflineModel.parseRequest(body(listed("c1")))!)
    expect(reply).toEqual({ kind: "tool_call", name: "read_file", arguments: '{"path":"README.md"}' })
  })

  it("then answers in several deltas naming what it found", () => {
    const messages = [
      ...listed("c1"),
      { role: "assistant", content: "", tool_calls: [{ id: "c2", type: "function", function: { name: "read_file", arguments: '{"path":"README.md"}' } }] },
      { role: "tool", tool_call_id: "c2", content: "     1\t# Lantern\n     2\t" },
    ]
    const { events } = OfflineModel.respond(body(messages))
    const deltas = chunks(events).filter((chunk) => chunk["choices"]?.[0]?.delta?.content)
    expect(deltas.length).toBeGreaterThan(2)
    expect(text(events)).toContain("README.md")
    expect(text(events)).toContain("Lantern")
    expect(chunks(events).at(-1)?.["usage"]).toBeDefined()
  })

  it("answers at once when no tool is offered", () => {
    const reply = OfflineModel.decide(OfflineModel.parseRequest(body([{ role: "user", content: "hi" }], []))!)
    expect(reply.kind).toBe("text")
  })

  it("reports usage as ceil(characters / 4) of request and response", () => {
    const request = body([{ role: "user", content: "hi" }], [])
    const { events } = OfflineModel.respond(request)
    const usage = chunks(events).at(-1)?.["usage"]
    const answer = text(events)
    expect(usage).toEqual({
      prompt_tokens: Math.ceil(request.length / 4),
      completion_tokens: Math.ceil(answer.length / 4),
      total_tokens: Math.ceil(request.length / 4) + Math.ceil(answer.length / 4),
    })
  })

  it("answers a summary request with a valid sections_v1 summary naming the user messages and tools", () => {
    const messages = [...listed("c1"), { role: "user", content: Prompts.compactionAttemptMessage(Prompts.COMPACTION_BASE_INSTRUCTION) }]
    const { events } = OfflineModel.respond(body(messages, []))
    const summary = text(events)
    const validated = Summary.validateSummary(summary, {
      inputTokens: 20_000,
      outputTokens: Math.ceil(summary.length / 4),
    })
    expect(Result.isSuccess(validated)).toBe(true)
    expect(summary).toContain("What is this?")
    expect(summary).toContain("list_files")
  })

  it("updates a previous summary: its answered messages carry over, its text is not taken for a user message", () => {
    const first = OfflineModel.summaryText(
      OfflineModel.parseRequest(body([...listed("c1"), { role: "user", content: Prompts.compactionAttemptMessage(Prompts.COMPACTION_BASE_INSTRUCTION) }], []))!,
    )
    const messages = [
      { role: "user", content: Prompts.previousContinuationSummaryMessage(first) },
      { role: "user", content: "And the notes?" },
      { role: "assistant", content: "They are short." },
      { role: "user", content: Prompts.compactionAttemptMessage(Prompts.COMPACTION_BASE_INSTRUCTION) },
    ]
    const summary = text(OfflineModel.respond(body(messages, [])).events)
    expect(Result.isSuccess(Summary.validateSummary(summary, { inputTokens: 20_000, outputTokens: Math.ceil(summary.length / 4) }))).toBe(true)
    expect(summary).toContain("## Goal\n- And the notes?\n")
    expect(summary).toContain("- Answered: What is this?\n- Answered: And the notes?\n")
    expect(summary).toContain("- User messages so far: 2")
    expect(summary).not.toContain("Previous continuation summary")
    expect(summary).toContain("- Tools used: list_files")
  })

  it("keeps even the summary of a conversation without user messages above the fold floor", () => {
    const summary = OfflineModel.summaryText(OfflineModel.parseRequest(body([{ role: "user", content: Prompts.compactionAttemptMessage("x") }], []))!)
    const validated = Summary.validateSummary(summary, { inputTokens: 20_000, outputTokens: Math.ceil(summary.length / 4) })
    expect(Result.isSuccess(validated)).toBe(true)
  })

  it("refuses a malformed body with a 400", () => {
    expect(OfflineModel.respond("not json").status).toBe(400)
  })

  describe("the server", () => {
    const started: Array<OfflineModel.OfflineModel> = []
    afterEach(async () => {
      for (const model of started.splice(0)) await model.close()
    })

    it("has the same route identity in every process, whatever its port", async () => {
      const first = await OfflineModel.start()
      const second = await OfflineModel.start()
      started.push(first, second)
      expect(first.url).not.toBe(second.url)
      expect(ProviderConfig.routeIdentity(first.provider)).toBe(ProviderConfig.routeIdentity(second.provider))
      expect(first.provider).toMatchObject({ kind: "openai-compatible", baseUrl: "http://offline.maka.invalid/v1", model: "maka-offline" })
    })

    it("serves the fixed base URL through its fetch on loopback", async () => {
      const model = await OfflineModel.start()
      started.push(model)
      const request = body([{ role: "user", content: "hi" }], [])
      const response = await model.provider.fetch("http://offline.maka.invalid/v1/chat/completions", { method: "POST", body: request })
      expect(response.status).toBe(200)
      expect(response.headers.get("content-type")).toBe("text/event-stream")
      expect(await response.text()).toBe(OfflineModel.respond(request).events.join(""))
    })
  })
})
