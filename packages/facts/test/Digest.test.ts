import { createHash } from "node:crypto"
import { describe, expect, it } from "vitest"
import * as Canonical from "../src/Canonical.ts"
import * as Digest from "../src/Digest.ts"

// Golden digests were computed independently of this implementation, with Python's hashlib,
// struct.pack(">Q", n) and json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False).
// A change to the serializer, a tag or the framing must fail here.

const scope = { kind: "session", id: "s1" }
const events: ReadonlyArray<Digest.PrefixEvent> = [
  { sequence: 1, json: '{"a":1}' },
  { sequence: 2, json: '{"text":"h\u00e9 \u4e16"}' },
  { sequence: 5, json: '{"kind":"x"}' }
]
const prefixGoldens = [
  "sha256:d0e6667299cdf46ed93d62f93d1a7eebd0aca0c9040e6b6f31a57455176384c4",
  "sha256:da6f3ff8fb3d4ba0b574e9103a2dcbedfdb759b7eaf3915d17b71eaaac28f131",
  "sha256:b9f2f869a17d4e04faec623985c55b4443e289bf07eaa8a0b1fdeb18482d4745",
  "sha256:5d089506792dbd836d2d7755d0ebd68d0da06add97da961f3dead98ae0107d1b"
]
const highWaterAfter = (count: number): number => events[count - 1]?.sequence ?? 0

describe("Digest format and tags", () => {
  it("recognises only sha256: and 64 lowercase hex", () => {
    expect(Digest.isDigest(`sha256:${"0a".repeat(32)}`)).toBe(true)
    expect(Digest.isDigest(`sha256:${"0A".repeat(32)}`)).toBe(false)
    expect(Digest.isDigest(`sha256:${"0a".repeat(31)}`)).toBe(false)
    expect(Digest.isDigest(`sha512:${"0a".repeat(32)}`)).toBe(false)
    expect(Digest.isDigest(`sha256:${"0a".repeat(32)}\n`)).toBe(false)
    expect(Digest.DIGEST_PATTERN.test(Digest.tagged("t", 1))).toBe(true)
  })

  it("freezes the domain tags", () => {
    expect(Object.isFrozen(Digest.DigestTag)).toBe(true)
    expect(Digest.DigestTag).toEqual({
      logPrefix: "maka.log-prefix.v3",
      runPrefix: "maka.run-prefix.v1",
      modelInput: "maka.model-input.v1",
      route: "maka.route.v1",
      effectiveSource: "maka.effective-source.v1",
      toolProjection: "maka.tool-projection.v1",
      toolRaw: "maka.tool-raw.v1",
      messageContent: "maka.message-content.v1",
      toolCatalog: "maka.tool-catalog.v1"
    })
    expect(Digest.MODEL_HISTORY_PROJECTION).toBe("maka.model-history.v1")
  })
})

describe("Digest golden vectors", () => {
  it("tags the canonical JSON of a nested unicode value", () => {
    const value = {
      b: [1, 2.5, { z: null, a: true, "\u00e9": false }],
      a: "h\u00e9llo \u2028 \"q\" \\ \n\t\u0001 \ud834\udd1e \u4e16",
      "\u00e4": { y: -3, x: 0.1, Z: [], w: {} },
      A: "\u00ff"
    }
    expect(Digest.tagged("maka.route.v1", value)).toBe(
      "sha256:c2647f33e685734cefaa5d78f5278143ab1d90deecc1117f63560f1d8c1f199f"
    )
  })

  it("hashes bare bytes and tagged bytes", () => {
    expect(Digest.sha256Hex("hello, wörld")).toBe("79e19e4fe9f2b855f2c0db95472d50097c2d463eeeff72dbf5c5e54cb70d62ba")
    expect(Digest.sha256Hex(new TextEncoder().encode("hello, wörld"))).toBe(Digest.sha256Hex("hello, wörld"))
    const raw = '{"format":"json","value":[1,"two",{"three":3}]}'
    const expected = "sha256:9a4b3c8493cf496754ca325337858413e3f5fdc5087de95efb28516983e2c83d"
    expect(Digest.toolRaw(raw)).toBe(expected)
    expect(Digest.toolRaw(new TextEncoder().encode(raw))).toBe(expected)
    expect(Digest.taggedBytes(Digest.DigestTag.toolRaw, raw)).toBe(expected)
    expect(Digest.tagged(Digest.DigestTag.toolRaw, { value: [1, "two", { three: 3 }], format: "json" })).toBe(expected)
  })

  it("digests a model input with the history projection", () => {
    const digest = Digest.modelInput({
      prompt: [
        { role: "system", content: "Be brief." },
        { role: "user", content: [{ type: "text", text: "hi \u00e9" }] }
      ],
      tools: [{ name: "read", inputSchema: { type: "object" } }],
      providerOptions: { openai: { store: false } },
      maxOutputTokens: 8000
    })
    expect(digest).toBe("sha256:b88031e09f0ea96c519ed9e6a385ffedfcf5c4b17210139ed7e13602beb654ab")
  })

  it("digests a route, a projection and message content", () => {
    expect(Digest.route({ provider: "openai-compatible", model: "gpt-x", baseUrl: "https://example.test/v1" })).toBe(
      "sha256:438ddf4a4e3a7d597b796d2f7c8cdf1fa0d8cc3e19e4d7ae6c1e75080c45f584"
    )
    expect(Digest.toolProjection({ kind: "json", value: { files: ["a.ts", "b.ts"], count: 2 } })).toBe(
      "sha256:7429f30d1549a748fcdce526cb3f4c5d9a52b3aabdbcb3d53f7f56c7a2fcda61"
    )
    expect(Digest.messageContent({ kind: "text", text: "Hello, \u4e16\u754c" })).toBe(
      "sha256:b1a9edfeeab13aa0719c08d255927a510ac2b7c3639edb1741864b2aca7f62aa"
    )
  })

  it("digests an effective source with replacements in the order given", () => {
    const replacements = [
      { settledEventId: "e-9", archiveEventId: "e-12" },
      { settledEventId: "e-3", archiveEventId: "e-13" }
    ]
    const source = `sha256:${"ab".repeat(32)}`
    expect(Digest.effectiveSource(source, replacements)).toBe(
      "sha256:c64509c024109be8e06fb736808caa92d9fb510fd56165cd13e54d5c0673d981"
    )
    expect(Digest.effectiveSource(source, [...replacements].reverse())).not.toBe(
      Digest.effectiveSource(source, replacements)
    )
  })

  it("digests a tool catalog sorted by name without mutating it", () => {
    const catalog = [
      { name: "b_tool", description: "Second.", inputSchema: { type: "object" }, semantics: "read_only" },
      {
        name: "a_tool",
        description: "First.",
        inputSchema: { type: "object", properties: { x: { type: "string" } } },
        semantics: "effectful"
      },
      { name: "B_tool", description: "Upper.", inputSchema: {}, semantics: "read_only" }
    ]
    const before = Canonical.stringify(catalog)
    expect(Digest.toolCatalog(catalog)).toBe("sha256:aabeea82721c66567be22a61bbeca5cc26c83f81e005721b17f6f49c84403c2f")
    expect(Canonical.stringify(catalog)).toBe(before)
    expect(Digest.toolCatalog([...catalog].reverse())).toBe(Digest.toolCatalog(catalog))
  })

  it("digests a session log prefix of three events", () => {
    expect(Digest.logPrefix(scope, events, 5)).toBe(prefixGoldens[3])
    expect(Digest.logPrefix(scope, events, 9)).toBe(
      "sha256:3c24f22b591cbf9dcd6b887226be1d1f156166097db715e2c34cce747a8ea1a9"
    )
    expect(Digest.logPrefix({ id: "s1", kind: "session" }, [], 0)).toBe(prefixGoldens[0])
  })

  it("digests a run prefix", () => {
    const invocation = { sessionId: "s1", turnId: "t1", runId: "r1", invocationId: "i1" }
    expect(Digest.runPrefix(3, invocation, events)).toBe(
      "sha256:51b50c410309b3836cf58f51840a446b07e08686ba66f6bd7aa6b023ef1218e9"
    )
    expect(Digest.runPrefix(2, invocation, events)).not.toBe(Digest.runPrefix(3, invocation, events))
  })
})

describe("Digest.LogPrefixHash", () => {
  it("gives the prefix digest after every event when extended one event at a time", () => {
    const hash = Digest.LogPrefixHash.start(scope)
    expect(hash.digest(0)).toBe(prefixGoldens[0])
    events.forEach((event, index) => {
      hash.update(event.sequence, event.json)
      const count = index + 1
      expect(hash.digest(highWaterAfter(count))).toBe(prefixGoldens[count])
      expect(hash.digest(highWaterAfter(count))).toBe(Digest.logPrefix(scope, events.slice(0, count), highWaterAfter(count)))
    })
  })

  it("keeps extending after digest() and copies independently", () => {
    const hash = Digest.LogPrefixHash.start(scope).update(1, '{"a":1}')
    const copy = hash.copy()
    hash.digest(1)
    hash.digest(7)
    expect(hash.update(2, '{"text":"h\u00e9 \u4e16"}')).toBe(hash)
    expect(hash.digest(2)).toBe(prefixGoldens[2])
    expect(copy.digest(1)).toBe(prefixGoldens[1])
    copy.update(99, "{}")
    expect(hash.update(5, '{"kind":"x"}').digest(5)).toBe(prefixGoldens[3])
  })

  it("frames every event as docs/log-format.md §3.5 says, across buffer-sized runs, long texts and large sequences", () => {
    // The framing written out byte by byte, one hash update per field: the reference.
    const u64 = (value: number) => {
      const bytes = Buffer.alloc(8)
      bytes.writeBigUInt64BE(BigInt(value))
      return bytes
    }
    const framed = (hash: ReturnType<typeof createHash>, text: string) => hash.update(u64(Buffer.byteLength(text))).update(text, "utf8")
    const reference = (list: ReadonlyArray<{ readonly sequence: number; readonly json: string }>, highWater: number) => {
      const hash = framed(createHash("sha256").update("maka.log-prefix.v3").update(Uint8Array.of(0)), Canonical.stringify(scope))
      for (const event of list) framed(hash.update(u64(event.sequence)), event.json)
      return `sha256:${hash.update(u64(highWater)).digest("hex")}`
    }
    const texts = ["{}", '{"t":"h\u00e9 \u4e16 \ud83d\ude00"}', `{"t":"${"x".repeat(30_000)}"}`, `{"t":"${"\u4e16".repeat(25_000)}"}`, `{"t":"${"y".repeat(70_000)}"}`]
    const list = Array.from({ length: 400 }, (_, index) => ({
      sequence: index < 390 ? index + 1 : 2 ** 32 + index,
      json: texts[(index * 7) % texts.length]!,
    }))
    const hash = Digest.LogPrefixHash.start(scope)
    list.forEach((event, index) => {
      hash.update(event.sequence, event.json)
      if (index % 37 === 0 || index === list.length - 1) expect(hash.digest(event.sequence)).toBe(reference(list.slice(0, index + 1), event.sequence))
    })
    expect(Digest.logPrefix(scope, list, 2 ** 40)).toBe(reference(list, 2 ** 40))
    // `append` hashes as `update` does and answers each text's UTF-8 size, long texts included.
    const appended = Digest.LogPrefixHash.start(scope)
    for (const event of list) expect(appended.append(event.sequence, event.json)).toBe(Buffer.byteLength(event.json))
    expect(appended.digest(2 ** 40)).toBe(reference(list, 2 ** 40))
    // Hashers extended in turn, and copies, keep each its own events.
    const [first, second] = [Digest.LogPrefixHash.start(scope), Digest.LogPrefixHash.start(scope)]
    const evens = list.filter((_, index) => index % 2 === 0).slice(0, 60)
    const odds = list.filter((_, index) => index % 2 === 1).slice(0, 60)
    for (let index = 0; index < 60; index++) {
      first.update(evens[index]!.sequence, evens[index]!.json)
      second.update(odds[index]!.sequence, odds[index]!.json)
    }
    const branch = first.copy().update(7, "{}")
    first.update(8, "{}")
    expect(first.digest(8)).toBe(reference([...evens, { sequence: 8, json: "{}" }], 8))
    expect(branch.digest(7)).toBe(reference([...evens, { sequence: 7, json: "{}" }], 7))
    expect(second.digest(3)).toBe(reference(odds, 3))
  })

  it("treats a bad sequence or high-water mark as a bug", () => {
    const hash = Digest.LogPrefixHash.start(scope)
    for (const bad of [-1, 1.5, Number.NaN, 2 ** 53]) {
      expect(() => hash.update(bad, "{}")).toThrow(RangeError)
      expect(() => hash.digest(bad)).toThrow(RangeError)
      expect(() => Digest.runPrefix(bad, {}, [])).toThrow(RangeError)
    }
    expect(hash.digest(0)).toBe(prefixGoldens[0])
  })

  it("refuses a scope that is not plain JSON", () => {
    expect(() => Digest.LogPrefixHash.start({ kind: "session", id: undefined })).toThrow(Canonical.CanonicalJsonError)
  })
})
