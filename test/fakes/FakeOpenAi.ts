// A fake OpenAI Chat Completions upstream (a real node:http server on 127.0.0.1) with its
// embeddings route, plus the protocol-independent core the other fakes (Anthropic, Responses)
// reuse: recording, scripted failures, hangs, mid-stream drops, per-chunk delays and the
// reply/tool-call decision.
import { createHash } from "node:crypto"
import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { waitUntil } from "../support/Polling.js"

// ---- shared core ----------------------------------------------------------------------------

export interface FakeRequest {
  readonly path: string
  readonly headers: IncomingHttpHeaders
  readonly body: any
  /** The client closed the connection before the fake finished answering (abort/timeout). */
  clientClosed: boolean
}

export interface FakeBehavior {
  /** Text answer (default "Hello from the fake upstream"); streamed one word per content chunk. */
  readonly reply?: string
  /** Arguments of the scripted tool call; default `{"city":"Paris"}`. */
  readonly toolArguments?: string
  /** Text the model says before its tool call (the Anthropic fake always says "Let me check."); default none. */
  readonly toolPreamble?: string
  /** Answer `status` (with a provider-shaped error body) to the next `times` requests. */
  readonly fail?: { readonly status: number; readonly times: number; readonly message?: string }
  /** Accept the request and never answer (the client must time out). */
  readonly hang?: boolean
  /** Streams only: send this many content chunks, then destroy the socket (no finish, no usage). */
  readonly dropAfterChunks?: number
  /** Streams only: send this many content chunks, then the provider's in-stream error event, then end. */
  readonly streamErrorAfterChunks?: number
  /** Streams only: send this many content chunks, then end the body cleanly: no finish, usage or terminator. */
  readonly endAfterChunks?: number
  /** Streams only: pause before each content chunk. */
  readonly chunkDelayMs?: number
  /** Pause before the status line (slow but not hung). */
  readonly responseDelayMs?: number
  /** Report this usage instead of the fake's own count (a provider with broken or hostile usage). */
  readonly usage?: FakeUsage
}

/** What the last turn asks for, read from the provider's own request shape. */
export interface Conversation {
  readonly messageCount: number
  /** Set when the last message is a tool result: the fake answers "done: <result>". */
  readonly toolResult: string | undefined
  readonly lastIsUser: boolean
  readonly firstToolName: string | undefined
  readonly json: boolean
  /** The JSON schema of a structured-output request: the answer is an object matching it. */
  readonly schema?: unknown
  readonly stream: boolean
  readonly model: string
}

export type Plan =
  | { readonly kind: "text"; readonly text: string; readonly pieces: ReadonlyArray<string> }
  | {
    readonly kind: "tool"
    readonly callId: string
    readonly name: string
    readonly arguments: string
    readonly pieces: ReadonlyArray<string>
    readonly preamble?: string | undefined
  }

/** The usage every fake reports: prompt = messages x 10, completion = content chunks sent in full. */
export interface FakeUsage {
  readonly prompt: number
  readonly completion: number
  /** Prompt tokens read from / written to a prompt cache (the Anthropic fake reports them apart from `prompt`). */
  readonly cacheRead?: number
  readonly cacheWrite?: number
}

/** SSE frames of a stream: content frames are what the `...AfterChunks` limits and `chunkDelayMs` count. */
export interface Frames {
  readonly head: ReadonlyArray<string>
  readonly content: ReadonlyArray<string>
  readonly tail: ReadonlyArray<string>
}

export interface FakeProtocol {
  readonly path: string
  readonly conversation: (body: any) => Conversation
  readonly json: (plan: Plan, usage: FakeUsage, c: Conversation, n: number) => unknown
  readonly frames: (plan: Plan, usage: FakeUsage, c: Conversation, n: number, body: any) => Frames
  readonly errorBody: (status: number, message: string) => unknown
  /** The SSE frame a provider sends when it fails after the stream started. */
  readonly streamError: (message: string) => string
  /** The provider's embeddings route, when it has one (answered by `embeddingList`). */
  readonly embeddingsPath?: string
}

/** The vector the fake gives a text: `dimensions` values from its SHA-256, in [-1, 1]. */
export const fakeVector = (text: string, dimensions: number): Array<number> => {
  const digest = createHash("sha256").update(text).digest()
  return Array.from({ length: dimensions }, (_, i) => digest[i % digest.length]! / 127.5 - 1)
}

/** Dimensions of the fake's vectors when the request names none. */
export const FAKE_EMBEDDING_DIMENSIONS = 4

/** Prompt tokens the fake reports per input text (unless `usage` is scripted). */
export const FAKE_EMBEDDING_TOKENS_PER_INPUT = 10

/** OpenAI's embedding list for a request body: floats, or base64 float32 when asked. */
const embeddingList = (body: any, behavior: FakeBehavior) => {
  const inputs: Array<string> = typeof body?.input === "string" ? [body.input] : Array.isArray(body?.input) ? body.input.map(String) : []
  const dimensions = typeof body?.dimensions === "number" ? body.dimensions : FAKE_EMBEDDING_DIMENSIONS
  const prompt = behavior.usage?.prompt ?? inputs.length * FAKE_EMBEDDING_TOKENS_PER_INPUT
  return {
    object: "list",
    data: inputs.map((text, index) => {
      const vector = fakeVector(text, dimensions)
      const embedding = body?.encoding_format === "base64" ? Buffer.from(new Float32Array(vector).buffer).toString("base64") : vector
      return { object: "embedding", index, embedding }
    }),
    model: String(body?.model),
    usage: { prompt_tokens: prompt, total_tokens: prompt }
  }
}

export interface FakeUpstream {
  /** Base URL including /v1, as a provider's base_url. */
  readonly url: string
  readonly requests: Array<FakeRequest>
  /** Replaces the behaviour (and restarts the `fail.times` count). */
  readonly setBehavior: (behavior: FakeBehavior) => void
  /** Default behaviour and no recorded requests. */
  readonly reset: () => void
  readonly waitFor: (predicate: (fake: FakeUpstream) => boolean, timeoutMs?: number) => Promise<void>
  readonly close: () => Promise<void>
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Word pieces that keep their leading whitespace, so they concatenate back to the text. */
export const splitWords = (text: string): ReadonlyArray<string> => text.match(/\s*\S+(\s+$)?/g) ?? []

export const sse = (data: unknown, event?: string) =>
  `${event === undefined ? "" : `event: ${event}\n`}data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`

/** A value matching a simple JSON schema: strings are the reply, numbers 42, objects filled in. */
export const valueFor = (schema: any, reply: string): unknown => {
  if (Array.isArray(schema?.enum)) return schema.enum[0]
  const type = Array.isArray(schema?.type) ? schema.type.find((t: unknown) => t !== "null") : schema?.type
  switch (type) {
    case "object":
      return Object.fromEntries(Object.entries(schema.properties ?? {}).map(([k, v]) => [k, valueFor(v, reply)]))
    case "array":
      return [valueFor(schema.items, reply)]
    case "string":
      return reply
    case "number":
    case "integer":
      return 42
    case "boolean":
      return true
    default:
      return null
  }
}

const planFor = (c: Conversation, behavior: FakeBehavior, n: number): Plan => {
  if (c.toolResult !== undefined) {
    const text = `done: ${c.toolResult}`
    return { kind: "text", text, pieces: splitWords(text) }
  }
  if (c.firstToolName !== undefined && c.lastIsUser) {
    const args = behavior.toolArguments ?? `{"city":"Paris"}`
    const half = Math.ceil(args.length / 2)
    return {
      kind: "tool",
      callId: `call_fake_${n}`,
      name: c.firstToolName,
      arguments: args,
      pieces: [args.slice(0, half), args.slice(half)],
      preamble: behavior.toolPreamble
    }
  }
  const reply = behavior.reply ?? "Hello from the fake upstream"
  const text = c.schema !== undefined ? JSON.stringify(valueFor(c.schema, reply)) : c.json ? JSON.stringify({ reply }) : reply
  return { kind: "text", text, pieces: splitWords(text) }
}

const readBody = (req: import("node:http").IncomingMessage) =>
  new Promise<string>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    req.on("error", reject)
  })

const sendJson = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { "content-type": "application/json" })
  res.end(JSON.stringify(body))
}

export const startFake = async (protocol: FakeProtocol): Promise<FakeUpstream> => {
  let behavior: FakeBehavior = {}
  let failuresLeft = 0
  let counter = 0

  const streamFrames = async (res: ServerResponse, frames: Frames, drop: () => void) => {
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
    res.flushHeaders()
    for (const f of frames.head) res.write(f)
    const limit = behavior.dropAfterChunks ?? behavior.streamErrorAfterChunks ?? behavior.endAfterChunks
    for (const [i, f] of frames.content.entries()) {
      if (limit !== undefined && i >= limit) break
      if (behavior.chunkDelayMs !== undefined) await sleep(behavior.chunkDelayMs)
      if (res.destroyed) return
      res.write(f)
    }
    if (behavior.streamErrorAfterChunks !== undefined) {
      res.end(protocol.streamError("scripted stream failure"))
      return
    }
    if (behavior.endAfterChunks !== undefined) {
      res.end()
      return
    }
    if (limit !== undefined) {
      // Let the client read what was sent (an errored web stream discards unread chunks).
      await sleep(50)
      drop()
      return
    }
    for (const f of frames.tail) res.write(f)
    res.end()
  }

  const handle = async (body: any, res: ServerResponse, record: FakeRequest) => {
    const n = ++counter
    if (behavior.responseDelayMs !== undefined) await sleep(behavior.responseDelayMs)
    if (failuresLeft > 0 && behavior.fail !== undefined) {
      failuresLeft--
      return sendJson(res, behavior.fail.status, protocol.errorBody(behavior.fail.status, behavior.fail.message ?? "scripted failure"))
    }
    if (behavior.hang) return // never answer; close() or the client ends it
    const c = protocol.conversation(body)
    const plan = planFor(c, behavior, n)
    const usage: FakeUsage = behavior.usage ?? { prompt: c.messageCount * 10, completion: plan.pieces.length }
    if (!c.stream) {
      if (behavior.dropAfterChunks !== undefined) return res.socket?.destroy()
      return sendJson(res, 200, protocol.json(plan, usage, c, n))
    }
    let dropped = false
    res.on("close", () => {
      if (!res.writableFinished && !dropped) record.clientClosed = true
    })
    await streamFrames(res, protocol.frames(plan, usage, c, n, body), () => {
      dropped = true
      res.socket?.destroy()
    })
  }

  const handleEmbeddings = async (body: any, res: ServerResponse) => {
    counter++
    if (behavior.responseDelayMs !== undefined) await sleep(behavior.responseDelayMs)
    if (failuresLeft > 0 && behavior.fail !== undefined) {
      failuresLeft--
      return sendJson(res, behavior.fail.status, protocol.errorBody(behavior.fail.status, behavior.fail.message ?? "scripted failure"))
    }
    if (behavior.hang) return
    return sendJson(res, 200, embeddingList(body, behavior))
  }

  const server = createServer((req, res) => {
    readBody(req).then((raw) => {
      const path = req.url ?? "/"
      let body: any
      try {
        body = raw === "" ? undefined : JSON.parse(raw)
      } catch {
        return sendJson(res, 400, protocol.errorBody(400, "invalid JSON body"))
      }
      const record: FakeRequest = { path, headers: req.headers, body, clientClosed: false }
      fake.requests.push(record)
      res.on("close", () => {
        if (!res.writableFinished && !res.headersSent) record.clientClosed = true
      })
      if (req.method === "POST" && protocol.embeddingsPath !== undefined && path === protocol.embeddingsPath) {
        return handleEmbeddings(body, res)
      }
      if (req.method !== "POST" || path !== protocol.path) {
        return sendJson(res, 404, protocol.errorBody(404, `no route ${req.method} ${path}`))
      }
      return handle(body, res, record)
    }).catch(() => res.destroy())
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()))
  const port = (server.address() as AddressInfo).port

  const fake: FakeUpstream = {
    url: `http://127.0.0.1:${port}/v1`,
    requests: [],
    setBehavior: (b) => {
      behavior = b
      failuresLeft = b.fail?.times ?? 0
    },
    reset: () => {
      behavior = {}
      failuresLeft = 0
      fake.requests.length = 0
    },
    waitFor: (predicate, timeoutMs = 5_000) => waitUntil(() => predicate(fake), timeoutMs, "fake upstream"),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
  return fake
}

// ---- OpenAI chat completions ---------------------------------------------------------------

const textOf = (content: any): string =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
    ? content.map((p: any) => (typeof p?.text === "string" ? p.text : typeof p?.content === "string" ? p.content : "")).join("")
    : ""

const created = () => Math.floor(Date.now() / 1000)

const openAiUsage = (u: FakeUsage) => ({
  prompt_tokens: u.prompt,
  completion_tokens: u.completion,
  total_tokens: u.prompt + u.completion
})

const openAiProtocol: FakeProtocol = {
  path: "/v1/chat/completions",
  embeddingsPath: "/v1/embeddings",
  conversation: (body) => {
    const messages: Array<any> = body?.messages ?? []
    const last = messages[messages.length - 1]
    return {
      messageCount: messages.length,
      toolResult: last?.role === "tool" ? textOf(last.content) : undefined,
      lastIsUser: last?.role === "user",
      firstToolName: body?.tools?.[0]?.function?.name,
      json: body?.response_format?.type === "json_object",
      ...(body?.response_format?.type === "json_schema" ? { schema: body.response_format.json_schema?.schema } : {}),
      stream: body?.stream === true,
      model: String(body?.model)
    }
  },
  json: (plan, usage, c, n) => ({
    id: `chatcmpl-fake-${n}`,
    object: "chat.completion",
    created: created(),
    model: c.model,
    system_fingerprint: "fp_fake",
    choices: [{
      index: 0,
      message: plan.kind === "text"
        ? { role: "assistant", content: plan.text, refusal: null }
        : {
          role: "assistant",
          content: plan.preamble ?? null,
          refusal: null,
          tool_calls: [{ id: plan.callId, type: "function", function: { name: plan.name, arguments: plan.arguments } }]
        },
      logprobs: null,
      finish_reason: plan.kind === "text" ? "stop" : "tool_calls"
    }],
    usage: openAiUsage(usage)
  }),
  frames: (plan, usage, c, n, body) => {
    const base = { id: `chatcmpl-fake-${n}`, object: "chat.completion.chunk", created: created(), model: c.model, system_fingerprint: "fp_fake" }
    const choice = (delta: unknown, finish: string | null = null) =>
      sse({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })
    const head = [choice({ role: "assistant", content: "", refusal: null })]
    if (plan.kind === "tool") {
      if (plan.preamble !== undefined) head.push(choice({ content: plan.preamble }))
      head.push(choice({ tool_calls: [{ index: 0, id: plan.callId, type: "function", function: { name: plan.name, arguments: "" } }] }))
    }
    const content = plan.kind === "text"
      ? plan.pieces.map((p) => choice({ content: p }))
      : plan.pieces.map((p) => choice({ tool_calls: [{ index: 0, function: { arguments: p } }] }))
    const tail = [choice({}, plan.kind === "text" ? "stop" : "tool_calls")]
    if (body?.stream_options?.include_usage === true) tail.push(sse({ ...base, choices: [], usage: openAiUsage(usage) }))
    tail.push(sse("[DONE]"))
    return { head, content, tail }
  },
  errorBody: (status, message) => ({
    error: { message, type: status >= 500 ? "server_error" : "invalid_request_error", param: null, code: null }
  }),
  streamError: (message) => sse({ error: { message, type: "server_error", param: null, code: null } })
}

/** Starts a fake OpenAI upstream: POST {url}/chat/completions, JSON or SSE, and POST {url}/embeddings. */
export const startFakeOpenAi = (): Promise<FakeUpstream> => startFake(openAiProtocol)
