import { assert, describe, it } from "@effect/vitest"
import { Archive, Canonical, Digest, Limits, Prompts, Validation } from "@maka/facts"
import { Result } from "effect"

const EVENT_ID = "00000000-0000-4000-8000-0000000000aa"

const prepareText = (text: string) =>
  Archive.prepare(EVENT_ID, "call-1", "read_file", { kind: "projection", projection: { kind: "text", text } })

const modelValueLength = (placeholder: Archive.ArchivedPlaceholder, page = placeholder.page) =>
  Canonical.stringify(Archive.modelValue(placeholder.identity, page)).length

describe("ArchivedPlaceholder.prepare", () => {
  it("leaves a body of at most 7,500 UTF-16 units alone", () => {
    // A text projection's body is its JSON string: 7,498 characters plus two quotes.
    assert.isUndefined(prepareText("a".repeat(Limits.MAX_PAGE_CHARS - 2)))
    assert.isDefined(prepareText("a".repeat(Limits.MAX_PAGE_CHARS - 1)))
  })

  it("never archives an archive placeholder again", () => {
    const placeholder = prepareText("x".repeat(20_000))!
    const value = Archive.modelValue(placeholder.identity, placeholder.page)
    const again = Archive.prepare(EVENT_ID, "call-1", "read_file", {
      kind: "projection",
      projection: { kind: "json", value: JSON.parse(Canonical.stringify(value)) },
    })
    assert.isUndefined(again)
  })

  it("fills the first page with the longest prefix whose model value fits 7,500 units", () => {
    const text = "line of output\n".repeat(2_000)
    const placeholder = prepareText(text)!
    const body = Canonical.stringify(text)
    assert.strictEqual(placeholder.page.offset, 0)
    assert.isTrue(body.startsWith(placeholder.page.text))
    assert.isAtMost(modelValueLength(placeholder), Limits.MAX_PAGE_CHARS)
    const longer = { ...placeholder.page, text: body.slice(0, placeholder.page.text.length + 1), next: placeholder.page.text.length + 1 }
    assert.isAbove(modelValueLength(placeholder, longer), Limits.MAX_PAGE_CHARS)
    assert.strictEqual(placeholder.page.next, placeholder.page.text.length)
    assert.strictEqual(placeholder.page.totalChars, body.length)
    assert.strictEqual(placeholder.originalEstimatedTokens, Math.ceil(body.length / 4))
    assert.strictEqual(placeholder.identity.originalBytes, Canonical.utf8Length(body))
    assert.strictEqual(placeholder.identity.bodySha256, Digest.sha256Hex(body))
    assert.strictEqual(placeholder.identity.sourceProjectionDigest, Digest.toolProjection({ kind: "text", text }))
    assert.isTrue(Result.isSuccess(Validation.archivedPlaceholder(placeholder)))
  })

  it("never splits a surrogate pair at a page end", () => {
    for (let shift = 0; shift < 4; shift++) {
      const text = "a".repeat(shift) + "😀".repeat(6_000)
      const placeholder = prepareText(text)!
      const last = placeholder.page.text.charCodeAt(placeholder.page.text.length - 1)
      assert.isFalse(last >= 0xd800 && last <= 0xdbff, `shift ${shift} ends on a high surrogate`)
    }
  })

  it("pages through the whole body with pageAt and page.next", () => {
    const text = "é😀 archived\n".repeat(3_000)
    const placeholder = prepareText(text)!
    const body = Canonical.stringify(text)
    let offset: number | undefined = 0
    let rebuilt = ""
    let pages = 0
    while (offset !== undefined) {
      const page: Archive.ReadPage = Archive.pageAt(placeholder.identity, body, offset)!
      assert.strictEqual(page.offset, offset)
      assert.isAtMost(modelValueLength(placeholder, page), Limits.MAX_PAGE_CHARS)
      rebuilt += page.text
      offset = page.next
      pages++
    }
    assert.strictEqual(rebuilt, body)
    assert.isAbove(pages, 2)
    assert.isUndefined(Archive.pageAt(placeholder.identity, body, body.length + 1))
  })

  it("archives a failed outcome's message as a JSON string and binds it as a text projection", () => {
    const message = "stack line\n".repeat(1_000)
    const placeholder = Archive.prepare(EVENT_ID, "call-2", "run_command", { kind: "failed", message })!
    assert.strictEqual(placeholder.identity.sourceProjectionDigest, Digest.toolProjection({ kind: "text", text: message }))
    assert.strictEqual(placeholder.page.totalChars, Canonical.stringify(message).length)
  })

  it("shows the model the fixed value shape with the read instructions", () => {
    const placeholder = prepareText("z".repeat(9_000))!
    const value = Archive.modelValue(placeholder.identity, placeholder.page)
    assert.deepStrictEqual(Object.keys(value), [
      "kind",
      "resourceRef",
      "toolName",
      "originalBytes",
      "reason",
      "readInstructions",
      "page",
    ])
    assert.strictEqual(value.kind, "maka.archived_tool_result")
    assert.strictEqual(value.resourceRef, `maka://tool-result/${EVENT_ID}`)
    assert.strictEqual(value.reason, "tool_result_pruned")
    assert.strictEqual(value.readInstructions, Prompts.ARCHIVE_READ_INSTRUCTIONS)
  })

  it("archives a failure projection under its fixed text", () => {
    const body = Archive.body({ kind: "projection", projection: { kind: "failure" } })
    assert.strictEqual(body, JSON.stringify(Prompts.PROJECTION_FAILURE_TEXT))
  })
})
