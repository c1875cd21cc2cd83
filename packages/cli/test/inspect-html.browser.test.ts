/**
 * `maka inspect --html FILE` as a reader sees it: the page of a real session (written by the built
 * CLI) opened from `file://` in Debian's headless Chromium through playwright-core (STACK.md,
 * "Browser checks"), every request other than the page itself refused and recorded, and the
 * assertions made on what the browser renders (innerText, layout boxes and painted pixels), not on
 * the HTML text.
 *
 * Without /usr/bin/chromium the suite is skipped with a printed reason, except under CI (`CI=true`),
 * where `.ci/run` installs it and its absence is a failure.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { chromium, type Browser, type Page } from "playwright-core"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { folder, maka, type Folder } from "./support/cli.ts"

const CHROMIUM = "/usr/bin/chromium"
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"]
const inCi = process.env["CI"] === "true" || process.env["CI"] === "1"
const available = fs.existsSync(CHROMIUM)
if (!available && !inCi) {
  console.log(`inspect-html.browser.test.ts skipped: ${CHROMIUM} is missing (apt-get install -y chromium); under CI=true this is a failure`)
}

/** The share of a PNG's pixels that are clearly darker than the page background, decoded by the browser itself. */
const inkShare = (decoder: Page, png: Buffer): Promise<number> =>
  decoder.evaluate(async (source) => {
    const image = new Image()
    image.src = source
    await image.decode()
    const canvas = document.createElement("canvas")
    canvas.width = image.naturalWidth
    canvas.height = image.naturalHeight
    const context = canvas.getContext("2d")
    if (context === null) return -1
    context.drawImage(image, 0, 0)
    const { data } = context.getImageData(0, 0, canvas.width, canvas.height)
    let dark = 0
    for (let offset = 0; offset < data.length; offset += 4) {
      if (data[offset]! + data[offset + 1]! + data[offset + 2]! < 3 * 160) dark++
    }
    return dark / (data.length / 4)
  }, `data:image/png;base64,${png.toString("base64")}`)

describe.skipIf(!available && !inCi)("maka inspect --html rendered in headless Chromium", () => {
  let shared: Folder
  let browser: Browser
  let page: Page
  let pageUrl: string
  let answer: string
  let terminalTimeline: ReadonlyArray<string>
  const requests: Array<string> = []
  const refused: Array<string> = []
  const errors: Array<string> = []

  beforeAll(async () => {
    if (!available) return // under CI: each test fails in beforeEach below
    shared = folder()
    const run = await maka(["run", "--db", shared.db, "--workspace", shared.workspace, "--session", "done", "What is this?"], { cwd: shared.root })
    expect(run.code).toBe(0)
    answer = run.stdout.trim()
    expect(answer).toContain('README.md begins with "Lantern"')
    const terminal = await maka(["inspect", "--db", shared.db, "--session", "done"], { cwd: shared.root })
    expect(terminal.code).toBe(0)
    terminalTimeline = terminal.stdout.split("\n").slice(1).filter((line) => line !== "")
    const file = path.join(shared.root, "page.html")
    const written = await maka(["inspect", "--db", shared.db, "--session", "done", "--html", file], { cwd: shared.root })
    expect(written.code).toBe(0)
    pageUrl = pathToFileURL(file).href

    browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS })
    page = await browser.newPage({ viewport: { width: 1280, height: 800 } })
    page.on("request", (request) => requests.push(request.url()))
    page.on("console", (message) => {
      if (message.type() === "error" || message.type() === "warning") errors.push(`console ${message.type()}: ${message.text()}`)
    })
    page.on("pageerror", (error) => errors.push(`page error: ${error.message}`))
    await page.route("**/*", (route) => {
      const url = route.request().url()
      if (url.startsWith("file:")) return route.continue()
      refused.push(url)
      return route.abort("blockedbyclient")
    })
    await page.goto(pageUrl, { waitUntil: "load" })
  }, 180_000)

  beforeEach(() => {
    if (!available) throw new Error(`${CHROMIUM} is missing: under CI the browser check cannot be skipped (.ci/run installs it with apt-get install -y chromium)`)
  })

  afterAll(async () => {
    await browser?.close()
    shared?.remove()
  })

  it("loads from file:// with no request but the page itself, and no console or page error", () => {
    expect(requests).toEqual([pageUrl])
    expect(refused).toEqual([])
    expect(errors).toEqual([])
  })

  it("lays the page out: a visible body taller than its sections, the title and the timeline painted", async () => {
    expect(await page.title()).toBe("maka inspect: done")
    const body = await page.evaluate(() => ({ height: document.body.scrollHeight, width: document.body.getBoundingClientRect().width }))
    expect(body.width).toBeGreaterThan(600)
    expect(body.height).toBeGreaterThan(600)
    await expect(page.locator("h1").innerText()).resolves.toBe("Session done")
    expect(await page.locator("h1").isVisible()).toBe(true)
    const headings = await page.locator("h2").allInnerTexts()
    expect(headings).toEqual(["Timeline", "Context size per step", "Steps"])
    // What sits at the middle of the first timeline row is that row, and the timeline carries ink.
    const hit = await page.evaluate(() => {
      const row = document.querySelector("ol.timeline li")
      if (row === null) return "no row"
      const box = row.getBoundingClientRect()
      return document.elementFromPoint(box.left + 20, box.top + box.height / 2) === row ? "row" : "covered"
    })
    expect(hit).toBe("row")
    const decoder = await browser.newPage()
    try {
      const share = await inkShare(decoder, await page.locator("ol.timeline").screenshot())
      expect(share).toBeGreaterThan(0.01)
    } finally {
      await decoder.close()
    }
  })

  it("renders the timeline rows: the invocation, each step, each tool call with its duration, the terminal", async () => {
    const timeline = page.locator("ol.timeline")
    expect(await timeline.isVisible()).toBe(true)
    const rows = await page.locator("ol.timeline li").allInnerTexts()
    // The same lines as the terminal timeline of `maka inspect`, one row each.
    expect(rows).toEqual(terminalTimeline)
    expect(rows[0]).toMatch(/^\s+1 [\d:.]+ invocation \S+ opened: message "What is this\?"$/)
    for (const step of [1, 2, 3]) {
      expect(rows.some((row) => new RegExp(`^\\s+\\d+ [\\d:.]+ {3}step ${step} requested \\(input sha256:`).test(row))).toBe(true)
      expect(rows.some((row) => new RegExp(`step ${step} completed in \\d+ ms: finish `).test(row))).toBe(true)
    }
    expect(rows.some((row) => /^\s+\d+ [\d:.]+ {5}tool list_files succeeded in \d+ ms$/.test(row))).toBe(true)
    expect(rows.some((row) => /^\s+\d+ [\d:.]+ {5}tool read_file succeeded in \d+ ms$/.test(row))).toBe(true)
    expect(rows.at(-1)).toMatch(/invocation \S+ ended: completed$/)
    const box = await timeline.boundingBox()
    expect(box?.height ?? 0).toBeGreaterThan(rows.length * 10)
  })

  it("renders the context size per step: one row per step, its input tokens, and a bar as long as its share", async () => {
    const rows = page.locator("table.sizes tr")
    expect(await rows.count()).toBe(3)
    const timeline = await page.locator("ol.timeline li").allInnerTexts()
    const sizes: Array<{ tokens: number; bar: number; cell: number }> = []
    for (const index of [0, 1, 2]) {
      const row = rows.nth(index)
      const text = (await row.innerText()).replace(/\s+/g, " ").trim()
      const match = /^step (\d) (\d+) tokens in, (\d+) messages$/.exec(text)
      expect(match, text).not.toBeNull()
      expect(match![1]).toBe(String(index + 1))
      // The same input tokens as the step's completion in the timeline; messages grow by two a step.
      const completed = timeline.find((line) => line.includes(`step ${index + 1} completed in`))
      expect(completed).toContain(`tokens in ${match![2]} out`)
      expect(Number(match![3])).toBe(2 + 2 * index)
      const bar = await row.locator(".bar").boundingBox()
      const cell = await row.locator("td").nth(1).boundingBox()
      expect(bar).not.toBeNull()
      expect(cell).not.toBeNull()
      expect(bar!.height).toBeGreaterThan(4)
      sizes.push({ tokens: Number(match![2]), bar: bar!.width, cell: cell!.width })
    }
    const largest = Math.max(...sizes.map((size) => size.tokens))
    for (const size of sizes) {
      expect(size.bar).toBeGreaterThan(0)
      expect(Math.abs(size.bar / size.cell - size.tokens / largest)).toBeLessThan(0.03)
    }
    expect(sizes[0]!.bar).toBeLessThan(sizes[2]!.bar)
  })

  it("renders a step's input and output once it is opened: the tool result it read and the answer it gave", async () => {
    const step = page.locator("details#step-3")
    const summary = step.locator("summary")
    expect(await summary.innerText()).toBe("Step 3 — 6 messages, tools list_files, read_file, read_tool_result, search_text")
    const firstInput = step.locator("pre").first()
    expect(await firstInput.isVisible()).toBe(false)
    await summary.click()
    expect(await step.evaluate((element) => (element as HTMLDetailsElement).open)).toBe(true)
    expect(await firstInput.isVisible()).toBe(true)
    const text = await step.innerText()
    expect(text).toMatch(/input digest matches \(sha256:[0-9a-f]{64}\); max output tokens \d+/)
    expect(await step.locator("h3").allInnerTexts()).toEqual(["Input", "Output"])
    // The four messages step 2 sent are named by reference; the two new ones are shown.
    expect(text).toContain("Messages 1–4: the same as messages 1–4 of step 2.")
    expect(await step.locator("a").getAttribute("href")).toBe("#step-2")
    expect(await step.locator(".role").allInnerTexts()).toEqual(["5. assistant", "6. tool"])
    const blocks = await step.locator("pre").allInnerTexts()
    expect(blocks).toHaveLength(3)
    expect(blocks[1]).toMatch(/^read_file \(call_\w+\) → +1\t# Lantern\n +2\t\n +3\tA tiny static-site generator\.$/)
    // The output is the answer `maka run` printed.
    expect(blocks[2]).toBe(answer)
    expect(text).toMatch(/finish stop$/)
    const box = await step.boundingBox()
    expect(box?.height ?? 0).toBeGreaterThan(200)
    // The other steps stay closed.
    expect(await page.locator("details#step-2 pre").first().isVisible()).toBe(false)
  })

  it("shows every message of a step's input once: the steps' new messages add up to the last step's input", async () => {
    const roles: Array<string> = []
    const references: Array<string> = []
    for (const number of [1, 2, 3]) {
      const step = page.locator(`details#step-${number}`)
      // Opened as a reader would (a step the test before opened stays open).
      if (!(await step.evaluate((element) => (element as HTMLDetailsElement).open))) await step.locator("summary").click()
      roles.push(...(await step.locator(".role").allInnerTexts()))
      references.push(...(await step.locator("p").allInnerTexts()).filter((line) => line.startsWith("Messages ")))
    }
    expect(roles).toEqual(["1. system", "2. user", "3. assistant", "4. tool", "5. assistant", "6. tool"])
    expect(references).toEqual(["Messages 1–2: the same as messages 1–2 of step 1.", "Messages 1–4: the same as messages 1–4 of step 2."])
    const first = page.locator("details#step-1 pre")
    expect(await first.nth(1).innerText()).toBe("What is this?")
  })
})
