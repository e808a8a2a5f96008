// A hostile OpenAI-compatible upstream (real node:http on 127.0.0.1): answers far past any cap, made
// lazily under backpressure; an SSE line without end; bodies quoting the caller's credentials. It
// records per request how many body bytes got out before the client left.
import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { waitUntil } from "../support/Polling.js"

export type HostileAnswer =
  /**
   * A valid completion (or stream). `bodyBytes` pads the answer's text so the JSON body is exactly
   * that long; `lineBytes` pads a stream's content event so its `data:` line is exactly that long.
   */
  | { readonly kind: "healthy"; readonly bodyBytes?: number; readonly lineBytes?: number }
  /** 200 application/json: a completion whose content string runs `bytes` long (the body is never complete). */
  | { readonly kind: "hugeJson"; readonly bytes: number }
  /** 200 text/event-stream: `data: ` and `bytes` letters, no line end. */
  | { readonly kind: "hugeSseLine"; readonly bytes: number }
  /** `status` with a `bytes`-long body of letters. */
  | { readonly kind: "hugeError"; readonly status: number; readonly bytes: number }
  /** `status` with a provider-shaped error whose message quotes the request's credential headers. */
  | { readonly kind: "echoError"; readonly status: number }
  /** 200 whose body carries only an `error` quoting the credentials (as JSON, or as the first SSE event). */
  | { readonly kind: "echoInOk" }
  /** 200 text/event-stream headers, then nothing until the client leaves. */
  | { readonly kind: "silentStream" }

export interface HostileRequest {
  readonly headers: IncomingHttpHeaders
  readonly stream: boolean
  /** Body bytes the server's socket accepted for this answer. */
  bytesWritten: number
  /** The client closed the connection before the answer was complete. */
  closedEarly: boolean
  /** The answer is over (completed or cut by the client). */
  over: boolean
}

export interface HostileUpstream {
  /** Base URL including /v1, as a provider's base_url. */
  readonly url: string
  readonly requests: Array<HostileRequest>
  readonly answer: (answer: HostileAnswer) => void
  readonly waitFor: (predicate: (fake: HostileUpstream) => boolean, timeoutMs?: number) => Promise<void>
  readonly close: () => Promise<void>
}

export const HELLO = "Hello from the hostile upstream"

const FILL = Buffer.alloc(64 * 1024, "a")

/** Writes `head`, then `bytes` letters, then `tail`, each piece only once the socket drained; stops when the client leaves. */
const writeLazily = async (res: ServerResponse, record: HostileRequest, head: string, bytes: number, tail: string) => {
  const write = (chunk: Buffer | string) => {
    record.bytesWritten += Buffer.byteLength(chunk)
    return res.write(chunk)
  }
  const drained = () =>
    new Promise<void>((resolve) => {
      const done = () => {
        res.off("drain", done)
        res.off("close", done)
        resolve()
      }
      res.on("drain", done)
      res.on("close", done)
    })
  if (!write(head)) await drained()
  let left = bytes
  while (left > 0 && !res.destroyed) {
    const piece = left >= FILL.length ? FILL : FILL.subarray(0, left)
    left -= piece.length
    if (!write(piece)) await drained()
  }
  if (!res.destroyed) res.end(tail)
}

const completionHead = (model: string) =>
  `{"id":"chatcmpl-hostile","object":"chat.completion","created":1,"model":${JSON.stringify(model)},` +
  `"choices":[{"index":0,"message":{"role":"assistant","content":"`
const completionTail = `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`

const chunkJson = (model: string, delta: unknown, finish: string | null = null) =>
  JSON.stringify({ id: "chatcmpl-hostile", object: "chat.completion.chunk", created: 1, model, choices: [{ index: 0, delta, finish_reason: finish }] })

/** What a careless provider puts in an error: the credentials it was given. */
const echoOf = (headers: IncomingHttpHeaders) =>
  `invalid credentials: authorization=${headers.authorization ?? ""} x-api-key=${headers["x-api-key"] ?? ""}`

export const startHostileUpstream = async (): Promise<HostileUpstream> => {
  let current: HostileAnswer = { kind: "healthy" }

  const answerWith = async (answer: HostileAnswer, body: any, res: ServerResponse, record: HostileRequest) => {
    const model = String(body?.model ?? "hostile")
    switch (answer.kind) {
      case "healthy": {
        if (!record.stream) {
          const head = completionHead(model)
          const fill = answer.bodyBytes === undefined ? 0 : answer.bodyBytes - head.length - completionTail.length
          res.writeHead(200, { "content-type": "application/json" })
          return writeLazily(res, record, head, fill, fill === 0 ? `${HELLO}${completionTail}` : completionTail)
        }
        const plain = `data: ${chunkJson(model, { content: "" })}`
        const text = answer.lineBytes === undefined ? HELLO : "x".repeat(answer.lineBytes - plain.length)
        res.writeHead(200, { "content-type": "text/event-stream" })
        const frames = [
          chunkJson(model, { role: "assistant", content: "" }),
          chunkJson(model, { content: text }),
          chunkJson(model, {}, "stop"),
          JSON.stringify({ id: "chatcmpl-hostile", object: "chat.completion.chunk", created: 1, model, choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } }),
          "[DONE]"
        ].map((f) => `data: ${f}\n\n`).join("")
        return writeLazily(res, record, frames, 0, "")
      }
      case "hugeJson":
        res.writeHead(200, { "content-type": "application/json" })
        return writeLazily(res, record, completionHead(model), answer.bytes, completionTail)
      case "hugeSseLine":
        res.writeHead(200, { "content-type": "text/event-stream" })
        return writeLazily(res, record, "data: ", answer.bytes, "\n\n")
      case "hugeError":
        res.writeHead(answer.status, { "content-type": "text/plain" })
        return writeLazily(res, record, "", answer.bytes, "")
      case "echoError": {
        const error = JSON.stringify({ error: { message: echoOf(record.headers), type: "invalid_request_error" } })
        res.writeHead(answer.status, { "content-type": "application/json" })
        return writeLazily(res, record, error, 0, "")
      }
      case "echoInOk": {
        const error = JSON.stringify({ error: { message: echoOf(record.headers), type: "server_error" } })
        res.writeHead(200, { "content-type": record.stream ? "text/event-stream" : "application/json" })
        return writeLazily(res, record, record.stream ? `data: ${error}\n\n` : error, 0, "")
      }
      case "silentStream":
        res.writeHead(200, { "content-type": "text/event-stream" })
        res.flushHeaders()
        return
    }
  }

  const server = createServer((req, res) => {
    const parts: Array<Buffer> = []
    req.on("data", (c: Buffer) => parts.push(c))
    req.on("end", () => {
      let body: any
      try {
        body = JSON.parse(Buffer.concat(parts).toString("utf8"))
      } catch {
        body = undefined
      }
      const record: HostileRequest = { headers: req.headers, stream: body?.stream === true, bytesWritten: 0, closedEarly: false, over: false }
      fake.requests.push(record)
      res.on("close", () => {
        if (!res.writableFinished) record.closedEarly = true
        record.over = true
      })
      answerWith(current, body, res, record).catch(() => res.destroy())
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()))
  const port = (server.address() as AddressInfo).port

  const fake: HostileUpstream = {
    url: `http://127.0.0.1:${port}/v1`,
    requests: [],
    answer: (answer) => {
      current = answer
    },
    waitFor: (predicate, timeoutMs = 10_000) => waitUntil(() => predicate(fake), timeoutMs, "hostile upstream"),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
  return fake
}
