// Upstream adapters against real-socket fakes of each wire format (no database): translation
// of requests and answers, streaming, tool-call round trips, error classification, timeouts,
// interruption and mid-stream drops; plus the deterministic mock adapter.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Either, Stream } from "effect"
import fc from "fast-check"
import * as http from "node:http"
import { createServer } from "node:net"
import type { ChatChunk, ChatMessage, ChatRequest } from "../schemas/Chat.js"
import { adapterFor } from "../layers/pipeline/upstream/Adapters.js"
import { postJson, postStream } from "../layers/pipeline/upstream/Http.js"
import { SseParser } from "../layers/pipeline/upstream/Sse.js"
import { MockAdapter } from "../layers/pipeline/upstream/Mock.js"
import type { ProviderKind, UpstreamAdapter, UpstreamCall } from "../layers/pipeline/upstream/Upstream.js"
import { UpstreamError } from "../layers/pipeline/upstream/Upstream.js"
import { startFakeAnthropic } from "./fakes/FakeAnthropic.js"
import { type FakeUpstream, startFakeOpenAi } from "./fakes/FakeOpenAi.js"
import { startFakeOpenAiResponses } from "./fakes/FakeOpenAiResponses.js"

const REPLY = "Hello from the fake upstream"
const TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

const base: ChatRequest = {
  model: "gateway-model",
  messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi there" }]
}

const weatherTool = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "Current weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
  }
}

const makeCall = (baseUrl: string, request: Partial<ChatRequest> = {}, timeoutMs = 2_000): UpstreamCall => ({
  baseUrl,
  apiKey: "sk-upstream-test",
  providerModelId: "provider-model-1",
  request: { ...base, ...request },
  timeoutMs,
  // A stray credential in the propagated headers must never reach the provider.
  headers: { traceparent: TRACEPARENT, Authorization: "Bearer leaked", "X-Api-Key": "leaked" }
})

const collect = (adapter: UpstreamAdapter, call: UpstreamCall) =>
  adapter.stream(call).pipe(
    Effect.flatMap(Stream.runCollect),
    Effect.map(Chunk.toReadonlyArray)
  )

const contentOf = (chunks: ReadonlyArray<ChatChunk>) =>
  chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content ?? "")).join("")

const finishOf = (chunks: ReadonlyArray<ChatChunk>) =>
  chunks.flatMap((c) => c.choices.map((ch) => ch.finish_reason)).filter((f) => f !== null)

/** Reassembles streamed tool-call deltas the way an OpenAI client does. */
const toolCallsOf = (chunks: ReadonlyArray<ChatChunk>) => {
  const calls = new Map<number, { id: string; name: string; arguments: string }>()
  for (const c of chunks) {
    for (const d of c.choices[0]?.delta.tool_calls ?? []) {
      const call = calls.get(d.index) ?? { id: "", name: "", arguments: "" }
      calls.set(d.index, {
        id: d.id ?? call.id,
        name: d.function?.name ?? call.name,
        arguments: call.arguments + (d.function?.arguments ?? "")
      })
    }
  }
  return [...calls.values()]
}

const failureOf = <A>(effect: Effect.Effect<A, UpstreamError>) =>
  Effect.flip(effect).pipe(Effect.tap((e) => expect(e).toBeInstanceOf(UpstreamError)))

/** A port nothing listens on: bind, read the port, close. */
const closedPort = () =>
  new Promise<number>((resolve) => {
    const s = createServer()
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as { port: number }
      s.close(() => resolve(port))
    })
  })

const toolTurn = (callId: string): ReadonlyArray<ChatMessage> => [
  { role: "assistant", content: null, tool_calls: [{ id: callId, type: "function", function: { name: "get_weather", arguments: `{"city":"Paris"}` } }] },
  { role: "tool", tool_call_id: callId, content: "sunny, 21C" }
]

interface Suite {
  readonly kind: ProviderKind
  readonly start: () => Promise<FakeUpstream>
  readonly path: string
  /** Credentials as the provider expects them. */
  readonly checkAuth: (headers: Record<string, unknown>) => void
  /** The first request of the tool round trip (tools + system + user). */
  readonly checkToolRequest: (body: any) => void
  /** The second request (assistant tool call + tool result). */
  readonly checkToolResultRequest: (body: any, callId: string) => void
  readonly checkJsonRequest: (body: any) => void
  readonly checkStreamRequest: (body: any) => void
}

const suites: ReadonlyArray<Suite> = [
  {
    kind: "openai",
    start: startFakeOpenAi,
    path: "/v1/chat/completions",
    checkAuth: (h) => expect(h["authorization"]).toBe("Bearer sk-upstream-test"),
    checkToolRequest: (body) => {
      expect(body.tools).toEqual([weatherTool])
      expect(body.messages[0]).toEqual({ role: "system", content: "Be brief." })
      expect(body.stream).toBeUndefined()
      expect(body.stream_options).toBeUndefined()
    },
    checkToolResultRequest: (body, callId) => {
      expect(body.messages.slice(2)).toEqual(toolTurn(callId))
    },
    checkJsonRequest: (body) => expect(body.response_format).toEqual({ type: "json_object" }),
    checkStreamRequest: (body) => {
      expect(body.stream).toBe(true)
      expect(body.stream_options).toEqual({ include_usage: true })
    }
  },
  {
    kind: "anthropic",
    start: startFakeAnthropic,
    path: "/v1/messages",
    checkAuth: (h) => {
      expect(h["x-api-key"]).toBe("sk-upstream-test")
      expect(h["anthropic-version"]).toBe("2023-06-01")
      expect(h["authorization"]).toBeUndefined()
    },
    checkToolRequest: (body) => {
      expect(body.system).toBe("Be brief.")
      expect(body.max_tokens).toBe(1024)
      expect(body.messages).toEqual([{ role: "user", content: [{ type: "text", text: "What's the weather in Paris?" }] }])
      expect(body.tools).toEqual([{
        name: "get_weather",
        description: "Current weather for a city",
        input_schema: weatherTool.function.parameters
      }])
      expect(body.tool_choice).toEqual({ type: "any" })
    },
    checkToolResultRequest: (body, callId) => {
      expect(body.messages.slice(1)).toEqual([
        { role: "assistant", content: [{ type: "tool_use", id: callId, name: "get_weather", input: { city: "Paris" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: callId, content: "sunny, 21C" }] }
      ])
    },
    checkJsonRequest: (body) => expect(body.system).toMatch(/^Be brief\.\n\n.*JSON object/),
    checkStreamRequest: (body) => expect(body.stream).toBe(true)
  },
  {
    kind: "openai-responses",
    start: startFakeOpenAiResponses,
    path: "/v1/responses",
    checkAuth: (h) => expect(h["authorization"]).toBe("Bearer sk-upstream-test"),
    checkToolRequest: (body) => {
      expect(body.instructions).toBe("Be brief.")
      expect(body.input).toEqual([{ role: "user", content: "What's the weather in Paris?" }])
      expect(body.tools).toEqual([{
        type: "function",
        name: "get_weather",
        description: "Current weather for a city",
        parameters: weatherTool.function.parameters,
        strict: false
      }])
      expect(body.tool_choice).toBe("required")
      expect(body.store).toBe(false)
    },
    checkToolResultRequest: (body, callId) => {
      expect(body.input.slice(1)).toEqual([
        { type: "function_call", call_id: callId, name: "get_weather", arguments: `{"city":"Paris"}` },
        { type: "function_call_output", call_id: callId, output: "sunny, 21C" }
      ])
    },
    checkJsonRequest: (body) => expect(body.text).toEqual({ format: { type: "json_object" } }),
    checkStreamRequest: (body) => expect(body.stream).toBe(true)
  }
]

const toolRequest: Partial<ChatRequest> = {
  messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "What's the weather in Paris?" }],
  tools: [weatherTool],
  tool_choice: "required"
}

const withToolTurn = (callId: string): Partial<ChatRequest> => ({
  ...toolRequest,
  messages: [...(toolRequest.messages ?? base.messages), ...toolTurn(callId)] as unknown as ChatRequest["messages"]
})

for (const suite of suites) {
  describe(`${suite.kind} adapter`, () => {
    const adapter = adapterFor(suite.kind)
    let fake: FakeUpstream
    beforeAll(async () => {
      fake = await suite.start()
    })
    afterAll(() => fake.close())
    beforeEach(() => fake.reset())

    it.live("complete: text, usage, model mapping and headers", () =>
      Effect.gen(function*() {
        const answer = yield* adapter.complete(makeCall(fake.url))
        expect(answer.object).toBe("chat.completion")
        expect(answer.choices[0]?.message).toEqual({ role: "assistant", content: REPLY })
        expect(answer.choices[0]?.finish_reason).toBe("stop")
        // system + user: the fakes report 10 prompt tokens per message, 1 per content chunk.
        expect(answer.usage).toEqual({ prompt_tokens: 20, completion_tokens: 5, total_tokens: 25 })
        expect(answer.model).toBe("provider-model-1")
        expect(Number.isInteger(answer.created)).toBe(true)
        expect(answer.created).toBeGreaterThan(1_600_000_000)
        const [req] = fake.requests
        expect(req?.path).toBe(suite.path)
        expect(req?.body.model).toBe("provider-model-1")
        expect(req?.headers["traceparent"]).toBe(TRACEPARENT)
        suite.checkAuth(req?.headers ?? {})
      }))

    it.live("stream: role chunk first, concatenated deltas, finish, usage last", () =>
      Effect.gen(function*() {
        const chunks = yield* collect(adapter, makeCall(fake.url, { stream: true }))
        expect(chunks[0]?.choices[0]?.delta.role).toBe("assistant")
        expect(chunks.every((c) => c.object === "chat.completion.chunk")).toBe(true)
        expect(new Set(chunks.map((c) => c.id)).size).toBe(1)
        expect(contentOf(chunks)).toBe(REPLY)
        expect(finishOf(chunks)).toEqual(["stop"])
        const last = chunks[chunks.length - 1]
        expect(last?.choices).toEqual([])
        expect(last?.usage).toEqual({ prompt_tokens: 20, completion_tokens: 5, total_tokens: 25 })
        suite.checkStreamRequest(fake.requests[0]?.body)
      }))

    it.live("tool-call round trip (non-stream), with the translation on the wire", () =>
      Effect.gen(function*() {
        const first = yield* adapter.complete(makeCall(fake.url, toolRequest))
        const choice = first.choices[0]
        expect(choice?.finish_reason).toBe("tool_calls")
        const call = choice?.message.tool_calls?.[0]
        expect(call?.type).toBe("function")
        expect(call?.function.name).toBe("get_weather")
        expect(JSON.parse(call?.function.arguments ?? "")).toEqual({ city: "Paris" })
        suite.checkToolRequest(fake.requests[0]?.body)

        const second = yield* adapter.complete(makeCall(fake.url, withToolTurn(call?.id ?? "")))
        expect(second.choices[0]?.message.content).toBe("done: sunny, 21C")
        expect(second.choices[0]?.finish_reason).toBe("stop")
        suite.checkToolResultRequest(fake.requests[1]?.body, call?.id ?? "")
      }))

    it.live("tool-call round trip (stream): id + name, then argument deltas", () =>
      Effect.gen(function*() {
        const chunks = yield* collect(adapter, makeCall(fake.url, { ...toolRequest, stream: true }))
        expect(chunks[0]?.choices[0]?.delta.role).toBe("assistant")
        const calls = toolCallsOf(chunks)
        expect(calls).toHaveLength(1)
        expect(calls[0]?.name).toBe("get_weather")
        expect(calls[0]?.id).not.toBe("")
        expect(JSON.parse(calls[0]?.arguments ?? "")).toEqual({ city: "Paris" })
        expect(finishOf(chunks)).toEqual(["tool_calls"])
        expect(chunks[chunks.length - 1]?.usage?.prompt_tokens).toBe(20)

        const again = yield* collect(adapter, makeCall(fake.url, { ...withToolTurn(calls[0]?.id ?? ""), stream: true }))
        expect(contentOf(again)).toBe("done: sunny, 21C")
        expect(finishOf(again)).toEqual(["stop"])
      }))

    it.live("json mode is passed through", () =>
      Effect.gen(function*() {
        const answer = yield* adapter.complete(makeCall(fake.url, { response_format: { type: "json_object" } }))
        expect(JSON.parse(answer.choices[0]?.message.content ?? "")).toEqual({ reply: REPLY })
        suite.checkJsonRequest(fake.requests[0]?.body)
      }))

    it.live("503 and 429 are retryable status errors (complete and stream)", () =>
      Effect.gen(function*() {
        fake.setBehavior({ fail: { status: 503, times: 2, message: "try later" } })
        const e1 = yield* failureOf(adapter.complete(makeCall(fake.url)))
        expect(e1).toMatchObject({ kind: "status", status: 503, retryable: true })
        // The provider's words are the detail (logged, redacted), never the message (spans, answers).
        expect(e1.message).toBe("upstream answered 503")
        expect(e1.detail).toContain("try later")
        // A stream fails before it is handed out, so the router can still fail over.
        const e2 = yield* failureOf(adapter.stream(makeCall(fake.url, { stream: true })))
        expect(e2).toMatchObject({ kind: "status", status: 503, retryable: true })
        fake.setBehavior({ fail: { status: 429, times: 1 } })
        const e3 = yield* failureOf(adapter.complete(makeCall(fake.url)))
        expect(e3).toMatchObject({ kind: "status", status: 429, retryable: true })
        // The scripted failures are used up: the next call succeeds.
        const ok = yield* adapter.complete(makeCall(fake.url))
        expect(ok.choices[0]?.message.content).toBe(REPLY)
      }))

    it.live("400 is not retryable and carries the upstream message as its detail", () =>
      Effect.gen(function*() {
        fake.setBehavior({ fail: { status: 400, times: 1, message: "messages: bad role" } })
        const e = yield* failureOf(adapter.complete(makeCall(fake.url)))
        expect(e).toMatchObject({ kind: "status", status: 400, retryable: false })
        expect(e.message).not.toContain("messages: bad role")
        expect(e.detail).toContain("messages: bad role")
      }))

    it.live("a hung upstream times out within timeoutMs and the request is aborted", () =>
      Effect.gen(function*() {
        fake.setBehavior({ hang: true })
        const started = Date.now()
        const e = yield* failureOf(adapter.complete(makeCall(fake.url, {}, 300)))
        expect(e).toMatchObject({ kind: "timeout", retryable: true })
        expect(Date.now() - started).toBeLessThan(1_000)
        const s = yield* failureOf(adapter.stream(makeCall(fake.url, { stream: true }, 300)))
        expect(s).toMatchObject({ kind: "timeout", retryable: true })
        yield* Effect.promise(() => fake.waitFor((f) => f.requests.length === 2 && f.requests.every((r) => r.clientClosed)))
      }))

    it.live("connection refused is a retryable connect error", () =>
      Effect.gen(function*() {
        const port = yield* Effect.promise(closedPort)
        const e = yield* failureOf(adapter.complete(makeCall(`http://127.0.0.1:${port}/v1`)))
        expect(e).toMatchObject({ kind: "connect", retryable: true })
        expect(e.message).toContain("ECONNREFUSED")
        const s = yield* failureOf(adapter.stream(makeCall(`http://127.0.0.1:${port}/v1`, { stream: true })))
        expect(s).toMatchObject({ kind: "connect", retryable: true })
      }))

    it.live("taking part of a stream closes the upstream request", () =>
      Effect.gen(function*() {
        fake.setBehavior({ reply: Array.from({ length: 40 }, (_, i) => `w${i}`).join(" "), chunkDelayMs: 20 })
        const stream = yield* adapter.stream(makeCall(fake.url, { stream: true }))
        const taken = yield* Stream.runCollect(Stream.take(stream, 3))
        expect(taken.length).toBe(3)
        yield* Effect.promise(() => fake.waitFor((f) => f.requests[0]?.clientClosed === true, 2_000))
      }))

    it.live("a drop mid-stream fails the stream with a connect UpstreamError after the chunks received", () =>
      Effect.gen(function*() {
        fake.setBehavior({ dropAfterChunks: 2 })
        const stream = yield* adapter.stream(makeCall(fake.url, { stream: true }))
        const items = Chunk.toReadonlyArray(yield* Stream.runCollect(Stream.either(stream)))
        const chunks = items.filter(Either.isRight).map((r) => r.right)
        const errors = items.filter(Either.isLeft).map((l) => l.left)
        expect(contentOf(chunks)).toBe("Hello from")
        expect(chunks.some((c) => c.usage)).toBe(false)
        expect(finishOf(chunks)).toEqual([])
        expect(errors).toHaveLength(1)
        expect(errors[0]).toBeInstanceOf(UpstreamError)
        expect(errors[0]).toMatchObject({ kind: "connect", retryable: true })
      }))

    it.live("a body that ends cleanly before the terminator fails as truncated, after the chunks received", () =>
      Effect.gen(function*() {
        fake.setBehavior({ endAfterChunks: 2 })
        const stream = yield* adapter.stream(makeCall(fake.url, { stream: true }))
        const items = Chunk.toReadonlyArray(yield* Stream.runCollect(Stream.either(stream)))
        expect(contentOf(items.filter(Either.isRight).map((r) => r.right))).toBe("Hello from")
        const errors = items.filter(Either.isLeft).map((l) => l.left)
        expect(errors).toHaveLength(1)
        expect(errors[0]).toMatchObject({ kind: "connect", retryable: true, message: "upstream stream ended before its terminator" })
        expect(Either.isLeft(items[items.length - 1]!)).toBe(true)
      }))

    it.live("an in-stream error event fails the stream with a retryable status error", () =>
      Effect.gen(function*() {
        fake.setBehavior({ streamErrorAfterChunks: 1 })
        const stream = yield* adapter.stream(makeCall(fake.url, { stream: true }))
        const items = Chunk.toReadonlyArray(yield* Stream.runCollect(Stream.either(stream)))
        expect(contentOf(items.filter(Either.isRight).map((r) => r.right))).toBe("Hello")
        const errors = items.filter(Either.isLeft).map((l) => l.left)
        expect(errors).toHaveLength(1)
        expect(errors[0]).toMatchObject({ kind: "status", retryable: true })
        expect(errors[0]?.message).not.toContain("scripted stream failure")
        expect(errors[0]?.detail).toContain("scripted stream failure")
      }))
  })
}

/** A local server for one test, with its URL; closed (connections too) when the test's scope ends, however it ends. */
const serve = (handler: http.RequestListener) =>
  Effect.acquireRelease(
    Effect.promise(() =>
      new Promise<{ url: string; server: http.Server }>((resolve) => {
        const server = http.createServer(handler)
        server.listen(0, "127.0.0.1", () => {
          const { port } = server.address() as { port: number }
          resolve({ url: `http://127.0.0.1:${port}/`, server })
        })
      })
    ),
    ({ server }) =>
      Effect.sync(() => {
        server.closeAllConnections()
        server.close()
      })
  )

describe("upstream deadline", () => {
  it.scopedLive("a JSON body that stalls after the headers times out within timeoutMs, and the request is closed", () =>
    Effect.gen(function*() {
      let closed = false
      const server = yield* serve((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" })
        res.write("{\"id\":") // the rest never comes
        res.on("close", () => {
          closed = true
        })
      })
      const started = Date.now()
      const e = yield* failureOf(adapterFor("openai").complete(makeCall(`${server.url}v1`, {}, 300)))
      expect(e).toMatchObject({ kind: "timeout", retryable: true })
      expect(Date.now() - started).toBeLessThan(1_000)
      yield* Effect.promise(async () => {
        for (let i = 0; i < 50 && !closed; i++) await new Promise((r) => setTimeout(r, 20))
      })
      expect(closed).toBe(true)
    }))
})

describe("upstream bodies", () => {
  it.scopedLive("a JSON answer far larger than a stream's read-ahead arrives whole", () =>
    Effect.gen(function*() {
      const text = JSON.stringify({ content: "x".repeat(1024 * 1024) })
      const server = yield* serve((_req, res) => res.end(text))
      const received = yield* postJson({ url: server.url, headers: {}, body: {}, timeoutMs: 5_000 })
      expect(received).toBe(text)
    }))

  it.scopedLive("a non-2xx answer keeps its message as the detail; of a large body only a prefix is read", () =>
    Effect.gen(function*() {
      let body = JSON.stringify({ error: { message: "overloaded" } })
      const server = yield* serve((_req, res) => {
        res.writeHead(500, { "content-type": "application/json" })
        res.end(body)
      })
      const small = yield* failureOf(postJson({ url: server.url, headers: {}, body: {}, timeoutMs: 5_000 }))
      expect(small).toMatchObject({ kind: "status", status: 500, retryable: true, message: "upstream answered 500", detail: "overloaded" })
      body = JSON.stringify({ error: { message: "overloaded" }, padding: "x".repeat(4 * 1024 * 1024) })
      const large = yield* failureOf(postJson({ url: server.url, headers: {}, body: {}, timeoutMs: 5_000 }))
      expect(large).toMatchObject({ kind: "status", status: 500, retryable: true, message: "upstream answered 500" })
      expect(large.detail?.startsWith(`{"error":{"message":"overloaded"}`)).toBe(true)
      expect(large.detail!.length).toBeLessThan(256 * 1024)
    }))

  it.scopedLive("a stream whose reader falls behind stops the socket's reads, and reading again resumes them", () =>
    Effect.gen(function*() {
      const total = 256 * 1024 * 1024
      const block = `data: ${"x".repeat(16 * 1024)}\n\n`
      let sent = 0
      const server = yield* serve((_req, res) => {
        res.writeHead(200, { "content-type": "text/event-stream" })
        const pump = () => {
          while (sent < total) {
            sent += block.length
            if (!res.write(block)) return void res.once("drain", pump)
          }
          res.end()
        }
        pump()
      })
      const source = yield* postStream({ url: server.url, headers: {}, body: {}, timeoutMs: 5_000 })
      yield* source.read
      yield* Effect.sleep("500 millis")
      // Unpaused, the client would have taken all 256 MB by now; paused, the server is stuck
      // once its socket's and the client's kernel buffers are full.
      const stalled = sent
      expect(stalled).toBeLessThan(64 * 1024 * 1024)
      let read = 0
      while (read < 2 * stalled) {
        const parts = yield* source.read
        if (parts._tag === "None") break
        for (const part of parts.value) read += part.length
      }
      expect(sent).toBeGreaterThan(stalled)
      yield* source.close(false)
    }))
})

describe("SSE parser", () => {
  it("events, multi-line data, comments, CRLF and CR, split chunks, no final blank line", () => {
    const euro = new TextEncoder().encode("€") // 3 bytes, split across chunks below
    const parser = new SseParser()
    const parts = [
      ": keep-alive\r\n\r\n",
      "event: a\r\ndata: {\"x\":",
      "1}\r",
      "\n\r\ndata: line1\ndata: line2\n\ndata: ",
      euro.slice(0, 1),
      euro.slice(1),
      "\rdata:no-space"
    ]
    const events = parts.flatMap((p) => parser.push(typeof p === "string" ? new TextEncoder().encode(p) : p))
    expect(events).toEqual([
      { event: "a", data: `{"x":1}` },
      { event: undefined, data: "line1\nline2" }
    ])
    expect(parser.end()).toEqual([{ event: undefined, data: "€\nno-space" }])
  })

  it("ignores one leading byte order mark, even split across reads, and keeps a later one", () => {
    const bytes = new TextEncoder().encode("\uFEFFdata: a\n\ndata: \uFEFFb\n\n")
    for (const cut of [0, 1, 2, 3, 4]) {
      const parser = new SseParser()
      const events = [...parser.push(bytes.slice(0, cut)), ...parser.push(bytes.slice(cut)), ...parser.end()]
      expect(events).toEqual([{ event: undefined, data: "a" }, { event: undefined, data: "\uFEFFb" }])
    }
  })

  it("gives the same events however the bytes are split (line ends, comments, multi-byte characters)", () => {
    const pieces = ["\r", "\n", "\r\n", ":", " ", "data", "event", "x", "€", "data: ", "event: e", ": c"]
    const events = (parts: ReadonlyArray<Uint8Array>) => {
      const parser = new SseParser()
      return [...parts.flatMap((part) => parser.push(part)), "end", ...parser.end()]
    }
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom(...pieces), { maxLength: 30 }),
        fc.array(fc.nat(), { maxLength: 5 }),
        (text, cuts) => {
          const bytes = new TextEncoder().encode(text.join(""))
          const at = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b)
          const parts = [0, ...at].map((from, i) => bytes.slice(from, at[i] ?? bytes.length))
          expect(events(parts)).toEqual(events([bytes]))
        }
      ),
      { numRuns: 2000 }
    )
  })
})

describe("anthropic specifics", () => {
  let fake: FakeUpstream
  beforeAll(async () => {
    fake = await startFakeAnthropic()
  })
  afterAll(() => fake.close())
  beforeEach(() => fake.reset())
  const adapter = adapterFor("anthropic")

  it.live("529 overloaded is retryable", () =>
    Effect.gen(function*() {
      fake.setBehavior({ fail: { status: 529, times: 1, message: "Overloaded" } })
      const e = yield* failureOf(adapter.complete(makeCall(fake.url)))
      expect(e).toMatchObject({ kind: "status", status: 529, retryable: true })
      expect(e.detail).toContain("Overloaded")
    }))

  it.live("merges same-role neighbours, maps stop/max_tokens/temperature/tool_choice", () =>
    Effect.gen(function*() {
      yield* adapter.complete(makeCall(fake.url, {
        messages: [
          { role: "system", content: "A" },
          { role: "user", content: "one" },
          { role: "user", content: [{ type: "text", text: "two" }] },
          { role: "system", content: "B" }
        ],
        stop: "END",
        max_completion_tokens: 77,
        temperature: 1.7,
        tools: [weatherTool],
        tool_choice: { type: "function", function: { name: "get_weather" } },
        parallel_tool_calls: false
      }))
      const body = fake.requests[0]?.body
      expect(body.system).toBe("A\n\nB")
      expect(body.messages).toEqual([{ role: "user", content: [{ type: "text", text: "one" }, { type: "text", text: "two" }] }])
      expect(body.stop_sequences).toEqual(["END"])
      expect(body.max_tokens).toBe(77)
      expect(body.temperature).toBe(1)
      expect(body.tool_choice).toEqual({ type: "tool", name: "get_weather", disable_parallel_tool_use: true })
    }))

  it.live("a tool call after a text block keeps tool index 0 and the preamble text", () =>
    Effect.gen(function*() {
      const answer = yield* adapter.complete(makeCall(fake.url, toolRequest))
      expect(answer.choices[0]?.message.content).toBe("Let me check.")
      const chunks = yield* collect(adapter, makeCall(fake.url, { ...toolRequest, stream: true }))
      expect(contentOf(chunks)).toBe("Let me check.")
      expect(chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []).every((d) => d.index === 0)).toBe(true)
    }))
})

describe("openai-responses specifics", () => {
  let fake: FakeUpstream
  beforeAll(async () => {
    fake = await startFakeOpenAiResponses()
  })
  afterAll(() => fake.close())
  beforeEach(() => fake.reset())

  it.live("max_tokens -> max_output_tokens, sampling params, specific tool choice", () =>
    Effect.gen(function*() {
      yield* adapterFor("openai-responses").complete(makeCall(fake.url, {
        max_tokens: 64,
        temperature: 0.3,
        top_p: 0.9,
        tools: [weatherTool],
        tool_choice: { type: "function", function: { name: "get_weather" } }
      }))
      const body = fake.requests[0]?.body
      expect(body).toMatchObject({ max_output_tokens: 64, temperature: 0.3, top_p: 0.9 })
      expect(body.tool_choice).toEqual({ type: "function", name: "get_weather" })
      expect(body.messages).toBeUndefined()
    }))
})

describe("mock adapter", () => {
  const call = makeCall("http://unused.invalid/v1", {
    messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "ping pong" }]
  })

  it.effect("echoes the last user message with deterministic usage", () =>
    Effect.gen(function*() {
      const answer = yield* MockAdapter.complete(call)
      expect(answer.model).toBe("provider-model-1")
      expect(answer.id).toMatch(/^chatcmpl-/)
      expect(answer.choices).toEqual([{ index: 0, message: { role: "assistant", content: "echo: ping pong" }, finish_reason: "stop" }])
      // "Be brief." + "ping pong" = 18 chars -> ceil(18/4) = 5; reply has 3 words.
      expect(answer.usage).toEqual({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 })
    }))

  it.effect("streams role, word chunks, stop, then usage", () =>
    Effect.gen(function*() {
      const chunks = yield* collect(MockAdapter, { ...call, request: { ...call.request, stream: true } })
      expect(chunks.map((c) => c.choices[0]?.delta.content ?? null)).toEqual(["", "echo:", " ping", " pong", null, null])
      expect(chunks[0]?.choices[0]?.delta.role).toBe("assistant")
      expect(finishOf(chunks)).toEqual(["stop"])
      expect(chunks[5]?.usage).toEqual({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 })
    }))

  it.effect("json mode answers a JSON object", () =>
    Effect.gen(function*() {
      const answer = yield* MockAdapter.complete({ ...call, request: { ...call.request, response_format: { type: "json_object" } } })
      expect(JSON.parse(answer.choices[0]?.message.content ?? "")).toEqual({ echo: "ping pong" })
    }))

  it.effect("at least one prompt token", () =>
    Effect.gen(function*() {
      const answer = yield* MockAdapter.complete({ ...call, request: { model: "m", messages: [{ role: "user", content: "" }] } })
      expect(answer.usage.prompt_tokens).toBe(1)
      expect(answer.choices[0]?.message.content).toBe("echo: ")
    }))
})
