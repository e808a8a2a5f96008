// A webhook receiver as a tenant would write one: a real node:http server on 127.0.0.1 that
// verifies every request with `standardwebhooks` (400 when invalid) and records what it got.
import { createServer, type IncomingHttpHeaders, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { Webhook } from "standardwebhooks"

export interface ReceivedEvent {
  readonly headers: IncomingHttpHeaders
  readonly rawBody: string
  /** The verified, parsed body. */
  readonly body: any
}

export interface ReceiverOptions {
  /** Answer 500 to the first N requests (they are still counted in `requests`). */
  readonly failFirst?: number
  /** Status for every request (after the failFirst ones); default 200. */
  readonly status?: number
  /** Answer this long after a request's body arrived (a slow receiver). */
  readonly delayMs?: number
}

export interface WebhookReceiver {
  readonly url: string
  /** Set once the endpoint is registered (the secret comes from the registration response). */
  secret: string | undefined
  /** Verified deliveries answered with 2xx, in arrival order. */
  readonly events: Array<ReceivedEvent>
  /** Every request seen (verified or not), with the status we answered. */
  readonly requests: Array<{ readonly status: number; readonly headers: IncomingHttpHeaders }>
  readonly invalid: Array<string>
  /** Requests whose body arrived, answered or not yet (with `delayMs`). */
  arrived: number
  readonly waitFor: (predicate: (r: WebhookReceiver) => boolean, timeoutMs?: number) => Promise<void>
  readonly close: () => Promise<void>
}

export const startReceiver = async (options: ReceiverOptions = {}): Promise<WebhookReceiver> => {
  let failuresLeft = options.failFirst ?? 0
  const receiver: WebhookReceiver = {
    url: "",
    secret: undefined,
    events: [],
    requests: [],
    invalid: [],
    arrived: 0,
    waitFor: async (predicate, timeoutMs = 10_000) => {
      const deadline = Date.now() + timeoutMs
      while (!predicate(receiver)) {
        if (Date.now() > deadline) {
          throw new Error(`receiver: condition not met within ${timeoutMs} ms (${receiver.requests.length} requests)`)
        }
        await new Promise((r) => setTimeout(r, 25))
      }
    },
    close: () => new Promise((resolve) => server.close(() => resolve()))
  }
  const server: Server = createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      receiver.arrived++
      if (options.delayMs === undefined) answer()
      else setTimeout(answer, options.delayMs)
    })
    const answer = () => {
      const rawBody = Buffer.concat(chunks).toString("utf8")
      let status: number
      let body: unknown
      try {
        if (receiver.secret === undefined) throw new Error("no secret configured")
        // Verify before processing, exactly as the spec asks receivers to.
        body = new Webhook(receiver.secret).verify(rawBody, req.headers as Record<string, string>)
        if (failuresLeft > 0) {
          failuresLeft--
          status = 500
        } else {
          status = options.status ?? 200
        }
      } catch (e) {
        receiver.invalid.push(String(e))
        status = 400
      }
      receiver.requests.push({ status, headers: req.headers })
      if (status >= 200 && status < 300) receiver.events.push({ headers: req.headers, rawBody, body })
      res.writeHead(status, { "content-type": "application/json" })
      res.end(JSON.stringify({ ok: status < 300 }))
    }
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()))
  const { port } = server.address() as AddressInfo
  ;(receiver as { url: string }).url = `http://127.0.0.1:${port}/hooks`
  return receiver
}
