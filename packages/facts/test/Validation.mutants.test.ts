/**
 * Rules of `Validation.ts` whose removal or change the rest of the suite did not notice
 * (`pnpm mutate validation`): the ids each fact carries and the label each one is refused under,
 * the walk of `wellFormed`, the placeholder rules of an archive (docs/log-format.md §2), and the
 * limits each message names.
 */
import { Result } from "effect"
import { describe, expect, it } from "vitest"
import { Archive, Canonical, Digest, Limits, Validation, type Fact, type Identity } from "@maka/facts"
import { FactBuilders } from "@maka/testkit"

/** The failure's message, or undefined when the check passed. */
const messageOf = (result: Validation.Validation): string | undefined => (Result.isFailure(result) ? result.failure.message : undefined)

const invocation: Identity.Invocation = { sessionId: "s", turnId: "t", runId: "r", invocationId: "i" }
const intent = {
  handoffId: "h",
  hostEpoch: "e",
  rootRunId: "root",
  successorRunId: "sr",
  successorInvocationId: "si",
  claimId: "c",
}
const intentLabels = (prefix: string) =>
  Object.entries(intent).map(([key, value]) => [`${prefix}.${key}`, value] as const)

/** A fact with only the fields `factIds` reads: the ids are all it looks at. */
const fact = (value: object): Fact.Fact => value as Fact.Fact

describe("the ids a fact carries, by label", () => {
  const cases: ReadonlyArray<readonly [string, Fact.Fact, ReadonlyArray<readonly [string, string]>]> = [
    [
      "a message opening with a model binding",
      fact({ kind: "invocation_opened", configuration: { model: { connectionId: "cid", connectionSlug: "slug", model: "m" } }, input: { kind: "message" } }),
      [
        ["fact.configuration.model.connectionId", "cid"],
        ["fact.configuration.model.connectionSlug", "slug"],
        ["fact.configuration.model.model", "m"],
      ],
    ],
    ["a message opening without one", fact({ kind: "invocation_opened", configuration: {}, input: { kind: "message" } }), []],
    [
      "a continuation opening",
      fact({ kind: "invocation_opened", configuration: {}, input: { kind: "continuation", claim: { id: "claim", source: { invocation } } } }),
      [
        ["fact.input.claim.id", "claim"],
        ["fact.input.claim.source.invocation.sessionId", "s"],
        ["fact.input.claim.source.invocation.turnId", "t"],
        ["fact.input.claim.source.invocation.runId", "r"],
        ["fact.input.claim.source.invocation.invocationId", "i"],
      ],
    ],
    [
      "a handoff opening",
      fact({ kind: "invocation_opened", configuration: {}, input: { kind: "handoff", claim: { id: "claim", source: { invocation } }, pause: { intent } } }),
      [
        ["fact.input.claim.id", "claim"],
        ["fact.input.claim.source.invocation.sessionId", "s"],
        ["fact.input.claim.source.invocation.turnId", "t"],
        ["fact.input.claim.source.invocation.runId", "r"],
        ["fact.input.claim.source.invocation.invocationId", "i"],
        ...intentLabels("fact.input.pause.intent"),
      ],
    ],
    [
      "a request with a context",
      fact({ kind: "model_requested", stepId: "step", modelId: "model", context: { providerId: "p" } }),
      [
        ["fact.operationKey", "step"],
        ["fact.modelId", "model"],
        ["fact.context.providerId", "p"],
      ],
    ],
    [
      "a dispatch of a provider call",
      fact({ kind: "tool_dispatched", operationId: "step:call", name: "tool", call: { toolCallId: "call", origin: { kind: "provider", stepId: "step" } } }),
      [
        ["fact.operationKey", "step:call"],
        ["fact.name", "tool"],
        ["fact.call.toolCallId", "call"],
        ["fact.call.origin.stepId", "step"],
      ],
    ],
    [
      "a rejection of a provider call",
      fact({ kind: "tool_rejected", operationId: "step:call", name: "tool", call: { toolCallId: "call", origin: { kind: "provider", stepId: "step" } } }),
      [
        ["fact.operationKey", "step:call"],
        ["fact.name", "tool"],
        ["fact.call.toolCallId", "call"],
        ["fact.call.origin.stepId", "step"],
      ],
    ],
    ["a steering", fact({ kind: "message_steered", message: { messageId: "m1" } }), [["fact.message.messageId", "m1"]]],
    ["a checkpoint", fact({ kind: "context_checkpoint_recorded", checkpoint: { summaryStepId: "sum" } }), [["fact.checkpoint.summaryStepId", "sum"]]],
    [
      "an archive",
      fact({ kind: "tool_result_archived", placeholder: { identity: { toolCallId: "call", toolName: "tool" } } }),
      [
        ["fact.placeholder.identity.toolCallId", "call"],
        ["fact.placeholder.identity.toolName", "tool"],
      ],
    ],
    ["a paused terminal", fact({ kind: "invocation_ended", outcome: { kind: "handoff_paused", pause: { intent } } }), intentLabels("fact.outcome.pause.intent")],
    ["a completed terminal", fact({ kind: "invocation_ended", outcome: { kind: "completed" } }), []],
  ]
  for (const [name, value, expected] of cases) {
    it(`names every id of ${name}`, () => {
      expect(Validation.factIds(value)).toEqual(expected)
    })
  }

  it("refuses NUL in each id of an invocation under that id's label", () => {
    for (const key of ["sessionId", "turnId", "runId", "invocationId"] as const) {
      expect(messageOf(Validation.invocationIds({ ...invocation, [key]: "a\u0000b" }))).toBe(`invocation.${key} contains NUL`)
    }
    expect(messageOf(Validation.invocationIds(invocation))).toBeUndefined()
  })
})

describe("wellFormed", () => {
  it("walks objects and arrays past nulls and names the path to a lone surrogate", () => {
    expect(messageOf(Validation.wellFormed({ a: null, b: [1, "ok", { c: "\ud800" }] }, "v"))).toBe("v.b.2.c is not well-formed Unicode (it holds a lone surrogate)")
    expect(messageOf(Validation.wellFormed({ a: null, b: [null, "ok"] }, "v"))).toBeUndefined()
    expect(messageOf(Validation.wellFormed(["\udc00"]))).toBe("value.0 is not well-formed Unicode (it holds a lone surrogate)")
  })
})

describe("the text rules of a whole event", () => {
  const steering = fact({ kind: "message_steered", message: { messageId: "m1" } })
  it("names where a lone surrogate sits: the event id, an invocation id, a fact field", () => {
    const event = { id: "\ud800", recordedAt: 1, invocation, fact: steering } as never
    expect(messageOf(Validation.wellFormedEvent(event))).toBe("id is not well-formed Unicode (it holds a lone surrogate)")
    expect(messageOf(Validation.wellFormedFact(steering, { ...invocation, turnId: "\udfff" }))).toBe(
      "invocation.turnId is not well-formed Unicode (it holds a lone surrogate)",
    )
    expect(messageOf(Validation.wellFormedFact(fact({ kind: "message_steered", message: { messageId: "\ud800" } }), invocation))).toBe(
      "fact.message.messageId is not well-formed Unicode (it holds a lone surrogate)",
    )
  })

  it("names the id that holds NUL, the same way with the text already known to be well-formed", () => {
    const withNul = fact({ kind: "message_steered", message: { messageId: "m\u0000" } })
    expect(messageOf(Validation.wellFormedFact(withNul, invocation))).toBe("fact.message.messageId contains NUL")
    expect(messageOf(Validation.storedIdsWithoutNul(withNul, invocation))).toBe("fact.message.messageId contains NUL")
    expect(messageOf(Validation.storedIdsWithoutNul(steering, { ...invocation, runId: "r\u0000" }))).toBe("invocation.runId contains NUL")
    expect(messageOf(Validation.storedIdsWithoutNul(steering, invocation))).toBeUndefined()
  })
})

describe("an archived placeholder's rules", () => {
  const body = "line of the file\n".repeat(1_000)
  const valid = Archive.prepare(FactBuilders.eventId(1), "call", "read_file", { kind: "projection", projection: { kind: "text", text: body } })!
  const check = (placeholder: Archive.ArchivedPlaceholder) => messageOf(Validation.archivedPlaceholder(placeholder))

  it("accepts the placeholder Archive.prepare builds", () => {
    expect(valid).toBeDefined()
    expect(check(valid)).toBeUndefined()
  })

  it("refuses each broken rule with its own message", () => {
    const page = valid.page
    expect(check({ ...valid, page: { ...page, offset: 1 } })).toBe("an archived placeholder's page starts at offset 0")
    expect(check({ ...valid, page: { ...page, totalChars: page.text.length - 1 } })).toBe("page text is longer than the body")
    const short = page.text.slice(0, 100)
    expect(check({ ...valid, page: { ...page, text: short, totalChars: Limits.MAX_PAGE_CHARS } })).toBe("a body of at most 7,500 UTF-16 units is never archived")
    expect(check({ ...valid, page: { ...page, next: (page.next ?? 0) + 1 } })).toBe("page.next is inconsistent")
    // A page that leaves part of the body names where the rest starts.
    const partial = { offset: 0, text: body.slice(0, 7_000), totalChars: 7_000 + Limits.MAX_PAGE_CHARS }
    expect(check({ ...valid, page: partial })).toBe("page.next is inconsistent")
    expect(check({ ...valid, originalEstimatedTokens: valid.originalEstimatedTokens + 1 })).toBe("originalEstimatedTokens must be ceil(body UTF-16 length / 4)")
  })

  it("refuses a resource reference over its limit, and takes one at it", () => {
    const atLimit = "x".repeat(Limits.MAX_ARCHIVE_REF_CHARS - Archive.resourceRef("").length)
    const over = `${atLimit}x`
    const longer = (runtimeEventId: string) => ({ ...valid, identity: { ...valid.identity, runtimeEventId } })
    expect(check(longer(over))).toBe("resource reference is too long")
    expect(check(longer(atLimit))).not.toBe("resource reference is too long")
  })

  it("refuses a page whose model value is over 7,500 UTF-16 units", () => {
    // A first page as long as the limit: its text fits, the value around it does not.
    const page = { ...valid.page, text: body.slice(0, Limits.MAX_PAGE_CHARS), next: Limits.MAX_PAGE_CHARS }
    expect(check({ ...valid, page: { ...page, text: body.slice(0, 100), next: 100 } })).toBeUndefined()
    expect(check({ ...valid, page })).toBe("the archived model value exceeds 7,500 UTF-16 units")
  })

  it("refuses a next page after a page that ends the body", () => {
    const whole = { offset: 0, text: body.slice(0, 8_000), totalChars: 8_000 }
    expect(check({ ...valid, page: { ...whole, next: 8_000 } })).toBe("page.next is inconsistent")
    // Without one, the page passes that rule (and meets the next one: its token estimate).
    expect(check({ ...valid, page: whole })).toBe("originalEstimatedTokens must be ceil(body UTF-16 length / 4)")
  })
})

describe("the limits each message names", () => {
  it("names the byte limits of a message, a system prompt and a working directory", () => {
    expect(messageOf(Validation.messageInput(FactBuilders.message("x".repeat(Limits.MAX_MESSAGE_TEXT_BYTES + 1))))).toBe(
      `message text exceeds ${Limits.MAX_MESSAGE_TEXT_BYTES} UTF-8 bytes`,
    )
    const configuration = FactBuilders.configuration()
    expect(messageOf(Validation.configuration({ ...configuration, systemPrompt: { text: "x".repeat(Limits.MAX_SYSTEM_PROMPT_BYTES + 1) } }))).toBe(
      `system prompt exceeds ${Limits.MAX_SYSTEM_PROMPT_BYTES} UTF-8 bytes`,
    )
    expect(messageOf(Validation.configuration({ ...configuration, cwd: "/".repeat(Limits.MAX_CWD_BYTES + 1) }))).toBe(
      `cwd exceeds ${Limits.MAX_CWD_BYTES} UTF-8 bytes`,
    )
  })

  it("takes a delivered message of exactly 1 MiB serialized and names the limit one byte over it", () => {
    const withDisplay = (displayText: string) => {
      const content = FactBuilders.message("Look at this.", displayText)
      return { messageId: "m1", content, submittedContentDigest: Digest.messageContent(content) }
    }
    const size = (displayText: string) => Canonical.utf8Length(Canonical.stringify(withDisplay(displayText)))
    const exact = "d".repeat(Limits.MAX_DELIVERED_MESSAGE_BYTES - size(""))
    expect(size(exact)).toBe(Limits.MAX_DELIVERED_MESSAGE_BYTES)
    expect(messageOf(Validation.deliveredMessage(withDisplay(exact)))).toBeUndefined()
    expect(messageOf(Validation.deliveredMessage(withDisplay(`${exact}d`)))).toBe(
      `delivered message exceeds ${Limits.MAX_DELIVERED_MESSAGE_BYTES} serialized bytes`,
    )
  })

  it("names a checkpoint's invalid summary and unsorted handoff tools", () => {
    expect(messageOf(Validation.checkpoint({ summary: { format: "sections_v1", text: "not a summary" } } as never))).toMatch(/^checkpoint summary is invalid: \S/)
    expect(messageOf(Validation.handoffTools({ names: ["b", "a"] } as never))).toBe("handoff tool names must be sorted and unique")
    expect(messageOf(Validation.handoffTools({ names: ["a", "a"] } as never))).toBe("handoff tool names must be sorted and unique")
    expect(messageOf(Validation.handoffTools({ names: ["a", "b"] } as never))).toBeUndefined()
  })
})
