// Zero-latency mock OpenAI upstream for the bench: POST /v1/chat/completions answers at once,
// as JSON with usage or as SSE (role chunk, content chunks, finish, usage on request, [DONE]).
// Child process: `node --import tsx bench/mockUpstream.ts` prints `listening <url>`; GET /stats counts.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import { serveAsChild } from "./child.js"

const PIECES = ["Hello", "! This", " is a", " benchmark", " reply", " from the", " mock", " upstream."]
const CONTENT = PIECES.join("")
const USAGE = { prompt_tokens: 12, completion_tokens: 14, total_tokens: 26 }

let sequence = 0
/** Answers served per requested model: the bench tells gateway calls (provider model id) from direct ones. */
const served: Record<string, number> = {}

interface ChatBody {
  readonly model?: unknown
  readonly stream?: unknown
  readonly stream_options?: { readonly include_usage?: unknown } | null
}

const completion = (model: string, id: string, created: number) =>
  JSON.stringify({
    id,
    object: "chat.completion",
    created,
    model,
    choices: [{ index: 0, message: { role: "assistant", content: CONTENT }, finish_reason: "stop" }],
    usage: USAGE
  })

const chunk = (model: string, id: string, created: number, choices: ReadonlyArray<unknown>, usage?: unknown) =>
  `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model, choices, ...(usage ? { usage } : {}) })}\n\n`

const answer = (req: IncomingMessage, res: ServerResponse, raw: string) => {
  let body: ChatBody
  try {
    body = JSON.parse(raw) as ChatBody
  } catch {
    res.writeHead(400, { "content-type": "application/json" })
    res.end(JSON.stringify({ error: { message: "invalid JSON", type: "invalid_request_error" } }))
    return
  }
  const model = typeof body.model === "string" ? body.model : "mock"
  served[model] = (served[model] ?? 0) + 1
  const id = `chatcmpl-mock${(sequence++).toString(36)}`
  const created = Math.floor(Date.now() / 1000)
  if (body.stream !== true) {
    const text = completion(model, id, created)
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
    res.end(text)
    return
  }
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: req.headers.connection ?? "keep-alive" })
  res.write(chunk(model, id, created, [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }]))
  for (const piece of PIECES) res.write(chunk(model, id, created, [{ index: 0, delta: { content: piece }, finish_reason: null }]))
  res.write(chunk(model, id, created, [{ index: 0, delta: {}, finish_reason: "stop" }]))
  if (body.stream_options?.include_usage === true) res.write(chunk(model, id, created, [], USAGE))
  res.end("data: [DONE]\n\n")
}

const server = createServer((req, res) => {
  if (req.method === "GET" && req.url === "/stats") {
    res.writeHead(200, { "content-type": "application/json" })
    res.end(JSON.stringify({ served }))
    return
  }
  if (req.method !== "POST" || req.url?.split("?")[0] !== "/v1/chat/completions") {
    res.writeHead(404, { "content-type": "application/json" })
    res.end(JSON.stringify({ error: { message: "not found", type: "invalid_request_error" } }))
    return
  }
  const parts: Array<Buffer> = []
  req.on("data", (part: Buffer) => parts.push(part))
  req.on("end", () => answer(req, res, Buffer.concat(parts).toString("utf8")))
})
serveAsChild(server)
