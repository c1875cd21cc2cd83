/**
 * The adapter's own HTTP client (docs/model.md §4.2), against a real `node:http` server on loopback:
 * connections kept alive between requests, header values sent as `fetch` sends them, compressed
 * bodies decoded, a body cut short failing its read, an abort rejecting with an `AbortError`
 * before and during the body, and a read taking everything that reached the socket meanwhile, up
 * to the unread bound.
 */
import { assert, describe, it } from "@effect/vitest"
import { getEventListeners } from "node:events"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as zlib from "node:zlib"
import { IDLE_CONNECTION_MS, inflateEither, MAX_BUFFERED_BODY_BYTES, send, type BodyReader } from "../src/internal/http-client.ts"

type Handler = (request: http.IncomingMessage, response: http.ServerResponse) => void

/** A loopback server running `handler`; counts the connections it accepted. */
const serve = async (handler: Handler) => {
  const server = http.createServer(handler)
  let connections = 0
  server.on("connection", () => connections++)
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/v1/chat/completions`,
    connections: () => connections,
    close: () => {
      server.closeAllConnections()
      return new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

const post = (url: string, headers: Record<string, string> = {}, signal = new AbortController().signal) =>
  send(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: '{"q":"é"}', signal })

/** `count` pieces of `size` bytes, each a different letter, as one string. */
const pieces = (count: number, size: number): string =>
  Array.from({ length: count }, (_, index) => String.fromCharCode(97 + (index % 26)).repeat(size)).join("")

/** Every chunk of the body as text, until its end. */
const readAll = async (reader: BodyReader): Promise<string> => {
  const decoder = new TextDecoder()
  let text = ""
  for (;;) {
    const read = await reader.read()
    if (read.done) return text + decoder.decode()
    text += decoder.decode(read.value, { stream: true })
  }
}

const rejection = async (promise: Promise<unknown>): Promise<Error> => {
  try {
    await promise
  } catch (error) {
    return error as Error
  }
  throw new Error("expected a rejection")
}

describe("the adapter's HTTP client", () => {
  it("sends the body with its length and trimmed header values, and keeps the connection for the next request", async () => {
    const received: Array<{ body: string; length: string | undefined; authorization: string | undefined }> = []
    const server = await serve((request, response) => {
      let body = ""
      request.setEncoding("utf8")
      request.on("data", (chunk: string) => (body += chunk))
      request.on("end", () => {
        received.push({ body, length: request.headers["content-length"], authorization: request.headers["authorization"] })
        response.writeHead(200, { "content-type": "text/event-stream", "x-extra": "yes" })
        response.end("data: one\n\n")
      })
    })
    try {
      for (let index = 0; index < 3; index++) {
        const response = await post(server.url, { authorization: " Bearer sk-1\n" })
        assert.strictEqual(response.status, 200)
        assert.isTrue(response.ok)
        assert.strictEqual(response.headers.get("Content-Type"), "text/event-stream")
        assert.strictEqual(response.headers.get("x-missing"), null)
        assert.strictEqual(await readAll(response.body!.getReader()), "data: one\n\n")
      }
      assert.deepStrictEqual(received[0], { body: '{"q":"é"}', length: "10", authorization: "Bearer sk-1" })
      assert.strictEqual(received.length, 3)
      assert.strictEqual(server.connections(), 1)
    } finally {
      await server.close()
    }
  })

  it("sends a body in parts as one body with its whole length", async () => {
    const received: Array<{ body: string; length: string | undefined }> = []
    const server = await serve((request, response) => {
      let body = ""
      request.setEncoding("utf8")
      request.on("data", (chunk: string) => (body += chunk))
      request.on("end", () => {
        received.push({ body, length: request.headers["content-length"] })
        response.writeHead(200, { "content-type": "text/event-stream" })
        response.end("data: one\n\n")
      })
    })
    try {
      // A small body goes in one write, a large one part by part: both arrive whole.
      for (const [index, size] of [10, 200_000].entries()) {
        const parts = [Buffer.from('{"q":'), Buffer.from('"é","big":"'), Buffer.alloc(size, "x"), Buffer.from('"}')]
        const byteLength = parts.reduce((sum, part) => sum + part.length, 0)
        const response = await send(server.url, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: { parts, byteLength },
          signal: new AbortController().signal,
        })
        assert.strictEqual(await readAll(response.body!.getReader()), "data: one\n\n")
        assert.strictEqual(received[index]!.length, String(byteLength))
        assert.strictEqual(received[index]!.body, Buffer.concat(parts).toString("utf8"))
      }
    } finally {
      await server.close()
    }
  })

  it("lets a kept-alive connection wait longer than the idle-connection timeout for a slow answer", async () => {
    const server = await serve((request, response) => {
      const wait = Number(request.headers["x-wait"])
      request.resume()
      request.on("end", () =>
        setTimeout(() => {
          response.writeHead(200, { "content-type": "text/event-stream" })
          response.write("data: a\n\n")
          setTimeout(() => response.end("data: b\n\n"), wait)
        }, wait),
      )
    })
    try {
      assert.strictEqual(await readAll((await post(server.url, { "x-wait": "0" })).body!.getReader()), "data: a\n\ndata: b\n\n")
      // The second request reuses the connection; the model thinks past the idle-connection timeout
      // before its headers and again between two chunks.
      const slow = await post(server.url, { "x-wait": String(IDLE_CONNECTION_MS + 300) })
      assert.strictEqual(await readAll(slow.body!.getReader()), "data: a\n\ndata: b\n\n")
      assert.strictEqual(server.connections(), 1)
    } finally {
      await server.close()
    }
  }, 20_000)

  it("decodes a gzip, deflate or brotli body, and passes an error status through with its body", async () => {
    const text = "data: compressed\n\n".repeat(50)
    // By the name the test asks for: the header sent and the body's bytes.
    const encoders: Record<string, { readonly header: string; readonly encode: (input: string) => Buffer }> = {
      gzip: { header: "gzip", encode: (input) => zlib.gzipSync(input) },
      deflate: { header: "deflate", encode: (input) => zlib.deflateSync(input) },
      br: { header: "br", encode: (input) => zlib.brotliCompressSync(input) },
      // Raw deflate data under the name `deflate`, as some servers send it.
      "raw deflate": { header: "deflate", encode: (input) => zlib.deflateRawSync(input) },
      // Two codings, the last applied first; names in any case, with blanks.
      stacked: { header: " GZIP ,br", encode: (input) => zlib.brotliCompressSync(zlib.gzipSync(input)) },
      identity: { header: "identity", encode: (input) => Buffer.from(input) },
    }
    const server = await serve((request, response) => {
      const encoding = request.headers["x-encoding"] as string
      if (encoding === "none") {
        response.writeHead(429, { "content-type": "application/json", "retry-after": "2" })
        response.end('{"error":{"message":"slow down"}}')
        return
      }
      const { header, encode } = encoders[encoding]!
      response.writeHead(200, { "content-type": "text/event-stream", "content-encoding": header })
      // In pieces: a coding told apart by its first byte sees a first chunk of one byte.
      const bytes = encode(text)
      response.write(bytes.subarray(0, 1))
      setTimeout(() => response.end(bytes.subarray(1)), 10)
    })
    try {
      for (const encoding of Object.keys(encoders)) {
        const response = await post(server.url, { "x-encoding": encoding })
        assert.strictEqual(await readAll(response.body!.getReader()), text, encoding)
      }
      const refused = await post(server.url, { "x-encoding": "none" })
      assert.strictEqual(refused.status, 429)
      assert.isFalse(refused.ok)
      assert.strictEqual(refused.headers.get("retry-after"), "2")
      assert.strictEqual(await readAll(refused.body!.getReader()), '{"error":{"message":"slow down"}}')
    } finally {
      await server.close()
    }
  })

  it("fails the read of a body cut short, after what did arrive", async () => {
    const server = await serve((_request, response) => {
      response.writeHead(200, { "content-type": "text/event-stream" })
      response.write("data: partial\n\n", () => setTimeout(() => response.socket?.destroy(), 20))
    })
    try {
      const reader = (await post(server.url)).body!.getReader()
      const first = await reader.read()
      assert.isFalse(first.done)
      assert.strictEqual(new TextDecoder().decode(first.value), "data: partial\n\n")
      const failure = await rejection(reader.read())
      assert.notStrictEqual(failure.name, "AbortError")
    } finally {
      await server.close()
    }
  })

  it("rejects with an AbortError when aborted before the response and while the body is read", async () => {
    const server = await serve((request, response) => {
      if (request.headers["x-wait"] === "headers") return
      response.writeHead(200, { "content-type": "text/event-stream" })
      response.write("data: first\n\n")
    })
    try {
      const early = new AbortController()
      const pending = post(server.url, { "x-wait": "headers" }, early.signal)
      setTimeout(() => early.abort(), 20)
      assert.strictEqual((await rejection(pending)).name, "AbortError")
      assert.strictEqual((await rejection(post(server.url, {}, early.signal))).name, "AbortError")

      const late = new AbortController()
      const reader = (await post(server.url, {}, late.signal)).body!.getReader()
      assert.isFalse((await reader.read()).done)
      const waiting = reader.read()
      late.abort()
      assert.strictEqual((await rejection(waiting)).name, "AbortError")
    } finally {
      await server.close()
    }
  })

  it("leaves no abort listener behind once a request is done, read to its end, refused or cancelled", async () => {
    const server = await serve((request, response) => {
      if (request.headers["x-refuse"] === "yes") {
        response.writeHead(429, { "content-type": "application/json" })
        return response.end('{"error":{"message":"slow down"}}')
      }
      response.writeHead(200, { "content-type": "text/event-stream" })
      if (request.headers["x-open"] === "yes") return response.write("data: first\n\n")
      response.end("data: first\n\n")
    })
    try {
      const shared = new AbortController()
      for (let round = 0; round < 3; round++) {
        const response = await post(server.url, {}, shared.signal)
        assert.strictEqual(await readAll(response.body!.getReader()), "data: first\n\n")
      }
      const refused = await post(server.url, { "x-refuse": "yes" }, shared.signal)
      assert.strictEqual(refused.status, 429)
      await readAll(refused.body!.getReader())
      const open = (await post(server.url, { "x-open": "yes" }, shared.signal)).body!.getReader()
      assert.isFalse((await open.read()).done)
      assert.strictEqual(getEventListeners(shared.signal, "abort").length, 1)
      await open.cancel()
      // The request's close comes after its response ended or its socket was destroyed.
      for (let wait = 0; wait < 50 && getEventListeners(shared.signal, "abort").length > 0; wait++) {
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
      assert.strictEqual(getEventListeners(shared.signal, "abort").length, 0)
    } finally {
      await server.close()
    }
  })

  it("wakes a waiting read only after the socket's pending reads: a burst comes in one read, not one per 64 KiB", async () => {
    // 32 writes of 8 KiB at once, after the client's read is already waiting: they reach the client's
    // socket together, more than one socket read (64 KiB) of them.
    const burst = pieces(32, 8 * 1024)
    let start: (() => void) | undefined
    const server = await serve((_request, response) => {
      response.writeHead(200, { "content-type": "text/event-stream" })
      response.flushHeaders()
      start = () => {
        for (let index = 0; index < 32; index++) response.write(burst.slice(index * 8 * 1024, (index + 1) * 8 * 1024))
        response.end()
      }
    })
    try {
      const reader = (await post(server.url)).body!.getReader()
      const first = reader.read()
      start!()
      const read = await first
      assert.isFalse(read.done)
      assert.isAbove(read.value!.byteLength, 64 * 1024)
      const rest = await readAll(reader)
      assert.strictEqual(new TextDecoder().decode(read.value) + rest, burst)
    } finally {
      await server.close()
    }
  })

  it("buffers what arrives while no read waits, and stops reading the socket past its unread bound", async () => {
    const body = pieces(64, 64 * 1024)
    const server = await serve((_request, response) => {
      response.writeHead(200, { "content-type": "text/event-stream" })
      response.end(body)
    })
    try {
      const reader = (await post(server.url)).body!.getReader()
      // Nothing reads for a while: what arrives is buffered, up to the bound and at most one socket read more.
      await new Promise((resolve) => setTimeout(resolve, 200))
      const first = await reader.read()
      assert.isFalse(first.done)
      assert.isAtLeast(first.value!.byteLength, MAX_BUFFERED_BODY_BYTES)
      assert.isAtMost(first.value!.byteLength, MAX_BUFFERED_BODY_BYTES + 64 * 1024)
      // The body goes on after the read, whole and in order.
      assert.strictEqual(new TextDecoder().decode(first.value) + (await readAll(reader)), body)
    } finally {
      await server.close()
    }
  })

  it("inflates a deflate body no further ahead of its reader than its buffer, however much it expands", async () => {
    for (const compress of [zlib.deflateSync, zlib.deflateRawSync]) {
      // 64 KiB that inflate to 64 MiB, written at once; nothing reads them.
      const inflater = inflateEither()
      inflater.write(compress(Buffer.alloc(64 * 1024 * 1024, "a")))
      await new Promise((resolve) => setTimeout(resolve, 200))
      assert.isAtMost(inflater.readableLength, inflater.readableHighWaterMark + 64 * 1024)
      // Read, it gives the whole body.
      let total = 0
      inflater.on("data", (chunk: Buffer) => (total += chunk.length))
      inflater.end()
      await new Promise((resolve) => inflater.once("end", resolve))
      assert.strictEqual(total, 64 * 1024 * 1024)
    }
  })

  it("refuses a body of more codings than fetch takes, naming why, and leaves a coding it does not decode as it is", async () => {
    const text = "data: plain\n\n"
    const server = await serve((request, response) => {
      const header = request.headers["x-encoding"] as string
      response.writeHead(200, { "content-type": "text/event-stream", "content-encoding": header })
      response.end(header.startsWith("gzip") ? zlib.gzipSync(zlib.gzipSync(zlib.gzipSync(zlib.gzipSync(zlib.gzipSync(zlib.gzipSync(text)))))) : text)
    })
    try {
      const refused = await post(server.url, { "x-encoding": "gzip, gzip, gzip, gzip, gzip, gzip" })
      const failure = await rejection(readAll(refused.body!.getReader()))
      assert.include(failure.message, "too many content codings in the response: 6, at most 5")
      for (const header of ["identity", "compress", "br, x-unknown"]) {
        assert.strictEqual(await readAll((await post(server.url, { "x-encoding": header })).body!.getReader()), text, header)
      }
    } finally {
      await server.close()
    }
  })

  it("ends a cancelled body's reads, and refuses a protocol it does not speak", async () => {
    const server = await serve((_request, response) => {
      response.writeHead(200, { "content-type": "text/event-stream" })
      response.write("data: first\n\n")
    })
    try {
      const reader = (await post(server.url)).body!.getReader()
      await reader.read()
      const waiting = reader.read()
      await reader.cancel()
      assert.isTrue((await waiting).done)
      assert.instanceOf(await rejection(post("ftp://127.0.0.1/v1")), TypeError)
    } finally {
      await server.close()
    }
  })
})
