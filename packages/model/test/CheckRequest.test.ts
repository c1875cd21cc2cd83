/**
 * The adapter's request check hands a prompt of checked messages on as the caller's own array (so a
 * prompt the engine projected is recognised as projected, docs/model.md §4.1), and a prompt holding
 * a message the decode copied as a new array of the checked messages; a bad message is refused.
 */
import { assert, describe, it } from "@effect/vitest"
import { Canonical, type Prompt } from "@maka/facts"
import { Result } from "effect"
import { checkRequest } from "../src/internal/check-request.ts"

const request = (prompt: ReadonlyArray<unknown>): Prompt.ModelRequest =>
  ({ prompt, tools: [], providerOptions: {}, maxOutputTokens: 1_000 }) as unknown as Prompt.ModelRequest

const sealed = (message: Prompt.PromptMessage): Prompt.PromptMessage => Canonical.seal(message)

describe("checkRequest", () => {
  it("returns the caller's prompt array when every message is a sealed one it checked", () => {
    const prompt = [sealed({ role: "system", content: "Be brief." }), sealed({ role: "user", content: "Hello." })]
    const checked = Result.getOrThrow(checkRequest(request(prompt)))
    assert.strictEqual(checked.prompt, prompt)
    // A second check of the same messages (now known) hands the array on as well.
    const again = [...prompt]
    assert.strictEqual(Result.getOrThrow(checkRequest(request(again))).prompt, again)
  })

  it("returns a new array when a message is not sealed, holding the decode's copy of it", () => {
    const plain: Prompt.PromptMessage = { role: "user", content: "Hello." }
    const prompt = [sealed({ role: "system", content: "Be brief." }), plain]
    const checked = Result.getOrThrow(checkRequest(request(prompt)))
    assert.notStrictEqual(checked.prompt, prompt)
    assert.strictEqual(checked.prompt[0], prompt[0])
    assert.deepStrictEqual(checked.prompt[1], plain)
  })

  it("refuses a message of no known shape", () => {
    const checked = checkRequest(request([sealed({ role: "user", content: "Hello." }), { role: "user", text: "x" }]))
    assert.isTrue(Result.isFailure(checked))
  })
})
